package weir_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/internal/pgtest"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/pgstore"
)

// BenchmarkFanOut measures a run of one step of 1 ms, and a run of 100
// such steps started at once (Go, StepConcurrency 100) and gathered (All):
// the ratio says what the fan-out costs next to one step.
func BenchmarkFanOut(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("steps=%d", n), func(b *testing.B) {
			s, _ := openStore(b)
			cfg := fastConfig()
			cfg.StepConcurrency = 100
			e := newEngine(b, s, cfg)
			wf := weir.Register(e, "fan", func(ctx weir.Context, n int) (int, error) {
				fs := make([]*weir.Future[int], n)
				for i := range fs {
					fs[i] = weir.Go(ctx, "tool", func(sc weir.StepContext) (int, error) {
						time.Sleep(time.Millisecond)
						return i, nil
					})
				}
				out, err := weir.All(ctx, fs...)
				return len(out), err
			})
			if err := e.Start(testCtx(b)); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				h, err := wf.Start(testCtx(b), n, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := h.Result(testCtx(b)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/run")
		})
	}
}

// BenchmarkHookResume measures a delivery (Engine.DeliverHook) to a run
// waiting on a hook until the run has the payload, on SQLite and
// PostgreSQL, with the run in process (it waits on a step too) and parked
// (it waits on the hook alone and is claimed again). It reports the p50 and
// p99 of that latency.
func BenchmarkHookResume(b *testing.B) {
	stores := map[string]func(b *testing.B) store.Store{
		"sqlite": func(b *testing.B) store.Store { s, _ := openStore(b); return s },
		"postgres": func(b *testing.B) store.Store {
			if os.Getenv("WEIR_BENCH_NO_PG") != "" {
				b.Skip("WEIR_BENCH_NO_PG")
			}
			s, err := pgstore.Open(context.Background(), pgtest.URL(), &pgstore.Config{Schema: pgtest.NewSchema(b), MaxConns: 8})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		},
	}
	for _, name := range []string{"sqlite", "postgres"} {
		for _, parked := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/parked=%v", name, parked), func(b *testing.B) {
				s := stores[name](b)
				cfg := fastConfig()
				cfg.PollInterval = 5 * time.Millisecond
				if parked {
					cfg.ParkAfter = weir.NoWait
				}
				e := newEngine(b, s, cfg)
				got := make(chan time.Time, 1)
				wf := weir.Register(e, "wait", func(ctx weir.Context, token string) (int, error) {
					h, err := weir.NewHook[int](ctx, token)
					if err != nil {
						return 0, err
					}
					var busy *weir.Future[int]
					if !parked {
						busy = weir.Go(ctx, "busy", func(sc weir.StepContext) (int, error) {
							<-sc.Done()
							return 0, nil
						})
					}
					v, err := h.Receive(ctx)
					if err == nil {
						got <- time.Now()
					}
					_ = busy
					return v, err
				}, weir.WithRunTimeout(time.Hour))
				if err := e.Start(testCtx(b)); err != nil {
					b.Fatal(err)
				}
				var lat []time.Duration
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					b.StopTimer()
					token := fmt.Sprintf("t-%d", i)
					h, err := wf.Start(testCtx(b), token, nil)
					if err != nil {
						b.Fatal(err)
					}
					waitHook(b, s, token, parked)
					b.StartTimer()
					sent := time.Now()
					if _, err := e.DeliverHook(testCtx(b), token, json.RawMessage(`1`), nil); err != nil {
						b.Fatal(err)
					}
					select {
					case at := <-got:
						lat = append(lat, at.Sub(sent))
					case <-time.After(30 * time.Second):
						b.Fatal("the run never got the payload")
					}
					b.StopTimer()
					_ = e.Cancel(testCtx(b), h.ID)
					b.StartTimer()
				}
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			})
		}
	}
}

// waitHook waits until token's hook exists (and, parked, its run parked).
func waitHook(b *testing.B, s store.Store, token string, parked bool) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		h, err := s.GetHook(testCtx(b), token)
		if err == nil {
			if !parked {
				return
			}
			r, err := s.GetRun(testCtx(b), h.RunID)
			if err == nil && r.LeaseOwner == "" {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("hook %q not ready within 30s", token)
		}
		time.Sleep(time.Millisecond)
	}
}
