package pgstore

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

const runCols = `id, workflow, status, input, output, error, created_at, updated_at,
	wake_at, lease_owner, lease_expires, lease_epoch, cancel_requested`

const streamCols = `id, path, COALESCE(run_id, ''), name, content_type, next_offset, closed, created_at,
	ttl, expires_at, last_access, closed_by, closed_by_epoch, closed_by_seq, stream_seq,
	fork_source, fork_source_path, fork_offset, fork_sub_offset, forks, deleted`

// metaCols are what an append checks and changes of a stream: see streamMeta.
const metaCols = `COALESCE(run_id, ''), next_offset, closed, ttl, expires_at, last_access,
	closed_by, closed_by_epoch, closed_by_seq, stream_seq, deleted`

// queries are the store's SQL with its schema filled in ($S). pgx prepares
// each once per connection and caches it.
type queries struct {
	schema string // quoted

	insertRun, run, runExists, runLease, claim, renew, cancel string
	events, recordSimple, recordLock                          string
	insertEvents, putFence, updateRun                         string
	lockRunStreams, lockWriterStreams, writersOfRun, fence    string

	streamByPath, streamByID, runStreams, insertStream, head string
	lockRunOfStream, lockStream, streamFence, writer         string
	writerBatches, insertBatch, setHead, putWriter           string
	insertBatches, setHeads, updateWriters                   string
	appendAnon, closeStream, read, setStream, touch          string
	lockStreamOnly                                           string

	producer, putProducer, key, putKey, purgeKeys         string
	createStream, lockSource, attemptWriters, copyBatches string
	specialBatches, batchesFrom, setForks, lockForDelete  string
	delBatches, delWriters, delProducers, delKeys         string
	delStream                                             string

	purgeLock, purgeBatches, purgeWriters, purgeStreams string
	purgeFences, purgeEvents, purgeRuns                 string
	purgeProducers, purgeStreamKeys                     string
}

