package weir_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/names"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// forkAgent is a workflow whose run has every kind of step output a fork
// must sort out: a step retried with identical output (a), one retried
// with other output (b), the workflow code's own chunks between them, and
// a step (c) that fails for good until fixed is set.
type forkAgent struct {
	fixed atomic.Bool
	mu    sync.Mutex
	runs  map[string]int // step name -> attempts run
}

func (a *forkAgent) ran(name string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runs[name]
}

func (a *forkAgent) register(e *weir.Engine) *weir.Workflow[string, string] {
	a.runs = map[string]int{}
	count := func(name string) int {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.runs[name]++
		return a.runs[name]
	}
	retry := weir.WithRetry(weir.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Millisecond, MaxInterval: time.Millisecond})
	return weir.Register(e, "agent", func(ctx weir.Context, in string) (string, error) {
		out := ctx.Stream("out")
		write := func(w *weir.Writer, s string) error { _, err := w.WriteString(s); return err }
		if err := write(out, "intro:"+in); err != nil {
			return "", err
		}
		_, err := weir.Step(ctx, "a", func(sc weir.StepContext) (int, error) {
			n := count("a")
			w := sc.Stream("out")
			if err := write(w, "a1"); err != nil {
				return 0, err
			}
			if err := write(w, "a2"); err != nil {
				return 0, err
			}
			if n == 1 {
				return 0, errors.New("a: flaky")
			}
			return n, nil
		}, retry)
		if err != nil {
			return "", err
		}
		if err := write(out, "after-a"); err != nil {
			return "", err
		}
		_, err = weir.Step(ctx, "b", func(sc weir.StepContext) (int, error) {
			n := count("b")
			if err := write(sc.Stream("out"), fmt.Sprintf("b-%d", n)); err != nil {
				return 0, err
			}
			if n == 1 {
				return 0, errors.New("b: flaky")
			}
			return n, nil
		}, retry)
		if err != nil {
			return "", err
		}
		if err := write(out, "after-b"); err != nil {
			return "", err
		}
		c, err := weir.Step(ctx, "c", func(sc weir.StepContext) (string, error) {
			count("c")
			if !a.fixed.Load() {
				_ = write(sc.Stream("out"), "c-bad")
				return "", errors.New("c: broken")
			}
			return "c-good", write(sc.Stream("out"), "c-good")
		}, retry)
		if err != nil {
			return "", err
		}
		return c, write(out, "done")
	})
}

// committedData is the data chunks of a run stream's committed view, and
// "|close" / "|reopen" for its close and reopen records.
func committedData(t *testing.T, e *weir.Engine, run string) []string {
	t.Helper()
	var out []string
	for _, r := range readAll(t, e, run, "out", weir.CommittedView) {
		switch r.Kind {
		case stream.KindData:
			out = append(out, string(r.Data))
		default:
			out = append(out, "|"+r.Kind.String())
		}
	}
	return out
}

func wantChunks(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: committed view\n got %q\nwant %q", what, got, want)
	}
}

