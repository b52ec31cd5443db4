package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/weirhq/weir/stream"
)

// migrations are applied in order; migration i brings the file to
// user_version i+1. Never edit one that has shipped: append a new one.
//
// Times are unix nanoseconds, 0 for none. Offsets are implicit in batches: a
// row holds the records first_offset..last_offset of one append, encoded by
// stream.EncodeBatch. Each batch comes from one writer (or none), which lets a
// writer's live records be rebuilt without decoding other writers' rows.
var migrations = []string{
	`
CREATE TABLE runs (
	seq              INTEGER PRIMARY KEY, -- creation order
	id               TEXT    NOT NULL UNIQUE,
	workflow         TEXT    NOT NULL,
	status           TEXT    NOT NULL,
	input            BLOB,
	output           BLOB,
	error            TEXT    NOT NULL DEFAULT '',
	created_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL,
	wake_at          INTEGER NOT NULL DEFAULT 0,
	lease_owner      TEXT    NOT NULL DEFAULT '',
	lease_expires    INTEGER NOT NULL DEFAULT 0,
	lease_epoch      INTEGER NOT NULL DEFAULT 0,
	cancel_requested INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX runs_runnable ON runs (wake_at, seq) WHERE status IN ('pending', 'running');
CREATE INDEX runs_workflow ON runs (workflow, seq);
CREATE INDEX runs_status ON runs (status, seq);

-- A rowid table: step outputs can be large (see batches).
CREATE TABLE events (
	id      INTEGER PRIMARY KEY,
	run_id  TEXT    NOT NULL REFERENCES runs (id),
	seq     INTEGER NOT NULL,
	type    TEXT    NOT NULL,
	op      INTEGER NOT NULL,
	name    TEXT    NOT NULL,
	attempt INTEGER NOT NULL,
	data    BLOB,
	error   TEXT    NOT NULL,
	final   INTEGER NOT NULL,
	at      INTEGER NOT NULL,
	wake_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX events_run ON events (run_id, seq);

CREATE TABLE streams (
	id           INTEGER PRIMARY KEY,
	path         TEXT    NOT NULL UNIQUE,
	run_id       TEXT    REFERENCES runs (id), -- NULL: standalone
	name         TEXT    NOT NULL,
	content_type TEXT    NOT NULL,
	next_offset  INTEGER NOT NULL DEFAULT 0,
	closed       INTEGER NOT NULL DEFAULT 0,
	created_at   INTEGER NOT NULL
);
CREATE INDEX streams_run ON streams (run_id, name) WHERE run_id IS NOT NULL;

-- The persisted part of stream.Writer; Live is rebuilt from batches.
CREATE TABLE writers (
	stream_id INTEGER NOT NULL REFERENCES streams (id),
	writer    TEXT    NOT NULL,
	attempt   INTEGER NOT NULL,
	next      INTEGER NOT NULL,
	diverged  INTEGER NOT NULL,
	status    INTEGER NOT NULL,
	PRIMARY KEY (stream_id, writer)
) WITHOUT ROWID;

CREATE TABLE fences (
	run_id  TEXT    NOT NULL REFERENCES runs (id),
	writer  TEXT    NOT NULL,
	attempt INTEGER NOT NULL,
	PRIMARY KEY (run_id, writer)
) WITHOUT ROWID;

-- A rowid table, not WITHOUT ROWID: rows are large, and an index b-tree
-- whose cells overflow reads whole rows to compare keys on every insert.
-- Indexed by last_offset so that "the batches holding offsets >= from" is one
-- range seek; first_offset grows with it.
CREATE TABLE batches (
	id           INTEGER PRIMARY KEY,
	stream_id    INTEGER NOT NULL REFERENCES streams (id),
	last_offset  INTEGER NOT NULL,
	first_offset INTEGER NOT NULL,
	writer       TEXT    NOT NULL, -- before data: filtering on it skips the blob
	data         BLOB    NOT NULL
);
CREATE UNIQUE INDEX batches_stream ON batches (stream_id, last_offset);
`,
	// 2: the Durable Streams protocol's metadata of standalone streams,
	// idempotent producers, idempotency keys, and stream ids that deleted
	// streams never give back.
	`
ALTER TABLE streams ADD COLUMN ttl INTEGER;                       -- nanoseconds; NULL: no sliding TTL
ALTER TABLE streams ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE streams ADD COLUMN last_access INTEGER NOT NULL DEFAULT 0;
ALTER TABLE streams ADD COLUMN closed_by TEXT;                    -- producer id; NULL: none
ALTER TABLE streams ADD COLUMN closed_by_epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE streams ADD COLUMN closed_by_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE streams ADD COLUMN stream_seq TEXT NOT NULL DEFAULT '';
ALTER TABLE streams ADD COLUMN fork_source INTEGER;               -- NULL: not a fork
ALTER TABLE streams ADD COLUMN fork_source_path TEXT NOT NULL DEFAULT '';
ALTER TABLE streams ADD COLUMN fork_offset INTEGER NOT NULL DEFAULT 0;
ALTER TABLE streams ADD COLUMN fork_sub_offset INTEGER NOT NULL DEFAULT 0;
ALTER TABLE streams ADD COLUMN forks INTEGER NOT NULL DEFAULT 0;
ALTER TABLE streams ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0;

CREATE TABLE producers (
	stream_id INTEGER NOT NULL REFERENCES streams (id),
	producer  TEXT    NOT NULL,
	epoch     INTEGER NOT NULL,
	last_seq  INTEGER NOT NULL,
	PRIMARY KEY (stream_id, producer)
) WITHOUT ROWID;

-- A rowid table: a stored result holds one ack per chunk and can be large.
CREATE TABLE idempotency_keys (
	id         INTEGER PRIMARY KEY,
	stream_id  INTEGER NOT NULL REFERENCES streams (id),
	key        TEXT    NOT NULL,
	digest     BLOB    NOT NULL,
	result     BLOB    NOT NULL,
	expires_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX idempotency_keys_stream ON idempotency_keys (stream_id, key);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

-- High-water marks: 'stream_id' is the largest stream id ever given, so that
-- a deleted stream's id is never given again (a plain rowid table would
-- reuse the largest one).
CREATE TABLE counters (
	name  TEXT    PRIMARY KEY,
	value INTEGER NOT NULL
) WITHOUT ROWID;
`,
	// 3: retention (PurgeRuns) finds finished runs by when they ended; a
	// finished run's updated_at never changes again.
	`
CREATE INDEX runs_ended ON runs (updated_at) WHERE status IN ('completed', 'failed', 'cancelled');
`,
	// 4: the World (package world): World runs are runs of kind 'world',
	// which no engine claims; their events, steps, hooks, waits, streams
	// by name and queue messages. Data columns hold the runtime's JSON as
	// it came.
	`
ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT '';
DROP INDEX runs_runnable;
CREATE INDEX runs_runnable ON runs (wake_at, seq) WHERE status IN ('pending', 'running') AND kind = '';

CREATE TABLE world_runs (
	run_id            TEXT    PRIMARY KEY REFERENCES runs (id),
	deployment_id     TEXT    NOT NULL,
	spec_version      INTEGER NOT NULL,
	execution_context BLOB,
	error_json        BLOB,
	started_at        INTEGER NOT NULL DEFAULT 0,
	completed_at      INTEGER NOT NULL DEFAULT 0,
	events            INTEGER NOT NULL DEFAULT 0, -- the slot of its last event
	target            TEXT    NOT NULL DEFAULT '' -- the app's URL, from its messages
) WITHOUT ROWID;

CREATE TABLE world_events (
	id             INTEGER PRIMARY KEY,
	run_id         TEXT    NOT NULL,
	slot           INTEGER NOT NULL,
	event_id       TEXT    NOT NULL,
	type           TEXT    NOT NULL,
	correlation_id TEXT    NOT NULL,
	data           BLOB,
	spec_version   INTEGER NOT NULL,
	created_at     INTEGER NOT NULL
);
CREATE UNIQUE INDEX world_events_slot ON world_events (run_id, slot);
CREATE UNIQUE INDEX world_events_id ON world_events (run_id, event_id);
CREATE INDEX world_events_correlation ON world_events (correlation_id, run_id, slot) WHERE correlation_id != '';

CREATE TABLE world_steps (
	seq          INTEGER PRIMARY KEY,
	run_id       TEXT    NOT NULL,
	step_id      TEXT    NOT NULL, -- unique in its run (world-local's steps/<run>-<step>)
	step_name    TEXT    NOT NULL,
	status       TEXT    NOT NULL,
	input        BLOB,
	output       BLOB,
	error_json   BLOB,
	attempt      INTEGER NOT NULL,
	started_at   INTEGER NOT NULL DEFAULT 0,
	completed_at INTEGER NOT NULL DEFAULT 0,
	created_at   INTEGER NOT NULL,
	updated_at   INTEGER NOT NULL,
	retry_after  INTEGER NOT NULL DEFAULT 0,
	spec_version INTEGER NOT NULL,
	closes       TEXT    NOT NULL DEFAULT '' -- JSON list: streams closed at the attempt's commit
);
CREATE UNIQUE INDEX world_steps_run ON world_steps (run_id, step_id);
CREATE INDEX world_steps_id ON world_steps (step_id);
CREATE INDEX world_steps_list ON world_steps (run_id, seq);

CREATE TABLE world_hooks (
	seq          INTEGER PRIMARY KEY,
	hook_id      TEXT    NOT NULL UNIQUE,
	run_id       TEXT    NOT NULL,
	token        TEXT    NOT NULL,
	metadata     BLOB,
	is_webhook   INTEGER NOT NULL,
	spec_version INTEGER NOT NULL,
	created_at   INTEGER NOT NULL -- a disposed hook's row is deleted: its id and token are free again
);
CREATE UNIQUE INDEX world_hooks_token ON world_hooks (token);
CREATE INDEX world_hooks_run ON world_hooks (run_id, seq);

CREATE TABLE world_waits (
	run_id       TEXT    NOT NULL,
	wait_id      TEXT    NOT NULL,
	status       TEXT    NOT NULL,
	resume_at    INTEGER NOT NULL DEFAULT 0,
	completed_at INTEGER NOT NULL DEFAULT 0,
	created_at   INTEGER NOT NULL,
	updated_at   INTEGER NOT NULL,
	spec_version INTEGER NOT NULL,
	PRIMARY KEY (run_id, wait_id)
) WITHOUT ROWID;

CREATE TABLE world_streams (
	name      TEXT    PRIMARY KEY,
	run_id    TEXT    NOT NULL,
	stream_id INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX world_streams_run ON world_streams (run_id, name);

CREATE TABLE world_queue (
	seq             INTEGER PRIMARY KEY,
	id              TEXT    NOT NULL UNIQUE,
	queue_name      TEXT    NOT NULL,
	kind            TEXT    NOT NULL, -- 'workflow' or 'step' (world.QueueKind)
	payload         BLOB    NOT NULL,
	target          TEXT    NOT NULL,
	idempotency_key TEXT    NOT NULL,
	deployment_id   TEXT    NOT NULL,
	run_id          TEXT    NOT NULL,
	state           TEXT    NOT NULL, -- 'pending' or 'dead'
	attempt         INTEGER NOT NULL DEFAULT 0,
	failures        INTEGER NOT NULL DEFAULT 0,
	deliver_at      INTEGER NOT NULL,
	first_failure   INTEGER NOT NULL DEFAULT 0,
	last_error      TEXT    NOT NULL DEFAULT '',
	lease           TEXT    NOT NULL DEFAULT '',
	lease_owner     TEXT    NOT NULL DEFAULT '',
	lease_until     INTEGER NOT NULL DEFAULT 0,
	created_at      INTEGER NOT NULL
);
CREATE UNIQUE INDEX world_queue_key ON world_queue (queue_name, idempotency_key) WHERE state = 'pending' AND idempotency_key != '';
CREATE INDEX world_queue_due ON world_queue (deliver_at, seq) WHERE state = 'pending';
CREATE INDEX world_queue_dead ON world_queue (seq) WHERE state = 'dead';
CREATE INDEX world_queue_run ON world_queue (run_id, kind) WHERE state = 'pending';
`,
	// 5: a stream's data bytes, for the byte limit (AppendParams.MaxBytes),
	// kept with its head; backfilled by backfillDataBytes. The index counts
	// standalone streams for CreateStreamParams.MaxStreams and lists them.
	`
ALTER TABLE streams ADD COLUMN data_bytes INTEGER NOT NULL DEFAULT 0;
CREATE INDEX streams_standalone ON streams (path) WHERE run_id IS NULL AND deleted = 0;
`,
	// 6: hooks (store.Store.CreateHook, DeliverHook): a token per row, the
	// run that holds it, and what deliveries with an idempotency key left.
	`
CREATE TABLE hooks (
	token      TEXT    PRIMARY KEY,
	run_id     TEXT    NOT NULL,
	op         INTEGER NOT NULL,
	disposed   INTEGER NOT NULL DEFAULT 0,
	received   INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX hooks_run ON hooks (run_id, op);

CREATE TABLE hook_keys (
	token      TEXT    NOT NULL,
	key        TEXT    NOT NULL,
	digest     BLOB    NOT NULL,
	result     BLOB    NOT NULL,
	expires_at INTEGER NOT NULL,
	PRIMARY KEY (token, key)
) WITHOUT ROWID;
`,
	// 7: child runs (weir.StartChild) know their parent.
	`
ALTER TABLE runs ADD COLUMN parent_id TEXT NOT NULL DEFAULT '';
`,
	// 8: messages to a run (store.Store.SendMessage): what sends with an
	// idempotency key left; and run events (weir.SetEvent): each key's
	// latest value, set by the Advance that writes its event_set event.
	`
CREATE TABLE message_keys (
	run_id     TEXT    NOT NULL,
	key        TEXT    NOT NULL,
	digest     BLOB    NOT NULL,
	result     BLOB    NOT NULL,
	expires_at INTEGER NOT NULL,
	PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

CREATE TABLE run_events (
	run_id TEXT    NOT NULL,
	key    TEXT    NOT NULL,
	value  BLOB    NOT NULL,
	seq    INTEGER NOT NULL,
	at     INTEGER NOT NULL,
	PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
`,
	// 9: a run's trace (store.Run.TraceParent), so that its executions in
	// any process are spans of one trace.
	`
ALTER TABLE runs ADD COLUMN trace_parent TEXT NOT NULL DEFAULT '';
`,
	// 10: limiters (store.Limits): each one's configuration and its state
	// (package limit's, as JSON), decided and saved by one transaction.
	`
CREATE TABLE limiters (
	name   TEXT PRIMARY KEY,
	config BLOB NOT NULL,
	state  BLOB NOT NULL DEFAULT ''
) WITHOUT ROWID;
`,
	// 11: queues for runs (store.CreateRunParams.Queue): a queued run
	// waits, unclaimable, until AdmitRuns lets it start; while a run of a
	// queue is pending or running, its dedupe key is its own.
	`
ALTER TABLE runs ADD COLUMN queue TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN queue_key TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN dedupe TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN queued INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_queued ON runs (queue, queue_key, priority DESC, seq) WHERE queued = 1;
CREATE UNIQUE INDEX runs_dedupe ON runs (queue, dedupe) WHERE dedupe <> '' AND status IN ('pending', 'running');
`,
	// 12: schedules (store.Schedules): each one's configuration and state
	// (package schedule's, as JSON), when it is due next, and the lease of
	// the engine deciding it.
	`
CREATE TABLE schedules (
	name          TEXT PRIMARY KEY,
	config        BLOB NOT NULL,
	state         BLOB NOT NULL,
	paused        INTEGER NOT NULL DEFAULT 0,
	next_due      INTEGER NOT NULL DEFAULT 0,
	version       INTEGER NOT NULL DEFAULT 0,
	lease_owner   TEXT NOT NULL DEFAULT '',
	lease_expires INTEGER NOT NULL DEFAULT 0,
	created_at    INTEGER NOT NULL,
	updated_at    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX schedules_due ON schedules (next_due) WHERE paused = 0;
`,
	// 13: the application version a run started on (Run.Version): workers
	// claim the runs of the versions they can replay.
	`
ALTER TABLE runs ADD COLUMN version TEXT NOT NULL DEFAULT '';
`,
	// 14: what messages wake a parked run (store.AdvanceParams.Awaits, in
	// sqlrow.EncodeAwaits's form); NULL: every one.
	`
ALTER TABLE runs ADD COLUMN awaits TEXT;
`,
	// 15: what a run's inbox holds (apply.InboxTx): its messages and hook
	// payloads, and their bytes, counted as they come; a run in flight
	// counts what its log holds already.
	`
ALTER TABLE runs ADD COLUMN inbox INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN inbox_bytes INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET
	inbox = (SELECT count(*) FROM events e WHERE e.run_id = runs.id AND e.type IN ('message_received', 'hook_received')),
	inbox_bytes = (SELECT COALESCE(sum(length(e.data)), 0) FROM events e WHERE e.run_id = runs.id AND e.type IN ('message_received', 'hook_received'))
WHERE status IN ('pending', 'running');
`,
	// 16: what limiters a parked run waits for (store.AdvanceParams.Limiters,
	// in sqlrow.EncodeLimiters's form), NULL: none; and, for a run parked in
	// a limiter's line for a held slot (AdvanceParams.Lined), its step's
	// priority, NULL: not lined. Kept on the row, so they outlive the run's
	// place in the limiter's line.
	`
ALTER TABLE runs ADD COLUMN limiters TEXT;
CREATE INDEX runs_limiters ON runs (limiters) WHERE limiters IS NOT NULL;
ALTER TABLE runs ADD COLUMN line_priority INTEGER;
CREATE INDEX runs_lined ON runs (line_priority DESC, seq) WHERE line_priority IS NOT NULL;
`,
	// 17: nothing. It was, on main for a day and never released, a rebuild
	// of runs with the run's data last; 18 replaced it. A file it made is
	// at 17, and 18 takes it as it takes one at 16 (it reads runs'
	// columns by name).
	`SELECT 1;`,
	// 18: a run's data apart. SQLite lays a row's columns out in order,
	// reaches a column past a large value by walking that value's overflow
	// pages, and rewrites a row whole at every UPDATE, reading every column
	// to build the new record. With the input in the runs row, every claim
	// and admission poll walked each queued run's input to read its lease
	// (20 queued runs of 15 MiB: half a core; red team, round fourteen), and
	// every change of a run's state read and rewrote it (a message counted
	// in its inbox: 50-70 ms; round sixteen). A run's input and output now
	// live in run_data (rundata.go), written at its start and its end, and
	// runs is rebuilt without them, its error last: a column that a claim,
	// a poll or a renewal reads must come before any value that may be
	// large (TestRunDataLivesApart guards it). Foreign keys are off while it
	// runs (rebuilds), as SQLite's procedure for a table rebuild requires,
	// and checked before it commits.
	`
CREATE TABLE run_data (
	seq    INTEGER PRIMARY KEY REFERENCES runs (seq) ON DELETE CASCADE,
	output BLOB, -- before the input: a check of the output never walks the input
	input  BLOB
);
INSERT INTO run_data (seq, input, output)
SELECT seq, input, output FROM runs WHERE input IS NOT NULL OR output IS NOT NULL;
CREATE TABLE runs_new (
	seq              INTEGER PRIMARY KEY, -- creation order
	id               TEXT    NOT NULL UNIQUE,
	workflow         TEXT    NOT NULL,
	status           TEXT    NOT NULL,
	created_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL,
	wake_at          INTEGER NOT NULL DEFAULT 0,
	lease_owner      TEXT    NOT NULL DEFAULT '',
	lease_expires    INTEGER NOT NULL DEFAULT 0,
	lease_epoch      INTEGER NOT NULL DEFAULT 0,
	cancel_requested INTEGER NOT NULL DEFAULT 0,
	kind             TEXT    NOT NULL DEFAULT '',
	parent_id        TEXT    NOT NULL DEFAULT '',
	trace_parent     TEXT    NOT NULL DEFAULT '',
	queue            TEXT    NOT NULL DEFAULT '',
	queue_key        TEXT    NOT NULL DEFAULT '',
	priority         INTEGER NOT NULL DEFAULT 0,
	dedupe           TEXT    NOT NULL DEFAULT '',
	queued           INTEGER NOT NULL DEFAULT 0,
	version          TEXT    NOT NULL DEFAULT '',
	awaits           TEXT,
	inbox            INTEGER NOT NULL DEFAULT 0,
	inbox_bytes      INTEGER NOT NULL DEFAULT 0,
	limiters         TEXT,
	line_priority    INTEGER,
	error            TEXT    NOT NULL DEFAULT '' -- last: it may be long
);
INSERT INTO runs_new (seq, id, workflow, status, created_at, updated_at, wake_at, lease_owner, lease_expires,
	lease_epoch, cancel_requested, kind, parent_id, trace_parent, queue, queue_key, priority, dedupe, queued,
	version, awaits, inbox, inbox_bytes, limiters, line_priority, error)
SELECT seq, id, workflow, status, created_at, updated_at, wake_at, lease_owner, lease_expires,
	lease_epoch, cancel_requested, kind, parent_id, trace_parent, queue, queue_key, priority, dedupe, queued,
	version, awaits, inbox, inbox_bytes, limiters, line_priority, error
FROM runs;
DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;
CREATE INDEX runs_workflow ON runs (workflow, seq);
CREATE INDEX runs_status ON runs (status, seq);
CREATE INDEX runs_ended ON runs (updated_at) WHERE status IN ('completed', 'failed', 'cancelled');
CREATE INDEX runs_runnable ON runs (wake_at, seq) WHERE status IN ('pending', 'running') AND kind = '';
CREATE INDEX runs_queued ON runs (queue, queue_key, priority DESC, seq) WHERE queued = 1;
CREATE UNIQUE INDEX runs_dedupe ON runs (queue, dedupe) WHERE dedupe <> '' AND status IN ('pending', 'running');
CREATE INDEX runs_limiters ON runs (limiters) WHERE limiters IS NOT NULL;
CREATE INDEX runs_lined ON runs (line_priority DESC, seq) WHERE line_priority IS NOT NULL;
`,
}

