package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
)

// runSteps: one run of Steps trivial steps (step-to-step overhead, each
// step's gap timed), then Runs runs of a three-step workflow at once (runs/s).
// The baseline is the floor of a step: one store transaction recording one
// event on a leased run, synced, back to back.
func runSteps(ctx context.Context, v *env) (*Result, error) {
	n := v.cfg.Steps
	v.prog.phase("transactions (baseline)")
	base, err := recordLoop(ctx, v, n)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}

	e, closeE, err := v.engine(ctx, 64)
	if err != nil {
		return nil, err
	}
	defer closeE()
	var stamps []time.Time
	long := weir.Register(e, "bench-steps", func(ctx weir.Context, n int) (int, error) {
		stamps = make([]time.Time, 0, n)
		for i := range n {
			if _, err := weir.Step(ctx, "s", func(sc weir.StepContext) (int, error) {
				stamps = append(stamps, time.Now())
				v.prog.add(1)
				return i, nil
			}); err != nil {
				return 0, err
			}
		}
		return n, nil
	})
	if err := e.Work(ctx); err != nil {
		closeE()
		return nil, err
	}
	short := weir.Register(e, "bench-short", func(ctx weir.Context, _ int) (int, error) {
		sum := 0
		for i := range 3 {
			x, err := weir.Step(ctx, "s", func(sc weir.StepContext) (int, error) { return i, nil })
			if err != nil {
				return 0, err
			}
			sum += x
		}
		v.prog.add(1)
		return sum, nil
	})

	v.prog.phase("steps")
	t0 := time.Now()
	h, err := long.Start(ctx, n, nil)
	if err != nil {
		return nil, err
	}
	if _, err := h.Result(ctx); err != nil {
		return nil, err
	}
	total := time.Since(t0)
	gaps := make([]time.Duration, 0, n)
	for i := 1; i < len(stamps); i++ {
		gaps = append(gaps, stamps[i].Sub(stamps[i-1]))
	}
	var mean time.Duration
	if len(stamps) > 1 {
		mean = stamps[len(stamps)-1].Sub(stamps[0]) / time.Duration(len(stamps)-1)
	}

	v.prog.phase("runs (3 steps each)")
	runs := v.cfg.Runs
	t1 := time.Now()
	if err := each(ctx, runs, v.cfg.RunConcurrency, func(ctx context.Context, _ int) error {
		h, err := short.Start(ctx, 0, nil)
		if err == nil {
			_, err = h.Result(ctx)
		}
		return err
	}); err != nil {
		return nil, err
	}
	runDur := time.Since(t1)

	r := &Result{Unit: "steps", Ops: int64(n), Seconds: total.Seconds(), OpsPerSec: float64(n) / total.Seconds(),
		Baseline:          "one synced store transaction recording one event on a leased run, back to back",
		BaselineOpsPerSec: float64(n) / base.Seconds(),
		RatioOf:           "mean step-to-step time ÷ baseline transaction time",
	}
	r.latencies(gaps)
	r.Ratio = mean.Seconds() / (base.Seconds() / float64(n))
	r.extra("step_overhead_ms", ms(mean))
	r.extra("baseline_txn_ms", ms(base)/float64(n))
	r.extra("runs_per_sec", float64(runs)/runDur.Seconds())
	r.extra("runs", float64(runs))
	r.extra("run_concurrency", float64(v.cfg.RunConcurrency))
	r.Notes = append(r.Notes, fmt.Sprintf("p50/p99/p999: the gap between consecutive steps of one run; runs_per_sec: runs of 3 steps, %d clients each starting one and awaiting its result, again and again", v.cfg.RunConcurrency))
	r.target("step overhead ≤ 0.5 ms embedded", ms(mean) <= 0.5)
	return r, nil
}

