package server

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// appendReply is the JSON reply to an append with Weir-Writer: one ack per
// chunk, in request order.
type appendReply struct {
	Acks       []ackJSON `json:"acks"`
	NextOffset string    `json:"next_offset"` // the stream's next offset, as Stream-Next-Offset
	Closed     bool      `json:"closed,omitempty"`
}

type ackJSON struct {
	Offset  int64  `json:"offset"`  // the chunk's record offset (Durable Streams offset: 0000000000000000_<offset+1> follows it)
	Outcome string `json:"outcome"` // appended, adopted or retransmit
}

// handleAppend serves POST: append, append-and-close, close; with the
// idempotent producer, Stream-Seq, weir's writer headers, Weir-Commit and
// Weir-Abort, and Idempotency-Key.
//
// An append to a path the server knows takes its stream from the path cache
// (stream_cache.go), with no query before the store's append; the store
// checks the stream (deleted, expired, closed) on the row it writes.
func (s *Server) handleAppend(w http.ResponseWriter, r *http.Request, path string) {
	wh, err := parseWriteHeaders(r.Header)
	if err != nil {
		s.streamError(w, err)
		return
	}
	if err := wellFormedQuery(r); err != nil {
		s.streamError(w, err)
		return
	}
	ctx := r.Context()
	now := s.now()
	finish := wh.commit || wh.abort
	ref, ok := s.paths.get(path)
	if !ok || finish {
		// FinishWriter checks neither deletion nor expiry (apply.Finish):
		// a commit or an abort, once per writer, always looks the path up.
		info, err := s.lookup(ctx, path, now)
		if err != nil {
			s.streamError(w, err)
			return
		}
		if !finish {
			s.paths.put(path, info)
		}
		ref = refOf(info)
	}
	// The body is read with no lock held and nothing reserved: a client that
	// stalls mid-body holds only its own goroutine, until the server's read
	// deadline (guardBody, http.Server.ReadTimeout) cuts it.
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		s.rejected(err)
		s.streamError(w, err)
		return
	}
	if finish {
		s.finishWriter(w, r, ref.id, wh, body)
		return
	}
	closeOnly := len(body) == 0 && wh.close
	res, byStore, err := s.appendTo(ctx, ref, wh, body, now)
	if err != nil && ref.cached && (!byStore || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrGone)) {
		// Refused on a cached entry, and nothing written: the stream may
		// have been deleted (or have expired) since it was cached, and
		// another created at the path. Look the path up, and decide again
		// on what is there now: once.
		s.paths.drop(path, ref.id)
		info, lerr := s.lookup(ctx, path, now)
		if lerr != nil {
			// The lookup's answer is the path's: 404, or 410 (what an
			// uncached append answers; an expired stream is deleted here).
			s.streamError(w, lerr)
			return
		}
		s.paths.put(path, info)
		if info.ID != ref.id || !byStore { // else the same stream: the store's answer stands
			ref = refOf(info)
			res, _, err = s.appendTo(ctx, ref, wh, body, now)
		}
	}
	if err != nil {
		if errors.Is(err, stream.ErrClosed) {
			// A closed stream's tail is final: report it, as the protocol asks.
			if cur, err2 := s.store.GetStream(ctx, ref.id); err2 == nil {
				w.Header().Set("Stream-Next-Offset", formatOffset(cur.NextOffset))
			}
		}
		s.rejected(err)
		s.streamError(w, err)
		return
	}
	if !res.Replayed && !res.Duplicate && s.metrics != nil {
		s.metrics.streamAcks(res.Acks)
		if res.Aborted {
			s.metrics.streamAborted()
		}
	}
	h := w.Header()
	h.Set("Stream-Next-Offset", formatOffset(res.NextOffset))
	if res.Closed {
		h.Set("Stream-Closed", "true")
	}
	if res.Replayed {
		h.Set("Weir-Idempotent-Replay", "true")
	}
	switch {
	case wh.weir:
		rep := appendReply{Acks: make([]ackJSON, len(res.Acks)), NextOffset: formatOffset(res.NextOffset), Closed: res.Closed}
		for i, a := range res.Acks {
			rep.Acks[i] = ackJSON{Offset: a.Offset, Outcome: a.Outcome.String()}
		}
		s.writeWritten(w, http.StatusOK, rep)
	case wh.producer != nil:
		h.Set("Producer-Epoch", strconv.FormatInt(res.ProducerEpoch, 10))
		h.Set("Producer-Seq", strconv.FormatInt(res.ProducerSeq, 10))
		if res.Duplicate || closeOnly {
			w.WriteHeader(http.StatusNoContent)
		} else {
			w.WriteHeader(http.StatusOK)
		}
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// appendTo applies an append (not a commit or an abort) to the stream ref
// names. byStore says whether the store decided the outcome; false for a
// request the handler refused first, from what it knows of the stream (its
// content type, an Idempotency-Key in flight). Either way a refusal wrote
// nothing.
func (s *Server) appendTo(ctx context.Context, ref streamRef, wh *writeHeaders, body []byte, now time.Time) (res *store.AppendResult, byStore bool, err error) {
	p := &store.AppendParams{StreamID: ref.id, Producer: wh.producer, StreamSeq: wh.streamSeq, Close: wh.close, Now: now,
		MaxBytes: limit(s.cfg.MaxStreamBytes)}
	if wh.weir {
		p.Writer, p.Attempt, p.FirstSeq = wh.writer, wh.attempt, wh.seq
	}
	if len(body) == 0 && !wh.close {
		return nil, false, fmt.Errorf("%w: empty body: an append needs bytes (or Stream-Closed: true to close)", api.ErrBadRequest)
	}
	if len(body) > 0 {
		if !wh.hasCT {
			return nil, false, fmt.Errorf("%w: an append needs a Content-Type", api.ErrBadRequest)
		}
		// On a closed stream the store answers (409 Stream-Closed, or the
		// closing request's retry), whatever the content type. A cached
		// entry does not know whether the stream is closed: its mismatch
		// is decided again on a lookup.
		if (ref.cached || !ref.closed) && mediaType(wh.contentType) != mediaType(ref.contentType) {
			return nil, false, fmt.Errorf("%w: content type %s, the stream's is %s", api.ErrConflict, mediaType(wh.contentType), mediaType(ref.contentType))
		}
		if p.Chunks, err = bodyChunks(ref.contentType, wh, body); err != nil {
			return nil, false, err
		}
	}
	if wh.idemKey != "" {
		k := inflightKey{ref.id, wh.idemKey}
		if !s.ds.begin(k) {
			return nil, false, fmt.Errorf("%w: a request with this Idempotency-Key is still in flight", api.ErrInFlight)
		}
		defer s.ds.end(k)
		p.IdempotencyKey, p.RequestDigest, p.KeyTTL = wh.idemKey, requestDigest(wh, body), s.cfg.IdempotencyTTL
	}
	res, err = s.store.Append(ctx, p)
	return res, true, err
}

// bodyChunks cuts an append's body into chunks: JSON values for a JSON
// stream (each element of a top-level array is one), u32be frames with
// Weir-Framing, else the body (one chunk for a writer; for anonymous and
// producer appends, pieces of at most store.MaxChunkSize).
func bodyChunks(contentType string, wh *writeHeaders, body []byte) ([][]byte, error) {
	if isJSONType(contentType) {
		if wh.framed {
			return nil, fmt.Errorf("%w: Weir-Framing is for byte streams; a JSON stream's chunks are the array's elements", api.ErrBadRequest)
		}
		vals, err := jsonValues(body, store.MaxAppendChunks)
		if err != nil {
			return nil, err
		}
		if len(vals) == 0 {
			return nil, fmt.Errorf("%w: an empty JSON array appends nothing", api.ErrBadRequest)
		}
		return vals, nil
	}
	switch {
	case wh.framed:
		return parseFrames(body, store.MaxAppendChunks)
	case wh.weir:
		return [][]byte{body}, nil
	}
	return splitChunks(body), nil
}

// requestDigest identifies an append for its Idempotency-Key: its body and
// every header that decides what it does.
func requestDigest(wh *writeHeaders, body []byte) []byte {
	h := sha256.New()
	var b []byte
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	num := func(v int64) { b = binary.AppendVarint(b, v) }
	str(mediaType(wh.contentType))
	str(strconv.FormatBool(wh.close))
	str(wh.streamSeq)
	if wh.producer != nil {
		str(wh.producer.ID)
		num(wh.producer.Epoch)
		num(wh.producer.Seq)
	} else {
		str("")
	}
	str(wh.writer)
	num(wh.attempt)
	num(wh.seq)
	str(strconv.FormatBool(wh.framed))
	h.Write(b)
	h.Write(body)
	return h.Sum(nil)
}

// finishWriter serves Weir-Commit and Weir-Abort: 204 with Weir-Result
// done (the records were written) or already (the same attempt finished
// before).
func (s *Server) finishWriter(w http.ResponseWriter, r *http.Request, id int64, wh *writeHeaders, body []byte) {
	if len(body) > 0 {
		s.streamError(w, fmt.Errorf("%w: Weir-Commit and Weir-Abort take an empty body", api.ErrBadRequest))
		return
	}
	res, err := s.store.FinishWriter(r.Context(), &store.FinishWriterParams{StreamID: id, Writer: wh.writer, Attempt: wh.attempt, Commit: wh.commit})
	if err != nil {
		s.rejected(err)
		s.streamError(w, err)
		return
	}
	result := "done"
	if res == stream.Already {
		result = "already"
	} else if wh.abort && s.metrics != nil {
		s.metrics.streamAborted()
	}
	w.Header().Set("Weir-Result", result)
	w.WriteHeader(http.StatusNoContent)
}
