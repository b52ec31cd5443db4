-- Messages to a run (store.Store.SendMessage): what sends with an
-- idempotency key left; and run events (weir.SetEvent): each key's latest
-- value, set by the Record that writes its event_set event.
CREATE TABLE message_keys (
	run_id     text   NOT NULL,
	key        text   NOT NULL,
	digest     bytea  NOT NULL,
	result     bytea  NOT NULL,
	expires_at bigint NOT NULL,
	PRIMARY KEY (run_id, key)
);

CREATE TABLE run_events (
	run_id text   NOT NULL,
	key    text   NOT NULL,
	value  bytea  NOT NULL,
	seq    bigint NOT NULL,
	at     bigint NOT NULL,
	PRIMARY KEY (run_id, key)
);
