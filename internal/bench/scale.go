package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// The scale workload: N real `weir server` processes on one PostgreSQL
// database, runs started through all of them over the runs API and executed
// by all of them. Its workflow, bench.emit, is registered by `weir server
// --bench-workflows`.

// EmitWorkflow is the bench's workflow in `weir server --bench-workflows`:
// one step that writes EmitInput.Chunks chunks of EmitInput.Size bytes to
// the run's stream EmitStream through its step writer (the shape of
// dbos-like's workflow).
const EmitWorkflow = "bench.emit"

// EmitStream is the run stream bench.emit writes to.
const EmitStream = "out"

// EmitInput is bench.emit's input.
type EmitInput struct {
	Chunks int `json:"chunks"`
	Size   int `json:"size"`
}

// EmitOutput is bench.emit's output. Worker and PID name the engine and
// process whose step attempt completed: which process executed the run.
type EmitOutput struct {
	Chunks int    `json:"chunks"`
	Bytes  int64  `json:"bytes"`
	Worker string `json:"worker"`
	PID    int    `json:"pid"`
}

// bench.emit's input limits: any client of the server may start it, so one
// run writes at most MaxEmitBytes.
const (
	MaxEmitChunks = 100_000
	MaxEmitSize   = 64 << 10
	MaxEmitBytes  = 64 << 20
)

// ErrEmitInput is a bench.emit input over the limits.
var ErrEmitInput = errors.New("bench.emit: input over the limits")

// Check refuses an input over the limits.
func (in EmitInput) Check() error {
	if in.Chunks < 1 || in.Chunks > MaxEmitChunks || in.Size < 1 || in.Size > MaxEmitSize || int64(in.Chunks)*int64(in.Size) > MaxEmitBytes {
		return fmt.Errorf("%w: %d chunks of %d bytes: 1 to %d chunks of 1 to %d bytes, at most %d bytes in all",
			ErrEmitInput, in.Chunks, in.Size, MaxEmitChunks, MaxEmitSize, MaxEmitBytes)
	}
	return nil
}

// EmitChunk is chunk i of a bench.emit run with chunks of size bytes: what
// a reader of its stream must get. Every attempt writes the same bytes, so
// a retried attempt's chunks are adopted.
func EmitChunk(size, i int) []byte {
	b := make([]byte, size)
	fillChunk(b, 'e', i)
	return b
}

// RegisterEmit registers bench.emit on e.
func RegisterEmit(e *weir.Engine) *weir.Workflow[EmitInput, EmitOutput] {
	worker, pid := e.Config().WorkerID, os.Getpid()
	return weir.Register(e, EmitWorkflow, func(ctx weir.Context, in EmitInput) (EmitOutput, error) {
		if err := in.Check(); err != nil {
			return EmitOutput{}, weir.NonRetryable(err)
		}
		return weir.Step(ctx, "emit", func(sc weir.StepContext) (EmitOutput, error) {
			w := sc.Stream(EmitStream)
			buf := make([]byte, in.Size)
			for j := range in.Chunks {
				fillChunk(buf, 'e', j)
				if _, err := w.Write(buf); err != nil {
					return EmitOutput{}, err
				}
			}
			return EmitOutput{Chunks: in.Chunks, Bytes: int64(in.Chunks) * int64(in.Size), Worker: worker, PID: pid}, nil
		})
	})
}

// namedOnly are the workloads Default leaves out: they run only when named.
// scale starts server processes and needs PostgreSQL.
var namedOnly = map[string]bool{"scale": true, "tracing": true, "flow": true, "schedules": true}

// scaleVerifyHook, if set (by tests), is called after the built-in checks of
// each round with a client of a server on that round's schema.
var scaleVerifyHook func(ctx context.Context, n int, c *client.Client) error

// scaleRound is what one round of N processes measured.
type scaleRound struct {
	n     int
	dur   time.Duration
	lat   []time.Duration
	runs  int
	chunk int64 // data chunks read back, all runs
	// byProc[i] is the runs whose step completed on child i (their output's
	// pid); metrics[i] its weir_runs_completed_total.
	byProc, metrics []int
	pids            []int
	retried         int // runs whose step took more than one attempt
	// CPU seconds in the timed window.
	cpuWeir            []float64
	cpuBench           float64
	cpuPGBackends      float64 // the servers' own PostgreSQL backends
	cpuPGAll           float64 // every postgres process on the machine
	cpuBusy, cpuWindow float64 // busy core-seconds of the machine; the window's seconds
	cpuSoftirq         float64
	pg                 pgDelta
	// counts is what the servers' stores asked of PostgreSQL in the
	// window, by their own counts (less the metrics reads themselves).
	counts store.Counts
	// backends is the servers' PostgreSQL connections at the window's end;
	// waits, what they were doing on average (sampled every 50 ms).
	backends int
	waits    map[string]float64
}