// A run that failed at its third step is forked from it once its code is
// fixed: the fork replays the first two steps without running them, its
// stream begins with exactly their committed output and the workflow's
// chunks between them (not the failed attempts' chunks, not the failed
// step's), and the source's readers see nothing change. A fork from the
// second step runs it again. Bad fork points are refused, changing
// nothing.
func TestForkKeepsCommittedOutput(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		a := &forkAgent{}
		wf := a.register(e)
		must(t, e.Work(testCtx(t)))
		ctx := testCtx(t)
		h, err := wf.Start(ctx, "x", &weir.StartOptions{ID: "src"})
		must(t, err)
		if _, err := h.Result(ctx); err == nil {
			t.Fatal("source run: want it failed at step c")
		}
		source := []string{"intro:x", "a1", "a2", "after-a", "b-2", "after-b", "|close"}
		wantChunks(t, "source", committedData(t, e, "src"), source...)
		if got := [3]int{a.ran("a"), a.ran("b"), a.ran("c")}; got != [3]int{2, 2, 2} {
			t.Fatalf("source attempts a, b, c = %v", got)
		}

		// Bad fork points: refused, nothing created.
		for _, o := range []weir.ForkOptions{{ID: "bad1", Op: 5}, {ID: "bad2", Step: "nope"}, {ID: "bad3"}} {
			if _, err := e.Fork(ctx, "src", o); !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("fork %+v: %v, want ErrInvalid", o, err)
			}
		}
		if _, err := e.Fork(ctx, "nosuch", weir.ForkOptions{Op: 1}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("fork of an unknown run: %v, want ErrNotFound", err)
		}
		if _, err := e.GetRun(ctx, "bad1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a refused fork left run bad1: %v", err)
		}

		a.fixed.Store(true)
		f, err := e.Fork(ctx, "src", weir.ForkOptions{ID: "fork-c", Step: "c"})
		must(t, err)
		if f.Status != store.RunPending {
			t.Fatalf("fork: status %s, want pending", f.Status)
		}
		r, err := e.Wait(ctx, "fork-c")
		must(t, err)
		if r.Status != store.RunCompleted || string(r.Output) != `"c-good"` {
			t.Fatalf("fork from c: %s %s %s", r.Status, r.Output, r.Error)
		}
		wantChunks(t, "fork from c", committedData(t, e, "fork-c"),
			"intro:x", "a1", "a2", "after-a", "b-2", "after-b", "c-good", "done", "|close")
		if got := [3]int{a.ran("a"), a.ran("b"), a.ran("c")}; got != [3]int{2, 2, 3} {
			t.Fatalf("after the fork from c, attempts a, b, c = %v: the kept steps ran again", got)
		}
		// Its live view holds no failed attempt's chunk either: nothing a
		// reader of the fork would have to rewind.
		for _, rec := range readAll(t, e, "fork-c", "out", weir.LiveView) {
			if rec.Kind == stream.KindData && (string(rec.Data) == "c-bad" || string(rec.Data) == "b-1") {
				t.Fatalf("fork's live view holds %q", rec.Data)
			}
		}
		// The same fork again is the same run.
		again, err := e.Fork(ctx, "src", weir.ForkOptions{ID: "fork-c", Step: "c"})
		must(t, err)
		if again.Status != store.RunCompleted {
			t.Fatalf("fork again: %s, want the completed fork", again.Status)
		}
		if _, err := e.Fork(ctx, "src", weir.ForkOptions{ID: "fork-c", Op: 1}); !errors.Is(err, store.ErrRunConflict) {
			t.Fatalf("another fork with the same id: %v, want ErrRunConflict", err)
		}
		wantChunks(t, "source after the forks", committedData(t, e, "src"), source...)

		// From b (op 2): b runs again; a does not.
		f2, err := e.Fork(ctx, "src", weir.ForkOptions{ID: "fork-b", Op: 2})
		must(t, err)
		if r, err := e.Wait(ctx, f2.ID); err != nil || r.Status != store.RunCompleted {
			t.Fatalf("fork from b: %v %v", r, err)
		}
		got := committedData(t, e, "fork-b")
		wantChunks(t, "fork from b", got, "intro:x", "a1", "a2", "after-a", "b-3", "after-b", "c-good", "done", "|close")
		if got := [3]int{a.ran("a"), a.ran("b"), a.ran("c")}; got != [3]int{2, 3, 4} {
			t.Fatalf("after the fork from b, attempts a, b, c = %v", got)
		}
	})
}

