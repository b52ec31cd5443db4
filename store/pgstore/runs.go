package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
)

// claimedRun is a run a claim took, with its creation order.
type claimedRun struct {
	run *store.Run
	seq int64
}

// CreateRun creates a run, or returns the run that already has p.ID.
func (s *Store) CreateRun(ctx context.Context, p *store.CreateRunParams) (*store.Run, bool, error) {
	if err := p.Check(); err != nil {
		return nil, false, fmt.Errorf("create run: %w", err)
	}
	if p.Queue != "" {
		return s.enqueueRun(ctx, p)
	}
	now := s.cfg.Now()
	o := &createRunOp{p: p, now: sqlrow.Nanos(now), lease: apply.CreateLease(p, now)}
	if err := s.exec(ctx, o); err != nil {
		return nil, false, fmt.Errorf("create run: %w", err)
	}
	return o.run, o.created, nil
}

// GetRun returns a run.
func (s *Store) GetRun(ctx context.Context, id string) (*store.Run, error) {
	if err := store.CheckRunID(id); err != nil {
		return nil, fmt.Errorf("get run: %w", err)
	}
	var run *store.Run
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var err error
		run, err = sqlrow.ScanRun(s.pool.QueryRow(ctx, s.q.run, id))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get run %q: %w", id, err)
	}
	return run, nil
}

// GetRunWithin returns a run, without its input and output if together
// over max bytes (store.RunsWithin).
func (s *Store) GetRunWithin(ctx context.Context, id string, max int64) (*store.Run, int64, error) {
	if err := store.CheckRunID(id); err != nil {
		return nil, 0, fmt.Errorf("get run: %w", err)
	}
	var run *store.Run
	var size int64
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var err error
		run, size, err = sqlrow.ScanRunWithin(s.pool.QueryRow(ctx, s.q.runWithin, id, max))
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("get run %q: %w", id, err)
	}
	return run, size, nil
}

// ListRuns lists runs, newest first.
func (s *Store) ListRuns(ctx context.Context, p *store.ListRunsParams) ([]*store.Run, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	p = p.WithDefaults()
	limit := p.Limit
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if p.Workflow != "" {
		where = append(where, "workflow = "+arg(p.Workflow))
	}
	if p.Status != "" {
		where = append(where, "status = "+arg(string(p.Status)))
	}
	if p.Queue != "" {
		where = append(where, "queue = "+arg(p.Queue))
	}
	if p.Queued {
		where = append(where, "queued")
	}
	if p.IDPrefix != "" {
		where = append(where, "left(id, "+arg(utf8.RuneCountInString(p.IDPrefix))+") = "+arg(p.IDPrefix))
	}
	if !p.CreatedSince.IsZero() {
		where = append(where, "created_at >= "+arg(sqlrow.Nanos(p.CreatedSince)))
	}
	if !p.CreatedBefore.IsZero() {
		where = append(where, "created_at < "+arg(sqlrow.Nanos(p.CreatedBefore)))
	}
	if p.Before != "" {
		// An unknown cursor must be an error, not an empty page.
		where = append(where, "seq < (SELECT seq FROM "+s.q.schema+".runs WHERE id = "+arg(p.Before)+")")
	}
	cols := sqlrow.ListedRunCols
	if p.NoData {
		cols = sqlrow.ListedRunColsNoData
	}
	q := `SELECT ` + cols + ` FROM ` + s.q.schema + `.runs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY seq DESC LIMIT ` + arg(limit)
	var out []*store.Run
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		out = out[:0]
		b := &pgx.Batch{}
		if p.Before != "" {
			b.Queue(s.q.runExists, p.Before)
		}
		b.Queue(q, args...)
		br := s.pool.SendBatch(ctx, b)
		defer br.Close()
		if p.Before != "" {
			var one int
			if err := br.QueryRow().Scan(&one); err != nil {
				return fmt.Errorf("cursor %q: %w", p.Before, err)
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := sqlrow.ScanListedRun(rows)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return br.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	return out, nil
}

// ClaimRuns leases up to p.Limit runnable runs to p.Owner, oldest wake time
// first. Runs another claimer holds locked are skipped (SKIP LOCKED), so
// concurrent claimers never wait for each other nor share a run.
func (s *Store) ClaimRuns(ctx context.Context, p *store.ClaimRunsParams) ([]*store.Run, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("claim runs: %w", err)
	}
	o := &claimOp{p: p.WithDefaults(s.cfg.Now)}
	if err := s.exec(ctx, o); err != nil {
		return nil, fmt.Errorf("claim runs: %w", err)
	}
	out := o.claimed
	slices.SortFunc(out, func(a, b claimedRun) int {
		if c := a.run.WakeAt.Compare(b.run.WakeAt); c != 0 {
			return c
		}
		return int(a.seq - b.seq)
	})
	runs := make([]*store.Run, len(out))
	for i, c := range out {
		runs[i] = c.run
	}
	return runs, nil
}

// RenewLease extends a lease by p.LeaseTTL from now.
func (s *Store) RenewLease(ctx context.Context, p *store.RenewLeaseParams) (bool, error) {
	if err := p.Check(); err != nil {
		return false, fmt.Errorf("renew lease: %w", err)
	}
	var cancel bool
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		now := s.cfg.Now()
		t.committing = true
		err := s.pool.QueryRow(ctx, s.q.renew, sqlrow.Nanos(now.Add(p.LeaseTTL)), sqlrow.Nanos(now), p.RunID, p.LeaseEpoch).Scan(&cancel)
		if errors.Is(err, pgx.ErrNoRows) {
			return s.leaseLost(ctx, p.RunID, p.LeaseEpoch)
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("renew lease: %w", err)
	}
	return cancel, nil
}

// leaseLost explains why run's lease at epoch is not held.
func (s *Store) leaseLost(ctx context.Context, run string, epoch int64) error {
	r := &apply.Run{ID: run}
	var status string
	err := s.pool.QueryRow(ctx, s.q.runLease, run).Scan(&r.Epoch, &r.Owner, &status)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("run %q: %w", run, store.ErrNotFound)
	}
	if err != nil {
		return err
	}
	r.Status = store.RunStatus(status)
	return apply.LeaseLost(r, epoch)
}

