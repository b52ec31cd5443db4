package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
)

// Limiters: the rules are package limit's, applied by package apply;
// limiterTx loads a limiter's row FOR UPDATE, so that the requests of
// every process on the database are decided one at a time, against one
// state.

var (
	_ store.Limits    = (*Store)(nil)
	_ apply.LimiterTx = (*limiterTx)(nil)
)

// errNoLimiter marks a name no limiter has.
var errNoLimiter = errors.New("no limiter")

type limiterTx struct {
	ctx context.Context
	x   *txn
	s   *Store
}

// LockLimiter loads limiter name and locks its row.
func (t *limiterTx) LockLimiter(name string) (*limit.Config, []byte, bool, error) {
	var cfg, state []byte
	err := t.x.c.QueryRow(t.ctx, `SELECT config, state FROM `+t.s.q.schema+`.limiters WHERE name = $1 FOR UPDATE`, name).Scan(&cfg, &state)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	c, err := apply.DecodeLimiterConfig(cfg)
	return c, state, err == nil, err
}

// TryLockLimiter is LockLimiter if no other transaction holds the row;
// if one does, it says the limiter exists and leaves it, without waiting.
func (t *limiterTx) TryLockLimiter(name string) (*limit.Config, []byte, bool, bool, error) {
	var cfg, state []byte
	err := t.x.c.QueryRow(t.ctx, `SELECT config, state FROM `+t.s.q.schema+`.limiters WHERE name = $1 FOR UPDATE SKIP LOCKED`, name).Scan(&cfg, &state)
	if err == nil {
		c, err := apply.DecodeLimiterConfig(cfg)
		return c, state, err == nil, err == nil, err
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, false, false, err
	}
	// None, or locked: which?
	var one int
	err = t.x.c.QueryRow(t.ctx, `SELECT 1 FROM `+t.s.q.schema+`.limiters WHERE name = $1`, name).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, false, false, nil
	}
	return nil, nil, err == nil, false, err
}

// SaveLimiter saves limiter c.Name.
func (t *limiterTx) SaveLimiter(c *limit.Config, state []byte) error {
	cfg, err := apply.EncodeLimiterConfig(c)
	if err != nil {
		return err
	}
	_, err = t.x.c.Exec(t.ctx, `INSERT INTO `+t.s.q.schema+`.limiters (name, config, state) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET config = excluded.config, state = excluded.state`, c.Name, cfg, state)
	return err
}

// CountLimiters counts the limiters. The rule asks it only to make a new
// one: creations take turns on a lock held to their commit, so that the
// bound holds when many are made at once (each would count the others'
// uncommitted rows as absent).
func (t *limiterTx) CountLimiters() (int, error) {
	if _, err := t.x.c.Exec(t.ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, t.s.q.schema+".limiters"); err != nil {
		return 0, err
	}
	var n int
	err := t.x.c.QueryRow(t.ctx, `SELECT count(*) FROM `+t.s.q.schema+`.limiters`).Scan(&n)
	return n, err
}

// QueuedRuns reports runs queued in limiter name, or admitted from it and
// not ended.
func (t *limiterTx) QueuedRuns(name string) (bool, error) {
	var any bool
	err := t.x.c.QueryRow(t.ctx, `SELECT EXISTS (SELECT 1 FROM `+t.s.q.schema+`.runs WHERE queue = $1 AND status IN ('pending', 'running'))`, name).Scan(&any)
	return any, err
}

// DeleteLimiter deletes limiter name's row.
// WakeParkedRuns makes the parked runs of runs claimable now.
func (t *limiterTx) WakeParkedRuns(runs []string) error {
	_, err := t.x.c.Exec(t.ctx, `UPDATE `+t.s.q.schema+`.runs SET wake_at = 0
		WHERE id = ANY ($1::text[]) AND status = 'running' AND lease_owner = '' AND wake_at > 0`, runs)
	return err
}

// limiterWaitedFor is the test that a run's limiters column names $1.
const limiterWaitedFor = `limiters IS NOT NULL AND position(E'\n' || $1 || E'\n' in E'\n' || limiters) > 0`

// WakeRunsFor makes the parked runs that wait for limiter name claimable now.
func (t *limiterTx) WakeRunsFor(name string) error {
	_, err := t.x.c.Exec(t.ctx, `UPDATE `+t.s.q.schema+`.runs SET wake_at = 0
		WHERE `+limiterWaitedFor+` AND `+sqlrow.RunParkedForAWindow+` AND wake_at > 0`, name)
	return err
}

// ParkedFor reports a parked run that waits for limiter name.
func (t *limiterTx) ParkedFor(name string) (bool, error) {
	var any bool
	err := t.x.c.QueryRow(t.ctx, `SELECT EXISTS (SELECT 1 FROM `+t.s.q.schema+`.runs
		WHERE `+limiterWaitedFor+` AND `+sqlrow.RunParked+`)`, name).Scan(&any)
	return any, err
}

