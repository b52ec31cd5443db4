package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/weirhq/weir/store"
)

func scanRun(row rowScanner) (*store.Run, error) {
	var r store.Run
	var status string
	var created, updated, wake, expires int64
	err := row.Scan(&r.ID, &r.Workflow, &status, &r.Input, &r.Output, &r.Error, &created, &updated,
		&wake, &r.LeaseOwner, &expires, &r.LeaseEpoch, &r.CancelRequested)
	if err != nil {
		return nil, err
	}
	r.Status = store.RunStatus(status)
	r.CreatedAt, r.UpdatedAt = fromNanos(created), fromNanos(updated)
	r.WakeAt, r.LeaseExpires = fromNanos(wake), fromNanos(expires)
	return &r, nil
}

// CreateRun creates a run, or returns the run that already has p.ID.
func (s *Store) CreateRun(ctx context.Context, p *store.CreateRunParams) (*store.Run, bool, error) {
	if p.ID == "" || p.Workflow == "" {
		return nil, false, fmt.Errorf("create run: %w: a run needs an id and a workflow", store.ErrInvalid)
	}
	if s.isClosed() {
		return nil, false, store.ErrClosedStore
	}
	// A retried create finds its run without queueing for the writer.
	run, err := scanRun(s.r.run.QueryRowContext(ctx, p.ID))
	switch {
	case err == nil && run.Workflow != p.Workflow:
		return nil, false, fmt.Errorf("create run: %w: run %q is of workflow %q, not %q", store.ErrRunConflict, p.ID, run.Workflow, p.Workflow)
	case err == nil:
		return run, false, nil
	case !errors.Is(err, sql.ErrNoRows):
		return nil, false, fmt.Errorf("create run: %w", s.readErr(err))
	}
	var created bool
	now := nanos(s.cfg.Now())
	err = s.write(ctx, func(tx *wtx) error {
		var err error
		run, err = scanRun(tx.w.run.QueryRowContext(bg, p.ID))
		if err == nil {
			if run.Workflow != p.Workflow {
				return fmt.Errorf("%w: run %q is of workflow %q, not %q", store.ErrRunConflict, p.ID, run.Workflow, p.Workflow)
			}
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return translate(err)
		}
		run, err = scanRun(tx.w.insertRun.QueryRowContext(bg, p.ID, p.Workflow, p.Input, now, now, nanos(p.WakeAt)))
		created = err == nil
		return translate(err)
	})
	if err != nil {
		return nil, false, fmt.Errorf("create run: %w", err)
	}
	return run, created, nil
}

// GetRun returns a run.
func (s *Store) GetRun(ctx context.Context, id string) (*store.Run, error) {
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	run, err := scanRun(s.r.run.QueryRowContext(ctx, id))
	if err != nil {
		return nil, fmt.Errorf("get run %q: %w", id, s.readErr(err))
	}
	return run, nil
}

// ListRuns lists runs, newest first. A Before cursor naming an unknown run
// returns store.ErrNotFound.
func (s *Store) ListRuns(ctx context.Context, p *store.ListRunsParams) ([]*store.Run, error) {
	if p.Limit < 0 || p.Status != "" && !p.Status.Valid() {
		return nil, fmt.Errorf("list runs: %w: limit %d, status %q", store.ErrInvalid, p.Limit, p.Status)
	}
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	limit := p.Limit
	if limit == 0 {
		limit = 100
	}
	var where []string
	var args []any
	if p.Workflow != "" {
		where, args = append(where, "workflow = ?"), append(args, p.Workflow)
	}
	if p.Status != "" {
		where, args = append(where, "status = ?"), append(args, string(p.Status))
	}
	if p.Before != "" {
		var seq int64
		err := s.rdb.QueryRowContext(ctx, `SELECT seq FROM runs WHERE id = ?`, p.Before).Scan(&seq)
		if err != nil {
			return nil, fmt.Errorf("list runs before %q: %w", p.Before, s.readErr(err))
		}
		where, args = append(where, "seq < ?"), append(args, seq)
	}
	q := `SELECT ` + runCols + ` FROM runs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY seq DESC LIMIT ?`
	args = append(args, limit)
	rows, err := s.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", s.readErr(err))
	}
	defer rows.Close()
	var out []*store.Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("list runs: %w", s.readErr(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list runs: %w", s.readErr(err))
	}
	return out, nil
}

