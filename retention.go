package weir

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/weirhq/weir/store"
)

// retentionBatch is how many runs one PurgeRuns call deletes: a short
// transaction, so that writers barely notice it.
const retentionBatch = 100

// retentionLoop deletes the runs that ended more than Config.Retention ago.
// Every worker engine runs it; on a shared database their purges skip the
// runs another one holds, so they never wait on each other.
func (e *Engine) retentionLoop(ctx context.Context) {
	defer e.loopWG.Done()
	every := min(max(e.cfg.Retention/10, time.Second), time.Minute)
	// A random first delay spreads the workers that start together.
	t := time.NewTimer(rand.N(every))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.purge(ctx)
		t.Reset(every)
	}
}

// purge deletes every run that ended before now minus Retention, in batches
// with a pause between them.
func (e *Engine) purge(ctx context.Context) {
	before := time.Now().Add(-e.cfg.Retention)
	for total := 0; ; {
		n, err := e.store.PurgeRuns(ctx, &store.PurgeRunsParams{Before: before, Limit: retentionBatch})
		total += n
		if err != nil {
			if ctx.Err() == nil {
				e.log.Warn("weir: purge finished runs", "err", err)
			}
			return
		}
		if n < retentionBatch {
			if total > 0 {
				e.log.Debug("weir: purged finished runs", "runs", total, "ended_before", before)
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}
