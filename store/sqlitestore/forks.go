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
	"github.com/weirhq/weir/stream"
)

// Forks and resumes (store.Forks): the rules are package apply's (ForkRun,
// ResumeRun); this holds the SQL.

var (
	_ apply.ForkTx   = (*wtx)(nil)
	_ apply.ResumeTx = (*wtx)(nil)
)

// ForkRun forks a run from one of its operations.
func (s *Store) ForkRun(ctx context.Context, p *store.ForkRunParams) (*store.Run, bool, error) {
	if err := p.Check(); err != nil {
		return nil, false, fmt.Errorf("fork run: %w", err)
	}
	if s.isClosed() {
		return nil, false, store.ErrClosedStore
	}
	q := *p
	if q.Now.IsZero() {
		q.Now = s.cfg.Now()
	}
	var run *store.Run
	var created bool
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		run, created, err = apply.ForkRun(tx, &q)
		return err
	})
	if err == nil && !created { // a retry: the fork as the writer found it, without its data
		run, err = s.replyData(ctx, run)
	}
	if err != nil {
		return nil, false, fmt.Errorf("fork run: %w", err)
	}
	return run, created, nil
}

// ResumeRun makes a failed or cancelled run pending again.
func (s *Store) ResumeRun(ctx context.Context, p *store.ResumeRunParams) (*store.Run, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("resume run: %w", err)
	}
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	q := *p
	if q.Now.IsZero() {
		q.Now = s.cfg.Now()
	}
	var run *store.Run
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		run, err = apply.ResumeRun(tx, &q)
		return err
	})
	if err == nil { // read by the writer without its data
		run, err = s.replyData(ctx, run)
	}
	if err != nil {
		return nil, fmt.Errorf("resume run: %w", err)
	}
	return run, nil
}

// RunEvents returns run's log, in order.
func (tx *wtx) RunEvents(run string) ([]store.Event, error) {
	return tx.events(`SELECT `+sqlrow.EventCols+` FROM events WHERE run_id = ? ORDER BY seq`, run)
}

// events runs q, a query of events (sqlrow.ScanEvent), counting the data
// read (committer.dataRead).
func (tx *wtx) events(q string, args ...any) ([]store.Event, error) {
	st, err := tx.stmt(q)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(bg, args...)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []store.Event
	for rows.Next() {
		e, err := sqlrow.ScanEvent(rows)
		if err != nil {
			return nil, translate(err)
		}
		tx.c.dataRead.Add(int64(len(e.Data)))
		out = append(out, e)
	}
	return out, translate(rows.Err())
}

// InsertRun inserts p's run, pending, runnable at now.
func (tx *wtx) InsertRun(p *store.CreateRunParams, now time.Time) (*store.Run, error) {
	tx.changed = true
	n := sqlrow.Nanos(now)
	run, err := tx.insertRun(p, string(store.RunPending), n, n, "", 0, 0)
	if err != nil {
		return nil, fmt.Errorf("insert run: %w", err)
	}
	return run, nil
}

// insertRun inserts p's run as status, and its input in run_data.
func (tx *wtx) insertRun(p *store.CreateRunParams, status string, now, wake int64, owner string, expires, epoch int64) (*store.Run, error) {
	run, err := sqlrow.ScanRun(tx.w.insertRun.QueryRowContext(bg, p.ID, p.Workflow, status, now, now, wake, p.Parent,
		owner, expires, epoch, p.TraceParent, p.Version))
	if err != nil {
		return nil, translate(err)
	}
	if p.Input != nil {
		if err := tx.setInput(p.ID, p.Input); err != nil {
			return nil, err
		}
		run.Input = p.Input // RETURNING read run_data before it
	}
	return run, nil
}

// StreamsOfRun returns every stream of run, by id.
func (tx *wtx) StreamsOfRun(run string) ([]*store.StreamInfo, error) {
	st, err := tx.stmt(`SELECT ` + sqlrow.StreamCols + ` FROM streams WHERE run_id = ? ORDER BY id`)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(bg, run)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []*store.StreamInfo
	for rows.Next() {
		si, err := sqlrow.ScanStream(rows)
		if err != nil {
			return nil, translate(err)
		}
		out = append(out, si)
	}
	return out, translate(rows.Err())
}

// CreateRunStream creates run's stream name.
func (tx *wtx) CreateRunStream(run, name, contentType string, now time.Time) (*apply.Stream, error) {
	tx.changed = true
	si, err := sqlrow.ScanStream(tx.w.insertStream.QueryRowContext(bg, store.RunStreamPath(run, name), run, name, contentType, sqlrow.Nanos(now)))
	if err != nil {
		return nil, fmt.Errorf("create stream: %w", translate(err))
	}
	return tx.Stream(si.ID)
}

// Records calls fn with st's records below upTo, a page of batches at a
// time: the write connection does not step a query over batches while it
// inserts into them.
func (tx *wtx) Records(st *apply.Stream, upTo int64, fn func([]stream.Record) error) error {
	type batch struct {
		first, last int64
		data        []byte
	}
	var page []batch
	var recs []stream.Record
	for after := int64(-1); ; {
		page = page[:0]
		rows, err := tx.w.batchesBelow.QueryContext(bg, st.ID, upTo, after)
		if err != nil {
			return translate(err)
		}
		for rows.Next() {
			var b batch
			var w string
			if err := rows.Scan(&b.first, &b.last, &w, &b.data); err != nil {
				rows.Close()
				return translate(err)
			}
			page = append(page, b)
		}
		if err := rows.Close(); err != nil {
			return translate(err)
		}
		if len(page) == 0 {
			return nil
		}
		after = page[len(page)-1].last
		for _, b := range page {
			if recs, err = stream.DecodeBatch(recs[:0], b.data, b.first, b.first); err != nil {
				return err
			}
			if err := fn(recs); err != nil {
				return err
			}
		}
	}
}

// ReviveRun makes run id pending again.
func (tx *wtx) ReviveRun(id string, now time.Time) (*store.Run, error) {
	if err := tx.setOutput(id, nil); err != nil {
		return nil, err
	}
	row, err := tx.row(`UPDATE runs SET status = 'pending', error = '', lease_owner = '', lease_expires = 0,
			wake_at = ?2, cancel_requested = 0, updated_at = ?2
		WHERE id = ?1 RETURNING `+headCols, id, sqlrow.Nanos(now))
	if err != nil {
		return nil, err
	}
	tx.changed = true
	run, err := tx.scanRun(row) // its input after the commit (ResumeRun)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("run %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, translate(err)
	}
	return run, nil
}