// A failed run resumes with its id and history once its code is fixed:
// the step that failed runs again (with a fresh count of attempts), the
// ones before it replay, and the run's stream reopens: its committed view
// keeps what it showed at the failure, then a reopen and the rest. A run
// that is running or completed is not resumed.
func TestResumeAfterFailure(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		a := &forkAgent{}
		wf := a.register(e)
		must(t, e.Work(testCtx(t)))
		ctx := testCtx(t)
		h, err := wf.Start(ctx, "x", &weir.StartOptions{ID: "r"})
		must(t, err)
		if _, err := h.Result(ctx); err == nil {
			t.Fatal("want the run failed at step c")
		}
		a.fixed.Store(true)
		r, err := e.Resume(ctx, "r")
		must(t, err)
		if r.ID != "r" || r.Status.Terminal() {
			t.Fatalf("resumed: %s %s", r.ID, r.Status)
		}
		out, err := h.Result(ctx)
		if err != nil || out != "c-good" {
			t.Fatalf("resumed run: %q %v", out, err)
		}
		wantChunks(t, "resumed", committedData(t, e, "r"),
			"intro:x", "a1", "a2", "after-a", "b-2", "after-b", "|close", "|reopen", "c-good", "done", "|close")
		if got := [3]int{a.ran("a"), a.ran("b"), a.ran("c")}; got != [3]int{2, 2, 3} {
			t.Fatalf("attempts a, b, c = %v: only c runs again", got)
		}
		evs, err := e.Events(ctx, "r", 0)
		must(t, err)
		var resumed, failed int
		for _, ev := range evs {
			switch ev.Type {
			case store.EventRunResumed:
				resumed++
			case store.EventRunFailed:
				failed++
			}
		}
		if resumed != 1 || failed != 1 {
			t.Fatalf("history: %d run_resumed, %d run_failed; want 1 and 1", resumed, failed)
		}
		if _, err := e.Resume(ctx, "r"); !errors.Is(err, store.ErrNotResumable) || !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("resume of a completed run: %v, want ErrNotResumable", err)
		}
		if _, err := e.Resume(ctx, "nosuch"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("resume of an unknown run: %v", err)
		}
	})
}

// A cancelled run resumes: the step the cancel aborted runs again, and its
// aborted attempt's chunks stay void; a run that is running is refused,
// changing nothing.
func TestResumeAfterCancel(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		var block atomic.Bool
		block.Store(true)
		started := make(chan struct{}, 4)
		wf := weir.Register(e, "slow", func(ctx weir.Context, _ struct{}) (string, error) {
			return weir.Step(ctx, "s", func(sc weir.StepContext) (string, error) {
				w := sc.Stream("out")
				if _, err := w.WriteString("s1"); err != nil {
					return "", err
				}
				if err := w.Flush(); err != nil {
					return "", err
				}
				started <- struct{}{}
				if block.Load() {
					<-sc.Done()
					return "", sc.Err()
				}
				_, err := w.WriteString("s2")
				return "ok", err
			})
		})
		must(t, e.Work(testCtx(t)))
		ctx := testCtx(t)
		h, err := wf.Start(ctx, struct{}{}, &weir.StartOptions{ID: "c"})
		must(t, err)
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("step s never started")
		}
		if _, err := e.Resume(ctx, "c"); !errors.Is(err, store.ErrNotResumable) {
			t.Fatalf("resume of a running run: %v, want ErrNotResumable", err)
		}
		must(t, e.Cancel(ctx, "c"))
		if _, err := h.Result(ctx); !errors.Is(err, weir.ErrCancelled) {
			t.Fatalf("cancelled run: %v", err)
		}
		wantChunks(t, "cancelled", committedData(t, e, "c"), "|close")
		block.Store(false)
		_, err = e.Resume(ctx, "c")
		must(t, err)
		if out, err := h.Result(ctx); err != nil || out != "ok" {
			t.Fatalf("resumed run: %q %v", out, err)
		}
		wantChunks(t, "resumed", committedData(t, e, "c"), "|close", "|reopen", "s1", "s2", "|close")
	})
}

