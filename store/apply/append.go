package apply

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// Append applies one append request on tx, in the order store.AppendParams
// documents. p must be checked and have its defaults (Now, KeyTTL). The
// chunks are referenced by the records, not copied.
func Append(tx Tx, p *store.AppendParams) (*store.AppendResult, error) {
	// 1. The stream.
	st, err := tx.Stream(p.StreamID)
	if err != nil {
		return nil, err
	}
	if st.Deleted {
		return nil, fmt.Errorf("stream %d: %w", st.ID, store.ErrGone)
	}
	if st.Expired(p.Now) {
		return nil, fmt.Errorf("stream %d expired: %w", st.ID, store.ErrNotFound)
	}
	// 2. The idempotency key.
	if p.IdempotencyKey != "" {
		k, err := tx.Key(st, p.IdempotencyKey)
		if err != nil {
			return nil, err
		}
		if k != nil && k.ExpiresAt.After(p.Now) {
			if !bytes.Equal(k.Digest, p.RequestDigest) {
				return nil, fmt.Errorf("%w: key %q", store.ErrKeyReused, p.IdempotencyKey)
			}
			res, err := DecodeResult(k.Result)
			if err != nil {
				return nil, fmt.Errorf("idempotency key %q: stored result: %w", p.IdempotencyKey, err)
			}
			return res, nil
		}
	}
	res, err := appendOnce(tx, st, p)
	if err != nil {
		return nil, err
	}
	// Every success saves the key, a Duplicate's too: a later request with
	// the key and another body is then refused, whatever the first was.
	if p.IdempotencyKey != "" {
		digest := p.RequestDigest
		if digest == nil {
			digest = []byte{}
		}
		k := &Key{Digest: digest, Result: EncodeResult(res), ExpiresAt: p.Now.Add(p.KeyTTL)}
		if err := tx.SaveKey(st, p.IdempotencyKey, k); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// appendOnce applies steps 3 to 7 of store.AppendParams.
func appendOnce(tx Tx, st *Stream, p *store.AppendParams) (*store.AppendResult, error) {
	// 3. A closed stream.
	if st.Head.Closed {
		switch {
		case p.Producer != nil && st.ClosedBy != nil && *p.Producer == *st.ClosedBy:
			return &store.AppendResult{NextOffset: st.Head.NextOffset, Closed: true, Duplicate: true,
				ProducerEpoch: p.Producer.Epoch, ProducerSeq: p.Producer.Seq}, nil
		case p.Close && len(p.Chunks) == 0 && p.Writer == "" && p.Producer == nil:
			return &store.AppendResult{NextOffset: st.Head.NextOffset, Closed: true}, nil
		case p.Writer == "":
			return nil, stream.ErrClosed
		}
	}
	// 4. The producer.
	res := &store.AppendResult{}
	var prod stream.ProducerState
	if p.Producer != nil {
		cur, err := tx.Producer(st, p.Producer.ID)
		if err != nil {
			return nil, err
		}
		var dup bool
		if prod, dup, err = stream.Produce(cur, *p.Producer); err != nil {
			return nil, err
		}
		res.ProducerEpoch, res.ProducerSeq = prod.Epoch, prod.LastSeq
		if dup {
			res.Duplicate, res.NextOffset, res.Closed = true, st.Head.NextOffset, st.Head.Closed
			return res, nil
		}
	}
	// 5. Stream-Seq.
	if err := stream.CheckStreamSeq(st.StreamSeq, p.StreamSeq); err != nil {
		return nil, err
	}
	// 6. The chunks: the last rule that can refuse.
	if len(p.Chunks) > 0 {
		acks, aborted, err := appendChunks(tx, st, p)
		if err != nil {
			return nil, err
		}
		res.Acks, res.Aborted = acks, aborted
	}
	// 7. Close, and the metadata.
	if p.Close {
		if r, recs := stream.Close(&st.Head); r == stream.Done {
			if err := tx.AddRecords(st, recs); err != nil {
				return nil, err
			}
		}
	}
	meta := false
	if p.Producer != nil {
		if err := tx.SaveProducer(st, p.Producer.ID, prod); err != nil {
			return nil, err
		}
		if p.Close {
			pr := *p.Producer
			st.ClosedBy, meta = &pr, true
		}
	}
	if p.StreamSeq != "" {
		st.StreamSeq, meta = p.StreamSeq, true
	}
	if st.Expiry.HasTTL && p.Now.After(st.LastAccess) {
		st.LastAccess, meta = p.Now, true
	}
	if meta {
		if err := tx.SaveStream(st); err != nil {
			return nil, err
		}
	}
	res.NextOffset, res.Closed = st.Head.NextOffset, st.Head.Closed
	return res, nil
}

// appendChunks applies the chunk rules (stream.Append) to p's chunks, with
// the fence of a run stream's writer, and reports whether they wrote an
// abort record. stream.Append changes st and the writer only when it
// accepts the request.
func appendChunks(tx Tx, st *Stream, p *store.AppendParams) ([]stream.Ack, bool, error) {
	req := stream.AppendRequest{Attempt: p.Attempt, FirstSeq: p.FirstSeq, Chunks: p.Chunks, Late: p.Late,
		MaxBytes: p.MaxBytes, Bytes: st.Bytes}
	var w *stream.Writer
	fresh := false
	if p.Writer != "" {
		var err error
		if w, err = tx.Writer(st, p.Writer); err != nil {
			return nil, false, err
		}
		if w == nil {
			w, fresh = lateWriter(tx, st, p), true
		}
		if st.RunID != "" {
			if req.Fence, err = tx.Fence(st.RunID, p.Writer); err != nil {
				return nil, false, err
			}
		}
	}
	var before stream.Writer
	if w != nil {
		before = *w
	}
	acks, recs, err := stream.Append(&st.Head, w, &req)
	if err != nil {
		return nil, false, err
	}
	if len(recs) > 0 {
		st.Bytes += stream.DataBytes(recs)
		if err := tx.AddRecords(st, recs); err != nil {
			return nil, false, err
		}
	}
	if w != nil && (fresh || !samePersisted(&before, w)) {
		if err := tx.SaveWriter(st, w, fresh); err != nil {
			return nil, false, err
		}
	}
	aborted := false
	for i := range recs {
		aborted = aborted || recs[i].Kind == stream.KindAbort
	}
	return acks, aborted, nil
}

// samePersisted reports whether the persisted fields of two states of one
// writer are equal: retransmits only change nothing to save.
func samePersisted(a, b *stream.Writer) bool {
	return a.Attempt == b.Attempt && a.Next == b.Next && a.Diverged == b.Diverged && a.Status == b.Status
}

// Finish commits or aborts one writer on one stream (stream.Commit,
// stream.Abort) for store.Store.FinishWriter. An attempt below the fence of
// a run stream's writer is *stream.FencedError, as Append refuses its
// chunks: a zombie adds no record once a newer attempt began, even one that
// wrote nothing here yet.
func Finish(tx Tx, p *store.FinishWriterParams) (stream.Result, error) {
	st, err := tx.Stream(p.StreamID)
	if err != nil {
		return 0, err
	}
	w, err := tx.Writer(st, p.Writer)
	if err != nil {
		return 0, err
	}
	if w != nil && st.RunID != "" {
		f, err := tx.Fence(st.RunID, p.Writer)
		if err != nil {
			return 0, err
		}
		if p.Attempt < f {
			return 0, &stream.FencedError{Attempt: p.Attempt, Current: f}
		}
	}
	return finish(tx, st, w, p.Attempt, p.Commit)
}

// finish applies the commit or abort rule to st and w and saves what it
// wrote. The rules change nothing when they refuse.
func finish(tx Tx, st *Stream, w *stream.Writer, attempt int64, commit bool) (stream.Result, error) {
	rule := stream.Abort
	if commit {
		rule = stream.Commit
	}
	res, recs, err := rule(&st.Head, w, attempt)
	if err != nil || res == stream.Already {
		return res, err
	}
	if err := tx.AddRecords(st, recs); err != nil {
		return 0, err
	}
	return res, tx.SaveWriter(st, w, false)
}

// Close closes stream id (stream.Close); closing twice writes nothing and
// returns stream.Already.
func Close(tx Tx, id int64) (stream.Result, error) {
	st, err := tx.Stream(id)
	if err != nil {
		return 0, err
	}
	return closeStream(tx, st)
}

func closeStream(tx Tx, st *Stream) (stream.Result, error) {
	res, recs := stream.Close(&st.Head)
	if res == stream.Already {
		return res, nil
	}
	return res, tx.AddRecords(st, recs)
}

// keyResult is an append result as an idempotency key keeps it: one JSON
// format for every backend, so a database moved between builds replays it.
type keyResult struct {
	Acks          [][2]int64 `json:"a,omitempty"` // offset, outcome
	NextOffset    int64      `json:"n"`
	Aborted       bool       `json:"ab,omitempty"`
	Closed        bool       `json:"c,omitempty"`
	Duplicate     bool       `json:"d,omitempty"`
	ProducerEpoch int64      `json:"pe,omitempty"`
	ProducerSeq   int64      `json:"ps,omitempty"`
}

// EncodeResult encodes an append's result as an idempotency key keeps it.
func EncodeResult(res *store.AppendResult) []byte {
	kr := keyResult{NextOffset: res.NextOffset, Aborted: res.Aborted, Closed: res.Closed, Duplicate: res.Duplicate,
		ProducerEpoch: res.ProducerEpoch, ProducerSeq: res.ProducerSeq}
	if len(res.Acks) > 0 {
		kr.Acks = make([][2]int64, len(res.Acks))
		for i, a := range res.Acks {
			kr.Acks[i] = [2]int64{a.Offset, int64(a.Outcome)}
		}
	}
	b, err := json.Marshal(kr)
	if err != nil {
		panic(err) // plain integers and booleans: cannot fail
	}
	return b
}

// DecodeResult decodes what EncodeResult encoded, as a replayed result.
func DecodeResult(b []byte) (*store.AppendResult, error) {
	var kr keyResult
	if err := json.Unmarshal(b, &kr); err != nil {
		return nil, err
	}
	res := &store.AppendResult{NextOffset: kr.NextOffset, Aborted: kr.Aborted, Closed: kr.Closed, Duplicate: kr.Duplicate,
		ProducerEpoch: kr.ProducerEpoch, ProducerSeq: kr.ProducerSeq, Replayed: true}
	if len(kr.Acks) > 0 {
		res.Acks = make([]stream.Ack, len(kr.Acks))
		for i, a := range kr.Acks {
			res.Acks[i] = stream.Ack{Offset: a[0], Outcome: stream.Outcome(a[1])}
		}
	}
	return res, nil
}

// KeyPurgeEvery is how many idempotency keys a backend saves between two
// purges of expired keys (each purging a bounded number).
const KeyPurgeEvery = 256
