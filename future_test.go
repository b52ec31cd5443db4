package weir_test

import (
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
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// stepChunks is what step i of a fan-out writes: n chunks.
func stepChunks(i, n int) []string {
	out := make([]string, n)
	for k := range out {
		out[k] = fmt.Sprintf("s%d-%d", i, k)
	}
	return out
}

// byWriter groups a committed view's data by writer, in stream order.
func byWriter(recs []weir.StreamRecord) map[string][]string {
	out := map[string][]string{}
	for _, r := range recs {
		if r.Kind == stream.KindData {
			out[r.Writer] = append(out[r.Writer], string(r.Data))
		}
	}
	return out
}

// Parallel steps writing one stream interleave there; each commits or
// aborts only its own chunks. Some are retried with identical output
// (adopted), some with divergent output (aborted, then written again): the
// committed view holds exactly each step's final attempt, in its order.
func TestParallelStepsShareAStream(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		const steps, chunks = 8, 5
		wf := weir.Register(e, "fanout", func(ctx weir.Context, _ struct{}) (int, error) {
			var fs []*weir.Future[int]
			for i := range steps {
				fs = append(fs, weir.StepAsync(ctx, fmt.Sprintf("part-%d", i), func(sc weir.StepContext) (int, error) {
					w := sc.Stream("out")
					want := stepChunks(i, chunks)
					if sc.Attempt() == 1 && i%3 == 1 {
						// Divergent: a first attempt writes other bytes.
						_, _ = w.WriteString("wrong-" + want[0])
						_ = w.Flush()
						return 0, errors.New("divergent first attempt")
					}
					for k, c := range want {
						if _, err := w.WriteString(c); err != nil {
							return 0, err
						}
						if sc.Attempt() == 1 && i%3 == 2 && k == 2 {
							_ = w.Flush()
							return 0, errors.New("identical first attempt, cut short")
						}
					}
					return i, nil
				}))
			}
			out, err := weir.All(ctx, fs...)
			if err != nil {
				return 0, err
			}
			sum := 0
			for _, v := range out {
				sum += v
			}
			return sum, nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		sum, err := h.Result(testCtx(t))
		if err != nil || sum != steps*(steps-1)/2 {
			t.Fatalf("result %d %v", sum, err)
		}
		committed := readAll(t, e, h.ID, "out", weir.CommittedView)
		checkNoDuplicates(t, committed)
		got := byWriter(committed)
		if len(got) != steps {
			t.Fatalf("committed view has %d writers, want %d: %v", len(got), steps, got)
		}
		for w, cs := range got {
			var i int
			if _, err := fmt.Sscanf(w, "step/%d", &i); err != nil {
				t.Fatalf("writer %q", w)
			}
			if want := stepChunks(i-1, chunks); !slices.Equal(cs, want) {
				t.Errorf("writer %s committed %q, want %q", w, cs, want)
			}
		}
		live := readAll(t, e, h.ID, "out", weir.LiveView)
		checkDense(t, live)
		if n := len(kinds(live, stream.KindAbort)); n == 0 {
			t.Error("no abort record: the divergent retries were not aborted")
		}
		if err := e.Replay(testCtx(t), h.ID); err != nil {
			t.Fatalf("replay: %v", err)
		}
	})
}

// Select returns the first operation to finish and records its choice:
// replay chooses the same, whatever finishes first then.
func TestSelectRacesATimer(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		release := make(chan struct{})
		defer close(release)
		wf := weir.Register(e, "race", func(ctx weir.Context, _ struct{}) (string, error) {
			slow := weir.StepAsync(ctx, "approval", func(sc weir.StepContext) (string, error) {
				select {
				case <-release:
					return "approved", nil
				case <-sc.Done():
					return "", sc.Err()
				}
			})
			timeout := weir.NewTimer(ctx, 50*time.Millisecond)
			if weir.Select(ctx, slow, timeout) == 1 {
				return "timed out", nil
			}
			return slow.Get(ctx)
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		var out string
		go func() { out, err = h.Result(testCtx(t)); close(done) }()
		// The timer fired and was chosen; the step is still running, and the
		// run ends only once the steps it started end: release it.
		waitEvent(t, e, h.ID, store.EventSelected)
		release <- struct{}{}
		<-done
		if err != nil || out != "timed out" {
			t.Fatalf("result %q %v, want the timer's", out, err)
		}
		if err := e.Replay(testCtx(t), h.ID); err != nil {
			t.Fatalf("replay: %v", err)
		}
	})
}

// waitEvent waits, with a deadline, until run's log has an event of type.
func waitEvent(t *testing.T, e *weir.Engine, run string, typ store.EventType) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs, err := e.Store().ListEvents(testCtx(t), run, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == typ {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: no %s event within 10s; log %+v", run, typ, evs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A step attempt that outlives its timeout fails and is retried; it is
// fenced at once, so what it writes afterwards is refused, and the retry's
// output is what commits.
func TestStepTimeoutFencesTheAttempt(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		zombie := make(chan error, 1)
		wake := make(chan struct{})
		wf := weir.Register(e, "timeout", func(ctx weir.Context, _ struct{}) (string, error) {
			return weir.Step(ctx, "slow", func(sc weir.StepContext) (string, error) {
				w := sc.Stream("out")
				if sc.Attempt() == 1 {
					_, _ = w.WriteString("first")
					_ = w.Flush()
					<-wake // ignores its context: a stuck call
					_, _ = w.WriteString("late")
					zombie <- w.Flush()
					return "zombie", nil
				}
				_, _ = w.WriteString("second")
				return "second", nil
			}, weir.WithTimeout(100*time.Millisecond))
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		out, err := h.Result(testCtx(t))
		if err != nil || out != "second" {
			t.Fatalf("result %q %v", out, err)
		}
		close(wake)
		select {
		case err := <-zombie:
			if !errors.Is(err, weir.ErrFenced) && !errors.Is(err, weir.ErrStepTimeout) && !errors.Is(err, weir.ErrClosed) {
				t.Fatalf("the timed-out attempt's late write: %v, want it refused", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the timed-out attempt never finished its write")
		}
		if got := dataOf(readAll(t, e, h.ID, "out", weir.CommittedView)); !slices.Equal(got, []string{"second"}) {
			t.Fatalf("committed %q, want [second]", got)
		}
		evs, _ := e.Store().ListEvents(testCtx(t), h.ID, 0)
		found := false
		for _, ev := range evs {
			found = found || (ev.Type == store.EventStepFailed && strings.Contains(ev.Error, "timed out after 100ms"))
		}
		if !found {
			t.Fatalf("no step_failed naming the timeout: %+v", evs)
		}
	})
}

// A long step that stops heartbeating fails; one that heartbeats runs on.
func TestHeartbeatTimeout(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		wf := weir.Register(e, "beat", func(ctx weir.Context, _ struct{}) (int64, error) {
			return weir.Step(ctx, "long", func(sc weir.StepContext) (int64, error) {
				if sc.Attempt() == 1 {
					<-sc.Done() // silent: only the heartbeat timeout ends it
					return 0, context.Cause(sc)
				}
				// Beats five times as often as the timeout, so a loaded
				// machine's scheduling delays do not fail it.
				for range 20 {
					sc.Heartbeat()
					select {
					case <-time.After(20 * time.Millisecond):
					case <-sc.Done():
						return 0, context.Cause(sc)
					}
				}
				return sc.Attempt(), nil
			}, weir.WithHeartbeatTimeout(100*time.Millisecond))
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := h.Result(testCtx(t)); err != nil || n != 2 {
			t.Fatalf("result %d %v, want attempt 2", n, err)
		}
	})
}

// A run past its deadline fails with ErrRunTimeout, parked or not; the
// output of the step it was running is aborted.
func TestRunTimeout(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.ParkAfter = 20 * time.Millisecond
		e := newEngine(t, s, cfg)
		parked := weir.Register(e, "parked", func(ctx weir.Context, _ struct{}) (int, error) {
			weir.Sleep(ctx, time.Hour)
			return 1, nil
		}, weir.WithRunTimeout(200*time.Millisecond))
		busy := weir.Register(e, "busy", func(ctx weir.Context, _ struct{}) (int, error) {
			return weir.Step(ctx, "work", func(sc weir.StepContext) (int, error) {
				_, _ = sc.Stream("out").WriteString("partial")
				<-sc.Done()
				return 0, context.Cause(sc)
			})
		}, weir.WithRunTimeout(200*time.Millisecond))
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h1, err := parked.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		h2, err := busy.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{h1.ID, h2.ID} {
			r, err := e.Wait(testCtx(t), id)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != store.RunFailed || !strings.Contains(r.Error, weir.ErrRunTimeout.Error()) {
				t.Fatalf("run %s: %s %q, want failed at its deadline", id, r.Status, r.Error)
			}
		}
		if got := dataOf(readAll(t, e, h2.ID, "out", weir.CommittedView)); len(got) != 0 {
			t.Fatalf("the interrupted step's output committed: %q", got)
		}
	})
}

// No more than Config.StepConcurrency steps of a run run at once.
func TestStepConcurrencyLimit(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.StepConcurrency = 3
		e := newEngine(t, s, cfg)
		var now, peak atomic.Int32
		wf := weir.Register(e, "limited", func(ctx weir.Context, _ struct{}) (int, error) {
			var fs []*weir.Future[int]
			for i := range 12 {
				fs = append(fs, weir.StepAsync(ctx, "p", func(sc weir.StepContext) (int, error) {
					n := now.Add(1)
					for {
						p := peak.Load()
						if n <= p || peak.CompareAndSwap(p, n) {
							break
						}
					}
					time.Sleep(5 * time.Millisecond)
					now.Add(-1)
					return i, nil
				}))
			}
			out, err := weir.All(ctx, fs...)
			return len(out), err
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := h.Result(testCtx(t)); err != nil || n != 12 {
			t.Fatalf("result %d %v", n, err)
		}
		if p := peak.Load(); p > 3 || p < 2 {
			t.Fatalf("peak concurrency %d, want at most 3 (and more than 1)", p)
		}
	})
}

// A run whose pending operations are all timers parks, and resumes on time.
func TestParkOnTimers(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.ParkAfter = 20 * time.Millisecond
		e := newEngine(t, s, cfg)
		var executions atomic.Int32
		wf := weir.Register(e, "timers", func(ctx weir.Context, _ struct{}) (string, error) {
			executions.Add(1)
			a := weir.NewTimer(ctx, 150*time.Millisecond)
			b := weir.NewTimer(ctx, 300*time.Millisecond)
			f := weir.StepAsync(ctx, "quick", func(sc weir.StepContext) (string, error) { return "q", nil })
			if _, err := f.Get(ctx); err != nil {
				return "", err
			}
			first := weir.Select(ctx, b, a)
			weir.Await(ctx, a, b)
			return fmt.Sprint(first), nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := h.Result(testCtx(t)); err != nil || out != "1" {
			t.Fatalf("result %q %v, want the earlier timer (1)", out, err)
		}
		if n := executions.Load(); n < 2 {
			t.Fatalf("%d executions: the run never parked", n)
		}
		if err := e.Replay(testCtx(t), h.ID); err != nil {
			t.Fatalf("replay: %v", err)
		}
	})
}

// An engine that stops mid-fan-out (its steps abandoned, as at a crash)
// leaves the run to another, which finishes it: each step's output is
// committed once, the finished steps are not run again.
func TestFanOutResumesOnAnotherEngine(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		var mu sync.Mutex
		runs := map[string]int{} // step -> attempts that ran
		gate := make(chan struct{})
		register := func(e *weir.Engine) *weir.Workflow[struct{}, int] {
			return weir.Register(e, "resume", func(ctx weir.Context, _ struct{}) (int, error) {
				var fs []*weir.Future[int]
				for i := range 6 {
					fs = append(fs, weir.StepAsync(ctx, "p", func(sc weir.StepContext) (int, error) {
						mu.Lock()
						runs[sc.StepID()]++
						mu.Unlock()
						w := sc.Stream("out")
						for _, c := range stepChunks(i, 3) {
							if _, err := w.WriteString(c); err != nil {
								return 0, err
							}
						}
						if i >= 3 {
							if err := w.Flush(); err != nil {
								return 0, err
							}
							select {
							case <-gate:
							case <-sc.Done():
								return 0, context.Cause(sc)
							}
						}
						return i, nil
					}))
				}
				out, err := weir.All(ctx, fs...)
				return len(out), err
			})
		}
		e1, err := weir.New(s, fastConfig())
		if err != nil {
			t.Fatal(err)
		}
		wf := register(e1)
		if err := e1.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Wait until the first three completed and the others wrote.
		deadline := time.Now().Add(10 * time.Second)
		for {
			evs, _ := s.ListEvents(testCtx(t), h.ID, 0)
			done := 0
			for _, ev := range evs {
				if ev.Type == store.EventStepCompleted {
					done++
				}
			}
			if done == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("3 steps did not complete: %+v", evs)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := e1.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		close(gate)
		e2 := newEngine(t, s, nil)
		register(e2)
		if err := e2.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		r, err := e2.Wait(testCtx(t), h.ID)
		if err != nil || r.Status != store.RunCompleted {
			t.Fatalf("run %v %v", r, err)
		}
		got := byWriter(readAll(t, e2, h.ID, "out", weir.CommittedView))
		for i := range 6 {
			if w := fmt.Sprintf("step/%d", i+1); !slices.Equal(got[w], stepChunks(i, 3)) {
				t.Errorf("%s committed %q, want %q", w, got[w], stepChunks(i, 3))
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for id, n := range runs {
			var op int
			fmt.Sscanf(id[strings.LastIndex(id, "/")+1:], "%d", &op)
			if op <= 3 && n != 1 {
				t.Errorf("finished step %s ran %d times", id, n)
			}
		}
	})
}