// BenchmarkFork forks a run of 1,000 completed steps that streamed 100,000
// chunks (100 of 32 bytes each, the workflow's code writing one between
// steps) from past its last step: the fork keeps all of it. It reports the
// time of the fork against the source run's own time (what a fork saves),
// and what the fork copies. The copy is the store's, in one transaction:
// no chunk passes through the engine.
func BenchmarkFork(b *testing.B) {
	const steps, perStep = 1000, 100
	for _, st := range []string{"sqlite", "postgres"} {
		b.Run(st, func(b *testing.B) {
			s := benchStore(b, st)
			cfg := fastConfig()
			e := newEngine(b, s, cfg)
			chunk := bytes.Repeat([]byte("x"), 32)
			wf := weir.Register(e, "long", func(ctx weir.Context, _ int) (int, error) {
				out := ctx.Stream("out")
				for i := range steps {
					if _, err := out.Write([]byte(fmt.Sprintf("before %d", i))); err != nil {
						return 0, err
					}
					if _, err := weir.Step(ctx, "s", func(sc weir.StepContext) (int, error) {
						w := sc.Stream("out")
						for range perStep {
							if _, err := w.Write(chunk); err != nil {
								return 0, err
							}
						}
						return i, nil
					}); err != nil {
						return 0, err
					}
				}
				return steps, nil
			})
			must(b, e.Work(testCtx(b)))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			began := time.Now()
			h, err := wf.Start(ctx, 0, &weir.StartOptions{ID: "src"})
			must(b, err)
			if _, err := h.Result(ctx); err != nil {
				b.Fatal(err)
			}
			source := time.Since(began)
			must(b, e.Close(ctx)) // no engine runs the forks: the fork alone is measured
			n := 0
			for b.Loop() {
				n++
				if _, _, err := s.ForkRun(ctx, &store.ForkRunParams{Source: "src", ID: fmt.Sprintf("fork-%d", n), Op: steps + 1}); err != nil {
					b.Fatal(err)
				}
			}
			per := b.Elapsed() / time.Duration(b.N)
			b.ReportMetric(float64(per.Microseconds())/1000, "ms/fork")
			b.ReportMetric(float64(source.Milliseconds()), "ms/source-run")
			b.ReportMetric(float64(steps*perStep+steps), "chunks-copied/fork")
			b.ReportMetric(float64(steps*perStep*len(chunk))/(1<<20), "MB-copied/fork")
		})
	}
}

// A run id the code chooses (a start's, a fork's, a child's) is a client's:
// one inside another run's streams, or with a prefix weir mints (a
// schedule's tick, say, which it would then take before its tick), is
// refused before the store, and nothing is made.
func TestClientRunIDs(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		wf := weir.Register(e, "echo", func(ctx weir.Context, v int) (int, error) { return v, nil })
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"sched:nightly:20261207T000000.000Z", "idem_x", "wrun_x", "a/b", "../x", strings.Repeat("x", 129)} {
			if _, err := wf.Start(testCtx(t), 1, &weir.StartOptions{ID: id}); !errors.Is(err, store.ErrInvalid) || !errors.Is(err, names.ErrInvalid) {
				t.Fatalf("start %q: %v, want ErrInvalid and names.ErrInvalid", id, err)
			}
		}
		h, err := wf.Start(testCtx(t), 1, &weir.StartOptions{ID: "src"})
		must(t, err)
		if _, err := h.Result(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"src/spoof", "sched:x:y"} {
			if _, err := e.Fork(testCtx(t), "src", weir.ForkOptions{ID: id, Op: 1}); !errors.Is(err, names.ErrInvalid) {
				t.Fatalf("fork %q: %v, want names.ErrInvalid", id, err)
			}
		}
		runs, err := s.ListRuns(testCtx(t), &store.ListRunsParams{Limit: 100})
		must(t, err)
		if len(runs) != 1 {
			t.Fatalf("%d runs after refused ids, want 1", len(runs))
		}
	})
}

