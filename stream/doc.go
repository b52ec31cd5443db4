// Package stream holds the exactly-once rules of weir's streams, once, as pure
// functions over in-memory state. Every store backend loads a stream's [Head]
// and a writer's [Writer], calls [Append], [Commit], [Abort] or [Close] inside
// its own transaction, writes the [Record]s they return and saves the changed
// state. No backend re-implements a rule.
//
// # Basics
//
// A stream is an append-only log of records at dense offsets 0, 1, 2 …. A data
// record carries one chunk, tagged with the writer that wrote it, the attempt
// of that writer and the chunk's 0-based seq within the attempt. A writer's
// identity survives attempts (a step's writer is the step's position in its
// run), so when attempt 2 re-emits the bytes attempt 1 already wrote, [Append]
// adopts the existing records instead of appending them again. When attempt 2
// writes other bytes, one abort record voids the earlier attempt's suffix from
// the first divergence on. A commit record, written in the same transaction as
// the step's outcome, makes the surviving records part of the committed view.
//
// Attempt 0 means "committed at append": anonymous appends, external
// producers and workflow-code writes use it and never need a commit record.
//
// # Views
//
// The live view is every record in offset order. The committed view holds the
// data of committed writers only, each chunk once, and never passes the last
// stable offset (the first record whose writer is still open); [Committed]
// computes it incrementally from the live view, starting at any offset.
// [Voids] tells a live reader which records it already saw an abort voided.
//
// # Caveats
//
// Digests are the first 16 bytes of SHA-256. Every function here mutates its
// arguments only when it returns a nil error: an append is all or nothing.
package stream
