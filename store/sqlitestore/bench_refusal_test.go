package sqlitestore_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
)

// BenchmarkWritesBesideRefusals is other clients' writes (a message to a
// small run; an op is one) while one client repeats a request that
// refuses or finds what it asks for, about runs with a 15 MiB input and
// 15 messages of 1 MiB in their log: a resume of a live run, a fork from
// past its log, a queued start naming it, a start deduplicated into a
// running run. Each read the run's data and log with the writer held
// (red team, round nineteen: other clients' writes p90 2–7 → 58–184 ms).
// It reports the writes' p50 and p90 and the requests made.
func BenchmarkWritesBesideRefusals(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "bench.db"))
	ctx := b.Context()
	input := make([]byte, 15<<20)
	if err := s.SetLimiter(ctx, &limit.Config{Name: "q", Concurrency: 10}); err != nil {
		b.Fatal(err)
	}
	big, _, err := s.CreateRun(ctx, &store.CreateRunParams{ID: "big", Workflow: "wf", Input: input, Owner: "w", LeaseTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Advance(ctx, &store.AdvanceParams{RunID: "big", LeaseEpoch: big.LeaseEpoch,
		Events: []store.Event{{Type: store.EventRunStarted}}}); err != nil {
		b.Fatal(err)
	}
	if _, _, err := s.CreateRun(ctx, &store.CreateRunParams{ID: "dq", Workflow: "wf", Queue: "q", Dedupe: "k", Input: input}); err != nil {
		b.Fatal(err)
	}
	if runs, err := s.AdmitRuns(ctx, &store.AdmitRunsParams{Owner: "w", Limit: 1, LeaseTTL: time.Hour}); err != nil || len(runs) != 1 {
		b.Fatalf("admitted %d, %v", len(runs), err)
	}
	for _, id := range []string{"big", "dq"} {
		for range 15 {
			if _, err := s.SendMessage(ctx, &store.SendMessageParams{RunID: id, Topic: "t", Payload: make([]byte, store.MaxMessagePayload)}); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, _, err := s.CreateRun(ctx, &store.CreateRunParams{ID: "small", Workflow: "wf"}); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	cases := []struct {
		name string
		req  func() error
	}{
		{"alone", nil},
		{"resume a live run", func() error {
			_, err := s.ResumeRun(ctx, &store.ResumeRunParams{ID: "big"})
			return want(err, store.ErrNotResumable)
		}},
		{"fork past the log", func() error {
			_, _, err := s.ForkRun(ctx, &store.ForkRunParams{Source: "big", ID: "f", Op: 99})
			return want(err, store.ErrInvalid)
		}},
		{"queued start naming a run", func() error {
			_, created, err := s.CreateRun(ctx, &store.CreateRunParams{ID: "big", Workflow: "wf", Queue: "q"})
			return wantFound(created, err)
		}},
		{"dedupe hit", func() error {
			_, created, err := s.CreateRun(ctx, &store.CreateRunParams{ID: fmt.Sprint("d", seq.Add(1)), Workflow: "wf", Queue: "q", Dedupe: "k"})
			return wantFound(created, err)
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			stop, done := make(chan struct{}), make(chan error, 1)
			var reqs atomic.Int64
			go func() {
				for c.req != nil {
					select {
					case <-stop:
						done <- nil
						return
					default:
					}
					if err := c.req(); err != nil {
						done <- err
						return
					}
					reqs.Add(1)
				}
				done <- nil
			}()
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if _, err := s.SendMessage(ctx, &store.SendMessageParams{RunID: "small", Topic: "t", Payload: []byte(`1`)}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			close(stop)
			select {
			case err := <-done:
				if err != nil {
					b.Fatal(err)
				}
			case <-time.After(time.Minute):
				b.Fatal("the requests did not stop")
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds())/1000, "p90-ms")
			b.ReportMetric(float64(reqs.Load())/b.Elapsed().Seconds(), "requests/s")
		})
	}
}

func want(err, target error) error {
	if !errors.Is(err, target) {
		return fmt.Errorf("got %v, want %v", err, target)
	}
	return nil
}

func wantFound(created bool, err error) error {
	if err == nil && created {
		return fmt.Errorf("created, want found")
	}
	return err
}
