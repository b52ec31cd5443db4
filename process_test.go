package weir_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/sqlitestore"
	"github.com/weirhq/weir/stream"
)

// The tests in this file run real worker processes: the test binary re-runs
// itself as TestWorkerProcess, which the parent kills with SIGKILL.

const (
	envWorkerDB  = "WEIR_TEST_WORKER_DB"
	envWorkerRun = "WEIR_TEST_WORKER_RUN"
	killChunks   = 200
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
	path := os.Getenv(envWorkerDB)
	if path == "" {
		t.Skip("only runs as a child of the process tests")
	}
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := weir.New(s, &weir.Config{
		PollInterval: 10 * time.Millisecond, LeaseTTL: 600 * time.Millisecond, ParkAfter: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	workerWorkflows(e, os.Stdout)
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
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

func startWorker(t *testing.T, db, run string) *worker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerProcess$", "-test.v=false")
	cmd.Env = append(os.Environ(), envWorkerDB+"="+db, envWorkerRun+"="+run)
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
