package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/weirhq/weir/store/internal/sqlrow"
)

// stateCols are what the committer caches of a stream: an apply.Stream.
const stateCols = sqlrow.StateCols

// nextStreamID is the id a new stream gets: never one a deleted stream had.
const nextStreamID = `(SELECT max(COALESCE((SELECT max(id) FROM streams), 0),
	COALESCE((SELECT value FROM counters WHERE name = 'stream_id'), 0)) + 1)`

// wstmts are prepared once on the write connection: the committer runs them
// thousands of times a second.
type wstmts struct {
	begin, commit, rollback                     *sql.Stmt
	savepoint, release, rollbackTo              *sql.Stmt
	streamHead, streamByPath                    *sql.Stmt
	insertStream, setHead                       *sql.Stmt
	countStandalone                             *sql.Stmt
	writer, writerBatches, putWriter            *sql.Stmt
	fence, putFence                             *sql.Stmt
	insertBatch                                 *sql.Stmt
	run, runLease, insertRun                    *sql.Stmt
	foundRun                                    *sql.Stmt
	claim, claimLined, renew, cancel, updateRun *sql.Stmt
	insertEvent                                 *sql.Stmt
	hook, putHook, dropHookKeys                 *sql.Stmt
	hookKey, putHookKey                         *sql.Stmt
	messageKey, putMessageKey                   *sql.Stmt
	putRunEvent                                 *sql.Stmt
	writerStreams, openRunStreams               *sql.Stmt
	// Durable Streams
	createStream, setMeta, setForks    *sql.Stmt
	streamInfo, touch                  *sql.Stmt
	producer, putProducer              *sql.Stmt
	key, putKey, purgeKeys             *sql.Stmt
	attemptWriters, batchesBelow       *sql.Stmt
	batchesFrom                        *sql.Stmt
	delBatches, delWriters, delStream  *sql.Stmt
	delProducers, delKeys, bumpCounter *sql.Stmt
	all                                []*sql.Stmt
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

		p(&w.streamHead, `SELECT `+stateCols+` FROM streams WHERE id = ?`),
		p(&w.streamByPath, `SELECT `+sqlrow.StreamCols+` FROM streams WHERE path = ?`),
		p(&w.streamInfo, `SELECT `+sqlrow.StreamCols+` FROM streams WHERE id = ?`),
		p(&w.insertStream, `INSERT INTO streams (id, path, run_id, name, content_type, created_at, last_access)
			VALUES (`+nextStreamID+`, ?1, NULLIF(?2, ''), ?3, ?4, ?5, ?5) RETURNING `+sqlrow.StreamCols),
		p(&w.setHead, `UPDATE streams SET next_offset = ?, closed = ?, data_bytes = ? WHERE id = ?`),
		p(&w.countStandalone, `SELECT count(*) FROM streams WHERE run_id IS NULL AND deleted = 0`),

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

		// A run's head: see headCols.
		p(&w.run, `SELECT `+headCols+` FROM runs WHERE id = ?`),
		p(&w.foundRun, `SELECT `+foundRunCols+` FROM runs WHERE id = ?1`),
		p(&w.runLease, `SELECT lease_epoch, lease_owner, status, cancel_requested,
			(SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?1) FROM runs WHERE id = ?1`),
		// The input goes to run_data after (tx.insertRun).
		p(&w.insertRun, `INSERT INTO runs (id, workflow, status, created_at, updated_at, wake_at, parent_id,
				lease_owner, lease_expires, lease_epoch, trace_parent, version)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING `+runCols),
		p(&w.claim, `UPDATE runs SET status = 'running', lease_owner = ?1, lease_expires = ?2,
				lease_epoch = lease_epoch + 1, updated_at = ?3
			WHERE seq IN (SELECT seq FROM runs
				WHERE status IN ('pending', 'running') AND kind = '' AND wake_at <= ?3
					AND (lease_owner = '' OR lease_expires <= ?3)
					AND (?5 IS NULL OR workflow IN (SELECT value FROM json_each(?5)))
					AND (queued = 0 OR cancel_requested)
					AND (?6 IS NULL OR queue NOT IN (SELECT value FROM json_each(?6)))
					AND (?7 IS NULL OR version IN (SELECT value FROM json_each(?7)))
				ORDER BY wake_at, seq LIMIT ?4)
			RETURNING `+headCols),
		// Runs parked in a limiter's line (AdvanceParams.Lined), before
		// their wake time: a claim with room in its lines takes them first.
		p(&w.claimLined, `UPDATE runs SET status = 'running', lease_owner = ?1, lease_expires = ?2,
				lease_epoch = lease_epoch + 1, updated_at = ?3, line_priority = NULL, wake_at = ?3
			WHERE seq IN (SELECT seq FROM runs
				WHERE line_priority IS NOT NULL AND status IN ('pending', 'running') AND kind = '' AND wake_at > ?3
					AND (lease_owner = '' OR lease_expires <= ?3)
					AND (?5 IS NULL OR workflow IN (SELECT value FROM json_each(?5)))
					AND (queued = 0 OR cancel_requested)
					AND (?6 IS NULL OR queue NOT IN (SELECT value FROM json_each(?6)))
					AND (?7 IS NULL OR version IN (SELECT value FROM json_each(?7)))
				ORDER BY line_priority DESC, seq LIMIT ?4)
			RETURNING `+headCols),
		p(&w.renew, `UPDATE runs SET lease_expires = ?, updated_at = ?
			WHERE id = ? AND lease_epoch = ? AND lease_owner != '' AND status IN ('pending', 'running')
			RETURNING cancel_requested`),
		p(&w.cancel, `UPDATE runs SET cancel_requested = 1, wake_at = 0, updated_at = ?
			WHERE id = ? AND status IN ('pending', 'running')`),
		p(&w.updateRun, `UPDATE runs SET
				status = CASE WHEN ?1 = '' THEN status ELSE ?1 END,
				error = CASE WHEN ?1 = '' THEN error ELSE ?3 END,
				lease_owner = CASE WHEN ?4 THEN '' ELSE lease_owner END,
				lease_expires = CASE WHEN ?4 THEN 0 ELSE lease_expires END,
				wake_at = CASE WHEN ?4 THEN ?5 WHEN ?8 THEN ?6 ELSE wake_at END,
				awaits = CASE WHEN ?4 THEN ?9 ELSE awaits END,
				limiters = CASE WHEN ?4 OR ?1 != '' THEN ?10 ELSE limiters END,
				line_priority = CASE WHEN ?4 OR ?1 != '' THEN ?11 ELSE line_priority END,
				updated_at = ?6
			WHERE id = ?7`),
		p(&w.hook, `SELECT run_id, op, disposed, received, created_at FROM hooks WHERE token = ?`),
		p(&w.putHook, `INSERT INTO hooks (token, run_id, op, disposed, received, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
			ON CONFLICT (token) DO UPDATE SET run_id = ?2, op = ?3, disposed = ?4, received = ?5, created_at = ?6`),
		p(&w.dropHookKeys, `DELETE FROM hook_keys WHERE token = ?`),
		p(&w.hookKey, `SELECT digest, result, expires_at FROM hook_keys WHERE token = ? AND key = ?`),
		p(&w.putHookKey, `INSERT OR REPLACE INTO hook_keys (token, key, digest, result, expires_at) VALUES (?, ?, ?, ?, ?)`),
		p(&w.messageKey, `SELECT digest, result, expires_at FROM message_keys WHERE run_id = ? AND key = ?`),
		p(&w.putMessageKey, `INSERT OR REPLACE INTO message_keys (run_id, key, digest, result, expires_at) VALUES (?, ?, ?, ?, ?)`),
		p(&w.putRunEvent, `INSERT OR REPLACE INTO run_events (run_id, key, value, seq, at) VALUES (?, ?, ?, ?, ?)`),
		p(&w.insertEvent, `INSERT INTO events (run_id, seq, type, op, name, attempt, data, error, final, at, wake_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		p(&w.writerStreams, `SELECT w.stream_id FROM writers w JOIN streams s ON s.id = w.stream_id
			WHERE s.run_id = ? AND w.writer = ? ORDER BY w.stream_id`),
		p(&w.openRunStreams, `SELECT id FROM streams WHERE run_id = ? AND closed = 0 ORDER BY id`),

		p(&w.createStream, `INSERT INTO streams (id, path, name, content_type, created_at, last_access, ttl, expires_at,
				fork_source, fork_source_path, fork_offset, fork_sub_offset)
			VALUES (`+nextStreamID+`, ?1, '', ?2, ?3, ?3, ?4, ?5, ?6, ?7, ?8, ?9) RETURNING id`),
		p(&w.setMeta, `UPDATE streams SET last_access = ?, closed_by = ?, closed_by_epoch = ?, closed_by_seq = ?,
			stream_seq = ? WHERE id = ?`),
		p(&w.setForks, `UPDATE streams SET forks = ?, deleted = ? WHERE id = ?`),
		p(&w.touch, `UPDATE streams SET last_access = ? WHERE id = ?`),
		p(&w.producer, `SELECT epoch, last_seq FROM producers WHERE stream_id = ? AND producer = ?`),
		p(&w.putProducer, `INSERT INTO producers (stream_id, producer, epoch, last_seq) VALUES (?, ?, ?, ?)
			ON CONFLICT (stream_id, producer) DO UPDATE SET epoch = excluded.epoch, last_seq = excluded.last_seq`),
		p(&w.key, `SELECT digest, result, expires_at FROM idempotency_keys WHERE stream_id = ? AND key = ?`),
		p(&w.putKey, `INSERT INTO idempotency_keys (stream_id, key, digest, result, expires_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (stream_id, key) DO UPDATE SET digest = excluded.digest, result = excluded.result,
				expires_at = excluded.expires_at`),
		p(&w.purgeKeys, `DELETE FROM idempotency_keys WHERE id IN
			(SELECT id FROM idempotency_keys WHERE expires_at <= ? ORDER BY expires_at LIMIT 256)`),
		p(&w.attemptWriters, `SELECT writer FROM writers WHERE stream_id = ? AND attempt > 0`),
		p(&w.batchesBelow, `SELECT first_offset, last_offset, writer, data FROM batches
			WHERE stream_id = ? AND first_offset < ? AND last_offset > ? ORDER BY last_offset LIMIT 64`),
		p(&w.batchesFrom, `SELECT first_offset, data FROM batches WHERE stream_id = ? AND last_offset >= ? ORDER BY last_offset`),
		p(&w.delBatches, `DELETE FROM batches WHERE stream_id = ?`),
		p(&w.delWriters, `DELETE FROM writers WHERE stream_id = ?`),
		p(&w.delProducers, `DELETE FROM producers WHERE stream_id = ?`),
		p(&w.delKeys, `DELETE FROM idempotency_keys WHERE stream_id = ?`),
		p(&w.delStream, `DELETE FROM streams WHERE id = ?`),
		p(&w.bumpCounter, `INSERT INTO counters (name, value) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET value = max(value, excluded.value)`),
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
	standalone                *sql.Stmt
	hookInfo, runHooks        *sql.Stmt
	runEvent, runEvents       *sql.Stmt
	runEventPage              *sql.Stmt
	messageCounts             *sql.Stmt
	runStreams, head, batches *sql.Stmt
	window                    *sql.Stmt
	runExists, eventPage      *sql.Stmt
	runWithin, foundRun       *sql.Stmt
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
		p(&r.foundRun, `SELECT `+foundRunCols+` FROM runs WHERE id = ?1`),
		p(&r.runWithin, `SELECT `+runColsWithin("?2", "length(CAST(error AS BLOB))")+` FROM runs WHERE id = ?1`),
		p(&r.eventPage, sqlrow.EventPageSQL("events", "?1", "?2", "?3", "?4", "?5")),
		p(&r.events, `SELECT seq, type, op, name, attempt, data, error, final, at, wake_at
			FROM events WHERE run_id = ? AND seq > ? ORDER BY seq`),
		p(&r.stream, `SELECT `+sqlrow.StreamCols+` FROM streams WHERE id = ?`),
		p(&r.streamByPath, `SELECT `+sqlrow.StreamCols+` FROM streams WHERE path = ?`),
		p(&r.runStreams, `SELECT `+sqlrow.StreamCols+` FROM streams WHERE run_id = ? ORDER BY name`),
		p(&r.hookInfo, `SELECT `+sqlrow.HookCols+` FROM hooks WHERE token = ?`),
		p(&r.runHooks, `SELECT `+sqlrow.HookCols+` FROM hooks WHERE run_id = ? ORDER BY op, token`),
		p(&r.runEvent, `SELECT `+sqlrow.RunEventCols+` FROM run_events WHERE run_id = ? AND key = ?`),
		p(&r.runEvents, `SELECT `+sqlrow.RunEventCols+` FROM run_events WHERE run_id = ? ORDER BY key`),
		// Keys compare by their bytes (BINARY), the primary key's order.
		p(&r.runEventPage, sqlrow.RunEventPageSQL("run_events", "key", "?1", "?2", "?3")),
		p(&r.messageCounts, sqlrow.MessageCountsSQL("events", "?1")),
		p(&r.standalone, `SELECT `+sqlrow.StreamCols+` FROM streams
			WHERE run_id IS NULL AND deleted = 0 AND path >= ? ORDER BY path LIMIT ?`),
		p(&r.head, `SELECT next_offset, closed FROM streams WHERE id = ?`),
		// A read's batches from offset ?2, below its head (?6), each a
		// window of at most ?5 bytes: from byte ?4 of the batch whose last
		// offset is ?3 (a hint: sqlrow.Hints), else from its start; a batch
		// that begins before ?2 without a hint, whole (its records before
		// ?2 are skipped in one query: SQLite reads a blob whole for
		// substr, pread by pread). length reads no blob.
		p(&r.batches, `SELECT first_offset, last_offset, length(data),
				CASE WHEN last_offset = ?3 THEN ?4 ELSE 0 END,
				substr(data, CASE WHEN last_offset = ?3 THEN ?4 ELSE 0 END + 1,
					CASE WHEN last_offset <> ?3 AND first_offset < ?2 THEN length(data) ELSE ?5 END)
			FROM batches WHERE stream_id = ?1 AND last_offset >= ?2 AND first_offset < ?6 ORDER BY last_offset`),
		// window is ?4 bytes of a batch from byte ?3 (0-based).
		p(&r.window, `SELECT substr(data, ?3 + 1, ?4) FROM batches WHERE stream_id = ?1 AND last_offset = ?2`),
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
