package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// metrics are the server's Prometheus metrics, served at /metrics in the text
// exposition format (written by hand: no dependency). Every method is safe
// for concurrent use and cheap enough for the append path: atomics, and a
// read-locked map lookup for labelled series.
//
// The streams handler reports through:
//
//	s.metrics.streamAcks(acks)            // one per chunk, by ack outcome
//	s.metrics.streamAppend(outcome, n)    // n chunks appended|adopted|retransmit
//	s.metrics.streamAborted()             // an abort record was written
//	s.metrics.streamFenced()              // a write was refused as fenced (403)
//	s.metrics.streamRejected(reason)      // a write was refused: gap, conflict, closed, …
//	s.metrics.readerOpened(mode)          // an SSE or long-poll read began …
//	s.metrics.readerClosed(mode)          // … and ended (mode "sse" or "long-poll")
//
// HTTP requests (count by route class and status, latency histogram by route
// class) are counted by ServeHTTP for every request, stream paths included.
type metrics struct {
	start time.Time

	// runs counts run outcomes: those the engine's store reports when it was
	// wrapped by InstrumentStore, else only the runs API's starts.
	runs      *runCounters
	runsStore bool // runs comes from an instrumented store

	httpMu  sync.RWMutex
	httpReq map[httpKey]*atomic.Uint64
	latency [numRouteClasses]histogram

	readersMu sync.RWMutex
	readers   map[string]*atomic.Int64

	chunksMu sync.RWMutex
	chunks   map[string]*atomic.Uint64 // by outcome

	aborts atomic.Uint64
	fenced atomic.Uint64

	rejectedMu sync.RWMutex
	rejected   map[string]*atomic.Uint64 // by reason

	world worldMetrics // metrics_world.go
}

// Reader modes for readerOpened and readerClosed.
const (
	readerSSE      = "sse"
	readerLongPoll = "long-poll"
)

// Chunk outcomes for streamAppend (stream.Outcome's names).
const (
	outcomeAppended   = "appended"
	outcomeAdopted    = "adopted"
	outcomeRetransmit = "retransmit"
)

func newMetrics() *metrics {
	m := &metrics{
		start:    time.Now(),
		runs:     &runCounters{},
		httpReq:  make(map[httpKey]*atomic.Uint64),
		readers:  make(map[string]*atomic.Int64),
		chunks:   make(map[string]*atomic.Uint64),
		rejected: make(map[string]*atomic.Uint64),
		world:    worldMetrics{events: make(map[string]*atomic.Uint64), deliveries: make(map[string]*atomic.Uint64)},
	}
	for i := range m.latency {
		m.latency[i].counts = make([]atomic.Uint64, len(latencyBuckets)+1)
	}
	// Series that exist from the start, so dashboards see zeros, not gaps.
	for _, mode := range []string{readerSSE, readerLongPoll} {
		m.readers[mode] = new(atomic.Int64)
	}
	for _, o := range []string{outcomeAppended, outcomeAdopted, outcomeRetransmit} {
		m.chunks[o] = new(atomic.Uint64)
	}
	return m
}

// streamAppend counts n chunks of one append outcome: "appended", "adopted"
// or "retransmit".
func (m *metrics) streamAppend(outcome string, n int) {
	if n <= 0 {
		return
	}
	counter(&m.chunksMu, m.chunks, outcome).Add(uint64(n))
}

// streamAcks counts an append's acks by outcome.
func (m *metrics) streamAcks(acks []stream.Ack) {
	var appended, adopted, retransmit int
	for _, a := range acks {
		switch a.Outcome {
		case stream.Appended:
			appended++
		case stream.Adopted:
			adopted++
		case stream.Retransmit:
			retransmit++
		}
	}
	m.streamAppend(outcomeAppended, appended)
	m.streamAppend(outcomeAdopted, adopted)
	m.streamAppend(outcomeRetransmit, retransmit)
}

// streamAborted counts an abort record written (Weir-Abort, or an append
// whose bytes diverged from an earlier attempt's).
func (m *metrics) streamAborted() { m.aborts.Add(1) }

// streamFenced counts a write refused because its attempt is fenced.
func (m *metrics) streamFenced() { m.fenced.Add(1) }

// streamRejected counts a write refused for reason ("gap", "conflict",
// "closed", "finished", "too_large", …).
func (m *metrics) streamRejected(reason string) {
	counter(&m.rejectedMu, m.rejected, reason).Add(1)
}

