package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/internal/sqlrow"
	"github.com/weirhq/weir/world"
)

// The World's queue (store.WorldStore): a message is a world_queue row,
// pending until a delivery settles it done (deleted) or dead. A claim leases
// it, with FOR UPDATE SKIP LOCKED so that deliverers in many processes never
// wait on one another; lease_until hides it from the next claims until the
// lease ends. Each statement is its own transaction. An enqueue, a
// reschedule or a redelivery wakes the watchers of every process through
// the stores' NOTIFY channel, as a stream's append does (store.QueueWake).

type queueQueries struct {
	enqueue, messageByID, messageByKey, setTarget, claimMessages, settleDone, settleDead        string
	settleFailed, settleLater, settleBack, messages, redeliver, nextDue, renewMessage, coalesce string
}

func (q *queueQueries) set(set func(*string, string)) {
	cols := sqlrow.MessageCols
	set(&q.enqueue, `INSERT INTO $S.world_queue (id, queue_name, kind, payload, target, idempotency_key, deployment_id,
			run_id, state, deliver_at, created_at) VALUES ($1, $2, $10, $3, $4, $5, $6, $7, 'pending', $8, $9)
		ON CONFLICT DO NOTHING RETURNING `+cols)
	set(&q.messageByID, `SELECT `+cols+` FROM $S.world_queue WHERE id = $1`)
	set(&q.messageByKey, `SELECT `+cols+` FROM $S.world_queue
		WHERE queue_name = $1 AND idempotency_key = $2 AND state = 'pending'`)
	set(&q.setTarget, `UPDATE $S.world_runs SET target = $2 WHERE run_id = $1 AND target <> $2`)
	set(&q.claimMessages, `UPDATE $S.world_queue SET lease = $1, lease_owner = $2, lease_until = $3, attempt = attempt + 1
		WHERE seq IN (SELECT seq FROM $S.world_queue WHERE state = 'pending' AND deliver_at <= $4 AND lease_until <= $4
			AND NOT (kind = 'workflow' AND run_id = ANY ($6::text[]))
			AND NOT (target = ANY ($7::text[]))
			ORDER BY deliver_at, seq LIMIT $5 FOR UPDATE SKIP LOCKED)
		RETURNING `+cols)
	const where = ` WHERE id = $1 AND lease = $2 AND state = 'pending'`
	const unlease = `lease = '', lease_owner = '', lease_until = 0`
	set(&q.settleDone, `DELETE FROM $S.world_queue`+where)
	set(&q.settleDead, `UPDATE $S.world_queue SET state = 'dead', failures = failures + 1, last_error = $3,
		first_failure = CASE first_failure WHEN 0 THEN $4 ELSE first_failure END, `+unlease+where)
	set(&q.settleFailed, `UPDATE $S.world_queue SET failures = failures + 1, last_error = $3, deliver_at = $5,
		first_failure = CASE first_failure WHEN 0 THEN $4 ELSE first_failure END, `+unlease+where)
	set(&q.settleLater, `UPDATE $S.world_queue SET failures = 0, first_failure = 0, last_error = '', deliver_at = $3, `+unlease+where)
	set(&q.settleBack, `UPDATE $S.world_queue SET attempt = attempt - 1, deliver_at = $3, `+unlease+where)
	set(&q.messages, `SELECT `+cols+` FROM $S.world_queue WHERE state = $1 AND ($3 = '' OR run_id = $3) ORDER BY seq LIMIT $2`)
	// A key another pending message took since is dropped.
	set(&q.redeliver, `UPDATE $S.world_queue m SET state = 'pending', failures = 0, first_failure = 0, deliver_at = $2,
			idempotency_key = CASE WHEN EXISTS (SELECT 1 FROM $S.world_queue o WHERE o.state = 'pending'
				AND o.queue_name = m.queue_name AND o.idempotency_key = m.idempotency_key AND o.idempotency_key <> '')
				THEN '' ELSE m.idempotency_key END
		WHERE id = $1 AND state = 'dead'`)
	set(&q.coalesce, `DELETE FROM $S.world_queue WHERE run_id = $1 AND kind = 'workflow' AND state = 'pending'
		AND deliver_at < $2 AND lease_until <= $3`)
	set(&q.renewMessage, `UPDATE $S.world_queue SET lease_until = $3 WHERE id = $1 AND lease = $2 AND state = 'pending'`)
	set(&q.nextDue, `SELECT MIN(GREATEST(deliver_at, lease_until)) FROM $S.world_queue WHERE state = 'pending'`)
}

