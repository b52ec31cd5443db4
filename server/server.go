// Package server serves a weir engine and its streams over HTTP: the runs
// API, the Durable Streams protocol at /v1/stream/ (standalone streams, and
// every run's streams at /v1/stream/runs/<run>/<name>) with weir's
// exactly-once extension headers, /healthz and /metrics. A Server is an
// http.Handler: mount it in your own program or run `weir server`.
//
// docs/protocol.md documents every endpoint, header and status.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/world"
)

// Config configures a Server. The zero value is valid.
type Config struct {
	// Token, if set, is the bearer token that writes (and, with
	// RequireTokenForReads, reads) must present. Defaults to none.
	Token string
	// RequireTokenForReads makes reads need the token too; `weir server`
	// sets it when bound beyond loopback. Defaults to false.
	RequireTokenForReads bool
	// ReadToken, if set, is a second token that reads (where reads need a
	// token) and writes nothing: a dashboard's. Defaults to none.
	ReadToken string
	// LongPollTimeout is how long a long-poll read waits for data before it
	// answers 204. Defaults to 20s.
	LongPollTimeout time.Duration
	// SSEMaxDuration ends an SSE response after this long, so clients
	// reconnect and proxies recycle connections. Defaults to 60s.
	SSEMaxDuration time.Duration
	// MaxBodyBytes bounds a request body; larger bodies get 413. Defaults to
	// store.MaxAppendBytes (16 MiB).
	MaxBodyBytes int64
	// IdempotencyTTL is how long an Idempotency-Key is remembered. Defaults
	// to 24h.
	IdempotencyTTL time.Duration
	// Logger receives the server's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// AllowedHosts, if set, are the only Host names (lower case, no port)
	// the server answers to; any other gets 403. weir server sets them on
	// a loopback bind (LoopbackHosts and the --addr host), against DNS
	// rebinding. Defaults to none: any Host.
	AllowedHosts []string
	// CORSOrigins are the web origins besides the server's own that may
	// change things (state-changing requests) and read replies (CORS);
	// "*" is any. Defaults to none: only the server's own pages (the UI).
	CORSOrigins []string
	// MaxReaders bounds the stream reads served at once (catch-up,
	// long-poll, SSE, World reads) and the waits for a run event
	// (GET /v1/runs/{id}/events/{key}?wait=); one more gets 503 with
	// Retry-After.
	// Defaults to 1024.
	MaxReaders int
	// ReadPageBytes bounds the data of one page a read holds and writes
	// (one larger chunk alone is served whole): a reader's memory. Defaults
	// to 256 KiB.
	ReadPageBytes int
	// MaxUploadBytes bounds the request bodies being received at once
	// (their Content-Length, or MaxBodyBytes when unknown); one more gets
	// 503 with Retry-After. Defaults to 256 MiB.
	MaxUploadBytes int64
	// MaxReplyBytes bounds the JSON replies of the runs, hooks, schedules,
	// limiters and World APIs held while their clients read them (a reply
	// over 4 KiB is held until the client took it, at most 30 s); one more
	// gets 503 with Retry-After. A page of a run's log is up to ~5 MiB, so
	// without it clients that never read could make the server hold a
	// page each. Defaults to 256 MiB.
	MaxReplyBytes int64
	// MinUploadRate is the slowest a body may arrive, in bytes a second,
	// after a 30 s grace: a body that trickles slower is cut. Defaults to
	// 1 KiB/s.
	MinUploadRate int64
	// MaxStreams bounds the standalone streams clients may create: one more
	// gets 507 (code "quota") until one is deleted. Defaults to 100,000;
	// negative: no limit.
	MaxStreams int64
	// MaxStreamBytes bounds the data bytes a client may write to one stream
	// through the server (run streams and World streams included): new data
	// past it gets 413 (code "stream_full"); retransmits and adopted
	// retries are still answered. Defaults to 1 GiB; negative: no limit.
	MaxStreamBytes int64
	// StreamCacheSize bounds the stream paths a server remembers the
	// stream of (its id and content type), so that an append to a known
	// path does not look the path up in the store first. It is correct with
	// several servers on one database: the store refuses an append to a
	// stream deleted or expired since, and the server then looks the path
	// up again (stream_cache.go). About 100 bytes and the path per entry.
	// Defaults to 10,000; negative: no cache (every append looks up).
	StreamCacheSize int
	// WorldDelivery says a delivery loop (package delivery) pushes this
	// server's World queue messages to the apps; without one, POST
	// /v1/world/queue answers 503 rather than keep messages nothing
	// sends. Defaults to false; `weir server` sets it when it has a
	// World secret.
	WorldDelivery bool
	// WorldSecret is the secret the World's apps share with weir (weir
	// server's --world-secret): a queued message's target must carry its
	// signature (delivery.SignTarget, which @weirhq/world sends), unless
	// its origin is one of WorldTargets. Defaults to none: every target
	// must be one of WorldTargets.
	WorldSecret []byte
	// WorldTargets are the origins (scheme://host[:port]) World messages
	// may be delivered to without a target signature; "*" is any.
	// Defaults to none: weir POSTs only to apps that proved they hold the
	// World secret, so that a holder of the token alone cannot make it
	// send signed requests to any address it can reach (a port scanner,
	// with the errors GET /v1/world/queue lists).
	WorldTargets []string
}

