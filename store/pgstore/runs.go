package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/store"
)

// claimedRun is a run a claim took, with its creation order.
type claimedRun struct {
	run *store.Run
	seq int64
}

func scanRun(row pgx.Row, extra ...any) (*store.Run, error) {
	var r store.Run
	var status string
	var created, updated, wake, expires int64
	dest := []any{&r.ID, &r.Workflow, &status, &r.Input, &r.Output, &r.Error, &created, &updated,
		&wake, &r.LeaseOwner, &expires, &r.LeaseEpoch, &r.CancelRequested}
	if err := row.Scan(append(dest, extra...)...); err != nil {
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
	o := &op{kind: opCreateRun, create: p, now: nanos(s.cfg.Now())}
	// Idempotent: a retry finds the run its lost reply created (then as
	// created false).
	if err := s.exec(ctx, o); err != nil {
		return nil, false, fmt.Errorf("create run: %w", err)
	}
	return o.run, o.created, nil
}

// GetRun returns a run.
func (s *Store) GetRun(ctx context.Context, id string) (*store.Run, error) {
	var run *store.Run
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var err error
		run, err = scanRun(s.pool.QueryRow(ctx, s.q.run, id))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get run %q: %w", id, err)
	}
	return run, nil
}

// ListRuns lists runs, newest first.
func (s *Store) ListRuns(ctx context.Context, p *store.ListRunsParams) ([]*store.Run, error) {
	if p.Limit < 0 || p.Status != "" && !p.Status.Valid() {
		return nil, fmt.Errorf("list runs: %w: limit %d, status %q", store.ErrInvalid, p.Limit, p.Status)
	}
	limit := p.Limit
	if limit == 0 {
		limit = 100
	}
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
	if p.Before != "" {
		// An unknown cursor must be an error, not an empty page.
		where = append(where, "seq < (SELECT seq FROM "+s.q.schema+".runs WHERE id = "+arg(p.Before)+")")
	}
	q := `SELECT ` + runCols + ` FROM ` + s.q.schema + `.runs`
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
			r, err := scanRun(rows)
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
	if p.Owner == "" || p.Limit < 1 || p.LeaseTTL <= 0 {
		return nil, fmt.Errorf("claim runs: %w: an owner, a limit >= 1 and a lease TTL > 0 are required", store.ErrInvalid)
	}
	now := p.Now
	if now.IsZero() {
		now = s.cfg.Now()
	}
	o := &op{kind: opClaim, claim: &store.ClaimRunsParams{Owner: p.Owner, Limit: p.Limit, LeaseTTL: p.LeaseTTL, Now: now, Workflows: p.Workflows}}
	// In a group commit. A retry after a lost reply returns the runs the
	// lost try claimed, found by its token, instead of claiming more.
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
	if p.RunID == "" || p.LeaseTTL <= 0 {
		return false, fmt.Errorf("renew lease: %w: a run id and a lease TTL > 0 are required", store.ErrInvalid)
	}
	var cancel bool
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		now := s.cfg.Now()
		t.committing = true
		err := s.pool.QueryRow(ctx, s.q.renew, nanos(now.Add(p.LeaseTTL)), nanos(now), p.RunID, p.LeaseEpoch).Scan(&cancel)
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
	var cur int64
	var owner, status string
	err := s.pool.QueryRow(ctx, s.q.runLease, run).Scan(&cur, &owner, &status)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("run %q: %w", run, store.ErrNotFound)
	}
	if err != nil {
		return err
	}
	return leaseLostErr(run, epoch, cur, owner, status)
}

func leaseLostErr(run string, epoch, cur int64, owner, status string) error {
	switch {
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
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var changed, exists bool
		t.committing = true
		if err := s.pool.QueryRow(ctx, s.q.cancel, id, nanos(s.cfg.Now())).Scan(&changed, &exists); err != nil {
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
			var e store.Event
			var typ string
			var at, wake int64
			if err := rows.Scan(&e.Seq, &typ, &e.Op, &e.Name, &e.Attempt, &e.Data, &e.Error, &e.Final, &at, &wake); err != nil {
				return err
			}
			e.Type, e.At, e.WakeAt = store.EventType(typ), fromNanos(at), fromNanos(wake)
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

// eventArrays is RecordParams.Events as the columns unnest takes.
type eventArrays struct {
	types, names, errs []string
	ops, attempts      []int64
	data               [][]byte
	final              []bool
	at, wake           []int64
}

func newEventArrays(evs []store.Event, now time.Time) *eventArrays {
	n := len(evs)
	a := &eventArrays{
		types: make([]string, 0, n), names: make([]string, 0, n), errs: make([]string, 0, n),
		ops: make([]int64, 0, n), attempts: make([]int64, 0, n), data: make([][]byte, 0, n),
		final: make([]bool, 0, n), at: make([]int64, 0, n), wake: make([]int64, 0, n),
	}
	for i := range evs {
		e := &evs[i]
		at := e.At
		if at.IsZero() {
			at = now
		}
		a.types = append(a.types, string(e.Type))
		a.ops = append(a.ops, e.Op)
		a.names = append(a.names, e.Name)
		a.attempts = append(a.attempts, e.Attempt)
		a.data = append(a.data, e.Data)
		a.errs = append(a.errs, e.Error)
		a.final = append(a.final, e.Final)
		a.at = append(a.at, nanos(at))
		a.wake = append(a.wake, nanos(e.WakeAt))
	}
	return a
}

// args are the arrays as $3..$11.
func (a *eventArrays) args() []any {
	return []any{a.types, a.ops, a.names, a.attempts, a.data, a.errs, a.final, a.at, a.wake}
}

// runChange is how RecordParams changes the run row.
type runChange struct {
	status       string
	output       []byte
	errMsg       string
	release      bool
	wake, now    int64
	terminal     bool
	fenceWriter  string
	fenceAttempt int64
}

func newRunChange(p *store.RecordParams, now time.Time) *runChange {
	c := &runChange{
		status: string(p.Status), output: p.Output, errMsg: p.Error,
		release:  p.Release || p.Status.Terminal(),
		now:      nanos(now),
		terminal: p.Status.Terminal(),
	}
	if p.Release && !p.Status.Terminal() {
		c.wake = nanos(p.WakeAt)
	}
	if p.Fence != nil {
		c.fenceWriter, c.fenceAttempt = p.Fence.Writer, p.Fence.Attempt
	}
	return c
}

// Record applies one engine transaction, in this order: events, fence,
// finish, status, stream closes, lease release; in a group commit. Any
// failure undoes all of it.
//
// The group saves its random token on the run row: when the connection is
// lost after the commit was sent, the retry finds the token and knows the
// Record committed. So a Record is never applied twice, and an error still
// means nothing was written.
func (s *Store) Record(ctx context.Context, p *store.RecordParams) error {
	if err := store.CheckRecord(p); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	now := s.cfg.Now()
	o := &op{kind: opRecord, record: p, evs: newEventArrays(p.Events, now), chg: newRunChange(p, now)}
	if err := s.exec(ctx, o); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}