// readerOpened counts a live read (mode "sse" or "long-poll") that began;
// pair it with readerClosed.
func (m *metrics) readerOpened(mode string) { m.gauge(mode).Add(1) }

// readerClosed counts a live read that ended.
func (m *metrics) readerClosed(mode string) { m.gauge(mode).Add(-1) }

func (m *metrics) gauge(mode string) *atomic.Int64 {
	m.readersMu.RLock()
	g := m.readers[mode]
	m.readersMu.RUnlock()
	if g != nil {
		return g
	}
	m.readersMu.Lock()
	defer m.readersMu.Unlock()
	if g = m.readers[mode]; g == nil {
		g = new(atomic.Int64)
		m.readers[mode] = g
	}
	return g
}

func counter[K comparable](mu *sync.RWMutex, m map[K]*atomic.Uint64, k K) *atomic.Uint64 {
	mu.RLock()
	c := m[k]
	mu.RUnlock()
	if c != nil {
		return c
	}
	mu.Lock()
	defer mu.Unlock()
	if c = m[k]; c == nil {
		c = new(atomic.Uint64)
		m[k] = c
	}
	return c
}

// routeClass groups requests for the HTTP metrics, so label sets stay small
// whatever the paths.
type routeClass uint8

const (
	routeOther routeClass = iota
	routeRuns
	routeStreamWrite
	routeStreamRead
	routeStreamLive // SSE and long-poll reads: long by design, kept apart
	routeHealth
	routeMetrics
	routeWorld
	numRouteClasses
)

var routeClassNames = [numRouteClasses]string{"other", "runs", "stream_write", "stream_read", "stream_live", "health", "metrics", "world"}

// classify returns r's route class.
func classify(r *http.Request) routeClass {
	p := r.URL.Path
	switch {
	case len(p) >= len(streamPrefix) && p[:len(streamPrefix)] == streamPrefix:
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			if r.URL.RawQuery != "" && r.URL.Query().Get("live") != "" {
				return routeStreamLive
			}
			return routeStreamRead
		case http.MethodOptions:
			return routeOther
		}
		return routeStreamWrite
	case p == "/v1/runs" || len(p) > len("/v1/runs/") && p[:len("/v1/runs/")] == "/v1/runs/" || p == "/v1/workflows":
		return routeRuns
	case strings.HasPrefix(p, "/v1/world/"):
		if strings.HasPrefix(p, "/v1/world/streams/") && r.URL.Query().Get("follow") == "true" {
			return routeStreamLive
		}
		return routeWorld
	case p == "/healthz" || p == "/readyz":
		return routeHealth
	case p == "/metrics":
		return routeMetrics
	}
	return routeOther
}

type httpKey struct {
	class routeClass
	code  int
}

// request counts one finished request.
func (m *metrics) request(class routeClass, code int, d time.Duration) {
	counter(&m.httpMu, m.httpReq, httpKey{class, code}).Add(1)
	m.latency[class].observe(d.Seconds())
}

// latencyBuckets are the histogram's upper bounds, in seconds.
var latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// histogram is a Prometheus histogram: counts[i] is the observations in
// bucket i (not cumulative; the last is +Inf), summed at exposition.
type histogram struct {
	counts  []atomic.Uint64
	sumBits atomic.Uint64 // float64 bits
}

func (h *histogram) observe(v float64) {
	i, _ := slices.BinarySearch(latencyBuckets, v)
	h.counts[i].Add(1)
	for {
		old := h.sumBits.Load()
		if h.sumBits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// runCounters counts run outcomes.
type runCounters struct {
	started, completed, failed, cancelled atomic.Uint64
	events                                sync.Map // store.EventType -> *atomic.Uint64
	hookRefused, messageRefused           atomic.Uint64
}

// event counts n events of type t.
func (c *runCounters) event(t store.EventType, n int) {
	v, ok := c.events.Load(t)
	if !ok {
		v, _ = c.events.LoadOrStore(t, new(atomic.Uint64))
	}
	v.(*atomic.Uint64).Add(uint64(n))
}

// serveMetrics writes every metric in the Prometheus text format 0.0.4.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	if r.Method == http.MethodHead {
		return
	}
	bw := bufio.NewWriter(w)
	s.metrics.write(bw)
	s.writeEngineMetrics(bw)
	s.writeWorldMetrics(bw)
	s.writeLimiterMetrics(bw)
	s.writeUnclaimedMetrics(bw)
	s.writeStoreMetrics(bw)
	_ = bw.Flush()
}