// runScale: for each N of Processes, Rounds times, N `weir server`
// processes on a fresh schema of the --store database; ScaleRuns runs of
// bench.emit started round-robin through their runs APIs, ScaleConcurrency
// per process at a time, each followed on its stream until the run ends.
// The baseline is N=1.
func runScale(ctx context.Context, v *env) (*Result, error) {
	c := v.cfg
	if !multiProcess(c.Store) {
		return nil, errors.New("scale runs several weir server processes on one database: it needs a PostgreSQL --store (postgres://…)")
	}
	if len(c.ServerCommand) == 0 {
		return nil, errors.New("scale needs Config.ServerCommand, the command that runs `weir server` (weir bench sets it to itself)")
	}
	procs := c.Processes
	if len(procs) == 0 {
		procs = []int{1, 2, 3}
	}
	for _, n := range procs {
		if n < 1 || n > 16 {
			return nil, fmt.Errorf("scale: %d processes: want 1 to 16", n)
		}
	}
	procs = slices.Compact(slices.Sorted(slices.Values(procs)))
	base, err := adminURL(c.Store)
	if err != nil {
		return nil, err
	}
	pcfg, err := pgx.ParseConfig(base)
	if err != nil {
		return nil, fmt.Errorf("scale: --store: %w", err)
	}
	pcfg.RuntimeParams["application_name"] = "weir-bench-scale-stats"
	conn, err := pgx.ConnectConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("scale: connect to PostgreSQL: %w", err)
	}
	ps := &pgStats{conn: conn}
	defer func() { ps.conn.Close(context.Background()) }()
	var notes []string
	if err := ps.init(ctx); err != nil {
		notes = append(notes, "statement counts left out: "+err.Error())
	}

	tag := fmt.Sprintf("%x", rand.Uint64()&0xffffffffff)
	rounds := max(c.ScaleRounds, 1)
	all := map[int][]*scaleRound{}
	for round := range rounds {
		for _, n := range procs {
			var r *scaleRound
			for try := 1; ; try++ {
				schema := fmt.Sprintf("weir_scale_%s_n%d_r%d_%d", tag, n, round+1, try)
				r, err = scaleOnce(ctx, v, ps, base, schema, n)
				// A PostgreSQL restart or a reset of pg_stat_statements
				// (another program's, on a shared server) spoils the
				// round's figures: it is run again (on a new connection),
				// twice at most.
				lost := err != nil && (isAdminShutdown(err) || ps.conn.Ping(ctx) != nil)
				if lost && ctx.Err() == nil {
					if nc, cerr := pgx.ConnectConfig(ctx, pcfg); cerr == nil {
						ps.conn.Close(context.Background())
						ps.conn = nc
					}
				}
				if derr := dropSchema(ps.conn, schema); err == nil && derr != nil {
					err = derr
				}
				if err != nil && (lost || errors.Is(err, errSpoiled)) && try < 3 && ctx.Err() == nil {
					notes = append(notes, fmt.Sprintf("N=%d round %d: run again: %v", n, round+1, err))
					continue
				}
				break
			}
			if err != nil {
				return nil, fmt.Errorf("with %d processes (round %d): %w", n, round+1, err)
			}
			all[n] = append(all[n], r)
			notes = append(notes, r.note(round+1))
		}
	}

	res := &Result{Unit: "runs", Ops: int64(c.ScaleRuns)}
	rps := func(n int) float64 {
		return median(all[n], func(r *scaleRound) float64 { return float64(r.runs) / r.dur.Seconds() })
	}
	first, last := procs[0], procs[len(procs)-1]
	for _, n := range procs {
		rs := all[n]
		p := fmt.Sprintf("n%d_", n)
		res.extra(p+"runs_per_sec", rps(n))
		res.extra(p+"chunks_per_sec", median(rs, func(r *scaleRound) float64 { return float64(r.chunk) / r.dur.Seconds() }))
		res.extra(p+"p50_ms", median(rs, func(r *scaleRound) float64 { return pct(r.lat, 0.5) }))
		res.extra(p+"p99_ms", median(rs, func(r *scaleRound) float64 { return pct(r.lat, 0.99) }))
		if n != first {
			res.extra(fmt.Sprintf("n%d_vs_n%d", n, first), rps(n)/rps(first))
		}
		res.extra(p+"processes_executing", median(rs, func(r *scaleRound) float64 {
			k := 0
			for _, x := range r.byProc {
				if x > 0 {
					k++
				}
			}
			return float64(k)
		}))
		perRun := func(f func(r *scaleRound) float64) float64 {
			return median(rs, func(r *scaleRound) float64 { return f(r) / float64(r.runs) })
		}
		res.extra(p+"cpu_weir_ms_per_run", perRun(func(r *scaleRound) float64 { return 1000 * sumF(r.cpuWeir) }))
		res.extra(p+"cpu_pg_ms_per_run", perRun(func(r *scaleRound) float64 { return 1000 * r.cpuPGBackends }))
		res.extra(p+"cpu_bench_ms_per_run", perRun(func(r *scaleRound) float64 { return 1000 * r.cpuBench }))
		res.extra(p+"machine_busy_cores", median(rs, func(r *scaleRound) float64 { return r.cpuBusy / r.cpuWindow }))
		res.extra(p+"weir_statements_per_run", perRun(func(r *scaleRound) float64 { return float64(r.counts.Statements) }))
		res.extra(p+"weir_round_trips_per_run", perRun(func(r *scaleRound) float64 { return float64(r.counts.RoundTrips) }))
		res.extra(p+"weir_commits_per_run", perRun(func(r *scaleRound) float64 { return float64(r.counts.Commits) }))
		res.extra(p+"weir_groups_per_run", perRun(func(r *scaleRound) float64 { return float64(r.counts.Groups) }))
		res.extra(p+"weir_group_ops_per_run", perRun(func(r *scaleRound) float64 { return float64(r.counts.GroupOps) }))
		if ps.statements {
			res.extra(p+"pg_statements_per_run", perRun(func(r *scaleRound) float64 { return float64(r.pg.statements) }))
			res.extra(p+"pg_commit_statements_per_run", perRun(func(r *scaleRound) float64 { return float64(r.pg.commitStmts) }))
			res.extra(p+"pg_statement_wal_bytes_per_run", perRun(func(r *scaleRound) float64 { return float64(r.pg.stmtWAL) }))
			res.extra(p+"pg_exec_ms_per_run", perRun(func(r *scaleRound) float64 { return r.pg.execMs }))
		}
		res.extra(p+"pg_xact_commit_per_run", perRun(func(r *scaleRound) float64 { return float64(r.pg.commits) }))
		res.extra(p+"pg_write_xacts_per_run", perRun(func(r *scaleRound) float64 { return float64(r.pg.xids) }))
		res.extra(p+"pg_wal_bytes_per_run", perRun(func(r *scaleRound) float64 { return float64(r.pg.walBytes) }))
		res.extra(p+"pg_wal_syncs_per_run", perRun(func(r *scaleRound) float64 { return float64(r.pg.walSyncs) }))
		res.extra(p+"cpu_softirq_ms_per_run", perRun(func(r *scaleRound) float64 { return 1000 * r.cpuSoftirq }))
		res.extra(p+"pg_connections", median(rs, func(r *scaleRound) float64 { return float64(r.backends) }))
		// What the servers' backends were doing, on average (backends).
		for name, keys := range map[string][]string{
			"cpu": {"CPU"}, "in_transaction": {"idle in transaction"}, "wal_sync": {"IO/WALSync"},
			"wal_write_lock": {"LWLock/WALWrite"}, "row_locks": {"Lock/transactionid", "Lock/tuple"}, "extend_lock": {"Lock/extend"},
		} {
			res.extra(p+"pg_busy_"+name, median(rs, func(r *scaleRound) float64 {
				var t float64
				for _, k := range keys {
					t += r.waits[k]
				}
				return t
			}))
		}
		if ps.statements {
			notes = append(notes, fmt.Sprintf("N=%d statements per run (last round; calls, mean time, mean WAL): %s", n, rs[len(rs)-1].pg.top(30, rs[len(rs)-1].runs)))
		}
		if n == last {
			res.Seconds = median(rs, func(r *scaleRound) float64 { return r.dur.Seconds() })
			res.OpsPerSec = rps(n)
			res.P50Ms, res.P99Ms = res.Extra[p+"p50_ms"], res.Extra[p+"p99_ms"]
		}
	}
	res.Baseline = fmt.Sprintf("the same runs through %d weir server process(es) (N=%d)", first, first)
	res.BaselineOpsPerSec = rps(first)
	res.Ratio = res.OpsPerSec / res.BaselineOpsPerSec
	res.RatioOf = fmt.Sprintf("runs/s with N=%d processes ÷ runs/s with N=%d (medians of %d rounds)", last, first, rounds)
	res.extra("runs", float64(c.ScaleRuns))
	res.extra("chunks_per_run", float64(c.ScaleChunks))
	res.extra("chunk_bytes", float64(c.ChunkSize))
	res.extra("concurrency_per_process", float64(c.ScaleConcurrency))
	res.Notes = append(notes,
		"a run: POST /v1/runs (round-robin over the processes), a committed-view long-poll of its stream until it closes (the run ends in that transaction), GET /v1/runs/{id}; the runs' events are checked after the timed window, through another server",
		"cpu_*: utime+stime from /proc in the timed window; pg: the servers' own backends (application_name); machine_busy_cores: /proc/stat of the whole machine, "+strconv.Itoa(runtime.NumCPU())+" cores",
		"pg_statements, pg_commit_statements, pg_statement_wal_bytes, pg_exec_ms: pg_stat_statements in the window (the servers' database); pg_write_xacts: transaction ids assigned in the window (cluster-wide); pg_wal_bytes: pg_current_wal_lsn() in the window (cluster-wide); pg_xact_commit (the servers' database) and pg_wal_syncs (pg_stat_wal, cluster-wide): from the servers' start to their exit, PostgreSQL flushing those statistics late")
	return res, nil
}

