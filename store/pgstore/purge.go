package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/internal/sqlrow"
)

// PurgeRuns deletes up to p.Limit runs that finished before p.Before, with
// everything they hold, in one transaction of two round trips. It locks the
// runs with SKIP LOCKED: a run some other transaction holds (an append's
// retransmit on its closed stream, say) is left for a later call, so the
// purge never waits on a writer and writers wait on it only for the
// deletes of the runs it took.
func (s *Store) PurgeRuns(ctx context.Context, p *store.PurgeRunsParams) (int, error) {
	if p.Before.IsZero() || p.Limit < 0 {
		return 0, fmt.Errorf("purge runs: %w: a Before time and a limit >= 0 are required", store.ErrInvalid)
	}
	limit := p.Limit
	if limit == 0 {
		limit = 100
	}
	var runs []string
	var streams []int64
	// Idempotent: deleting what is already deleted does nothing.
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		runs, streams = nil, nil
		x, err := s.acquire(ctx, t)
		if err != nil {
			return err
		}
		defer x.release()
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(s.q.purgeLock, sqlrow.Nanos(p.Before), limit)
		br := x.c.SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			br.Close()
			return err
		}
		rows, err := br.Query()
		if err != nil {
			br.Close()
			return err
		}
		runs, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			br.Close()
			return err
		}
		if err := br.Close(); err != nil {
			return err
		}
		if len(runs) == 0 {
			return nil
		}
		b = &pgx.Batch{}
		for _, q := range []string{s.q.purgeBatches, s.q.purgeWriters, s.q.purgeProducers, s.q.purgeStreamKeys} {
			b.Queue(q, runs)
		}
		b.Queue(s.q.purgeStreams, runs).Query(func(rows pgx.Rows) error {
			streams, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			return err
		})
		for _, q := range append(append([]string{s.q.purgeFences, s.q.purgeEvents, s.q.purgeHookKeys, s.q.purgeHooks, s.q.purgeMessageKeys, s.q.purgeRunEvents}, s.q.purgeWorld...), s.q.purgeRuns) {
			b.Queue(q, runs)
		}
		b.Queue("COMMIT")
		return x.commit(ctx, b)
	})
	if err != nil {
		return 0, fmt.Errorf("purge runs: %w", err)
	}
	if len(streams) > 0 {
		s.writers.forget(setOf(streams))
		s.wrote(streams...) // their waiters wake and find them gone
	}
	return len(runs), nil
}
