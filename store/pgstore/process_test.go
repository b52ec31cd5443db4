package pgstore_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/internal/pgtest"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/pgstore"
	"github.com/weirhq/weir/stream"
)

// The tests in this file run weir worker processes on one database: the
// test binary re-runs itself as TestPGWorkerProcess, which the parent kills
// with SIGKILL.

const (
	envWorkerSchema = "WEIR_TEST_PG_WORKER_SCHEMA"
	envWorkerDelay  = "WEIR_TEST_PG_WORKER_DELAY"
	envWorkerLease  = "WEIR_TEST_PG_WORKER_LEASE"
	envWorkerFreeze = "WEIR_TEST_PG_WORKER_FREEZE"
	envWorkerConc   = "WEIR_TEST_PG_WORKER_CONCURRENCY"
)

// registerProcessWorkflows registers the workflow the processes run: a
// workflow write, a step that streams n chunks (flushing every 5 and
// reporting it on progress), and another workflow write.
func registerProcessWorkflows(e *weir.Engine, progress io.Writer, delay time.Duration) *weir.Workflow[int, int] {
	var mu sync.Mutex
	// tail writes n chunks holding the time they were written, one every
	// interval: the live tail benchmark's source.
	weir.Register(e, "tail", func(ctx weir.Context, in tailInput) (int, error) {
		return weir.Step(ctx, "emit", func(sc weir.StepContext) (int, error) {
			w := sc.Stream("out")
			next := time.Now()
			for range in.N {
				if _, err := w.Write(strconv.AppendInt(nil, time.Now().UnixNano(), 10)); err != nil {
					return 0, err
				}
				next = next.Add(in.Interval)
				time.Sleep(time.Until(next))
			}
			return in.N, nil
		})
	})
	// limited holds a slot of limiter "llm" for in.Hold in one step, and
	// says on progress when its body starts and ends (its own clock):
	// the record of what ran, whatever the store says.
	weir.Register(e, "limited", func(ctx weir.Context, in limitedInput) (int, error) {
		step := weir.Step[int]
		if in.Async {
			step = func(ctx weir.Context, name string, fn func(weir.StepContext) (int, error), opts ...weir.StepOption) (int, error) {
				return weir.StepAsync(ctx, name, fn, opts...).Get(ctx)
			}
		}
		return step(ctx, "call", func(sc weir.StepContext) (int, error) {
			mu.Lock()
			fmt.Fprintf(progress, "body-start %s %d %d\n", sc.RunID(), sc.Attempt(), time.Now().UnixNano())
			mu.Unlock()
			defer func() {
				mu.Lock()
				fmt.Fprintf(progress, "body-end %s %d %d\n", sc.RunID(), sc.Attempt(), time.Now().UnixNano())
				mu.Unlock()
			}()
			if in.Gate != "" {
				// Held until the test opens the gate (another process:
				// a file), or the attempt ends.
				tick := time.NewTicker(5 * time.Millisecond)
				defer tick.Stop()
				for {
					if _, err := os.Stat(in.Gate); err == nil {
						break
					}
					select {
					case <-tick.C:
					case <-sc.Done():
						return 0, context.Cause(sc)
					}
				}
			}
			t := time.NewTimer(in.Hold) // the provider's call
			defer t.Stop()
			select {
			case <-t.C:
				return 1, nil
			case <-sc.Done():
				return 0, context.Cause(sc)
			}
		}, weir.WithLimiter("llm", &weir.LimitOptions{Key: in.Key, Priority: in.Priority}))
	})
	return weir.Register(e, "multi", func(ctx weir.Context, n int) (int, error) {
		if _, err := ctx.Stream("out").WriteString("begin"); err != nil {
			return 0, err
		}
		got, err := weir.Step(ctx, "emit", func(sc weir.StepContext) (int, error) {
			w := sc.Stream("out")
			for i := range n {
				if _, err := fmt.Fprintf(w, "chunk %03d", i); err != nil {
					return 0, err
				}
				if i%5 == 4 {
					if err := w.Flush(); err != nil {
						return 0, err
					}
					mu.Lock()
					fmt.Fprintf(progress, "acked %s %d %d\n", sc.RunID(), sc.Attempt(), i+1)
					mu.Unlock()
				}
				time.Sleep(delay)
			}
			return n, nil
		})
		if err != nil {
			return 0, err
		}
		if _, err := ctx.Stream("out").WriteString("end"); err != nil {
			return 0, err
		}
		return got, nil
	})
}

