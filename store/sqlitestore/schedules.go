package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
)

// Schedules: the rules are package apply's (SetSchedule, ClaimSchedules,
// AdvanceSchedule) and package schedule's; wtx loads and saves a
// schedule's row for them. The committer's one write transaction at a time
// is the lock.

var (
	_ store.Schedules  = (*Store)(nil)
	_ apply.ScheduleTx = (*wtx)(nil)
)

// scheduleDue is a due schedule with no live lease (?1 now, ?2 the
// claimer): the one condition of a claim and of its cheap first look.
const scheduleDue = `paused = 0 AND next_due <= ?1 AND (lease_expires <= ?1 OR lease_owner = ?2)`

// LockSchedule loads schedule name.
func (tx *wtx) LockSchedule(name string) (*store.Schedule, error) {
	st, err := tx.stmt(`SELECT ` + sqlrow.ScheduleCols + ` FROM schedules WHERE name = ?`)
	if err != nil {
		return nil, err
	}
	s, err := sqlrow.ScanSchedule(st.QueryRowContext(bg, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load schedule: %w", translate(err))
	}
	return s, nil
}

// SaveSchedule writes s.
func (tx *wtx) SaveSchedule(s *store.Schedule, insert bool) error {
	tx.changed = true
	config, state, err := apply.EncodeSchedule(s)
	if err != nil {
		return err
	}
	q := `UPDATE schedules SET config = ?2, state = ?3, paused = ?4, next_due = ?5, version = ?6, lease_owner = ?7,
		lease_expires = ?8, created_at = ?9, updated_at = ?10 WHERE name = ?1`
	if insert {
		q = `INSERT INTO schedules (` + sqlrow.ScheduleCols + `) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)`
	}
	st, err := tx.stmt(q)
	if err != nil {
		return err
	}
	if _, err := st.ExecContext(bg, s.Name, config, state, s.Paused, sqlrow.Nanos(s.NextDue), s.Version, s.LeaseOwner,
		sqlrow.Nanos(s.LeaseExpires), sqlrow.Nanos(s.CreatedAt), sqlrow.Nanos(s.UpdatedAt)); err != nil {
		return fmt.Errorf("save schedule: %w", translate(err))
	}
	return nil
}

// CountSchedules counts the schedules.
func (tx *wtx) CountSchedules() (int, error) {
	st, err := tx.stmt(`SELECT count(*) FROM schedules`)
	if err != nil {
		return 0, err
	}
	var n int
	if err := st.QueryRowContext(bg).Scan(&n); err != nil {
		return 0, translate(err)
	}
	return n, nil
}

// DueSchedules returns the schedules due at now with no live lease.
func (tx *wtx) DueSchedules(now time.Time, owner string, limit int) ([]string, error) {
	st, err := tx.stmt(`SELECT name FROM schedules WHERE ` + scheduleDue + ` ORDER BY next_due, name LIMIT ?3`)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(bg, sqlrow.Nanos(now), owner, limit)
	if err != nil {
		return nil, fmt.Errorf("due schedules: %w", translate(err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// SetSchedule creates or changes a schedule.
func (s *Store) SetSchedule(ctx context.Context, p *store.SetScheduleParams) (*store.Schedule, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("set schedule: %w", err)
	}
	q := p.WithDefaults(s.cfg.Now)
	var out *store.Schedule
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		out, err = apply.SetSchedule(tx, q)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("set schedule: %w", err)
	}
	return out, nil
}

// GetSchedule returns a schedule.
func (s *Store) GetSchedule(ctx context.Context, name string) (*store.Schedule, error) {
	if err := store.CheckScheduleName(name); err != nil {
		return nil, fmt.Errorf("get schedule: %w", err)
	}
	sc, err := sqlrow.ScanSchedule(s.rdb.QueryRowContext(ctx, `SELECT `+sqlrow.ScheduleCols+` FROM schedules WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("get schedule: %w: no schedule %q", store.ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("get schedule: %w", s.readErr(err))
	}
	return sc, nil
}

// schedulePage is a page of the schedules; names sort by their bytes
// (SQLite's BINARY collation).
var schedulePage = sqlrow.SchedulePageSQL("schedules", "name", "?1", "?2", "?3")

// ListSchedules returns a page of the schedules (store.ListSchedules).
func (s *Store) ListSchedules(ctx context.Context, p *store.ListSchedulesParams) (*store.SchedulePage, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	p = p.WithDefaults()
	rows, err := s.rdb.QueryContext(ctx, schedulePage, p.After, p.Limit, p.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", s.readErr(err))
	}
	defer rows.Close()
	page := &store.SchedulePage{}
	for rows.Next() {
		sc, err := sqlrow.ScanSchedule(rows, &page.More)
		if err != nil {
			return nil, fmt.Errorf("list schedules: %w", s.readErr(err))
		}
		page.Schedules = append(page.Schedules, sc)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list schedules: %w", s.readErr(err))
	}
	return page, nil
}

// DeleteSchedule deletes a schedule.
func (s *Store) DeleteSchedule(ctx context.Context, name string) error {
	if err := store.CheckScheduleName(name); err != nil {
		return fmt.Errorf("delete schedule: %w", err)
	}
	err := s.write(ctx, func(tx *wtx) error {
		tx.changed = true
		st, err := tx.stmt(`DELETE FROM schedules WHERE name = ?`)
		if err != nil {
			return err
		}
		res, err := st.ExecContext(bg, name)
		if err != nil {
			return translate(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: no schedule %q", store.ErrNotFound, name)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete schedule: %w", err)
	}
	return nil
}

// ClaimSchedules leases due schedules.
func (s *Store) ClaimSchedules(ctx context.Context, p *store.ClaimSchedulesParams) ([]*store.Schedule, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("claim schedules: %w", err)
	}
	q := p.WithDefaults(s.cfg.Now)
	// Every worker asks every poll: with nothing due, one read says so and
	// nothing is written.
	var one int
	err := s.rdb.QueryRowContext(ctx, `SELECT 1 FROM schedules WHERE `+scheduleDue+` LIMIT 1`,
		sqlrow.Nanos(q.Now), q.Owner).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim schedules: %w", s.readErr(err))
	}
	var out []*store.Schedule
	err = s.write(ctx, func(tx *wtx) error {
		var err error
		out, err = apply.ClaimSchedules(tx, q)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim schedules: %w", err)
	}
	return out, nil
}

// AdvanceSchedule saves a claimed schedule's decision.
func (s *Store) AdvanceSchedule(ctx context.Context, p *store.AdvanceScheduleParams) (bool, error) {
	if err := p.Check(); err != nil {
		return false, fmt.Errorf("advance schedule: %w", err)
	}
	q := p.WithDefaults(s.cfg.Now)
	var ok bool
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		ok, err = apply.AdvanceSchedule(tx, q)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("advance schedule: %w", err)
	}
	return ok, nil
}
