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
	"github.com/weirhq/weir/internal/pgtest"
	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/pgstore"
)

// Steps with WithLimiter keep to their limiter, on both stores: eight
// parallel steps of a concurrency-2 limiter never run more than two at
// once (counted by the steps themselves) and all complete; every slot is
// given back.
func TestLimiterBoundsParallelSteps(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "llm", Concurrency: 2}))
		e := newEngine(t, s, fastConfig())
		var in, most atomic.Int64
		wf := weir.Register(e, "fan", func(ctx weir.Context, _ int) (int, error) {
			var fs []*weir.Future[int]
			for i := range 8 {
				fs = append(fs, weir.StepAsync(ctx, fmt.Sprint("call ", i), func(sc weir.StepContext) (int, error) {
					n := in.Add(1)
					defer in.Add(-1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(20 * time.Millisecond) // the call's duration, not a sync
					return i, nil
				}, weir.WithLimiter("llm", &weir.LimitOptions{Key: fmt.Sprint("tenant", i%2)})))
			}
			out, err := weir.All(ctx, fs...)
			return len(out), err
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), 0, nil)
		must(t, err)
		if n, err := h.Result(testCtx(t)); err != nil || n != 8 {
			t.Fatalf("result %d, %v", n, err)
		}
		if m := most.Load(); m != 2 {
			t.Fatalf("%d steps ran at once, the limiter allows 2", m)
		}
		// Every slot comes back: a grant's idle slots within a tick of the
		// engine's keeper.
		waitFor(t, 10*time.Second, "the limiter to hold nothing after the run", func() bool {
			st, err := s.LimiterState(testCtx(t), "llm", time.Time{})
			must(t, err)
			return len(st.Holds) == 0 && len(st.Waiters) == 0
		})
		// The steps that waited say so in the log, once each, before they
		// started.
		evs, err := s.ListEvents(testCtx(t), h.ID, 0)
		must(t, err)
		waited, waits := map[int64]bool{}, 0
		for _, ev := range evs {
			switch ev.Type {
			case store.EventLimitWaiting:
				if waited[ev.Op] || !strings.Contains(string(ev.Data), `"limiter":"llm"`) {
					t.Fatalf("limit_waiting %+v (again: %v)", ev, waited[ev.Op])
				}
				waited[ev.Op], waits = true, waits+1
			case store.EventStepStarted:
				delete(waited, ev.Op)
			}
		}
		if len(waited) != 0 || waits == 0 {
			t.Fatalf("%d limit_waiting events (8 steps, 2 at once: some wait); steps that waited and never started: %v", waits, waited)
		}
	})
}

// A budget is charged after each attempt with what it reported
// (ChargeLimiter): two steps of 60 tokens spend a budget of 100, so the
// third starts only once the first's charge has left the window.
func TestLimiterBudgetChargedAfter(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		const period = 400 * time.Millisecond
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "tokens", Budget: 100, Period: period}))
		e := newEngine(t, s, fastConfig())
		var mu sync.Mutex
		var starts []time.Time
		wf := weir.Register(e, "spend", func(ctx weir.Context, _ int) (int, error) {
			for i := range 3 {
				if _, err := weir.Step(ctx, fmt.Sprint("call ", i), func(sc weir.StepContext) (int, error) {
					mu.Lock()
					starts = append(starts, time.Now())
					mu.Unlock()
					weir.ChargeLimiter(sc, 60)
					return 60, nil
				}, weir.WithLimiter("tokens", nil)); err != nil {
					return 0, err
				}
			}
			return 3, nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), 0, nil)
		must(t, err)
		if _, err := h.Result(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if len(starts) != 3 {
			t.Fatalf("%d starts", len(starts))
		}
		// The first slot was granted before its step started: the third
		// may start no sooner than a period after the first did, less the
		// time from grant to start.
		if gap := starts[2].Sub(starts[0]); gap < period-50*time.Millisecond {
			t.Fatalf("the third call started %v after the first; the budget's window is %v", gap, period)
		}
		if gap := starts[1].Sub(starts[0]); gap > period/2 {
			t.Fatalf("the second call waited %v with budget left", gap)
		}
	})
}

