-- The Durable Streams protocol's state: standalone streams' metadata (expiry,
-- the closing producer, Stream-Seq, forks, soft deletion), idempotent
-- producers and idempotency keys. Stream ids come from an identity column,
-- so a deleted stream's id is never given again.

ALTER TABLE streams
	ADD COLUMN ttl              bigint,                         -- nanoseconds; NULL: no sliding TTL
	ADD COLUMN expires_at       bigint  NOT NULL DEFAULT 0,     -- absolute expiry; 0: none
	ADD COLUMN last_access      bigint  NOT NULL DEFAULT 0,
	ADD COLUMN closed_by        text,                           -- producer id; NULL: none
	ADD COLUMN closed_by_epoch  bigint  NOT NULL DEFAULT 0,
	ADD COLUMN closed_by_seq    bigint  NOT NULL DEFAULT 0,
	ADD COLUMN stream_seq       text    NOT NULL DEFAULT '',
	ADD COLUMN fork_source      bigint,                         -- NULL: not a fork
	ADD COLUMN fork_source_path text    NOT NULL DEFAULT '',
	ADD COLUMN fork_offset      bigint  NOT NULL DEFAULT 0,
	ADD COLUMN fork_sub_offset  bigint  NOT NULL DEFAULT 0,
	ADD COLUMN forks            bigint  NOT NULL DEFAULT 0,
	ADD COLUMN deleted          boolean NOT NULL DEFAULT false;

CREATE TABLE producers (
	stream_id bigint NOT NULL,
	producer  text   NOT NULL,
	epoch     bigint NOT NULL,
	last_seq  bigint NOT NULL,
	PRIMARY KEY (stream_id, producer)
) WITH (fillfactor = 70);

CREATE TABLE idempotency_keys (
	stream_id  bigint NOT NULL,
	key        text   NOT NULL,
	digest     bytea  NOT NULL,
	result     bytea  NOT NULL, -- the append's result, JSON
	expires_at bigint NOT NULL,
	PRIMARY KEY (stream_id, key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

-- An anonymous append saves a random token with its batch, so that its retry
-- after a lost reply can tell whether it committed (store.AppendParams).
ALTER TABLE batches ADD COLUMN token bigint NOT NULL DEFAULT 0;
CREATE INDEX batches_token ON batches (stream_id, token) WHERE token <> 0;
