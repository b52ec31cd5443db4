package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
)

// Schedules: the rules are package apply's and package schedule's;
// scheduleTx loads a schedule's row FOR UPDATE, and a claim skips the rows
// another transaction holds, so that every process on the database shares
// each schedule and one at a time decides it.

var (
	_ store.Schedules  = (*Store)(nil)
	_ apply.ScheduleTx = (*scheduleTx)(nil)
)

// errNoSchedule marks a name no schedule has.
var errNoSchedule = errors.New("no schedule")

type scheduleTx struct {
	ctx context.Context
	x   *txn
	s   *Store
}

// scheduleDue is a due schedule with no live lease ($1 now, $2 the
// claimer): the one condition of a claim and of its cheap first look.
const scheduleDue = `NOT paused AND next_due <= $1 AND (lease_expires <= $1 OR lease_owner = $2)`

// LockSchedule loads schedule name and locks its row.
func (t *scheduleTx) LockSchedule(name string) (*store.Schedule, error) {
	s, err := sqlrow.ScanSchedule(t.x.c.QueryRow(t.ctx, `SELECT `+sqlrow.ScheduleCols+` FROM `+t.s.q.schema+`.schedules WHERE name = $1 FOR UPDATE`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return s, err
}

// SaveSchedule writes s.
func (t *scheduleTx) SaveSchedule(s *store.Schedule, insert bool) error {
	config, state, err := apply.EncodeSchedule(s)
	if err != nil {
		return err
	}
	q := `UPDATE ` + t.s.q.schema + `.schedules SET config = $2, state = $3, paused = $4, next_due = $5, version = $6,
		lease_owner = $7, lease_expires = $8, created_at = $9, updated_at = $10 WHERE name = $1`
	if insert {
		q = `INSERT INTO ` + t.s.q.schema + `.schedules (` + sqlrow.ScheduleCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`
	}
	_, err = t.x.c.Exec(t.ctx, q, s.Name, config, state, s.Paused, sqlrow.Nanos(s.NextDue), s.Version, s.LeaseOwner,
		sqlrow.Nanos(s.LeaseExpires), sqlrow.Nanos(s.CreatedAt), sqlrow.Nanos(s.UpdatedAt))
	return err
}

// CountSchedules counts the schedules. The rule asks it only to make a
// new one: creations take turns on a lock held to their commit, so that
// the bound holds when many are made at once.
func (t *scheduleTx) CountSchedules() (int, error) {
	if _, err := t.x.c.Exec(t.ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, t.s.q.schema+".schedules"); err != nil {
		return 0, err
	}
	var n int
	err := t.x.c.QueryRow(t.ctx, `SELECT count(*) FROM `+t.s.q.schema+`.schedules`).Scan(&n)
	return n, err
}

// DueSchedules returns the schedules due at now with no live lease,
// leaving out those another transaction holds.
func (t *scheduleTx) DueSchedules(now time.Time, owner string, limit int) ([]string, error) {
	rows, err := t.x.c.Query(t.ctx, `SELECT name FROM `+t.s.q.schema+`.schedules WHERE `+scheduleDue+`
		ORDER BY next_due, name COLLATE "C" LIMIT $3 FOR UPDATE SKIP LOCKED`, sqlrow.Nanos(now), owner, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// scheduleWrite runs fn in a transaction. A set is idempotent, and so is a
// claim or an advance sent again (its version moved on: it changes
// nothing), so one whose commit went unheard is retried.
func (s *Store) scheduleWrite(ctx context.Context, fn func(t *scheduleTx) error) error {
	return s.inTx(ctx, true, func(ctx context.Context, x *txn) error { return fn(&scheduleTx{ctx: ctx, x: x, s: s}) })
}

// SetSchedule creates or changes a schedule.
func (s *Store) SetSchedule(ctx context.Context, p *store.SetScheduleParams) (*store.Schedule, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("set schedule: %w", err)
	}
	q := p.WithDefaults(s.cfg.Now)
	var out *store.Schedule
	err := s.scheduleWrite(ctx, func(t *scheduleTx) error {
		var err error
		out, err = apply.SetSchedule(t, q)
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
	var out *store.Schedule
	err := s.do(ctx, true, func(ctx context.Context, _ *try) error {
		var err error
		out, err = sqlrow.ScanSchedule(s.pool.QueryRow(ctx, `SELECT `+sqlrow.ScheduleCols+` FROM `+s.q.schema+`.schedules WHERE name = $1`, name))
		if errors.Is(err, pgx.ErrNoRows) {
			return errNoSchedule
		}
		return err
	})
	if errors.Is(err, errNoSchedule) {
		return nil, fmt.Errorf("get schedule: %w: no schedule %q", store.ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("get schedule: %w", err)
	}
	return out, nil
}

// ListSchedules returns a page of the schedules (store.ListSchedules).
func (s *Store) ListSchedules(ctx context.Context, p *store.ListSchedulesParams) (*store.SchedulePage, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	p = p.WithDefaults()
	var page store.SchedulePage
	err := s.do(ctx, true, func(ctx context.Context, _ *try) error {
		page = store.SchedulePage{}
		rows, err := s.pool.Query(ctx, s.q.schedulePage, p.After, p.Limit, p.MaxBytes)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			sc, err := sqlrow.ScanSchedule(rows, &page.More)
			if err != nil {
				return err
			}
			page.Schedules = append(page.Schedules, sc)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return &page, nil
}

// DeleteSchedule deletes a schedule.
func (s *Store) DeleteSchedule(ctx context.Context, name string) error {
	if err := store.CheckScheduleName(name); err != nil {
		return fmt.Errorf("delete schedule: %w", err)
	}
	var n int64
	err := s.scheduleWrite(ctx, func(t *scheduleTx) error {
		tag, err := t.x.c.Exec(t.ctx, `DELETE FROM `+s.q.schema+`.schedules WHERE name = $1`, name)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("delete schedule: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("delete schedule: %w: no schedule %q", store.ErrNotFound, name)
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
	// no transaction is opened.
	due := false
	err := s.do(ctx, true, func(ctx context.Context, _ *try) error {
		var one int
		err := s.pool.QueryRow(ctx, `SELECT 1 FROM `+s.q.schema+`.schedules WHERE `+scheduleDue+` LIMIT 1`,
			sqlrow.Nanos(q.Now), q.Owner).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		due = err == nil
		return err
	})
	if err != nil || !due {
		if err != nil {
			err = fmt.Errorf("claim schedules: %w", err)
		}
		return nil, err
	}
	var out []*store.Schedule
	err = s.scheduleWrite(ctx, func(t *scheduleTx) error {
		var err error
		out, err = apply.ClaimSchedules(t, q)
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
	err := s.scheduleWrite(ctx, func(t *scheduleTx) error {
		var err error
		ok, err = apply.AdvanceSchedule(t, q)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("advance schedule: %w", err)
	}
	return ok, nil
}