type limitedInput struct {
	Hold     time.Duration
	Key      string
	Priority int
	// Gate: the body waits until this file exists before its Hold.
	Gate string `json:",omitempty"`
	// Async: the step runs on a goroutine of its own (StepAsync).
	Async bool `json:",omitempty"`
}

type tailInput struct {
	N        int
	Interval time.Duration
}

func wantChunks(n int) []string {
	out := []string{"begin"}
	for i := range n {
		out = append(out, fmt.Sprintf("chunk %03d", i))
	}
	return append(out, "end")
}

// TestPGWorkerProcess is the body of a worker process; it does nothing in a
// normal test run.
func TestPGWorkerProcess(t *testing.T) {
	schema := os.Getenv(envWorkerSchema)
	if schema == "" {
		t.Skip("only runs as a child of the process tests")
	}
	delay, _ := time.ParseDuration(os.Getenv(envWorkerDelay))
	lease, _ := time.ParseDuration(os.Getenv(envWorkerLease))
	ctx := context.Background()
	notify, _ := time.ParseDuration(os.Getenv("WEIR_TEST_PG_NOTIFY_INTERVAL"))
	s, err := pgstore.Open(ctx, databaseURL(), &pgstore.Config{Schema: schema, MaxConns: 8, NotifyInterval: notify})
	if err != nil {
		t.Fatal(err)
	}
	conc, _ := strconv.Atoi(os.Getenv(envWorkerConc))
	if conc <= 0 {
		conc = 40
	}
	lineRuns, _ := strconv.Atoi(os.Getenv("WEIR_TEST_PG_WORKER_LINE_RUNS"))
	e, err := weir.New(s, &weir.Config{
		Concurrency: conc, PollInterval: 20 * time.Millisecond, LeaseTTL: lease, ParkAfter: 50 * time.Millisecond, LineRuns: lineRuns,
		Retry:  weir.RetryPolicy{InitialInterval: 10 * time.Millisecond, MaxInterval: 100 * time.Millisecond, MaxAttempts: 20},
		Logger: workerLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	progress := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		n, err := out.Write(p)
		out.Flush()
		return n, err
	})
	registerProcessWorkflows(e, progress, delay)
	if os.Getenv(envWorkerFreeze) != "" {
		// Freeze the whole process in the middle of a group commit, with
		// the transaction open and a run's row locked.
		var once sync.Once
		pgstore.SetLockedHook(func() {
			once.Do(func() {
				fmt.Fprintln(progress, "freezing")
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			})
		})
	}
	if err := e.Work(ctx); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(progress, "ready")
	select {} // until killed
}

// workerLogger is a worker's logger: its warnings to stderr with
// WEIR_TEST_PG_WORKER_LOG set (a lease lost, a slot lost), else none.
func workerLogger() *slog.Logger {
	if os.Getenv("WEIR_TEST_PG_WORKER_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// worker is a running worker process.
type worker struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	cond  *sync.Cond
	done  bool
}

func startWorker(t testing.TB, schema string, delay, lease time.Duration, env ...string) *worker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPGWorkerProcess$", "-test.v=false", "-test.count=1")
	cmd.Env = append(os.Environ(), envWorkerSchema+"="+schema, envWorkerDelay+"="+delay.String(), envWorkerLease+"="+lease.String(),
		"WEIR_TEST_DATABASE_URL="+databaseURL())
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &worker{cmd: cmd}
	w.cond = sync.NewCond(&w.mu)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.mu.Lock()
			w.lines = append(w.lines, sc.Text())
			w.cond.Broadcast()
			w.mu.Unlock()
		}
		w.mu.Lock()
		w.done = true
		w.cond.Broadcast()
		w.mu.Unlock()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return w
}

// waitFor waits until ok holds for the worker's output so far.
func (w *worker) waitFor(t testing.TB, what string, ok func(lines []string) bool) {
	t.Helper()
	timer := time.AfterFunc(30*time.Second, func() {
		w.mu.Lock()
		w.done = true
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer timer.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for !ok(w.lines) {
		if w.done {
			t.Fatalf("worker %d: no %s (exited or timed out)", w.cmd.Process.Pid, what)
		}
		w.cond.Wait()
	}
}

func (w *worker) kill(t *testing.T) {
	t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = w.cmd.Wait()
}

// ackedRuns counts the runs with a step in flight that reported acked
// chunks in lines.
func ackedRuns(lines []string) int {
	runs := map[string]bool{}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) == 4 && f[0] == "acked" {
			runs[f[1]] = true
		}
	}
	return len(runs)
}

