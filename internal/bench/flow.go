package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
)

// The flow workload: what flow control costs and how well it holds.
//
//   - Overhead: the steps workload's short runs (three steps, RunConcurrency
//     at once) plain, started in a queue, and with every step taking a
//     slot of a limiter, neither binding (a concurrency far above the
//     load), in interleaved rounds whose order rotates; the figures are
//     each variant's median.
//   - Rate accuracy: FlowRateRuns runs started at once in a queue of
//     FlowRate starts per FlowPeriod; the most admissions in any window of
//     the period, from the queue's own uses (at most FlowRate, or the limit
//     did not hold), the most bodies first run in one, and the rate
//     achieved over the whole, against the one set.
//   - Processes (PostgreSQL, with ServerCommand): N = 1, 2, 3 `weir server`
//     processes on one database run ScaleRuns of bench.emit started in a
//     queue of FlowQueueConcurrency, through all of them: runs/s at a
//     global limit as processes are added; then FlowSlotRuns steps sharing
//     a step limiter of 2 (flow_slots.go): its slots' utilization and
//     handover latency across the processes.

const (
	flowQueue   = "bench-flow-q"
	flowLimiter = "bench-flow-lim"
	flowRateQ   = "bench-flow-rate"
)

func runFlow(ctx context.Context, v *env) (*Result, error) {
	c := v.cfg
	lim, ok := v.store.(store.Limits)
	if !ok {
		return nil, errors.New("flow: the store has no limiters")
	}
	if err := lim.SetLimiter(ctx, &limit.Config{Name: flowQueue, Concurrency: 100_000}); err != nil {
		return nil, err
	}
	if err := lim.SetLimiter(ctx, &limit.Config{Name: flowLimiter, Concurrency: 100_000}); err != nil {
		return nil, err
	}
	e, closeE, err := v.engine(ctx, 64)
	if err != nil {
		return nil, err
	}
	defer closeE()
	short := func(name string, opts ...weir.StepOption) *weir.Workflow[int, int] {
		return weir.Register(e, name, func(ctx weir.Context, _ int) (int, error) {
			sum := 0
			for i := range 3 {
				x, err := weir.Step(ctx, "s", func(sc weir.StepContext) (int, error) { return i, nil }, opts...)
				if err != nil {
					return 0, err
				}
				sum += x
			}
			v.prog.add(1)
			return sum, nil
		})
	}
	plain := short("bench-flow-plain")
	limited := short("bench-flow-limited", weir.WithLimiter(flowLimiter, &weir.LimitOptions{Key: "t"}))
	starts := map[string]time.Time{}
	var mu sync.Mutex
	rated := weir.Register(e, "bench-flow-rate", func(ctx weir.Context, _ int) (int, error) {
		mu.Lock()
		if _, ok := starts[ctx.RunID()]; !ok {
			starts[ctx.RunID()] = time.Now()
		}
		mu.Unlock()
		return 0, nil
	})
	if err := e.Work(ctx); err != nil {
		return nil, err
	}

	variants := []struct {
		name  string
		start func(ctx context.Context) (*weir.Handle[int], error)
	}{
		{"plain", func(ctx context.Context) (*weir.Handle[int], error) { return plain.Start(ctx, 0, nil) }},
		{"queued", func(ctx context.Context) (*weir.Handle[int], error) {
			return plain.Start(ctx, 0, &weir.StartOptions{Queue: flowQueue, QueueKey: "t"})
		}},
		{"limited", func(ctx context.Context) (*weir.Handle[int], error) { return limited.Start(ctx, 0, nil) }},
	}
	rounds := max(1, c.FlowRounds)
	rates := map[string][]float64{}
	for round := range rounds {
		for i := range variants {
			vr := variants[(round+i)%len(variants)]
			v.prog.phase(fmt.Sprintf("round %d/%d, %s runs", round+1, rounds, vr.name))
			t0 := time.Now()
			if err := each(ctx, c.Runs, c.RunConcurrency, func(ctx context.Context, _ int) error {
				h, err := vr.start(ctx)
				if err == nil {
					_, err = h.Result(ctx)
				}
				return err
			}); err != nil {
				return nil, fmt.Errorf("%s: %w", vr.name, err)
			}
			rates[vr.name] = append(rates[vr.name], float64(c.Runs)/time.Since(t0).Seconds())
		}
	}
	med := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	base := med(rates["plain"])
	r := &Result{Unit: "runs", Ops: int64(c.Runs), OpsPerSec: base,
		Baseline:          "the same short runs (3 steps) with no queue and no limiter, in the same rounds",
		BaselineOpsPerSec: base,
		RatioOf:           "runs/s with every step limited ÷ runs/s plain",
	}
	overhead := func(with float64) float64 { return 100 * (base/with - 1) }
	for _, name := range []string{"queued", "limited"} {
		r.extra(name+"_runs_per_sec", med(rates[name]))
		r.extra(name+"_overhead_pct", overhead(med(rates[name])))
	}
	r.Ratio = med(rates["limited"]) / base
	r.target("a queue or limiter that does not bind costs ≤ 10 % of a short run", overhead(med(rates["queued"])) <= 10 && overhead(med(rates["limited"])) <= 10)

	// Rate accuracy.
	v.prog.phase(fmt.Sprintf("rate: %d runs in a queue of %d per %v", c.FlowRateRuns, c.FlowRate, c.FlowPeriod))
	if err := lim.SetLimiter(ctx, &limit.Config{Name: flowRateQ, Rate: c.FlowRate, Period: c.FlowPeriod}); err != nil {
		return nil, err
	}
	// The admissions, as the queue counted them (its uses, each run's at
	// its admission), read while they happen: a use leaves the state a
	// period after it was made, and is read here at least twice before.
	admitted := map[string]time.Time{}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() {
		t := time.NewTicker(c.FlowPeriod / 5)
		defer t.Stop()
		for {
			st, err := lim.LimiterState(watchCtx, flowRateQ, time.Time{})
			if err != nil {
				if watchCtx.Err() != nil {
					err = nil
				}
				watched <- err
				return
			}
			for _, u := range st.Uses {
				if _, ok := admitted[u.Holder]; !ok && u.Count <= 1 {
					admitted[u.Holder] = u.At
				}
			}
			select {
			case <-watchCtx.Done():
				watched <- nil
				return
			case <-t.C:
			}
		}
	}()
	hs := make([]*weir.Handle[int], c.FlowRateRuns)
	for i := range hs {
		if hs[i], err = rated.Start(ctx, i, &weir.StartOptions{Queue: flowRateQ}); err != nil {
			stopWatch()
			return nil, err
		}
	}
	for _, h := range hs {
		if _, err := h.Result(ctx); err != nil {
			stopWatch()
			return nil, err
		}
	}
	stopWatch()
	if err := <-watched; err != nil {
		return nil, fmt.Errorf("rate: reading the queue's uses: %w", err)
	}
	// The last window's, made since the last read.
	st, err := lim.LimiterState(ctx, flowRateQ, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("rate: reading the queue's uses: %w", err)
	}
	for _, u := range st.Uses {
		if _, ok := admitted[u.Holder]; !ok && u.Count <= 1 {
			admitted[u.Holder] = u.At
		}
	}
	mostIn := func(m map[string]time.Time) ([]time.Time, int) {
		var at []time.Time
		for _, t := range m {
			at = append(at, t)
		}
		slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
		most := 0
		for i := range at {
			j, _ := slices.BinarySearchFunc(at, at[i].Add(c.FlowPeriod), func(a, t time.Time) int { return a.Compare(t) })
			most = max(most, j-i)
		}
		return at, most
	}
	at, bodies := mostIn(starts)
	admittedAt, most := mostIn(admitted)
	set := float64(c.FlowRate) / c.FlowPeriod.Seconds()
	got := 0.0
	if n := len(at); n > c.FlowRate {
		// The first Rate start at once; the rest at the limit's pace.
		got = float64(n-c.FlowRate) / at[n-1].Sub(at[0]).Seconds()
	}
	r.extra("rate_set_per_sec", set)
	r.extra("rate_achieved_per_sec", got)
	r.extra("rate_achieved_pct", 100*got/set)
	r.extra("rate_most_in_a_window", float64(most))
	r.extra("rate_admissions_seen", float64(len(admittedAt)))
	r.extra("rate_most_bodies_in_a_window", float64(bodies))
	r.Notes = append(r.Notes, fmt.Sprintf("rate: %d runs started at once in a queue of %d per %v; rate_most_in_a_window is the most admissions (the queue's own uses, read as they were made: rate_admissions_seen of them) in any window of the period (the limit: %d); rate_most_bodies_in_a_window the most workflow bodies first run in one, by the workflow's clock, which may pass the limit by the spread of the time from an admission to its body; rate_achieved is (runs - %d) ÷ the time from the first body to the last",
		c.FlowRateRuns, c.FlowRate, c.FlowPeriod, c.FlowRate, c.FlowRate))
	if most > c.FlowRate {
		r.Notes = append(r.Notes, fmt.Sprintf("THE RATE LIMIT DID NOT HOLD: %d admissions in one window", most))
	}
	if len(admittedAt) < c.FlowRateRuns {
		r.Notes = append(r.Notes, fmt.Sprintf("rate: %d of %d admissions read (a window's uses merged, or gone before read): rate_most_in_a_window counts those alone", len(admittedAt), c.FlowRateRuns))
	}

	if multiProcess(c.Store) && len(c.ServerCommand) > 0 {
		if err := flowProcesses(ctx, v, r); err != nil {
			return nil, err
		}
	} else {
		r.Notes = append(r.Notes, "processes: left out (they need a PostgreSQL --store and weir bench's server command)")
	}
	return r, nil
}

