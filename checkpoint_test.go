package weir_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
)

// countingStore is a real store that counts the engine's transactions.
type countingStore struct {
	store.Full
	records, claims, lists atomic.Int64
}

func (c *countingStore) Advance(ctx context.Context, p *store.AdvanceParams) error {
	c.records.Add(1)
	return c.Full.Advance(ctx, p)
}

func (c *countingStore) ClaimRuns(ctx context.Context, p *store.ClaimRunsParams) ([]*store.Run, error) {
	c.claims.Add(1)
	return c.Full.ClaimRuns(ctx, p)
}

func (c *countingStore) ListEvents(ctx context.Context, id string, after int64) ([]store.Event, error) {
	c.lists.Add(1)
	return c.Full.ListEvents(ctx, id, after)
}

func threeSteps(ctx weir.Context, _ struct{}) (int, error) {
	sum := 0
	for i := range 3 {
		n, err := weir.Step(ctx, "s", func(sc weir.StepContext) (int, error) { return i + 1, nil })
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

func eventTypes(evs []store.Event) []store.EventType {
	var out []store.EventType
	for _, ev := range evs {
		out = append(out, ev.Type)
	}
	return out
}

// A run started here of three short steps costs one Advance: it is leased
// as it is created (no claim, no look at its empty log), its start rides
// with its first record, and each step's outcome waits for the next. The
// log is the same as when each is written alone (StepOutcomeDelay NoWait).
func TestShortStepsShareOneRecord(t *testing.T) {
	want := []store.EventType{store.EventRunStarted,
		store.EventStepStarted, store.EventStepCompleted, store.EventStepStarted, store.EventStepCompleted,
		store.EventStepStarted, store.EventStepCompleted, store.EventRunCompleted}
	for _, tc := range []struct {
		name    string
		delay   time.Duration
		records int64
	}{
		{"waiting", time.Hour, 1},
		{"NoWait", weir.NoWait, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, s store.Full) {
				cs := &countingStore{Full: s}
				cfg := fastConfig()
				cfg.StepOutcomeDelay, cfg.PollInterval = tc.delay, time.Hour
				e := newEngine(t, cs, cfg)
				wf := weir.Register(e, "three", threeSteps)
				if err := e.Work(testCtx(t)); err != nil {
					t.Fatal(err)
				}
				cs.claims.Store(0) // the loop's first look
				h, err := wf.Start(testCtx(t), struct{}{}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if got, err := h.Result(testCtx(t)); err != nil || got != 6 {
					t.Fatalf("result %d, %v", got, err)
				}
				if r, c, l := cs.records.Load(), cs.claims.Load(), cs.lists.Load(); r != tc.records || l != 0 {
					t.Fatalf("%d records, %d claims, %d log reads; want %d records, no log read", r, c, l, tc.records)
				}
				evs, err := s.ListEvents(testCtx(t), h.ID, 0)
				if err != nil {
					t.Fatal(err)
				}
				if got := eventTypes(evs); !slices.Equal(got, want) {
					t.Fatalf("log %v, want %v", got, want)
				}
				for i, ev := range evs {
					if ev.Seq != int64(i+1) || ev.At.IsZero() {
						t.Fatalf("event %d: %+v", i, ev)
					}
				}
			})
		})
	}
}

// A completed step's outcome does not wait for a next record that is slow
// to come: StepOutcomeDelay after it, it is written on its own, while the
// step after it still runs.
func TestWaitingOutcomeIsWrittenAfterTheDelay(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.StepOutcomeDelay = 20 * time.Millisecond
		e := newEngine(t, s, cfg)
		wf := weir.Register(e, "slow-second", func(ctx weir.Context, _ struct{}) (string, error) {
			id := ctx.RunID()
			if _, err := weir.Step(ctx, "first", func(sc weir.StepContext) (int, error) { return 1, nil }); err != nil {
				return "", err
			}
			return weir.Step(ctx, "second", func(sc weir.StepContext) (string, error) {
				deadline := time.Now().Add(10 * time.Second)
				for time.Now().Before(deadline) {
					evs, err := s.ListEvents(sc, id, 0)
					if err != nil {
						return "", err
					}
					if slices.Contains(eventTypes(evs), store.EventStepCompleted) {
						return "seen", nil
					}
					select {
					case <-sc.Done():
						return "", sc.Err()
					case <-time.After(5 * time.Millisecond): // polling the log, not syncing
					}
				}
				return "", weir.NonRetryable(context.DeadlineExceeded)
			})
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := h.Result(testCtx(t)); err != nil || got != "seen" {
			t.Fatalf("the first step's outcome was not written while the second ran: %q, %v", got, err)
		}
	})
}