// scaleOnce runs one round of N processes on a fresh schema.
func scaleOnce(ctx context.Context, v *env, ps *pgStats, base, schema string, n int) (*scaleRound, error) {
	c := v.cfg
	app := "weir-scale-" + schema
	dsn, err := withParams(base, map[string]string{"schema": schema, "application_name": app})
	if err != nil {
		return nil, err
	}
	before, err := ps.snap(ctx, app, false)
	if err != nil {
		return nil, err
	}
	v.prog.phase(fmt.Sprintf("processes starting (N=%d)", n))
	kids, err := startServers(ctx, c.ServerCommand, dsn, n, false)
	if err != nil {
		return nil, err
	}
	defer killAll(kids) // on failure; a no-op once they were stopped
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c.ScaleConcurrency * n, IdleConnTimeout: time.Minute}}
	defer hc.CloseIdleConnections()
	cls := make([]*client.Client, n)
	for i, k := range kids {
		if cls[i], err = client.New(k.url, &client.Options{HTTPClient: hc}); err != nil {
			return nil, err
		}
	}

	r := &scaleRound{n: n, runs: c.ScaleRuns, byProc: make([]int, n), metrics: make([]int, n), cpuWeir: make([]float64, n)}
	pidIdx := map[int]int{}
	for i, k := range kids {
		r.pids = append(r.pids, k.pid)
		pidIdx[k.pid] = i
	}
	counts0, err := storeCounts(ctx, hc, kids)
	if err != nil {
		return nil, err
	}
	cpu0 := sampleCPU(kids)
	s0, err := ps.snap(ctx, app, true)
	if err != nil {
		return nil, err
	}
	stopWaits := make(chan struct{})
	waitsDone := make(chan error, 1)
	go func() {
		var err error
		r.waits, err = ps.sampleWaits(ctx, app, stopWaits)
		waitsDone <- err
	}()

	v.prog.phase(fmt.Sprintf("runs (N=%d)", n))
	wctx, cancel := context.WithTimeout(ctx, c.ScaleTimeout)
	defer cancel()
	in := EmitInput{Chunks: c.ScaleChunks, Size: c.ChunkSize}
	r.lat = make([]time.Duration, c.ScaleRuns)
	outPID := make([]int, c.ScaleRuns)
	var done, chunks atomic.Int64
	t0 := time.Now()
	firstErr := each(wctx, c.ScaleRuns, c.ScaleConcurrency*n, func(ctx context.Context, i int) error {
		t := time.Now()
		cl := cls[i%n]
		id := scaleRunID(i)
		k, pid, err := scaleRun(ctx, cl, id, in, nil)
		if err != nil {
			return fmt.Errorf("run %s through %s: %w", id, cl.URL(), err)
		}
		r.lat[i], outPID[i] = time.Since(t), pid
		chunks.Add(int64(k))
		done.Add(1)
		v.prog.add(1)
		return nil
	})
	r.dur = time.Since(t0)
	close(stopWaits)
	if err := <-waitsDone; err != nil {
		return nil, err
	}
	if firstErr != nil {
		if errors.Is(firstErr, context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, fmt.Errorf("%d of %d runs done within --scale-timeout %v (the rest pending or running): %w%s", done.Load(), c.ScaleRuns, c.ScaleTimeout, firstErr, tails(kids))
		}
		return nil, fmt.Errorf("%w%s", firstErr, tails(kids))
	}
	s1, err := ps.snap(ctx, app, true)
	if err != nil {
		return nil, err
	}
	cpu1 := sampleCPU(kids)
	counts1, err := storeCounts(ctx, hc, kids)
	if err != nil {
		return nil, err
	}
	r.counts = counts1.Sub(counts0)
	if s1.stmtsEpoch != s0.stmtsEpoch {
		return nil, fmt.Errorf("%w: pg_stat_statements was reset or evicted entries during the round (%s, then %s)", errSpoiled, s0.stmtsEpoch, s1.stmtsEpoch)
	}
	r.chunk = chunks.Load()
	for i := range kids {
		r.cpuWeir[i] = cpu1.procs[i] - cpu0.procs[i]
	}
	r.cpuBench = cpu1.self - cpu0.self
	r.cpuPGAll = cpu1.postgres - cpu0.postgres
	r.cpuBusy, r.cpuWindow = cpu1.busy-cpu0.busy, cpu1.at.Sub(cpu0.at).Seconds()
	r.cpuSoftirq = cpu1.softirq - cpu0.softirq
	r.cpuPGBackends = s1.backendCPU(s0)
	r.backends = len(s1.backends)
	for _, p := range outPID {
		i, ok := pidIdx[p]
		if !ok {
			return nil, fmt.Errorf("a run's output names pid %d, none of the servers' (%v)", p, r.pids)
		}
		r.byProc[i]++
	}
	for i, k := range kids {
		if r.metrics[i], err = completedMetric(ctx, hc, k.url); err != nil {
			return nil, err
		}
	}

	// The servers stop (their backends flush their statistics as they
	// exit), then one that executes nothing checks every run.
	v.prog.phase(fmt.Sprintf("checking (N=%d)", n))
	if err := stopAll(kids); err != nil {
		return nil, err
	}
	after, err := ps.snap(ctx, app, false)
	if err != nil {
		return nil, err
	}
	r.pg = ps.delta(s0, s1, before, after)
	check, err := startServers(ctx, c.ServerCommand, dsn, 1, true)
	if err != nil {
		return nil, err
	}
	defer killAll(check)
	cl, err := client.New(check[0].url, &client.Options{HTTPClient: hc})
	if err != nil {
		return nil, err
	}
	if r.retried, err = checkScaleRuns(ctx, cl, c.ScaleRuns, c.ScaleConcurrency); err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	if scaleVerifyHook != nil {
		if err := scaleVerifyHook(ctx, n, cl); err != nil {
			return nil, err
		}
	}
	if err := stopAll(check); err != nil {
		return nil, err
	}
	return r, nil
}

