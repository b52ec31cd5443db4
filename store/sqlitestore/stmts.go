package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

const runCols = `id, workflow, status, input, output, error, created_at, updated_at,
	wake_at, lease_owner, lease_expires, lease_epoch, cancel_requested`

const streamCols = `id, path, COALESCE(run_id, ''), name, content_type, next_offset, closed, created_at`

// wstmts are prepared once on the write connection: the committer runs them
// thousands of times a second.
type wstmts struct {
	begin, commit, rollback          *sql.Stmt
	savepoint, release, rollbackTo   *sql.Stmt
	streamHead, streamByPath         *sql.Stmt
	insertStream, setHead            *sql.Stmt
	writer, writerBatches, putWriter *sql.Stmt
	fence, putFence                  *sql.Stmt
	insertBatch                      *sql.Stmt
	run, runLease, insertRun         *sql.Stmt
	claim, renew, cancel, updateRun  *sql.Stmt
	lastEvent, insertEvent           *sql.Stmt
	writerStreams, openRunStreams    *sql.Stmt
	all                              []*sql.Stmt
}

func prepareWrite(ctx context.Context, conn *sql.Conn) (*wstmts, error) {
	w := &wstmts{}
	p := func(dst **sql.Stmt, q string) error {
		st, err := conn.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", q, err)
		}
		*dst = st
		w.all = append(w.all, st)
		return nil
	}
	err := errors.Join(
		p(&w.begin, `BEGIN IMMEDIATE`),
		p(&w.commit, `COMMIT`),
		p(&w.rollback, `ROLLBACK`),
		p(&w.savepoint, `SAVEPOINT op`),
		p(&w.release, `RELEASE op`),
		p(&w.rollbackTo, `ROLLBACK TO op`),

		p(&w.streamHead, `SELECT COALESCE(run_id, ''), next_offset, closed FROM streams WHERE id = ?`),
		p(&w.streamByPath, `SELECT `+streamCols+` FROM streams WHERE path = ?`),
		p(&w.insertStream, `INSERT INTO streams (path, run_id, name, content_type, created_at)
			VALUES (?, NULLIF(?, ''), ?, ?, ?) RETURNING `+streamCols),
		p(&w.setHead, `UPDATE streams SET next_offset = ?, closed = ? WHERE id = ?`),

		p(&w.writer, `SELECT attempt, next, diverged, status FROM writers WHERE stream_id = ? AND writer = ?`),
		p(&w.writerBatches, `SELECT first_offset, data FROM batches WHERE stream_id = ? AND writer = ? ORDER BY last_offset`),
		p(&w.putWriter, `INSERT INTO writers (stream_id, writer, attempt, next, diverged, status)
			VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (stream_id, writer) DO UPDATE SET attempt = excluded.attempt,
				next = excluded.next, diverged = excluded.diverged, status = excluded.status`),
		p(&w.fence, `SELECT attempt FROM fences WHERE run_id = ? AND writer = ?`),
		p(&w.putFence, `INSERT INTO fences (run_id, writer, attempt) VALUES (?, ?, ?)
			ON CONFLICT (run_id, writer) DO UPDATE SET attempt = max(attempt, excluded.attempt)`),
		p(&w.insertBatch, `INSERT INTO batches (stream_id, last_offset, first_offset, writer, data) VALUES (?, ?, ?, ?, ?)`),

		p(&w.run, `SELECT `+runCols+` FROM runs WHERE id = ?`),
		p(&w.runLease, `SELECT lease_epoch, lease_owner, status FROM runs WHERE id = ?`),
		p(&w.insertRun, `INSERT INTO runs (id, workflow, status, input, created_at, updated_at, wake_at)
			VALUES (?, ?, 'pending', ?, ?, ?, ?) RETURNING `+runCols),
		p(&w.claim, `UPDATE runs SET status = 'running', lease_owner = ?1, lease_expires = ?2,
				lease_epoch = lease_epoch + 1, updated_at = ?3
			WHERE seq IN (SELECT seq FROM runs
				WHERE status IN ('pending', 'running') AND wake_at <= ?3
					AND (lease_owner = '' OR lease_expires <= ?3)
				ORDER BY wake_at, seq LIMIT ?4)
			RETURNING `+runCols),
		p(&w.renew, `UPDATE runs SET lease_expires = ?, updated_at = ?
			WHERE id = ? AND lease_epoch = ? AND lease_owner != '' AND status IN ('pending', 'running')
			RETURNING cancel_requested`),
		p(&w.cancel, `UPDATE runs SET cancel_requested = 1, wake_at = 0, updated_at = ?
			WHERE id = ? AND status IN ('pending', 'running')`),
		p(&w.updateRun, `UPDATE runs SET
				status = CASE WHEN ?1 = '' THEN status ELSE ?1 END,
				output = CASE WHEN ?1 = '' THEN output ELSE ?2 END,
				error = CASE WHEN ?1 = '' THEN error ELSE ?3 END,
				lease_owner = CASE WHEN ?4 THEN '' ELSE lease_owner END,
				lease_expires = CASE WHEN ?4 THEN 0 ELSE lease_expires END,
				wake_at = CASE WHEN ?4 THEN ?5 ELSE wake_at END,
				updated_at = ?6
			WHERE id = ?7`),
		p(&w.lastEvent, `SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?`),
		p(&w.insertEvent, `INSERT INTO events (run_id, seq, type, op, name, attempt, data, error, final, at, wake_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		p(&w.writerStreams, `SELECT w.stream_id FROM writers w JOIN streams s ON s.id = w.stream_id
			WHERE s.run_id = ? AND w.writer = ? ORDER BY w.stream_id`),
		p(&w.openRunStreams, `SELECT id FROM streams WHERE run_id = ? AND closed = 0 ORDER BY id`),
	)
	if err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

func (w *wstmts) close() error {
	var errs []error
	for _, st := range w.all {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}

// rstmts run on the read pool.
type rstmts struct {
	run, events               *sql.Stmt
	stream, streamByPath      *sql.Stmt
	runStreams, head, batches *sql.Stmt
	runExists                 *sql.Stmt
	all                       []*sql.Stmt
}

func prepareRead(ctx context.Context, db *sql.DB) (*rstmts, error) {
	r := &rstmts{}
	p := func(dst **sql.Stmt, q string) error {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", q, err)
		}
		*dst = st
		r.all = append(r.all, st)
		return nil
	}
	err := errors.Join(
		p(&r.run, `SELECT `+runCols+` FROM runs WHERE id = ?`),
		p(&r.runExists, `SELECT 1 FROM runs WHERE id = ?`),
		p(&r.events, `SELECT seq, type, op, name, attempt, data, error, final, at, wake_at
			FROM events WHERE run_id = ? AND seq > ? ORDER BY seq`),
		p(&r.stream, `SELECT `+streamCols+` FROM streams WHERE id = ?`),
		p(&r.streamByPath, `SELECT `+streamCols+` FROM streams WHERE path = ?`),
		p(&r.runStreams, `SELECT `+streamCols+` FROM streams WHERE run_id = ? ORDER BY name`),
		p(&r.head, `SELECT next_offset, closed FROM streams WHERE id = ?`),
		p(&r.batches, `SELECT first_offset, data FROM batches WHERE stream_id = ? AND last_offset >= ? ORDER BY last_offset`),
	)
	if err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *rstmts) close() error {
	var errs []error
	for _, st := range r.all {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}
