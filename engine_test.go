package weir_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/internal/demo"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

func TestWorkflowCompletes(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		wf := weir.Register(e, "add", func(ctx weir.Context, in [2]int) (int, error) {
			a, err := weir.Step(ctx, "double", func(sc weir.StepContext) (int, error) { return 2 * in[0], nil })
			if err != nil {
				return 0, err
			}
			return weir.Step(ctx, "add", func(sc weir.StepContext) (int, error) { return a + in[1], nil })
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), [2]int{20, 2}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := h.Result(testCtx(t))
		if err != nil || got != 42 {
			t.Fatalf("Result = %d, %v; want 42", got, err)
		}
	})
}

func TestStartWithSameIDReturnsSameRun(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		var calls atomic.Int32
		wf := weir.Register(e, "once", func(ctx weir.Context, in string) (string, error) {
			return weir.Step(ctx, "s", func(sc weir.StepContext) (string, error) { calls.Add(1); return in, nil })
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h1, err := wf.Start(testCtx(t), "a", &weir.StartOptions{ID: "order-17"})
		if err != nil {
			t.Fatal(err)
		}
		h2, err := wf.Start(testCtx(t), "b", &weir.StartOptions{ID: "order-17"})
		if err != nil {
			t.Fatal(err)
		}
		if h1.ID != h2.ID {
			t.Fatalf("ids %q and %q differ", h1.ID, h2.ID)
		}
		if out, err := h2.Result(testCtx(t)); err != nil || out != "a" {
			t.Fatalf("Result = %q, %v; want the first start's input", out, err)
		}
		if n := calls.Load(); n != 1 {
			t.Fatalf("step ran %d times, want 1", n)
		}
	})
}

func TestStepRetryPolicy(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		var attempts []int64
		permanent := errors.New("bad request")
		wf := weir.Register(e, "retry", func(ctx weir.Context, failures int) (int64, error) {
			return weir.Step(ctx, "flaky", func(sc weir.StepContext) (int64, error) {
				attempts = append(attempts, sc.Attempt())
				if failures < 0 {
					return 0, weir.NonRetryable(permanent)
				}
				if sc.Attempt() <= int64(failures) {
					return 0, fmt.Errorf("attempt %d: transient", sc.Attempt())
				}
				return sc.Attempt(), nil
			}, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 4, InitialInterval: time.Millisecond}))
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, _ := wf.Start(testCtx(t), 2, nil)
		if got, err := h.Result(testCtx(t)); err != nil || got != 3 {
			t.Fatalf("Result = %d, %v; want success on attempt 3", got, err)
		}
		attempts = nil
		h, _ = wf.Start(testCtx(t), 10, nil)
		if _, err := h.Result(testCtx(t)); !errors.Is(err, weir.ErrRunFailed) || !strings.Contains(err.Error(), "attempt 4") {
			t.Fatalf("Result err = %v; want a failure after attempt 4", err)
		}
		if !reflect.DeepEqual(attempts, []int64{1, 2, 3, 4}) {
			t.Fatalf("attempts %v, want 1..4", attempts)
		}
		attempts = nil
		h, _ = wf.Start(testCtx(t), -1, nil)
		if _, err := h.Result(testCtx(t)); err == nil || !strings.Contains(err.Error(), "bad request") {
			t.Fatalf("Result err = %v; want the non-retryable error", err)
		}
		if len(attempts) != 1 {
			t.Fatalf("a non-retryable error ran %d attempts, want 1", len(attempts))
		}
		// The event log shows every attempt with its error and backoff.
		evs, _ := s.ListEvents(testCtx(t), h.ID, 0)
		var types []store.EventType
		for _, ev := range evs {
			types = append(types, ev.Type)
		}
		want := []store.EventType{store.EventRunStarted, store.EventStepStarted, store.EventStepFailed, store.EventRunFailed}
		if !reflect.DeepEqual(types, want) {
			t.Fatalf("events %v, want %v", types, want)
		}
	})
}

