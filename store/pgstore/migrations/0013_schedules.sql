-- Schedules (store.Schedules): each one's configuration and state (package
-- schedule's, as JSON), when it is due next (unix nanoseconds; 0 while
-- paused), and the lease of the engine deciding it.
CREATE TABLE schedules (
	name          text    PRIMARY KEY,
	config        bytea   NOT NULL,
	state         bytea   NOT NULL,
	paused        boolean NOT NULL DEFAULT false,
	next_due      bigint  NOT NULL DEFAULT 0,
	version       bigint  NOT NULL DEFAULT 0,
	lease_owner   text    NOT NULL DEFAULT '',
	lease_expires bigint  NOT NULL DEFAULT 0,
	created_at    bigint  NOT NULL,
	updated_at    bigint  NOT NULL
);
CREATE INDEX schedules_due ON schedules (next_due) WHERE NOT paused;
