package weir_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
)

// Runs started in a queue keep to its limiter, on both stores: twelve runs
// of a concurrency-3 queue never run more than three at once (counted by
// the runs themselves), all complete, and the queue holds nothing after.
func TestQueueBoundsRuns(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "runs", Concurrency: 3}))
		e := newEngine(t, s, fastConfig())
		var in, most atomic.Int64
		wf := weir.Register(e, "job", func(ctx weir.Context, i int) (int, error) {
			return weir.Step(ctx, "work", func(sc weir.StepContext) (int, error) {
				n := in.Add(1)
				defer in.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(10 * time.Millisecond) // the work's duration, not a sync
				return i, nil
			})
		})
		must(t, e.Work(testCtx(t)))
		var hs []*weir.Handle[int]
		for i := range 12 {
			h, err := wf.Start(testCtx(t), i, &weir.StartOptions{Queue: "runs", QueueKey: fmt.Sprint("tenant", i%3)})
			must(t, err)
			hs = append(hs, h)
		}
		for i, h := range hs {
			if n, err := h.Result(testCtx(t)); err != nil || n != i {
				t.Fatalf("run %d: %d, %v", i, n, err)
			}
		}
		if m := most.Load(); m > 3 || m < 1 {
			t.Fatalf("%d runs at once, the queue allows 3", m)
		}
		st, err := s.LimiterState(testCtx(t), "runs", time.Time{})
		must(t, err)
		if len(st.Holds) != 0 || st.Queued != 0 {
			t.Fatalf("after the runs the queue holds %+v, %d queued", st.Holds, st.Queued)
		}
		// An unknown queue is refused, nothing started.
		if _, err := wf.Start(testCtx(t), 0, &weir.StartOptions{Queue: "nope"}); !errors.Is(err, weir.ErrNotFound) {
			t.Fatalf("start in an unknown queue: %v", err)
		}
	})
}

// gated is a workflow whose runs record when they start and wait for
// their gate.
type gated struct {
	mu      sync.Mutex
	started []string
	gates   map[string]chan struct{}
}

func (g *gated) gate(id string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates[id] == nil {
		g.gates[id] = make(chan struct{})
	}
	return g.gates[id]
}

func (g *gated) order() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.started)
}

func (g *gated) register(e *weir.Engine) *weir.Workflow[string, string] {
	g.gates = map[string]chan struct{}{}
	return weir.Register(e, "gated", func(ctx weir.Context, id string) (string, error) {
		return weir.Step(ctx, "wait", func(sc weir.StepContext) (string, error) {
			// A run's first start only: under load a lease can run out
			// and the run start again elsewhere, which is not a new start.
			g.mu.Lock()
			if !slices.Contains(g.started, id) {
				g.started = append(g.started, id)
			}
			g.mu.Unlock()
			select {
			case <-g.gate(id):
			case <-sc.Done():
				return "", sc.Err()
			}
			return id, nil
		})
	})
}

// A queue lets its runs in by priority, then age.
func TestQueuePriorityOrder(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "q", Concurrency: 1}))
		e := newEngine(t, s, fastConfig())
		g := &gated{}
		wf := g.register(e)
		must(t, e.Work(testCtx(t)))
		start := func(id string, prio int) *weir.Handle[string] {
			h, err := wf.Start(testCtx(t), id, &weir.StartOptions{ID: id, Queue: "q", Priority: prio})
			must(t, err)
			return h
		}
		first := start("first", 0)
		waitFor(t, 10*time.Second, "the first run to start", func() bool { return len(g.order()) == 1 })
		hs := []*weir.Handle[string]{first}
		for _, r := range []struct {
			id   string
			prio int
		}{{"low", 0}, {"high-a", 5}, {"mid", 1}, {"high-b", 5}} {
			hs = append(hs, start(r.id, r.prio))
		}
		for _, id := range []string{"first", "high-a", "high-b", "mid", "low"} {
			close(g.gate(id))
		}
		for _, h := range hs {
			if _, err := h.Result(testCtx(t)); err != nil {
				t.Fatal(err)
			}
		}
		if got, want := g.order(), []string{"first", "high-a", "high-b", "mid", "low"}; !slices.Equal(got, want) {
			t.Fatalf("started %v, want %v", got, want)
		}
	})
}

