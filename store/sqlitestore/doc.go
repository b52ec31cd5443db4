// Package sqlitestore is weir's embedded default store: one SQLite file, in
// WAL mode, opened with the pure-Go modernc.org/sqlite driver (no cgo). It
// implements store.Store and passes the storetest suite.
//
// # Basics
//
// Open a store with [Open] and close it with [Store.Close]. One store owns
// the file: it keeps each stream's head and each writer's dedupe state in
// memory and trusts it. Open enforces this with an advisory lock on
// "<path>-lock", which the kernel releases when the process ends however it
// ends; a second Open, in this process or another, returns [ErrInUse].
//
// Every write (creating runs and streams, claims, leases, Record, Append,
// FinishWriter, CloseStream, RequestCancel) goes through one goroutine that
// owns the only write connection. It takes every operation waiting in its
// queue, up to [Config.MaxBatch], runs them in one transaction, each inside a
// SAVEPOINT so that one operation's failure undoes only that operation, and
// commits once: concurrent writers share one fsync (group commit). Reads use a
// separate pool of connections, which WAL lets run beside the writer.
//
// Each append is stored as one row holding all of its records
// (stream.EncodeBatch), so a thousand chunks cost one insert.
//
// # Caveats
//
// Commits are durable by default (synchronous=FULL: every commit is fsynced).
// [Config.Synchronous] "NORMAL" trades the last commits before a power loss for
// speed; the database stays consistent either way.
//
// The lock is advisory and Unix-only: elsewhere, and for programs that open
// the file without this package, keeping to one writer is the caller's job.
//
// A write whose context ends while it waits in the queue is dropped and
// returns the context's error; once the writer goroutine has begun it, the
// caller waits for its outcome, so an error always means nothing was written.
package sqlitestore