// A retried step with a limiter takes a slot per attempt and gives each
// back; its stream is still exactly-once (the retry's output, once). A
// limiter that does not exist fails the step for good, with its name.
func TestLimitedStepRetriesAndUnknownLimiter(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "llm", Concurrency: 1, Rate: 100, Period: time.Second}))
		e := newEngine(t, s, fastConfig())
		wf := weir.Register(e, "retry", func(ctx weir.Context, _ int) (string, error) {
			return weir.Step(ctx, "answer", func(sc weir.StepContext) (string, error) {
				w := sc.Stream("tokens")
				if sc.Attempt() == 1 {
					w.WriteString("Hel")
					if err := w.Flush(); err != nil {
						return "", err
					}
					return "", errors.New("the model's connection dropped")
				}
				_, err := w.WriteString("Hello")
				return "ok", err
			}, weir.WithLimiter("llm", nil))
		})
		bad := weir.Register(e, "nolimiter", func(ctx weir.Context, _ int) (string, error) {
			return weir.Step(ctx, "answer", func(sc weir.StepContext) (string, error) { return "ran", nil }, weir.WithLimiter("nope", nil))
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), 0, nil)
		must(t, err)
		if out, err := h.Result(testCtx(t)); err != nil || out != "ok" {
			t.Fatalf("result %q, %v", out, err)
		}
		if got := strings.Join(dataOf(readAll(t, e, h.ID, "tokens", weir.CommittedView)), ""); got != "Hello" {
			t.Fatalf("committed %q", got)
		}
		st, err := s.LimiterState(testCtx(t), "llm", time.Time{})
		must(t, err)
		if len(st.Holds) != 0 || len(st.Uses) != 2 {
			t.Fatalf("after two attempts the limiter has %d holds, %d uses: want 0, 2", len(st.Holds), len(st.Uses))
		}
		hb, err := bad.Start(testCtx(t), 0, nil)
		must(t, err)
		_, err = hb.Result(testCtx(t))
		var se *weir.StepError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), `"nope"`) {
			t.Fatalf("a step of a missing limiter: %v", err)
		}
	})
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Fairness: tenant a has 60 limited steps in line (concurrency 1) when
// tenant b's one arrives; b's key holds no slot, so it goes next: at most
// two of a's steps start between b's wait and b's start (the one whose
// slot b waits for, and one granted before b asked). a's first step holds
// the slot until the line has formed, so that the line does not depend on
// how fast a loaded machine claims runs.
func TestLimiterFairShare(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "llm", Concurrency: 1}))
		cfg := fastConfig()
		cfg.Concurrency = 128
		e := newEngine(t, s, cfg)
		var mu sync.Mutex
		var order []string     // tenants in the order their steps started
		var starts []time.Time // when each started
		hold := make(chan struct{})
		var holding atomic.Bool
		release := sync.OnceFunc(func() { close(hold) })
		defer release()
		wf := weir.Register(e, "call", func(ctx weir.Context, tenant string) (int, error) {
			return weir.Step(ctx, "call", func(sc weir.StepContext) (int, error) {
				mu.Lock()
				order, starts = append(order, tenant), append(starts, time.Now())
				mu.Unlock()
				if tenant == "a" && holding.CompareAndSwap(false, true) {
					<-hold
				}
				time.Sleep(3 * time.Millisecond) // the call, not a sync
				return 1, nil
			}, weir.WithLimiter("llm", &weir.LimitOptions{Key: tenant}))
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		var hs []*weir.Handle[int]
		for range 60 {
			h, err := wf.Start(testCtx(t), "a", nil)
			must(t, err)
			hs = append(hs, h)
		}
		waitFor(t, time.Minute, "a's steps in line", func() bool { // slow under a loaded -race run
			// In line at the store or in the engine's own (limitline.go):
			// the log says each waits.
			n := 0
			for _, h := range hs {
				evs, err := s.ListEvents(testCtx(t), h.ID, 0)
				if err == nil && slices.ContainsFunc(evs, func(ev store.Event) bool { return ev.Type == store.EventLimitWaiting }) {
					n++
				}
			}
			return n >= 20
		})
		release()
		hb, err := wf.Start(testCtx(t), "b", nil)
		must(t, err)
		if _, err := hb.Result(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		// b's wait began when its limit_waiting event was written (none:
		// it never waited). Count a's steps that started after that and
		// before b's: a's started before b asked are not b's wait.
		evs, err := s.ListEvents(testCtx(t), hb.ID, 0)
		must(t, err)
		var waited time.Time
		for _, ev := range evs {
			if ev.Type == store.EventLimitWaiting {
				waited = ev.At
				break
			}
		}
		mu.Lock()
		at := slices.Index(order, "b")
		ahead := 0
		for i := 0; i < at; i++ {
			if !waited.IsZero() && starts[i].After(waited) {
				ahead++
			}
		}
		mu.Unlock()
		if at < 0 || ahead > 2 {
			t.Fatalf("b's step started after %d of a's steps that started while it waited", ahead)
		}
		for _, h := range hs {
			if _, err := h.Result(testCtx(t)); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A flood of one tenant's runs, more than the worker's Concurrency (but
// within its Config.LineRuns), all waiting on a limiter: a late tenant's
// run and a higher priority's are still claimed (a run whose steps wait in
// line stands aside), join the line, and go next: each step starts with
// none of the flood's started ahead of it after it joined, beyond the
// limiter's bound. Claims go oldest first, so before, with Concurrency 4,
// b's and c's runs waited for 56 of a's to end before they were even
// claimed.
func TestLateTenantAndPriorityPastAFlood(t *testing.T) {
	// LineRuns 64 keeps the whole flood aside; the default (Concurrency,
	// 4) keeps 4 aside and parks the others lined, and claims go on past
	// them (lineseats.go): b and c take the seats of the worst of a's.
	// StepAsync: a run whose steps wait on goroutines of their own parks
	// lined too, once nothing of it runs but waits (future.go).
	for _, c := range []struct {
		lineRuns int
		async    bool
	}{{64, false}, {0, false}, {0, true}} {
		name := fmt.Sprint("LineRuns=", c.lineRuns)
		if c.async {
			name += "/StepAsync"
		}
		t.Run(name, func(t *testing.T) { testLateTenantAndPriorityPastAFlood(t, c.lineRuns, c.async) })
	}
}

func testLateTenantAndPriorityPastAFlood(t *testing.T, lineRuns int, async bool) {
	eachStore(t, func(t *testing.T, s store.Full) {
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "llm", Concurrency: 1}))
		cfg := fastConfig()
		cfg.Concurrency, cfg.LineRuns = 4, lineRuns
		// A lease that outlasts a loaded machine's stalls (-race, other
		// packages' tests): a lapsed place or run lease reorders the line.
		cfg.LeaseTTL = 5 * time.Second
		e := newEngine(t, s, cfg)
		var mu sync.Mutex
		var order []string     // tenants in the order their steps started
		var starts []time.Time // when each started
		hold := make(chan struct{})
		var holding atomic.Bool
		release := sync.OnceFunc(func() { close(hold) })
		defer release()
		type ask struct {
			Tenant   string
			Priority int
		}
		wf := weir.Register(e, "call", func(ctx weir.Context, in ask) (int, error) {
			call := func(sc weir.StepContext) (int, error) {
				mu.Lock()
				order, starts = append(order, in.Tenant), append(starts, time.Now())
				mu.Unlock()
				if in.Tenant == "a" && holding.CompareAndSwap(false, true) {
					<-hold
				}
				time.Sleep(2 * time.Millisecond) // the call, not a sync
				return 1, nil
			}
			lim := weir.WithLimiter("llm", &weir.LimitOptions{Key: in.Tenant, Priority: in.Priority})
			if async {
				return weir.StepAsync(ctx, "call", call, lim).Get(ctx)
			}
			return weir.Step(ctx, "call", call, lim)
		})
		must(t, e.Work(testCtx(t)))
		var hs []*weir.Handle[int]
		for range 60 {
			h, err := wf.Start(testCtx(t), ask{Tenant: "a"}, nil)
			must(t, err)
			hs = append(hs, h)
		}
		waiting := func(h *weir.Handle[int]) time.Time {
			evs, err := s.ListEvents(testCtx(t), h.ID, 0)
			if err == nil {
				for _, ev := range evs {
					if ev.Type == store.EventLimitWaiting {
						return ev.At
					}
				}
			}
			return time.Time{}
		}
		waitFor(t, time.Minute, "a's steps in line, past the worker's Concurrency of 4", func() bool {
			n := 0
			for _, h := range hs {
				if !waiting(h).IsZero() {
					n++
				}
			}
			return n >= 20
		})
		hb, err := wf.Start(testCtx(t), ask{Tenant: "b"}, nil)
		must(t, err)
		hc, err := wf.Start(testCtx(t), ask{Tenant: "c", Priority: 10}, nil)
		must(t, err)
		waitFor(t, time.Minute, "b's and c's steps in line, behind 59 of a's", func() bool {
			return !waiting(hb).IsZero() && !waiting(hc).IsZero()
		})
		release()
		for _, h := range append(hs, hb, hc) {
			if _, err := h.Result(testCtx(t)); err != nil {
				t.Fatal(err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, x := range []struct {
			tenant string
			h      *weir.Handle[int]
		}{{"b", hb}, {"c", hc}} {
			joined := waiting(x.h)
			at := slices.Index(order, x.tenant)
			ahead := 0
			for i := 0; i < at; i++ {
				if order[i] == "a" && starts[i].After(joined) {
					ahead++
				}
			}
			if at < 0 || ahead > 1 {
				t.Errorf("%s's step started after %d of a's steps that started once it was in line; the limiter's bound is 1", x.tenant, ahead)
			}
		}
		if c, b := slices.Index(order, "c"), slices.Index(order, "b"); c > b {
			t.Errorf("c (priority 10) started after b: %v", order[:max(b, c)+1])
		}
	})
}

// A run cancelled while its step waits in a limiter's line gives its place
// back: the slot goes on to the next waiter, not to the cancelled one, who
// would hold it unused until its lease ran out (red team, round nine: 22 s
// of a one-slot limiter idle after a cancel). Both stores.
func TestACancelledWaiterLeavesTheLine(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "llm", Concurrency: 1}))
		cfg := fastConfig()
		cfg.LeaseTTL = 3 * time.Minute // a place left behind would stall the line for this long
		e := newEngine(t, s, cfg)
		hold := make(chan struct{})
		release := sync.OnceFunc(func() { close(hold) })
		defer release()
		wf := weir.Register(e, "call", func(ctx weir.Context, who string) (string, error) {
			return weir.Step(ctx, "call", func(sc weir.StepContext) (string, error) {
				if who == "holder" {
					<-hold
				}
				return who, nil
			}, weir.WithLimiter("llm", nil))
		})
		must(t, e.Work(testCtx(t)))
		inLine := func(n int) func() bool {
			return func() bool {
				st, err := s.LimiterState(testCtx(t), "llm", time.Time{})
				return err == nil && len(st.Holds) == 1 && len(st.Waiters) == n
			}
		}
		holder, err := wf.Start(testCtx(t), "holder", nil)
		must(t, err)
		waitFor(t, time.Minute, "the holder's slot", inLine(0))
		ghost, err := wf.Start(testCtx(t), "ghost", nil)
		must(t, err)
		waitFor(t, time.Minute, "the ghost in line", inLine(1))
		next, err := wf.Start(testCtx(t), "next", nil)
		must(t, err)
		waitFor(t, time.Minute, "the next in line", inLine(2))
		must(t, e.Cancel(testCtx(t), ghost.ID))
		waitFor(t, 30*time.Second, "the cancelled run's place given back (not left for its lease of 3 minutes)", inLine(1))
		st, err := s.LimiterState(testCtx(t), "llm", time.Time{})
		must(t, err)
		if w := st.Waiters[0].Holder; !strings.HasPrefix(w, next.ID+"/") {
			t.Fatalf("in line after the cancel: %q, want the next run's", w)
		}
		release()
		for _, h := range []*weir.Handle[string]{holder, next} {
			ctx, cancel := context.WithTimeout(testCtx(t), 20*time.Second)
			_, err := h.Result(ctx)
			cancel()
			if err != nil {
				t.Fatalf("%s after the holder: %v (a slot handed to the cancelled run waits for its lease)", h.ID, err)
			}
		}
	})
}