// A run started while this engine has no free slot is created free and
// claimed as before; one started by an engine that does not execute runs
// (NoWorker) is left to the workers.
func TestStartWithoutASlotIsClaimed(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.Concurrency = 1
		e := newEngine(t, s, cfg)
		release := make(chan struct{})
		block := weir.Register(e, "block", func(ctx weir.Context, _ struct{}) (int, error) {
			return weir.Step(ctx, "wait", func(sc weir.StepContext) (int, error) {
				select {
				case <-release:
					return 1, nil
				case <-sc.Done():
					return 0, sc.Err()
				}
			})
		})
		wf := weir.Register(e, "three", threeSteps)
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		hb, err := block.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.GetRun(testCtx(t), h.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.LeaseEpoch != 0 {
			t.Fatalf("a run started with no slot free was leased at creation: %+v", r)
		}
		close(release)
		if _, err := hb.Result(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if got, err := h.Result(testCtx(t)); err != nil || got != 6 {
			t.Fatalf("result %d, %v", got, err)
		}
	})
}

// A write of the run that is not a record (here a hook's creation) first
// writes the outcome that waits: the log shows the step completed before
// the hook that came after it, however long StepOutcomeDelay is.
func TestWaitingOutcomeIsWrittenBeforeAHook(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.StepOutcomeDelay = time.Hour
		e := newEngine(t, s, cfg)
		wf := weir.Register(e, "step-then-hook", func(ctx weir.Context, _ struct{}) (string, error) {
			if _, err := weir.Step(ctx, "first", func(sc weir.StepContext) (int, error) { return 1, nil }); err != nil {
				return "", err
			}
			h, err := weir.NewHook[string](ctx, "after-step")
			if err != nil {
				return "", err
			}
			return h.Receive(ctx)
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
			evs, err := s.ListEvents(testCtx(t), h.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			types := eventTypes(evs)
			if slices.Contains(types, store.EventHookCreated) {
				if want := []store.EventType{store.EventRunStarted, store.EventStepStarted, store.EventStepCompleted, store.EventHookCreated}; !slices.Equal(types, want) {
					t.Fatalf("log %v, want %v", types, want)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no hook after 10s: %v", types)
			}
			time.Sleep(5 * time.Millisecond) // polling the log, not syncing
		}
		if _, err := e.DeliverHook(testCtx(t), "after-step", []byte(`"done"`), nil); err != nil {
			t.Fatal(err)
		}
		if got, err := h.Result(testCtx(t)); err != nil || got != "done" {
			t.Fatalf("result %q, %v", got, err)
		}
	})
}

// lostReplyStore is a real store whose CreateRun acts as a create retried
// after its first try's reply was lost: the first try created the run, the
// answer is the retry's (created false).
type lostReplyStore struct{ store.Full }

func (l *lostReplyStore) CreateRun(ctx context.Context, p *store.CreateRunParams) (*store.Run, bool, error) {
	if _, _, err := l.Full.CreateRun(ctx, p); err != nil {
		return nil, false, err
	}
	return l.Full.CreateRun(ctx, p)
}

// A start whose create was retried after a lost reply finds its run leased
// to this engine, not created by this try: it runs it at once instead of
// waiting for that lease to expire. Starting one id twice at once runs it
// once.
func TestStartAfterALostCreateReplyRunsAtOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.LeaseTTL, cfg.PollInterval = time.Hour, time.Hour // neither a claim nor an expiry can run it
		e := newEngine(t, &lostReplyStore{Full: s}, cfg)
		var ran atomic.Int64
		wf := weir.Register(e, "once", func(ctx weir.Context, _ struct{}) (int, error) {
			return weir.Step(ctx, "s", func(sc weir.StepContext) (int, error) { return int(ran.Add(1)), nil })
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Second)
		defer cancel()
		h, err := wf.Start(ctx, struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := h.Result(ctx); err != nil || got != 1 {
			t.Fatalf("result %d, %v (a run leased here waited for its lease)", got, err)
		}
		hs := make(chan *weir.Handle[int], 2)
		for range 2 {
			go func() {
				h, err := wf.Start(ctx, struct{}{}, &weir.StartOptions{ID: "twice"})
				if err != nil {
					t.Error(err)
				}
				hs <- h
			}()
		}
		for range 2 {
			if h := <-hs; h != nil {
				if _, err := h.Result(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		if n := ran.Load(); n != 2 {
			t.Fatalf("the step ran %d times for two runs", n)
		}
	})
}