// A follower with FollowResumes reads a failed run's stream through its
// close, waits, and reads on once the run is resumed, to the end of the
// resumed run: in the committed view it sees what a reader after the end
// sees; in the live view the close, the reopen and what follows. Without
// the option the follow ends at the close.
func TestFollowThroughAResume(t *testing.T) {
	for _, view := range []weir.View{weir.CommittedView, weir.LiveView} {
		t.Run(fmt.Sprint(view), func(t *testing.T) {
			eachStore(t, func(t *testing.T, s store.Full) {
				e := newEngine(t, s, nil)
				a := &forkAgent{}
				wf := a.register(e)
				must(t, e.Work(testCtx(t)))
				ctx := testCtx(t)
				h, err := wf.Start(ctx, "x", &weir.StartOptions{ID: "r"})
				must(t, err)
				if _, err := h.Result(ctx); err == nil {
					t.Fatal("want the run failed at step c")
				}
				// Without the option: ends at the close.
				n := 0
				for _, err := range e.Read(ctx, "r", "out", &weir.ReadOptions{Follow: true, View: view}) {
					must(t, err)
					n++
				}
				got := make(chan string, 64)
				done := make(chan struct{})
				go func() {
					defer close(done)
					for r, err := range e.Read(ctx, "r", "out", &weir.ReadOptions{Follow: true, FollowResumes: true, View: view}) {
						if err != nil {
							got <- "error: " + err.Error()
							return
						}
						if r.Kind == stream.KindData {
							got <- string(r.Data)
						} else {
							got <- "|" + r.Kind.String()
						}
					}
				}()
				var seen []string
				next := func(what string) string {
					select {
					case g := <-got:
						seen = append(seen, g)
						return g
					case <-time.After(20 * time.Second):
						t.Fatalf("the follower yielded nothing for 20s, waiting for %s; so far %q", what, seen)
						return ""
					}
				}
				for len(seen) < n {
					next("the records before the close")
				}
				if seen[n-1] != "|close" {
					t.Fatalf("the follower's records before the resume end %q, want the close: %q", seen[n-1], seen)
				}
				a.fixed.Store(true)
				_, err = e.Resume(ctx, "r")
				must(t, err)
				for seen[len(seen)-1] != "done" {
					next("the resumed run's records")
				}
				if g := next("the last close"); g != "|close" {
					t.Fatalf("after done: %q", g)
				}
				select {
				case <-done:
				case <-time.After(20 * time.Second):
					t.Fatal("the follower did not end within 20s of the resumed run's close")
				}
				if view == weir.CommittedView {
					wantChunks(t, "followed", seen, committedData(t, e, "r")...)
				} else if i := slices.Index(seen, "|reopen"); i < 0 || seen[i-1] != "|close" {
					t.Fatalf("live view: no reopen after the close: %q", seen)
				}
			})
		})
	}
}

// A fork that keeps a hook its source still holds is refused with
// ErrHookConflict, and the refusal names the hook by its reference, not
// its token: a token is a capability, and the refusal reaches whoever
// asked for the fork (red-team round ten: the 409 carried the raw token).
func TestForkRefusedByALiveHookHidesItsToken(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.ParkAfter = 20 * time.Millisecond
		e := newEngine(t, s, cfg)
		const token = "approve-7f3a9c-secret"
		wf := weir.Register(e, "approve", func(ctx weir.Context, _ int) (int, error) {
			if _, err := weir.Step(ctx, "a", func(weir.StepContext) (int, error) { return 1, nil }); err != nil {
				return 0, err
			}
			h, err := weir.NewHook[int](ctx, token)
			if err != nil {
				return 0, err
			}
			return h.Receive(ctx)
		})
		must(t, e.Work(testCtx(t)))
		h, err := wf.Start(testCtx(t), 0, nil)
		must(t, err)
		waitParked(t, s, h.ID)
		_, err = e.Fork(testCtx(t), h.ID, weir.ForkOptions{ID: "f", Op: 3})
		if !errors.Is(err, weir.ErrHookConflict) {
			t.Fatalf("a fork keeping the live hook: %v, want ErrHookConflict", err)
		}
		if strings.Contains(err.Error(), token) || !strings.Contains(err.Error(), weir.HookRef(token)) {
			t.Fatalf("the refusal names the hook as %q, want its reference %s and not its token", err, weir.HookRef(token))
		}
	})
}