// A limiter changed under its line keeps it moving: a waiter of a
// limiter that hands off waits to be handed a slot, and once a rate is
// added none is handed any more; the change wakes it to ask again, so the
// holder's slot goes on at its release, not at the waiter's next renewal
// of its place (three quarters of a lease: 2 minutes here; red team,
// round ten: 2–10 s on the defaults).
func TestALimiterChangedUnderItsLine(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "llm", Concurrency: 1}))
		cfg := fastConfig()
		cfg.LeaseTTL = 3 * time.Minute
		e := newEngine(t, s, cfg)
		hold := make(chan struct{})
		release := sync.OnceFunc(func() { close(hold) })
		defer release()
		wf := weir.Register(e, "call", func(ctx weir.Context, who string) (string, error) {
			return weir.Step(ctx, "call", func(sc weir.StepContext) (string, error) {
				if who == "holder" {
					<-hold
				}
				return who, nil
			}, weir.WithLimiter("llm", nil))
		})
		must(t, e.Work(testCtx(t)))
		inLine := func(n int) func() bool {
			return func() bool {
				st, err := s.LimiterState(testCtx(t), "llm", time.Time{})
				return err == nil && len(st.Holds) == 1 && len(st.Waiters) == n
			}
		}
		holder, err := wf.Start(testCtx(t), "holder", nil)
		must(t, err)
		waitFor(t, time.Minute, "the holder's slot", inLine(0))
		next, err := wf.Start(testCtx(t), "next", nil)
		must(t, err)
		waitFor(t, time.Minute, "the next in line", inLine(1))
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "llm", Concurrency: 1, Rate: 1000, Period: time.Minute}))
		release()
		for _, h := range []*weir.Handle[string]{holder, next} {
			ctx, cancel := context.WithTimeout(testCtx(t), 20*time.Second)
			_, err := h.Result(ctx)
			cancel()
			if err != nil {
				t.Fatalf("%s after the holder, the limiter changed: %v (a waiter not woken by the change sleeps to its renewal)", h.ID, err)
			}
		}
	})
}