// recordLoop claims a run of its own and records n events on it, one
// transaction each; it returns the time they took.
func recordLoop(ctx context.Context, v *env, n int) (time.Duration, error) {
	id := fmt.Sprintf("bench-txn-%d", time.Now().UnixNano())
	if _, _, err := v.store.CreateRun(ctx, &store.CreateRunParams{ID: id, Workflow: "bench-txn"}); err != nil {
		return 0, err
	}
	runs, err := v.store.ClaimRuns(ctx, &store.ClaimRunsParams{Owner: "bench", Limit: 1, LeaseTTL: time.Minute})
	if err != nil {
		return 0, err
	}
	if len(runs) != 1 || runs[0].ID != id {
		return 0, errors.New("the store has other runnable runs: use a fresh store")
	}
	epoch := runs[0].LeaseEpoch
	t0 := time.Now()
	for i := range n {
		err := v.store.Advance(ctx, &store.AdvanceParams{RunID: id, LeaseEpoch: epoch, Events: []store.Event{
			{Type: store.EventStepCompleted, Op: int64(i + 1), Name: "s", Attempt: 1, Data: []byte("0")},
		}})
		if err != nil {
			return 0, err
		}
		v.prog.add(1)
	}
	d := time.Since(t0)
	err = v.store.Advance(ctx, &store.AdvanceParams{RunID: id, LeaseEpoch: epoch, Status: store.RunCompleted, Output: []byte("0"), CloseStreams: true})
	return d, err
}

// runReplay: a run of Steps completed steps, replayed Replays times. The
// baseline is loading its event log.
func runReplay(ctx context.Context, v *env) (*Result, error) {
	n := v.cfg.Steps
	e, closeE, err := v.engine(ctx, 1)
	if err != nil {
		return nil, err
	}
	defer closeE()
	wf := weir.Register(e, "bench-replay", func(ctx weir.Context, n int) (int, error) {
		sum := 0
		for i := range n {
			x, err := weir.Step(ctx, fmt.Sprintf("step-%d", i), func(sc weir.StepContext) (int, error) {
				v.prog.add(1)
				return i, nil
			})
			if err != nil {
				return 0, err
			}
			sum += x
		}
		return sum, nil
	})
	if err := e.Work(ctx); err != nil {
		closeE()
		return nil, err
	}
	v.prog.phase("steps (recording the run)")
	h, err := wf.Start(ctx, n, nil)
	if err != nil {
		return nil, err
	}
	if _, err := h.Result(ctx); err != nil {
		return nil, err
	}
	v.prog.phase("replays")
	var replays, loads []time.Duration
	var total time.Duration
	for range v.cfg.Replays {
		t0 := time.Now()
		if _, err := v.store.ListEvents(ctx, h.ID, 0); err != nil {
			return nil, err
		}
		loads = append(loads, time.Since(t0))
		t0 = time.Now()
		if err := e.Replay(ctx, h.ID); err != nil {
			return nil, err
		}
		d := time.Since(t0)
		total += d
		replays = append(replays, d)
		v.prog.add(1)
	}
	r := &Result{Unit: "replays", Ops: int64(len(replays)), Seconds: total.Seconds(), OpsPerSec: float64(len(replays)) / total.Seconds(),
		Baseline:          fmt.Sprintf("loading the run's event log (%d events)", 2*n+2),
		BaselineOpsPerSec: float64(len(loads)) / sum(loads).Seconds(),
		RatioOf:           "replay p50 ÷ log load p50",
	}
	r.latencies(replays)
	r.BaselineP50Ms = pct(loads, 0.5)
	r.Ratio = r.P50Ms / r.BaselineP50Ms
	r.extra("steps", float64(n))
	r.target("replay of 1,000 steps ≤ 100 ms", r.P50Ms <= 100)
	return r, nil
}

func sum(d []time.Duration) time.Duration {
	var t time.Duration
	for _, x := range d {
		t += x
	}
	return t
}