// ClaimRuns leases up to p.Limit runnable runs to p.Owner, oldest wake time
// first.
func (s *Store) ClaimRuns(ctx context.Context, p *store.ClaimRunsParams) ([]*store.Run, error) {
	if p.Owner == "" || p.Limit < 1 || p.LeaseTTL <= 0 {
		return nil, fmt.Errorf("claim runs: %w: an owner, a limit >= 1 and a lease TTL > 0 are required", store.ErrInvalid)
	}
	now := p.Now
	if now.IsZero() {
		now = s.cfg.Now()
	}
	var workflows any // SQL NULL: any workflow
	if p.Workflows != nil {
		b, err := json.Marshal(p.Workflows)
		if err != nil {
			return nil, fmt.Errorf("claim runs: %w", err)
		}
		workflows = string(b)
	}
	var out []*store.Run
	err := s.write(ctx, func(tx *wtx) error {
		out = out[:0]
		rows, err := tx.w.claim.QueryContext(bg, p.Owner, nanos(now.Add(p.LeaseTTL)), nanos(now), p.Limit, workflows)
		if err != nil {
			return translate(err)
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanRun(rows)
			if err != nil {
				return translate(err)
			}
			out = append(out, r)
		}
		return translate(rows.Err())
	})
	if err != nil {
		return nil, fmt.Errorf("claim runs: %w", err)
	}
	// RETURNING gives no order: put them back in the order they were chosen.
	slices.SortFunc(out, func(a, b *store.Run) int {
		if c := a.WakeAt.Compare(b.WakeAt); c != 0 {
			return c
		}
		return a.CreatedAt.Compare(b.CreatedAt)
	})
	return out, nil
}

// RenewLease extends a lease by p.LeaseTTL from now. An unknown run returns
// store.ErrNotFound.
func (s *Store) RenewLease(ctx context.Context, p *store.RenewLeaseParams) (bool, error) {
	if p.RunID == "" || p.LeaseTTL <= 0 {
		return false, fmt.Errorf("renew lease: %w: a run id and a lease TTL > 0 are required", store.ErrInvalid)
	}
	now := s.cfg.Now()
	var cancel bool
	err := s.write(ctx, func(tx *wtx) error {
		err := tx.w.renew.QueryRowContext(bg, nanos(now.Add(p.LeaseTTL)), nanos(now), p.RunID, p.LeaseEpoch).Scan(&cancel)
		if errors.Is(err, sql.ErrNoRows) {
			return tx.leaseLost(p.RunID, p.LeaseEpoch)
		}
		return translate(err)
	})
	if err != nil {
		return false, fmt.Errorf("renew lease: %w", err)
	}
	return cancel, nil
}

// leaseLost explains why run's lease at epoch is not held.
func (tx *wtx) leaseLost(run string, epoch int64) error {
	var cur int64
	var owner, status string
	err := tx.w.runLease.QueryRowContext(bg, run).Scan(&cur, &owner, &status)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("run %q: %w", run, store.ErrNotFound)
	case err != nil:
		return translate(err)
	case cur != epoch:
		return fmt.Errorf("%w: run %q is at lease epoch %d, not %d", store.ErrLeaseLost, run, cur, epoch)
	case store.RunStatus(status).Terminal():
		return fmt.Errorf("%w: run %q is %s", store.ErrLeaseLost, run, status)
	case owner == "":
		return fmt.Errorf("%w: run %q's lease was released", store.ErrLeaseLost, run)
	}
	return fmt.Errorf("%w: run %q", store.ErrLeaseLost, run)
}

// RequestCancel asks for a run to be cancelled and makes it claimable now.
func (s *Store) RequestCancel(ctx context.Context, id string) error {
	now := nanos(s.cfg.Now())
	err := s.write(ctx, func(tx *wtx) error {
		res, err := tx.w.cancel.ExecContext(bg, now, id)
		if err != nil {
			return translate(err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return nil
		}
		var one int
		err = tx.w.runLease.QueryRowContext(bg, id).Scan(&one, new(string), new(string))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("run %q: %w", id, store.ErrNotFound)
		}
		return translate(err) // finished: left alone
	})
	if err != nil {
		return fmt.Errorf("request cancel: %w", err)
	}
	return nil
}