// A rate taken off a limiter frees the runs parked for its window: a
// step refused at a rate of one an hour parks its run until the window
// ends; once the rate is gone, its run is claimable at once, asks again,
// and runs (before, it slept out the hour: red team, round ten).
func TestARateRemovedWakesItsParkedWaiters(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "llm", Concurrency: 1, Rate: 1, Period: time.Hour}))
		cfg := fastConfig()
		cfg.ParkAfter = 20 * time.Millisecond
		e := newEngine(t, s, cfg)
		wf := weir.Register(e, "call", func(ctx weir.Context, who string) (string, error) {
			return weir.Step(ctx, "call", func(sc weir.StepContext) (string, error) { return who, nil }, weir.WithLimiter("llm", nil))
		})
		must(t, e.Work(testCtx(t)))
		first, err := wf.Start(testCtx(t), "first", nil)
		must(t, err)
		if _, err := first.Result(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		second, err := wf.Start(testCtx(t), "second", nil)
		must(t, err)
		waitFor(t, time.Minute, "the second run parked for the rate's window", func() bool {
			r, err := s.GetRun(testCtx(t), second.ID)
			return err == nil && r.LeaseOwner == "" && r.WakeAt.After(time.Now().Add(30*time.Minute))
		})
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "llm", Concurrency: 1}))
		ctx, cancel := context.WithTimeout(testCtx(t), 20*time.Second)
		defer cancel()
		if _, err := second.Result(ctx); err != nil {
			t.Fatalf("the parked run once the rate was taken off: %v (it sleeps out the rate's window)", err)
		}
	})
}

// A run parked for a rate's window says so on its row, so that a change
// of the limiter wakes it after its place in the line lapsed (a place lasts
// a lease, 500 ms here; the window an hour), and the limiter is not deleted
// under it. (Red team, round eleven: the run slept out the old window while
// runs started after the change went at once; DELETE took the limiter and
// the run then failed with "no limiter".) Both stores.
func TestARateRemovedWakesRunsWhosePlaceLapsed(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "llm", Concurrency: 1, Rate: 1, Period: time.Hour}))
		cfg := fastConfig()
		cfg.ParkAfter = 20 * time.Millisecond
		e := newEngine(t, s, cfg)
		wf := weir.Register(e, "call", func(ctx weir.Context, who string) (string, error) {
			return weir.Step(ctx, "call", func(sc weir.StepContext) (string, error) { return who, nil }, weir.WithLimiter("llm", nil))
		})
		must(t, e.Work(testCtx(t)))
		first, err := wf.Start(testCtx(t), "first", nil)
		must(t, err)
		if _, err := first.Result(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		second, err := wf.Start(testCtx(t), "second", nil)
		must(t, err)
		waitFor(t, time.Minute, "the second run parked for the rate's window, its place in the line lapsed", func() bool {
			r, err := s.GetRun(testCtx(t), second.ID)
			if err != nil || r.LeaseOwner != "" || !r.WakeAt.After(time.Now().Add(30*time.Minute)) {
				return false
			}
			st, err := s.LimiterState(testCtx(t), "llm", time.Time{})
			return err == nil && len(st.Waiters) == 0
		})
		// A later run's ask is a decision: it drops the lapsed place.
		third, err := wf.Start(testCtx(t), "third", nil)
		must(t, err)
		waitFor(t, time.Minute, "the third run parked for the rate's window", func() bool {
			r, err := s.GetRun(testCtx(t), third.ID)
			return err == nil && r.LeaseOwner == "" && r.WakeAt.After(time.Now().Add(30*time.Minute))
		})
		if err := s.DeleteLimiter(testCtx(t), "llm"); !errors.Is(err, store.ErrLimiterInUse) {
			t.Fatalf("delete of the limiter a parked run waits for: %v, want ErrLimiterInUse", err)
		}
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "llm", Concurrency: 1}))
		ctx, cancel := context.WithTimeout(testCtx(t), 20*time.Second)
		defer cancel()
		if out, err := second.Result(ctx); err != nil || out != "second" {
			t.Fatalf("the parked run whose place lapsed, once the rate was taken off: %q, %v (it sleeps out the rate's window)", out, err)
		}
		if out, err := third.Result(ctx); err != nil || out != "third" {
			t.Fatalf("the parked run in line, once the rate was taken off: %q, %v", out, err)
		}
		// Ended, it waits for nothing: the limiter goes.
		waitFor(t, time.Minute, "the limiter deleted once nothing uses it", func() bool {
			return s.DeleteLimiter(testCtx(t), "llm") == nil
		})
	})
}

