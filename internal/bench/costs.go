package bench

import (
	"context"
	"fmt"
	"net/http"
	"time"

	weir "github.com/weirhq/weir"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/store"
)

// runCosts: what one run costs the store, counted (store.Counts) rather
// than timed, so that CI can hold it (bench/guard.json). The run is
// bench.emit's shape (one step writing CostsChunks chunks of ChunkSize
// bytes to its stream), CostsRuns times, one run at a time: with nothing
// beside it to share a group commit, each run pays for every statement it
// causes, and the counts are the same from one sitting to the next (but
// for the publisher's NOTIFYs, which coalesce writes 2 ms apart).
//
//   - inproc: started and awaited in process (weir.Workflow.Start, Result);
//   - http: through a weir server on loopback as a client of its runs API
//     does it: POST /v1/runs, a follower of the run's stream in the
//     committed view until the stream closes, GET /v1/runs/{id}.
//
// The baseline is the in-process run; the ratio, the statements of the run
// over HTTP over those of the same run in process.
func runCosts(ctx context.Context, v *env) (*Result, error) {
	c := v.cfg
	e, err := weir.New(v.store, &weir.Config{
		Concurrency:  1,
		PollInterval: time.Hour, // no claim polls among the counts: runs started here are leased to it
		Logger:       c.Logger,
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = e.Close(cctx)
	}()
	wf := RegisterEmit(e)
	if err := e.Work(ctx); err != nil {
		return nil, err
	}
	u, stop, err := listen(server.New(e, &server.Config{Logger: c.Logger}))
	if err != nil {
		return nil, err
	}
	defer stop()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer hc.CloseIdleConnections()
	cl, err := client.New(u, &client.Options{HTTPClient: hc})
	if err != nil {
		return nil, err
	}
	in := EmitInput{Chunks: c.CostsChunks, Size: c.ChunkSize}
	tag := time.Now().UnixNano()
	warm := max(c.CostsRuns/10, 5)

	type phase struct {
		name string
		run  func(ctx context.Context, i int) error
	}
	inproc := phase{"inproc", func(ctx context.Context, _ int) error {
		h, err := wf.Start(ctx, in, nil)
		if err != nil {
			return err
		}
		_, err = h.Result(ctx)
		return err
	}}
	overHTTP := phase{"http", func(ctx context.Context, i int) error {
		_, _, err := scaleRun(ctx, cl, fmt.Sprintf("costs-%d-%06d", tag, i), in, nil)
		return err
	}}
	r := &Result{Unit: "runs", Ops: int64(c.CostsRuns)}
	per := map[string]store.Counts{}
	var secs float64
	for pi, p := range []phase{inproc, overHTTP} {
		v.prog.phase(p.name + " (warming up)")
		// The first runs prepare the connections' statements: not counted.
		for i := range warm {
			if err := p.run(ctx, -1-i); err != nil {
				return nil, fmt.Errorf("%s: %w", p.name, err)
			}
		}
		v.prog.phase(p.name)
		c0, ok := store.CountsOf(v.store)
		if !ok {
			return nil, fmt.Errorf("the store counts nothing (store.Counter)")
		}
		cpu0 := sampleCPU(nil)
		t0 := time.Now()
		for i := range c.CostsRuns {
			if err := p.run(ctx, pi*c.CostsRuns+i); err != nil {
				return nil, fmt.Errorf("%s: %w", p.name, err)
			}
			v.prog.add(1)
		}
		d := time.Since(t0)
		cpu1 := sampleCPU(nil)
		c1, _ := store.CountsOf(v.store)
		k := c1.Sub(c0)
		per[p.name] = k
		n := float64(c.CostsRuns)
		pre := p.name + "_"
		if k.Statements > 0 {
			r.extra(pre+"statements_per_run", float64(k.Statements)/n)
			r.extra(pre+"round_trips_per_run", float64(k.RoundTrips)/n)
		}
		r.extra(pre+"commits_per_run", float64(k.Commits)/n)
		r.extra(pre+"runs_per_sec", n/d.Seconds())
		if cpu1.self > 0 {
			r.extra(pre+"cpu_ms_per_run", 1000*(cpu1.self-cpu0.self)/n)
			if multiProcess(c.Store) {
				r.extra(pre+"cpu_pg_ms_per_run", 1000*(cpu1.postgres-cpu0.postgres)/n)
			}
		}
		if p.name == "http" {
			secs = d.Seconds()
		}
	}
	r.Seconds, r.OpsPerSec = secs, float64(c.CostsRuns)/secs
	r.Baseline = "the same runs started and awaited in process"
	r.BaselineOpsPerSec = r.Extra["inproc_runs_per_sec"]
	if s := per["inproc"].Statements; s > 0 {
		r.Ratio, r.RatioOf = float64(per["http"].Statements)/float64(s), "statements per run over HTTP ÷ in process"
	} else {
		r.Ratio, r.RatioOf = float64(per["http"].Commits)/float64(max(per["inproc"].Commits, 1)), "commits per run over HTTP ÷ in process"
	}
	r.Notes = append(r.Notes, fmt.Sprintf("one run at a time, %d runs a phase after %d not counted; a run: one step writing %d chunks of %d B; http: POST /v1/runs, a committed-view follower until the stream closes, GET /v1/runs/{id}", c.CostsRuns, warm, c.CostsChunks, c.ChunkSize),
		"cpu_ms_per_run: this process (engine, server, client); cpu_pg_ms_per_run: every postgres process")
	return r, nil
}