func (t *limiterTx) DeleteLimiter(name string) error {
	_, err := t.x.c.Exec(t.ctx, `DELETE FROM `+t.s.q.schema+`.limiters WHERE name = $1`, name)
	return err
}

// DeleteLimiter deletes a limiter nothing uses.
func (s *Store) DeleteLimiter(ctx context.Context, name string) error {
	now := s.cfg.Now()
	if err := s.limiterWrite(ctx, func(t *limiterTx) error { return apply.DeleteLimiter(t, name, now) }); err != nil {
		return fmt.Errorf("delete limiter: %w", err)
	}
	s.limiterChanged(name)
	return nil
}

// limiterWrite runs fn in a transaction; every limiter call is idempotent
// (asking again, releasing again, renewing again change nothing more), so
// one whose commit went unheard is retried.
func (s *Store) limiterWrite(ctx context.Context, fn func(t *limiterTx) error) error {
	return s.inTx(ctx, true, func(ctx context.Context, x *txn) error { return fn(&limiterTx{ctx: ctx, x: x, s: s}) })
}

// SetLimiter creates or changes a limiter.
func (s *Store) SetLimiter(ctx context.Context, c *limit.Config) error {
	if err := store.CheckLimiter(c); err != nil {
		return fmt.Errorf("set limiter: %w", err)
	}
	var handed []string
	if err := s.limiterWrite(ctx, func(t *limiterTx) (err error) {
		handed, err = apply.SetLimiter(t, c)
		return err
	}); err != nil {
		return fmt.Errorf("set limiter: %w", err)
	}
	s.limiterChanged(c.Name)
	s.slotsHanded(c.Name, handed)
	return nil
}

// GetLimiter returns a limiter's configuration.
func (s *Store) GetLimiter(ctx context.Context, name string) (*limit.Config, error) {
	cfg, _, err := s.readLimiter(ctx, name)
	if err != nil {
		return nil, err
	}
	return apply.DecodeLimiterConfig(cfg)
}

// readLimiter reads limiter name's row as it is kept: its configuration
// and its state.
func (s *Store) readLimiter(ctx context.Context, name string) ([]byte, []byte, error) {
	if err := store.CheckLimiterName(name); err != nil {
		return nil, nil, fmt.Errorf("get limiter: %w", err)
	}
	var cfg, state []byte
	err := s.do(ctx, true, func(ctx context.Context, _ *try) error {
		err := s.pool.QueryRow(ctx, `SELECT config, state FROM `+s.q.schema+`.limiters WHERE name = $1`, name).Scan(&cfg, &state)
		if errors.Is(err, pgx.ErrNoRows) {
			return errNoLimiter
		}
		return err
	})
	if errors.Is(err, errNoLimiter) {
		return nil, nil, fmt.Errorf("get limiter: %w: no limiter %q", store.ErrNotFound, name)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("get limiter: %w", err)
	}
	return cfg, state, nil
}

// ListLimiters returns every limiter's configuration, by name.
func (s *Store) ListLimiters(ctx context.Context) ([]*limit.Config, error) {
	var out []*limit.Config
	err := s.do(ctx, true, func(ctx context.Context, _ *try) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, `SELECT config FROM `+s.q.schema+`.limiters ORDER BY name COLLATE "C"`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var b []byte
			if err := rows.Scan(&b); err != nil {
				return err
			}
			c, err := apply.DecodeLimiterConfig(b)
			if err != nil {
				return err
			}
			out = append(out, c)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list limiters: %w", err)
	}
	return out, nil
}

// AcquireSlot asks a limiter for a slot.
func (s *Store) AcquireSlot(ctx context.Context, p *store.AcquireSlotParams) (*limit.Decision, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("acquire slot: %w", err)
	}
	q := p.WithDefaults(s.cfg.Now)
	var d *limit.Decision
	err := s.limiterWrite(ctx, func(t *limiterTx) error {
		var err error
		d, err = apply.AcquireSlot(t, q)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("acquire slot: %w", err)
	}
	moved, joined, handed := store.AcquireWakes(d)
	if moved {
		s.limiterChanged(q.Limiter)
	}
	if joined {
		s.limiterJoined(q.Limiter)
	}
	s.slotsHanded(q.Limiter, handed)
	return d, nil
}

