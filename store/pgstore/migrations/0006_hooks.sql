-- Hooks (store.Store.CreateHook, DeliverHook): a token per row, the run
-- that holds it, and what deliveries with an idempotency key left.
CREATE TABLE hooks (
	token      text    PRIMARY KEY,
	run_id     text    NOT NULL,
	op         bigint  NOT NULL,
	disposed   boolean NOT NULL DEFAULT false,
	received   bigint  NOT NULL DEFAULT 0,
	created_at bigint  NOT NULL
);
CREATE INDEX hooks_run ON hooks (run_id, op);

CREATE TABLE hook_keys (
	token      text   NOT NULL,
	key        text   NOT NULL,
	digest     bytea  NOT NULL,
	result     bytea  NOT NULL,
	expires_at bigint NOT NULL,
	PRIMARY KEY (token, key)
);
