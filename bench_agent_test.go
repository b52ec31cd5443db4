package weir_test

import (
	"context"
	"encoding/json"
	"errors"
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
					fs[i] = weir.StepAsync(ctx, "tool", func(sc weir.StepContext) (int, error) {
						time.Sleep(time.Millisecond)
						return i, nil
					})
				}
				out, err := weir.All(ctx, fs...)
				return len(out), err
			})
			if err := e.Work(testCtx(b)); err != nil {
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
	stores := map[string]func(b *testing.B) store.Full{
		"sqlite": func(b *testing.B) store.Full { s, _ := openStore(b); return s },
		"postgres": func(b *testing.B) store.Full {
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
						busy = weir.StepAsync(ctx, "busy", func(sc weir.StepContext) (int, error) {
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
				if err := e.Work(testCtx(b)); err != nil {
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
func waitHook(b *testing.B, s store.Full, token string, parked bool) {
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

// benchStores are the stores the agent benchmarks run on.
var benchStores = map[string]func(b *testing.B) store.Full{
	"sqlite": func(b *testing.B) store.Full { s, _ := openStore(b); return s },
	"postgres": func(b *testing.B) store.Full {
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

// BenchmarkMessageResume measures a message sent to a run waiting in Recv
// (Engine.Send) until the run has it, on SQLite and PostgreSQL, with the
// run in process (a step runs too) and parked (it waits on Recv alone and
// is claimed again): BenchmarkHookResume's measure, for messages. It
// reports the p50 and p99 of that latency.
func BenchmarkMessageResume(b *testing.B) {
	for _, name := range []string{"sqlite", "postgres"} {
		for _, parked := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/parked=%v", name, parked), func(b *testing.B) {
				s := benchStores[name](b)
				cfg := fastConfig()
				cfg.PollInterval = 5 * time.Millisecond
				if parked {
					cfg.ParkAfter = weir.NoWait
				}
				e := newEngine(b, s, cfg)
				got := make(chan time.Time, 1)
				wf := weir.Register(e, "recv", func(ctx weir.Context, _ int) (int, error) {
					if !parked {
						weir.StepAsync(ctx, "busy", func(sc weir.StepContext) (int, error) {
							<-sc.Done()
							return 0, nil
						})
					}
					if err := weir.SetEvent(ctx, "ready", true); err != nil {
						return 0, err
					}
					v, err := weir.Recv[int](ctx, "m")
					if err == nil {
						got <- time.Now()
					}
					return v, err
				}, weir.WithRunTimeout(time.Hour))
				if err := e.Work(testCtx(b)); err != nil {
					b.Fatal(err)
				}
				var lat []time.Duration
				b.ResetTimer()
				for b.Loop() {
					b.StopTimer()
					h, err := wf.Start(testCtx(b), 0, nil)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := e.GetEvent(testCtx(b), h.ID, "ready", &weir.GetEventOptions{Wait: true}); err != nil {
						b.Fatal(err)
					}
					if parked {
						waitReleased(b, s, h.ID)
					}
					b.StartTimer()
					sent := time.Now()
					if _, err := e.Send(testCtx(b), h.ID, "m", json.RawMessage(`1`), nil); err != nil {
						b.Fatal(err)
					}
					select {
					case at := <-got:
						lat = append(lat, at.Sub(sent))
					case <-time.After(30 * time.Second):
						b.Fatal("the run never got the message")
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

// waitReleased waits until run's lease is released (it parked).
func waitReleased(b *testing.B, s store.Full, run string) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if r, err := s.GetRun(testCtx(b), run); err == nil && r.LeaseOwner == "" {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("run %s did not park within 30s", run)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkDeadlineOvershoot measures how long after its deadline
// (WithRunTimeout: its creation + 100 ms) a run's Result returns, on
// SQLite and PostgreSQL, with its step deaf to its context (it sleeps 2 s)
// and, for comparison, one that heeds it. It reports the p50 and p99 of
// the overshoot.
func BenchmarkDeadlineOvershoot(b *testing.B) {
	const deadline = 100 * time.Millisecond
	for _, name := range []string{"sqlite", "postgres"} {
		for _, deaf := range []bool{true, false} {
			b.Run(fmt.Sprintf("%s/deaf=%v", name, deaf), func(b *testing.B) {
				s := benchStores[name](b)
				e := newEngine(b, s, fastConfig())
				wf := weir.Register(e, "late", func(ctx weir.Context, _ int) (int, error) {
					return weir.Step(ctx, "slow", func(sc weir.StepContext) (int, error) {
						if deaf {
							time.Sleep(2 * time.Second)
						} else {
							<-sc.Done()
						}
						return 0, nil
					})
				}, weir.WithRunTimeout(deadline))
				if err := e.Work(testCtx(b)); err != nil {
					b.Fatal(err)
				}
				var over []time.Duration
				b.ResetTimer()
				for b.Loop() {
					h, err := wf.Start(testCtx(b), 0, nil)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := h.Result(testCtx(b)); !errors.Is(err, weir.ErrRunTimeout) {
						b.Fatalf("result: %v, want the deadline", err)
					}
					ended := time.Now()
					r, err := s.GetRun(testCtx(b), h.ID)
					if err != nil {
						b.Fatal(err)
					}
					over = append(over, ended.Sub(r.CreatedAt.Add(deadline)))
				}
				slices.Sort(over)
				b.ReportMetric(float64(over[len(over)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(over[len(over)*99/100].Microseconds()), "p99-µs")
			})
		}
	}
}