// A bound lowered while steps hold its slots through the engine's grant
// stops none of them: the grant keeps the slots in use and hands out no
// more until enough have ended (a lowered bound applies to new takes).
// Each body runs once. (Red team, round eleven: 10 to 9 stopped all ten
// with ErrSlotLost, "its lease ran out before it was renewed", and each
// ran again.)
func TestALoweredBoundStopsNoStep(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "llm", Concurrency: 3}))
		e := newEngine(t, s, fastConfig()) // LeaseTTL 500 ms: the grant is renewed every 166 ms
		var mu sync.Mutex
		bodies := map[string]int{}
		hold := make(chan struct{})
		release := sync.OnceFunc(func() { close(hold) })
		defer release()
		wf := weir.Register(e, "call", func(ctx weir.Context, who string) (string, error) {
			return weir.Step(ctx, "call", func(sc weir.StepContext) (string, error) {
				mu.Lock()
				bodies[who]++
				mu.Unlock()
				select {
				case <-hold:
					return who, nil
				case <-sc.Done():
					return "", context.Cause(sc)
				}
			}, weir.WithLimiter("llm", nil))
		})
		must(t, e.Work(testCtx(t)))
		var hs []*weir.Handle[string]
		for _, who := range []string{"a", "b", "c"} {
			h, err := wf.Start(testCtx(t), who, nil)
			must(t, err)
			hs = append(hs, h)
		}
		waitFor(t, time.Minute, "the three bodies running", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(bodies) == 3
		})
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "llm", Concurrency: 2}))
		changed := time.Now()
		waitFor(t, time.Minute, "the grant renewed under the lowered bound", func() bool {
			st, err := s.LimiterState(testCtx(t), "llm", time.Time{})
			if err != nil {
				return false
			}
			for _, h := range st.Holds {
				if h.Until.After(changed.Add(500 * time.Millisecond)) {
					return true
				}
			}
			return false
		})
		release()
		for _, h := range hs {
			if _, err := h.Result(testCtx(t)); err != nil {
				t.Fatal(err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for who, n := range bodies {
			if n != 1 {
				t.Errorf("%s's body ran %d times; a lowered bound stopped it", who, n)
			}
		}
	})
}