// writeStoreMetrics writes what the store asked of its database
// (store.Counts): a run's cost in statements, round trips and commits is
// their growth over weir_runs_completed_total's.
func (s *Server) writeStoreMetrics(w io.Writer) {
	c, ok := store.CountsOf(s.e.Store())
	if !ok {
		return
	}
	family := func(name, help string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", name, help, name)
	}
	family("weir_store_statements_total", "SQL statements this process sent to the database server (each of a pipeline counted; 0 on SQLite).")
	fmt.Fprintf(w, "weir_store_statements_total %d\n", c.Statements)
	family("weir_store_round_trips_total", "Times this process waited for the database server: a statement alone, a pipelined batch, a first preparation.")
	fmt.Fprintf(w, "weir_store_round_trips_total %d\n", c.RoundTrips)
	family("weir_store_commits_total", "Explicit transactions this process committed (its group commits and its own transactions).")
	fmt.Fprintf(w, "weir_store_commits_total %d\n", c.Commits)
	family("weir_store_groups_total", "Group commits: writes from any goroutine of the process applied together in one transaction.")
	fmt.Fprintf(w, "weir_store_groups_total %d\n", c.Groups)
	family("weir_store_group_ops_total", "Writes the group commits applied (÷ weir_store_groups_total: the mean group).")
	fmt.Fprintf(w, "weir_store_group_ops_total %d\n", c.GroupOps)
}

