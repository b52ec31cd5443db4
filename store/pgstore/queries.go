package pgstore

import (
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/weirhq/weir/store/internal/sqlrow"
)

// queries are the store's SQL with its schema filled in ($S). pgx prepares
// each once per connection and caches it.
type queries struct {
	schema string // quoted

	// Read and written outside the group commit.
	run, runExists, runWithin, runLease, renew, renewMany, cancel, events, eventPage, schedulePage, streamByPath, streamByID string
	runStreams, head, read, readMore, readWindow, touch, insertBatch, setHead                                                string
	countStandalone, standalone                                                                                              string
	runEventPage, messageCounts                                                                                              string

	// Group commit (group.go).
	lockRuns, lockStreams, readWriters, readFences, readProducers, readKeys     string
	readAnonTokens, replayWriters, insertRuns, runsByID, claimIn, insertStreams string
	streamsByPath, insertEventsMany, putFences, insertBatchesMany, setStreams   string
	putWriters, putProducers, putKeys, purgeKeys, updateRuns                    string
	lockHooks, setHook, putRunEvents                                            string

	// Durable Streams (ds.go).
	createStream, lockStream, attemptWriters, copyBatches, specialBatches string
	batchesFrom, setForks, delBatches, delWriters, delProducers           string
	delKeys, delStream                                                    string

	// Retention (purge.go).
	purgeLock, purgeBatches, purgeWriters, purgeProducers, purgeStreamKeys string
	purgeStreams, purgeFences, purgeEvents, purgeRuns                      string
	purgeHooks, purgeHookKeys, purgeMessageKeys, purgeRunEvents            string

	worldQueries
	queueQueries
}

