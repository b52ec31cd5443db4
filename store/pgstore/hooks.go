package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
)

// Hooks: each call is its own transaction, not a group's (hooks are rare
// next to appends and Records). The rules are package apply's; hookTx loads
// what they ask for FOR UPDATE, in the order they ask (the hook, then the
// runs), and saves at once.

type hookTx struct {
	ctx context.Context
	x   *txn
	s   *Store
}

var _ apply.HookTx = (*hookTx)(nil)

func (t *hookTx) Run(id string) (*apply.Run, error) {
	r := &apply.Run{ID: id}
	var status string
	err := t.x.c.QueryRow(t.ctx, `SELECT last_event, lease_epoch, lease_owner, status FROM `+t.s.q.schema+`.runs
		WHERE id = $1 FOR NO KEY UPDATE`, id).Scan(&r.LastEvent, &r.Epoch, &r.Owner, &status)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("run %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	r.Status = store.RunStatus(status)
	return r, nil
}

func (t *hookTx) Hook(token string) (*apply.Hook, error) {
	h := &apply.Hook{Token: token}
	var created int64
	err := t.x.c.QueryRow(t.ctx, `SELECT run_id, op, disposed, received, created_at FROM `+t.s.q.schema+`.hooks
		WHERE token = $1 FOR UPDATE`, token).Scan(&h.RunID, &h.Op, &h.Disposed, &h.Received, &created)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	h.CreatedAt = sqlrow.Time(created)
	return h, nil
}

func (t *hookTx) HookKey(token, key string) (*apply.Key, error) {
	k := &apply.Key{}
	var expires int64
	err := t.x.c.QueryRow(t.ctx, `SELECT digest, result, expires_at FROM `+t.s.q.schema+`.hook_keys
		WHERE token = $1 AND key = $2`, token, key).Scan(&k.Digest, &k.Result, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	k.ExpiresAt = sqlrow.Time(expires)
	return k, nil
}

func (t *hookTx) AddEvents(run *apply.Run, evs []store.Event) error {
	for i := range evs {
		e := &evs[i]
		if _, err := t.x.c.Exec(t.ctx, `INSERT INTO `+t.s.q.schema+`.events (run_id, seq, type, op, name, attempt, data, error, final, at, wake_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`, run.ID, e.Seq, string(e.Type), e.Op, e.Name, e.Attempt,
			e.Data, e.Error, e.Final, sqlrow.Nanos(e.At), sqlrow.Nanos(e.WakeAt)); err != nil {
			return err
		}
	}
	return nil
}

// SaveRun saves what a hook rule changes of a run: its log position, and
// a wake.
func (t *hookTx) SaveRun(run *apply.Run, c *apply.RunChange) error {
	if c.Status != "" || c.Release {
		return fmt.Errorf("pgstore: a hook rule changed a run's status or lease (%+v)", c)
	}
	_, err := t.x.c.Exec(t.ctx, `UPDATE `+t.s.q.schema+`.runs SET last_event = $2, updated_at = $3,
			wake_at = CASE WHEN $4 THEN $3 ELSE wake_at END
		WHERE id = $1`, run.ID, run.LastEvent, sqlrow.Nanos(c.Now), c.Wake)
	return err
}

func (t *hookTx) SaveHook(h *apply.Hook, fresh bool) error {
	q := t.s.q.schema
	if fresh {
		if _, err := t.x.c.Exec(t.ctx, `DELETE FROM `+q+`.hook_keys WHERE token = $1`, h.Token); err != nil {
			return err
		}
	}
	_, err := t.x.c.Exec(t.ctx, `INSERT INTO `+q+`.hooks (token, run_id, op, disposed, received, created_at)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (token) DO UPDATE SET run_id = $2, op = $3, disposed = $4,
			received = $5, created_at = $6`, h.Token, h.RunID, h.Op, h.Disposed, h.Received, sqlrow.Nanos(h.CreatedAt))
	return err
}

func (t *hookTx) SaveHookKey(token, key string, k *apply.Key) error {
	_, err := t.x.c.Exec(t.ctx, `INSERT INTO `+t.s.q.schema+`.hook_keys (token, key, digest, result, expires_at)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (token, key) DO UPDATE SET digest = $3, result = $4, expires_at = $5`,
		token, key, k.Digest, k.Result, sqlrow.Nanos(k.ExpiresAt))
	return err
}

// hookWrite runs fn in one transaction. idempotent: fn may be applied again
// after a commit whose reply was lost.
func (s *Store) hookWrite(ctx context.Context, idempotent bool, fn func(t *hookTx) error) error {
	return s.inTx(ctx, idempotent, func(ctx context.Context, x *txn) error { return fn(&hookTx{ctx: ctx, x: x, s: s}) })
}

// inTx runs fn in one transaction on a connection of its own, retried as
// do retries. idempotent: fn may be applied again after a commit whose
// reply was lost.
//
// A transaction that lost a race to insert the same key (a schedule, a
// limiter, a hook made at once by two requests: 23505) is run again, up to
// twice: it then reads the row the other made and decides by the rules,
// as if it had come second (red-team round eight: 16 concurrent PUTs of a
// new schedule answered 12 × 500 on PostgreSQL, 16 × 200 on SQLite).
func (s *Store) inTx(ctx context.Context, idempotent bool, fn func(ctx context.Context, x *txn) error) error {
	raced := 0
	return s.do(ctx, idempotent, func(ctx context.Context, tr *try) error {
		x, err := s.acquire(ctx, tr)
		if err != nil {
			return err
		}
		defer x.release()
		if _, err := x.c.Exec(ctx, "BEGIN"); err != nil {
			return err
		}
		err = fn(ctx, x)
		if err == nil {
			b := &pgx.Batch{}
			b.Queue("COMMIT")
			err = x.commit(ctx, b)
		}
		if uniqueViolation(err) && raced < 2 {
			raced++
			return &retryError{msg: err.Error()}
		}
		return err
	})
}

// CreateHook creates a run's hook (apply.CreateHook).
func (s *Store) CreateHook(ctx context.Context, p *store.HookParams) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("create hook: %w", err)
	}
	p = p.WithDefaults(s.cfg.Now)
	if err := s.hookWrite(ctx, true, func(t *hookTx) error { return apply.CreateHook(t, p) }); err != nil {
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
	if err := s.hookWrite(ctx, true, func(t *hookTx) error { return apply.DisposeHook(t, p) }); err != nil {
		return fmt.Errorf("dispose hook: %w", err)
	}
	return nil
}

// DeliverHook delivers a payload to a hook (apply.DeliverHook). Without an
// idempotency key a delivery whose commit went unanswered is not sent
// again: it may have landed.
func (s *Store) DeliverHook(ctx context.Context, p *store.DeliverHookParams) (*store.HookDelivery, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("deliver to hook: %w", err)
	}
	p = p.WithDefaults(s.cfg.Now)
	var res *store.HookDelivery
	err := s.hookWrite(ctx, p.IdempotencyKey != "", func(t *hookTx) error {
		var err error
		res, err = apply.DeliverHook(t, p)
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
	var h *store.HookInfo
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var err error
		h, err = sqlrow.ScanHook(s.pool.QueryRow(ctx, `SELECT `+sqlrow.HookCols+` FROM `+s.q.schema+`.hooks
			WHERE token = $1`, token))
		if errors.Is(err, pgx.ErrNoRows) {
			return errNoHook
		}
		return err
	})
	if errors.Is(err, errNoHook) {
		return nil, fmt.Errorf("get hook %q: %w", token, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get hook: %w", err)
	}
	return h, nil
}

// ListHooks returns a run's hooks by op.
func (s *Store) ListHooks(ctx context.Context, runID string) ([]*store.HookInfo, error) {
	if err := store.CheckRunID(runID); err != nil {
		return nil, fmt.Errorf("list hooks: %w", err)
	}
	var out []*store.HookInfo
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, `SELECT `+sqlrow.HookCols+` FROM `+s.q.schema+`.hooks
			WHERE run_id = $1 ORDER BY op, token COLLATE "C"`, runID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			h, err := sqlrow.ScanHook(rows)
			if err != nil {
				return err
			}
			out = append(out, h)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list hooks: %w", err)
	}
	return out, nil
}