// writeEngineMetrics writes the engine's own counters (weir.EngineStats).
func (s *Server) writeEngineMetrics(w io.Writer) {
	st := s.e.Stats()
	family := func(name, typ, help string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	family("weir_engine_runs_executing", "gauge", "Runs this process's engine executes now.")
	fmt.Fprintf(w, "weir_engine_runs_executing %d\n", st.Running)
	family("weir_engine_attempts_lingering", "gauge", "Step attempts the engine abandoned (timed out, or their run cancelled, past its deadline or lost) whose function has not returned: a step that ignores its context holds a goroutine until it does.")
	fmt.Fprintf(w, "weir_engine_attempts_lingering %d\n", st.LingeringAttempts)
	family("weir_engine_attempts_abandoned_total", "counter", "Step attempts the engine abandoned without waiting for their function.")
	fmt.Fprintf(w, "weir_engine_attempts_abandoned_total %d\n", st.AbandonedAttempts)
	family("weir_engine_lease_renewals_skipped_total", "counter", "Run leases a renewal round left to the next because their rows were locked by writes in progress (each renewed a third of a lease later).")
	fmt.Fprintf(w, "weir_engine_lease_renewals_skipped_total %d\n", st.LeaseRenewals.Skipped)
	family("weir_engine_lease_renewal_failures_total", "counter", "Lease renewal rounds that failed or took half a lease.")
	fmt.Fprintf(w, "weir_engine_lease_renewal_failures_total %d\n", st.LeaseRenewals.Failed)
	family("weir_engine_leases_lapsed_total", "counter", "Run leases that went a whole lease without a renewal: the run was given up, and another worker may run its step again.")
	fmt.Fprintf(w, "weir_engine_leases_lapsed_total %d\n", st.LeaseRenewals.Lapsed)
	if len(st.LimiterWaits) > 0 {
		family("weir_limiter_refusals_total", "counter", "Step attempts a limiter did not let start at once, and runs this process started in a queue that did not admit them at once (this process's count).")
		names := slices.Sorted(maps.Keys(st.LimiterWaits))
		for _, n := range names {
			fmt.Fprintf(w, "weir_limiter_refusals_total{limiter=\"%s\"} %d\n", labelValue(n), st.LimiterWaits[n])
		}
	}
}

func (m *metrics) write(w io.Writer) {
	family := func(name, typ, help string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	src := "by the runs API"
	if m.runsStore {
		src = "by this process's engine and runs API"
	}
	family("weir_runs_started_total", "counter", "Runs created "+src+".")
	fmt.Fprintf(w, "weir_runs_started_total %d\n", m.runs.started.Load())
	if m.runsStore {
		family("weir_runs_completed_total", "counter", "Runs that completed.")
		fmt.Fprintf(w, "weir_runs_completed_total %d\n", m.runs.completed.Load())
		family("weir_runs_failed_total", "counter", "Runs that failed.")
		fmt.Fprintf(w, "weir_runs_failed_total %d\n", m.runs.failed.Load())
		family("weir_runs_cancelled_total", "counter", "Runs that ended cancelled.")
		fmt.Fprintf(w, "weir_runs_cancelled_total %d\n", m.runs.cancelled.Load())
		family("weir_run_events_total", "counter", "Events recorded in run logs, by type (steps started and finished, timers, selects, hooks created and received, child runs).")
		var types []string
		m.runs.events.Range(func(k, _ any) bool { types = append(types, string(k.(store.EventType))); return true })
		slices.Sort(types)
		for _, t := range types {
			v, _ := m.runs.events.Load(store.EventType(t))
			fmt.Fprintf(w, "weir_run_events_total{type=%q} %d\n", t, v.(*atomic.Uint64).Load())
		}
		family("weir_hook_deliveries_refused_total", "counter", "Hook deliveries refused (unknown token, disposed hook, ended run, key reused, too large).")
		fmt.Fprintf(w, "weir_hook_deliveries_refused_total %d\n", m.runs.hookRefused.Load())
		family("weir_messages_refused_total", "counter", "Messages to runs refused (unknown run, ended run, key reused, too large, a bad topic).")
		fmt.Fprintf(w, "weir_messages_refused_total %d\n", m.runs.messageRefused.Load())
	}

	family("weir_http_requests_total", "counter", "HTTP requests served, by route class and status code.")
	m.httpMu.RLock()
	keys := make([]httpKey, 0, len(m.httpReq))
	for k := range m.httpReq {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b httpKey) int {
		if a.class != b.class {
			return int(a.class) - int(b.class)
		}
		return a.code - b.code
	})
	for _, k := range keys {
		fmt.Fprintf(w, "weir_http_requests_total{route=%q,code=\"%d\"} %d\n", routeClassNames[k.class], k.code, m.httpReq[k].Load())
	}
	m.httpMu.RUnlock()

	family("weir_http_request_duration_seconds", "histogram", "HTTP request latency by route class (stream_live holds SSE and long-poll reads, long by design).")
	for c := range numRouteClasses {
		h := &m.latency[c]
		var cum uint64
		for i, le := range latencyBuckets {
			cum += h.counts[i].Load()
			fmt.Fprintf(w, "weir_http_request_duration_seconds_bucket{route=%q,le=%q} %d\n", routeClassNames[c], strconv.FormatFloat(le, 'g', -1, 64), cum)
		}
		cum += h.counts[len(latencyBuckets)].Load()
		fmt.Fprintf(w, "weir_http_request_duration_seconds_bucket{route=%q,le=\"+Inf\"} %d\n", routeClassNames[c], cum)
		fmt.Fprintf(w, "weir_http_request_duration_seconds_sum{route=%q} %s\n", routeClassNames[c], strconv.FormatFloat(math.Float64frombits(h.sumBits.Load()), 'g', -1, 64))
		fmt.Fprintf(w, "weir_http_request_duration_seconds_count{route=%q} %d\n", routeClassNames[c], cum)
	}

	family("weir_stream_open_readers", "gauge", "Live stream reads (SSE, long-poll) open now.")
	writeLabelled(w, &m.readersMu, m.readers, "weir_stream_open_readers", "mode", func(g *atomic.Int64) string { return strconv.FormatInt(g.Load(), 10) })

	family("weir_stream_chunks_total", "counter", "Chunks acknowledged to appends, by outcome: appended (a new record), adopted (an earlier attempt's identical record), retransmit (acknowledged before).")
	writeLabelled(w, &m.chunksMu, m.chunks, "weir_stream_chunks_total", "outcome", loadU)

	family("weir_stream_aborts_total", "counter", "Abort records written.")
	fmt.Fprintf(w, "weir_stream_aborts_total %d\n", m.aborts.Load())
	family("weir_stream_fenced_total", "counter", "Writes refused because their attempt was fenced (a zombie).")
	fmt.Fprintf(w, "weir_stream_fenced_total %d\n", m.fenced.Load())
	family("weir_stream_rejected_total", "counter", "Writes refused for another reason (gap, conflict, closed, …).")
	writeLabelled(w, &m.rejectedMu, m.rejected, "weir_stream_rejected_total", "reason", loadU)

	family("weir_uptime_seconds", "gauge", "Seconds since the server started.")
	fmt.Fprintf(w, "weir_uptime_seconds %s\n", strconv.FormatFloat(time.Since(m.start).Seconds(), 'f', 3, 64))
}

func loadU(c *atomic.Uint64) string { return strconv.FormatUint(c.Load(), 10) }

func writeLabelled[V any](w io.Writer, mu *sync.RWMutex, m map[string]V, name, label string, val func(V) string) {
	mu.RLock()
	defer mu.RUnlock()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "%s{%s=\"%s\"} %s\n", name, label, labelValue(k), val(m[k]))
	}
}

