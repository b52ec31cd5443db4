package weir_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/internal/pgtest"
	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/pgstore"
	"github.com/weirhq/weir/store/sqlitestore"
	"github.com/weirhq/weir/stream"
)

// The tests in this file run real worker processes: the test binary re-runs
// itself as TestWorkerProcess, which the parent kills with SIGKILL.

const (
	envWorkerDB = "WEIR_TEST_WORKER_DB"
	// envWorkerPG, instead of envWorkerDB, runs the worker on the test
	// PostgreSQL server, in this schema.
	envWorkerPG  = "WEIR_TEST_WORKER_PG_SCHEMA"
	envWorkerRun = "WEIR_TEST_WORKER_RUN"
	// envWorkerDieAfterChild makes the worker kill itself right after the
	// Record that ended a child run returns.
	envWorkerDieAfterChild = "WEIR_TEST_WORKER_DIE_AFTER_CHILD"
	// envWorkerHTTP makes the worker serve the HTTP API on a loopback port
	// it prints ("http ADDR").
	envWorkerHTTP = "WEIR_TEST_WORKER_HTTP"
	// envWorkerBlock makes the worker's "pending" workflow block after its
	// step, and its step outcomes wait an hour to be written.
	envWorkerBlock = "WEIR_TEST_WORKER_BLOCK"
	killChunks     = 200
)