// Enqueue stores a message, or returns the pending one with its key.
func (s *Store) Enqueue(ctx context.Context, p *store.EnqueueParams) (*store.Message, bool, error) {
	if err := p.Check(); err != nil {
		return nil, false, fmt.Errorf("enqueue: %w", err)
	}
	now := p.Now
	if now.IsZero() {
		now = s.cfg.Now()
	}
	var msg *store.Message
	var created bool
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		t.committing = true
		kind, _ := world.QueueKind(p.QueueName)
		ms, err := queryRows(ctx, s, s.q.enqueue, []any{p.ID, p.QueueName, []byte(p.Payload), p.Target, p.IdempotencyKey,
			p.DeploymentID, p.RunID, sqlrow.Nanos(now.Add(p.Delay)), sqlrow.Nanos(now), kind})
		if err != nil {
			return err
		}
		if len(ms) == 1 {
			msg, created = ms[0], true
		} else {
			// Taken: by this id (a retry, perhaps of a try whose reply
			// was lost), or by the key.
			if ms, err = queryRows(ctx, s, s.q.messageByID, []any{p.ID}); err != nil {
				return err
			}
			if len(ms) == 1 {
				msg = ms[0]
			} else if p.IdempotencyKey != "" {
				if ms, err = queryRows(ctx, s, s.q.messageByKey, []any{p.QueueName, p.IdempotencyKey}); err != nil {
					return err
				}
				if len(ms) == 0 {
					return &retryError{"the message holding the key is gone"}
				}
				msg, created = ms[0], false
			}
		}
		if created && p.RunID != "" {
			// The app's URL, for a message weir itself sends the run (a
			// cancel from weir's API).
			_, err = s.pool.Exec(ctx, s.q.setTarget, p.RunID, p.Target)
		}
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("enqueue: %w", err)
	}
	s.wrote(store.QueueWake) // also for a retry: its lost try's wake was not sent
	return msg, created, nil
}

// queryRows runs one statement of messages on the pool.
func queryRows(ctx context.Context, s *Store, sql string, args []any) ([]*store.Message, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.Message, error) { return sqlrow.ScanMessage(r) })
}

// ClaimMessages leases due messages. A claim whose reply was lost leaves
// its messages leased until the lease ends: they are delivered late, never
// twice at once.
func (s *Store) ClaimMessages(ctx context.Context, p *store.ClaimMessagesParams) ([]*store.Message, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("claim messages: %w", err)
	}
	now := p.Now
	if now.IsZero() {
		now = s.cfg.Now()
	}
	var out []*store.Message
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		t.committing = true
		var err error
		out, err = queryRows(ctx, s, s.q.claimMessages, []any{s.ids.New("lse"), p.Owner, sqlrow.Nanos(now.Add(p.Lease)),
			sqlrow.Nanos(now), p.Limit, append([]string{}, p.SkipRuns...), append([]string{}, p.SkipTargets...)})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim messages: %w", err)
	}
	slices.SortFunc(out, func(a, b *store.Message) int { return a.DeliverAt.Compare(b.DeliverAt) })
	return out, nil
}

