package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// The Durable Streams protocol at /v1/stream/{path}, with weir's
// exactly-once extension (docs/protocol.md, "Streams"):
//
//	stream.go         routing, common headers, lookup with lazy expiry, HEAD, DELETE, errors
//	stream_create.go  PUT: create, idempotent create, fork
//	stream_append.go  POST: append, close, producers, Weir-* headers, Idempotency-Key
//	stream_read.go    GET: catch-up, long-poll, SSE; views and formats
//	ds_headers.go     the parsers (fuzzed in ds_fuzz_test.go)
//
// Locks: the handler holds none of its own while it reads a body or writes a
// reply; the store serializes each write in its own transaction.

// runsPrefix is where run streams live: read-only over HTTP.
const runsPrefix = "runs/"

// Headers of every stream response.
const (
	corsAllowMethods = "GET, POST, PUT, DELETE, HEAD, OPTIONS"
	corsAllowHeaders = "Content-Type, Authorization, If-None-Match, Idempotency-Key, Stream-Seq, Stream-TTL, " +
		"Stream-Expires-At, Stream-Closed, Producer-Id, Producer-Epoch, Producer-Seq, Stream-Forked-From, " +
		"Stream-Fork-Offset, Stream-Fork-Sub-Offset, Weir-Writer, Weir-Attempt, Weir-Seq, Weir-Framing, " +
		"Weir-Commit, Weir-Abort"
	corsExposeHeaders = "Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, Stream-SSE-Data-Encoding, " +
		"Stream-TTL, Stream-Expires-At, Producer-Epoch, Producer-Seq, Producer-Expected-Seq, Producer-Received-Seq, " +
		"ETag, Location, Content-Type, Weir-Attempt, Weir-Expected-Seq, Weir-Result, Weir-Data-Encoding, " +
		"Weir-Aborted-At, Weir-Idempotent-Replay, Weir-Error, Retry-After"
)

// dsState is the streams handler's state in a Server.
type dsState struct {
	mu       sync.Mutex
	inflight map[inflightKey]struct{} // Idempotency-Keys being served
}

type inflightKey struct {
	stream int64
	key    string
}

// begin marks (stream, key) in flight; false if it already is.
func (d *dsState) begin(k inflightKey) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.inflight[k]; ok {
		return false
	}
	if d.inflight == nil {
		d.inflight = make(map[inflightKey]struct{})
	}
	d.inflight[k] = struct{}{}
	return true
}

func (d *dsState) end(k inflightKey) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.inflight, k)
}

// handleStream serves the Durable Streams protocol under /v1/stream/.
func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	// A stream's bytes are the writer's: served inert, so that an HTML or
	// SVG stream cannot run on the server's origin (where the UI keeps its
	// token) — no script, no plugin, no frame, an opaque origin.
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'; frame-ancestors 'none'")
	// No page of another origin embeds a stream (an <img>, a <script>)
	// unless origins were allowed; CORS reads are the corsHeaders' call.
	if len(s.cfg.CORSOrigins) > 0 {
		h.Set("Cross-Origin-Resource-Policy", "cross-origin")
	} else {
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
	}
	path := strings.TrimPrefix(r.URL.Path, streamPrefix)
	if err := checkStreamPath(path); err != nil {
		s.streamError(w, err)
		return
	}
	readOnly := strings.HasPrefix(path, runsPrefix)
	switch r.Method {
	case http.MethodGet:
		s.handleRead(w, r, path)
	case http.MethodHead:
		s.handleHead(w, r, path)
	case http.MethodPut, http.MethodPost, http.MethodDelete:
		if readOnly {
			h.Set("Allow", "GET, HEAD, OPTIONS")
			s.streamError(w, fmt.Errorf("%w: %s: run streams are written by their run; over HTTP they are read-only", api.ErrMethod, r.Method))
			return
		}
		switch r.Method {
		case http.MethodPut:
			s.handleCreate(w, r, path)
		case http.MethodPost:
			s.handleAppend(w, r, path)
		default:
			s.handleDelete(w, r, path)
		}
	default:
		h.Set("Allow", corsAllowMethods)
		s.streamError(w, fmt.Errorf("%w: %s", api.ErrMethod, r.Method))
	}
}

