package pgstore_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir"
)

// TestEngineCountsSkippedRenewals: a run whose row a write in progress
// holds is left by the engine's renewal round for the next (ErrNotRenewed),
// and the engine says so in its stats (weir_engine_lease_renewals_skipped_total)
// instead of a log line a flood would fill; the run goes on, its lease
// never lapsing.
func TestEngineCountsSkippedRenewals(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := open(t, schema, nil)
	e, err := weir.New(s, &weir.Config{LeaseTTL: time.Second, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Close(ctx)
	})
	started, finish := make(chan struct{}), make(chan struct{})
	wf := weir.Register(e, "held", func(ctx weir.Context, _ int) (int, error) {
		return weir.Step(ctx, "wait", func(sc weir.StepContext) (int, error) {
			close(started)
			select {
			case <-finish:
				return 1, nil
			case <-sc.Done():
				return 0, context.Cause(sc)
			}
		})
	})
	ctx := t.Context()
	if err := e.Work(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := wf.Start(ctx, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the step did not start in 30 s")
	}
	// A write in progress holds the run's row until the engine's next
	// round has skipped it (a round every third of a lease).
	tx, err := adminPool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{schema}.Sanitize()+`.runs WHERE id = $1 FOR UPDATE`, h.ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.Stats().LeaseRenewals.Skipped == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no renewal skipped in 10 s with the run's row locked: %+v", e.Stats().LeaseRenewals)
		}
		time.Sleep(5 * time.Millisecond) // polling a counter, with a deadline
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	close(finish)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if out, err := h.Result(wctx); err != nil || out != 1 {
		t.Fatalf("the run: %v, %v", out, err)
	}
	if st := e.Stats().LeaseRenewals; st.Lapsed != 0 || st.Failed != 0 {
		t.Fatalf("a skipped round lapsed or failed: %+v", st)
	}
}
