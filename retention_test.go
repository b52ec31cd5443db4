package weir_test

import (
	"errors"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
)

// With Retention set, a worker engine deletes finished runs once they are
// that old, with their streams; runs still going are left alone.
func TestRetentionPurgesFinishedRuns(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.Retention = 200 * time.Millisecond
		e := newEngine(t, s, cfg)
		release := make(chan struct{})
		wf := weir.Register(e, "retained", func(ctx weir.Context, wait bool) (int, error) {
			return weir.Step(ctx, "emit", func(sc weir.StepContext) (int, error) {
				if _, err := sc.Stream("out").WriteString("x"); err != nil {
					return 0, err
				}
				if wait {
					<-release
				}
				return 1, nil
			})
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		done, err := wf.Start(testCtx(t), false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := done.Result(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		streams, err := s.ListStreams(testCtx(t), done.ID)
		if err != nil || len(streams) != 1 {
			t.Fatalf("streams of the finished run: %v, %v", streams, err)
		}
		going, err := wf.Start(testCtx(t), true, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer close(release)

		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := s.GetRun(testCtx(t), done.ID)
			if errors.Is(err, store.ErrNotFound) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatal("the finished run was not purged")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := s.GetStream(testCtx(t), streams[0].ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the purged run's stream: err = %v", err)
		}
		if r, err := s.GetRun(testCtx(t), going.ID); err != nil || r.Status.Terminal() {
			t.Fatalf("the running run: %+v, %v", r, err)
		}
	})
}

func TestRetentionIsValidated(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		if _, err := weir.New(s, &weir.Config{Retention: -time.Second}); err == nil {
			t.Fatal("a negative Retention was accepted")
		}
	})
}
