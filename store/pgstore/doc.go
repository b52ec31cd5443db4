// Package pgstore is weir's PostgreSQL store, for many weir processes
// (workers and servers) on one database. It implements store.Store with pgx
// v5 and passes the storetest suite, unchanged.
//
// # Basics
//
// Open a store with [Open] (a postgres:// URL) or [New] (a pgxpool.Pool you
// own), and close it with [Store.Close]. Open creates [Config.Schema]
// ("weir" by default) and applies the embedded, versioned migrations
// (migrations/NNNN_*.sql) in one transaction under an advisory lock, so any
// number of processes may start at once; a schema migrated by a newer build is
// refused with [ErrSchemaTooNew].
//
// The database is the truth. Per process the store keeps only a cache of
// writers' dedupe states (their live records' offsets and digests, which
// adopting a retry's chunks needs), each tagged with the version of its
// writers row: an entry is used only while the versions match, and a writer
// another process changed is rebuilt from its stream's log.
//
// # Transactions and locks
//
//   - A claim takes runnable runs with FOR NO KEY UPDATE SKIP LOCKED: claimers
//     never wait for each other nor share a run.
//   - An append by a writer locks its run FOR KEY SHARE, then its stream FOR
//     UPDATE, reads the fence and the writer's row, applies the rules of
//     package stream here and writes one batch row, the stream's head and the
//     writer's row. Appends to one stream are serialized by its row lock and
//     by nothing else; the two round trips are pipelined batches (BEGIN and
//     the reads; the writes and COMMIT). An anonymous append and a close are
//     one statement each.
//   - Record locks its run FOR UPDATE, which waits for the appends in flight
//     on the run's streams and holds off new ones, then its streams in id
//     order: a fence it raises is seen by every later append. A Record
//     without stream work is one statement.
//
// Locks are always taken run first, then streams in id order, so these
// transactions cannot deadlock one another.
//
// # Errors and retries
//
// Driver errors are translated in one place: callers see the sentinels of
// package store and stream, a context's error, or an [*Error]. Errors that a
// new attempt may cure (a lost connection, a server restart, a serialization
// failure or deadlock) are retried for up to [Config.RetryFor]. When the
// connection is lost after the commit was sent, the outcome is unknown:
// Record, Append by a writer and FinishWriter carry a token saved with their
// writes, so their retry finds out whether the first attempt committed and
// is never applied twice; claims and anonymous appends are not retried then
// and return an [*Error] with Unknown set.
//
// # Live tails
//
// A Wait in one process wakes on a commit in another through LISTEN/NOTIFY:
// see notify.go. Notifications are sent after the commit, in their own
// transaction, coalesced (Config.NotifyInterval); a Wait also polls
// (Config.PollInterval), so a lost notification costs latency, never data.
//
// # Caveats
//
// Timestamps come from each process's clock (Config.Now): keep the hosts'
// clocks synchronized; leases (15s by default) tolerate small skew.
//
// The store keeps no state a restart needs: a crashed process loses nothing
// but its cache.
package pgstore