// BenchmarkLimitedStep: a short run (3 steps) with and without each step
// taking a slot of a limiter that is not the bottleneck (concurrency
// 10,000), 16 runs at once, on both stores with durable commits: what a
// limit costs a run when it does not bind.
func BenchmarkLimitedStep(b *testing.B) {
	for _, st := range []string{"sqlite", "postgres"} {
		for _, limited := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/limited=%v", st, limited), func(b *testing.B) {
				s := benchStore(b, st)
				must(b, s.SetLimiter(b.Context(), &limit.Config{Name: "llm", Concurrency: 10_000}))
				cfg := fastConfig()
				cfg.Logger = testLogger()
				e := newEngine(b, s, cfg)
				var opts []weir.StepOption
				if limited {
					opts = append(opts, weir.WithLimiter("llm", &weir.LimitOptions{Key: "t"}))
				}
				wf := weir.Register(e, "three", func(ctx weir.Context, _ int) (int, error) {
					sum := 0
					for i := range 3 {
						v, err := weir.Step(ctx, "s", func(weir.StepContext) (int, error) { return i, nil }, opts...)
						if err != nil {
							return 0, err
						}
						sum += v
					}
					return sum, nil
				})
				if err := e.Work(testCtx(b)); err != nil {
					b.Fatal(err)
				}
				b.SetParallelism(8)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						h, err := wf.Start(testCtx(b), 0, nil)
						if err == nil {
							_, err = h.Result(testCtx(b))
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// benchStore is a fresh store of the named backend for a benchmark.
func benchStore(b *testing.B, name string) store.Full {
	if name == "sqlite" {
		s, _ := openStore(b)
		return s
	}
	s, err := pgstore.Open(context.Background(), pgtest.URL(), &pgstore.Config{Schema: pgtest.NewSchema(b), MaxConns: 24})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// grantTimes records when the store granted each holder its slot (its
// clock: the grant's end less its lease), around a real store.
type grantTimes struct {
	store.Full
	mu sync.Mutex
	at map[string]time.Time
}

func (g *grantTimes) AcquireSlot(ctx context.Context, p *store.AcquireSlotParams) (*limit.Decision, error) {
	d, err := g.Full.AcquireSlot(ctx, p)
	if err == nil && d.Granted {
		g.mu.Lock()
		if _, ok := g.at[p.Holder]; !ok { // asked again while holding: the same grant
			g.at[p.Holder] = d.Until.Add(-p.Lease)
		}
		g.mu.Unlock()
	}
	return d, err
}

// A rate limiter keeps limited steps to its rate in every window of its
// period (a sliding window, by the store's clock, no slack), however many
// ask at once, and lets every one through in the end.
func TestLimiterRate(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		const rate, period, steps = 4, 300 * time.Millisecond, 12
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "rpm", Rate: rate, Period: period}))
		obs := &grantTimes{Full: s, at: map[string]time.Time{}}
		e := newEngine(t, obs, fastConfig())
		var ran atomic.Int64
		wf := weir.Register(e, "calls", func(ctx weir.Context, _ int) (int, error) {
			var fs []*weir.Future[int]
			for i := range steps {
				fs = append(fs, weir.StepAsync(ctx, fmt.Sprint("call ", i), func(sc weir.StepContext) (int, error) {
					ran.Add(1)
					return i, nil
				}, weir.WithLimiter("rpm", &weir.LimitOptions{Key: fmt.Sprint("tenant", i%3)})))
			}
			out, err := weir.All(ctx, fs...)
			return len(out), err
		})
		must(t, e.Work(testCtx(t)))
		h, err := wf.Start(testCtx(t), 0, nil)
		must(t, err)
		if n, err := h.Result(testCtx(t)); err != nil || n != steps {
			t.Fatalf("result %d, %v", n, err)
		}
		obs.mu.Lock()
		defer obs.mu.Unlock()
		var at []time.Time
		for _, x := range obs.at {
			at = append(at, x)
		}
		if len(at) != steps || ran.Load() != steps {
			t.Fatalf("%d grants, %d steps ran, want %d", len(at), ran.Load(), steps)
		}
		slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
		for i := range at {
			j := i
			for j < len(at) && at[j].Sub(at[i]) < period {
				j++
			}
			if j-i > rate {
				t.Fatalf("%d grants within %v of the %dth: the rate is %d per %v", j-i, period, i, rate, period)
			}
		}
		// Three periods' worth: the last grant comes two periods after the
		// first at the soonest.
		if d := at[steps-1].Sub(at[0]); d < 2*period {
			t.Fatalf("%d grants within %v; a rate of %d per %v allows that only after %v", steps, d, rate, period, 2*period)
		}
	})
}

// A slot is fenced by its lease: when a step's slot runs out under it and
// another holder takes it (here an outside holder, as a worker of another
// process would after a stalled renewal), the attempt's context is
// cancelled with ErrSlotLost, its step retries, and the retry waits for a
// slot of its own; never are both in flight. Both paths, on both stores:
// a limiter of concurrency only (an engine's grant) and one with a rate
// (a slot an attempt holds alone).
func TestLimiterSlotLostStopsTheAttempt(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  limit.Config
	}{
		{"grant", limit.Config{Name: "llm", Concurrency: 1}},
		{"slot", limit.Config{Name: "llm", Concurrency: 1, Rate: 1000, Period: time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, s store.Full) {
				must(t, s.SetLimiter(testCtx(t), &c.cfg))
				e := newEngine(t, s, fastConfig())
				started := make(chan struct{})
				cause := make(chan error, 1)
				var intruderOut atomic.Int64 // unix nanos the outside holder gave the slot back
				var secondAt atomic.Int64
				wf := weir.Register(e, "fenced", func(ctx weir.Context, _ int) (string, error) {
					return weir.Step(ctx, "call", func(sc weir.StepContext) (string, error) {
						if sc.Attempt() == 1 {
							close(started)
							select {
							case <-sc.Done():
								cause <- context.Cause(sc)
								return "", context.Cause(sc)
							case <-time.After(20 * time.Second):
								cause <- errors.New("attempt 1 was not stopped within 20s of losing its slot")
								return "late", nil
							}
						}
						secondAt.Store(time.Now().UnixNano())
						return "ok", nil
					}, weir.WithLimiter("llm", nil))
				})
				must(t, e.Work(testCtx(t)))
				h, err := wf.Start(testCtx(t), 0, nil)
				must(t, err)
				select {
				case <-started:
				case <-time.After(20 * time.Second):
					t.Fatal("attempt 1 did not start within 20s")
				}
				// The engine's hold goes, and another takes the slot.
				st, err := s.LimiterState(testCtx(t), "llm", time.Time{})
				must(t, err)
				if len(st.Holds) != 1 {
					t.Fatalf("the limiter holds %+v, want the attempt's one hold", st.Holds)
				}
				_, err = s.ReleaseSlot(testCtx(t), &store.ReleaseSlotParams{Limiter: "llm", Holder: st.Holds[0].Holder})
				must(t, err)
				d, err := s.AcquireSlot(testCtx(t), &store.AcquireSlotParams{Limiter: "llm", Request: limit.Request{Holder: "intruder", Lease: time.Minute}})
				must(t, err)
				if !d.Granted {
					t.Fatalf("the outside holder was refused: %+v", d)
				}
				select {
				case err := <-cause:
					if !errors.Is(err, weir.ErrSlotLost) {
						t.Fatalf("attempt 1 ended with %v, want ErrSlotLost", err)
					}
				case <-time.After(20 * time.Second):
					t.Fatal("attempt 1 was not stopped within 20s of losing its slot")
				}
				// The retry waits while the outside holder has the slot.
				intruderOut.Store(time.Now().UnixNano())
				_, err = s.ReleaseSlot(testCtx(t), &store.ReleaseSlotParams{Limiter: "llm", Holder: "intruder"})
				must(t, err)
				if out, err := h.Result(testCtx(t)); err != nil || out != "ok" {
					t.Fatalf("result %q, %v", out, err)
				}
				if secondAt.Load() < intruderOut.Load() {
					t.Fatal("attempt 2 ran while the outside holder had the limiter's one slot")
				}
				evs, err := s.ListEvents(testCtx(t), h.ID, 0)
				must(t, err)
				failed := 0
				for _, ev := range evs {
					if ev.Type == store.EventStepFailed && strings.Contains(ev.Error, "lost its slot") {
						failed++
					}
				}
				if failed != 1 {
					t.Fatalf("%d step_failed events for a lost slot, want 1", failed)
				}
			})
		})
	}
}

