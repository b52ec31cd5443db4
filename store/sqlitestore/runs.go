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
	"unicode/utf8"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
)

// CreateRun creates a run, or returns the run that already has p.ID.
func (s *Store) CreateRun(ctx context.Context, p *store.CreateRunParams) (*store.Run, bool, error) {
	if err := p.Check(); err != nil {
		return nil, false, fmt.Errorf("create run: %w", err)
	}
	if s.isClosed() {
		return nil, false, store.ErrClosedStore
	}
	// A retried create finds its run without queueing for the writer, a
	// queued one too (red team, round nineteen): a run, once committed,
	// is there as the start comes, which finds it as a start made then.
	// Of its data it reads what p asks (apply.FoundBound, FoundCompared).
	bound, in := apply.FoundBound(p), apply.FoundCompared(p)
	run, found, err := sqlrow.ScanFoundRun(s.r.foundRun.QueryRowContext(ctx, p.ID, bound, in))
	switch {
	case err == nil:
		if err := apply.FoundConflict(run, p, found); err != nil {
			return nil, false, fmt.Errorf("create run: %w", err)
		}
		return run, false, nil
	case !errors.Is(err, sql.ErrNoRows):
		return nil, false, fmt.Errorf("create run: %w", s.readErr(err))
	}
	if p.Queue != "" {
		return s.enqueueRun(ctx, p)
	}
	var created bool
	at := s.cfg.Now()
	now, lease := sqlrow.Nanos(at), apply.CreateLease(p, at)
	err = s.write(ctx, func(tx *wtx) error {
		var err error
		// Found here only if created since the read above: a start of
		// the same id at once.
		run, found, err = sqlrow.ScanFoundRun(tx.w.foundRun.QueryRowContext(bg, p.ID, bound, in))
		if err == nil {
			return apply.FoundConflict(run, p, found)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return translate(err)
		}
		tx.changed = true
		run, err = tx.insertRun(p, string(lease.Status), now, sqlrow.Nanos(p.WakeAt), lease.Owner, sqlrow.Nanos(lease.Expires), lease.Epoch)
		created = err == nil
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("create run: %w", err)
	}
	return run, created, nil
}

// GetRun returns a run.
func (s *Store) GetRun(ctx context.Context, id string) (*store.Run, error) {
	if err := store.CheckRunID(id); err != nil {
		return nil, fmt.Errorf("get run: %w", err)
	}
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	run, err := sqlrow.ScanRun(s.r.run.QueryRowContext(ctx, id))
	if err != nil {
		return nil, fmt.Errorf("get run %q: %w", id, s.readErr(err))
	}
	return run, nil
}

// GetRunWithin returns a run, without its input and output if together
// over max bytes (store.RunsWithin).
func (s *Store) GetRunWithin(ctx context.Context, id string, max int64) (*store.Run, int64, error) {
	if err := store.CheckRunID(id); err != nil {
		return nil, 0, fmt.Errorf("get run: %w", err)
	}
	if s.isClosed() {
		return nil, 0, store.ErrClosedStore
	}
	run, size, err := sqlrow.ScanRunWithin(s.r.runWithin.QueryRowContext(ctx, id, max))
	if err != nil {
		return nil, 0, fmt.Errorf("get run %q: %w", id, s.readErr(err))
	}
	return run, size, nil
}

// ListRuns lists runs, newest first. A Before cursor naming an unknown run
// returns store.ErrNotFound.
func (s *Store) ListRuns(ctx context.Context, p *store.ListRunsParams) ([]*store.Run, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	p = p.WithDefaults()
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	limit := p.Limit
	var where []string
	var args []any
	if p.Workflow != "" {
		where, args = append(where, "workflow = ?"), append(args, p.Workflow)
	}
	if p.Status != "" {
		where, args = append(where, "status = ?"), append(args, string(p.Status))
	}
	if p.Queue != "" {
		where, args = append(where, "queue = ?"), append(args, p.Queue)
	}
	if p.Queued {
		where = append(where, "queued = 1")
	}
	if p.IDPrefix != "" {
		where, args = append(where, "substr(id, 1, ?) = ?"), append(args, utf8.RuneCountInString(p.IDPrefix), p.IDPrefix)
	}
	if !p.CreatedSince.IsZero() {
		where, args = append(where, "created_at >= ?"), append(args, sqlrow.Nanos(p.CreatedSince))
	}
	if !p.CreatedBefore.IsZero() {
		where, args = append(where, "created_at < ?"), append(args, sqlrow.Nanos(p.CreatedBefore))
	}
	if p.Before != "" {
		var seq int64
		err := s.rdb.QueryRowContext(ctx, `SELECT seq FROM runs WHERE id = ?`, p.Before).Scan(&seq)
		if err != nil {
			return nil, fmt.Errorf("list runs: cursor %q: %w", p.Before, s.readErr(err))
		}
		where, args = append(where, "seq < ?"), append(args, seq)
	}
	cols := listedRunCols
	if p.NoData {
		cols = sqlrow.ListedRunColsNoData
	}
	q := `SELECT ` + cols + ` FROM runs`
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
		r, err := sqlrow.ScanListedRun(rows)
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
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("claim runs: %w", err)
	}
	p = p.WithDefaults(s.cfg.Now)
	now := p.Now
	workflows, skip, versions := jsonList(p.Workflows), jsonList(p.SkipQueues), jsonList(p.Versions)
	var out []*store.Run
	err := s.write(ctx, func(tx *wtx) error {
		out = out[:0]
		tx.changed = true
		claim := func(st *sql.Stmt, limit int, lined bool) error {
			rows, err := st.QueryContext(bg, p.Owner, sqlrow.Nanos(now.Add(p.LeaseTTL)), sqlrow.Nanos(now), limit, workflows, skip, versions)
			if err != nil {
				return translate(err)
			}
			defer rows.Close()
			for rows.Next() {
				r, err := sqlrow.ScanRun(rows)
				if err != nil {
					return translate(err)
				}
				r.Lined = lined
				out = append(out, r)
			}
			return translate(rows.Err())
		}
		if p.Lined > 0 {
			if err := claim(tx.w.claimLined, min(p.Lined, p.Limit), true); err != nil {
				return err
			}
			if len(out) == p.Limit {
				return nil
			}
		}
		return claim(tx.w.claim, p.Limit-len(out), false)
	})
	if err != nil {
		return nil, fmt.Errorf("claim runs: %w", err)
	}
	if err := s.claimedData(context.WithoutCancel(ctx), out); err != nil {
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

// jsonList is l as a JSON array for json_each, or SQL NULL if l is nil.
func jsonList(l []string) any {
	if l == nil {
		return nil
	}
	b, _ := json.Marshal(l) // strings always encode
	return string(b)
}

// RenewLease extends a lease by p.LeaseTTL from now. An unknown run returns
// store.ErrNotFound.
func (s *Store) RenewLease(ctx context.Context, p *store.RenewLeaseParams) (bool, error) {
	if err := p.Check(); err != nil {
		return false, fmt.Errorf("renew lease: %w", err)
	}
	now := s.cfg.Now()
	var cancel bool
	err := s.write(ctx, func(tx *wtx) error {
		tx.changed = true
		err := tx.w.renew.QueryRowContext(bg, sqlrow.Nanos(now.Add(p.LeaseTTL)), sqlrow.Nanos(now), p.RunID, p.LeaseEpoch).Scan(&cancel)
		if errors.Is(err, sql.ErrNoRows) {
			run, err := tx.Run(p.RunID)
			if err != nil {
				return err
			}
			return apply.LeaseLost(run, p.LeaseEpoch)
		}
		return translate(err)
	})
	if err != nil {
		return false, fmt.Errorf("renew lease: %w", err)
	}
	return cancel, nil
}

// RequestCancel asks for a run to be cancelled and makes it claimable now.
func (s *Store) RequestCancel(ctx context.Context, id string) error {
	if err := store.CheckRunID(id); err != nil {
		return fmt.Errorf("request cancel: %w", err)
	}
	now := sqlrow.Nanos(s.cfg.Now())
	err := s.write(ctx, func(tx *wtx) error {
		tx.changed = true
		res, err := tx.w.cancel.ExecContext(bg, now, id)
		if err != nil {
			return translate(err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return nil
		}
		_, err = tx.Run(id) // ErrNotFound, or finished: left alone
		return err
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
		e, err := sqlrow.ScanEvent(rows)
		if err != nil {
			return nil, fmt.Errorf("list events: %w", s.readErr(err))
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events: %w", s.readErr(err))
	}
	if len(out) == 0 {
		var one int
		err := s.r.runExists.QueryRowContext(ctx, runID).Scan(&one)
		if err != nil {
			return nil, fmt.Errorf("list events: run %q: %w", runID, s.readErr(err))
		}
	}
	return out, nil
}

// ListEventsPage returns a page of a run's log (store.ListEventsPage).
func (s *Store) ListEventsPage(ctx context.Context, p *store.ListEventsParams) (*store.EventPage, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	p = p.WithDefaults()
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	var one int
	if err := s.r.runExists.QueryRowContext(ctx, p.RunID).Scan(&one); err != nil {
		return nil, fmt.Errorf("list events: run %q: %w", p.RunID, s.readErr(err))
	}
	rows, err := s.r.eventPage.QueryContext(ctx, p.RunID, p.After, p.Limit, p.MaxBytes, string(p.DataOf))
	if err != nil {
		return nil, fmt.Errorf("list events: %w", s.readErr(err))
	}
	defer rows.Close()
	page := &store.EventPage{}
	for rows.Next() {
		e, err := sqlrow.ScanEvent(rows, &page.More)
		if err != nil {
			return nil, fmt.Errorf("list events: %w", s.readErr(err))
		}
		page.Events = append(page.Events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events: %w", s.readErr(err))
	}
	return page, nil
}

// Advance applies one engine transaction (apply.Advance). Any failure undoes
// all of it.
func (s *Store) Advance(ctx context.Context, p *store.AdvanceParams) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	now := s.cfg.Now()
	err := s.write(ctx, func(tx *wtx) error { return apply.Advance(tx, p, now) })
	if err != nil {
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
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		out, err = apply.MigrateRuns(tx, p, s.cfg.Now())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("migrate runs: %w", err)
	}
	return out, nil
}

var _ apply.MigrateTx = (*wtx)(nil)

// RunsOfVersion returns the runs in flight of version (of ids, if set),
// without their data.
func (tx *wtx) RunsOfVersion(version string, ids []string) ([]*store.Run, error) {
	st, err := tx.stmt(`SELECT ` + sqlrow.RunColsNoData + ` FROM runs WHERE version = ?1 AND status IN ('pending', 'running')
		AND (?2 IS NULL OR id IN (SELECT value FROM json_each(?2)))`)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(bg, version, jsonList(ids))
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []*store.Run
	for rows.Next() {
		r, err := sqlrow.ScanRun(rows)
		if err != nil {
			return nil, translate(err)
		}
		out = append(out, r)
	}
	return out, translate(rows.Err())
}

// SetRunVersion sets run id's application version.
func (tx *wtx) SetRunVersion(id, version string, now time.Time) error {
	tx.changed = true
	st, err := tx.stmt(`UPDATE runs SET version = ?, updated_at = ? WHERE id = ?`)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(bg, version, sqlrow.Nanos(now), id)
	return translate(err)
}

var _ store.LeaseRenewer = (*Store)(nil)

// RenewLeases renews leases in one write (store.LeaseRenewer): one
// transaction, one fsync, however many runs the engine holds.
func (s *Store) RenewLeases(ctx context.Context, ps []store.RenewLeaseParams) ([]store.RenewLeaseResult, error) {
	out := make([]store.RenewLeaseResult, len(ps))
	now := s.cfg.Now()
	err := s.write(ctx, func(tx *wtx) error {
		for i := range ps {
			out[i] = store.RenewLeaseResult{}
			p := &ps[i]
			if err := p.Check(); err != nil {
				out[i].Err = fmt.Errorf("renew lease: %w", err)
				continue
			}
			tx.changed = true
			err := tx.w.renew.QueryRowContext(bg, sqlrow.Nanos(now.Add(p.LeaseTTL)), sqlrow.Nanos(now), p.RunID, p.LeaseEpoch).Scan(&out[i].Cancel)
			if errors.Is(err, sql.ErrNoRows) {
				run, err := tx.Run(p.RunID)
				if err != nil {
					out[i].Err = fmt.Errorf("renew lease: %w", err)
					continue
				}
				out[i].Err = fmt.Errorf("renew lease: %w", apply.LeaseLost(run, p.LeaseEpoch))
				continue
			}
			if err != nil {
				return translate(err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("renew leases: %w", err)
	}
	return out, nil
}
