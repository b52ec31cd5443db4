package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
)

// Limiters: the rules are package limit's, applied by package apply; wtx
// loads and saves a limiter's row for them. The committer's one write
// transaction at a time is the lock.

var (
	_ store.Limits    = (*Store)(nil)
	_ apply.LimiterTx = (*wtx)(nil)
)

// TryLockLimiter is LockLimiter: the committer's transaction holds every
// row.
func (tx *wtx) TryLockLimiter(name string) (*limit.Config, []byte, bool, bool, error) {
	c, b, found, err := tx.LockLimiter(name)
	return c, b, found, found, err
}

// LockLimiter loads limiter name.
func (tx *wtx) LockLimiter(name string) (*limit.Config, []byte, bool, error) {
	st, err := tx.stmt(`SELECT config, state FROM limiters WHERE name = ?`)
	if err != nil {
		return nil, nil, false, err
	}
	var cfg, state []byte
	err = st.QueryRowContext(bg, name).Scan(&cfg, &state)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("load limiter: %w", translate(err))
	}
	c, err := apply.DecodeLimiterConfig(cfg)
	return c, state, err == nil, err
}

// SaveLimiter saves limiter c.Name.
func (tx *wtx) SaveLimiter(c *limit.Config, state []byte) error {
	tx.changed = true
	cfg, err := apply.EncodeLimiterConfig(c)
	if err != nil {
		return err
	}
	st, err := tx.stmt(`INSERT INTO limiters (name, config, state) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET config = excluded.config, state = excluded.state`)
	if err != nil {
		return err
	}
	if _, err := st.ExecContext(bg, c.Name, cfg, state); err != nil {
		return fmt.Errorf("save limiter: %w", translate(err))
	}
	return nil
}

// CountLimiters counts the limiters.
func (tx *wtx) CountLimiters() (int, error) {
	st, err := tx.stmt(`SELECT count(*) FROM limiters`)
	if err != nil {
		return 0, err
	}
	var n int
	if err := st.QueryRowContext(bg).Scan(&n); err != nil {
		return 0, translate(err)
	}
	return n, nil
}

// QueuedRuns reports runs queued in limiter name, or admitted from it and
// not ended.
func (tx *wtx) QueuedRuns(name string) (bool, error) {
	st, err := tx.stmt(`SELECT EXISTS (SELECT 1 FROM runs WHERE queue = ? AND status IN ('pending', 'running'))`)
	if err != nil {
		return false, err
	}
	var any bool
	if err := st.QueryRowContext(bg, name).Scan(&any); err != nil {
		return false, translate(err)
	}
	return any, nil
}

// limiterWaitedFor is the test that a run's limiters column names ?1.
const limiterWaitedFor = `limiters IS NOT NULL AND instr(char(10) || limiters, char(10) || ?1 || char(10)) > 0`

// WakeRunsFor makes the parked runs that wait for limiter name claimable now.
func (tx *wtx) WakeRunsFor(name string) error {
	tx.changed = true
	st, err := tx.stmt(`UPDATE runs SET wake_at = 0 WHERE ` + limiterWaitedFor + ` AND ` + sqlrow.RunParkedForAWindow + ` AND wake_at > 0`)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(bg, name)
	return translate(err)
}

// ParkedFor reports a parked run that waits for limiter name.
func (tx *wtx) ParkedFor(name string) (bool, error) {
	st, err := tx.stmt(`SELECT EXISTS (SELECT 1 FROM runs WHERE ` + limiterWaitedFor + ` AND ` + sqlrow.RunParked + `)`)
	if err != nil {
		return false, err
	}
	var any bool
	if err := st.QueryRowContext(bg, name).Scan(&any); err != nil {
		return false, translate(err)
	}
	return any, nil
}

// WakeParkedRuns makes the parked runs of runs claimable now.
func (tx *wtx) WakeParkedRuns(runs []string) error {
	tx.changed = true
	st, err := tx.stmt(`UPDATE runs SET wake_at = 0 WHERE id = ? AND status = 'running' AND lease_owner = '' AND wake_at > 0`)
	if err != nil {
		return err
	}
	for _, r := range runs {
		if _, err := st.ExecContext(bg, r); err != nil {
			return translate(err)
		}
	}
	return nil
}

// DeleteLimiter deletes limiter name's row.
func (tx *wtx) DeleteLimiter(name string) error {
	tx.changed = true
	st, err := tx.stmt(`DELETE FROM limiters WHERE name = ?`)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(bg, name)
	return translate(err)
}