// processHarness is the parent's view: a store and an engine that starts
// and reads runs but executes none.
type processHarness struct {
	schema string
	s      *pgstore.Store
	e      *weir.Engine
	wf     *weir.Workflow[int, int]
}

func newProcessHarness(t testing.TB) *processHarness {
	t.Helper()
	schema := newSchema(t)
	s := open(t, schema, nil)
	e, err := weir.New(s, &weir.Config{NoWorker: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return &processHarness{schema: schema, s: s, e: e, wf: registerProcessWorkflows(e, io.Discard, 0)}
}

func (h *processHarness) start(t *testing.T, n, chunks int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("run-%03d", i)
		if _, err := h.wf.Start(t.Context(), chunks, &weir.StartOptions{ID: id}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// waitAll waits until every run has ended, tolerating store errors (the
// database may be restarting) until the deadline.
func (h *processHarness) waitAll(t testing.TB, ids []string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	left := slices.Clone(ids)
	var lastErr error
	for len(left) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d runs have not ended after %v (first: %s; last error: %v)", len(left), len(ids), timeout, left[0], lastErr)
		}
		next := left[:0]
		for _, id := range left {
			r, err := h.s.GetRun(t.Context(), id)
			if err != nil {
				lastErr = err
				next = append(next, id)
				continue
			}
			if !r.Status.Terminal() {
				next = append(next, id)
			}
		}
		left = next
		if len(left) > 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// check checks every run: completed, and its stream holds each chunk once,
// in the live view (with dense offsets) and in the committed view. It
// returns how many runs' step had more than one attempt.
func (h *processHarness) check(t *testing.T, ids []string, chunks int) (retried int) {
	t.Helper()
	want := wantChunks(chunks)
	for _, id := range ids {
		r, err := h.s.GetRun(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != store.RunCompleted {
			t.Fatalf("run %s: %s %s", id, r.Status, r.Error)
		}
		for _, view := range []weir.View{weir.LiveView, weir.CommittedView} {
			var got []string
			next := int64(0)
			for rec, err := range h.e.Read(t.Context(), id, "out", &weir.ReadOptions{View: view}) {
				if err != nil {
					t.Fatal(err)
				}
				if view == weir.LiveView && rec.Offset != next {
					t.Fatalf("run %s: record at offset %d, want %d", id, rec.Offset, next)
				}
				next = rec.Offset + 1
				if rec.Kind == stream.KindData {
					got = append(got, string(rec.Data))
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("run %s: %v view has %d chunks, want each of %d once:\n%q", id, view, len(got), len(want), got)
			}
		}
		evs, err := h.s.ListEvents(t.Context(), id, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == store.EventStepStarted && ev.Name == "emit" && ev.Attempt > 1 {
				retried++
				break
			}
		}
	}
	return retried
}

// Three worker processes on one database run 200 runs whose steps stream;
// one is killed with SIGKILL in the middle of its steps; the others take
// its runs over. Every run completes, and every stream holds each chunk
// once, in the live view too: the new attempts adopted what the dead one
// wrote.
func TestProcessesKilledWorkerRunsTakenOver(t *testing.T) {
	const (
		runs   = 200
		chunks = 20
		delay  = 5 * time.Millisecond
		lease  = time.Second
	)
	h := newProcessHarness(t)
	var ws []*worker
	for i := range 3 {
		// The victim's steps are slow, so that some are surely in flight
		// when it dies, however late a loaded machine delivers its progress.
		d := delay
		if i == 0 {
			d = 8 * delay
		}
		w := startWorker(t, h.schema, d, lease)
		w.waitFor(t, "ready", func(l []string) bool { return slices.Contains(l, "ready") })
		ws = append(ws, w)
	}
	start := time.Now()
	ids := h.start(t, runs, chunks)
	victim := ws[0]
	victim.waitFor(t, "steps in flight", func(l []string) bool { return ackedRuns(l) >= 5 })
	victim.kill(t)
	victim.mu.Lock()
	inFlight := ackedRuns(victim.lines)
	victim.mu.Unlock()
	h.waitAll(t, ids, 45*time.Second)
	t.Logf("%d runs on 3 processes, one killed with %d runs in flight: all ended in %v", runs, inFlight, time.Since(start).Round(time.Millisecond))
	retried := h.check(t, ids, chunks)
	if retried == 0 {
		t.Fatal("no run's step was taken over by another process")
	}
	t.Logf("%d runs' steps were taken over", retried)
}

// pgRestart returns the command that restarts the test's PostgreSQL, or
// nil: only if the caller opted in (pgtest.RestartEnv).
func pgRestart() []string { return pgtest.RestartCommand() }

// PostgreSQL restarts while two worker processes run streaming steps: every
// connection is cut. Once it is back the runs go on, and nothing is lost or
// doubled.
func TestProcessesPostgresRestart(t *testing.T) {
	restart := pgRestart()
	if restart == nil {
		t.Skipf("restarts PostgreSQL: set %s=1 (pg_ctlcluster, as root) or to a command that does", pgtest.RestartEnv)
	}
	const (
		runs   = 40
		chunks = 40
		delay  = 25 * time.Millisecond
		lease  = 2 * time.Second
	)
	h := newProcessHarness(t)
	var ws []*worker
	for range 2 {
		w := startWorker(t, h.schema, delay, lease)
		w.waitFor(t, "ready", func(l []string) bool { return slices.Contains(l, "ready") })
		ws = append(ws, w)
	}
	var before time.Time
	if err := adminDo(t, func(ctx context.Context) error {
		return adminPool(t).QueryRow(ctx, `SELECT pg_postmaster_start_time()`).Scan(&before)
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ids := h.start(t, runs, chunks)
	// Steps in flight on either worker: under load one may claim them all.
	inFlight := time.Now().Add(30 * time.Second)
	for acked := 0; acked < 5; {
		acked = 0
		for _, w := range ws {
			w.mu.Lock()
			acked += ackedRuns(w.lines)
			w.mu.Unlock()
		}
		if time.Now().After(inFlight) {
			t.Fatalf("%d runs with steps in flight on the two workers after 30s, want 5", acked)
		}
		time.Sleep(20 * time.Millisecond) // polls the workers' output, bounded above
	}
	cut := time.Now()
	out, err := exec.Command(restart[0], restart[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("restart PostgreSQL: %v\n%s", err, out)
	}
	h.waitAll(t, ids, 45*time.Second)
	var after time.Time
	if err := adminDo(t, func(ctx context.Context) error {
		return adminPool(t).QueryRow(ctx, `SELECT pg_postmaster_start_time()`).Scan(&after)
	}); err != nil {
		t.Fatal(err)
	}
	if !after.After(before) {
		t.Fatalf("PostgreSQL was not restarted: started at %v before and after", after)
	}
	retried := h.check(t, ids, chunks)
	// The restart must have cut runs in the middle: started before it, done
	// after the server came back.
	across := 0
	for _, id := range ids {
		evs, err := h.s.ListEvents(t.Context(), id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if evs[0].At.Before(cut) && evs[len(evs)-1].At.After(after) {
			across++
		}
	}
	if across == 0 {
		t.Fatal("no run was in flight across the restart")
	}
	t.Logf("restart %v after the start, server back at +%v; %d runs across it, %d with a second attempt; all %d ended by +%v",
		cut.Sub(start).Round(time.Millisecond), after.Sub(start).Round(time.Millisecond), across, retried, runs,
		time.Since(start).Round(time.Millisecond))
}

// A worker frozen (SIGSTOP) between the two round trips of a group commit
// holds its transaction open, and with it a run's row lock, which rival
// claims skip (SKIP LOCKED). The server ends that transaction after
// Config.IdleInTransactionTimeout, below the lease: once the lease expires
// another worker takes the run over and completes it, each chunk once.
func TestProcessesFrozenInATransactionIsTakenOver(t *testing.T) {
	const (
		chunks = 10
		lease  = 2 * time.Second
	)
	h := newProcessHarness(t)
	frozen := startWorker(t, h.schema, 0, lease, envWorkerFreeze+"=1")
	frozen.waitFor(t, "ready", func(l []string) bool { return slices.Contains(l, "ready") })
	ids := h.start(t, 1, chunks)
	frozen.waitFor(t, "freeze", func(l []string) bool { return slices.Contains(l, "freezing") })
	start := time.Now()
	rival := startWorker(t, h.schema, 0, lease)
	rival.waitFor(t, "ready", func(l []string) bool { return slices.Contains(l, "ready") })
	h.waitAll(t, ids, 40*time.Second)
	t.Logf("a run locked by a frozen worker was taken over and completed %v after the freeze", time.Since(start).Round(time.Millisecond))
	h.check(t, ids, chunks)
	if err := frozen.cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the frozen worker is gone (%v): the test froze nothing", err)
	}
}