func TestRetryBackoff(t *testing.T) {
	p := weir.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 2, MaxInterval: time.Second, Jitter: -1}.WithDefaults()
	for attempt, want := range map[int64]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 5: time.Second} {
		if got := p.Backoff(attempt); got != want {
			t.Errorf("Backoff(%d) = %v, want %v", attempt, got, want)
		}
	}
	p.Jitter = 0.1
	for range 100 {
		if d := p.Backoff(1); d < 90*time.Millisecond || d > 110*time.Millisecond {
			t.Fatalf("Backoff with 10%% jitter = %v", d)
		}
	}
}

// tokenRun runs the demo's token workflow and returns its live and committed
// views.
func tokenRun(t *testing.T, s store.Full, in demo.TokensInput) (live, committed []weir.StreamRecord, out demo.TokensOutput, err error) {
	t.Helper()
	e := newEngine(t, s, nil)
	wf := demo.Register(e)
	if err := e.Work(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h, err := wf.Start(testCtx(t), in, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A live reader that follows the run from before its first chunk.
	var follow []weir.StreamRecord
	for r, err := range e.Read(testCtx(t), h.ID, demo.TokensStream, &weir.ReadOptions{Follow: true, ApplyAborts: true}) {
		if err != nil {
			t.Fatal(err)
		}
		follow = append(follow, r)
	}
	out, err = h.Result(testCtx(t))
	later := readAll(t, e, h.ID, demo.TokensStream, weir.LiveView)
	if !reflect.DeepEqual(dataOf(follow), dataOf(later)) {
		t.Fatalf("following reader saw %q, a later read %q", dataOf(follow), dataOf(later))
	}
	live = follow
	checkDense(t, live)
	committed = readAll(t, e, h.ID, demo.TokensStream, weir.CommittedView)
	checkNoDuplicates(t, committed)
	checkLiveWithAbortsIsCommitted(t, follow, committed)
	return live, committed, out, err
}

// checkLiveWithAbortsIsCommitted asserts invariant 5: once every writer
// finished, the live view with its aborts applied is the committed view.
func checkLiveWithAbortsIsCommitted(t *testing.T, live, committed []weir.StreamRecord) {
	t.Helper()
	void := map[int64]bool{}
	for _, r := range live {
		for _, o := range r.Voided {
			void[o] = true
		}
	}
	var applied []string
	for _, r := range live {
		if r.Kind == stream.KindData && !void[r.Offset] {
			applied = append(applied, string(r.Data))
		}
	}
	if !reflect.DeepEqual(applied, dataOf(committed)) {
		t.Fatalf("live view with aborts applied %q != committed view %q", applied, dataOf(committed))
	}
}

func TestRetriedStepWithIdenticalOutputIsSeenOnce(t *testing.T) {
	text := "one two three four five six seven eight"
	eachStore(t, func(t *testing.T, s store.Full) {
		live, committed, out, err := tokenRun(t, s, demo.TokensInput{Text: text, FailAfter: 5})
		if err != nil || out.Attempts != 2 {
			t.Fatalf("run: %+v, %v; want success on attempt 2", out, err)
		}
		want := demo.Tokenize(text)
		if got := dataOf(live); !reflect.DeepEqual(got, want) {
			t.Fatalf("live view %q, want each chunk once: %q", got, want)
		}
		if got := dataOf(committed); !reflect.DeepEqual(got, want) {
			t.Fatalf("committed view %q, want %q", got, want)
		}
		if n := len(kinds(live, stream.KindAbort)); n != 0 {
			t.Fatalf("%d aborts, want none", n)
		}
		// Attempt 1 wrote seq 0..4; attempt 2 adopted them and appended 5..7.
		for _, r := range kinds(live, stream.KindData) {
			if wantAttempt := int64(1 + r.Seq/5); r.Attempt != wantAttempt {
				t.Fatalf("seq %d written by attempt %d, want %d", r.Seq, r.Attempt, wantAttempt)
			}
		}
	})
}

func TestDivergentRetryAbortsOnceAtFirstDivergence(t *testing.T) {
	first := "the answer is forty-one give or take"
	second := "the answer is forty-two as computed"
	eachStore(t, func(t *testing.T, s store.Full) {
		live, committed, _, err := tokenRun(t, s, demo.TokensInput{Text: first, RetryText: second, FailAfter: 6})
		if err != nil {
			t.Fatal(err)
		}
		aborts := kinds(live, stream.KindAbort)
		if len(aborts) != 1 {
			t.Fatalf("%d aborts, want exactly 1: %v", len(aborts), live)
		}
		if a := aborts[0]; a.FromSeq() != 3 || a.Attempt != 2 {
			t.Fatalf("abort %v, want attempt 2 from seq 3 (the first differing token)", a.Record)
		}
		if len(aborts[0].Voided) != 3 {
			t.Fatalf("abort voided %v, want the 3 tokens of attempt 1 past the divergence", aborts[0].Voided)
		}
		if got, want := dataOf(committed), demo.Tokenize(second); !reflect.DeepEqual(got, want) {
			t.Fatalf("committed view %q, want the final attempt %q", got, want)
		}
	})
}

func TestStepFailingForGoodLeavesNothingCommitted(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		wf := weir.Register(e, "doomed", func(ctx weir.Context, _ int) (int, error) {
			_, err := weir.Step(ctx, "emit", func(sc weir.StepContext) (int, error) {
				w := sc.Stream("out")
				for i := range 3 + int(sc.Attempt()) {
					fmt.Fprintf(w, "a%d-%d", sc.Attempt(), i)
				}
				return 0, errors.New("always fails")
			}, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 3}))
			var se *weir.StepError
			if !errors.As(err, &se) || se.Attempt != 3 {
				return 0, fmt.Errorf("step error %v, want a StepError of attempt 3", err)
			}
			return 0, err
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, _ := wf.Start(testCtx(t), 0, nil)
		if _, err := h.Result(testCtx(t)); !errors.Is(err, weir.ErrRunFailed) || !strings.Contains(err.Error(), "always fails") {
			t.Fatalf("Result err = %v", err)
		}
		if c := dataOf(readAll(t, e, h.ID, "out", weir.CommittedView)); len(c) != 0 {
			t.Fatalf("committed view of a failed step: %q, want nothing", c)
		}
		live := readAll(t, e, h.ID, "out", weir.LiveView)
		checkDense(t, live)
		if last := live[len(live)-1]; last.Kind != stream.KindClose {
			t.Fatalf("last record %v, want the close of the ended run", last.Record)
		}
		if a := kinds(live, stream.KindAbort); len(a) == 0 || a[len(a)-1].FromSeq() != 0 {
			t.Fatalf("want a final abort from seq 0, got %v", a)
		}
	})
}

func TestWorkflowWritesAreCommittedAtOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		wf := weir.Register(e, "wfwrites", func(ctx weir.Context, n int) (int, error) {
			w := ctx.Stream("log")
			for i := range n {
				if _, err := fmt.Fprintf(w, "line %d", i); err != nil {
					return 0, err
				}
			}
			return n, nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, _ := wf.Start(testCtx(t), 3, nil)
		if _, err := h.Result(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		got := dataOf(readAll(t, e, h.ID, "log", weir.CommittedView))
		if want := []string{"line 0", "line 1", "line 2"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("committed %q, want %q", got, want)
		}
	})
}

func TestNonDeterminismFailsTheRun(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		// The first engine runs the code as it was: step "first", then a step
		// that waits until the engine stops, which leaves the run to be resumed.
		reached := make(chan struct{})
		old := newEngine(t, s, fastConfig())
		wf := weir.Register(old, "nondet", func(ctx weir.Context, _ int) (int, error) {
			if _, err := weir.Step(ctx, "first", func(sc weir.StepContext) (int, error) { return 1, nil }); err != nil {
				return 0, err
			}
			return weir.Step(ctx, "block", func(sc weir.StepContext) (int, error) {
				close(reached)
				<-sc.Done()
				return 0, sc.Err()
			})
		})
		if err := old.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, _ := wf.Start(testCtx(t), 0, nil)
		select {
		case <-reached:
		case <-testCtx(t).Done():
			t.Fatal("the run never reached its second step")
		}
		if err := old.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		// A new deployment renamed the first step: resuming replays it.
		e := newEngine(t, s, fastConfig())
		wf = weir.Register(e, "nondet", func(ctx weir.Context, _ int) (int, error) {
			return weir.Step(ctx, "renamed", func(sc weir.StepContext) (int, error) { return 1, nil })
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h = wf.Handle(h.ID)
		_, err := h.Result(testCtx(t))
		if err == nil || !strings.Contains(err.Error(), `non-determinism at operation 1: the run's log has step "first", the code did step "renamed"`) {
			t.Fatalf("Result err = %v; want a non-determinism error naming both steps", err)
		}
	})
}