// flowProcesses runs ScaleRuns of bench.emit in a queue of
// FlowQueueConcurrency through N = 1, 2, 3 weir server processes on one
// PostgreSQL database (a fresh schema each).
func flowProcesses(ctx context.Context, v *env, r *Result) error {
	c := v.cfg
	base, err := adminURL(c.Store)
	if err != nil {
		return err
	}
	tag := fmt.Sprintf("%x", rand.Uint64()&0xffffffffff)
	var first float64
	for _, n := range []int{1, 2, 3} {
		schema := fmt.Sprintf("weir_flow_%s_n%d", tag, n)
		dsn, err := withParams(base, map[string]string{"schema": schema})
		if err != nil {
			return err
		}
		v.prog.phase(fmt.Sprintf("processes starting (N=%d)", n))
		kids, err := startServers(ctx, c.ServerCommand, dsn, n, false)
		if err != nil {
			return err
		}
		rate, err := flowProcessRound(ctx, v, kids, n)
		if err == nil {
			err = flowSlotRound(ctx, v, kids, n, r)
		}
		stopErr := stopAll(kids)
		killAll(kids)
		if err != nil {
			return fmt.Errorf("processes N=%d: %w", n, err)
		}
		if stopErr != nil {
			return fmt.Errorf("processes N=%d: %w", n, stopErr)
		}
		if n == 1 {
			first = rate
		}
		r.extra(fmt.Sprintf("queue_runs_per_sec_n%d", n), rate)
		r.extra(fmt.Sprintf("queue_runs_per_sec_n%d_vs_n1", n), rate/first)
	}
	r.Notes = append(r.Notes, fmt.Sprintf("slot handover: %d runs of bench.slot started at once through the N processes, each a step holding a slot of a step limiter of concurrency 2 for %v; from the steps' own start and end instants: slot_utilization (busy slot time ÷ 2 × the first start to the last end), slot_handover (a slot freed while steps waited, to the start that took it), slot_most_in_flight (at most 2)",
		c.FlowSlotRuns, c.FlowSlotHold))
	r.Notes = append(r.Notes, fmt.Sprintf("processes: %d runs of bench.emit (%d chunks) started through N weir server processes on one PostgreSQL database in a queue of concurrency %d (a global limit, the bottleneck), %d clients a process",
		c.ScaleRuns, c.ScaleChunks, c.FlowQueueConcurrency, c.ScaleConcurrency))
	return nil
}