// DeleteLimiter deletes a limiter nothing uses.
func (s *Store) DeleteLimiter(ctx context.Context, name string) error {
	now := s.cfg.Now()
	if err := s.write(ctx, func(tx *wtx) error { return apply.DeleteLimiter(tx, name, now) }); err != nil {
		return fmt.Errorf("delete limiter: %w", err)
	}
	s.limiterChanged(name)
	return nil
}

// SetLimiter creates or changes a limiter.
func (s *Store) SetLimiter(ctx context.Context, c *limit.Config) error {
	if err := store.CheckLimiter(c); err != nil {
		return fmt.Errorf("set limiter: %w", err)
	}
	var handed []string
	if err := s.write(ctx, func(tx *wtx) (err error) {
		handed, err = apply.SetLimiter(tx, c)
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
	err := s.rdb.QueryRowContext(ctx, `SELECT config, state FROM limiters WHERE name = ?`, name).Scan(&cfg, &state)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, fmt.Errorf("get limiter: %w: no limiter %q", store.ErrNotFound, name)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("get limiter: %w", s.readErr(err))
	}
	return cfg, state, nil
}

// ListLimiters returns every limiter's configuration, by name.
func (s *Store) ListLimiters(ctx context.Context) ([]*limit.Config, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT config FROM limiters ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list limiters: %w", s.readErr(err))
	}
	defer rows.Close()
	var out []*limit.Config
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, fmt.Errorf("list limiters: %w", s.readErr(err))
		}
		c, err := apply.DecodeLimiterConfig(b)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// AcquireSlot asks a limiter for a slot.
func (s *Store) AcquireSlot(ctx context.Context, p *store.AcquireSlotParams) (*limit.Decision, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("acquire slot: %w", err)
	}
	q := p.WithDefaults(s.cfg.Now)
	var d *limit.Decision
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		d, err = apply.AcquireSlot(tx, q)
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
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		ok, handed, err = apply.ReleaseSlot(tx, q)
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
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		ok, err = apply.RenewSlot(tx, q)
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

// LimiterState returns what a limiter holds now.
func (s *Store) LimiterState(ctx context.Context, name string, now time.Time) (*limit.State, error) {
	cfg, state, err := s.readLimiter(ctx, name)
	if err != nil {
		return nil, err
	}
	if now.IsZero() {
		now = s.cfg.Now()
	}
	var queued int
	if err := s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM runs WHERE queue = ? AND queued = 1`, name).Scan(&queued); err != nil {
		return nil, fmt.Errorf("limiter state: %w", s.readErr(err))
	}
	inFlight := func(ids []string) (map[string]bool, error) {
		rows, err := s.rdb.QueryContext(ctx, `SELECT id FROM runs WHERE id IN (SELECT value FROM json_each(?)) AND status IN ('pending', 'running')`, jsonList(ids))
		if err != nil {
			return nil, s.readErr(err)
		}
		defer rows.Close()
		out := map[string]bool{}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return nil, s.readErr(err)
			}
			out[id] = true
		}
		return out, s.readErr(rows.Err())
	}
	return apply.LimiterView(cfg, state, now, inFlight, queued)
}

var _ store.LimiterWatcher = (*Store)(nil)

// WatchLimiter is store.LimiterWatcher's: a slot of limiter name given
// back, a grant shrunk, its bounds changed.
func (s *Store) WatchLimiter(name string) (<-chan struct{}, func()) {
	k := store.LimiterKey(name)
	w := s.runs.Subscribe(k)
	return w.C, func() { s.runs.Unsubscribe(k, w) }
}

// limiterChanged wakes the watchers of limiter name (committed).
func (s *Store) limiterChanged(name string) { s.runs.Wake(store.LimiterKey(name), struct{}{}) }

// WatchLimiterLine is store.LimiterWatcher's: a waiter new in limiter
// name's line.
func (s *Store) WatchLimiterLine(name string) (<-chan struct{}, func()) {
	k := store.LimiterLineKey(name)
	w := s.runs.Subscribe(k)
	return w.C, func() { s.runs.Unsubscribe(k, w) }
}

// WatchSlot is store.LimiterWatcher's: holder handed a slot of limiter
// name.
func (s *Store) WatchSlot(name, holder string) (<-chan struct{}, func()) {
	k := store.LimiterSlotKey(name, holder)
	w := s.runs.Subscribe(k)
	return w.C, func() { s.runs.Unsubscribe(k, w) }
}

// slotsHanded wakes the waiters of limiter name a committed decision
// handed a slot.
func (s *Store) slotsHanded(name string, handed []string) {
	for _, k := range store.SlotKeys(name, handed) {
		s.runs.Wake(k, struct{}{})
	}
}

// limiterJoined wakes the line watchers of limiter name (committed).
func (s *Store) limiterJoined(name string) { s.runs.Wake(store.LimiterLineKey(name), struct{}{}) }
