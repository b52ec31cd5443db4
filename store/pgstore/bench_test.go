package pgstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/pgstore"
	"github.com/weirhq/weir/store/sqlitestore"
	"github.com/weirhq/weir/stream"
)

// The workload of issue 4's benchmark: exactly-once step-stream writes, 500
// runs × 20 chunks of 100 bytes, 16 runs at a time, through the engine, on
// PostgreSQL with durable commits (the server's synchronous_commit).
const (
	benchRuns        = 500
	benchChunks      = 20
	benchChunkSize   = 100
	benchConcurrency = 16
)

// registerStreamer registers the benchmark's workflow: one step that writes
// n chunks to stream "out".
func registerStreamer(e *weir.Engine) *weir.Workflow[int, int] {
	return weir.Register(e, "streamer", func(ctx weir.Context, n int) (int, error) {
		return weir.Step(ctx, "emit", func(sc weir.StepContext) (int, error) {
			w := sc.Stream("out")
			chunk := make([]byte, benchChunkSize)
			for i := range n {
				copy(chunk, fmt.Sprintf("%s chunk %04d ", sc.RunID(), i))
				if _, err := w.Write(chunk); err != nil {
					return 0, err
				}
			}
			return n, nil
		})
	})
}

func benchEngine(b *testing.B, s store.Store) *weir.Engine {
	b.Helper()
	e, err := weir.New(s, &weir.Config{
		Concurrency:  benchConcurrency * 2,
		PollInterval: 50 * time.Millisecond,
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Close(ctx)
	})
	return e
}

// BenchmarkStepStreamRuns runs the workload once per iteration and reports
// chunks/s (every chunk committed exactly once, each run ended) and runs/s.
// The sub-benchmarks are the same workload on PostgreSQL and, as the
// baseline of the same run, on SQLite (one process, durable commits).
func BenchmarkStepStreamRuns(b *testing.B) {
	b.Run("postgres", func(b *testing.B) {
		benchStepStreamRuns(b, open(b, newSchema(b), &pgstore.Config{MaxConns: 24}))
	})
	b.Run("sqlite", func(b *testing.B) {
		s, err := sqlitestore.Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		benchStepStreamRuns(b, s)
	})
}