// labelValue escapes a label value as the text format wants: backslash,
// double quote and newline.
func labelValue(s string) string {
	return labelEscaper.Replace(s)
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// useStore takes run outcomes from st if InstrumentStore wrapped it.
func (m *metrics) useStore(st interface{}) {
	if is, ok := st.(*instrumentedStore); ok {
		m.runs, m.runsStore = is.runs, true
	}
}

// instrument wraps w to record the status, and returns a func that counts
// the request when it ends. A live read (SSE, long-poll) gets a context
// that Drain cancels.
func (s *Server) instrument(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request, func()) {
	rec := &statusRecorder{ResponseWriter: w}
	class := classify(r)
	start := time.Now()
	var stop func() bool
	if class == routeStreamLive {
		ctx, cancel := context.WithCancel(r.Context())
		stop = context.AfterFunc(s.drained, cancel)
		r = r.WithContext(ctx)
	}
	return rec, r, func() {
		if stop != nil {
			stop()
		}
		code := rec.code
		if code == 0 {
			code = http.StatusOK
		}
		if r.Context().Err() != nil && !s.draining() && code >= 500 &&
			(rec.err == nil || errors.Is(rec.err, context.Canceled) || errors.Is(rec.err, context.DeadlineExceeded)) {
			// The client hung up while the handler waited: not the
			// server's error (nginx's 499, "client closed request").
			code, rec.err = statusClientClosed, nil
		}
		if rec.err != nil {
			s.internalError(r, rec.err)
		}
		s.metrics.request(class, code, time.Since(start))
	}
}

// statusClientClosed is the status a request is counted with when its
// client hung up before the handler answered.
const statusClientClosed = 499

// internalError logs the cause of a 500: at most one line a second, saying
// how many were left out since the last, so that a flood of failing
// requests cannot flood the log.
func (s *Server) internalError(r *http.Request, err error) {
	s.errLog.mu.Lock()
	defer s.errLog.mu.Unlock()
	now := time.Now()
	if now.Sub(s.errLog.last) < time.Second {
		s.errLog.left++
		return
	}
	s.log.Error("weir server: internal error", "method", r.Method, "path", clip(r.URL.Path), "err", err,
		"errors_not_logged_since_last", s.errLog.left)
	s.errLog.last, s.errLog.left = now, 0
}

// statusRecorder remembers the status a handler wrote. It passes Flush on
// (for SSE) and Unwrap lets http.ResponseController reach the connection.
type statusRecorder struct {
	http.ResponseWriter
	code int
	err  error // the cause of a 500, logged when the request ends
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.code == 0 && code >= 200 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Flush implements http.Flusher.
func (w *statusRecorder) Flush() {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the wrapped ResponseWriter, for http.ResponseController.
func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// unclaimedAfter is how long a runnable run may go unclaimed before
// weir_runs_unclaimed counts it: no worker of its workflow and version.
const unclaimedAfter = 10 * time.Second

// writeUnclaimedMetrics writes, by application version, the runs waiting
// longer than unclaimedAfter for a worker to claim them (of the newest
// 1000 pending runs): with versioned deploys, a version no worker runs.
func (s *Server) writeUnclaimedMetrics(w io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// Their heads: a count reads none of their values.
	runs, err := s.store.ListRuns(ctx, &store.ListRunsParams{Status: store.RunPending, Limit: 1000, NoData: true})
	if err != nil {
		return
	}
	now := time.Now()
	by := map[string]int{}
	for _, r := range runs {
		if r.Queued || r.Kind != "" || now.Sub(r.CreatedAt) < unclaimedAfter || r.WakeAt.After(now.Add(-unclaimedAfter)) {
			continue
		}
		by[r.Version]++
	}
	fmt.Fprintf(w, "# HELP weir_runs_unclaimed Runs runnable for over %v that no worker claimed, by the application version a worker must run (of the newest 1000 pending).\n# TYPE weir_runs_unclaimed gauge\n", unclaimedAfter)
	if len(by) == 0 {
		fmt.Fprintf(w, "weir_runs_unclaimed{version=\"\"} 0\n")
		return
	}
	for _, v := range slices.Sorted(maps.Keys(by)) {
		fmt.Fprintf(w, "weir_runs_unclaimed{version=\"%s\"} %d\n", labelValue(v), by[v])
	}
}