// rebuilds are the migrations, by the version they bring the file to, that
// rebuild a table others refer to: they run with foreign keys off (a
// pragma that has no effect inside a transaction) and must leave PRAGMA
// foreign_key_check empty.
var rebuilds = map[int]bool{18: true}

// fixups run in a migration's transaction after its SQL, for what SQL
// cannot compute: fixups[i] completes migration i.
var fixups = map[int]func(ctx context.Context, conn *sql.Conn) error{4: backfillDataBytes}

// backfillDataBytes counts the data bytes of every stream's records (a
// fork's own records only: those at or after its fork offset).
func backfillDataBytes(ctx context.Context, conn *sql.Conn) error {
	rows, err := conn.QueryContext(ctx, `SELECT b.stream_id, b.first_offset, b.data, s.fork_offset
		FROM batches b JOIN streams s ON s.id = b.stream_id ORDER BY b.stream_id`)
	if err != nil {
		return err
	}
	sums := map[int64]int64{}
	var recs []stream.Record
	for rows.Next() {
		var id, first, forkOffset int64
		var data []byte
		if err := rows.Scan(&id, &first, &data, &forkOffset); err != nil {
			rows.Close()
			return err
		}
		if recs, err = stream.DecodeBatch(recs[:0], data, first, forkOffset); err != nil {
			rows.Close()
			return fmt.Errorf("stream %d: %w", id, err)
		}
		sums[id] += stream.DataBytes(recs)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for id, n := range sums {
		if _, err := conn.ExecContext(ctx, `UPDATE streams SET data_bytes = ? WHERE id = ?`, n, id); err != nil {
			return err
		}
	}
	return nil
}

// migrate brings the file's schema to the latest version, one transaction per
// migration.
func migrate(ctx context.Context, conn *sql.Conn) error {
	for {
		var v int
		if err := conn.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		if v > len(migrations) {
			return fmt.Errorf("schema version %d is newer than this build knows (%d)", v, len(migrations))
		}
		if v == len(migrations) {
			return nil
		}
		if err := applyMigration(ctx, conn, v); err != nil {
			return fmt.Errorf("migrate to version %d: %w", v+1, err)
		}
	}
}

func applyMigration(ctx context.Context, conn *sql.Conn, v int) (err error) {
	if rebuilds[v+1] {
		if _, err := conn.ExecContext(ctx, `PRAGMA foreign_keys = OFF`); err != nil {
			return err
		}
		defer func() {
			if _, ferr := conn.ExecContext(context.Background(), `PRAGMA foreign_keys = ON`); ferr != nil && err == nil {
				err = ferr
			}
		}()
	}
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_, _ = conn.ExecContext(context.Background(), `ROLLBACK`)
		}
	}()
	// Another opener may have migrated between our read and our BEGIN.
	var cur int
	if err := conn.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&cur); err != nil {
		return err
	}
	if cur != v {
		_, err := conn.ExecContext(ctx, `ROLLBACK`)
		return err
	}
	if _, err := conn.ExecContext(ctx, migrations[v]); err != nil {
		return err
	}
	if fix := fixups[v]; fix != nil {
		if err := fix(ctx, conn); err != nil {
			return err
		}
	}
	if rebuilds[v+1] {
		if err := foreignKeysHold(ctx, conn); err != nil {
			return err
		}
	}
	// PRAGMA takes no parameters; v is an int we control.
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, v+1)); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, `COMMIT`)
	return err
}

// foreignKeysHold fails if a row refers to one that does not exist, as a
// rebuild with foreign keys off could leave if it dropped a row.
func foreignKeysHold(ctx context.Context, conn *sql.Conn) error {
	rows, err := conn.QueryContext(ctx, `PRAGMA foreign_key_check`)
	if err != nil {
		return err
	}
	defer rows.Close()
	if rows.Next() {
		var table, parent string
		var rowid sql.NullInt64
		var fk int
		if err := rows.Scan(&table, &rowid, &parent, &fk); err != nil {
			return err
		}
		return fmt.Errorf("a row of %s (rowid %d) refers to a missing row of %s", table, rowid.Int64, parent)
	}
	return rows.Err()
}