func scaleRunID(i int) string { return fmt.Sprintf("scale-%06d", i) }

// scaleRun starts one run and follows its stream in the committed view until
// the stream closes, which happens in the transaction that ends the run;
// then it reads the run. It returns the chunks read and the pid of the
// process that executed the step.
func scaleRun(ctx context.Context, cl *client.Client, id string, in EmitInput, opts *client.StartOptions) (int, int, error) {
	o := client.StartOptions{}
	if opts != nil {
		o = *opts
	}
	o.ID = id
	if _, _, err := cl.Start(ctx, EmitWorkflow, in, &o); err != nil {
		return 0, 0, err
	}
	want := EmitChunk(in.Size, 0)
	chunks := 0
	// A follower's first read waits on the server for the stream, which
	// the step writer creates with its first batch.
	for rec, err := range cl.Read(ctx, id, EmitStream, &client.ReadOptions{Follow: true, View: stream.CommittedView}) {
		if err != nil {
			return 0, 0, err
		}
		if rec.Kind != stream.KindData {
			continue
		}
		fillChunk(want, 'e', chunks)
		if string(rec.Data) != string(want) {
			return 0, 0, fmt.Errorf("chunk %d of stream %s: %q, want %q", chunks, store.RunStreamPath(id, EmitStream), rec.Data, want)
		}
		chunks++
	}
	run, err := cl.GetRun(ctx, id)
	if err != nil {
		return 0, 0, err
	}
	if run.Status != store.RunCompleted {
		return 0, 0, fmt.Errorf("its stream closed with the run %s (%s)", run.Status, run.Error)
	}
	if chunks != in.Chunks {
		return 0, 0, fmt.Errorf("%d chunks in its stream, want %d", chunks, in.Chunks)
	}
	var out EmitOutput
	if err := json.Unmarshal(run.Output, &out); err != nil {
		return 0, 0, fmt.Errorf("its output %s: %w", run.Output, err)
	}
	return chunks, out.PID, nil
}