// Limiters through the engine: Config.Limiters are set by Work (a restart
// with the same bounds writes nothing new, other bounds change them),
// SetLimiter, Limiter, Limiters and DeleteLimiter manage them without the
// store, and a bad declaration fails New, before any step runs.
func TestEngineLimiters(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.Limiters = []limit.Config{{Name: "llm", Concurrency: 2}}
		e := newEngine(t, s, cfg)
		wf := weir.Register(e, "call", func(ctx weir.Context, _ int) (string, error) {
			return weir.Step(ctx, "call", func(sc weir.StepContext) (string, error) { return "ok", nil }, weir.WithLimiter("llm", nil))
		})
		must(t, e.Work(testCtx(t)))
		h, err := wf.Start(testCtx(t), 0, nil)
		must(t, err)
		if out, err := h.Result(testCtx(t)); err != nil || out != "ok" {
			t.Fatalf("a step of a declared limiter: %q, %v", out, err)
		}
		c, st, err := e.Limiter(testCtx(t), "llm")
		must(t, err)
		if c.Concurrency != 2 || st == nil {
			t.Fatalf("limiter llm: %+v, %+v", c, st)
		}
		// Another engine declares other bounds: its Work changes them.
		cfg2 := fastConfig()
		cfg2.Limiters = []limit.Config{{Name: "llm", Concurrency: 5}, {Name: "search", Rate: 10, Period: time.Second}}
		e2 := newEngine(t, s, cfg2)
		weir.Register(e2, "other", func(ctx weir.Context, _ int) (int, error) { return 0, nil })
		must(t, e2.Work(testCtx(t)))
		all, err := e.Limiters(testCtx(t))
		must(t, err)
		got := map[string]limit.Config{}
		for _, c := range all {
			got[c.Name] = *c
		}
		if got["llm"].Concurrency != 5 || got["search"].Rate != 10 || len(got) != 2 {
			t.Fatalf("limiters after the second engine's Work: %+v", got)
		}
		must(t, e.SetLimiter(testCtx(t), limit.Config{Name: "tmp", Concurrency: 1}))
		must(t, e.DeleteLimiter(testCtx(t), "tmp"))
		if _, _, err := e.Limiter(testCtx(t), "tmp"); !errors.Is(err, weir.ErrNotFound) {
			t.Fatalf("a deleted limiter: %v", err)
		}
		bad := fastConfig()
		bad.Limiters = []limit.Config{{Name: "nothing"}}
		if _, err := weir.New(s, bad); err == nil || !strings.Contains(err.Error(), "limits nothing") {
			t.Fatalf("a limiter that limits nothing: %v", err)
		}
	})
}

// Steps on goroutines of their own (StepAsync) that wait in a limiter's
// line for a held slot keep their run on the worker, as inline ones do: a
// parked run would not hear its turn come. Before, the wait of such a step
// counted as the run's wake time, so a run whose only steps waited parked
// for three quarters of a lease, or, waiting in the engine's local line,
// for an hour, with its slot handed to nobody listening.
func TestAsyncStepsWaitingForAHeldSlotDoNotPark(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "llm", Concurrency: 1}))
		cfg := fastConfig()
		cfg.ParkAfter = 20 * time.Millisecond
		cfg.LeaseTTL = 20 * time.Second // its three quarters: longer than the test waits
		e := newEngine(t, s, cfg)
		hold := make(chan struct{})
		release := sync.OnceFunc(func() { close(hold) })
		defer release()
		var started atomic.Int64
		wf := weir.Register(e, "fan", func(ctx weir.Context, who string) (string, error) {
			f := weir.StepAsync(ctx, "call", func(sc weir.StepContext) (string, error) {
				if started.Add(1) == 1 {
					<-hold
				}
				return who, nil
			}, weir.WithLimiter("llm", nil))
			return f.Get(ctx)
		})
		must(t, e.Work(testCtx(t)))
		var hs []*weir.Handle[string]
		for i := range 12 { // past the engine's places at the store (lineReps)
			h, err := wf.Start(testCtx(t), fmt.Sprint("r", i), nil)
			must(t, err)
			hs = append(hs, h)
		}
		waitFor(t, time.Minute, "the first step holding the slot and the others waiting for it", func() bool {
			waiting := 0
			for _, h := range hs {
				evs, err := s.ListEvents(testCtx(t), h.ID, 0)
				must(t, err)
				if slices.ContainsFunc(evs, func(ev store.Event) bool { return ev.Type == store.EventLimitWaiting }) {
					waiting++
				}
			}
			return started.Load() == 1 && waiting == len(hs)-1
		})
		release()
		ctx, cancel := context.WithTimeout(testCtx(t), 5*time.Second)
		defer cancel()
		for _, h := range hs {
			if _, err := h.Result(ctx); err != nil {
				r, _ := s.GetRun(testCtx(t), h.ID)
				t.Fatalf("run %s once the slot came back: %v (parked until %v)", h.ID, err, r.WakeAt)
			}
		}
	})
}

