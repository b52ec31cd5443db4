// Package apply holds the request-level rules of weir's stores, once: what
// an Append, a FinishWriter, a CloseStream and an Advance do, in which order,
// and what a refused request leaves behind (nothing). The chunk rules they
// call are package stream's.
//
// # Basics
//
// A backend implements [Tx]: loads and saves of the state the rules need,
// inside its own transaction, with its own SQL, locking and caching. It
// validates a request (the Params' Check and WithDefaults), opens or joins a
// transaction, and calls [Append], [Finish], [Close] or [Advance]; it decides
// nothing itself. Create and delete decisions that a backend's SQL carries
// out its own way (a fork's copy runs server-side on PostgreSQL) are pure
// functions here too: [ForkPoint], [Delete], [Release], [Touch].
//
// # The refusal contract
//
// Every function here checks everything that can refuse the request before
// it changes any state a load returned and before its first save. So a
// request refused by a rule (a fence, a gap, a lost lease, a reused key…)
// has changed nothing in memory and written nothing, and a backend needs no
// undo for it. Only a save itself can fail after that; a backend whose saves
// can fail (SQL) then drops the state the request loaded and rolls the
// request back.
package apply

import (
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// Stream is a stream's state as the rules see it. A backend loads it with
// the stream's row locked (or its writes serialized) and may cache it; the
// rules change it in place and save it.
type Stream struct {
	ID    int64
	RunID string // empty for a standalone stream
	Head  stream.Head
	// Bytes is the data bytes written to the stream since it was created
	// (store.StreamInfo.DataBytes); backends save it with the head.
	Bytes int64
	// The Durable Streams metadata of standalone streams.
	Expiry     store.Expiry
	LastAccess time.Time
	ClosedBy   *stream.Producer // the producer request that closed it
	StreamSeq  string           // the last Stream-Seq accepted
	ForkSource int64            // 0: not a fork
	Forks      int64            // forks that reference it
	Deleted    bool             // soft-deleted
}

// Expired reports whether st is expired at now (store.Expiry.Passed).
func (st *Stream) Expired(now time.Time) bool { return st.Expiry.Passed(st.LastAccess, now) }

// Key is what a stream keeps of an idempotency key: the request's digest and
// its result, until ExpiresAt.
type Key struct {
	Digest    []byte // never nil: an empty digest is stored as empty
	Result    []byte // EncodeResult
	ExpiresAt time.Time
}

// Run is a run's lease and log position, as Advance checks and changes it.
type Run struct {
	ID        string
	Epoch     int64
	Owner     string // "": the lease is released
	Status    store.RunStatus
	LastEvent int64 // the seq of its last event, 0 for none
	// CancelRequested: a cancel is pending (RequestCancel); a worker that
	// releases the run must not leave it asleep.
	CancelRequested bool
}

// RunChange is how an Advance changes its run's row.
type RunChange struct {
	// Status, if not empty, is the run's new status; Output and Error go
	// with it.
	Status store.RunStatus
	Output []byte
	Error  string
	// Release gives the lease up (owner empty, no expiry); the run is then
	// claimable at WakeAt (zero: at once).
	Release bool
	WakeAt  time.Time
	// Awaits, with Release, is what messages wake the released run
	// (store.AdvanceParams.Awaits; nil: every one).
	Awaits *store.Awaits
	// Limiters, Lined and LinePriority, with Release, are what limiters
	// the released run waits for, and whether in a line
	// (store.AdvanceParams.Limiters); any other change of the row's status
	// or lease clears them.
	Limiters     []string
	Lined        bool
	LinePriority int
	// Ended reports a terminal Status: the run ended at Now.
	Ended bool
	// Wake makes the run claimable at Now (a hook's payload came to a
	// released run); the rule decides it, the backend only writes it.
	Wake bool
	Now  time.Time
}

// Tx is what a backend's write transaction offers the rules. Loads see the
// transaction's own earlier saves. A load returns state the rules may change
// in place (the backend's cache entry, say); the matching save persists it.
// Saves happen only after every check of the request passed (see the
// package doc).
type Tx interface {
	// Stream returns stream id's state; store.ErrNotFound if there is none.
	Stream(id int64) (*Stream, error)
	// Writer returns writer id's state on st, nil if it never wrote there.
	// A non-nil Writer has its Live records.
	Writer(st *Stream, id string) (*stream.Writer, error)
	// Fence returns the lowest attempt writer may use on run's streams, 0
	// if none was raised.
	Fence(run, writer string) (int64, error)
	// Producer returns producer id's state on st, nil if it has none.
	Producer(st *Stream, id string) (*stream.ProducerState, error)
	// Key returns what st keeps of idempotency key key, nil if nothing
	// (expired keys may be returned: the rules check ExpiresAt).
	Key(st *Stream, key string) (*Key, error)
	// Run returns run id's lease and log position; store.ErrNotFound if
	// there is none.
	Run(id string) (*Run, error)
	// WriterStreams returns the streams of run that writer wrote on, in id
	// order.
	WriterStreams(run, writer string) ([]*Stream, error)
	// RunStreams returns the streams of run that are not closed, in id
	// order.
	RunStreams(run string) ([]*Stream, error)

	// AddRecords writes recs, the records of one rules call on st, as one
	// batch, and st's new head.
	AddRecords(st *Stream, recs []stream.Record) error
	// SaveStream persists st's metadata: LastAccess, ClosedBy, StreamSeq.
	SaveStream(st *Stream) error
	// SaveWriter persists w's state on st (Attempt, Next, Diverged,
	// Status); created reports a writer Writer returned nil for.
	SaveWriter(st *Stream, w *stream.Writer, created bool) error
	// SaveFence raises the fence of writer on run to attempt.
	SaveFence(run, writer string, attempt int64) error
	// SaveProducer persists producer id's state on st.
	SaveProducer(st *Stream, id string, ps stream.ProducerState) error
	// SaveKey stores k as what st keeps of key key.
	SaveKey(st *Stream, key string, k *Key) error
	// AddEvents appends evs to run's log: their Seq and At are set, and
	// run.LastEvent is the last one's seq.
	AddEvents(run *Run, evs []store.Event) error
	// SaveRunEvent makes ev (an event_set event of run's log, Seq and At
	// set) its key's latest value (store.Store.GetRunEvent).
	SaveRunEvent(run *Run, ev *store.Event) error
	// SaveRun applies c to run's row.
	SaveRun(run *Run, c *RunChange) error
}
