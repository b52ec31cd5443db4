package weir_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/weirhq/weir"
)

// BenchmarkStepOverhead measures one step of a run: its start and its
// outcome, each a durable transaction, on SQLite with synced commits.
func BenchmarkStepOverhead(b *testing.B) {
	s, _ := openStore(b)
	e := newEngine(b, s, nil)
	wf := weir.Register(e, "steps", func(ctx weir.Context, n int) (int, error) {
		sum := 0
		for i := range n {
			v, err := weir.Step(ctx, "s", func(sc weir.StepContext) (int, error) { return i, nil })
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
	b.ResetTimer()
	start := time.Now()
	h, err := wf.Start(testCtx(b), b.N, nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := h.Result(testCtx(b)); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/step")
}

// BenchmarkReplay1000Steps measures the replay of a run of 1,000 completed
// steps: loading its event log and re-executing the workflow function.
func BenchmarkReplay1000Steps(b *testing.B) {
	s, _ := openStore(b)
	e := newEngine(b, s, nil)
	wf := weir.Register(e, "long", func(ctx weir.Context, n int) (int, error) {
		sum := 0
		for i := range n {
			v, err := weir.Step(ctx, fmt.Sprintf("step-%d", i), func(sc weir.StepContext) (int, error) { return i, nil })
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
	h, err := wf.Start(testCtx(b), 1000, nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := h.Result(testCtx(b)); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if err := e.Replay(testCtx(b), h.ID); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/replay")
}

// BenchmarkStepStream measures a step streaming 100-byte chunks through the
// SDK's batching writer (durable commits), and a retry of it that re-emits
// the same chunks: the first attempt appends, the second adopts. The figures
// are chunks/s for each and the adopt/append time ratio.
func BenchmarkStepStream(b *testing.B) {
	const n = 100_000
	s, _ := openStore(b)
	e := newEngine(b, s, nil)
	var appendDur, adoptDur time.Duration
	fail := errors.New("fail after writing")
	chunk := make([]byte, 100)
	wf := weir.Register(e, "stream", func(ctx weir.Context, _ int) (int, error) {
		return weir.Step(ctx, "emit", func(sc weir.StepContext) (int, error) {
			w := sc.Stream("out")
			start := time.Now()
			for i := range n {
				copy(chunk, fmt.Sprintf("%08d", i))
				if _, err := w.Write(chunk); err != nil {
					return 0, err
				}
			}
			if err := w.Flush(); err != nil {
				return 0, err
			}
			if sc.Attempt() == 1 {
				appendDur += time.Since(start)
				return 0, fail
			}
			adoptDur += time.Since(start)
			return n, nil
		})
	})
	if err := e.Work(testCtx(b)); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		h, err := wf.Start(testCtx(b), 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := h.Result(testCtx(b)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/appendDur.Seconds(), "append-chunks/s")
	b.ReportMetric(float64(n*b.N)/adoptDur.Seconds(), "adopt-chunks/s")
	b.ReportMetric(adoptDur.Seconds()/appendDur.Seconds(), "adopt/append")
}