func TestCancelAbortsTheRunningStep(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		started := make(chan struct{})
		wf := weir.Register(e, "cancellable", func(ctx weir.Context, _ int) (int, error) {
			return weir.Step(ctx, "wait", func(sc weir.StepContext) (int, error) {
				sc.Stream("out").WriteString("partial")
				sc.Stream("out").Flush()
				close(started)
				<-sc.Done()
				return 0, sc.Err()
			})
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, _ := wf.Start(testCtx(t), 0, nil)
		select {
		case <-started:
		case <-testCtx(t).Done():
			t.Fatal("the step never started")
		}
		if err := e.Cancel(testCtx(t), h.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Result(testCtx(t)); !errors.Is(err, weir.ErrCancelled) {
			t.Fatalf("Result err = %v, want ErrCancelled", err)
		}
		if c := dataOf(readAll(t, e, h.ID, "out", weir.CommittedView)); len(c) != 0 {
			t.Fatalf("committed view of a cancelled step: %q", c)
		}
		r, _ := e.GetRun(testCtx(t), h.ID)
		if r.Status != store.RunCancelled {
			t.Fatalf("status %s", r.Status)
		}
		if err := e.Cancel(testCtx(t), "run_nope"); !errors.Is(err, weir.ErrNotFound) {
			t.Fatalf("cancel unknown run: %v, want ErrNotFound", err)
		}
	})
}

func TestDurableSleepParksAndResumes(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.ParkAfter = 20 * time.Millisecond
		e := newEngine(t, s, cfg)
		var execs atomic.Int32
		wf := weir.Register(e, "sleeper", func(ctx weir.Context, d time.Duration) (int32, error) {
			n := execs.Add(1)
			weir.Sleep(ctx, d)
			return n, nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		h, _ := wf.Start(testCtx(t), 300*time.Millisecond, nil)
		n, err := h.Result(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(start) < 300*time.Millisecond {
			t.Fatalf("woke after %v, before the sleep ended", time.Since(start))
		}
		if n != 2 {
			t.Fatalf("workflow executed %d times, want 2 (before the park and after)", n)
		}
		evs, _ := s.ListEvents(testCtx(t), h.ID, 0)
		var sched, fired int
		for _, ev := range evs {
			switch ev.Type {
			case store.EventSleepScheduled:
				sched++
			case store.EventSleepFired:
				fired++
			}
		}
		if sched != 1 || fired != 1 {
			t.Fatalf("sleep scheduled %d times and fired %d, want once each", sched, fired)
		}
	})
}

// The zombie: attempt 1 of a step loses its worker's lease but keeps running
// and writing (it ignores its context). Another worker takes the run over and
// starts attempt 2. Every write of the zombie after that is fenced.
func TestZombieAttemptIsFenced(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		fs := &faultStore{Full: s}
		zombieErr := make(chan error, 1)
		release := make(chan struct{})
		defer func() {
			select {
			case <-release:
			default:
				close(release)
			}
		}()
		body := func(ctx weir.Context, _ int) (int, error) {
			return weir.Step(ctx, "emit", func(sc weir.StepContext) (int, error) {
				w := sc.Stream("out")
				if sc.Attempt() == 1 {
					for i := 0; ; i++ {
						if _, err := fmt.Fprintf(w, "zombie %d", i); err != nil {
							zombieErr <- err
							return 0, err
						}
						if err := w.Flush(); err != nil {
							zombieErr <- err
							return 0, err
						}
						if i == 2 {
							fs.renewFault.Store(true) // the worker loses its lease
						}
						time.Sleep(5 * time.Millisecond)
					}
				}
				for i := range 3 {
					fmt.Fprintf(w, "fresh %d", i)
				}
				// Hold the run open until the zombie has tried to write again.
				<-release
				return 0, nil
			})
		}
		cfgA := fastConfig()
		cfgA.WorkerID = "A"
		a := newEngine(t, fs, cfgA)
		wfA := weir.Register(a, "zombie", body)
		if err := a.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, _ := wfA.Start(testCtx(t), 0, nil)
		// Wait until A is the zombie (its heartbeat fails), then B takes over.
		for deadline := time.Now().Add(20 * time.Second); !fs.renewFault.Load(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the first attempt never wrote its third chunk")
			}
		}
		cfgB := fastConfig()
		cfgB.WorkerID = "B"
		b := newEngine(t, s, cfgB)
		weir.Register(b, "zombie", body)
		if err := b.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		var err error
		select {
		case err = <-zombieErr:
		case <-time.After(20 * time.Second):
			t.Fatal("the zombie was never fenced")
		}
		if !errors.Is(err, weir.ErrFenced) {
			t.Fatalf("zombie write error %v, want ErrFenced", err)
		}
		close(release)
		if _, err := b.Wait(testCtx(t), h.ID); err != nil {
			t.Fatal(err)
		}
		live := readAll(t, b, h.ID, "out", weir.LiveView)
		checkDense(t, live)
		// Invariant 6: no record of attempt 1 after the first record of attempt 2.
		seen2 := false
		for _, r := range live {
			if r.Attempt == 2 {
				seen2 = true
			}
			if r.Attempt == 1 && seen2 {
				t.Fatalf("attempt 1 wrote %v after attempt 2 began", r.Record)
			}
		}
		if got := dataOf(readAll(t, b, h.ID, "out", weir.CommittedView)); !reflect.DeepEqual(got, []string{"fresh 0", "fresh 1", "fresh 2"}) {
			t.Fatalf("committed view %q, want only attempt 2's output", got)
		}
	})
}