func flowProcessRound(ctx context.Context, v *env, kids []*child, n int) (float64, error) {
	c := v.cfg
	cls := make([]*client.Client, n)
	for i, k := range kids {
		var err error
		if cls[i], err = client.New(k.url, nil); err != nil {
			return 0, err
		}
	}
	if _, err := cls[0].SetLimiter(ctx, &api.Limiter{Name: flowQueue, Concurrency: c.FlowQueueConcurrency}); err != nil {
		return 0, err
	}
	in := EmitInput{Chunks: c.ScaleChunks, Size: c.ChunkSize}
	v.prog.phase(fmt.Sprintf("queued runs (N=%d)", n))
	wctx, cancel := context.WithTimeout(ctx, c.ScaleTimeout)
	defer cancel()
	t0 := time.Now()
	err := each(wctx, c.ScaleRuns, c.ScaleConcurrency*n, func(ctx context.Context, i int) error {
		cl := cls[i%n]
		id := fmt.Sprintf("flow-%06d", i)
		if _, _, err := scaleRun(ctx, cl, id, in, &client.StartOptions{Queue: flowQueue}); err != nil {
			return fmt.Errorf("run %s through %s: %w", id, cl.URL(), err)
		}
		v.prog.add(1)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return float64(c.ScaleRuns) / time.Since(t0).Seconds(), nil
}