func newQueries(schema string) *queries {
	s := pgx.Identifier{schema}.Sanitize()
	r := strings.NewReplacer("$S.", s+".")
	q := &queries{schema: s}
	set := func(dst *string, sql string) { *dst = r.Replace(sql) }
	q.worldQueries.set(set)
	q.queueQueries.set(set)

	// Runs.
	set(&q.run, `SELECT `+sqlrow.RunCols+` FROM $S.runs WHERE id = $1`)
	set(&q.runExists, `SELECT 1 FROM $S.runs WHERE id = $1`)
	set(&q.runWithin, `SELECT `+sqlrow.RunColsWithin("$2::bigint", "octet_length(error)")+` FROM $S.runs WHERE id = $1`)
	set(&q.runLease, `SELECT lease_epoch, lease_owner, status FROM $S.runs WHERE id = $1`)
	set(&q.renew, `UPDATE $S.runs SET lease_expires = $1, updated_at = $2
		WHERE id = $3 AND lease_epoch = $4 AND lease_owner <> '' AND status IN ('pending', 'running')
		RETURNING cancel_requested`)
	// renewMany takes the rows' locks one by one in the order of $1, which
	// RenewLeases sorts, as a group takes its runs' (lockRuns): an UPDATE
	// joined to the array locks in whatever order its plan visits the
	// rows, and a group locking two of the same runs the other way round
	// waited for it while it waited for the group — until the renewal's
	// timeout, past which the leases lapsed and the runs' steps ran again
	// elsewhere (a saturated limiter's flood parking runs, issue 38).
	// A row locked by a write in progress is skipped, not waited for: it
	// is renewed at the next round (a third of a lease on), and the others
	// are not held behind it (30,000 runs of a saturated limiter: renewals
	// of 127 leases timed out behind such writes, leases lapsed, and bodies
	// ran again).
	set(&q.renewMany, `UPDATE $S.runs r SET lease_expires = u.expires, updated_at = $4
		FROM (
			SELECT k.id, k.epoch, k.expires FROM unnest($1::text[], $2::bigint[], $3::bigint[]) WITH ORDINALITY AS k(id, epoch, expires, n),
			LATERAL (SELECT 1 FROM $S.runs WHERE id = k.id FOR NO KEY UPDATE SKIP LOCKED) l
			ORDER BY k.n
		) u
		WHERE r.id = u.id AND r.lease_epoch = u.epoch AND r.lease_owner <> '' AND r.status IN ('pending', 'running')
		RETURNING r.id, r.lease_epoch, r.cancel_requested`)
	set(&q.cancel, `WITH u AS (
			UPDATE $S.runs SET cancel_requested = true, wake_at = 0, updated_at = $2
			WHERE id = $1 AND status IN ('pending', 'running') RETURNING 1
		)
		SELECT EXISTS (SELECT 1 FROM u), EXISTS (SELECT 1 FROM $S.runs WHERE id = $1)`)
	set(&q.events, `SELECT seq, type, op, name, attempt, data, error, final, at, wake_at
		FROM $S.events WHERE run_id = $1 AND seq > $2 ORDER BY seq`)
	set(&q.eventPage, sqlrow.EventPageSQL("$S.events", "$1", "$2", "$3::bigint", "$4::bigint", "$5::text"))
	set(&q.messageCounts, sqlrow.MessageCountsSQL("$S.events", "$1"))
	set(&q.schedulePage, sqlrow.SchedulePageSQL("$S.schedules", `name COLLATE "C"`, "$1", "$2::bigint", "$3::bigint"))
	// Keys in byte order (COLLATE "C"), as SQLite's.
	set(&q.runEventPage, sqlrow.RunEventPageSQL("$S.run_events", `key COLLATE "C"`, "$1", "$2", "$3::bigint"))

	// Streams.
	set(&q.streamByPath, `SELECT `+sqlrow.StreamCols+` FROM $S.streams WHERE path = $1`)
	set(&q.streamByID, `SELECT `+sqlrow.StreamCols+` FROM $S.streams WHERE id = $1`)
	set(&q.runStreams, `SELECT `+sqlrow.StreamCols+` FROM $S.streams WHERE run_id = $1 ORDER BY name`)
	// Byte order (COLLATE "C"), as SQLite's and apply.ListStandalone's.
	set(&q.standalone, `SELECT `+sqlrow.StreamCols+` FROM $S.streams
		WHERE run_id IS NULL AND NOT deleted AND (path COLLATE "C") >= $1 ORDER BY (path COLLATE "C") LIMIT $2`)
	set(&q.head, `SELECT next_offset, closed FROM $S.streams WHERE id = $1`)
	set(&q.insertBatch, `INSERT INTO $S.batches (stream_id, last_offset, first_offset, writer, data, data_bytes)
		VALUES ($1, $2, $3, $4, $5, $6)`)
	set(&q.setHead, `UPDATE $S.streams SET next_offset = $2, closed = $3, data_bytes = $4 WHERE id = $1`)
	set(&q.countStandalone, `SELECT count(*) FROM $S.streams WHERE run_id IS NULL AND NOT deleted`)
	set(&q.touch, `WITH u AS (
			UPDATE $S.streams SET last_access = $2 WHERE id = $1 AND ttl IS NOT NULL AND last_access < $2
		)
		SELECT EXISTS (SELECT 1 FROM $S.streams WHERE id = $1)`)
	// read returns the head with the batches from $2 on, in one snapshot:
	// at most $3 batches (each holds a record from $2 on), and only those
	// the page may reach: none that starts past $4 data bytes. A first
	// batch that begins before $2 is counted whole, so when the page does
	// not fill from what this returns, readMore fetches the batches it left
	// out. Of each batch, its encoded length and a window of at most $7
	// bytes: from byte $6 of the batch whose last offset is $5 (where a
	// page that ended inside it left off: Store.hints), else from its
	// start; readWindow fetches the rest as the page needs it. A batch is an
	// append, up to 16 MiB; a page about $4, and nothing much past what it
	// can take is fetched. (data is stored uncompressed, out of line:
	// octet_length and substring read no more of it than they return.)
	set(&q.read, `WITH h AS (SELECT next_offset, closed FROM $S.streams WHERE id = $1)
		SELECT h.next_offset, h.closed, b.first_offset, b.last_offset, b.size, b.start, b.win FROM h LEFT JOIN LATERAL (
			SELECT first_offset, last_offset, octet_length(data)::bigint AS size, start,
				substring(data from (start + 1)::int for $7::int) AS win FROM (
				SELECT first_offset, last_offset, data,
					CASE WHEN last_offset = $5 THEN $6::bigint ELSE 0 END AS start,
					COALESCE(sum(data_bytes) OVER (ORDER BY last_offset ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
				FROM $S.batches WHERE stream_id = $1 AND last_offset >= $2
				ORDER BY last_offset LIMIT $3
			) w WHERE before <= $4
		) b ON true`)
	// readMore continues a read page at the batch boundary $2 (so every
	// record counts), below the head $5 the page was read at, with $3
	// records and $4 data bytes left in the page; windows as read's.
	// Batches are never rewritten, so it agrees with read's snapshot, short
	// of a delete.
	set(&q.readMore, `SELECT first_offset, last_offset, octet_length(data)::bigint, 0::bigint, substring(data from 1 for $6::int) FROM (
			SELECT first_offset, last_offset, data,
				COALESCE(sum(data_bytes) OVER (ORDER BY last_offset ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
			FROM $S.batches WHERE stream_id = $1 AND last_offset >= $2 AND first_offset < $5
			ORDER BY last_offset LIMIT $3
		) w WHERE before <= $4`)
	// readWindow is $4 bytes of a batch from byte $3 (0-based).
	set(&q.readWindow, `SELECT substring(data from ($3 + 1)::int for $4::int) FROM $S.batches WHERE stream_id = $1 AND last_offset = $2`)

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
	set(&q.purgeHookKeys, `DELETE FROM $S.hook_keys WHERE token IN (SELECT token FROM $S.hooks WHERE run_id = ANY($1))`)
	set(&q.purgeHooks, `DELETE FROM $S.hooks WHERE run_id = ANY($1)`)
	set(&q.purgeMessageKeys, `DELETE FROM $S.message_keys WHERE run_id = ANY($1)`)
	set(&q.purgeRunEvents, `DELETE FROM $S.run_events WHERE run_id = ANY($1)`)
	set(&q.putRunEvents, `INSERT INTO $S.run_events (run_id, key, value, seq, at)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[], $5::bigint[])
		ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value, seq = excluded.seq, at = excluded.at
			WHERE $S.run_events.seq < excluded.seq`)
	set(&q.purgeRuns, `DELETE FROM $S.runs WHERE id = ANY($1)`)

	set(&q.purgeKeys, `DELETE FROM $S.idempotency_keys WHERE ctid = ANY (ARRAY(
		SELECT ctid FROM $S.idempotency_keys WHERE expires_at <= $1 ORDER BY expires_at LIMIT 256))`)
	set(&q.createStream, `INSERT INTO $S.streams (path, name, content_type, created_at, last_access, ttl, expires_at,
			fork_source, fork_source_path, fork_offset, fork_sub_offset, next_offset)
		VALUES ($1, '', $2, $3, $3, $4, $5, $6, $7, $8, $9, 0)
		ON CONFLICT (path) DO NOTHING RETURNING id`)
	set(&q.lockStream, `SELECT `+sqlrow.StateCols+`, path FROM $S.streams WHERE id = $1 FOR UPDATE`)
	set(&q.attemptWriters, `SELECT writer FROM $S.writers WHERE stream_id = $1 AND attempt > 0`)
	// copyBatches copies, server-side, the source's batches that a fork
	// takes as they are: wholly below the fork point, of no writer that may
	// be open, not holding the close record. The copy is untagged: it never
	// counts toward the fork's writers.
	set(&q.copyBatches, `INSERT INTO $S.batches (stream_id, last_offset, first_offset, writer, data, data_bytes)
		SELECT $2, last_offset, first_offset, '', data, data_bytes FROM $S.batches
		WHERE stream_id = $1 AND last_offset < $3 AND writer <> ALL ($4::text[]) AND last_offset <> $5`)
	// specialBatches are the others below the fork point.
	set(&q.specialBatches, `SELECT first_offset, last_offset, writer, data FROM $S.batches
		WHERE stream_id = $1 AND first_offset < $2 AND (last_offset >= $2 OR writer = ANY ($3::text[]) OR last_offset = $4)
		ORDER BY last_offset`)
	set(&q.batchesFrom, `SELECT first_offset, data FROM $S.batches WHERE stream_id = $1 AND last_offset >= $2
		ORDER BY last_offset`)
	set(&q.setForks, `UPDATE $S.streams SET forks = $2, deleted = $3 WHERE id = $1`)
	set(&q.delBatches, `DELETE FROM $S.batches WHERE stream_id = $1`)
	set(&q.delWriters, `DELETE FROM $S.writers WHERE stream_id = $1`)
	set(&q.delProducers, `DELETE FROM $S.producers WHERE stream_id = $1`)
	set(&q.delKeys, `DELETE FROM $S.idempotency_keys WHERE stream_id = $1`)
	set(&q.delStream, `DELETE FROM $S.streams WHERE id = $1`)

	// Group commit: each statement serves every op of a group.
	// Runs are locked FOR NO KEY UPDATE, not FOR UPDATE: as strong against
	// other writers of the run, but not against the foreign-key check of a
	// run stream's insert (FOR KEY SHARE), which would otherwise wait for
	// the commit of another group holding the run (a step's start and its
	// stream's creation go to two committers at once).
	// The reads look rows up key by key (LATERAL), so their plans are index
	// lookups whatever the tables' statistics say. The locks are taken in
	// the order of the keys, which the group sorts.
	set(&q.lockRuns, `SELECT r.id, r.last_event, r.lease_epoch, r.lease_owner, r.status, r.record_token, r.cancel_requested
		FROM unnest($1::text[]) AS k(id), LATERAL (
			SELECT id, last_event, lease_epoch, lease_owner, status, record_token, cancel_requested
			FROM $S.runs WHERE id = k.id FOR NO KEY UPDATE
		) r`)
	set(&q.lockStreams, `SELECT s.* FROM (
			SELECT id FROM unnest($1::bigint[]) AS k(id)
			UNION
			SELECT x.id FROM unnest($2::text[]) AS k(run_id), LATERAL (
				SELECT id FROM $S.streams WHERE run_id = k.run_id
			) x
			ORDER BY id
		) k, LATERAL (
			SELECT `+sqlrow.StateCols+` FROM $S.streams WHERE id = k.id FOR UPDATE
		) s`)
	set(&q.readWriters, `SELECT w.* FROM unnest($1::bigint[], $2::text[]) AS k(stream_id, writer), LATERAL (
			SELECT stream_id, writer, attempt, next, diverged, status, version, token
			FROM $S.writers WHERE stream_id = k.stream_id AND writer = k.writer
		) w
		UNION
		SELECT w.* FROM unnest($3::text[], $4::text[]) AS k(run_id, writer), LATERAL (
			SELECT id FROM $S.streams WHERE run_id = k.run_id OFFSET 0
		) s, LATERAL (
			SELECT stream_id, writer, attempt, next, diverged, status, version, token
			FROM $S.writers WHERE stream_id = s.id AND writer = k.writer OFFSET 0
		) w`)
	// (OFFSET 0 keeps the planner from flattening the two lookups into a
	// join it may order writer first: every step writer of a run is named
	// step/N, so it scanned every writer of the database for a run's, 2.5
	// ms at 2,000 runs and growing with the table.)
	set(&q.readFences, `SELECT f.* FROM unnest($1::text[], $2::text[]) AS k(run_id, writer), LATERAL (
			SELECT run_id, writer, attempt FROM $S.fences WHERE run_id = k.run_id AND writer = k.writer
		) f`)
	set(&q.readProducers, `SELECT p.* FROM unnest($1::bigint[], $2::text[]) AS k(stream_id, producer), LATERAL (
			SELECT stream_id, producer, epoch, last_seq FROM $S.producers
			WHERE stream_id = k.stream_id AND producer = k.producer
		) p`)
	set(&q.readKeys, `SELECT i.* FROM unnest($1::bigint[], $2::text[]) AS k(stream_id, key), LATERAL (
			SELECT stream_id, key, digest, result, expires_at FROM $S.idempotency_keys
			WHERE stream_id = k.stream_id AND key = k.key
		) i`)
	set(&q.readAnonTokens, `SELECT b.* FROM unnest($1::bigint[], $2::bigint[]) AS k(stream_id, token), LATERAL (
			SELECT stream_id, token FROM $S.batches WHERE stream_id = k.stream_id AND token = k.token AND token <> 0
		) b`)
	set(&q.replayWriters, `SELECT b.* FROM unnest($1::bigint[], $2::text[]) AS k(stream_id, writer), LATERAL (
			SELECT stream_id, writer, first_offset, data FROM $S.batches
			WHERE stream_id = k.stream_id AND writer = k.writer ORDER BY last_offset
		) b`)
	set(&q.insertEventsMany, `INSERT INTO $S.events (run_id, seq, type, op, name, attempt, data, error, final, at, wake_at)
		SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::bigint[],
			$7::bytea[], $8::text[], $9::boolean[], $10::bigint[], $11::bigint[])`)
	set(&q.putFences, `INSERT INTO $S.fences AS f (run_id, writer, attempt)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])
		ON CONFLICT (run_id, writer) DO UPDATE SET attempt = GREATEST(f.attempt, excluded.attempt)`)
	set(&q.insertBatchesMany, `INSERT INTO $S.batches (stream_id, last_offset, first_offset, writer, data, token, data_bytes)
		SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::bytea[], $6::bigint[], $7::bigint[])`)
	set(&q.setStreams, `UPDATE $S.streams x SET next_offset = u.next, closed = u.closed, last_access = u.access,
			closed_by = u.closed_by, closed_by_epoch = u.cb_epoch, closed_by_seq = u.cb_seq, stream_seq = u.seq,
			data_bytes = u.bytes
		FROM unnest($1::bigint[], $2::bigint[], $3::boolean[], $4::bigint[], $5::text[], $6::bigint[], $7::bigint[], $8::text[],
				$9::bigint[])
			AS u(id, next, closed, access, closed_by, cb_epoch, cb_seq, seq, bytes)
		WHERE x.id = u.id`)
	set(&q.putWriters, `INSERT INTO $S.writers AS w (stream_id, writer, attempt, next, diverged, status, version, token)
		SELECT u.stream_id, u.writer, u.attempt, u.next, u.diverged, u.status, 1, $7
		FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::boolean[], $6::smallint[])
			AS u(stream_id, writer, attempt, next, diverged, status)
		ON CONFLICT (stream_id, writer) DO UPDATE SET attempt = excluded.attempt, next = excluded.next,
			diverged = excluded.diverged, status = excluded.status, version = w.version + 1, token = excluded.token`)
	set(&q.putProducers, `INSERT INTO $S.producers (stream_id, producer, epoch, last_seq)
		SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[])
		ON CONFLICT (stream_id, producer) DO UPDATE SET epoch = excluded.epoch, last_seq = excluded.last_seq`)
	set(&q.putKeys, `INSERT INTO $S.idempotency_keys (stream_id, key, digest, result, expires_at)
		SELECT * FROM unnest($1::bigint[], $2::text[], $3::bytea[], $4::bytea[], $5::bigint[])
		ON CONFLICT (stream_id, key) DO UPDATE SET digest = excluded.digest, result = excluded.result,
			expires_at = excluded.expires_at`)
	// A run an Advance of the group changed gets the group's token; a run
	// only delivered to (an Advance's delivery) keeps its own, which its own
	// retried Advance looks for, and is made claimable now if parked.
	set(&q.updateRuns, `UPDATE $S.runs x SET
			status = CASE WHEN u.set_status THEN u.status ELSE x.status END,
			output = CASE WHEN u.set_status THEN u.output ELSE x.output END,
			error = CASE WHEN u.set_status THEN u.error ELSE x.error END,
			lease_owner = CASE WHEN u.release THEN '' ELSE x.lease_owner END,
			lease_expires = CASE WHEN u.release THEN 0 ELSE x.lease_expires END,
			wake_at = CASE WHEN u.release THEN u.wake WHEN u.wake_now THEN u.now ELSE x.wake_at END,
			awaits = CASE WHEN u.release THEN u.awaits ELSE x.awaits END,
			limiters = CASE WHEN u.release OR u.set_status THEN u.limiters ELSE x.limiters END,
			line_priority = CASE WHEN u.release OR u.set_status THEN u.line_priority ELSE x.line_priority END,
			updated_at = u.now,
			ended_at = CASE WHEN u.ended THEN u.now ELSE x.ended_at END,
			last_event = u.last_event,
			record_token = CASE WHEN u.recorded THEN $13 ELSE x.record_token END
		FROM unnest($1::text[], $2::boolean[], $3::text[], $4::bytea[], $5::text[], $6::boolean[], $7::bigint[],
			$8::bigint[], $9::boolean[], $10::bigint[], $11::boolean[], $12::boolean[], $14::text[], $15::text[], $16::bigint[])
			AS u(id, set_status, status, output, error, release, wake, now, ended, last_event, wake_now, recorded, awaits,
				limiters, line_priority)
		WHERE x.id = u.id`)
	set(&q.lockHooks, `SELECT h.token, h.run_id, h.op, h.disposed, h.received, h.created_at
		FROM unnest($1::text[]) AS k(token), LATERAL (
			SELECT * FROM $S.hooks WHERE token = k.token FOR UPDATE
		) h`)
	set(&q.setHook, `UPDATE $S.hooks SET disposed = $2, received = $3 WHERE token = $1`)
	set(&q.insertRuns, `INSERT INTO $S.runs (id, workflow, status, input, created_at, updated_at, wake_at, parent_id,
			lease_owner, lease_expires, lease_epoch, trace_parent, version)
		SELECT u.id, u.workflow, u.status, u.input, u.now, u.now, u.wake, u.parent, u.owner, u.expires, u.epoch, u.trace, u.version
		FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[], $5::bigint[], $6::text[],
				$7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::text[], $12::text[])
			AS u(id, workflow, input, now, wake, parent, status, owner, expires, epoch, trace, version)
		ON CONFLICT (id) DO NOTHING RETURNING `+sqlrow.RunCols)
	// runsByID wraps insertRuns: the runs it inserted and, for the ids it
	// did not (they exist), the runs as each create reads them
	// (sqlrow.FoundRunCols: its bound $13, whether it compares its input
	// $14), in one statement: each with whether it was inserted and, found,
	// its create's place in the arrays. (The outer SELECT's snapshot is the
	// statement's: it does not see the rows the insert adds, and a row
	// another transaction inserted while this one waited on it is missing:
	// the create op then retries.)
	set(&q.runsByID, `WITH ins AS (`+q.insertRuns+`)
		SELECT ins.*, false, false, false, true, 0::bigint FROM ins
		UNION ALL
		SELECT r.*, false, k.i FROM unnest($1::text[], $13::bigint[], $14::boolean[], $3::bytea[]) WITH ORDINALITY AS k(id, bound, same, cmp, i), LATERAL (
			SELECT `+sqlrow.FoundRunCols("k.bound", "(CASE WHEN k.same THEN COALESCE(k.cmp, 'null'::bytea) END)")+` FROM $S.runs WHERE id = k.id
		) r WHERE k.id NOT IN (SELECT id FROM ins)`)
	// A run stream is created only for a run that exists, and the run is
	// locked FOR KEY SHARE until the commit, as a foreign key would lock it:
	// a purge (which locks the runs it deletes FOR UPDATE, SKIP LOCKED)
	// either skips the run or has deleted it, and then no stream is made.
	// Locks of groups on the run (FOR NO KEY UPDATE) do not block it.
	set(&q.insertStreams, `INSERT INTO $S.streams (path, run_id, name, content_type, created_at, last_access)
		SELECT u.path, NULLIF(u.run_id, ''), u.name, u.content_type, u.now, u.now
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[]) AS u(path, run_id, name, content_type, now)
		WHERE u.run_id = '' OR EXISTS (SELECT 1 FROM $S.runs WHERE id = u.run_id FOR KEY SHARE)
		ON CONFLICT (path) DO NOTHING
		RETURNING `+sqlrow.StreamCols)
	// streamsByPath wraps insertStreams as runsByID wraps insertRuns.
	set(&q.streamsByPath, `WITH ins AS (`+q.insertStreams+`)
		SELECT ins.*, true FROM ins
		UNION ALL
		SELECT s.*, false FROM unnest($1::text[]) AS k(path), LATERAL (
			SELECT `+sqlrow.StreamCols+` FROM $S.streams WHERE path = k.path
		) s WHERE k.path NOT IN (SELECT path FROM ins)`)
	// claimIn is a claim inside a group: it skips the runs the group holds
	// ($5), marks the runs it claims with the group's token ($6), and, for
	// a retry, returns the runs the lost try claimed ($7, its token) rather
	// than claiming more. Runs parked in a limiter's line come first, up to
	// $11 (ClaimRunsParams.Lined), within the limit; claimed, they are
	// lined no more, and runnable now at their lease's end (a dead worker).
	// (A lined mark left on a leased run would have every claim's scan of
	// the lined walk the runs in flight: PostgreSQL's CPU, and lease
	// renewals behind it, under a flood.)
	set(&q.claimIn, `WITH prev AS (
			SELECT id, workflow, status, input, output, error, created_at, updated_at,
				wake_at, lease_owner, lease_expires, lease_epoch, cancel_requested, kind, parent_id, trace_parent,
				queue, queue_key, priority, dedupe, queued, version, seq
			FROM $S.runs WHERE $7 <> 0 AND record_token = $7 AND lease_owner = $1 AND status IN ('pending', 'running')
		), lined AS (
			SELECT id FROM $S.runs
			WHERE $11 > 0 AND NOT EXISTS (SELECT 1 FROM prev) AND id <> ALL ($5::text[])
				AND line_priority IS NOT NULL
				AND status IN ('pending', 'running') AND kind = '' AND wake_at > $3 AND (lease_owner = '' OR lease_expires <= $3)
				AND ($8::text[] IS NULL OR workflow = ANY ($8::text[]))
				AND (NOT queued OR cancel_requested) AND ($9::text[] IS NULL OR queue <> ALL ($9::text[]))
				AND ($10::text[] IS NULL OR version = ANY ($10::text[]))
			ORDER BY line_priority DESC, seq LIMIT least($11, $4)
			FOR NO KEY UPDATE SKIP LOCKED
		), c AS (
			SELECT id FROM $S.runs
			WHERE NOT EXISTS (SELECT 1 FROM prev) AND id <> ALL ($5::text[])
				AND status IN ('pending', 'running') AND kind = '' AND wake_at <= $3 AND (lease_owner = '' OR lease_expires <= $3)
				AND ($8::text[] IS NULL OR workflow = ANY ($8::text[]))
				AND (NOT queued OR cancel_requested) AND ($9::text[] IS NULL OR queue <> ALL ($9::text[]))
				AND ($10::text[] IS NULL OR version = ANY ($10::text[]))
			ORDER BY wake_at, seq LIMIT greatest($4 - (SELECT count(*) FROM lined), 0)
			FOR NO KEY UPDATE SKIP LOCKED
		), u AS (
			UPDATE $S.runs r SET status = 'running', lease_owner = $1, lease_expires = $2,
				lease_epoch = r.lease_epoch + 1, updated_at = $3, record_token = $6,
				line_priority = NULL, wake_at = CASE WHEN c.lined THEN $3 ELSE r.wake_at END
			FROM (SELECT id, true AS lined FROM lined UNION ALL SELECT id, false FROM c) c WHERE r.id = c.id
			RETURNING r.id, r.workflow, r.status, r.input, r.output, r.error, r.created_at, r.updated_at,
				r.wake_at, r.lease_owner, r.lease_expires, r.lease_epoch, r.cancel_requested, r.kind, r.parent_id, r.trace_parent,
				r.queue, r.queue_key, r.priority, r.dedupe, r.queued, r.version, r.seq, c.lined
		)
		SELECT * FROM u UNION ALL SELECT *, false FROM prev`)
	return q
}
