package weir_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
)

// A workflow's writer used after its run ended returns ErrWriterClosed; it
// neither unwinds the caller's goroutine (a hang from main) nor writes.
func TestWorkflowWriterAfterTheRunEnded(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		escaped := make(chan *weir.Writer, 1)
		wf := weir.Register(e, "escape", func(ctx weir.Context, _ int) (int, error) {
			w := ctx.Stream("out")
			if _, err := w.WriteString("inside"); err != nil {
				return 0, err
			}
			escaped <- w
			return 1, nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Result(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		var w *weir.Writer
		select {
		case w = <-escaped:
		default:
			t.Fatal("the run ended without handing its writer out")
		}
		done := make(chan error, 1)
		go func() {
			_, err := w.WriteString("after")
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, weir.ErrWriterClosed) {
				t.Fatalf("write after the run: err = %v, want ErrWriterClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a write after the run never returned")
		}
		if got := dataOf(readAll(t, e, h.ID, "out", weir.LiveView)); len(got) != 1 || got[0] != "inside" {
			t.Fatalf("stream %q", got)
		}
	})
}

// A step's writer used after its step returned returns ErrWriterClosed.
func TestStepWriterAfterTheStepReturned(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		var late error
		wf := weir.Register(e, "late", func(ctx weir.Context, _ int) (int, error) {
			var kept *weir.Writer
			_, err := weir.Step(ctx, "write", func(sc weir.StepContext) (int, error) {
				kept = sc.Stream("out")
				_, err := kept.WriteString("a")
				return 0, err
			})
			if err != nil {
				return 0, err
			}
			_, late = kept.WriteString("b")
			return 0, nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, _ := wf.Start(testCtx(t), 0, nil)
		if _, err := h.Result(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(late, weir.ErrWriterClosed) {
			t.Fatalf("write after the step: err = %v, want ErrWriterClosed", late)
		}
	})
}

// A zombie whose worker learns that it lost the lease before its next
// append gets ErrLeaseLost from its writes, not the step context's
// cancellation; one fenced by the database gets ErrFenced
// (TestZombieAttemptIsFenced). Both mean: stop.
func TestZombieThatLearnsItLostTheLease(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		fs := &lostStore{Full: s}
		e := newEngine(t, fs, fastConfig())
		writeErr := make(chan error, 1)
		wf := weir.Register(e, "zombie", func(ctx weir.Context, _ int) (int, error) {
			return weir.Step(ctx, "emit", func(sc weir.StepContext) (int, error) {
				w := sc.Stream("out")
				if _, err := w.WriteString("first"); err != nil {
					return 0, err
				}
				if err := w.Flush(); err != nil {
					return 0, err
				}
				fs.lost.Store(true) // the next renewal says the lease is gone
				<-sc.Done()         // the step's context ends with it
				_, _ = w.WriteString("after")
				err := w.Flush()
				writeErr <- err
				return 0, err
			})
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if _, err := wf.Start(testCtx(t), 0, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-writeErr:
			if !errors.Is(err, weir.ErrLeaseLost) {
				t.Fatalf("zombie write: err = %v, want ErrLeaseLost", err)
			}
		case <-testCtx(t).Done():
			t.Fatal("the zombie's write never returned")
		}
	})
}

// lostStore reports the lease lost once lost is set.
type lostStore struct {
	store.Full
	lost atomic.Bool
}

func (l *lostStore) RenewLease(ctx context.Context, p *store.RenewLeaseParams) (bool, error) {
	if l.lost.Load() {
		return false, store.ErrLeaseLost
	}
	return l.Full.RenewLease(ctx, p)
}
