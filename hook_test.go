package weir_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
)

type approval struct {
	By string `json:"by"`
	OK bool   `json:"ok"`
}

// hookEvents returns run's events of type.
func hookEvents(t *testing.T, s store.Full, run string, typ store.EventType) []store.Event {
	t.Helper()
	evs, err := s.ListEvents(testCtx(t), run, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// deliverWhenReady delivers payload to token once its hook exists.
func deliverWhenReady(t *testing.T, e *weir.Engine, token string, payload string, opts *weir.DeliverOptions) *weir.HookDelivery {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := e.DeliverHook(testCtx(t), token, json.RawMessage(payload), opts)
		if err == nil {
			return res
		}
		if !errors.Is(err, weir.ErrNotFound) || time.Now().After(deadline) {
			t.Fatalf("deliver to %q: %v", token, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A run waits for a person's approval: it parks, holding nothing, and the
// delivery wakes it. The payload is recorded once, a re-sent delivery is
// answered as the first, and replay takes the same payloads.
func TestHookWaitsForApproval(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.ParkAfter = 20 * time.Millisecond
		e := newEngine(t, s, cfg)
		var executions atomic.Int32
		wf := weir.Register(e, "approve", func(ctx weir.Context, order string) ([]approval, error) {
			executions.Add(1)
			h, err := weir.NewHook[approval](ctx, "order-"+order)
			if err != nil {
				return nil, err
			}
			var out []approval
			for a, err := range h.Each(ctx) {
				if err != nil {
					return nil, err
				}
				if out = append(out, a); len(out) == 2 {
					break
				}
			}
			return out, nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), "42", nil)
		if err != nil {
			t.Fatal(err)
		}
		waitParked(t, s, h.ID)
		key := &weir.DeliverOptions{IdempotencyKey: "click-1"}
		first := deliverWhenReady(t, e, "order-42", `{"by":"ann","ok":true}`, key)
		again := deliverWhenReady(t, e, "order-42", `{"by":"ann","ok":true}`, key)
		if !again.Duplicate || again.Seq != first.Seq {
			t.Fatalf("a re-sent delivery: %+v, first %+v", again, first)
		}
		if _, err := e.DeliverHook(testCtx(t), "order-42", json.RawMessage(`{"by":"bob"}`), key); !errors.Is(err, weir.ErrKeyReused) {
			t.Fatalf("a key reused with another payload: %v", err)
		}
		deliverWhenReady(t, e, "order-42", `{"by":"bob","ok":false}`, nil)
		out, err := h.Result(testCtx(t))
		if err != nil || len(out) != 2 || out[0] != (approval{"ann", true}) || out[1] != (approval{"bob", false}) {
			t.Fatalf("result %+v %v", out, err)
		}
		if n := len(hookEvents(t, s, h.ID, store.EventHookReceived)); n != 2 {
			t.Fatalf("%d hook_received events, want 2", n)
		}
		if executions.Load() < 2 {
			t.Fatal("the run never parked while it waited")
		}
		if err := e.Replay(testCtx(t), h.ID); err != nil {
			t.Fatalf("replay: %v", err)
		}
		// The run ended: its hook is disposed.
		if _, err := e.DeliverHook(testCtx(t), "order-42", json.RawMessage(`1`), nil); !errors.Is(err, store.ErrGone) {
			t.Fatalf("a delivery to an ended run: %v, want ErrGone", err)
		}
	})
}

// waitParked waits until run is released (parked), with a deadline.
func waitParked(t *testing.T, s store.Full, run string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := s.GetRun(testCtx(t), run)
		if err != nil {
			t.Fatal(err)
		}
		if r.LeaseOwner == "" && r.WakeAt.After(time.Now().Add(time.Hour)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s did not park within 10s: %+v", run, r)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A payload delivered before the run waits for it is kept for it; one
// delivered by another process (straight to the store: no notice here)
// is found by the run's own look at its log.
func TestHookPayloadEarlyAndFromElsewhere(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		gate := make(chan struct{})
		wf := weir.Register(e, "early", func(ctx weir.Context, _ struct{}) (int, error) {
			h, err := weir.NewHook[int](ctx, "early")
			if err != nil {
				return 0, err
			}
			// A step runs meanwhile, so the run stays in process.
			busy := weir.StepAsync(ctx, "busy", func(sc weir.StepContext) (int, error) {
				<-gate
				return 1, nil
			})
			a, err := h.Receive(ctx)
			if err != nil {
				return 0, err
			}
			close(gate)
			b, err := busy.Get(ctx)
			return a + b, err
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := s.DeliverHook(testCtx(t), &store.DeliverHookParams{Token: "early", Payload: []byte(`41`)})
			if err == nil {
				break
			}
			if !errors.Is(err, store.ErrNotFound) || time.Now().After(deadline) {
				t.Fatalf("deliver: %v", err)
			}
			time.Sleep(2 * time.Millisecond)
		}
		if n, err := h.Result(testCtx(t)); err != nil || n != 42 {
			t.Fatalf("result %d %v", n, err)
		}
	})
}

// "The approval, or 24 hours": a hook raced against a durable timer.
func TestHookReceiveWithin(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		wf := weir.Register(e, "within", func(ctx weir.Context, _ struct{}) (string, error) {
			h, err := weir.NewHook[string](ctx, "")
			if err != nil {
				return "", err
			}
			v, ok, err := h.ReceiveWithin(ctx, 50*time.Millisecond)
			if err != nil {
				return "", err
			}
			if !ok {
				return "no answer from " + h.Token()[:5], nil
			}
			return v, nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := h.Result(testCtx(t)); err != nil || out != "no answer from hook_" {
			t.Fatalf("result %q %v", out, err)
		}
		if err := e.Replay(testCtx(t), h.ID); err != nil {
			t.Fatalf("replay: %v", err)
		}
	})
}

// Bad input is refused with a clear error and records nothing.
func TestHookBadInput(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		hold := make(chan struct{})
		defer close(hold)
		wf := weir.Register(e, "bad", func(ctx weir.Context, _ struct{}) (string, error) {
			if _, err := weir.NewHook[int](ctx, "taken"); err != nil {
				return "", err
			}
			_, err := weir.Step(ctx, "hold", func(sc weir.StepContext) (int, error) {
				select {
				case <-hold:
				case <-sc.Done():
				}
				return 0, nil
			})
			return "", err
		})
		other := weir.Register(e, "other", func(ctx weir.Context, _ struct{}) (string, error) {
			_, err := weir.NewHook[int](ctx, "taken")
			return "", err
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		deliverWhenReady(t, e, "taken", `1`, nil)
		for _, tc := range []struct {
			payload string
			want    error
		}{
			{`{not json`, store.ErrInvalid},
			{`"` + strings.Repeat("a", store.MaxHookPayload) + `"`, store.ErrTooLarge},
		} {
			if _, err := e.DeliverHook(testCtx(t), "taken", json.RawMessage(tc.payload), nil); !errors.Is(err, tc.want) {
				t.Errorf("payload %.20q: %v, want %v", tc.payload, err, tc.want)
			}
		}
		if _, err := e.DeliverHook(testCtx(t), "unknown", json.RawMessage(`1`), nil); !errors.Is(err, weir.ErrNotFound) {
			t.Errorf("an unknown token: %v", err)
		}
		if n := len(hookEvents(t, s, h.ID, store.EventHookReceived)); n != 1 {
			t.Fatalf("%d deliveries recorded, want the one good one", n)
		}
		h2, err := other.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h2.Result(testCtx(t)); err == nil || !errors.Is(err, weir.ErrRunFailed) {
			t.Fatalf("a run taking another run's live token: %v", err)
		}
		r, _ := e.GetRun(testCtx(t), h2.ID)
		if r == nil || !strings.Contains(r.Error, "hook token in use") {
			t.Fatalf("its error %q does not say why", r.Error)
		}
	})
}

// A run parked on a hook survives its engine: another engine, started
// after the delivery, resumes it with the payload.
func TestHookSurvivesARestart(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.ParkAfter = 20 * time.Millisecond
		register := func(e *weir.Engine) *weir.Workflow[struct{}, string] {
			return weir.Register(e, "restart", func(ctx weir.Context, _ struct{}) (string, error) {
				h, err := weir.NewHook[string](ctx, "restart")
				if err != nil {
					return "", err
				}
				return h.Receive(ctx)
			})
		}
		e1, err := weir.New(s, cfg)
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
		waitParked(t, s, h.ID)
		if err := e1.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DeliverHook(testCtx(t), &store.DeliverHookParams{Token: "restart", Payload: []byte(`"resumed"`)}); err != nil {
			t.Fatal(err)
		}
		e2 := newEngine(t, s, cfg)
		register(e2)
		if err := e2.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		r, err := e2.Wait(testCtx(t), h.ID)
		if err != nil || r.Status != store.RunCompleted || string(r.Output) != `"resumed"` {
			t.Fatalf("run %+v %v", r, err)
		}
	})
}

// A wait on a disposed hook, and a negative timeout, are clear errors; a
// delivery after Close is refused and records nothing.
func TestHookDisposedAndNegativeTimeout(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		wf := weir.Register(e, "dispose", func(ctx weir.Context, _ struct{}) (string, error) {
			h, err := weir.NewHook[int](ctx, "disposed")
			if err != nil {
				return "", err
			}
			if _, _, err := h.ReceiveWithin(ctx, -time.Second); err == nil || !strings.Contains(err.Error(), "negative timeout") {
				return "", errors.New("a negative timeout was taken")
			}
			h.Close(ctx)
			_, err = h.Receive(ctx)
			if !errors.Is(err, weir.ErrHookDisposed) {
				return "", err
			}
			return err.Error(), nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		out, err := h.Result(testCtx(t))
		if err != nil || !strings.Contains(out, "hook disposed") {
			t.Fatalf("result %q %v", out, err)
		}
		// It names the hook by its reference: the error may become the
		// run's, and a token is a capability (red-team round eleven).
		if strings.Contains(out, `"disposed"`) || !strings.Contains(out, weir.HookRef("disposed")) {
			t.Fatalf("the error names the hook as %q, want %s and not its token", out, weir.HookRef("disposed"))
		}
		if _, err := e.DeliverHook(testCtx(t), "disposed", json.RawMessage(`1`), nil); !errors.Is(err, store.ErrGone) {
			t.Fatalf("a delivery after Close: %v", err)
		}
		if n := len(hookEvents(t, s, h.ID, store.EventHookReceived)); n != 0 {
			t.Fatalf("%d deliveries recorded", n)
		}
		if n := len(hookEvents(t, s, h.ID, store.EventHookDisposed)); n != 1 {
			t.Fatalf("%d hook_disposed events", n)
		}
	})
}

// A payload the hook cannot decode fails the run naming the hook by
// reference (weir.HookRef), never by its token: the run's error reaches
// spans and logs, and the token is a capability.
func TestHookDecodeErrorHidesTheToken(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		const token = "SECRETTOKEN-th1-abcdef"
		wf := weir.Register(e, "typed", func(ctx weir.Context, _ struct{}) (int, error) {
			h, err := weir.NewHook[int](ctx, token)
			if err != nil {
				return 0, err
			}
			return h.Next().Get(ctx)
		})
		must(t, e.Work(testCtx(t)))
		h, err := wf.Start(testCtx(t), struct{}{}, nil)
		must(t, err)
		deliverWhenReady(t, e, token, `"not a number"`, nil)
		_, err = h.Result(testCtx(t))
		if err == nil || strings.Contains(err.Error(), token) || !strings.Contains(err.Error(), weir.HookRef(token)) {
			t.Fatalf("the run's error %v: want the hook's reference, not its token", err)
		}
	})
}
