package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/schedule"
	"github.com/weirhq/weir/store"
)

// runSchedules: ScheduleCount schedules of "@every 200ms" on one engine for
// ScheduleFor; each tick's run notes when its step began. The figure is the
// time from a tick to its run's step (p50, p99), the lateness every tick
// pays: the engine's poll for due schedules, the claim, the run's start.
// The baseline is a run started directly, from its start call to its step.
func runSchedules(ctx context.Context, v *env) (*Result, error) {
	c := v.cfg
	if _, ok := v.store.(store.Schedules); !ok {
		return nil, errors.New("schedules: the store has no schedules")
	}
	e, closeE, err := v.engine(ctx, 64)
	if err != nil {
		return nil, err
	}
	defer closeE()
	var mu sync.Mutex
	var lat []time.Duration
	seen := map[string]bool{}
	wf := weir.Register(e, "bench-tick", func(ctx weir.Context, _ int) (int, error) {
		_, tick, ok := weir.ScheduledTick(ctx)
		return weir.Step(ctx, "t", func(sc weir.StepContext) (int, error) {
			mu.Lock()
			if ok && !seen[sc.RunID()] {
				seen[sc.RunID()] = true
				lat = append(lat, time.Since(tick))
				v.prog.add(1)
			}
			mu.Unlock()
			return 0, nil
		})
	})
	if err := e.Work(ctx); err != nil {
		return nil, err
	}

	v.prog.phase("direct starts (baseline)")
	var base []time.Duration
	for range 200 {
		t0 := time.Now()
		h, err := wf.Start(ctx, 0, nil)
		if err != nil {
			return nil, err
		}
		if _, err := h.Result(ctx); err != nil {
			return nil, err
		}
		base = append(base, time.Since(t0))
	}

	v.prog.phase(fmt.Sprintf("%d schedules of @every 200ms for %v", c.ScheduleCount, c.ScheduleFor))
	names := make([]string, c.ScheduleCount)
	for i := range names {
		names[i] = fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
		if _, err := wf.Schedule(ctx, names[i], "@every 200ms", 0, &weir.ScheduleOptions{Overlap: schedule.Allow}); err != nil {
			return nil, err
		}
	}
	t := time.NewTimer(c.ScheduleFor)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
	}
	for _, n := range names {
		if err := v.store.(store.Schedules).DeleteSchedule(ctx, n); err != nil {
			return nil, err
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lat) == 0 {
		return nil, errors.New("schedules: no tick ran")
	}
	r := &Result{Unit: "ticks", Ops: int64(len(lat)), Seconds: c.ScheduleFor.Seconds(), OpsPerSec: float64(len(lat)) / c.ScheduleFor.Seconds(),
		Baseline: "a run started directly: its start call to its step's end, one at a time"}
	r.latencies(lat)
	r.BaselineP50Ms, r.BaselineP99Ms = pct(base, 0.5), pct(base, 0.99)
	r.RatioOf = "p99 tick → its run's step ÷ p99 of a direct start"
	if r.BaselineP99Ms > 0 {
		r.Ratio = r.P99Ms / r.BaselineP99Ms
	}
	r.Notes = append(r.Notes, fmt.Sprintf("latency: a tick's time to its run's step beginning, %d schedules of @every 200ms on one engine polling every 50 ms", c.ScheduleCount))
	return r, nil
}
