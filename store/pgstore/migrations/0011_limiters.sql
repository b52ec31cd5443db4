-- Limiters (store.Limits): each one's configuration and its state (package
-- limit's, as JSON), decided and saved by one transaction holding the row.
CREATE TABLE limiters (
	name   text  PRIMARY KEY,
	config jsonb NOT NULL,
	state  bytea NOT NULL DEFAULT ''
);
