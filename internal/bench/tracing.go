package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"time"

	"github.com/weirhq/weir"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// A tracing variant: how the engine's spans are made and where they go.
type tracingVariant struct {
	name string
	// provider makes the variant's tracer provider, and what stops it
	// (flushing what it holds).
	provider func(ctx context.Context, collector string) (trace.TracerProvider, func(context.Context) error, error)
}

var tracingVariants = []tracingVariant{
	{"off", func(context.Context, string) (trace.TracerProvider, func(context.Context) error, error) {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}},
	// The SDK records every span and its attributes, and hands them to an
	// exporter that drops them: the engine's side of tracing, alone.
	{"noop-exporter", func(context.Context, string) (trace.TracerProvider, func(context.Context) error, error) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
		return tp, tp.Shutdown, nil
	}},
	// And exported over OTLP/HTTP (protobuf) to a collector in this process
	// that reads each export and answers as a collector does.
	{"otlp", func(ctx context.Context, collector string) (trace.TracerProvider, func(context.Context) error, error) {
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(collector+"/v1/traces"))
		if err != nil {
			return nil, nil, err
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
		return tp, tp.Shutdown, nil
	}},
}

type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// runTracing measures what tracing costs: the steps workload's runs (three
// steps each, RunConcurrency at once) and dbos-like's (a step writing
// DBOSChunks chunks), with tracing off, on with a no-op exporter, and on
// exporting over OTLP/HTTP, in interleaved rounds whose order rotates (off,
// noop, otlp; noop, otlp, off; …) so that drift and the store's growth hit
// them alike; the figures are each variant's median.
func runTracing(ctx context.Context, v *env) (*Result, error) {
	c := v.cfg
	var exports, exportBytes atomic.Int64
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		exports.Add(1)
		exportBytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer col.Close()
	rounds := max(1, c.TracingRounds)
	steps := map[string][]float64{} // variant -> runs/s, one per round
	dbos := map[string][]float64{}  // variant -> chunks/s
	for round := range rounds {
		// Each round starts with the next variant: the store grows as the
		// rounds go, and a fixed order would slow the last variant of
		// every round more than the first.
		for i := range tracingVariants {
			tv := tracingVariants[(round+i)%len(tracingVariants)]
			v.prog.phase(fmt.Sprintf("round %d/%d, tracing %s", round+1, rounds, tv.name))
			tp, stop, err := tv.provider(ctx, col.URL)
			if err != nil {
				return nil, err
			}
			s, d, err := tracedRound(ctx, v, tp)
			if serr := stop(ctx); err == nil {
				err = serr
			}
			if err != nil {
				return nil, fmt.Errorf("tracing %s: %w", tv.name, err)
			}
			steps[tv.name] = append(steps[tv.name], s)
			dbos[tv.name] = append(dbos[tv.name], d)
		}
	}
	med := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	off := med(steps["off"])
	r := &Result{Unit: "runs", Ops: int64(c.Runs), OpsPerSec: off,
		Baseline:          "the same runs with tracing off (a no-op tracer provider), in the same rounds",
		BaselineOpsPerSec: off,
		RatioOf:           "runs/s with every span exported over OTLP/HTTP ÷ runs/s with tracing off (steps)",
	}
	overhead := func(base, with float64) float64 { return 100 * (base/with - 1) }
	within := true
	for _, tv := range tracingVariants[1:] {
		sk, dk := med(steps[tv.name]), med(dbos[tv.name])
		so, do := overhead(off, sk), overhead(med(dbos["off"]), dk)
		r.extra("steps_runs_per_sec_"+tv.name, sk)
		r.extra("dbos_chunks_per_sec_"+tv.name, dk)
		r.extra("steps_overhead_pct_"+tv.name, so)
		r.extra("dbos_overhead_pct_"+tv.name, do)
		aim := 5.0
		if tv.name == "otlp" {
			aim = 15
		}
		within = within && so <= aim && do <= aim
	}
	r.extra("steps_runs_per_sec_off", off)
	r.extra("dbos_chunks_per_sec_off", med(dbos["off"]))
	r.extra("rounds", float64(rounds))
	r.extra("otlp_exports", float64(exports.Load()))
	r.extra("otlp_export_bytes", float64(exportBytes.Load()))
	r.Ratio = med(steps["otlp"]) / off
	r.Notes = append(r.Notes, fmt.Sprintf("each round: %d runs of 3 steps (%d at once), then %d runs of one step writing %d chunks (%d at once); overhead_pct = (off ÷ with − 1) × 100, medians of %d rounds",
		c.Runs, c.RunConcurrency, c.DBOSRuns, c.DBOSChunks, c.DBOSConcurrency, rounds))
	r.target("tracing overhead ≤ 5 % with a no-op exporter, ≤ 15 % exporting over OTLP", within)
	return r, nil
}

// tracedRound runs one round on an engine tracing to tp: the steps
// workload's short runs (runs/s) and dbos-like's runs (chunks/s).
func tracedRound(ctx context.Context, v *env, tp trace.TracerProvider) (runsPerSec, chunksPerSec float64, err error) {
	c := v.cfg
	e, err := weir.New(v.store, &weir.Config{
		Concurrency:    max(c.RunConcurrency, c.DBOSConcurrency),
		PollInterval:   50 * time.Millisecond,
		Logger:         c.Logger,
		Writer:         weir.WriterConfig{Linger: c.Linger},
		TracerProvider: tp,
	})
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = e.Close(cctx)
	}()
	short := weir.Register(e, "bench-traced-short", func(ctx weir.Context, _ int) (int, error) {
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
	emit := weir.Register(e, "bench-traced-dbos", func(ctx weir.Context, _ int) (int, error) {
		return weir.Step(ctx, "emit", func(sc weir.StepContext) (int, error) {
			w := sc.Stream("out")
			buf := make([]byte, c.ChunkSize)
			for j := range c.DBOSChunks {
				fillChunk(buf, 't', j)
				if _, err := w.Write(buf); err != nil {
					return 0, err
				}
			}
			v.prog.add(int64(c.DBOSChunks))
			return c.DBOSChunks, nil
		})
	})
	if err := e.Work(ctx); err != nil {
		return 0, 0, err
	}
	start := func(wf *weir.Workflow[int, int]) func(ctx context.Context, _ int) error {
		return func(ctx context.Context, _ int) error {
			h, err := wf.Start(ctx, 0, nil)
			if err == nil {
				_, err = h.Result(ctx)
			}
			return err
		}
	}
	t0 := time.Now()
	if err := each(ctx, c.Runs, c.RunConcurrency, start(short)); err != nil {
		return 0, 0, err
	}
	runsPerSec = float64(c.Runs) / time.Since(t0).Seconds()
	t1 := time.Now()
	if err := each(ctx, c.DBOSRuns, c.DBOSConcurrency, start(emit)); err != nil {
		return 0, 0, err
	}
	return runsPerSec, float64(c.DBOSRuns*c.DBOSChunks) / time.Since(t1).Seconds(), nil
}