// A workflow declares the limiters its steps name (UsesLimiters): Work
// refuses to start while one is missing, naming it, where a step would
// fail for good on its first call; Config.Limiters counts as set.
func TestUsesLimitersChecksAtWork(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "set", Concurrency: 1}))
		cfg := fastConfig()
		cfg.Limiters = []limit.Config{{Name: "declared", Concurrency: 2}}
		e := newEngine(t, s, cfg)
		weir.Register(e, "call", func(ctx weir.Context, _ int) (int, error) { return 0, nil },
			weir.UsesLimiters("set", "declared", "typo"))
		err := e.Work(testCtx(t))
		if !errors.Is(err, weir.ErrNotFound) || !strings.Contains(err.Error(), `"typo"`) || strings.Contains(err.Error(), `"set"`) {
			t.Fatalf("Work with a missing limiter: %v, want ErrNotFound naming typo alone", err)
		}
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "typo", Concurrency: 1}))
		must(t, e.Work(testCtx(t)))
	})
}

// A run whose steps run on goroutines of their own (StepAsync) parks
// lined only once none of them runs: a step waiting in a full line with
// no seat does not park it while another step of it runs; once that one
// ends, it parks (its worker freed, its row lined), and when the slot
// comes back each body runs once.
func TestAsyncRunParksLinedOnceNothingRuns(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "llm", Concurrency: 1}))
		cfg := fastConfig()
		cfg.Concurrency, cfg.LineRuns = 2, 1
		cfg.LeaseTTL = 5 * time.Second // no lease lapses on a loaded machine
		e := newEngine(t, s, cfg)
		hold, other := make(chan struct{}), make(chan struct{})
		releaseHold, releaseOther := sync.OnceFunc(func() { close(hold) }), sync.OnceFunc(func() { close(other) })
		defer releaseHold()
		defer releaseOther()
		var mu sync.Mutex
		bodies := map[string]int{}
		body := func(name string, block <-chan struct{}) func(weir.StepContext) (int, error) {
			return func(sc weir.StepContext) (int, error) {
				mu.Lock()
				bodies[name]++
				mu.Unlock()
				if block != nil {
					<-block
				}
				return 1, nil
			}
		}
		lim := weir.WithLimiter("llm", nil)
		holder := weir.Register(e, "holder", func(ctx weir.Context, _ int) (int, error) {
			return weir.Step(ctx, "hold", body("hold", hold), lim)
		})
		seated := weir.Register(e, "seated", func(ctx weir.Context, _ int) (int, error) {
			return weir.StepAsync(ctx, "call", body("seated", nil), lim).Get(ctx)
		})
		both := weir.Register(e, "both", func(ctx weir.Context, _ int) (int, error) {
			a := weir.StepAsync(ctx, "call", body("both/call", nil), lim)
			b := weir.StepAsync(ctx, "other", body("both/other", other))
			x, err := a.Get(ctx)
			if err != nil {
				return 0, err
			}
			y, err := b.Get(ctx)
			return x + y, err
		})
		must(t, e.Work(testCtx(t)))
		hh, err := holder.Start(testCtx(t), 0, nil)
		must(t, err)
		waitFor(t, time.Minute, "the holder's step holding the slot", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return bodies["hold"] == 1
		})
		hs, err := seated.Start(testCtx(t), 0, nil)
		must(t, err)
		waiting := func(id string) bool {
			evs, err := s.ListEvents(testCtx(t), id, 0)
			must(t, err)
			return slices.ContainsFunc(evs, func(ev store.Event) bool { return ev.Type == store.EventLimitWaiting })
		}
		waitFor(t, time.Minute, "seated's step in line, in the engine's one seat", func() bool { return waiting(hs.ID) })
		hb, err := both.Start(testCtx(t), 0, nil)
		must(t, err)
		waitFor(t, time.Minute, "both's limited step in line and its other step running", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return bodies["both/other"] == 1 && waiting(hb.ID)
		})
		if r, err := s.GetRun(testCtx(t), hb.ID); err != nil || r.LeaseOwner == "" {
			t.Fatalf("both parked while its other step ran: %+v, %v", r, err)
		}
		releaseOther()
		waitFor(t, time.Minute, "both parked lined once its other step ended", func() bool {
			r, err := s.GetRun(testCtx(t), hb.ID)
			must(t, err)
			return r.LeaseOwner == "" && r.WakeAt.After(time.Now().Add(time.Minute))
		})
		releaseHold()
		for _, h := range []*weir.Handle[int]{hh, hs, hb} {
			if _, err := h.Result(testCtx(t)); err != nil {
				t.Fatal(err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for name, n := range bodies {
			if n != 1 {
				t.Errorf("%s's body ran %d times", name, n)
			}
		}
	})
}
