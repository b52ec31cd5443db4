package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
)

// Hooks: the rules are package apply's (CreateHook, DisposeHook,
// DeliverHook); wtx loads and saves for them.

var _ apply.HookTx = (*wtx)(nil)

// Hook loads the hook holding token, nil if none.
func (tx *wtx) Hook(token string) (*apply.Hook, error) {
	h := &apply.Hook{Token: token}
	var created int64
	err := tx.w.hook.QueryRowContext(bg, token).Scan(&h.RunID, &h.Op, &h.Disposed, &h.Received, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load hook: %w", translate(err))
	}
	h.CreatedAt = sqlrow.Time(created)
	return h, nil
}

// HookKey loads what a delivery with key to token left, nil if nothing.
func (tx *wtx) HookKey(token, key string) (*apply.Key, error) {
	k := &apply.Key{}
	var expires int64
	err := tx.w.hookKey.QueryRowContext(bg, token, key).Scan(&k.Digest, &k.Result, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load hook key: %w", translate(err))
	}
	k.ExpiresAt = sqlrow.Time(expires)
	return k, nil
}

// SaveHook persists h; a fresh hook drops the keys of the token's last one.
func (tx *wtx) SaveHook(h *apply.Hook, fresh bool) error {
	tx.changed = true
	if fresh {
		if _, err := tx.w.dropHookKeys.ExecContext(bg, h.Token); err != nil {
			return fmt.Errorf("drop hook keys: %w", translate(err))
		}
	}
	if _, err := tx.w.putHook.ExecContext(bg, h.Token, h.RunID, h.Op, h.Disposed, h.Received, sqlrow.Nanos(h.CreatedAt)); err != nil {
		return fmt.Errorf("save hook: %w", translate(err))
	}
	return nil
}

// SaveHookKey stores what a delivery with key left.
func (tx *wtx) SaveHookKey(token, key string, k *apply.Key) error {
	tx.changed = true
	if _, err := tx.w.putHookKey.ExecContext(bg, token, key, k.Digest, k.Result, sqlrow.Nanos(k.ExpiresAt)); err != nil {
		return fmt.Errorf("save hook key: %w", translate(err))
	}
	return nil
}

// CreateHook creates a run's hook (apply.CreateHook).
func (s *Store) CreateHook(ctx context.Context, p *store.HookParams) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("create hook: %w", err)
	}
	p = p.WithDefaults(s.cfg.Now)
	if err := s.write(ctx, func(tx *wtx) error { return apply.CreateHook(tx, p) }); err != nil {
		return fmt.Errorf("create hook: %w", err)
	}
	return nil
}

// DisposeHook disposes of a run's hook (apply.DisposeHook).
func (s *Store) DisposeHook(ctx context.Context, p *store.HookParams) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("dispose hook: %w", err)
	}
	p = p.WithDefaults(s.cfg.Now)
	if err := s.write(ctx, func(tx *wtx) error { return apply.DisposeHook(tx, p) }); err != nil {
		return fmt.Errorf("dispose hook: %w", err)
	}
	return nil
}

// DeliverHook delivers a payload to a hook (apply.DeliverHook).
func (s *Store) DeliverHook(ctx context.Context, p *store.DeliverHookParams) (*store.HookDelivery, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("deliver to hook: %w", err)
	}
	p = p.WithDefaults(s.cfg.Now)
	var res *store.HookDelivery
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		res, err = apply.DeliverHook(tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("deliver to hook: %w", err)
	}
	return res, nil
}

// GetHook returns the hook holding token.
func (s *Store) GetHook(ctx context.Context, token string) (*store.HookInfo, error) {
	if err := store.CheckHookToken(token); err != nil {
		return nil, fmt.Errorf("get hook: %w", err)
	}
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	h, err := sqlrow.ScanHook(s.r.hookInfo.QueryRowContext(ctx, token))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("get hook %q: %w", token, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get hook: %w", s.readErr(err))
	}
	return h, nil
}

// ListHooks returns a run's hooks by op.
func (s *Store) ListHooks(ctx context.Context, runID string) ([]*store.HookInfo, error) {
	if err := store.CheckRunID(runID); err != nil {
		return nil, fmt.Errorf("list hooks: %w", err)
	}
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	rows, err := s.r.runHooks.QueryContext(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("list hooks: %w", s.readErr(err))
	}
	defer rows.Close()
	var out []*store.HookInfo
	for rows.Next() {
		h, err := sqlrow.ScanHook(rows)
		if err != nil {
			return nil, fmt.Errorf("list hooks: %w", s.readErr(err))
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list hooks: %w", s.readErr(err))
	}
	return out, nil
}
