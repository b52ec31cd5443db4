-- weir's PostgreSQL schema, version 1. The migration runner sets search_path
-- to the store's schema (Config.Schema), so names here are unqualified.
--
-- Times are unix nanoseconds (bigint), 0 for none: Go's time.Time round-trips
-- exactly, as the conformance suite requires. to_timestamp(x / 1e9) shows one.
-- There are few foreign keys on purpose: the store is the only writer, and a
-- foreign key costs a lookup and a row lock per inserted event or batch.

CREATE TABLE runs (
	seq              bigint  GENERATED ALWAYS AS IDENTITY, -- creation order
	id               text    NOT NULL PRIMARY KEY,
	workflow         text    NOT NULL,
	status           text    NOT NULL,
	input            bytea,
	output           bytea,
	error            text    NOT NULL DEFAULT '',
	created_at       bigint  NOT NULL,
	updated_at       bigint  NOT NULL,
	wake_at          bigint  NOT NULL DEFAULT 0,
	lease_owner      text    NOT NULL DEFAULT '',
	lease_expires    bigint  NOT NULL DEFAULT 0,
	lease_epoch      bigint  NOT NULL DEFAULT 0,
	cancel_requested boolean NOT NULL DEFAULT false,
	ended_at         bigint  NOT NULL DEFAULT 0, -- when it reached a terminal status
	last_event       bigint  NOT NULL DEFAULT 0, -- seq of its last event
	record_token     bigint  NOT NULL DEFAULT 0  -- the last Record's token: see Store.Record
) WITH (fillfactor = 80); -- room for HOT updates: leases, events
CREATE UNIQUE INDEX runs_seq ON runs (seq);
CREATE INDEX runs_runnable ON runs (wake_at, seq) WHERE status IN ('pending', 'running');
CREATE INDEX runs_workflow ON runs (workflow, seq);
CREATE INDEX runs_status ON runs (status, seq);
CREATE INDEX runs_ended ON runs (ended_at) WHERE ended_at > 0;

CREATE TABLE events (
	run_id  text    NOT NULL,
	seq     bigint  NOT NULL,
	type    text    NOT NULL,
	op      bigint  NOT NULL,
	name    text    NOT NULL,
	attempt bigint  NOT NULL,
	data    bytea,
	error   text    NOT NULL,
	final   boolean NOT NULL,
	at      bigint  NOT NULL,
	wake_at bigint  NOT NULL,
	PRIMARY KEY (run_id, seq)
);

CREATE TABLE streams (
	id           bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- never reused
	path         text    NOT NULL UNIQUE,
	run_id       text    REFERENCES runs (id), -- NULL: standalone
	name         text    NOT NULL,
	content_type text    NOT NULL,
	next_offset  bigint  NOT NULL DEFAULT 0,
	closed       boolean NOT NULL DEFAULT false,
	created_at   bigint  NOT NULL
) WITH (fillfactor = 70); -- every append updates next_offset: keep it HOT
CREATE INDEX streams_run ON streams (run_id, id) WHERE run_id IS NOT NULL;

-- The persisted part of stream.Writer; Live is rebuilt from batches. version
-- grows with every change, so a process can tell whether its cached Live is
-- still the database's; token is the last append's, so a retried append
-- whose commit reply was lost can tell whether it committed.
CREATE TABLE writers (
	stream_id bigint   NOT NULL,
	writer    text     NOT NULL,
	attempt   bigint   NOT NULL,
	next      bigint   NOT NULL,
	diverged  boolean  NOT NULL,
	status    smallint NOT NULL,
	version   bigint   NOT NULL,
	token     bigint   NOT NULL DEFAULT 0,
	PRIMARY KEY (stream_id, writer)
) WITH (fillfactor = 70);

CREATE TABLE fences (
	run_id  text   NOT NULL,
	writer  text   NOT NULL,
	attempt bigint NOT NULL,
	PRIMARY KEY (run_id, writer)
);

-- One row per append: the records first_offset..last_offset, encoded by
-- stream.EncodeBatch. Each batch is one writer's (or none), so a writer's live
-- records are rebuilt without decoding the others'. Batches up to a page stay
-- in the row, uncompressed (chunks are often already compressed); larger ones
-- go to TOAST, still uncompressed.
CREATE TABLE batches (
	stream_id    bigint NOT NULL,
	last_offset  bigint NOT NULL,
	first_offset bigint NOT NULL,
	writer       text   NOT NULL,
	data         bytea  NOT NULL,
	PRIMARY KEY (stream_id, last_offset)
) WITH (toast_tuple_target = 8160);
ALTER TABLE batches ALTER COLUMN data SET STORAGE EXTERNAL;