// A tenant with a thousand queued runs does not hold up a tenant with one:
// the bound is one admission, for the one tenant's run goes before every
// queued run of a tenant that holds more of the queue's slots, or was
// served since.
func TestQueueFairShare(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		const busy = 1000
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "q", Concurrency: 2}))
		// Leases long enough for a loaded machine: the thousand starts keep
		// SQLite's writer busy for minutes under -race, and with fastConfig's
		// 500 ms leases the gated runs lost theirs three times and failed,
		// freeing their slots for others.
		cfg := fastConfig()
		cfg.LeaseTTL = 20 * time.Second
		e := newEngine(t, s, cfg)
		g := &gated{}
		wf := g.register(e)
		must(t, e.Work(testCtx(t)))
		for i := range busy {
			id := fmt.Sprint("big-", i)
			_, err := wf.Start(testCtx(t), id, &weir.StartOptions{ID: id, Queue: "q", QueueKey: "big"})
			must(t, err)
		}
		waitFor(t, 10*time.Second, "big's first two runs to start", func() bool { return len(g.order()) == 2 })
		h, err := wf.Start(testCtx(t), "small-0", &weir.StartOptions{ID: "small-0", Queue: "q", QueueKey: "small"})
		must(t, err)
		// One of big's runs ends: small's run takes the slot.
		close(g.gate("big-0"))
		waitFor(t, 10*time.Second, "a third run to start", func() bool { return len(g.order()) == 3 })
		if got := g.order(); got[2] != "small-0" {
			t.Fatalf("after a slot freed, %s started; small-0 waited behind %d of big's queued runs", got[2], busy-2)
		}
		close(g.gate("small-0"))
		if _, err := h.Result(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		st, err := s.LimiterState(testCtx(t), "q", time.Time{})
		must(t, err)
		if st.Queued < busy-4 {
			t.Fatalf("%d queued, want about %d", st.Queued, busy-3)
		}
	})
}

// Dedupe folds starts into the run of their key; debounce waits for the
// starts to stop and runs once with the last input.
func TestQueueDedupeAndDebounce(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "q", Concurrency: 4}))
		e := newEngine(t, s, fastConfig())
		var mu sync.Mutex
		ran := map[string][]string{}
		// The first run holds until the second start was folded into it:
		// a run started in a queue with room runs at once, and once it
		// ended its key would be free.
		gate := make(chan struct{})
		wf := weir.Register(e, "sync", func(ctx weir.Context, in string) (string, error) {
			return weir.Step(ctx, "do", func(sc weir.StepContext) (string, error) {
				if in == "a" {
					select {
					case <-gate:
					case <-sc.Done():
						return "", sc.Err()
					}
				}
				mu.Lock()
				ran[sc.RunID()] = append(ran[sc.RunID()], in)
				mu.Unlock()
				return in, nil
			})
		})
		must(t, e.Work(testCtx(t)))
		ctx := testCtx(t)

		r1, created, err := e.StartRun(ctx, "sync", []byte(`"a"`), &weir.StartOptions{ID: "d1", Queue: "q", Dedupe: "doc-7"})
		must(t, err)
		r2, created2, err := e.StartRun(ctx, "sync", []byte(`"b"`), &weir.StartOptions{ID: "d2", Queue: "q", Dedupe: "doc-7"})
		must(t, err)
		close(gate)
		if !created || created2 || r2.ID != r1.ID {
			t.Fatalf("dedupe: first %s (created %v), second %s (created %v)", r1.ID, created, r2.ID, created2)
		}
		if out, err := wf.Handle("d1").Result(ctx); err != nil || out != "a" {
			t.Fatalf("deduped run: %q, %v", out, err)
		}
		if _, err := s.GetRun(ctx, "d2"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the folded start made run d2: %v", err)
		}

		var last *weir.Run
		for i, in := range []string{`"v1"`, `"v2"`, `"v3"`} {
			r, _, err := e.StartRun(ctx, "sync", []byte(in), &weir.StartOptions{ID: fmt.Sprint("b", i), Queue: "q", Dedupe: "doc-9", Debounce: 2 * time.Second})
			must(t, err)
			if last != nil && r.ID != last.ID {
				t.Fatalf("debounced start %d made run %s, not %s", i, r.ID, last.ID)
			}
			last = r
		}
		if out, err := wf.Handle(last.ID).Result(ctx); err != nil || out != "v3" {
			t.Fatalf("debounced run: %q, %v", out, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if got := ran[last.ID]; !slices.Equal(got, []string{"v3"}) {
			t.Fatalf("the debounced run ran with %v, want once with v3", got)
		}
	})
}

// admissions records when the store admitted each queued run (its clock,
// as the admitted row says), around a real store: by AdmitRuns, or as it
// was created (a queue with no one ahead and room).
type admissions struct {
	store.Full
	mu sync.Mutex
	at []time.Time
}

func (a *admissions) CreateRun(ctx context.Context, p *store.CreateRunParams) (*store.Run, bool, error) {
	r, created, err := a.Full.CreateRun(ctx, p)
	if err == nil && created && p.Queue != "" && !r.Queued {
		a.mu.Lock()
		a.at = append(a.at, r.UpdatedAt)
		a.mu.Unlock()
	}
	return r, created, err
}

