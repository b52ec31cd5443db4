-- A stream's data bytes, for the byte limit (store.AppendParams.MaxBytes),
-- kept with its head. Backfilled from the batches' data_bytes (migration 3);
-- a batch written before that counts its encoded size, a slight overcount.
-- A fork counts only its own batches (those ending at or after its fork
-- offset). The index counts standalone streams for MaxStreams and lists them.
ALTER TABLE streams ADD COLUMN data_bytes bigint NOT NULL DEFAULT 0;
UPDATE streams s SET data_bytes = b.n
	FROM (SELECT b.stream_id, sum(COALESCE(b.data_bytes, length(b.data))) AS n
		FROM batches b JOIN streams x ON x.id = b.stream_id
		WHERE x.fork_source IS NULL OR b.last_offset >= x.fork_offset
		GROUP BY b.stream_id) b
	WHERE s.id = b.stream_id;
CREATE INDEX streams_standalone ON streams ((path COLLATE "C")) WHERE run_id IS NULL AND NOT deleted;
