-- The World (package world, store.WorldStore): Vercel Workflow runs are runs
-- of kind 'world', which no engine claims; their events, steps, hooks, waits,
-- streams by name, and the queue that pushes their messages to the app. Data
-- columns hold the runtime's JSON as it came, as bytea: weir reads none of
-- it, and jsonb would reorder keys and refuse "\u0000".

ALTER TABLE runs ADD COLUMN kind text NOT NULL DEFAULT '';
DROP INDEX runs_runnable;
CREATE INDEX runs_runnable ON runs (wake_at, seq) WHERE status IN ('pending', 'running') AND kind = '';
CREATE INDEX runs_kind ON runs (kind, seq) WHERE kind <> '';

CREATE TABLE world_runs (
	run_id            text   PRIMARY KEY,
	deployment_id     text   NOT NULL,
	spec_version      bigint NOT NULL,
	execution_context bytea,
	error_json        bytea,
	started_at        bigint NOT NULL DEFAULT 0,
	completed_at      bigint NOT NULL DEFAULT 0,
	events            bigint NOT NULL DEFAULT 0, -- the slot of its last event
	target            text   NOT NULL DEFAULT '' -- the app's URL, from its messages
) WITH (fillfactor = 80);

-- token is the group's that wrote the event: a retry after a lost commit
-- reply finds it and returns what committed instead of applying it again.
CREATE TABLE world_events (
	id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	run_id         text   NOT NULL,
	slot           bigint NOT NULL,
	event_id       text   NOT NULL,
	type           text   NOT NULL,
	correlation_id text   NOT NULL,
	data           bytea,
	spec_version   bigint NOT NULL,
	created_at     bigint NOT NULL,
	token          bigint NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX world_events_slot ON world_events (run_id, slot);
CREATE UNIQUE INDEX world_events_id ON world_events (run_id, event_id);
CREATE INDEX world_events_correlation ON world_events (correlation_id, id) WHERE correlation_id <> '';
CREATE INDEX world_events_token ON world_events (run_id, token) WHERE token <> 0;

CREATE TABLE world_steps (
	seq          bigint GENERATED ALWAYS AS IDENTITY,
	run_id       text   NOT NULL,
	step_id      text   NOT NULL, -- unique in its run (world-local's steps/<run>-<step>)
	step_name    text   NOT NULL,
	status       text   NOT NULL,
	input        bytea,
	output       bytea,
	error_json   bytea,
	attempt      bigint NOT NULL,
	started_at   bigint NOT NULL DEFAULT 0,
	completed_at bigint NOT NULL DEFAULT 0,
	created_at   bigint NOT NULL,
	updated_at   bigint NOT NULL,
	retry_after  bigint NOT NULL DEFAULT 0,
	spec_version bigint NOT NULL,
	closes       text   NOT NULL DEFAULT '' -- JSON list: streams closed at the attempt's commit
) WITH (fillfactor = 80);
CREATE UNIQUE INDEX world_steps_key ON world_steps (run_id, step_id);
CREATE INDEX world_steps_run ON world_steps (run_id, seq);
CREATE INDEX world_steps_id ON world_steps (step_id);

CREATE TABLE world_hooks (
	seq          bigint  GENERATED ALWAYS AS IDENTITY,
	hook_id      text    NOT NULL UNIQUE,
	run_id       text    NOT NULL,
	token        text    NOT NULL,
	metadata     bytea,
	is_webhook   boolean NOT NULL,
	spec_version bigint  NOT NULL,
	created_at   bigint  NOT NULL -- a disposed hook's row is deleted: its id and token are free again
);
CREATE UNIQUE INDEX world_hooks_token ON world_hooks (token);
CREATE INDEX world_hooks_run ON world_hooks (run_id, seq);

CREATE TABLE world_waits (
	run_id       text   NOT NULL,
	wait_id      text   NOT NULL,
	status       text   NOT NULL,
	resume_at    bigint NOT NULL DEFAULT 0,
	completed_at bigint NOT NULL DEFAULT 0,
	created_at   bigint NOT NULL,
	updated_at   bigint NOT NULL,
	spec_version bigint NOT NULL,
	PRIMARY KEY (run_id, wait_id)
);

CREATE TABLE world_streams (
	name      text   PRIMARY KEY,
	run_id    text   NOT NULL,
	stream_id bigint NOT NULL
);
CREATE INDEX world_streams_run ON world_streams (run_id, name);

CREATE TABLE world_queue (
	seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id              text   NOT NULL UNIQUE,
	queue_name      text   NOT NULL,
	kind            text   NOT NULL, -- 'workflow' or 'step' (world.QueueKind)
	payload         bytea  NOT NULL,
	target          text   NOT NULL,
	idempotency_key text   NOT NULL,
	deployment_id   text   NOT NULL,
	run_id          text   NOT NULL,
	state           text   NOT NULL, -- 'pending' or 'dead'
	attempt         bigint NOT NULL DEFAULT 0,
	failures        bigint NOT NULL DEFAULT 0,
	deliver_at      bigint NOT NULL,
	first_failure   bigint NOT NULL DEFAULT 0,
	last_error      text   NOT NULL DEFAULT '',
	lease           text   NOT NULL DEFAULT '',
	lease_owner     text   NOT NULL DEFAULT '',
	lease_until     bigint NOT NULL DEFAULT 0,
	created_at      bigint NOT NULL
) WITH (fillfactor = 70);
CREATE UNIQUE INDEX world_queue_key ON world_queue (queue_name, idempotency_key) WHERE state = 'pending' AND idempotency_key <> '';
CREATE INDEX world_queue_due ON world_queue (deliver_at, seq) WHERE state = 'pending';
CREATE INDEX world_queue_dead ON world_queue (seq) WHERE state = 'dead';
CREATE INDEX world_queue_run ON world_queue (run_id, kind) WHERE state = 'pending';