// checkScaleRuns checks through the runs API that the store holds exactly
// runs runs of bench.emit, the ids the bench started, each completed once
// (one run_completed event, no failure); it returns how many took more than
// one step attempt.
func checkScaleRuns(ctx context.Context, cl *client.Client, runs, conc int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	seen := map[string]bool{}
	for run, err := range cl.Runs(ctx, &client.ListOptions{Limit: 1000}) {
		if err != nil {
			return 0, err
		}
		if run.Workflow != EmitWorkflow || run.Status != store.RunCompleted || seen[run.ID] {
			return 0, fmt.Errorf("run %s: %s %s (seen before: %v)", run.ID, run.Workflow, run.Status, seen[run.ID])
		}
		seen[run.ID] = true
	}
	if len(seen) != runs {
		return 0, fmt.Errorf("%d runs in the store, want %d", len(seen), runs)
	}
	for i := range runs {
		if !seen[scaleRunID(i)] {
			return 0, fmt.Errorf("run %s is missing", scaleRunID(i))
		}
	}
	var retried atomic.Int64
	err := each(ctx, runs, conc, func(ctx context.Context, i int) error {
		evs, err := cl.Events(ctx, scaleRunID(i), 0)
		if err != nil {
			return err
		}
		var ended, started, stepped int
		for _, e := range evs {
			switch e.Type {
			case store.EventRunCompleted:
				ended++
			case store.EventRunFailed, store.EventRunCancelled:
				ended += 100
			case store.EventStepStarted:
				started++
			case store.EventStepCompleted:
				stepped++
			}
		}
		if ended != 1 || stepped != 1 {
			return fmt.Errorf("run %s: %d run ends and %d step completions in its log, want 1 and 1", scaleRunID(i), ended, stepped)
		}
		if started > 1 {
			retried.Add(1)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return int(retried.Load()), nil
}

// note is one line on a round.
func (r *scaleRound) note(round int) string {
	var who []string
	for i := range r.byProc {
		who = append(who, fmt.Sprintf("p%d (pid %d) %d [metrics %d]", i+1, r.pids[i], r.byProc[i], r.metrics[i]))
	}
	var weirCPU []string
	for _, s := range r.cpuWeir {
		weirCPU = append(weirCPU, strconv.FormatFloat(round2(s), 'f', -1, 64))
	}
	return fmt.Sprintf("N=%d round %d: %d runs in %.2f s: %.0f runs/s, %.0f chunks/s, p50 %.1f ms, p99 %.1f ms, %d retried; executed by %s; CPU s: weir %s, bench %.2f, pg backends %.2f, all postgres %.2f, machine %.2f of %.2f core-s (softirq %.2f, other processes %.2f); %d pg connections, active on average: %s; pg per run: %s; weir's stores per run: %s",
		r.n, round, r.runs, r.dur.Seconds(), float64(r.runs)/r.dur.Seconds(), float64(r.chunk)/r.dur.Seconds(), pct(r.lat, 0.5), pct(r.lat, 0.99), r.retried,
		strings.Join(who, ", "), strings.Join(weirCPU, "+"), r.cpuBench, r.cpuPGBackends, r.cpuPGAll, r.cpuBusy, float64(runtime.NumCPU())*r.cpuWindow,
		r.cpuSoftirq, r.cpuBusy-r.cpuSoftirq-sumF(r.cpuWeir)-r.cpuBench-r.cpuPGAll, r.backends, waitsNote(r.waits), r.pg.perRun(r.runs), countsNote(r.counts, r.runs))
}

// countsNote is what the stores asked of the database per run.
func countsNote(c store.Counts, runs int) string {
	per := func(v int64) float64 { return float64(v) / float64(max(runs, 1)) }
	return fmt.Sprintf("%.1f statements in %.1f round trips, %.2f commits, %.2f group commits of %.1f writes each",
		per(c.Statements), per(c.RoundTrips), per(c.Commits), per(c.Groups), float64(c.GroupOps)/float64(max(c.Groups, 1)))
}

// waitsNote lists the mean backends in each state, the busiest first.
func waitsNote(w map[string]float64) string {
	keys := make([]string, 0, len(w))
	for k := range w {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if w[a] != w[b] {
			if w[a] > w[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, w[k]))
	}
	return strings.Join(parts, ", ")
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }

func sumF(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// median is the median of f over rs.
func median(rs []*scaleRound, f func(*scaleRound) float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

// ---- the server processes ----

// child is one `weir server` process.
type child struct {
	cmd    *exec.Cmd
	pid    int
	url    string
	exited chan struct{}
	err    error // cmd.Wait's, once exited is closed
	tail   *tailBuffer
}

var listeningLine = regexp.MustCompile(`listening on (http://\S+)`)

// startServers starts n `weir server` processes on free loopback ports and
// returns once each said where it listens and answered /healthz, or kills
// them all.
func startServers(ctx context.Context, command []string, dsn string, n int, noWorker bool) ([]*child, error) {
	var kids []*child
	for range n {
		args := append(append([]string(nil), command[1:]...), "--addr", "127.0.0.1:0", "--store", dsn, "--bench-workflows", "--no-demo")
		if noWorker {
			args = append(args, "--no-worker")
		}
		cmd := exec.Command(command[0], args...)
		// The children die with the bench, however it ends.
		setDeathSignal(cmd)
		k := &child{cmd: cmd, exited: make(chan struct{}), tail: &tailBuffer{max: 16 << 10}}
		cmd.Stderr = k.tail
		out, err := cmd.StdoutPipe()
		if err != nil {
			killAll(kids)
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			killAll(kids)
			return nil, fmt.Errorf("start %s: %w", command[0], err)
		}
		k.pid = cmd.Process.Pid
		addr := make(chan string, 1)
		// Reading stdout to its end before Wait: Wait closes the pipe.
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				line := sc.Text()
				_, _ = k.tail.Write([]byte(line + "\n"))
				if m := listeningLine.FindStringSubmatch(line); m != nil {
					select {
					case addr <- m[1]:
					default:
					}
				}
			}
			_, _ = io.Copy(io.Discard, out)
			k.err = cmd.Wait()
			close(k.exited)
		}()
		kids = append(kids, k)
		deadline := time.NewTimer(30 * time.Second)
		select {
		case k.url = <-addr:
			deadline.Stop()
		case <-k.exited:
			deadline.Stop()
			killAll(kids)
			return nil, fmt.Errorf("weir server exited at start (%v): %s", k.err, k.tail)
		case <-deadline.C:
			killAll(kids)
			return nil, fmt.Errorf("weir server (pid %d) did not say where it listens within 30 s: %s", k.pid, k.tail)
		case <-ctx.Done():
			deadline.Stop()
			killAll(kids)
			return nil, ctx.Err()
		}
	}
	for _, k := range kids {
		if err := waitHealthy(ctx, k, 30*time.Second); err != nil {
			killAll(kids)
			return nil, err
		}
	}
	return kids, nil
}

// waitHealthy asks /healthz until it answers 200, for at most d.
func waitHealthy(ctx context.Context, k *child, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	cl, err := client.New(k.url, nil)
	if err != nil {
		return err
	}
	pause := 5 * time.Millisecond
	for {
		err := cl.Health(ctx)
		if err == nil {
			return nil
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("weir server at %s not healthy within %v: %v: %s", k.url, d, err, k.tail)
		case <-k.exited:
			t.Stop()
			return fmt.Errorf("weir server at %s exited (%v): %s", k.url, k.err, k.tail)
		case <-t.C:
		}
		pause = min(2*pause, 200*time.Millisecond)
	}
}

// stopAll stops the processes with SIGTERM (they drain and release their
// runs) and waits for them, killing one that takes over 20 s.
func stopAll(kids []*child) error {
	var errs []error
	for _, k := range kids {
		_ = k.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, k := range kids {
		t := time.NewTimer(20 * time.Second)
		select {
		case <-k.exited:
			if k.err != nil {
				errs = append(errs, fmt.Errorf("weir server pid %d: %v: %s", k.pid, k.err, k.tail))
			}
		case <-t.C:
			_ = k.cmd.Process.Kill()
			<-k.exited
			errs = append(errs, fmt.Errorf("weir server pid %d did not stop within 20 s of SIGTERM: killed", k.pid))
		}
		t.Stop()
	}
	return errors.Join(errs...)
}

// killAll kills the processes still running and waits for them.
func killAll(kids []*child) {
	for _, k := range kids {
		select {
		case <-k.exited:
		default:
			_ = k.cmd.Process.Kill()
		}
	}
	for _, k := range kids {
		<-k.exited
	}
}

// tails is the last output of each process, for an error.
func tails(kids []*child) string {
	var b strings.Builder
	for _, k := range kids {
		fmt.Fprintf(&b, "\n--- weir server pid %d (%s):\n%s", k.pid, k.url, k.tail)
	}
	return b.String()
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// completedMetric reads weir_runs_completed_total from a server's /metrics:
// the runs that ended on that process, by its own count.
func completedMetric(ctx context.Context, hc *http.Client, base string) (int, error) {
	m, err := readMetrics(ctx, hc, base)
	return int(m["weir_runs_completed_total"]), err
}

// readMetrics reads a server's /metrics: each sample without labels, by
// name.
func readMetrics(ctx context.Context, hc *http.Client, base string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			out[name] = f
		}
	}
	return out, sc.Err()
}

// storeCounts sums what the servers' stores asked of PostgreSQL, by their
// own counts (store.Counts, in /metrics).
func storeCounts(ctx context.Context, hc *http.Client, kids []*child) (store.Counts, error) {
	var c store.Counts
	for _, k := range kids {
		m, err := readMetrics(ctx, hc, k.url)
		if err != nil {
			return c, err
		}
		c.Statements += int64(m["weir_store_statements_total"])
		c.RoundTrips += int64(m["weir_store_round_trips_total"])
		c.Commits += int64(m["weir_store_commits_total"])
		c.Groups += int64(m["weir_store_groups_total"])
		c.GroupOps += int64(m["weir_store_group_ops_total"])
	}
	return c, nil
}

// ---- PostgreSQL's own counts ----

// adminURL is the --store URL without weir's schema parameter, which
// PostgreSQL would take for a setting.
func adminURL(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("scale: --store: %w", err)
	}
	q := u.Query()
	q.Del("schema")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// withParams is dsn with the query parameters set.
func withParams(dsn string, params map[string]string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// errSpoiled is a round whose figures something else spoiled.
var errSpoiled = errors.New("the round's figures are spoiled")

// isAdminShutdown reports whether err is PostgreSQL ending the connection
// (a shutdown or restart: SQLSTATE 57P01-57P03).
func isAdminShutdown(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && strings.HasPrefix(pe.Code, "57P")
}

func dropSchema(conn *pgx.Conn, schema string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	if err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	return nil
}

// pgStats reads PostgreSQL's counters over the bench's own connection.
type pgStats struct {
	conn       *pgx.Conn
	statements bool // pg_stat_statements is there
}

// init finds out whether pg_stat_statements can be read.
func (ps *pgStats) init(ctx context.Context) error {
	var ok bool
	if err := ps.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements')`).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return errors.New("pg_stat_statements is not installed in this database (shared_preload_libraries = 'pg_stat_statements', then CREATE EXTENSION pg_stat_statements)")
	}
	var n int64
	if err := ps.conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_statements`).Scan(&n); err != nil {
		return fmt.Errorf("pg_stat_statements: %w", err)
	}
	ps.statements = true
	return nil
}

// pgSnap is PostgreSQL's counters at one moment.
type pgSnap struct {
	lsn, xid uint64
	commits  int64 // pg_stat_database.xact_commit of this database
	walSyncs int64 // pg_stat_wal.wal_sync
	stmts    map[int64]stmtCount
	// stmtsEpoch is pg_stat_statements_info's reset time and evictions.
	stmtsEpoch string
	backends   map[int]float64 // the servers' backends: pid → CPU seconds
}

type stmtCount struct {
	query    string
	calls    int64
	walBytes int64   // the WAL its executions wrote
	execMs   float64 // their execution time
}

// snap reads the counters; with live, the statements and the servers'
// backends' CPU too.
func (ps *pgStats) snap(ctx context.Context, app string, live bool) (*pgSnap, error) {
	s := &pgSnap{}
	var lsn, xid string
	err := ps.conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, pg_snapshot_xmax(pg_current_snapshot())::text,
		(SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
		(SELECT wal_sync FROM pg_stat_wal)`).Scan(&lsn, &xid, &s.commits, &s.walSyncs)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL's statistics: %w", err)
	}
	if s.lsn, err = parseLSN(lsn); err != nil {
		return nil, err
	}
	if s.xid, err = strconv.ParseUint(xid, 10, 64); err != nil {
		return nil, err
	}
	if !live {
		return s, nil
	}
	if ps.statements {
		if err := ps.conn.QueryRow(ctx, `SELECT stats_reset::text || ' ' || dealloc FROM pg_stat_statements_info`).Scan(&s.stmtsEpoch); err != nil {
			return nil, fmt.Errorf("pg_stat_statements_info: %w", err)
		}
		rows, err := ps.conn.Query(ctx, `SELECT coalesce(queryid, 0), query, calls, wal_bytes::bigint, total_exec_time FROM pg_stat_statements
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`)
		if err != nil {
			return nil, fmt.Errorf("pg_stat_statements: %w", err)
		}
		s.stmts = map[int64]stmtCount{}
		for rows.Next() {
			var id int64
			var sc stmtCount
			if err := rows.Scan(&id, &sc.query, &sc.calls, &sc.walBytes, &sc.execMs); err != nil {
				rows.Close()
				return nil, err
			}
			// The bench's own queries read statistics; weir's never do.
			if strings.Contains(sc.query, "pg_stat_") || strings.Contains(sc.query, "pg_current_wal_lsn") {
				continue
			}
			prev := s.stmts[id]
			s.stmts[id] = stmtCount{query: sc.query, calls: prev.calls + sc.calls, walBytes: prev.walBytes + sc.walBytes, execMs: prev.execMs + sc.execMs}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	rows, err := ps.conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
	if err != nil {
		return nil, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	s.backends = map[int]float64{}
	for _, p := range pids {
		if t, ok := procCPU(int(p)); ok {
			s.backends[int(p)] = t
		}
	}
	return s, nil
}

// sampleWaits samples the servers' backends every 50 ms until stop is
// closed and returns the mean number of them in each state: "CPU" (active,
// waiting on nothing), the wait event of an active one (IO/WALSync,
// LWLock/WALWrite, Lock/tuple …), or "idle in transaction" (PostgreSQL
// waiting for weir between a group commit's round trips).
func (ps *pgStats) sampleWaits(ctx context.Context, app string, stop <-chan struct{}) (map[string]float64, error) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	sum := map[string]float64{}
	samples := 0
	for {
		select {
		case <-stop:
			for k := range sum {
				sum[k] /= float64(max(samples, 1))
			}
			return sum, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		rows, err := ps.conn.Query(ctx, `SELECT coalesce(state, ''), coalesce(wait_event_type || '/' || wait_event, '')
			FROM pg_stat_activity WHERE application_name = $1`, app)
		if err != nil {
			return nil, fmt.Errorf("pg_stat_activity: %w", err)
		}
		for rows.Next() {
			var state, wait string
			if err := rows.Scan(&state, &wait); err != nil {
				rows.Close()
				return nil, err
			}
			switch {
			case state == "active" && wait == "":
				sum["CPU"]++
			case state == "active":
				sum[wait]++
			case strings.HasPrefix(state, "idle in transaction"):
				sum["idle in transaction"]++
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		samples++
	}
}

// backendCPU is the CPU the servers' backends used since s0: a backend
// that connected since counts whole.
func (s *pgSnap) backendCPU(s0 *pgSnap) float64 {
	var t float64
	for p, c := range s.backends {
		t += c - s0.backends[p]
	}
	return t
}

func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("WAL position %q", s)
	}
	return h<<32 | l, nil
}

// pgDelta is what PostgreSQL counted for one round.
type pgDelta struct {
	statements, commitStmts int64
	byStmt                  []stmtCount
	// stmtWAL and execMs are the servers' statements' WAL and execution
	// time (pg_stat_statements: this database only, where the WAL position
	// is the whole cluster's).
	stmtWAL           int64
	execMs            float64
	xids, walBytes    int64
	commits, walSyncs int64
}

// delta: statements, transaction ids and WAL between s0 and s1 (the timed
// window); commits and WAL syncs, which PostgreSQL reports late, between
// before and after (the servers' whole life).
func (ps *pgStats) delta(s0, s1, before, after *pgSnap) pgDelta {
	d := pgDelta{
		xids: int64(s1.xid - s0.xid), walBytes: int64(s1.lsn - s0.lsn),
		commits: after.commits - before.commits, walSyncs: after.walSyncs - before.walSyncs,
	}
	for id, c := range s1.stmts {
		n := c.calls - s0.stmts[id].calls
		if n <= 0 {
			continue
		}
		d.statements += n
		d.stmtWAL += c.walBytes - s0.stmts[id].walBytes
		d.execMs += c.execMs - s0.stmts[id].execMs
		if q := strings.ToUpper(strings.TrimSpace(c.query)); strings.HasPrefix(q, "COMMIT") {
			d.commitStmts += n
		}
		d.byStmt = append(d.byStmt, stmtCount{query: c.query, calls: n, walBytes: c.walBytes - s0.stmts[id].walBytes, execMs: c.execMs - s0.stmts[id].execMs})
	}
	slices.SortFunc(d.byStmt, func(a, b stmtCount) int { return int(b.calls - a.calls) })
	return d
}

func (d pgDelta) perRun(runs int) string {
	r := float64(runs)
	s := ""
	if d.byStmt != nil {
		s = fmt.Sprintf("%.1f statements (%.1f COMMIT, %.2f ms executing, %.0f WAL bytes), ", float64(d.statements)/r, float64(d.commitStmts)/r, d.execMs/r, float64(d.stmtWAL)/r)
	}
	return s + fmt.Sprintf("%.1f write transactions, %.0f WAL bytes, %.1f xact_commit, %.2f WAL syncs",
		float64(d.xids)/r, float64(d.walBytes)/r, float64(d.commits)/r, float64(d.walSyncs)/r)
}

// top lists the k most called statements, per run.
func (d pgDelta) top(k, runs int) string {
	var parts []string
	for _, s := range d.byStmt[:min(k, len(d.byStmt))] {
		q := strings.Join(strings.Fields(s.query), " ")
		if len(q) > 70 {
			q = q[:70] + "…"
		}
		parts = append(parts, fmt.Sprintf("%.2f× (%.3f ms, %.0f WAL bytes) %q", float64(s.calls)/float64(runs), s.execMs/float64(s.calls), float64(s.walBytes)/float64(s.calls), q))
	}
	return strings.Join(parts, "; ")
}

// ---- CPU, from /proc (Linux; zero elsewhere) ----

// clockTick is USER_HZ, the unit of /proc's CPU times: 100 on Linux.
const clockTick = 100

type cpuSample struct {
	at       time.Time
	procs    []float64 // the children's CPU seconds
	self     float64
	postgres float64 // every process named postgres
	busy     float64 // the machine's busy core-seconds since boot
	softirq  float64 // of which in softirqs (loopback TCP, mostly), no process's
}

func sampleCPU(kids []*child) cpuSample {
	s := cpuSample{at: time.Now()}
	for _, k := range kids {
		t, _ := procCPU(k.pid)
		s.procs = append(s.procs, t)
	}
	s.self, _ = procCPU(os.Getpid())
	if ents, err := os.ReadDir("/proc"); err == nil {
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if b, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && strings.TrimSpace(string(b)) == "postgres" {
				t, _ := procCPU(pid)
				s.postgres += t
			}
		}
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		// cpu user nice system idle iowait irq softirq steal …
		for i := 1; i < len(f) && i <= 8; i++ {
			if i == 4 || i == 5 {
				continue
			}
			x, _ := strconv.ParseFloat(f[i], 64)
			s.busy += x / clockTick
			if i == 7 {
				s.softirq = x / clockTick
			}
		}
	}
	return s
}

// procCPU is a process's user and system CPU seconds.
func procCPU(pid int) (float64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid …: the comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return (u + st) / clockTick, true
}