// workerWorkflows registers the workflows the worker processes run.
func workerWorkflows(e *weir.Engine, progress io.Writer) {
	weir.Register(e, "killme", func(ctx weir.Context, n int) (int, error) {
		if _, err := ctx.Stream("out").WriteString("begin"); err != nil {
			return 0, err
		}
		got, err := weir.Step(ctx, "emit", func(sc weir.StepContext) (int, error) {
			w := sc.Stream("out")
			for i := range n {
				if _, err := fmt.Fprintf(w, "chunk %03d", i); err != nil {
					return 0, err
				}
				if i%10 == 9 {
					if err := w.Flush(); err != nil {
						return 0, err
					}
					fmt.Fprintf(progress, "attempt %d acked %d\n", sc.Attempt(), i+1)
				}
				time.Sleep(2 * time.Millisecond)
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
	// fanout: 4 steps at once, each streaming 40 chunks to one stream.
	weir.Register(e, "fanout", func(ctx weir.Context, _ struct{}) (int, error) {
		var fs []*weir.Future[int]
		for i := range 4 {
			fs = append(fs, weir.StepAsync(ctx, "part", func(sc weir.StepContext) (int, error) {
				w := sc.Stream("out")
				for k := range 40 {
					if _, err := fmt.Fprintf(w, "p%d-%02d", i, k); err != nil {
						return 0, err
					}
					if k%10 == 9 {
						if err := w.Flush(); err != nil {
							return 0, err
						}
						fmt.Fprintf(progress, "part %d attempt %d acked %d\n", i, sc.Attempt(), k+1)
					}
					time.Sleep(3 * time.Millisecond)
				}
				return i, nil
			}))
		}
		out, err := weir.All(ctx, fs...)
		return len(out), err
	})
	// hookwait: waits for a payload; the test delivers it with the worker
	// dead (phase "before"), or a step of the run delivers it and the run
	// dies before taking it (phase "after").
	weir.Register(e, "hookwait", func(ctx weir.Context, phase string) (string, error) {
		h, err := weir.NewHook[string](ctx, "proc-hook")
		if err != nil {
			return "", err
		}
		if phase == "after" {
			if _, err := weir.Step(ctx, "deliver", func(sc weir.StepContext) (int64, error) {
				res, err := e.DeliverHook(sc, "proc-hook", []byte(`"from a step"`), &weir.DeliverOptions{IdempotencyKey: "once"})
				if err != nil {
					return 0, err
				}
				return res.Seq, nil
			}); err != nil {
				return "", err
			}
			weir.Step(ctx, "stall", func(sc weir.StepContext) (int, error) {
				// A flushed write makes the attempt's start durable: the
				// resume is attempt 2.
				fmt.Fprint(sc.Stream("out"), "stalling")
				if err := sc.Stream("out").Flush(); err != nil {
					return 0, err
				}
				fmt.Fprintf(progress, "delivered, attempt %d\n", sc.Attempt())
				if sc.Attempt() == 1 {
					<-sc.Done() // killed here
				}
				return 0, nil
			})
		} else {
			fmt.Fprintln(progress, "waiting")
		}
		return h.Receive(ctx)
	})
	// parentchild: a parent waits for a child that runs a while.
	weir.Register(e, "child", func(ctx weir.Context, n int) (int, error) {
		return weir.Step(ctx, "slow", func(sc weir.StepContext) (int, error) {
			fmt.Fprintf(progress, "child attempt %d\n", sc.Attempt())
			time.Sleep(300 * time.Millisecond)
			return n * 2, nil
		})
	})
	weir.Register(e, "parentchild", func(ctx weir.Context, n int) (int, error) {
		c := weir.StartChild(ctx, weir.WorkflowOf[int, int](e, "child"), n, nil)
		return c.Get(ctx)
	})
	// timedout: attempt 1 outlives its timeout and is still running when
	// the worker dies.
	weir.Register(e, "timedout", func(ctx weir.Context, _ struct{}) (string, error) {
		return weir.Step(ctx, "stuck", func(sc weir.StepContext) (string, error) {
			w := sc.Stream("out")
			fmt.Fprintf(w, "attempt %d", sc.Attempt())
			_ = w.Flush()
			if sc.Attempt() == 1 {
				fmt.Fprintln(progress, "hanging")
				time.Sleep(time.Hour) // ignores its context
			}
			if sc.Attempt() == 2 {
				fmt.Fprintln(progress, "attempt 2 running")
				time.Sleep(200 * time.Millisecond)
			}
			return fmt.Sprintf("attempt %d", sc.Attempt()), nil
		}, weir.WithTimeout(100*time.Millisecond))
	})
	// pending: a step's outcome waits in memory (StepOutcomeDelay) while
	// the workflow code after it blocks, in the first worker only.
	weir.Register(e, "pending", func(ctx weir.Context, _ struct{}) (int, error) {
		n, err := weir.Step(ctx, "emit", func(sc weir.StepContext) (int, error) {
			w := sc.Stream("out")
			for i := range 3 {
				fmt.Fprintf(w, "c%d", i)
			}
			if err := w.Flush(); err != nil {
				return 0, err
			}
			fmt.Fprintf(progress, "emitted attempt %d\n", sc.Attempt())
			return 3, nil
		})
		if err != nil {
			return 0, err
		}
		if os.Getenv(envWorkerBlock) != "" {
			fmt.Fprintln(progress, "blocked")
			<-ctx.Done() // killed here, the outcome of emit not written
		}
		return n, nil
	})
	// inbox: sleeps (durably), so that messages sent meanwhile come before
	// it asks, then takes n messages on topic "n" and returns their sum.
	weir.Register(e, "inbox", func(ctx weir.Context, n int) (int, error) {
		fmt.Fprintln(progress, "sleeping before it receives")
		weir.Sleep(ctx, 300*time.Millisecond)
		sum := 0
		for i := range n {
			v, err := weir.Recv[int](ctx, "n")
			if err != nil {
				return 0, err
			}
			fmt.Fprintf(progress, "received %d\n", i+1)
			sum += v
		}
		return sum, nil
	})
	weir.Register(e, "sleeper", func(ctx weir.Context, d time.Duration) (string, error) {
		before, err := weir.Step(ctx, "before", func(sc weir.StepContext) (string, error) {
			return time.Now().Format(time.RFC3339Nano), nil
		})
		if err != nil {
			return "", err
		}
		fmt.Fprintln(progress, "sleeping")
		weir.Sleep(ctx, d)
		return before, nil
	})
}

// TestWorkerProcess is the body of a worker process; it does nothing in a
// normal test run.
func TestWorkerProcess(t *testing.T) {
	path, schema := os.Getenv(envWorkerDB), os.Getenv(envWorkerPG)
	if path == "" && schema == "" {
		t.Skip("only runs as a child of the process tests")
	}
	ctx := context.Background()
	var s store.Full
	var err error
	if schema != "" {
		s, err = pgstore.Open(ctx, pgtest.URL(), &pgstore.Config{Schema: schema, MaxConns: 4})
	} else {
		s, err = sqlitestore.Open(ctx, path, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv(envWorkerDieAfterChild) != "" {
		s = &dieAfterChildStore{Full: s}
	}
	cfg := &weir.Config{
		PollInterval: 10 * time.Millisecond, LeaseTTL: 600 * time.Millisecond, ParkAfter: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	}
	if os.Getenv(envWorkerBlock) != "" {
		cfg.StepOutcomeDelay = time.Hour
	}
	e, err := weir.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	workerWorkflows(e, os.Stdout)
	if err := e.Work(ctx); err != nil {
		t.Fatal(err)
	}
	if os.Getenv(envWorkerHTTP) != "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: server.New(e, &server.Config{Logger: slog.New(slog.DiscardHandler)})}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		fmt.Printf("http %s\n", ln.Addr())
	}
	if spec := os.Getenv(envWorkerRun); spec != "" {
		name, input, _ := strings.Cut(spec, ":")
		if _, _, err := e.StartRun(ctx, name, []byte(input), &weir.StartOptions{ID: "run-under-test"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Wait(ctx, "run-under-test"); err != nil {
		t.Fatal(err)
	}
	fmt.Println("done")
	_ = e.Close(ctx)
	_ = s.Close()
}

// worker is a running worker process.
type worker struct {
	cmd   *exec.Cmd
	lines chan string
}

// processStore is a store for worker processes of kind "sqlite" (a fresh
// file) or "postgres" (a fresh schema): the worker's environment naming
// it, and how this process opens it (on SQLite, once the worker is gone).
func processStore(t *testing.T, kind string) (env []string, open func() store.Full) {
	t.Helper()
	if kind == "sqlite" {
		db := t.TempDir() + "/weir.db"
		return []string{envWorkerDB + "=" + db}, func() store.Full { s, _ := inspect(t, db); return s }
	}
	schema := pgtest.NewSchema(t)
	return []string{envWorkerPG + "=" + schema}, func() store.Full {
		s, err := pgstore.Open(context.Background(), pgtest.URL(), &pgstore.Config{Schema: schema, MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

// dieAfterChildStore kills its process right after an Advance that ended a
// child run (any run but the one under test) returns.
type dieAfterChildStore struct{ store.Full }

func (d *dieAfterChildStore) Advance(ctx context.Context, p *store.AdvanceParams) error {
	err := d.Full.Advance(ctx, p)
	if err == nil && p.Status.Terminal() && p.RunID != "run-under-test" {
		fmt.Println("child ended; dying")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	return err
}

func startWorker(t *testing.T, db, run string, env ...string) *worker {
	t.Helper()
	return startWorkerEnv(t, run, append(env, envWorkerDB+"="+db)...)
}

// startWorkerEnv starts a worker process with env, which names its store
// (envWorkerDB or envWorkerPG).
func startWorkerEnv(t *testing.T, run string, env ...string) *worker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerProcess$", "-test.v=false")
	cmd.Env = append(append(os.Environ(), envWorkerRun+"="+run), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &worker{cmd: cmd, lines: make(chan string, 1000)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return w
}

// waitFor reads the worker's output until a line satisfies ok.
func (w *worker) waitFor(t *testing.T, what string, ok func(string) bool) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, open := <-w.lines:
			if !open {
				t.Fatalf("worker exited before %s", what)
			}
			if ok(l) {
				return
			}
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (w *worker) kill(t *testing.T) {
	t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = w.cmd.Wait()
}

func inspect(t *testing.T, db string) (*sqlitestore.Store, *weir.Engine) {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), db, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, newEngine(t, s, &weir.Config{NoWorker: true})
}

// A worker process is killed with SIGKILL in the middle of a step that
// streams; a new process takes the run over after the lease expires. The run
// completes; the stream holds every chunk exactly once, in the live view too
// (the new attempt adopted what the dead one wrote), and the workflow-code
// writes replayed by the new process were not repeated.
func TestKilledWorkerProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	db := t.TempDir() + "/weir.db"
	w1 := startWorker(t, db, fmt.Sprintf("killme:%d", killChunks))
	w1.waitFor(t, "attempt 1 to ack 50 chunks", func(l string) bool { return l == "attempt 1 acked 50" })
	w1.kill(t)

	w2 := startWorker(t, db, "")
	w2.waitFor(t, "the run to finish", func(l string) bool { return l == "done" })
	_ = w2.cmd.Wait()

	s, e := inspect(t, db)
	run, err := s.GetRun(testCtx(t), "run-under-test")
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != store.RunCompleted {
		t.Fatalf("run %s: %s", run.Status, run.Error)
	}
	want := []string{"begin"}
	for i := range killChunks {
		want = append(want, fmt.Sprintf("chunk %03d", i))
	}
	want = append(want, "end")

	live := readAll(t, e, run.ID, "out", weir.LiveView)
	checkDense(t, live)
	if got := dataOf(live); !reflect.DeepEqual(got, want) {
		t.Fatalf("live view has %d chunks, want each of %d once:\n%q", len(got), len(want), got)
	}
	committed := readAll(t, e, run.ID, "out", weir.CommittedView)
	checkNoDuplicates(t, committed)
	if got := dataOf(committed); !reflect.DeepEqual(got, want) {
		t.Fatalf("committed view %q, want %q", got, want)
	}
	// Attempt 1 died: its records stand for attempt 2's identical chunks.
	var a1, a2 int
	for _, r := range kinds(live, stream.KindData) {
		switch r.Attempt {
		case 1:
			a1++
		case 2:
			a2++
		}
	}
	if a1 < 50 || a1+a2 != killChunks {
		t.Fatalf("attempt 1 wrote %d and attempt 2 %d records; want >= 50 and %d in all", a1, a2, killChunks)
	}
}

// A worker process is killed while its run sleeps; the sleep is neither lost
// nor restarted by the process that takes over.
func TestSleepSurvivesKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	db := t.TempDir() + "/weir.db"
	const d = 1500 * time.Millisecond
	w1 := startWorker(t, db, fmt.Sprintf("sleeper:%d", d))
	w1.waitFor(t, "the run to sleep", func(l string) bool { return l == "sleeping" })
	w1.kill(t)
	w2 := startWorker(t, db, "")
	w2.waitFor(t, "the run to finish", func(l string) bool { return l == "done" })
	_ = w2.cmd.Wait()

	s, _ := inspect(t, db)
	evs, err := s.ListEvents(testCtx(t), "run-under-test", 0)
	if err != nil {
		t.Fatal(err)
	}
	var scheduled, fired, before []store.Event
	var end time.Time
	for _, ev := range evs {
		switch {
		case ev.Type == store.EventSleepScheduled:
			scheduled = append(scheduled, ev)
		case ev.Type == store.EventSleepFired:
			fired = append(fired, ev)
		case ev.Type == store.EventStepStarted && ev.Name == "before":
			before = append(before, ev)
		case ev.Type == store.EventRunCompleted:
			end = ev.At
		}
	}
	if len(scheduled) != 1 || len(fired) != 1 || len(before) != 1 {
		t.Fatalf("sleep scheduled %d, fired %d, step before started %d times; want once each", len(scheduled), len(fired), len(before))
	}
	if wake := scheduled[0].WakeAt; end.Before(wake) {
		t.Fatalf("run ended at %v, before the sleep's wake time %v", end, wake)
	}
}

// finishAfterKill runs spec in a worker, kills it when a line satisfies
// when, and lets a second worker finish the run; it returns the run.
func finishAfterKill(t *testing.T, db, spec, what string, when func(string) bool, between func(), env ...string) (*store.Run, *sqlitestore.Store, *weir.Engine) {
	t.Helper()
	w1 := startWorker(t, db, spec, env...)
	w1.waitFor(t, what, when)
	w1.kill(t)
	if between != nil {
		between()
	}
	w2 := startWorker(t, db, "")
	w2.waitFor(t, "the run to finish", func(l string) bool { return l == "done" })
	_ = w2.cmd.Wait()
	s, e := inspect(t, db)
	run, err := s.GetRun(testCtx(t), "run-under-test")
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != store.RunCompleted {
		t.Fatalf("run %s: %s", run.Status, run.Error)
	}
	return run, s, e
}

// SIGKILL mid-fan-out: the steps that finished are not run again, the
// others resume as attempt 2 adopting what attempt 1 wrote; each step's
// chunks are in the stream once, in order.
func TestFanOutSurvivesKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	db := t.TempDir() + "/weir.db"
	_, _, e := finishAfterKill(t, db, "fanout:{}", "the parts to be half written",
		func(l string) bool { return strings.HasPrefix(l, "part ") && strings.HasSuffix(l, "acked 20") }, nil)
	live := readAll(t, e, "run-under-test", "out", weir.LiveView)
	checkDense(t, live)
	committed := readAll(t, e, "run-under-test", "out", weir.CommittedView)
	checkNoDuplicates(t, committed)
	got := byWriter(committed)
	if len(got) != 4 {
		t.Fatalf("%d writers committed, want 4", len(got))
	}
	for w, cs := range got {
		var op int
		fmt.Sscanf(w, "step/%d", &op)
		for k, c := range cs {
			if want := fmt.Sprintf("p%d-%02d", op-1, k); c != want || len(cs) != 40 {
				t.Fatalf("%s committed %q", w, cs)
			}
		}
	}
	if n := len(dataOf(live)); n != 160 {
		t.Fatalf("live view has %d chunks, want each of 160 once", n)
	}
}

// SIGKILL while a run waits for a hook, before the payload came (it is
// delivered with no worker alive) and after (a step delivered it, the run
// died before taking it): the payload is taken once, on the resume.
func TestHookSurvivesKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Run("before", func(t *testing.T) {
		db := t.TempDir() + "/weir.db"
		run, _, _ := finishAfterKill(t, db, `hookwait:"before"`, "the run to wait", func(l string) bool { return l == "waiting" }, func() {
			s, err := sqlitestore.Open(context.Background(), db, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.DeliverHook(testCtx(t), &store.DeliverHookParams{Token: "proc-hook", Payload: []byte(`"while dead"`)}); err != nil {
				t.Fatal(err)
			}
			s.Close()
		})
		if string(run.Output) != `"while dead"` {
			t.Fatalf("output %s", run.Output)
		}
	})
	t.Run("after", func(t *testing.T) {
		db := t.TempDir() + "/weir.db"
		run, s, _ := finishAfterKill(t, db, `hookwait:"after"`, "the delivery", func(l string) bool { return l == "delivered, attempt 1" }, nil)
		if string(run.Output) != `"from a step"` {
			t.Fatalf("output %s", run.Output)
		}
		if n := len(hookEvents(t, s, run.ID, store.EventHookReceived)); n != 1 {
			t.Fatalf("%d deliveries recorded, want 1", n)
		}
	})
}

// SIGKILL while a child runs: the resumed parent finds the same child (its
// id is deterministic), which ran to its end once.
func TestChildSurvivesKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	db := t.TempDir() + "/weir.db"
	run, s, _ := finishAfterKill(t, db, "parentchild:21", "the child to run", func(l string) bool { return l == "child attempt 1" }, nil)
	if string(run.Output) != "42" {
		t.Fatalf("output %s", run.Output)
	}
	child, err := s.GetRun(testCtx(t), "run-under-test-1")
	if err != nil || child.Status != store.RunCompleted || child.Parent != "run-under-test" {
		t.Fatalf("child %+v %v", child, err)
	}
	if n := len(hookEvents(t, s, run.ID, store.EventChildStarted)); n != 1 {
		t.Fatalf("%d child_started events, want 1", n)
	}
}

// SIGKILL while a timed-out attempt still runs (it ignores its context):
// the resumed run goes on with the next attempt, whose output commits.
func TestTimedOutAttemptSurvivesKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	db := t.TempDir() + "/weir.db"
	run, _, e := finishAfterKill(t, db, "timedout:{}", "attempt 2 while attempt 1 hangs", func(l string) bool { return l == "attempt 2 running" }, nil)
	got := dataOf(readAll(t, e, run.ID, "out", weir.CommittedView))
	if len(got) != 1 || got[0] == "attempt 1" {
		t.Fatalf("committed %q, want one later attempt's output", got)
	}
}

// SIGKILL while a completed step's outcome waits in memory to be written
// with the run's next record (Config.StepOutcomeDelay): the crash costs what
// a crash just before the outcome always cost. The step runs again on the
// resume, as attempt 2, and its stream output, flushed but never committed,
// is adopted: readers see each chunk once in both views.
func TestPendingOutcomeSurvivesKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	db := t.TempDir() + "/weir.db"
	steps := func(evs []store.Event) (out []string) {
		for _, ev := range evs {
			if ev.Op == 1 {
				out = append(out, fmt.Sprintf("%s %d", ev.Type, ev.Attempt))
			}
		}
		return out
	}
	run, s, e := finishAfterKill(t, db, "pending:{}", "the workflow to block after its step", func(l string) bool { return l == "blocked" }, func() {
		peek, err := sqlitestore.Open(testCtx(t), db, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer peek.Close()
		evs, err := peek.ListEvents(testCtx(t), "run-under-test", 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := steps(evs); !reflect.DeepEqual(got, []string{"step_started 1"}) {
			t.Fatalf("the step's log at the kill: %v, want its start alone", got)
		}
	}, envWorkerBlock+"=1")
	if string(run.Output) != "3" {
		t.Fatalf("output %s", run.Output)
	}
	evs, err := s.ListEvents(testCtx(t), "run-under-test", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := steps(evs), []string{"step_started 1", "step_started 2", "step_completed 2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the step's log: %v, want %v (run again as attempt 2)", got, want)
	}
	for _, view := range []weir.View{weir.LiveView, weir.CommittedView} {
		if got := dataOf(readAll(t, e, "run-under-test", "out", view)); !reflect.DeepEqual(got, []string{"c0", "c1", "c2"}) {
			t.Fatalf("view %v: %q", view, got)
		}
	}
}