// A batch whose reply is lost after the database committed it is resent by
// the writer with the same (writer, attempt, seq): acknowledged, not
// appended again. So is one lost before it reached the database.
func TestLostAppendRepliesAreResentWithoutDuplicates(t *testing.T) {
	for _, afterCommit := range []bool{true, false} {
		t.Run(fmt.Sprintf("afterCommit=%v", afterCommit), func(t *testing.T) {
			eachStore(t, func(t *testing.T, s store.Full) {
				fs := &faultStore{Full: s, appendFault: func(call int, committed bool) error {
					if call%2 == 0 && committed == afterCommit {
						return errInjected
					}
					return nil
				}}
				cfg := fastConfig()
				cfg.Writer.MaxBatchChunks = 100
				e := newEngine(t, fs, cfg)
				wf := weir.Register(e, "pages", func(ctx weir.Context, n int) (int, error) {
					return weir.Step(ctx, "emit", func(sc weir.StepContext) (int, error) {
						w := sc.Stream("out")
						for i := range n {
							fmt.Fprintf(w, "chunk %d", i)
						}
						return n, nil
					})
				})
				if err := e.Work(testCtx(t)); err != nil {
					t.Fatal(err)
				}
				h, _ := wf.Start(testCtx(t), 2500, nil)
				if _, err := h.Result(testCtx(t)); err != nil {
					t.Fatal(err)
				}
				committed := readAll(t, e, h.ID, "out", weir.CommittedView)
				checkNoDuplicates(t, committed)
				if n := len(dataOf(committed)); n != 2500 {
					t.Fatalf("committed %d chunks, want 2500", n)
				}
				if n := len(kinds(readAll(t, e, h.ID, "out", weir.LiveView), stream.KindData)); n != 2500 {
					t.Fatalf("live view has %d data records, want 2500", n)
				}
			})
		})
	}
}

