package weir

import (
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// The store's and the stream package's types an SDK user meets, so that
// only this package need be imported.

// Run is a run as the store keeps it (GetRun, Wait).
type Run = store.Run

// RunStatus is a run's status.
type RunStatus = store.RunStatus

// Run statuses.
const (
	RunPending   = store.RunPending
	RunRunning   = store.RunRunning
	RunCompleted = store.RunCompleted
	RunFailed    = store.RunFailed
	RunCancelled = store.RunCancelled
)

// Event is one entry of a run's log (Engine.Events).
type Event = store.Event

// Kind is a stream record's kind.
type Kind = stream.Kind

// Record kinds. A data record's Seq is its seq; use Record.FromSeq for an
// abort (the first seq it voids) and Record.Count for a commit (how many
// chunks it commits).
const (
	KindData   = stream.KindData
	KindAbort  = stream.KindAbort
	KindCommit = stream.KindCommit
	KindClose  = stream.KindClose
)