// lookup returns the stream at path, applying the protocol's lazy expiry:
// an expired stream is deleted on the spot (soft-deleted if forks reference
// it) and reported as not found (or gone). Returns store.ErrNotFound or
// store.ErrGone for a soft-deleted stream.
func (s *Server) lookup(ctx context.Context, path string, now time.Time) (*store.StreamInfo, error) {
	info, err := s.store.OpenStream(ctx, &store.OpenStreamParams{Path: path})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("%w: no stream at %s", store.ErrNotFound, clip(path))
		}
		return nil, err
	}
	if info.Deleted {
		return nil, fmt.Errorf("%w: the stream at %s was deleted; its forks live on", store.ErrGone, clip(path))
	}
	if info.Expired(now) {
		res, err := s.store.DeleteStream(ctx, &store.DeleteStreamParams{ID: info.ID, IfExpiredAt: now})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		if res == store.DeleteSoft {
			return nil, fmt.Errorf("%w: the stream at %s expired; its forks live on", store.ErrGone, clip(path))
		}
		return nil, fmt.Errorf("%w: the stream at %s expired", store.ErrNotFound, clip(path))
	}
	return info, nil
}

// wellFormedQuery refuses a malformed query; unknown parameters are
// ignored, as the protocol wants (extensions add some).
func wellFormedQuery(r *http.Request) error {
	if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
		return fmt.Errorf("%w: malformed query: %v", api.ErrBadRequest, err)
	}
	return nil
}

// handleHead serves HEAD: the stream's metadata. It never renews the TTL.
func (s *Server) handleHead(w http.ResponseWriter, r *http.Request, path string) {
	info, err := s.lookup(r.Context(), path, s.now())
	if err != nil {
		s.streamError(w, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", info.ContentType)
	attachActive(h, info.ContentType)
	h.Set("Stream-Next-Offset", formatOffset(info.NextOffset))
	h.Set("Cache-Control", "no-store")
	setExpiryHeaders(h, info)
	if info.Closed {
		h.Set("Stream-Closed", "true")
	}
	w.WriteHeader(http.StatusOK)
}

func setExpiryHeaders(h http.Header, info *store.StreamInfo) {
	if info.Expiry.HasTTL {
		h.Set("Stream-TTL", strconv.FormatInt(int64(info.Expiry.TTL/time.Second), 10))
	}
	if !info.Expiry.At.IsZero() {
		h.Set("Stream-Expires-At", info.Expiry.At.UTC().Format(time.RFC3339Nano))
	}
}

// handleDelete serves DELETE: 204, or 404 / 410.
func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request, path string) {
	info, err := s.lookup(r.Context(), path, s.now())
	if err != nil {
		s.streamError(w, err)
		return
	}
	if _, err := s.store.DeleteStream(r.Context(), &store.DeleteStreamParams{ID: info.ID}); err != nil {
		s.streamError(w, err)
		return
	}
	// Not needed to be right (the store refuses the deleted id, and the
	// append looks again), but this server's next append need not try.
	s.paths.drop(path, info.ID)
	w.WriteHeader(http.StatusNoContent)
}

// streamError writes err's status and one-line reason, with the headers
// that tell a client how to go on (the current attempt, the expected seq,
// the producer's epoch …), and counts refused writes.
func (s *Server) streamError(w http.ResponseWriter, err error) {
	h := w.Header()
	var (
		fe  *stream.FencedError
		ge  *stream.GapError
		se  *stream.StaleEpochError
		pge *stream.ProducerGapError
	)
	switch {
	case errors.As(err, &fe):
		h.Set("Weir-Attempt", strconv.FormatInt(fe.Current, 10))
	case errors.As(err, &ge):
		h.Set("Weir-Expected-Seq", strconv.FormatInt(ge.Expected, 10))
	case errors.As(err, &se):
		h.Set("Producer-Epoch", strconv.FormatInt(se.Current, 10))
	case errors.As(err, &pge):
		h.Set("Producer-Expected-Seq", strconv.FormatInt(pge.Expected, 10))
		h.Set("Producer-Received-Seq", strconv.FormatInt(pge.Received, 10))
	}
	if errors.Is(err, stream.ErrClosed) {
		h.Set("Stream-Closed", "true")
	}
	// Error replies are never cached, and carry no stale success headers.
	h.Del("ETag")
	h.Set("Cache-Control", "no-store")
	httpError(w, err)
}

// rejected counts a refused write by its reason (api.Errors), for /metrics.
func (s *Server) rejected(err error) {
	if s.metrics == nil {
		return
	}
	e, _ := api.Lookup(err)
	switch e.Reason {
	case "":
	case "fenced":
		s.metrics.streamFenced()
	default:
		s.metrics.streamRejected(e.Reason)
	}
}