// The seed report's second case: a client pages a 2,500-chunk batch, page 2
// fails, and the client re-sends the whole buffer. With per-chunk seqs the
// re-sent first page is acknowledged, not appended again.
func TestPagedBatchResentInFull(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		ctx := testCtx(t)
		info, err := s.OpenStream(ctx, &store.OpenStreamParams{Path: "paged", Create: true})
		if err != nil {
			t.Fatal(err)
		}
		chunks := make([][]byte, 2500)
		for i := range chunks {
			chunks[i] = []byte(fmt.Sprintf("c%04d", i))
		}
		send := func(from, to int) error {
			_, err := s.Append(ctx, &store.AppendParams{StreamID: info.ID, Writer: "client-1", Attempt: 0, FirstSeq: int64(from), Chunks: chunks[from:to]})
			return err
		}
		if err := send(0, 1000); err != nil {
			t.Fatal(err)
		}
		// Page 2 "fails": the client never learns whether it landed. Try both:
		// here it did land.
		if err := send(1000, 2000); err != nil {
			t.Fatal(err)
		}
		for p := 0; p < 2500; p += 1000 {
			if err := send(p, min(p+1000, 2500)); err != nil {
				t.Fatalf("re-sending page at %d: %v", p, err)
			}
		}
		var recs []weir.StreamRecord
		for r, err := range newEngine(t, s, &weir.Config{NoWorker: true}).ReadPath(ctx, info.Path, nil) {
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, r)
		}
		checkDense(t, recs)
		if len(recs) != 2500 {
			t.Fatalf("%d records, want 2500", len(recs))
		}
		for i, r := range recs {
			if string(r.Data) != string(chunks[i]) {
				t.Fatalf("record %d = %q, want %q", i, r.Data, chunks[i])
			}
		}
	})
}

func TestReadUnknownRun(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		for _, err := range e.Read(testCtx(t), "run_nope", "out", &weir.ReadOptions{Follow: true}) {
			if !errors.Is(err, weir.ErrNotFound) {
				t.Fatalf("err %v, want ErrNotFound", err)
			}
			return
		}
		t.Fatal("no error for an unknown run")
	})
}

func TestChunkOverLimitIsRefused(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		wf := weir.Register(e, "big", func(ctx weir.Context, _ int) (string, error) {
			return weir.Step(ctx, "emit", func(sc weir.StepContext) (string, error) {
				_, err := sc.Stream("out").Write(make([]byte, store.MaxChunkSize+1))
				if err == nil {
					return "", errors.New("no error")
				}
				return err.Error(), nil
			})
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, _ := wf.Start(testCtx(t), 0, nil)
		msg, err := h.Result(testCtx(t))
		if err != nil || !strings.Contains(msg, "too large") || !strings.Contains(msg, "limit is 4194304") {
			t.Fatalf("got %q, %v; want an error naming the limit", msg, err)
		}
	})
}