// ReleaseSlot gives a slot back and charges its cost.
func (s *Store) ReleaseSlot(ctx context.Context, p *store.ReleaseSlotParams) (bool, error) {
	if err := p.Check(); err != nil {
		return false, fmt.Errorf("release slot: %w", err)
	}
	q := p.WithDefaults(s.cfg.Now)
	var ok bool
	var handed []string
	err := s.limiterWrite(ctx, func(t *limiterTx) error {
		var err error
		ok, handed, err = apply.ReleaseSlot(t, q)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("release slot: %w", err)
	}
	if ok {
		s.limiterChanged(q.Limiter)
	}
	s.slotsHanded(q.Limiter, handed)
	return ok, nil
}

// RenewSlot extends a held slot's lease.
func (s *Store) RenewSlot(ctx context.Context, p *store.RenewSlotParams) (bool, error) {
	if err := p.Check(); err != nil {
		return false, fmt.Errorf("renew slot: %w", err)
	}
	q := p.WithDefaults(s.cfg.Now)
	var ok bool
	err := s.limiterWrite(ctx, func(t *limiterTx) error {
		var err error
		ok, err = apply.RenewSlot(t, q)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("renew slot: %w", err)
	}
	return ok, nil
}

// SlotHeld reads whether p.Holder holds a slot, from the committed row.
func (s *Store) SlotHeld(ctx context.Context, p *store.SlotHeldParams) (time.Time, bool, error) {
	if err := p.Check(); err != nil {
		return time.Time{}, false, fmt.Errorf("slot held: %w", err)
	}
	q := p.WithDefaults(s.cfg.Now)
	_, state, err := s.readLimiter(ctx, q.Limiter)
	if err != nil {
		return time.Time{}, false, err
	}
	return apply.SlotHeld(state, q.Holder, q.Now)
}

// LimiterState returns what a limiter holds at now.
func (s *Store) LimiterState(ctx context.Context, name string, now time.Time) (*limit.State, error) {
	cfg, state, err := s.readLimiter(ctx, name)
	if err != nil {
		return nil, err
	}
	if now.IsZero() {
		now = s.cfg.Now()
	}
	var queued int
	err = s.do(ctx, true, func(ctx context.Context, _ *try) error {
		return s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.q.schema+`.runs WHERE queue = $1 AND queued`, name).Scan(&queued)
	})
	if err != nil {
		return nil, fmt.Errorf("limiter state: %w", err)
	}
	inFlight := func(ids []string) (map[string]bool, error) {
		out := map[string]bool{}
		err := s.do(ctx, true, func(ctx context.Context, _ *try) error {
			rows, err := s.pool.Query(ctx, `SELECT id FROM `+s.q.schema+`.runs WHERE id = ANY ($1::text[]) AND status IN ('pending', 'running')`, ids)
			if err != nil {
				return err
			}
			live, err := pgx.CollectRows(rows, pgx.RowTo[string])
			for _, id := range live {
				out[id] = true
			}
			return err
		})
		return out, err
	}
	return apply.LimiterView(cfg, state, now, inFlight, queued)
}

var _ store.LimiterWatcher = (*Store)(nil)

// WatchLimiter is store.LimiterWatcher's: a slot of limiter name given
// back, a grant shrunk, its bounds changed, by this
// process or (through notifications) another.
func (s *Store) WatchLimiter(name string) (<-chan struct{}, func()) {
	s.lis.ensure(context.Background())
	k := store.LimiterKey(name)
	w := s.runs.Subscribe(k)
	return w.C, func() { s.runs.Unsubscribe(k, w) }
}

// limiterChanged wakes the watchers of limiter name (committed), here and
// in the other processes.
func (s *Store) limiterChanged(name string) {
	k := store.LimiterKey(name)
	s.runs.Wake(k, struct{}{})
	s.pub.addRuns([]int64{k})
}

// WatchLimiterLine is store.LimiterWatcher's: a waiter new in limiter
// name's line, in this process or another.
func (s *Store) WatchLimiterLine(name string) (<-chan struct{}, func()) {
	s.lis.ensure(context.Background())
	k := store.LimiterLineKey(name)
	w := s.runs.Subscribe(k)
	return w.C, func() { s.runs.Unsubscribe(k, w) }
}

// WatchSlot is store.LimiterWatcher's: holder handed a slot of limiter
// name, by this process or another.
func (s *Store) WatchSlot(name, holder string) (<-chan struct{}, func()) {
	s.lis.ensure(context.Background())
	k := store.LimiterSlotKey(name, holder)
	w := s.runs.Subscribe(k)
	return w.C, func() { s.runs.Unsubscribe(k, w) }
}

// slotsHanded wakes the waiters of limiter name a committed decision
// handed a slot, here and in the other processes.
func (s *Store) slotsHanded(name string, handed []string) {
	if len(handed) == 0 {
		return
	}
	ks := store.SlotKeys(name, handed)
	for _, k := range ks {
		s.runs.Wake(k, struct{}{})
	}
	s.pub.addRuns(ks)
}

// limiterJoined wakes the line watchers of limiter name (committed), here
// and in the other processes.
func (s *Store) limiterJoined(name string) {
	k := store.LimiterLineKey(name)
	s.runs.Wake(k, struct{}{})
	s.pub.addRuns([]int64{k})
}