// ListEvents returns a run's events with Seq > afterSeq, in order.
func (s *Store) ListEvents(ctx context.Context, runID string, afterSeq int64) ([]store.Event, error) {
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	rows, err := s.r.events.QueryContext(ctx, runID, afterSeq)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", s.readErr(err))
	}
	defer rows.Close()
	var out []store.Event
	for rows.Next() {
		var e store.Event
		var typ string
		var at, wake int64
		if err := rows.Scan(&e.Seq, &typ, &e.Op, &e.Name, &e.Attempt, &e.Data, &e.Error, &e.Final, &at, &wake); err != nil {
			return nil, fmt.Errorf("list events: %w", s.readErr(err))
		}
		e.Type, e.At, e.WakeAt = store.EventType(typ), fromNanos(at), fromNanos(wake)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events: %w", s.readErr(err))
	}
	if len(out) == 0 {
		var one int
		err := s.r.runExists.QueryRowContext(ctx, runID).Scan(&one)
		if err != nil {
			return nil, fmt.Errorf("list events of run %q: %w", runID, s.readErr(err))
		}
	}
	return out, nil
}

// Record applies one engine transaction, in this order: events, fence,
// finish, status, stream closes, lease release. Any failure undoes all of it.
func (s *Store) Record(ctx context.Context, p *store.RecordParams) error {
	if err := store.CheckRecord(p); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	now := s.cfg.Now()
	err := s.write(ctx, func(tx *wtx) error { return tx.record(p, now) })
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}

func (tx *wtx) record(p *store.RecordParams, now time.Time) error {
	var epoch int64
	var owner, status string
	err := tx.w.runLease.QueryRowContext(bg, p.RunID).Scan(&epoch, &owner, &status)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("run %q: %w", p.RunID, store.ErrNotFound)
	}
	if err != nil {
		return translate(err)
	}
	if epoch != p.LeaseEpoch || owner == "" || store.RunStatus(status).Terminal() {
		return tx.leaseLost(p.RunID, p.LeaseEpoch)
	}

	if len(p.Events) > 0 {
		var seq int64
		if err := tx.w.lastEvent.QueryRowContext(bg, p.RunID).Scan(&seq); err != nil {
			return translate(err)
		}
		for i := range p.Events {
			e := &p.Events[i]
			at := e.At
			if at.IsZero() {
				at = now
			}
			seq++
			_, err := tx.w.insertEvent.ExecContext(bg, p.RunID, seq, string(e.Type), e.Op, e.Name, e.Attempt,
				e.Data, e.Error, e.Final, nanos(at), nanos(e.WakeAt))
			if err != nil {
				return fmt.Errorf("insert event: %w", translate(err))
			}
		}
	}

	if f := p.Fence; f != nil {
		if err := tx.raiseFence(p.RunID, f.Writer, f.Attempt); err != nil {
			return err
		}
	}

	if f := p.Finish; f != nil {
		ids, err := tx.ids(tx.w.writerStreams, p.RunID, f.Writer)
		if err != nil {
			return err
		}
		for _, id := range ids {
			st, err := tx.stream(id)
			if err != nil {
				return err
			}
			if _, err := tx.finish(st, f.Writer, f.Attempt, f.Commit); err != nil {
				return fmt.Errorf("finish writer %q on stream %d: %w", f.Writer, id, err)
			}
		}
	}

	if p.CloseStreams {
		ids, err := tx.ids(tx.w.openRunStreams, p.RunID)
		if err != nil {
			return err
		}
		for _, id := range ids {
			st, err := tx.stream(id)
			if err != nil {
				return err
			}
			if _, err := tx.closeStream(st); err != nil {
				return err
			}
		}
	}

	release := p.Release || p.Status.Terminal()
	wake := int64(0)
	if p.Release && !p.Status.Terminal() {
		wake = nanos(p.WakeAt)
	}
	_, err = tx.w.updateRun.ExecContext(bg, string(p.Status), p.Output, p.Error, release, wake, nanos(now), p.RunID)
	if err != nil {
		return fmt.Errorf("update run: %w", translate(err))
	}
	return nil
}

// ids runs a query returning one integer column.
func (tx *wtx) ids(q *sql.Stmt, args ...any) ([]int64, error) {
	rows, err := q.QueryContext(bg, args...)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, translate(err)
		}
		out = append(out, id)
	}
	return out, translate(rows.Err())
}