// SettleMessage records a delivery's outcome. A retry whose last try's
// reply was lost finds nothing under the lease: it is taken as done.
func (s *Store) SettleMessage(ctx context.Context, p *store.SettleParams) error {
	now := p.Now
	if now.IsZero() {
		now = s.cfg.Now()
	}
	var sql string
	args := []any{p.ID, p.Lease}
	switch {
	case p.Done:
		sql = s.q.settleDone
	case p.Dead:
		sql, args = s.q.settleDead, append(args, p.LastError, sqlrow.Nanos(now))
	case p.Failed:
		sql, args = s.q.settleFailed, append(args, p.LastError, sqlrow.Nanos(now), sqlrow.Nanos(p.DeliverAt))
	case p.Back:
		sql, args = s.q.settleBack, append(args, sqlrow.Nanos(p.DeliverAt))
	default:
		sql, args = s.q.settleLater, append(args, sqlrow.Nanos(p.DeliverAt))
	}
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		t.committing = true
		ct, err := s.pool.Exec(ctx, sql, args...)
		if err != nil {
			return err
		}
		if ct.RowsAffected() == 0 && t.n == 0 {
			return fmt.Errorf("message %q: %w", p.ID, store.ErrLeaseLost)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("settle message: %w", err)
	}
	if !p.Done && !p.Dead {
		s.wrote(store.QueueWake)
	}
	return nil
}

// Messages lists messages of one state.
func (s *Store) Messages(ctx context.Context, p *store.MessagesParams) ([]*store.Message, error) {
	p, err := p.Check()
	if err != nil {
		return nil, fmt.Errorf("messages: %w", err)
	}
	var out []*store.Message
	err = s.do(ctx, true, func(ctx context.Context, t *try) error {
		reserve := p.Reserving()
		rows, err := s.pool.Query(ctx, s.q.messages, p.State, p.Limit, p.RunID)
		if err != nil {
			return err
		}
		defer rows.Close()
		out = out[:0]
		for rows.Next() {
			m, err := sqlrow.ScanMessage(rows)
			if err == nil {
				err = reserve(m)
			}
			if errors.Is(err, store.ErrPageFull) {
				return nil // the list is full: what it holds is the list
			}
			if err != nil {
				return err
			}
			out = append(out, m)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("messages: %w", err)
	}
	return out, nil
}

// RedeliverMessage makes a dead message pending again.
func (s *Store) RedeliverMessage(ctx context.Context, id string) error {
	now := sqlrow.Nanos(s.cfg.Now())
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		t.committing = true
		ct, err := s.pool.Exec(ctx, s.q.redeliver, id, now)
		if err != nil {
			return err
		}
		if ct.RowsAffected() == 0 && t.n == 0 {
			return fmt.Errorf("dead message %q: %w", id, store.ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redeliver message: %w", err)
	}
	s.wrote(store.QueueWake)
	return nil
}

// NextMessageDue returns when the next pending message is claimable.
func (s *Store) NextMessageDue(ctx context.Context) (time.Time, error) {
	var due *int64
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		return s.pool.QueryRow(ctx, s.q.nextDue).Scan(&due)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("next message due: %w", err)
	}
	if due == nil {
		return time.Time{}, nil
	}
	return sqlrow.Time(*due), nil
}

// WatchMessages watches for messages becoming due, here or in another
// process of the store.
func (s *Store) WatchMessages(ctx context.Context) (<-chan struct{}, func()) {
	s.lis.ensure(ctx)
	w := s.hub.Subscribe(store.QueueWake)
	return w.C, func() { s.hub.Unsubscribe(store.QueueWake, w) }
}

// CoalesceMessages deletes a run's redundant workflow messages.
func (s *Store) CoalesceMessages(ctx context.Context, p *store.CoalesceParams) (int, error) {
	now := p.Now
	if now.IsZero() {
		now = s.cfg.Now()
	}
	var n int64
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		t.committing = true
		ct, err := s.pool.Exec(ctx, s.q.coalesce, p.RunID, sqlrow.Nanos(p.Before), sqlrow.Nanos(now))
		n = ct.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("coalesce messages: %w", err)
	}
	return int(n), nil
}

// RenewMessage extends a delivery's lease.
func (s *Store) RenewMessage(ctx context.Context, p *store.RenewMessageParams) error {
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		t.committing = true
		ct, err := s.pool.Exec(ctx, s.q.renewMessage, p.ID, p.Lease, sqlrow.Nanos(p.Until))
		if err != nil {
			return err
		}
		if ct.RowsAffected() == 0 {
			return fmt.Errorf("message %q: %w", p.ID, store.ErrLeaseLost)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("renew message: %w", err)
	}
	return nil
}
