package weir_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
)

// A workflow starts children of another workflow, some at once, and waits
// for their results; a failed child is an ErrRunFailed; the children know
// their parent; replay finds the same children.
func TestChildRuns(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.ParkAfter = 20 * time.Millisecond
		e := newEngine(t, s, cfg)
		square := weir.Register(e, "square", func(ctx weir.Context, n int) (int, error) {
			if n < 0 {
				return 0, weir.NonRetryable(errors.New("negative"))
			}
			return weir.Step(ctx, "mul", func(weir.StepContext) (int, error) { return n * n, nil })
		})
		var parentRuns atomic.Int32
		parent := weir.Register(e, "sum-of-squares", func(ctx weir.Context, ns []int) (int, error) {
			parentRuns.Add(1)
			var cs []*weir.Child[int]
			for _, n := range ns {
				cs = append(cs, weir.StartChild(ctx, square, n, nil))
			}
			sum := 0
			for _, c := range cs {
				v, err := c.Get(ctx)
				if err != nil {
					return 0, err
				}
				sum += v
			}
			return sum, nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := parent.Start(testCtx(t), []int{1, 2, 3}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := h.Result(testCtx(t)); err != nil || n != 14 {
			t.Fatalf("result %d %v", n, err)
		}
		child, err := e.GetRun(testCtx(t), h.ID+"-2")
		if err != nil || child.Parent != h.ID || child.Status != store.RunCompleted {
			t.Fatalf("child %+v %v", child, err)
		}
		if err := e.Replay(testCtx(t), h.ID); err != nil {
			t.Fatalf("replay: %v", err)
		}
		bad, err := parent.Start(testCtx(t), []int{4, -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bad.Result(testCtx(t)); !errors.Is(err, weir.ErrRunFailed) || !strings.Contains(err.Error(), "negative") {
			t.Fatalf("a failed child: %v", err)
		}
	})
}

// Cancelling a parent cancels its children that have not ended.
func TestChildCancelledWithItsParent(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		forever := weir.Register(e, "forever", func(ctx weir.Context, _ struct{}) (int, error) {
			return weir.Step(ctx, "wait", func(sc weir.StepContext) (int, error) {
				<-sc.Done()
				return 0, weir.NonRetryable(sc.Err())
			})
		})
		parent := weir.Register(e, "parent", func(ctx weir.Context, _ struct{}) (int, error) {
			return weir.StartChild(ctx, forever, struct{}{}, &weir.ChildOptions{ID: "the-child"}).Get(ctx)
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := parent.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitEvent(t, e, h.ID, store.EventChildStarted)
		if err := e.Cancel(testCtx(t), h.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Result(testCtx(t)); !errors.Is(err, weir.ErrCancelled) {
			t.Fatalf("parent: %v", err)
		}
		r, err := e.Wait(testCtx(t), "the-child")
		if err != nil || r.Status != store.RunCancelled {
			t.Fatalf("child %+v %v, want cancelled", r, err)
		}
	})
}

// A child whose end never reached its parent (here: a run that existed,
// ended, before the parent named it as its child) is found by the parent's
// look at the child's row; and a parent need not wait for its children.
func TestChildEndFoundByTheParent(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		echo := weir.Register(e, "echo", func(ctx weir.Context, v string) (string, error) { return v, nil })
		parent := weir.Register(e, "parent", func(ctx weir.Context, _ struct{}) (string, error) {
			weir.StartChild(ctx, echo, "fire and forget", nil)
			return weir.StartChild(ctx, echo, "ignored: the run exists", &weir.ChildOptions{ID: "done-before"}).Get(ctx)
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		pre, err := echo.Start(testCtx(t), "from before", &weir.StartOptions{ID: "done-before"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pre.Result(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := parent.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := h.Result(testCtx(t)); err != nil || out != "from before" {
			t.Fatalf("result %q %v", out, err)
		}
		if r, err := e.Wait(testCtx(t), h.ID+"-1"); err != nil || r.Status != store.RunCompleted {
			t.Fatalf("the child nobody waited for: %+v %v", r, err)
		}
	})
}

// A child id that could never be a run's fails the child (its Get), not the
// run's execution.
func TestChildWithABadID(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		echo := weir.Register(e, "echo", func(ctx weir.Context, v string) (string, error) { return v, nil })
		parent := weir.Register(e, "parent", func(ctx weir.Context, _ struct{}) (string, error) {
			_, err := weir.StartChild(ctx, echo, "x", &weir.ChildOptions{ID: "bad\xff"}).Get(ctx)
			if err == nil {
				return "", errors.New("a bad child id was taken")
			}
			return err.Error(), nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := parent.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := h.Result(testCtx(t)); err != nil || !strings.Contains(out, "letters, digits") {
			t.Fatalf("result %q %v", out, err)
		}
	})
}

// A child id taken by a run of another workflow fails the child's Get with
// ErrRunConflict; the parent goes on.
func TestChildIDOfAnotherWorkflow(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		echo := weir.Register(e, "echo", func(ctx weir.Context, v string) (string, error) { return v, nil })
		other := weir.Register(e, "other", func(ctx weir.Context, v string) (string, error) { return v, nil })
		parent := weir.Register(e, "parent", func(ctx weir.Context, _ struct{}) (string, error) {
			_, err := weir.StartChild(ctx, echo, "x", &weir.ChildOptions{ID: "taken"}).Get(ctx)
			if !errors.Is(err, weir.ErrRunConflict) {
				return "", fmt.Errorf("want ErrRunConflict, got %v", err)
			}
			return "went on", nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Start(testCtx(t), "first", &weir.StartOptions{ID: "taken"}); err != nil {
			t.Fatal(err)
		}
		h, err := parent.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := h.Result(testCtx(t)); err != nil || out != "went on" {
			t.Fatalf("result %q %v", out, err)
		}
	})
}

// A child's id taken first by a client's run of the same workflow (the
// default id, <parent>-<op>, is no secret) is not adopted: the child's Get
// fails with ErrRunConflict, and the client's run's output never reaches
// the parent. Nor can a client deliver a child's end to its parent's hook:
// its token is refused as if there were no such hook.
func TestChildIDTakenByAClient(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		gate := make(chan struct{})
		echo := weir.Register(e, "echo", func(ctx weir.Context, v string) (string, error) {
			if v == "slow" {
				<-gate
			}
			return v, nil
		})
		parent := weir.Register(e, "parent", func(ctx weir.Context, in string) (string, error) {
			out, err := weir.StartChild(ctx, echo, in, nil).Get(ctx)
			if err != nil {
				return "", err
			}
			return "child says " + out, nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if _, err := echo.Start(testCtx(t), "ATTACKER", &weir.StartOptions{ID: "vp-1"}); err != nil {
			t.Fatal(err)
		}
		h, err := parent.Start(testCtx(t), "legit", &weir.StartOptions{ID: "vp"})
		if err != nil {
			t.Fatal(err)
		}
		// The parent fails with the child's conflict (a Get's error ends
		// the run here); it never says what the client's run said.
		if out, err := h.Result(testCtx(t)); err == nil || !strings.Contains(err.Error(), `exists with parent ""`) {
			t.Fatalf("result %q %v, want the child's run conflict", out, err)
		}

		// A forged end, while the real child is still running.
		h2, err := parent.Start(testCtx(t), "slow", &weir.StartOptions{ID: "vp2"})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the child vp2-1", func() bool {
			_, err := s.GetRun(testCtx(t), "vp2-1")
			return err == nil
		})
		hooks, err := s.ListHooks(testCtx(t), "vp2")
		must(t, err)
		if len(hooks) != 1 {
			t.Fatalf("hooks of the parent: %+v", hooks)
		}
		_, err = e.DeliverHook(testCtx(t), hooks[0].Token, json.RawMessage(`{"status":"completed","output":"\"FORGED\""}`), nil)
		if !errors.Is(err, weir.ErrNotFound) {
			t.Fatalf("a client's delivery of a child's end: %v, want ErrNotFound", err)
		}
		close(gate)
		if out, err := h2.Result(testCtx(t)); err != nil || out != "child says slow" {
			t.Fatalf("result %q %v", out, err)
		}
	})
}