func benchStepStreamRuns(b *testing.B, s store.Store) {
	e := benchEngine(b, s)
	wf := registerStreamer(e)
	if err := e.Work(b.Context()); err != nil {
		b.Fatal(err)
	}
	var elapsed time.Duration
	iter := 0
	for b.Loop() {
		iter++
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range benchConcurrency {
			wg.Go(func() {
				for next.Add(1) <= benchRuns {
					h, err := wf.Start(b.Context(), benchChunks, nil)
					if err != nil {
						b.Error(err)
						return
					}
					if _, err := h.Result(b.Context()); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		elapsed += time.Since(start)
		if b.Failed() {
			return
		}
	}
	runs := float64(iter * benchRuns)
	b.ReportMetric(runs*benchChunks/elapsed.Seconds(), "chunks/s")
	b.ReportMetric(runs/elapsed.Seconds(), "runs/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkLiveTail measures the live tail across two processes: a worker
// process runs a step that writes a chunk every millisecond, each holding
// the time it was written; this process follows the stream (the live view)
// and measures, per chunk, the time from Write to its arrival here, through
// the commit, NOTIFY, LISTEN and the read. It reports percentiles in ms of
// every chunk but each run's first 20 (written while the reader attaches).
func BenchmarkLiveTail(b *testing.B) {
	const (
		perRun   = 1000
		warmup   = 20
		interval = time.Millisecond
	)
	schema := newSchema(b)
	s := open(b, schema, nil)
	e, err := weir.New(s, &weir.Config{NoWorker: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Close(context.Background()) })
	registerProcessWorkflows(e, io.Discard, 0)
	w := startWorker(b, schema, 0, 5*time.Second)
	w.waitFor(b, "ready", func(l []string) bool { return slices.Contains(l, "ready") })
	var lat []time.Duration
	n := 0
	for b.Loop() {
		n++
		id := fmt.Sprintf("tail-%d", n)
		if _, _, err := e.StartRun(b.Context(), "tail", []byte(fmt.Sprintf(`{"N":%d,"Interval":%d}`, perRun, interval)), &weir.StartOptions{ID: id}); err != nil {
			b.Fatal(err)
		}
		got := 0
		for rec, err := range e.Read(b.Context(), id, "out", &weir.ReadOptions{Follow: true}) {
			if err != nil {
				b.Fatal(err)
			}
			if rec.Kind != stream.KindData {
				continue
			}
			at, err := strconv.ParseInt(string(rec.Data), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			// The first chunks are written while the reader attaches (it
			// polls until the stream exists): catch-up, not the live tail.
			if got >= warmup {
				lat = append(lat, time.Since(time.Unix(0, at)))
			}
			got++
		}
		if got != perRun {
			b.Fatalf("read %d chunks, want %d", got, perRun)
		}
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkStepStreamLarge is the write path without the runs' overhead: 16
// runs at a time, each a step that streams 50,000 chunks of 100 bytes
// exactly once (the SDK's writer batches them), on PostgreSQL with durable
// commits. It reports chunks/s.
func BenchmarkStepStreamLarge(b *testing.B) {
	const chunks = 50_000
	s := open(b, newSchema(b), &pgstore.Config{MaxConns: 24})
	e := benchEngine(b, s)
	wf := registerStreamer(e)
	if err := e.Work(b.Context()); err != nil {
		b.Fatal(err)
	}
	var elapsed time.Duration
	runs := 0
	for b.Loop() {
		start := time.Now()
		var wg sync.WaitGroup
		for range benchConcurrency {
			wg.Go(func() {
				h, err := wf.Start(b.Context(), chunks, nil)
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := h.Result(b.Context()); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		elapsed += time.Since(start)
		runs += benchConcurrency
	}
	b.ReportMetric(float64(runs*chunks)/elapsed.Seconds(), "chunks/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkLimiterSlot: a step's round trip with its limiter (a slot taken
// and given back, two transactions on the limiter's row), 16 callers at
// once, on PostgreSQL and SQLite with durable commits; reports slots/s.
func BenchmarkLimiterSlot(b *testing.B) {
	b.Run("postgres", func(b *testing.B) {
		benchLimiterSlot(b, open(b, newSchema(b), &pgstore.Config{MaxConns: 24}))
	})
	b.Run("sqlite", func(b *testing.B) {
		s, err := sqlitestore.Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		benchLimiterSlot(b, s)
	})
}

func benchLimiterSlot(b *testing.B, s store.Limits) {
	for _, c := range []limit.Config{
		{Name: "concurrency", Concurrency: 64},
		// A rate's window keeps every slot taken in it: 600 a minute.
		{Name: "rate", Concurrency: 64, Rate: 600, Period: time.Minute},
	} {
		b.Run(c.Name, func(b *testing.B) { benchLimiterConfig(b, s, c) })
	}
}

func benchLimiterConfig(b *testing.B, s store.Limits, c limit.Config) {
	c.Name += strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := s.SetLimiter(b.Context(), &c); err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	b.SetParallelism(8) // 16 callers on 2 cores
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h := "h" + strconv.FormatInt(n.Add(1), 10)
			for {
				d, err := s.AcquireSlot(b.Context(), &store.AcquireSlotParams{Limiter: c.Name, Request: limit.Request{Holder: h, Lease: time.Minute}})
				if err != nil {
					b.Error(err)
					return
				}
				if d.Granted {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if _, err := s.ReleaseSlot(b.Context(), &store.ReleaseSlotParams{Limiter: c.Name, Holder: h, Cost: 1}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "slots/s")
}
