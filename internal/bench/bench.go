// Package bench is weir's one instrument for performance claims: the
// workloads of `weir bench`, each measured against a baseline taken in the
// same run (absolute figures drift on a shared machine; ratios much less).
//
// Run runs the named workloads on a store (a fresh SQLite file per workload
// unless Config.Store names one) and returns one Result per workload;
// WriteTable and WriteJSON print them.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/sqlitestore"
)

// Config configures a bench run. Zero fields take the defaults of
// WithDefaults; the defaults are the sizes the targets are stated for.
type Config struct {
	// Store is where to run: "sqlite:PATH" or "postgres://…". Empty: a fresh
	// SQLite file in a temporary folder for each workload.
	Store string
	// URL is the Durable Streams base URL of the http workload (streams are
	// created under it). Empty: an in-process weir server on loopback.
	URL string
	// ChunkSize is the size of every chunk written. Defaults to 100.
	ChunkSize int
	// Duration, if set, runs append and http for this long instead of their
	// counts.
	Duration time.Duration

	// Chunks is the append workload's total. Defaults to 1,000,000.
	Chunks int
	// AdoptChunks is the chunks of the retried step of adopt and diverge.
	// Defaults to 100,000.
	AdoptChunks int
	// Writers is how many writers append at once. Defaults to 16.
	Writers int
	// Requests is the http workload's count. Defaults to 2,000.
	Requests int
	// Clients is the concurrent clients of the http workload's second
	// phase, each POSTing to a stream of its own. Defaults to 16.
	Clients int
	// Samples is the tail workload's count. Defaults to 1,000.
	Samples int
	// Linger is the step writers' linger (weir.WriterConfig.Linger).
	// Defaults to the engine's default.
	Linger time.Duration
	// Interval is the pause between tail samples and fanout messages.
	// Defaults to 2ms (tail) and 20ms (fanout).
	Interval time.Duration
	// Steps is the steps of the steps workload's run and of the replayed run.
	// Defaults to 1,000.
	Steps int
	// Runs is the short runs of the steps workload. Defaults to 500.
	Runs int
	// RunConcurrency is how many of those runs are in flight at once, each
	// started and awaited by a client of its own. Defaults to 16.
	RunConcurrency int
	// Replays is how many times replay replays. Defaults to 20.
	Replays int
	// Readers is the fanout workload's live readers. Defaults to 1,000.
	Readers int
	// Messages is the chunks fanout writes. Defaults to 50.
	Messages int
	// DBOSRuns, DBOSChunks and DBOSConcurrency shape dbos-like. Default 500,
	// 20 and 16.
	DBOSRuns, DBOSChunks, DBOSConcurrency int
	// GuardPostgres is the database of the guard's PostgreSQL workloads
	// (Guard.Store); empty: DefaultPostgres.
	GuardPostgres string
	// CostsRuns and CostsChunks shape costs: runs a phase (default 200),
	// chunks a run (default 20).
	CostsRuns, CostsChunks int
	// Processes is scale's list of process counts. Defaults to 1, 2, 3.
	Processes []int
	// ScaleRuns, ScaleChunks and ScaleConcurrency shape scale: runs per
	// round, chunks per run (of ChunkSize bytes) and runs at once per
	// process. Default 1,000, 20 and 16.
	ScaleRuns, ScaleChunks, ScaleConcurrency int
	// ScaleRounds is how many times scale measures each process count (the
	// figures are the medians). Defaults to 1.
	ScaleRounds int
	// TracingRounds is how many times tracing measures each variant (the
	// figures are the medians). Defaults to 6: each variant first, second and third twice.
	TracingRounds int
	// FlowRounds is how many times flow measures each variant (plain,
	// queued, limited; the figures are the medians). Defaults to 5.
	FlowRounds int
	// FlowRate and FlowPeriod are flow's rate queue: FlowRate starts per
	// FlowPeriod, which FlowRateRuns runs started at once wait in. Default
	// 20 per 500ms, 200 runs.
	FlowRate, FlowRateRuns int
	FlowPeriod             time.Duration
	// FlowQueueConcurrency is the global limit of flow's queue across
	// processes. Defaults to 8.
	FlowQueueConcurrency int
	// FlowSlotRuns and FlowSlotHold are flow's slot handover across
	// processes: that many steps, each holding a slot of a step limiter of
	// concurrency 2 that long. Default 100 of 20ms.
	FlowSlotRuns int
	FlowSlotHold time.Duration
	// ScheduleCount and ScheduleFor are the schedules workload's: how many
	// schedules of "@every 200ms", for how long. Default 20, 5s.
	ScheduleCount int
	ScheduleFor   time.Duration
	// ScaleTimeout bounds one round's runs. Defaults to 5 minutes.
	ScaleTimeout time.Duration
	// ServerCommand runs `weir server` for scale, which adds its flags
	// (--addr, --store, --bench-workflows …). `weir bench` sets it to itself.
	ServerCommand []string

	// ReaderCommand, if set, is the command that runs a cross-process tail
	// reader (see TailReader): the tail workload runs it, with the arguments
	// "--store DSN --run ID --samples N" added, on stores that allow several
	// processes (PostgreSQL). `weir bench` sets it to itself.
	ReaderCommand []string

	// Progress, if set, receives a progress line every second of a long
	// workload.
	Progress io.Writer
	// Logger receives the engines' logs. Defaults to errors only, on stderr.
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with defaults applied.
func (c Config) WithDefaults() Config {
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&c.ChunkSize, 100)
	def(&c.Chunks, 1_000_000)
	def(&c.AdoptChunks, 100_000)
	def(&c.Writers, 16)
	def(&c.Requests, 2_000)
	def(&c.Clients, 16)
	def(&c.Samples, 1_000)
	def(&c.Steps, 1_000)
	def(&c.Runs, 500)
	def(&c.Replays, 20)
	def(&c.Readers, 1_000)
	def(&c.Messages, 50)
	def(&c.DBOSRuns, 500)
	def(&c.CostsRuns, 200)
	def(&c.CostsChunks, 20)
	def(&c.DBOSChunks, 20)
	def(&c.DBOSConcurrency, 16)
	def(&c.RunConcurrency, 16)
	def(&c.ScaleRuns, 1_000)
	def(&c.ScaleChunks, 20)
	def(&c.ScaleConcurrency, 16)
	def(&c.ScaleRounds, 1)
	def(&c.TracingRounds, 6)
	def(&c.FlowRounds, 5)
	def(&c.ScheduleCount, 20)
	if c.ScheduleFor <= 0 {
		c.ScheduleFor = 5 * time.Second
	}
	def(&c.FlowRate, 20)
	def(&c.FlowRateRuns, 200)
	def(&c.FlowQueueConcurrency, 8)
	def(&c.FlowSlotRuns, 100)
	if c.FlowSlotHold <= 0 {
		c.FlowSlotHold = 20 * time.Millisecond
	}
	if c.FlowPeriod <= 0 {
		c.FlowPeriod = 500 * time.Millisecond
	}
	if c.ScaleTimeout <= 0 {
		c.ScaleTimeout = 5 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	return c
}

// Result is one workload's figures. Fields that do not apply are zero (and
// left out of the JSON).
type Result struct {
	Workload string `json:"workload"`
	Store    string `json:"store,omitempty"`
	// Unit is what Ops counts: "chunks", "steps", "requests", "replays", …
	Unit      string  `json:"unit,omitempty"`
	Ops       int64   `json:"ops,omitempty"`
	Seconds   float64 `json:"seconds,omitempty"`
	OpsPerSec float64 `json:"ops_per_sec,omitempty"`
	// Baseline says what the workload is compared with, measured in the same
	// run; Ratio says how (RatioOf).
	Baseline          string  `json:"baseline,omitempty"`
	BaselineOpsPerSec float64 `json:"baseline_ops_per_sec,omitempty"`
	BaselineP50Ms     float64 `json:"baseline_p50_ms,omitempty"`
	BaselineP99Ms     float64 `json:"baseline_p99_ms,omitempty"`
	Ratio             float64 `json:"ratio,omitempty"`
	RatioOf           string  `json:"ratio_of,omitempty"`
	// Latencies of one operation (what one is depends on the workload).
	P50Ms  float64 `json:"p50_ms,omitempty"`
	P99Ms  float64 `json:"p99_ms,omitempty"`
	P999Ms float64 `json:"p999_ms,omitempty"`
	MaxMs  float64 `json:"max_ms,omitempty"`
	// Target is issue 5's target for the workload, and whether it was met.
	Target    string `json:"target,omitempty"`
	TargetMet *bool  `json:"target_met,omitempty"`
	// Extra holds workload-specific figures, named with their unit.
	Extra map[string]float64 `json:"extra,omitempty"`
	Notes []string           `json:"notes,omitempty"`
}

func (r *Result) extra(name string, v float64) {
	if r.Extra == nil {
		r.Extra = map[string]float64{}
	}
	r.Extra[name] = round(v)
}

// counts adds what the store asked of its database per run between two
// readings (store.Counts): statements_per_run, round_trips_per_run,
// commits_per_run, groups_per_run and group_ops_per_run.
func (r *Result) counts(d store.Counts, runs int) {
	per := func(v int64) float64 { return float64(v) / float64(max(runs, 1)) }
	if d.Statements > 0 {
		r.extra("statements_per_run", per(d.Statements))
		r.extra("round_trips_per_run", per(d.RoundTrips))
	}
	r.extra("commits_per_run", per(d.Commits))
	r.extra("groups_per_run", per(d.Groups))
	r.extra("group_ops_per_run", per(d.GroupOps))
}

// cpu adds the CPU per run between two samples: cpu_weir_ms_per_run (this
// process: the engine, the store's client, the bench's clients) and, when
// the store is a PostgreSQL server on this machine, cpu_pg_ms_per_run
// (every postgres process), and the machine's busy cores.
func (r *Result) cpu(a, b cpuSample, runs int, pg bool) {
	per := func(sec float64) float64 { return 1000 * sec / float64(max(runs, 1)) }
	if b.self == 0 {
		return // no /proc
	}
	r.extra("cpu_weir_ms_per_run", per(b.self-a.self))
	if pg {
		r.extra("cpu_pg_ms_per_run", per(b.postgres-a.postgres))
	}
	if w := b.at.Sub(a.at).Seconds(); w > 0 {
		r.extra("machine_busy_cores", (b.busy-a.busy)/w)
	}
}

func (r *Result) target(desc string, met bool) {
	r.Target = desc
	r.TargetMet = &met
}

// latencies sets P50/P99/P999/Max from samples.
func (r *Result) latencies(d []time.Duration) {
	r.P50Ms, r.P99Ms, r.P999Ms, r.MaxMs = pct(d, 0.50), pct(d, 0.99), pct(d, 0.999), pct(d, 1)
}

// A workload measures one thing on an environment.
type workload struct {
	name string
	desc string
	// embedded workloads run on the store alone; http needs a server.
	embedded bool
	run      func(ctx context.Context, v *env) (*Result, error)
}

var workloads = []workload{
	{"append", "step-stream writes by many writers, durable; vs anonymous appends of the same shape", true, runAppend},
	{"adopt", "a retry re-emitting the same chunks (adopted); vs the first attempt's appends", true, runAdopt},
	{"diverge", "a retry that differs halfway: the abort's cost", true, runDiverge},
	{"http", "sequential single-chunk POSTs to a Durable Streams URL; vs a no-op net/http server", false, runHTTP},
	{"tail", "writer → live reader latency through a step writer; vs a bare store append", true, runTail},
	{"steps", "step-to-step overhead and runs/s; vs one bare durable transaction", true, runSteps},
	{"replay", "replay of a run of 1,000 completed steps; vs loading its log", true, runReplay},
	{"fanout", "N live readers on one stream: delivery p99, memory per reader; vs one reader", true, runFanout},
	{"dbos-like", "500 runs × 20 chunks, 16 at a time, through the engine; vs plain appends", true, runDBOSLike},
	{"costs", "what one run costs the store, one run at a time, in process and through a weir server's runs API with a follower: statements, round trips, commits, CPU per run; vs in process", true, runCosts},
	{"tracing", "steps' runs and dbos-like's with tracing off, on with a no-op exporter, on over OTLP/HTTP, interleaved rounds; vs off (named only)", true, runTracing},
	{"flow", "short runs plain, queued and with limited steps (interleaved rounds), a rate queue's accuracy, and (PostgreSQL) a queue's global limit across 1, 2, 3 weir server processes; vs plain (named only)", true, runFlow},
	{"schedules", "tick → its run's step latency (p50, p99) of 20 schedules of @every 200ms; vs a direct start (named only)", true, runSchedules},
	{"scale", "N weir server processes on one PostgreSQL database (--processes 1,2,3): runs/s through the runs API; vs N=1 (named only)", false, runScale},
}

// Workloads lists the workloads' names and one-line descriptions, in the
// order Run runs them.
func Workloads() [][2]string {
	out := make([][2]string, len(workloads))
	for i, w := range workloads {
		out[i] = [2]string{w.name, w.desc}
	}
	return out
}

// Default is the workloads run when none is named: every embedded one, and
// http when a URL is given.
func Default(c Config) []string {
	var out []string
	for _, w := range workloads {
		if (w.embedded || c.URL != "") && !namedOnly[w.name] {
			out = append(out, w.name)
		}
	}
	return out
}

// Run runs the named workloads (Default(c) if none), in the order given, and
// returns their results. It stops at the first failing workload, returning
// the results so far.
func Run(ctx context.Context, c Config, names []string) ([]*Result, error) {
	c = c.WithDefaults()
	if len(names) == 0 {
		names = Default(c)
	}
	var ws []workload
	for _, n := range names {
		i := slices.IndexFunc(workloads, func(w workload) bool { return w.name == n })
		if i < 0 {
			var all []string
			for _, w := range workloads {
				all = append(all, w.name)
			}
			return nil, fmt.Errorf("unknown workload %q (have %s)", n, strings.Join(all, ", "))
		}
		ws = append(ws, workloads[i])
	}
	var shared store.Store
	if c.Store != "" {
		s, closeFn, err := OpenStore(ctx, c.Store)
		if err != nil {
			return nil, err
		}
		defer closeFn()
		shared = s
	}
	var out []*Result
	for _, w := range ws {
		r, err := runOne(ctx, c, w, shared)
		if err != nil {
			return out, fmt.Errorf("%s: %w", w.name, err)
		}
		r.Workload = w.name
		if r.Store == "" {
			r.Store = storeLabel(c.Store)
		}
		roundResult(r)
		out = append(out, r)
	}
	return out, nil
}

func runOne(ctx context.Context, c Config, w workload, shared store.Store) (*Result, error) {
	v := &env{cfg: c, store: shared, name: w.name}
	if shared == nil {
		dir, err := os.MkdirTemp("", "weir-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		s, closeFn, err := OpenStore(ctx, "sqlite:"+filepath.Join(dir, "weir.db"))
		if err != nil {
			return nil, err
		}
		defer closeFn()
		v.store = s
	}
	v.prog = startProgress(c.Progress, w.name)
	defer v.prog.stop()
	return w.run(ctx, v)
}

func storeLabel(dsn string) string {
	switch {
	case dsn == "":
		return "sqlite (fresh temp file)"
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return "postgres"
	}
	return dsn
}

// PostgresSchema is the schema the bench uses in a PostgreSQL database.
const PostgresSchema = "weir_bench"

// OpenStore opens a store by DSN: "sqlite:PATH" (durable commits) or
// "postgres://…" (in schema PostgresSchema: the bench's engines claim any
// runnable run, so they must not share a deployment's schema). The returned
// function closes it. This package opens SQLite only; the weir command
// replaces it with its own opener, which knows every backend.
var OpenStore = func(ctx context.Context, dsn string) (store.Store, func() error, error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(dsn, "sqlite:")
		s, err := sqlitestore.Open(ctx, path, nil)
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	case multiProcess(dsn):
		return nil, nil, errors.New("this build opens no PostgreSQL store (the weir command sets OpenStore to one that does)")
	}
	return nil, nil, fmt.Errorf("store %q: want sqlite:PATH or postgres://…", dsn)
}

// multiProcess reports whether several processes may open the store at once.
func multiProcess(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// env is what a workload runs with.
type env struct {
	cfg   Config
	store store.Store
	name  string
	prog  *progress
}

// engine returns an engine on the store executing conc runs at once:
// register its workflows, then call Work. Close it with the returned
// function.
func (v *env) engine(ctx context.Context, conc int) (*weir.Engine, func(), error) {
	e, err := weir.New(v.store, &weir.Config{
		Concurrency:  conc,
		PollInterval: 50 * time.Millisecond,
		Retry:        weir.RetryPolicy{InitialInterval: time.Millisecond, MaxInterval: 10 * time.Millisecond, Jitter: -1},
		Logger:       v.cfg.Logger,
		Writer:       weir.WriterConfig{Linger: v.cfg.Linger},
	})
	if err != nil {
		return nil, nil, err
	}
	return e, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = e.Close(cctx)
	}, nil
}

// fillChunk makes b a chunk that differs for every (tag, i): the tag and i
// in ten digits, then a fixed pattern (written once per buffer).
func fillChunk(b []byte, tag byte, i int) {
	if n := len(b); n > 11 && b[n-1] != 'a'+byte((n-1)%26) {
		for j := 11; j < n; j++ {
			b[j] = 'a' + byte(j%26)
		}
	}
	if len(b) > 0 {
		b[0] = tag
	}
	for j := min(10, len(b)-1); j >= 1; j-- {
		b[j] = '0' + byte(i%10)
		i /= 10
	}
}

// pct is the p-quantile of d in milliseconds (nearest rank); d is sorted in
// place.
func pct(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	if !slices.IsSorted(d) {
		slices.Sort(d)
	}
	i := int(math.Ceil(p*float64(len(d)))) - 1
	i = max(0, min(i, len(d)-1))
	return ms(d[i])
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func round(v float64) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	// Four significant digits.
	mag := math.Pow10(3 - int(math.Floor(math.Log10(math.Abs(v)))))
	return math.Round(v*mag) / mag
}

func roundResult(r *Result) {
	for _, p := range []*float64{&r.Seconds, &r.OpsPerSec, &r.BaselineOpsPerSec, &r.BaselineP50Ms, &r.BaselineP99Ms,
		&r.Ratio, &r.P50Ms, &r.P99Ms, &r.P999Ms, &r.MaxMs} {
		*p = round(*p)
	}
}

// progress prints "workload: N unit, T s" every second to w.
type progress struct {
	n    atomic.Int64
	unit atomic.Value
	done chan struct{}
	wg   sync.WaitGroup
}

func startProgress(w io.Writer, name string) *progress {
	p := &progress{done: make(chan struct{})}
	p.unit.Store("")
	if w == nil {
		return p
	}
	start := time.Now()
	p.wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		printed := false
		for {
			select {
			case <-p.done:
				if printed {
					fmt.Fprint(w, "\r\033[K")
				}
				return
			case <-t.C:
				fmt.Fprintf(w, "\r\033[Kweir bench: %s: %d %s, %.0fs", name, p.n.Load(), p.unit.Load(), time.Since(start).Seconds())
				printed = true
			}
		}
	})
	return p
}

func (p *progress) phase(unit string) { p.n.Store(0); p.unit.Store(unit) }
func (p *progress) add(n int64)       { p.n.Add(n) }
func (p *progress) stop() {
	select {
	case <-p.done:
	default:
		close(p.done)
	}
	p.wg.Wait()
}