// RequestCancel asks for a run to be cancelled and makes it claimable now.
func (s *Store) RequestCancel(ctx context.Context, id string) error {
	if err := store.CheckRunID(id); err != nil {
		return fmt.Errorf("request cancel: %w", err)
	}
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var changed, exists bool
		t.committing = true
		if err := s.pool.QueryRow(ctx, s.q.cancel, id, sqlrow.Nanos(s.cfg.Now())).Scan(&changed, &exists); err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("run %q: %w", id, store.ErrNotFound)
		}
		return nil // changed, or finished and left alone
	})
	if err != nil {
		return fmt.Errorf("request cancel: %w", err)
	}
	return nil
}

// ListEvents returns a run's events with Seq > afterSeq, in order.
func (s *Store) ListEvents(ctx context.Context, runID string, afterSeq int64) ([]store.Event, error) {
	if err := store.CheckRunID(runID); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	var out []store.Event
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		out = out[:0]
		b := &pgx.Batch{}
		b.Queue(s.q.runExists, runID)
		b.Queue(s.q.events, runID, afterSeq)
		br := s.pool.SendBatch(ctx, b)
		defer br.Close()
		var one int
		if err := br.QueryRow().Scan(&one); err != nil {
			return fmt.Errorf("run %q: %w", runID, err)
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			e, err := sqlrow.ScanEvent(rows)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return br.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

// ListEventsPage returns a page of a run's log (store.ListEventsPage).
func (s *Store) ListEventsPage(ctx context.Context, p *store.ListEventsParams) (*store.EventPage, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	p = p.WithDefaults()
	var page store.EventPage
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		page = store.EventPage{}
		b := &pgx.Batch{}
		b.Queue(s.q.runExists, p.RunID)
		b.Queue(s.q.eventPage, p.RunID, p.After, p.Limit, p.MaxBytes, string(p.DataOf))
		br := s.pool.SendBatch(ctx, b)
		defer br.Close()
		var one int
		if err := br.QueryRow().Scan(&one); err != nil {
			return fmt.Errorf("run %q: %w", p.RunID, err)
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			e, err := sqlrow.ScanEvent(rows, &page.More)
			if err != nil {
				return err
			}
			page.Events = append(page.Events, e)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return br.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return &page, nil
}

// Advance applies one engine transaction (apply.Advance) in a group commit
// (advanceOp). Any failure undoes all of it.
func (s *Store) Advance(ctx context.Context, p *store.AdvanceParams) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	if err := s.exec(ctx, newRecordOp(p, sqlrow.Nanos(s.cfg.Now()))); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}

// MigrateRuns moves runs in flight from one application version to
// another (apply.MigrateRuns decides which).
func (s *Store) MigrateRuns(ctx context.Context, p *store.MigrateRunsParams) ([]string, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("migrate runs: %w", err)
	}
	var out []string
	err := s.queueWrite(ctx, true, func(t *queueTx) error {
		var err error
		out, err = apply.MigrateRuns(t, p, s.cfg.Now())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("migrate runs: %w", err)
	}
	return out, nil
}
