package sqlitestore

import (
	"context"
	"fmt"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/internal/sqlrow"
)

// PurgeRuns deletes up to p.Limit runs that finished before p.Before, with
// their events, fences and streams, in one transaction of the committer.
func (s *Store) PurgeRuns(ctx context.Context, p *store.PurgeRunsParams) (int, error) {
	if err := p.Check(); err != nil {
		return 0, fmt.Errorf("purge runs: %w", err)
	}
	limit := p.WithDefaults().Limit
	var n int
	err := s.write(ctx, func(tx *wtx) error {
		n = 0
		tx.changed = true
		runs, err := tx.strings(`SELECT id FROM runs WHERE status IN ('completed', 'failed', 'cancelled')
			AND updated_at < ? ORDER BY updated_at LIMIT ?`, sqlrow.Nanos(p.Before), limit)
		if err != nil {
			return err
		}
		for _, run := range runs {
			if err := tx.purgeRun(run); err != nil {
				return fmt.Errorf("run %q: %w", run, err)
			}
		}
		n = len(runs)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("purge runs: %w", err)
	}
	return n, nil
}

// purgeRun deletes a run and all it holds. The stream ids it frees are
// never given again (tx.purge), and the run's cached fences are forgotten:
// its id may come back as a new run.
func (tx *wtx) purgeRun(run string) error {
	conn := tx.c.s.conn
	rows, err := conn.QueryContext(bg, `SELECT id FROM streams WHERE run_id = ?`, run)
	if err != nil {
		return translate(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return translate(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil {
		return translate(err)
	}
	for _, id := range ids {
		st, err := tx.Stream(id)
		if err != nil {
			return err
		}
		if err := tx.purge(st); err != nil {
			return err
		}
	}
	for _, q := range []string{`DELETE FROM fences WHERE run_id = ?`, `DELETE FROM events WHERE run_id = ?`,
		`DELETE FROM hook_keys WHERE token IN (SELECT token FROM hooks WHERE run_id = ?)`, `DELETE FROM hooks WHERE run_id = ?`,
		`DELETE FROM message_keys WHERE run_id = ?`, `DELETE FROM run_events WHERE run_id = ?`,
		`DELETE FROM world_events WHERE run_id = ?`, `DELETE FROM world_steps WHERE run_id = ?`,
		`DELETE FROM world_hooks WHERE run_id = ?`, `DELETE FROM world_waits WHERE run_id = ?`,
		`DELETE FROM world_streams WHERE run_id = ?`, `DELETE FROM world_queue WHERE run_id = ?`,
		`DELETE FROM world_runs WHERE run_id = ?`, `DELETE FROM runs WHERE id = ?`} {
		if _, err := conn.ExecContext(bg, q, run); err != nil {
			return translate(err)
		}
	}
	for k := range tx.c.fences.m {
		if k.run == run {
			tx.loaded = append(tx.loaded, cacheKey{kind: keyFence, run: k.run, writer: k.writer})
			tx.c.fences.remove(k)
		}
	}
	return nil
}

// strings runs a query returning one text column on the write connection.
func (tx *wtx) strings(q string, args ...any) ([]string, error) {
	rows, err := tx.c.s.conn.QueryContext(bg, q, args...)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, translate(err)
		}
		out = append(out, v)
	}
	return out, translate(rows.Err())
}
