package weir_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
)

// The tests of issue 19's five cases and the field's sixth, each as it was
// found, on both stores.

// Case 1: two payloads acknowledged while a step runs, then Close and
// Receive: the workflow takes both, then ErrHookDisposed; a second engine
// that takes the run over (the first one's worker lost) replays the same.
func TestHookClosedWithPayloadsAcknowledged(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		delivered := make(chan struct{})
		after := make(chan int64, 4)
		var lost atomic.Bool           // the first engine is gone
		took := make(chan []string, 4) // what each execution took
		register := func(e *weir.Engine) *weir.Workflow[string, []string] {
			return weir.Register(e, "close-pending", func(ctx weir.Context, token string) ([]string, error) {
				h, err := weir.NewHook[string](ctx, token)
				if err != nil {
					return nil, err
				}
				if _, err := weir.Step(ctx, "busy", func(sc weir.StepContext) (int, error) {
					select {
					case <-delivered:
					case <-sc.Done():
						return 0, context.Cause(sc)
					}
					return 0, nil
				}); err != nil {
					return nil, err
				}
				h.Close(ctx)
				var got []string
				for {
					v, err := h.Receive(ctx)
					if errors.Is(err, weir.ErrHookDisposed) {
						break
					}
					if err != nil {
						return nil, err
					}
					got = append(got, v)
				}
				took <- got
				// A workflow write is recognised on replay only if it
				// writes the same bytes.
				if _, err := ctx.Stream("took").WriteString(strings.Join(got, ",")); err != nil {
					return nil, err
				}
				// The worker is lost here, on the first engine.
				if _, err := weir.Step(ctx, "after", func(sc weir.StepContext) (int, error) {
					after <- sc.Attempt()
					if !lost.Load() {
						<-sc.Done()
						return 0, context.Cause(sc)
					}
					return 0, nil
				}); err != nil {
					return nil, err
				}
				return got, nil
			})
		}
		a := newEngine(t, s, nil)
		wf := register(a)
		if err := a.Start(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), "pending-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		deliverWhenReady(t, a, "pending-1", `"one"`, nil)
		deliverWhenReady(t, a, "pending-1", `"two"`, nil)
		close(delivered)
		if live := <-took; !slices.Equal(live, []string{"one", "two"}) {
			t.Fatalf("the execution took %q, want both payloads acknowledged before Close", live)
		}
		<-after
		lost.Store(true)
		if err := a.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		b := newEngine(t, s, nil)
		wf = register(b)
		if err := b.Start(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		got, err := wf.Handle(h.ID).Result(testCtx(t))
		if err != nil || !slices.Equal(got, []string{"one", "two"}) {
			t.Fatalf("result %q %v, want both payloads acknowledged before Close", got, err)
		}
		if err := b.Replay(testCtx(t), h.ID); err != nil {
			t.Fatalf("replay: %v", err)
		}
	})
}

// Case 2: two takers outstanding at once each take their own payload:
// All(h.Next(), h.Next()) gets the first two, and a Future made before a
// Receive is taken after it, so it gets the payload after Receive's.
func TestHookTakersOutstandingAtOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		e := newEngine(t, s, nil)
		wf := weir.Register(e, "takers", func(ctx weir.Context, token string) ([]string, error) {
			h, err := weir.NewHook[string](ctx, token)
			if err != nil {
				return nil, err
			}
			both, err := weir.All(ctx, h.Next(), h.Next())
			if err != nil {
				return nil, err
			}
			third, err := h.Receive(ctx)
			if err != nil {
				return nil, err
			}
			f := h.Next()
			fourth, err := h.Receive(ctx)
			if err != nil {
				return nil, err
			}
			fifth, err := f.Get(ctx)
			if err != nil {
				return nil, err
			}
			again, err := f.Get(ctx) // a Future got twice keeps what it took
			if err != nil || again != fifth {
				return nil, errors.New("a second Get took again")
			}
			return append(both, third, fourth, fifth), nil
		})
		if err := e.Start(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), "takers-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{`"one"`, `"two"`, `"three"`, `"four"`, `"five"`} {
			deliverWhenReady(t, e, "takers-1", p, nil)
		}
		got, err := h.Result(testCtx(t))
		if want := []string{"one", "two", "three", "four", "five"}; err != nil || !slices.Equal(got, want) {
			t.Fatalf("result %q %v, want %q", got, err, want)
		}
		if err := e.Replay(testCtx(t), h.ID); err != nil {
			t.Fatalf("replay: %v", err)
		}
	})
}
