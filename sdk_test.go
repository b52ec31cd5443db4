package weir_test

import (
	"errors"
	"github.com/weirhq/weir/store"
	"testing"
	"time"

	"github.com/weirhq/weir"
)

// The SDK's rough edges, as a new user meets them: only package weir is
// imported here.

// A reader attaches before the run exists and follows it from its start.
func TestReadBeforeTheRunStarts(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		wf := weir.Register(e, "late", func(ctx weir.Context, _ struct{}) (int, error) {
			return weir.Step(ctx, "say", func(sc weir.StepContext) (int, error) {
				_, err := sc.Stream("out").WriteString("hello")
				return 1, err
			})
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		got := make(chan []string, 1)
		go func() {
			var out []string
			for r, err := range e.Read(testCtx(t), "not-yet", "out", &weir.ReadOptions{Follow: true, View: weir.CommittedView, WaitForRun: 10 * time.Second}) {
				if err != nil {
					out = append(out, "error: "+err.Error())
					break
				}
				if r.Kind == weir.KindData {
					out = append(out, string(r.Data))
				}
			}
			got <- out
		}()
		if _, err := wf.Start(testCtx(t), struct{}{}, &weir.StartOptions{ID: "not-yet"}); err != nil {
			t.Fatal(err)
		}
		select {
		case out := <-got:
			if len(out) != 1 || out[0] != "hello" {
				t.Fatalf("read %q", out)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the reader never finished")
		}
		// Without WaitForRun an unknown run is ErrNotFound at once.
		for _, err := range e.Read(testCtx(t), "never", "out", &weir.ReadOptions{Follow: true}) {
			if !errors.Is(err, weir.ErrNotFound) {
				t.Fatalf("unknown run: %v", err)
			}
		}
	})
}

// Result of a run failed by a step gives the *StepError back; statuses and
// runs need no store import; NoWait retries at once.
func TestResultKeepsTheStepError(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		var tries []time.Time
		wf := weir.Register(e, "fails", func(ctx weir.Context, _ struct{}) (int, error) {
			return weir.Step(ctx, "flaky", func(sc weir.StepContext) (int, error) {
				tries = append(tries, time.Now())
				return 0, errors.New("still broken")
			}, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 3, InitialInterval: weir.NoWait}))
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = h.Result(testCtx(t))
		var se *weir.StepError
		var re *weir.RunError
		if !errors.Is(err, weir.ErrRunFailed) || !errors.As(err, &se) || !errors.As(err, &re) {
			t.Fatalf("Result: %v, want a RunError with its StepError", err)
		}
		if se.Name != "flaky" || se.Attempt != 3 || se.Message != "still broken" || re.RunID != h.ID {
			t.Fatalf("step error %+v, run error %+v", se, re)
		}
		var r *weir.Run
		if r, err = e.GetRun(testCtx(t), h.ID); err != nil || r.Status != weir.RunFailed {
			t.Fatalf("run %+v %v", r, err)
		}
		evs, err := e.Events(testCtx(t), h.ID, 0)
		if err != nil || len(evs) == 0 {
			t.Fatalf("events %v %v", evs, err)
		}
		if len(tries) != 3 || tries[2].Sub(tries[0]) > time.Second {
			t.Fatalf("%d tries over %v: NoWait did not retry at once", len(tries), tries[len(tries)-1].Sub(tries[0]))
		}
	})
}