var errNoHook = errors.New("no such hook")

// Messages (apply.SendMessage) use the hooks' transaction: the run locked
// FOR NO KEY UPDATE, its key read, its log appended to.

var _ apply.MessageTx = (*hookTx)(nil)

func (t *hookTx) MessageKey(run, key string) (*apply.Key, error) {
	k := &apply.Key{}
	var expires int64
	err := t.x.c.QueryRow(t.ctx, `SELECT digest, result, expires_at FROM `+t.s.q.schema+`.message_keys
		WHERE run_id = $1 AND key = $2`, run, key).Scan(&k.Digest, &k.Result, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	k.ExpiresAt = sqlrow.Time(expires)
	return k, nil
}

// Awaits returns what messages wake run while parked.
func (t *hookTx) Awaits(run string) (*store.Awaits, error) {
	var a *string
	if err := t.x.c.QueryRow(t.ctx, `SELECT awaits FROM `+t.s.q.schema+`.runs WHERE id = $1`, run).Scan(&a); err != nil {
		return nil, err
	}
	if a == nil {
		return nil, nil
	}
	return sqlrow.DecodeAwaits(*a, true), nil
}

// RunInbox reads run's inbox counters (the rule holds its row locked).
func (t *hookTx) RunInbox(run string) (int64, int64, error) {
	var n, b int64
	err := t.x.c.QueryRow(t.ctx, `SELECT inbox, inbox_bytes FROM `+t.s.q.schema+`.runs WHERE id = $1`, run).Scan(&n, &b)
	return n, b, err
}

// AddInbox counts n more messages or hook payloads, of bytes, to run.
func (t *hookTx) AddInbox(run string, n, bytes int64) error {
	_, err := t.x.c.Exec(t.ctx, `UPDATE `+t.s.q.schema+`.runs SET inbox = inbox + $3, inbox_bytes = inbox_bytes + $2 WHERE id = $1`, run, bytes, n)
	return err
}

func (t *hookTx) SaveMessageKey(run, key string, k *apply.Key) error {
	_, err := t.x.c.Exec(t.ctx, `INSERT INTO `+t.s.q.schema+`.message_keys (run_id, key, digest, result, expires_at)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id, key) DO UPDATE SET digest = $3, result = $4, expires_at = $5`,
		run, key, k.Digest, k.Result, sqlrow.Nanos(k.ExpiresAt))
	return err
}

// SendMessage sends a message to a run (apply.SendMessage). A retry after
// a commit whose reply was lost is safe only with an idempotency key.
func (s *Store) SendMessage(ctx context.Context, p *store.SendMessageParams) (*store.MessageSent, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("send message: %w", err)
	}
	p = p.WithDefaults(s.cfg.Now)
	var res *store.MessageSent
	err := s.hookWrite(ctx, p.IdempotencyKey != "", func(t *hookTx) error {
		var err error
		res, err = apply.SendMessage(t, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("send message: %w", err)
	}
	return res, nil
}

// errNoRunEvent marks a key a run never set.
var errNoRunEvent = errors.New("no run event")

// GetRunEvent returns the latest value run runID set for key.
func (s *Store) GetRunEvent(ctx context.Context, runID, key string) (*store.RunEvent, error) {
	if err := store.CheckRunID(runID); err != nil {
		return nil, fmt.Errorf("get run event: %w", err)
	}
	if err := store.CheckTopic("run event key", key); err != nil {
		return nil, fmt.Errorf("get run event: %w", err)
	}
	var ev *store.RunEvent
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var err error
		ev, err = sqlrow.ScanRunEvent(s.pool.QueryRow(ctx, `SELECT `+sqlrow.RunEventCols+` FROM `+s.q.schema+`.run_events
			WHERE run_id = $1 AND key = $2`, runID, key))
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// Whether the run exists, from its row's id alone: a wait for a key
		// never set looks at every backoff, and a whole read of a run with a
		// 15 MiB input cost 31 ms each (red team, round nineteen).
		var one int
		if err := s.pool.QueryRow(ctx, s.q.runExists, runID).Scan(&one); err != nil {
			return fmt.Errorf("run %q: %w", runID, err)
		}
		return errNoRunEvent
	})
	switch {
	case errors.Is(err, errNoRunEvent):
		return nil, fmt.Errorf("run %s has no event %q: %w", runID, key, store.ErrNotFound)
	case errors.Is(err, store.ErrNotFound): // no run
		return nil, fmt.Errorf("get run event %q: %w", key, err)
	}
	if err != nil {
		return nil, fmt.Errorf("get run event: %w", err)
	}
	return ev, nil
}