// runDBOSLike: DBOSRuns runs, each one step writing DBOSChunks chunks through
// its stream writer, DBOSConcurrency at a time, durable and exactly-once. The
// baseline is the same shape as plain appends: a stream per run, one
// anonymous append per chunk (what an at-least-once writer does).
func runDBOSLike(ctx context.Context, v *env) (*Result, error) {
	c := v.cfg
	total := c.DBOSRuns * c.DBOSChunks

	v.prog.phase("chunks (baseline: plain appends)")
	tag := time.Now().UnixNano()
	t0 := time.Now()
	if err := each(ctx, c.DBOSRuns, c.DBOSConcurrency, func(ctx context.Context, i int) error {
		si, err := v.store.OpenStream(ctx, &store.OpenStreamParams{Path: fmt.Sprintf("bench/dbos/%d/%d", tag, i), Create: true})
		if err != nil {
			return err
		}
		buf := make([]byte, c.ChunkSize)
		for j := range c.DBOSChunks {
			fillChunk(buf, 'p', j)
			if _, err := v.store.Append(ctx, &store.AppendParams{StreamID: si.ID, Chunks: [][]byte{buf}}); err != nil {
				return err
			}
			v.prog.add(1)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	baseDur := time.Since(t0)

	v.prog.phase("chunks (runs through the engine)")
	e, closeE, err := v.engine(ctx, c.DBOSConcurrency)
	if err != nil {
		return nil, err
	}
	defer closeE()
	wf := weir.Register(e, "bench-dbos", func(ctx weir.Context, _ int) (int, error) {
		return weir.Step(ctx, "emit", func(sc weir.StepContext) (int, error) {
			w := sc.Stream("out")
			buf := make([]byte, c.ChunkSize)
			for j := range c.DBOSChunks {
				fillChunk(buf, 'w', j)
				if _, err := w.Write(buf); err != nil {
					return 0, err
				}
			}
			v.prog.add(int64(c.DBOSChunks))
			return c.DBOSChunks, nil
		})
	})
	if err := e.Work(ctx); err != nil {
		closeE()
		return nil, err
	}
	c0, _ := store.CountsOf(v.store)
	cpu0 := sampleCPU(nil)
	t1 := time.Now()
	if err := each(ctx, c.DBOSRuns, c.DBOSConcurrency, func(ctx context.Context, _ int) error {
		h, err := wf.Start(ctx, 0, nil)
		if err == nil {
			_, err = h.Result(ctx)
		}
		return err
	}); err != nil {
		return nil, err
	}
	d := time.Since(t1)
	c1, _ := store.CountsOf(v.store)
	cpu1 := sampleCPU(nil)
	const dbosGo = 1371
	r := &Result{Unit: "chunks", Ops: int64(total), Seconds: d.Seconds(), OpsPerSec: float64(total) / d.Seconds(),
		Baseline:          "plain appends of the same shape: a stream per run, one anonymous append per chunk, same concurrency",
		BaselineOpsPerSec: float64(total) / baseDur.Seconds(),
		RatioOf:           "engine chunks/s ÷ plain-append chunks/s",
	}
	r.Ratio = r.OpsPerSec / r.BaselineOpsPerSec
	r.extra("runs_per_sec", float64(c.DBOSRuns)/d.Seconds())
	r.counts(c1.Sub(c0), c.DBOSRuns)
	r.cpu(cpu0, cpu1, c.DBOSRuns, multiProcess(c.Store))
	r.extra("peer_dbos_go_exactly_once_pg_chunks_per_sec", dbosGo)
	r.extra("vs_peer", r.OpsPerSec/dbosGo)
	r.Notes = append(r.Notes, fmt.Sprintf("%d clients each start a run and await its result, again and again (the shape of bench/peers/dbos)", c.DBOSConcurrency),
		"peer: DBOS Go v1.8.0, exactly-once (workflow WriteStream) on PostgreSQL, 1,371 chunks/s on this kind of machine (anchors-measured.md); measure it in the same sitting with bench/peers/dbos")
	return r, nil
}

// each calls f(ctx, i) for i in [0, n), conc calls at a time: conc
// workers, each taking the next i until all are taken. The first error
// cancels the others' context and is returned; so is ctx's.
func each(ctx context.Context, n, conc int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				if err := f(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}