func newQueries(schema string) *queries {
	s := pgx.Identifier{schema}.Sanitize()
	r := strings.NewReplacer("$S.", s+".")
	q := &queries{schema: s}
	set := func(dst *string, sql string) { *dst = r.Replace(sql) }

	// Runs.
	set(&q.insertRun, `INSERT INTO $S.runs (id, workflow, status, input, created_at, updated_at, wake_at)
		VALUES ($1, $2, 'pending', $3, $4, $4, $5)
		ON CONFLICT (id) DO NOTHING RETURNING `+runCols)
	set(&q.run, `SELECT `+runCols+` FROM $S.runs WHERE id = $1`)
	set(&q.runExists, `SELECT 1 FROM $S.runs WHERE id = $1`)
	set(&q.runLease, `SELECT lease_epoch, lease_owner, status FROM $S.runs WHERE id = $1`)
	set(&q.claim, `WITH c AS (
			SELECT id FROM $S.runs
			WHERE status IN ('pending', 'running') AND wake_at <= $3 AND (lease_owner = '' OR lease_expires <= $3)
			ORDER BY wake_at, seq LIMIT $4
			FOR NO KEY UPDATE SKIP LOCKED
		)
		UPDATE $S.runs r SET status = 'running', lease_owner = $1, lease_expires = $2,
			lease_epoch = r.lease_epoch + 1, updated_at = $3
		FROM c WHERE r.id = c.id
		RETURNING r.id, r.workflow, r.status, r.input, r.output, r.error, r.created_at, r.updated_at,
			r.wake_at, r.lease_owner, r.lease_expires, r.lease_epoch, r.cancel_requested, r.seq`)
	set(&q.renew, `UPDATE $S.runs SET lease_expires = $1, updated_at = $2
		WHERE id = $3 AND lease_epoch = $4 AND lease_owner <> '' AND status IN ('pending', 'running')
		RETURNING cancel_requested`)
	set(&q.cancel, `WITH u AS (
			UPDATE $S.runs SET cancel_requested = true, wake_at = 0, updated_at = $2
			WHERE id = $1 AND status IN ('pending', 'running') RETURNING 1
		)
		SELECT EXISTS (SELECT 1 FROM u), EXISTS (SELECT 1 FROM $S.runs WHERE id = $1)`)
	set(&q.events, `SELECT seq, type, op, name, attempt, data, error, final, at, wake_at
		FROM $S.events WHERE run_id = $1 AND seq > $2 ORDER BY seq`)

	// Record. The run's row lock (FOR UPDATE) orders a Record after every
	// append in flight on the run's streams, which hold FOR KEY SHARE on it:
	// a fence raised here is seen by every later append.
	const eventsFrom = `unnest($3::text[], $4::bigint[], $5::text[], $6::bigint[], $7::bytea[],
			$8::text[], $9::boolean[], $10::bigint[], $11::bigint[])
			WITH ORDINALITY AS e(type, op, name, attempt, data, error, final, at, wake_at, ord)`
	const runUpdate = `UPDATE $S.runs x SET
			status = CASE WHEN $14 = '' THEN x.status ELSE $14 END,
			output = CASE WHEN $14 = '' THEN x.output ELSE $15 END,
			error = CASE WHEN $14 = '' THEN x.error ELSE $16 END,
			lease_owner = CASE WHEN $17 THEN '' ELSE x.lease_owner END,
			lease_expires = CASE WHEN $17 THEN 0 ELSE x.lease_expires END,
			wake_at = CASE WHEN $17 THEN $18 ELSE x.wake_at END,
			updated_at = $19,
			ended_at = CASE WHEN $20 THEN $19 ELSE x.ended_at END,
			last_event = x.last_event + cardinality($3::text[]),
			record_token = $21`
	// recordSimple is a Record with no stream work, in one statement: it
	// writes only if the lease holds, and returns whether it did.
	set(&q.recordSimple, `WITH r AS (
			SELECT id, last_event FROM $S.runs
			WHERE id = $1 AND lease_epoch = $2 AND lease_owner <> '' AND status IN ('pending', 'running')
			FOR UPDATE
		), ev AS (
			INSERT INTO $S.events (run_id, seq, type, op, name, attempt, data, error, final, at, wake_at)
			SELECT r.id, r.last_event + e.ord, e.type, e.op, e.name, e.attempt, e.data, e.error, e.final, e.at, e.wake_at
			FROM r, `+eventsFrom+`
		), f AS (
			INSERT INTO $S.fences AS f (run_id, writer, attempt)
			SELECT r.id, $12, $13 FROM r WHERE $12 <> ''
			ON CONFLICT (run_id, writer) DO UPDATE SET attempt = GREATEST(f.attempt, excluded.attempt)
		), u AS (
			`+runUpdate+` FROM r WHERE x.id = r.id
		)
		SELECT EXISTS (SELECT 1 FROM r)`)
	set(&q.recordLock, `SELECT last_event, lease_epoch, lease_owner, status, record_token
		FROM $S.runs WHERE id = $1 FOR UPDATE`)
	set(&q.insertEvents, `INSERT INTO $S.events (run_id, seq, type, op, name, attempt, data, error, final, at, wake_at)
		SELECT $1, $2 + e.ord, e.type, e.op, e.name, e.attempt, e.data, e.error, e.final, e.at, e.wake_at
		FROM `+eventsFrom)
	set(&q.putFence, `INSERT INTO $S.fences AS f (run_id, writer, attempt) VALUES ($1, $2, $3)
		ON CONFLICT (run_id, writer) DO UPDATE SET attempt = GREATEST(f.attempt, excluded.attempt)`)
	set(&q.updateRun, `UPDATE $S.runs x SET
			status = CASE WHEN $2 = '' THEN x.status ELSE $2 END,
			output = CASE WHEN $2 = '' THEN x.output ELSE $3 END,
			error = CASE WHEN $2 = '' THEN x.error ELSE $4 END,
			lease_owner = CASE WHEN $5 THEN '' ELSE x.lease_owner END,
			lease_expires = CASE WHEN $5 THEN 0 ELSE x.lease_expires END,
			wake_at = CASE WHEN $5 THEN $6 ELSE x.wake_at END,
			updated_at = $7,
			ended_at = CASE WHEN $8 THEN $7 ELSE x.ended_at END,
			last_event = $9,
			record_token = $10
		WHERE x.id = $1`)
	set(&q.lockRunStreams, `SELECT id, next_offset, closed FROM $S.streams
		WHERE run_id = $1 ORDER BY id FOR UPDATE`)
	set(&q.lockWriterStreams, `SELECT s.id, s.next_offset, s.closed FROM $S.streams s
		WHERE s.run_id = $1 AND EXISTS (SELECT 1 FROM $S.writers w WHERE w.stream_id = s.id AND w.writer = $2)
		ORDER BY s.id FOR UPDATE`)
	set(&q.writersOfRun, `SELECT stream_id, attempt, next, diverged, status, version, token FROM $S.writers
		WHERE writer = $2 AND stream_id IN (SELECT id FROM $S.streams WHERE run_id = $1)`)
	set(&q.fence, `SELECT attempt FROM $S.fences WHERE run_id = $1 AND writer = $2`)

	// Streams.
	set(&q.streamByPath, `SELECT `+streamCols+` FROM $S.streams WHERE path = $1`)
	set(&q.streamByID, `SELECT `+streamCols+` FROM $S.streams WHERE id = $1`)
	set(&q.runStreams, `SELECT `+streamCols+` FROM $S.streams WHERE run_id = $1 ORDER BY name`)
	set(&q.insertStream, `INSERT INTO $S.streams (path, run_id, name, content_type, created_at, last_access)
		VALUES ($1, NULLIF($2, ''), $3, $4, $5, $5)
		ON CONFLICT (path) DO NOTHING RETURNING `+streamCols)
	set(&q.head, `SELECT next_offset, closed FROM $S.streams WHERE id = $1`)
	// An append locks its run (if any) before its stream, as Record does:
	// FOR KEY SHARE lets appends to the run's streams and lease renewals run
	// side by side, and waits for a Record holding the run.
	set(&q.lockRunOfStream, `SELECT 1 FROM $S.runs WHERE id = (SELECT run_id FROM $S.streams WHERE id = $1) FOR KEY SHARE`)
	set(&q.lockStream, `SELECT `+metaCols+` FROM $S.streams WHERE id = $1 FOR UPDATE`)
	set(&q.streamFence, `SELECT attempt FROM $S.fences
		WHERE run_id = (SELECT run_id FROM $S.streams WHERE id = $1) AND writer = $2`)
	set(&q.writer, `SELECT attempt, next, diverged, status, version, token FROM $S.writers
		WHERE stream_id = $1 AND writer = $2`)
	set(&q.writerBatches, `SELECT first_offset, data FROM $S.batches
		WHERE stream_id = $1 AND writer = $2 ORDER BY last_offset`)
	set(&q.insertBatch, `INSERT INTO $S.batches (stream_id, last_offset, first_offset, writer, data)
		VALUES ($1, $2, $3, $4, $5)`)
	set(&q.setHead, `UPDATE $S.streams SET next_offset = $2, closed = $3 WHERE id = $1`)
	set(&q.setStream, `UPDATE $S.streams SET next_offset = $2, closed = $3, last_access = $4,
		closed_by = $5, closed_by_epoch = $6, closed_by_seq = $7, stream_seq = $8 WHERE id = $1`)
	set(&q.touch, `WITH u AS (
			UPDATE $S.streams SET last_access = $2 WHERE id = $1 AND ttl IS NOT NULL AND last_access < $2
		)
		SELECT EXISTS (SELECT 1 FROM $S.streams WHERE id = $1)`)
	set(&q.putWriter, `INSERT INTO $S.writers AS w (stream_id, writer, attempt, next, diverged, status, version, token)
		VALUES ($1, $2, $3, $4, $5, $6, 1, $7)
		ON CONFLICT (stream_id, writer) DO UPDATE SET attempt = excluded.attempt, next = excluded.next,
			diverged = excluded.diverged, status = excluded.status, version = w.version + 1, token = excluded.token`)
	set(&q.insertBatches, `INSERT INTO $S.batches (stream_id, last_offset, first_offset, writer, data)
		SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::bytea[])`)
	set(&q.setHeads, `UPDATE $S.streams s SET next_offset = u.next, closed = u.closed
		FROM unnest($1::bigint[], $2::bigint[], $3::boolean[]) AS u(id, next, closed) WHERE s.id = u.id`)
	set(&q.updateWriters, `UPDATE $S.writers w SET attempt = u.attempt, next = u.next, diverged = u.diverged,
			status = u.status, version = w.version + 1, token = $7
		FROM unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::boolean[], $6::smallint[])
			AS u(stream_id, attempt, next, diverged, status)
		WHERE w.stream_id = u.stream_id AND w.writer = $1`)
	// appendAnon is an anonymous append without options, in one statement:
	// its records depend on no state, only their offsets do. It appends
	// only to a stream that is open, not deleted and not expired at $4, and
	// renews a sliding TTL.
	set(&q.appendAnon, `WITH s AS (
			SELECT id, next_offset, closed, deleted, ttl, expires_at, last_access
			FROM $S.streams WHERE id = $1 FOR UPDATE
		), dup AS (
			SELECT first_offset FROM $S.batches WHERE $6 AND stream_id = $1 AND token = $5 LIMIT 1
		), ok AS (
			SELECT * FROM s WHERE NOT closed AND NOT deleted
				AND NOT (ttl IS NOT NULL AND $4 - last_access >= ttl)
				AND NOT (expires_at <> 0 AND $4 >= expires_at)
				AND NOT EXISTS (SELECT 1 FROM dup)
		), b AS (
			INSERT INTO $S.batches (stream_id, last_offset, first_offset, writer, data, token)
			SELECT id, next_offset + $2 - 1, next_offset, '', $3, $5 FROM ok
		), u AS (
			UPDATE $S.streams x SET next_offset = ok.next_offset + $2,
				last_access = CASE WHEN ok.ttl IS NOT NULL AND $4 > ok.last_access THEN $4 ELSE ok.last_access END
			FROM ok WHERE x.id = ok.id
		)
		SELECT next_offset, closed, deleted, EXISTS (SELECT 1 FROM ok), (SELECT first_offset FROM dup) FROM s`)
	set(&q.lockStreamOnly, `SELECT 1 FROM $S.streams WHERE id = $1 FOR UPDATE`)
	// closeStream closes a stream in one statement: the close record depends
	// on nothing.
	set(&q.closeStream, `WITH s AS (
			SELECT id, next_offset, closed FROM $S.streams WHERE id = $1 FOR UPDATE
		), b AS (
			INSERT INTO $S.batches (stream_id, last_offset, first_offset, writer, data)
			SELECT id, next_offset, next_offset, '', $2 FROM s WHERE NOT closed
		), u AS (
			UPDATE $S.streams x SET next_offset = s.next_offset + 1, closed = true
			FROM s WHERE x.id = s.id AND NOT s.closed
		)
		SELECT closed FROM s`)
	// read returns the head with the batches from $2 on, in one snapshot;
	// at most $3 batches, and none that starts past $4 bytes of data.
	set(&q.read, `WITH h AS (SELECT next_offset, closed FROM $S.streams WHERE id = $1)
		SELECT h.next_offset, h.closed, b.first_offset, b.data FROM h LEFT JOIN LATERAL (
			SELECT first_offset, data FROM (
				SELECT first_offset, data,
					sum(octet_length(data)) OVER (ORDER BY last_offset ROWS UNBOUNDED PRECEDING) - octet_length(data) AS before
				FROM $S.batches WHERE stream_id = $1 AND last_offset >= $2
				ORDER BY last_offset LIMIT $3
			) w WHERE before < $4
		) b ON true`)

	// Retention.
	set(&q.purgeLock, `SELECT id FROM $S.runs WHERE ended_at > 0 AND ended_at < $1
		ORDER BY ended_at LIMIT $2 FOR UPDATE SKIP LOCKED`)
	set(&q.purgeBatches, `DELETE FROM $S.batches WHERE stream_id IN (SELECT id FROM $S.streams WHERE run_id = ANY($1))`)
	set(&q.purgeWriters, `DELETE FROM $S.writers WHERE stream_id IN (SELECT id FROM $S.streams WHERE run_id = ANY($1))`)
	set(&q.purgeProducers, `DELETE FROM $S.producers WHERE stream_id IN (SELECT id FROM $S.streams WHERE run_id = ANY($1))`)
	set(&q.purgeStreamKeys, `DELETE FROM $S.idempotency_keys WHERE stream_id IN (SELECT id FROM $S.streams WHERE run_id = ANY($1))`)
	set(&q.purgeStreams, `DELETE FROM $S.streams WHERE run_id = ANY($1) RETURNING id`)
	set(&q.purgeFences, `DELETE FROM $S.fences WHERE run_id = ANY($1)`)
	set(&q.purgeEvents, `DELETE FROM $S.events WHERE run_id = ANY($1)`)
	set(&q.purgeRuns, `DELETE FROM $S.runs WHERE id = ANY($1)`)

	// Durable Streams.
	set(&q.producer, `SELECT epoch, last_seq FROM $S.producers WHERE stream_id = $1 AND producer = $2`)
	set(&q.putProducer, `INSERT INTO $S.producers (stream_id, producer, epoch, last_seq) VALUES ($1, $2, $3, $4)
		ON CONFLICT (stream_id, producer) DO UPDATE SET epoch = excluded.epoch, last_seq = excluded.last_seq`)
	set(&q.key, `SELECT digest, result, expires_at FROM $S.idempotency_keys WHERE stream_id = $1 AND key = $2`)
	set(&q.putKey, `INSERT INTO $S.idempotency_keys (stream_id, key, digest, result, expires_at) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (stream_id, key) DO UPDATE SET digest = excluded.digest, result = excluded.result,
			expires_at = excluded.expires_at`)
	set(&q.purgeKeys, `DELETE FROM $S.idempotency_keys WHERE ctid = ANY (ARRAY(
		SELECT ctid FROM $S.idempotency_keys WHERE expires_at <= $1 ORDER BY expires_at LIMIT 256))`)
	set(&q.createStream, `INSERT INTO $S.streams (path, name, content_type, created_at, last_access, ttl, expires_at,
			fork_source, fork_source_path, fork_offset, fork_sub_offset, next_offset)
		VALUES ($1, '', $2, $3, $3, $4, $5, $6, $7, $8, $9, 0)
		ON CONFLICT (path) DO NOTHING RETURNING id`)
	set(&q.lockSource, `SELECT path, next_offset, closed, deleted FROM $S.streams WHERE id = $1 FOR UPDATE`)
	set(&q.attemptWriters, `SELECT writer FROM $S.writers WHERE stream_id = $1 AND attempt > 0`)
	// copyBatches copies, server-side, the source's batches that a fork
	// takes as they are: wholly below the fork point, of no writer that may
	// be open, not holding the close record. The copy is untagged: it never
	// counts toward the fork's writers.
	set(&q.copyBatches, `INSERT INTO $S.batches (stream_id, last_offset, first_offset, writer, data)
		SELECT $2, last_offset, first_offset, '', data FROM $S.batches
		WHERE stream_id = $1 AND last_offset < $3 AND writer <> ALL ($4::text[]) AND last_offset <> $5`)
	// specialBatches are the others below the fork point.
	set(&q.specialBatches, `SELECT first_offset, last_offset, writer, data FROM $S.batches
		WHERE stream_id = $1 AND first_offset < $2 AND (last_offset >= $2 OR writer = ANY ($3::text[]) OR last_offset = $4)
		ORDER BY last_offset`)
	set(&q.batchesFrom, `SELECT first_offset, data FROM $S.batches WHERE stream_id = $1 AND last_offset >= $2
		ORDER BY last_offset`)
	set(&q.setForks, `UPDATE $S.streams SET forks = $2, deleted = $3 WHERE id = $1`)
	set(&q.lockForDelete, `SELECT COALESCE(run_id, ''), ttl, expires_at, last_access, COALESCE(fork_source, 0), forks, deleted
		FROM $S.streams WHERE id = $1 FOR UPDATE`)
	set(&q.delBatches, `DELETE FROM $S.batches WHERE stream_id = $1`)
	set(&q.delWriters, `DELETE FROM $S.writers WHERE stream_id = $1`)
	set(&q.delProducers, `DELETE FROM $S.producers WHERE stream_id = $1`)
	set(&q.delKeys, `DELETE FROM $S.idempotency_keys WHERE stream_id = $1`)
	set(&q.delStream, `DELETE FROM $S.streams WHERE id = $1`)
	return q
}
