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

// Messages and run events: the rules are package apply's (SendMessage,
// and Record's event_set events); wtx loads and saves for them.

var _ apply.MessageTx = (*wtx)(nil)

// MessageKey loads what a message with key to run left, nil if nothing.
func (tx *wtx) MessageKey(run, key string) (*apply.Key, error) {
	k := &apply.Key{}
	var expires int64
	err := tx.w.messageKey.QueryRowContext(bg, run, key).Scan(&k.Digest, &k.Result, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load message key: %w", translate(err))
	}
	k.ExpiresAt = sqlrow.Time(expires)
	return k, nil
}

// RunInbox reads run's inbox counters.
func (tx *wtx) RunInbox(run string) (int64, int64, error) {
	st, err := tx.stmt(`SELECT inbox, inbox_bytes FROM runs WHERE id = ?`)
	if err != nil {
		return 0, 0, err
	}
	var n, b int64
	if err := st.QueryRowContext(bg, run).Scan(&n, &b); err != nil {
		return 0, 0, fmt.Errorf("run inbox: %w", translate(err))
	}
	return n, b, nil
}

// AddInbox counts n more messages or hook payloads, of bytes, to run.
func (tx *wtx) AddInbox(run string, n, bytes int64) error {
	st, err := tx.stmt(`UPDATE runs SET inbox = inbox + ?, inbox_bytes = inbox_bytes + ? WHERE id = ?`)
	if err != nil {
		return err
	}
	tx.changed = true
	if _, err := st.ExecContext(bg, n, bytes, run); err != nil {
		return fmt.Errorf("count inbox: %w", translate(err))
	}
	return nil
}

// Awaits returns what messages wake run while parked.
func (tx *wtx) Awaits(run string) (*store.Awaits, error) {
	st, err := tx.stmt(`SELECT awaits FROM runs WHERE id = ?`)
	if err != nil {
		return nil, err
	}
	var a sql.NullString
	if err := st.QueryRowContext(bg, run).Scan(&a); err != nil {
		return nil, fmt.Errorf("run awaits: %w", translate(err))
	}
	return sqlrow.DecodeAwaits(a.String, a.Valid), nil
}

// SaveMessageKey stores what a message with key left.
func (tx *wtx) SaveMessageKey(run, key string, k *apply.Key) error {
	tx.changed = true
	if _, err := tx.w.putMessageKey.ExecContext(bg, run, key, k.Digest, k.Result, sqlrow.Nanos(k.ExpiresAt)); err != nil {
		return fmt.Errorf("save message key: %w", translate(err))
	}
	return nil
}

// SaveRunEvent makes ev its key's latest value.
func (tx *wtx) SaveRunEvent(run *apply.Run, ev *store.Event) error {
	tx.changed = true
	if _, err := tx.w.putRunEvent.ExecContext(bg, run.ID, ev.Name, ev.Data, ev.Seq, sqlrow.Nanos(ev.At)); err != nil {
		return fmt.Errorf("save run event: %w", translate(err))
	}
	tx.runs = append(tx.runs, run.ID) // its waiters wake (store.RunWatcher)
	return nil
}

// SendMessage sends a message to a run (apply.SendMessage).
func (s *Store) SendMessage(ctx context.Context, p *store.SendMessageParams) (*store.MessageSent, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("send message: %w", err)
	}
	p = p.WithDefaults(s.cfg.Now)
	var res *store.MessageSent
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		res, err = apply.SendMessage(tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("send message: %w", err)
	}
	return res, nil
}

// GetRunEvent returns the latest value run runID set for key.
func (s *Store) GetRunEvent(ctx context.Context, runID, key string) (*store.RunEvent, error) {
	if err := store.CheckRunID(runID); err != nil {
		return nil, fmt.Errorf("get run event: %w", err)
	}
	if err := store.CheckTopic("run event key", key); err != nil {
		return nil, fmt.Errorf("get run event: %w", err)
	}
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	ev, err := sqlrow.ScanRunEvent(s.r.runEvent.QueryRowContext(ctx, runID, key))
	if errors.Is(err, sql.ErrNoRows) {
		// Whether the run exists, from its row's id alone: a wait for a key
		// never set looks at every backoff, and a whole read of a run with a
		// 15 MiB input cost 31 ms each (red team, round nineteen).
		var one int
		if err := s.r.runExists.QueryRowContext(ctx, runID).Scan(&one); err != nil {
			return nil, fmt.Errorf("get run event %q: run %q: %w", key, runID, s.readErr(err))
		}
		return nil, fmt.Errorf("run %s has no event %q: %w", runID, key, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get run event: %w", s.readErr(err))
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
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	var one int
	if err := s.r.runExists.QueryRowContext(ctx, p.RunID).Scan(&one); err != nil {
		return nil, fmt.Errorf("list run events: run %q: %w", p.RunID, s.readErr(err))
	}
	rows, err := s.r.runEventPage.QueryContext(ctx, p.RunID, p.After, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list run events: %w", s.readErr(err))
	}
	defer rows.Close()
	var evs []*store.RunEvent
	for rows.Next() {
		ev, err := sqlrow.ScanRunEventPage(rows, p.RunID)
		if err != nil {
			return nil, fmt.Errorf("list run events: %w", s.readErr(err))
		}
		evs = append(evs, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list run events: %w", s.readErr(err))
	}
	return sqlrow.RunEventPage(evs, p.Limit), nil
}

// CountMessages returns what run runID's log says of its messages, no
// payload read (sqlrow.MessageCountsSQL).
func (s *Store) CountMessages(ctx context.Context, runID string) (*store.MessageCounts, error) {
	if err := store.CheckRunID(runID); err != nil {
		return nil, fmt.Errorf("count messages: %w", err)
	}
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	var one int
	if err := s.r.runExists.QueryRowContext(ctx, runID).Scan(&one); err != nil {
		return nil, fmt.Errorf("count messages: run %q: %w", runID, s.readErr(err))
	}
	rows, err := s.r.messageCounts.QueryContext(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("count messages: %w", s.readErr(err))
	}
	defer rows.Close()
	c := &store.MessageCounts{}
	for rows.Next() {
		if err := sqlrow.AddMessageCount(c, rows); err != nil {
			return nil, fmt.Errorf("count messages: %w", s.readErr(err))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count messages: %w", s.readErr(err))
	}
	return c, nil
}

// ListRunEvents returns run runID's events' latest values, by key.
func (s *Store) ListRunEvents(ctx context.Context, runID string) ([]*store.RunEvent, error) {
	if err := store.CheckRunID(runID); err != nil {
		return nil, fmt.Errorf("list run events: %w", err)
	}
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	rows, err := s.r.runEvents.QueryContext(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("list run events: %w", s.readErr(err))
	}
	defer rows.Close()
	var out []*store.RunEvent
	for rows.Next() {
		ev, err := sqlrow.ScanRunEvent(rows)
		if err != nil {
			return nil, fmt.Errorf("list run events: %w", s.readErr(err))
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list run events: %w", s.readErr(err))
	}
	return out, nil
}