// ListRunEventsPage returns a page of run p.RunID's run events, values
// over store.MaxInlineEventValue left unread (sqlrow.RunEventPageSQL).
func (s *Store) ListRunEventsPage(ctx context.Context, p *store.ListRunEventsParams) (*store.RunEventPage, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("list run events: %w", err)
	}
	p = p.WithDefaults()
	var page *store.RunEventPage
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		b := &pgx.Batch{}
		b.Queue(s.q.runExists, p.RunID)
		b.Queue(s.q.runEventPage, p.RunID, p.After, p.Limit)
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
		var evs []*store.RunEvent
		for rows.Next() {
			ev, err := sqlrow.ScanRunEventPage(rows, p.RunID)
			if err != nil {
				return err
			}
			evs = append(evs, ev)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		page = sqlrow.RunEventPage(evs, p.Limit)
		return br.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("list run events: %w", err)
	}
	return page, nil
}

// CountMessages returns what run runID's log says of its messages, no
// payload read (sqlrow.MessageCountsSQL).
func (s *Store) CountMessages(ctx context.Context, runID string) (*store.MessageCounts, error) {
	if err := store.CheckRunID(runID); err != nil {
		return nil, fmt.Errorf("count messages: %w", err)
	}
	var c *store.MessageCounts
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		c = &store.MessageCounts{}
		b := &pgx.Batch{}
		b.Queue(s.q.runExists, runID)
		b.Queue(s.q.messageCounts, runID)
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
			if err := sqlrow.AddMessageCount(c, rows); err != nil {
				return err
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return br.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("count messages: %w", err)
	}
	return c, nil
}

// ListRunEvents returns run runID's events' latest values, by key.
func (s *Store) ListRunEvents(ctx context.Context, runID string) ([]*store.RunEvent, error) {
	if err := store.CheckRunID(runID); err != nil {
		return nil, fmt.Errorf("list run events: %w", err)
	}
	var out []*store.RunEvent
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, `SELECT `+sqlrow.RunEventCols+` FROM `+s.q.schema+`.run_events
			WHERE run_id = $1 ORDER BY key`, runID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			ev, err := sqlrow.ScanRunEvent(rows)
			if err != nil {
				return err
			}
			out = append(out, ev)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list run events: %w", err)
	}
	return out, nil
}
