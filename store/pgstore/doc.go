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
// # Group commit, transactions and locks
//
// Every write (Append, Advance, FinishWriter, CloseStream, CreateRun,
// OpenStream's creation, ClaimRuns) goes through the store's committers
// ([Config.Committers]):
// each takes the writes waiting, up to [Config.MaxBatch], and applies them
// in one transaction of two pipelined round trips. The first locks every run
// and stream they touch and reads, set-wise, what the rules need (writer
// rows, fences, producers, idempotency keys); the rules run here, write
// after write; the second writes everything, set-wise (one INSERT of all
// batches, one UPDATE of all stream heads, …), and commits. Concurrent
// writers so share one commit, and a group of many writes costs about as
// many statements as one. A write the rules or a lost lease refuse writes
// nothing and gets its own error; the others go on.
//
//   - Locks are taken runs first, then streams, each set in id order, in one
//     statement each: groups in any number of processes cannot deadlock one
//     another. Appends to one stream are serialized by its row lock and by
//     nothing else.
//   - An Advance locks its run FOR NO KEY UPDATE (which a run stream's
//     foreign-key check does not wait for), and so does an append by a writer to
//     one of the run's streams: an append reads the run's fences after any
//     Advance that raises one has committed, so a zombie attempt is fenced on
//     every stream from the moment the new attempt's start commits.
//   - A claim takes runnable runs with FOR NO KEY UPDATE SKIP LOCKED:
//     claimers never wait for each other nor share a run. It skips the runs
//     its own group holds.
//
// # Errors and retries
//
// Driver errors are translated in one place: callers see the sentinels of
// package store and stream, a context's error, or an [*Error]. Errors that a
// new attempt may cure (a lost connection, a server restart, a serialization
// failure or deadlock) are retried for up to [Config.RetryFor]. When the
// connection is lost after the commit was sent, the outcome is unknown: each
// group saves a random token with the rows it writes (the run of an Advance,
// the writer row of an append or finish, the batch of an anonymous append),
// so a retried write finds out whether its group committed and is never
// applied twice (a retried claim gets back the runs its lost try took).
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