func (a *admissions) AdmitRuns(ctx context.Context, p *store.AdmitRunsParams) ([]*store.Run, error) {
	runs, err := a.Full.AdmitRuns(ctx, p)
	a.mu.Lock()
	for _, r := range runs {
		a.at = append(a.at, r.UpdatedAt)
	}
	a.mu.Unlock()
	return runs, err
}

// A queue's rate bounds its starts in every window of its period (a
// sliding window: nowhere more than Rate admissions, by the store's
// clock), however many runs wait, with every run run.
func TestQueueRate(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		const rate, period, runs = 5, 400 * time.Millisecond, 15
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "q", Rate: rate, Period: period}))
		obs := &admissions{Full: s}
		e := newEngine(t, obs, fastConfig())
		var ran atomic.Int64
		wf := weir.Register(e, "tick", func(ctx weir.Context, _ int) (int, error) {
			return weir.Step(ctx, "t", func(sc weir.StepContext) (int, error) {
				ran.Add(1)
				return 0, nil
			})
		})
		must(t, e.Work(testCtx(t)))
		var hs []*weir.Handle[int]
		for i := range runs {
			h, err := wf.Start(testCtx(t), i, &weir.StartOptions{Queue: "q"})
			must(t, err)
			hs = append(hs, h)
		}
		for _, h := range hs {
			if _, err := h.Result(testCtx(t)); err != nil {
				t.Fatal(err)
			}
		}
		obs.mu.Lock()
		defer obs.mu.Unlock()
		starts := slices.Clone(obs.at)
		if len(starts) != runs || ran.Load() != runs {
			t.Fatalf("%d admissions, %d runs ran, want %d", len(starts), ran.Load(), runs)
		}
		slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
		// Three periods' worth: the last five cannot start before two
		// periods passed since the first.
		if d := starts[runs-1].Sub(starts[0]); d < 2*period {
			t.Fatalf("%d runs admitted within %v, a rate of %d per %v allows that only after %v", runs, d, rate, period, 2*period)
		}
		for i := range starts {
			j := i
			for j < len(starts) && starts[j].Sub(starts[i]) < period {
				j++
			}
			if j-i > rate {
				t.Fatalf("%d admissions within %v of the %dth", j-i, period, i)
			}
		}
	})
}

// A worker's QueueConcurrency bounds the runs of a queue it executes, below
// the queue's own bound.
func TestQueueConcurrencyPerWorker(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "q", Concurrency: 10}))
		cfg := fastConfig()
		cfg.QueueConcurrency = map[string]int{"q": 2}
		e := newEngine(t, s, cfg)
		g := &gated{}
		wf := g.register(e)
		must(t, e.Work(testCtx(t)))
		var hs []*weir.Handle[string]
		for i := range 5 {
			id := fmt.Sprint("r", i)
			h, err := wf.Start(testCtx(t), id, &weir.StartOptions{ID: id, Queue: "q"})
			must(t, err)
			hs = append(hs, h)
		}
		waitFor(t, 10*time.Second, "two runs to start", func() bool { return len(g.order()) == 2 })
		st, err := s.LimiterState(testCtx(t), "q", time.Time{})
		must(t, err)
		if len(st.Holds) != 2 || st.Queued != 3 {
			t.Fatalf("a worker with room for 2: %d held, %d queued", len(st.Holds), st.Queued)
		}
		for i := range 5 {
			close(g.gate(fmt.Sprint("r", i)))
		}
		for _, h := range hs {
			if _, err := h.Result(testCtx(t)); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A run cancelled while it waits in its queue ends cancelled without
// taking a slot or running a step.
func TestQueueCancelWhileQueued(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		must(t, s.SetLimiter(testCtx(t), &limit.Config{Name: "q", Concurrency: 1}))
		e := newEngine(t, s, fastConfig())
		g := &gated{}
		wf := g.register(e)
		must(t, e.Work(testCtx(t)))
		busy, err := wf.Start(testCtx(t), "busy", &weir.StartOptions{ID: "busy", Queue: "q"})
		must(t, err)
		waitFor(t, 10*time.Second, "the busy run to start", func() bool { return len(g.order()) == 1 })
		h, err := wf.Start(testCtx(t), "waiting", &weir.StartOptions{ID: "waiting", Queue: "q"})
		must(t, err)
		must(t, e.Cancel(testCtx(t), "waiting"))
		if _, err := h.Result(testCtx(t)); !errors.Is(err, weir.ErrCancelled) {
			t.Fatalf("cancelled queued run: %v", err)
		}
		if got := g.order(); !slices.Equal(got, []string{"busy"}) {
			t.Fatalf("started %v", got)
		}
		close(g.gate("busy"))
		if _, err := busy.Result(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	})
}
