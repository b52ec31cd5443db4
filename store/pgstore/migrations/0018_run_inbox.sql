-- What a run's inbox holds (apply.InboxTx): its messages and hook
-- payloads, and their bytes, counted as they come, so that their bound
-- costs no scan of the log. A run in flight counts what its log holds.
ALTER TABLE runs ADD COLUMN inbox bigint NOT NULL DEFAULT 0,
	ADD COLUMN inbox_bytes bigint NOT NULL DEFAULT 0;
UPDATE runs r SET inbox = c.n, inbox_bytes = c.b
FROM (SELECT run_id, count(*) AS n, COALESCE(sum(octet_length(data)), 0) AS b FROM events
	WHERE type IN ('message_received', 'hook_received') GROUP BY run_id) c
WHERE r.id = c.run_id AND r.status IN ('pending', 'running');