// WithDefaults returns a copy of c with defaults applied.
func (c Config) WithDefaults() Config {
	if c.LongPollTimeout == 0 {
		c.LongPollTimeout = 20 * time.Second
	}
	if c.SSEMaxDuration == 0 {
		c.SSEMaxDuration = 60 * time.Second
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = store.MaxAppendBytes
	}
	if c.IdempotencyTTL == 0 {
		c.IdempotencyTTL = 24 * time.Hour
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxReaders == 0 {
		c.MaxReaders = 1024
	}
	if c.ReadPageBytes == 0 {
		c.ReadPageBytes = 256 << 10
	}
	if c.MaxReplyBytes == 0 {
		c.MaxReplyBytes = 256 << 20
	}
	if c.MaxUploadBytes == 0 {
		c.MaxUploadBytes = 256 << 20
	}
	if c.MinUploadRate == 0 {
		c.MinUploadRate = 1 << 10
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = 100_000
	}
	if c.MaxStreamBytes == 0 {
		c.MaxStreamBytes = 1 << 30
	}
	if c.StreamCacheSize == 0 {
		c.StreamCacheSize = 10_000
	}
	return c
}

// Server is weir's HTTP handler.
type Server struct {
	e     *weir.Engine
	store store.Full
	cfg   Config
	log   *slog.Logger
	mux   *http.ServeMux

	readers chan struct{} // a slot per stream read in flight (MaxReaders)
	auth    struct {      // failed authentications, for the rate-limited log
		mu     sync.Mutex
		failed int
		last   time.Time
	}
	refusedTargets struct { // World targets refused, for the rate-limited log (world.go)
		mu   sync.Mutex
		left int
		last time.Time
	}
	errLog struct { // internal errors, for the rate-limited log (metrics.go)
		mu   sync.Mutex
		left int
		last time.Time
	}
	uploads  *uploadBudget // body bytes held (MaxUploadBytes): upload.go
	replies  *uploadBudget // JSON reply bytes held (MaxReplyBytes): runs.go
	metrics  *metrics      // see metrics.go
	ds       dsState       // the streams handler's own state (stream.go)
	worldIDs world.ULIDs   // message ids the World API mints
	marks    chunkMarks    // how far World readers walked each view (world_streams.go)
	// worldOpened wakes followers of World streams not written yet when
	// this server opens one for a write (world_streams.go).
	worldOpened broadcast

	// paths is the appends' path → stream cache (stream_cache.go); nil:
	// none (StreamCacheSize < 0).
	paths *pathCache
	// now is the streams handler's clock: expiry and TTL decisions are
	// taken at now(). time.Now, except in tests that move time on.
	now func() time.Time

	// drained is cancelled by Drain (health_drain.go): live reads end.
	drained     context.Context
	drainCancel context.CancelFunc
}

// New returns a Server for engine e (its store serves the streams).
func New(e *weir.Engine, cfg *Config) *Server {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c = c.WithDefaults()
	s := &Server{e: e, store: e.Store(), cfg: c, log: c.Logger, mux: http.NewServeMux(), metrics: newMetrics(),
		readers: make(chan struct{}, c.MaxReaders), uploads: newUploadBudget(c.MaxUploadBytes), replies: newUploadBudget(c.MaxReplyBytes), paths: newPathCache(c.StreamCacheSize), now: time.Now}
	s.drained, s.drainCancel = context.WithCancel(context.Background())
	s.metrics.useStore(s.store)
	s.routes()
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w, r, done := s.instrument(w, r) // metrics.go
	defer done()
	// upload.go: the body's pace, and its share of the upload budget,
	// charged when a handler reads it. A refusal below leaves the body
	// unread and the connection closed, at once.
	defer s.guardBody(w, r)()
	// A read takes no body: one that declares a body would hold its
	// connection with nothing to read it, so that the server cannot see
	// the client hang up.
	if safeMethod(r.Method) && r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		refuse(w, r, fmt.Errorf("%w: a %s takes no body", api.ErrBadRequest, r.Method))
		return
	}
	// guard.go: the Host, CORS preflights, the Origin of a change.
	if err := s.checkHost(r); err != nil {
		refuse(w, r, err)
		return
	}
	isStream := strings.HasPrefix(r.URL.Path, streamPrefix)
	if r.Method == http.MethodOptions {
		s.preflight(w, r, isStream)
		return
	}
	s.corsHeaders(w, r, isStream)
	if err := s.checkOrigin(r); err != nil {
		refuse(w, r, err)
		return
	}
	if !s.authorize(w, r) { // auth.go
		return
	}
	// Stream paths are opaque: route them before ServeMux cleans or
	// redirects anything.
	if isStream {
		s.handleStream(w, r)
		return
	}
	// ServeMux answers a path with a dot segment with a redirect to its
	// clean form, which names another resource (…/streams/.. is the
	// run's list): a dot segment names nothing here.
	if dotSegment(r.URL.Path) {
		refuse(w, r, fmt.Errorf("%w: path %q: a segment . or .. names nothing", store.ErrInvalid, clip(r.URL.Path)))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// dotSegment reports whether a path has a segment "." or "..".
func dotSegment(path string) bool {
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// streamPrefix is where the Durable Streams protocol is served.
const streamPrefix = "/v1/stream/"

// maxErrorLen bounds an error reply's line.
const maxErrorLen = 512

// refuse answers err to a request whose body will not be read: at once,
// closing the connection, so that the server does not first wait for the
// rest of a body the client may be trickling.
func refuse(w http.ResponseWriter, r *http.Request, err error) {
	if r.Body != nil && r.Body != http.NoBody {
		w.Header().Set("Connection", "close")
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
	httpError(w, err)
}

// httpError writes a one-line plain-text error with the status and wire code
// err maps to (api.Errors: the one table that does).
func httpError(w http.ResponseWriter, err error) {
	e, _ := api.Lookup(err)
	if errors.Is(err, api.ErrBusy) && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set(api.ErrorHeader, e.Code)
	w.WriteHeader(e.Status)
	msg := err.Error()
	if e.Status == http.StatusInternalServerError {
		if rec, ok := w.(*statusRecorder); ok {
			rec.err = err // logged with the request when it ends (metrics.go)
		}
		msg = "internal error"
	}
	// One line, and short: a reason may quote the request (a name, a
	// path), which must not come back a megabyte long.
	msg = strings.ReplaceAll(msg, "\n", " ")
	if len(msg) > maxErrorLen {
		msg = strings.ToValidUTF8(msg[:maxErrorLen], "") + "…"
	}
	_, _ = w.Write([]byte(msg + "\n"))
}

// limit is a Config limit as the store takes it: 0 for none.
func limit(n int64) int64 { return max(n, 0) }
