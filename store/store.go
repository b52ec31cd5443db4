// Package store defines what weir needs from a database: the Store interface,
// its parameter and result types, and the sentinel errors every backend
// returns. It holds no implementation; backends live in sub-packages
// (sqlitestore, and later pgstore) and all pass the suite in storetest.
//
// # Basics
//
// A store keeps runs, each run's event log, and streams. Every operation takes
// a context and, where it has more than one argument, a *XxxParams struct, so
// fields can be added without breaking callers.
//
// The exactly-once rules are not here: a backend loads a stream's head and a
// writer's state, calls the pure functions of package stream inside its
// transaction, writes the records they return and saves the state.
//
// # Transactions
//
// Advance is the engine's one write: it appends events to a run's log, changes
// the run, and commits or aborts a step's writer on every stream of the run,
// atomically, fenced by the run's lease. That is how a step's outcome and its
// stream commit can never disagree.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/weirhq/weir/stream"
)

// Sentinel errors. Backends translate their driver's errors into these, and
// the stream rules' errors (stream.ErrFenced, stream.ErrGap, …) pass through
// unchanged. Test with errors.Is.
var (
	// ErrNotFound is returned for an unknown run or stream.
	ErrNotFound = errors.New("not found")
	// ErrNotRenewed is a RenewLeases result for a lease still held that the
	// store did not renew this round (its row was locked by a write in
	// progress, which a renewal skips rather than waits for): the caller
	// keeps the run and renews it at its next round.
	ErrNotRenewed = errors.New("lease not renewed this round")
	// ErrLeaseLost is returned when a run's lease epoch is no longer the one
	// given: another worker took the run over. The caller must stop running it.
	ErrLeaseLost = errors.New("lease lost")
	// ErrTooLarge is returned for a chunk over MaxChunkSize or an append over
	// MaxAppendBytes.
	ErrTooLarge = errors.New("too large")
	// ErrInvalid is returned for parameters that can never succeed (an empty
	// stream name, a negative offset, no chunks).
	ErrInvalid = errors.New("invalid argument")
	// ErrRunConflict is returned when a run id is reused for another workflow.
	ErrRunConflict = errors.New("run id taken by a run of another workflow or parent")
	// ErrClosedStore is returned after Close.
	ErrClosedStore = errors.New("store closed")
	// ErrGone is returned for a stream that was deleted while forks still
	// referenced it (StreamInfo.Deleted, "soft-deleted"): it keeps its
	// records for them but takes no appends and cannot be forked again.
	ErrGone = errors.New("stream deleted")
	// ErrKeyReused is returned for an append whose Idempotency-Key was used
	// before, on the same stream, with another request digest.
	ErrKeyReused = errors.New("idempotency key reused with another request")
	// ErrQuota is returned for a new standalone stream the store has no
	// room for (CreateStreamParams.MaxStreams). A full stream is
	// *stream.FullError (stream.ErrFull) instead.
	ErrQuota = errors.New("quota exceeded")
	// ErrHookConflict is returned for a hook whose token a live hook of
	// another run holds.
	ErrHookConflict = errors.New("hook token in use")
	// ErrHookGone is returned for a delivery to a hook that was disposed
	// or whose run ended. It matches ErrGone.
	ErrHookGone error = gone{"hook disposed"}
)

// gone is an error that matches ErrGone with its own words.
type gone struct{ msg string }

func (e gone) Error() string        { return e.msg }
func (e gone) Is(target error) bool { return target == ErrGone }

// Limits every backend enforces.
const (
	// MaxChunkSize is the largest chunk: 4 MiB.
	MaxChunkSize = 4 << 20
	// MaxAppendBytes is the largest append request: 16 MiB of chunks.
	MaxAppendBytes = 16 << 20
	// MaxAppendChunks is the most chunks in one append request.
	MaxAppendChunks = 10_000
	// MaxKeyLen bounds an idempotency key and a producer id.
	MaxKeyLen = 1 << 10
	// MaxHookPayload is the largest hook payload: 1 MiB.
	MaxHookPayload = 1 << 20
	// MaxMessagePayload is the largest message to a run: 1 MiB.
	MaxMessagePayload = 1 << 20
	// MaxRunMessages and MaxRunMessageBytes bound the messages and hook
	// payloads a run's log holds (their count, their bytes): one more is
	// ErrQuota. A run replays its whole log each time it resumes, and
	// those are clients' to grow. A child's end (DeliverHookParams.OnlyFirst)
	// is not counted.
	MaxRunMessages     = 10_000
	MaxRunMessageBytes = 16 << 20
	// MaxEventValue is the largest value of a run event: 1 MiB.
	MaxEventValue = 1 << 20
	// MaxTopicLen bounds a message topic and a run event's key.
	MaxTopicLen = 255
	// MaxTraceParentLen bounds a run's traceparent (55 bytes in version 00
	// of the W3C format; later versions may append fields).
	MaxTraceParentLen = 256
)

// Store is the core of weir's storage, what every backend implements: runs,
// their logs and leases, and their streams. An Advance applies every effect
// of the engine's events (hooks created, messages taken, children's ends
// delivered: package store/apply decides them), so the engine runs on the
// core alone; the entry points outsiders use to reach those — delivering to
// a hook, sending a message, standalone streams, retention, the World — are
// optional capabilities (Hooks, Messages, Standalone, Purger, WorldStore)
// that callers discover by interface assertion, as River's drivers do.
// Implementations are safe for concurrent use.
type Store interface {
	// CreateRun creates a run, or returns the existing run with the same ID and
	// created false. Returns ErrRunConflict if that run is of another workflow.
	CreateRun(ctx context.Context, p *CreateRunParams) (run *Run, created bool, err error)
	// GetRun returns a run. Returns ErrNotFound if there is none.
	GetRun(ctx context.Context, id string) (*Run, error)
	// ListRuns lists runs, newest first. Returns ErrNotFound if p.Before
	// names an unknown run.
	ListRuns(ctx context.Context, p *ListRunsParams) ([]*Run, error)
	// MigrateRuns moves the runs in flight (pending or running) of
	// application version p.From (those of p.RunIDs, if set) to p.To, so
	// that the workers of p.To claim them: knowingly, for their logs were
	// written by p.From's code. It returns the runs it moved, by id.
	MigrateRuns(ctx context.Context, p *MigrateRunsParams) ([]string, error)
	// ClaimRuns leases up to p.Limit runnable runs to p.Owner: runs not
	// finished, whose WakeAt has passed and whose lease is free or expired,
	// of one of p.Workflows if it is set. Each claim increments the run's
	// LeaseEpoch.
	ClaimRuns(ctx context.Context, p *ClaimRunsParams) ([]*Run, error)
	// RenewLease extends a lease. Returns ErrLeaseLost if the epoch is not the
	// run's current one, the lease was released or the run has finished, and
	// ErrNotFound for an unknown run; cancel reports a requested cancellation.
	RenewLease(ctx context.Context, p *RenewLeaseParams) (cancel bool, err error)
	// RequestCancel asks for a run to be cancelled and makes it claimable at
	// once. Returns ErrNotFound for an unknown run; a finished run is left alone.
	RequestCancel(ctx context.Context, id string) error
	// ListEvents returns a run's events with Seq > afterSeq, in order.
	// Returns ErrNotFound for an unknown run.
	ListEvents(ctx context.Context, runID string, afterSeq int64) ([]Event, error)
	// ListEventsPage returns a page of run p.RunID's log after p.After:
	// at most p.Limit events and about p.MaxBytes of their data and errors
	// (at least one event, whatever its size), and whether more follow.
	// For readers that do not hold a run's log whole (the HTTP API, the
	// UI). ErrNotFound for an unknown run.
	ListEventsPage(ctx context.Context, p *ListEventsParams) (*EventPage, error)
	// Advance applies one engine transaction (see AdvanceParams). Returns
	// ErrLeaseLost if p.LeaseEpoch is not the run's current epoch, or the
	// lease was released, or the run has finished; the stream rules' errors if
	// a writer cannot be committed or aborted (a Finish below the writer's
	// fence is *stream.FencedError). On error nothing is written.
	Advance(ctx context.Context, p *AdvanceParams) error

	// OpenStream returns the stream at p.Path, creating it if p.Create.
	// Returns ErrNotFound if it does not exist and p.Create is false, or if
	// p.RunID names an unknown run; ErrInvalid for a standalone path under
	// "runs/" or a Path that does not match RunID and Name.
	OpenStream(ctx context.Context, p *OpenStreamParams) (*StreamInfo, error)
	// GetStream returns a stream by ID. Returns ErrNotFound.
	GetStream(ctx context.Context, id int64) (*StreamInfo, error)
	// ListStreams returns the streams of a run, by name; none for an unknown
	// run.
	ListStreams(ctx context.Context, runID string) ([]*StreamInfo, error)
	// Append applies one all-or-nothing append (stream.Append). Returns
	// ErrNotFound, ErrTooLarge, ErrInvalid, or the rules' errors:
	// stream.ErrClosed, *stream.FencedError, *stream.GapError,
	// *stream.ConflictError, stream.ErrWriterFinished, stream.ErrMode. The
	// fence of a run stream's step writer (AdvanceParams.Fence) is applied.
	Append(ctx context.Context, p *AppendParams) (*AppendResult, error)
	// FinishWriter commits or aborts one writer on one stream (stream.Commit,
	// stream.Abort), for writers outside the engine. Returns ErrNotFound and
	// the rules' errors; the fence of a run stream's writer applies.
	FinishWriter(ctx context.Context, p *FinishWriterParams) (stream.Result, error)
	// CloseStream closes a stream; closing twice writes one close record.
	// Returns ErrNotFound.
	CloseStream(ctx context.Context, id int64) (stream.Result, error)
	// Read returns the live view's records from p.From on. Returns ErrNotFound,
	// and ErrInvalid for a From past the stream's next offset.
	Read(ctx context.Context, p *ReadParams) (*ReadResult, error)
	// Wait blocks until stream id has a record at offset >= next or is closed,
	// and returns nil; or returns ctx.Err(). Returns ErrNotFound, also when
	// the stream is deleted while Wait waits.
	Wait(ctx context.Context, id int64, next int64) error

	// Close releases the store; closing twice is harmless. Operations after it
	// return ErrClosedStore.
	Close() error
}

// Hooks is the capability to reach a run's hooks from outside it: the
// engine's NewHook, DeliverHook and Hooks, the server's /v1/hooks. A store
// without it runs every workflow that takes no hook.
type Hooks interface {
	// CreateHook creates a hook of a run: a token outsiders deliver payloads
	// to (DeliverHook), in the same transaction as its hook_created event
	// (p.Op, Name: the token). Creating it again (the same run, op and
	// token) changes nothing. Returns ErrLeaseLost, and ErrHookConflict if
	// a live hook of another run holds the token (a token is free again
	// once its hook is disposed or its run ended).
	CreateHook(ctx context.Context, p *HookParams) error
	// DisposeHook disposes of a run's hook, with a hook_disposed event:
	// deliveries to its token are ErrGone from then on. Disposing twice
	// changes nothing. Returns ErrLeaseLost, and ErrNotFound if the run has
	// no hook with that token.
	DisposeHook(ctx context.Context, p *HookParams) error
	// DeliverHook delivers a payload to the hook holding p.Token: a
	// hook_received event (Op: the hook's, Name: the token, Data: the
	// payload) in its run's log, and a parked run made claimable at once,
	// in one transaction, without the run's lease. With an idempotency key,
	// a delivery sent again gets the first one's reply (Duplicate) and adds
	// nothing. Returns ErrNotFound (no such hook), ErrGone (the hook was
	// disposed, or its run ended), ErrKeyReused.
	DeliverHook(ctx context.Context, p *DeliverHookParams) (*HookDelivery, error)
	// GetHook returns the hook holding token. Returns ErrNotFound.
	GetHook(ctx context.Context, token string) (*HookInfo, error)
	// ListHooks returns a run's hooks, by op (then token).
	ListHooks(ctx context.Context, runID string) ([]*HookInfo, error)
}

// Messages is the capability to send messages to runs and read the events
// they set: the engine's Send, Recv, SetEvent and GetEvent.
type Messages interface {
	// SendMessage sends a message to a run on a topic: a message_received
	// event (Name: the topic, Data: the payload) in its log, kept there
	// for the run to take whenever it asks, and a parked run made
	// claimable at once, in one transaction, without the run's lease. With
	// an idempotency key, a message sent again gets the first one's reply
	// (Duplicate) and adds nothing. Returns ErrNotFound (no such run),
	// ErrGone (the run ended), ErrKeyReused, ErrTooLarge, ErrInvalid.
	SendMessage(ctx context.Context, p *SendMessageParams) (*MessageSent, error)
	// GetRunEvent returns the value run runID's workflow last set for key
	// (the event_set events an Advance writes). Returns ErrNotFound for an
	// unknown run, or a key it never set.
	GetRunEvent(ctx context.Context, runID, key string) (*RunEvent, error)
	// ListRunEvents returns the latest value of each key run runID set,
	// by key; none for an unknown run. It holds every value whole (each
	// up to MaxEventValue, and a run sets any number of keys): a reader
	// that serves others lists with ListRunEventsPage.
	ListRunEvents(ctx context.Context, runID string) ([]*RunEvent, error)
	// ListRunEventsPage returns a page of run p.RunID's run events: at
	// most p.Limit keys after p.After, in the order of their bytes, each
	// with its latest value's Size, and its Value only if that is at most
	// MaxInlineEventValue bytes (a larger one is Elided, left unread:
	// GetRunEvent has it), and whether more keys follow. One bounded
	// query: a page holds at most p.Limit values of MaxInlineEventValue
	// whatever the run set. ErrNotFound for an unknown run.
	ListRunEventsPage(ctx context.Context, p *ListRunEventsParams) (*RunEventPage, error)
	// CountMessages returns what run runID's log says of the messages
	// sent to it (MessageCounts): read from the events' types and names,
	// and the data of its messages_taken events alone, never a message's
	// payload. A run's log may hold MaxRunMessageBytes of them, and a
	// status page asks for its counts at each request (red team, round
	// fourteen: GET /v1/runs/{id}/state read 64 MB of payloads to count
	// them). ErrNotFound for an unknown run.
	CountMessages(ctx context.Context, runID string) (*MessageCounts, error)
}

// Standalone is the capability of streams that belong to no run: the
// Durable Streams protocol's (package server): creation with options and
// forks, listing, deletion, and the sliding TTL. Append's optional
// preconditions (AppendParams: Producer, StreamSeq, Close, IdempotencyKey)
// serve it too.
type Standalone interface {
	// CreateStream creates a standalone stream with p's options, or returns
	// the stream already at p.Path with created false, whatever its
	// configuration and state (soft-deleted and expired included): comparing
	// it with the request is the caller's job. A fork (p.Fork) is a copy:
	// see ForkParams. p.Chunks become the stream's first records, anonymous
	// and committed; with p.Closed the stream is then closed. The new
	// stream's LastAccess is p.Now. All of it is one transaction.
	//
	// Returns ErrInvalid (an empty path, a path under "runs/", a negative
	// TTL, a fork offset past the source's NextOffset, a sub-offset past what
	// follows the fork offset), ErrTooLarge (p.Chunks over the append limits),
	// ErrNotFound (the fork source does not exist) and ErrGone (the fork
	// source is soft-deleted).
	CreateStream(ctx context.Context, p *CreateStreamParams) (info *StreamInfo, created bool, err error)
	// ListStandaloneStreams lists the standalone streams whose path starts
	// with p.Prefix, after p.After, in byte order of their paths: those a
	// reader can open (not deleted, not expired at p.Now). Returns
	// ErrInvalid for a bad prefix, cursor or limit.
	ListStandaloneStreams(ctx context.Context, p *ListStandaloneParams) (*StreamList, error)
	// DeleteStream deletes a standalone stream. A stream that forks still
	// reference (Forks > 0) is only soft-deleted: it keeps its records and
	// answers ErrGone from then on. Otherwise it is deleted with everything
	// it holds, its ID is never reused, its waiters wake (and get
	// ErrNotFound), and if it is a fork its source loses a reference: a
	// soft-deleted source left with none is deleted in turn, and so on up the
	// chain, in the same transaction.
	//
	// With p.IfExpiredAt set it is the Durable Streams protocol's lazy
	// expiry: the stream is deleted (or soft-deleted) only if it is expired
	// at that time (StreamInfo.Expired), and a stream that is not, or is
	// already soft-deleted, is left alone (DeleteKept, nil).
	//
	// Returns ErrNotFound, ErrGone (already soft-deleted, without
	// IfExpiredAt) and ErrInvalid (a run's stream).
	DeleteStream(ctx context.Context, p *DeleteStreamParams) (DeleteResult, error)
	// TouchStream renews a stream's sliding TTL: its LastAccess becomes p.At
	// unless it is later already. A stream without a TTL is left alone.
	// Returns ErrNotFound.
	TouchStream(ctx context.Context, p *TouchStreamParams) error
}

// Purger is the capability to delete finished runs: Config.Retention.
type Purger interface {
	// PurgeRuns deletes up to p.Limit finished runs (completed, failed or
	// cancelled) that ended before p.Before, oldest first, with everything
	// they hold: events, fences, streams and the streams' records and
	// state. It returns how many it deleted; call it again while that is
	// p.Limit. Each call is one short transaction that never waits for a
	// run another transaction holds (it is left for a later call), so it
	// does not block writers. A purged run's id may be used again. Returns
	// ErrInvalid for a zero Before or a negative Limit.
	PurgeRuns(ctx context.Context, p *PurgeRunsParams) (int, error)
}

// Full is every capability: what the backends in this module implement
// (each asserts it), and what a wrapper of a store forwards.
type Full interface {
	Store
	Hooks
	Messages
	Standalone
	Purger
	WorldStore
	Limits
	Schedules
	Forks
	RunsWithin
}

// RunStatus is a run's state.
type RunStatus string

// Run statuses. A run is pending until first claimed, running until it ends.
// A running run may be parked (sleeping or waiting to retry): see Run.WakeAt.
const (
	RunPending   RunStatus = "pending"
	RunRunning   RunStatus = "running"
	RunCompleted RunStatus = "completed"
	RunFailed    RunStatus = "failed"
	RunCancelled RunStatus = "cancelled"
)

// Terminal reports whether s is a final status.
func (s RunStatus) Terminal() bool {
	return s == RunCompleted || s == RunFailed || s == RunCancelled
}

// Valid reports whether s is one of the statuses above.
func (s RunStatus) Valid() bool {
	return s == RunPending || s == RunRunning || s.Terminal()
}

// Run is one execution of a workflow.
type Run struct {
	ID              string
	Workflow        string
	Status          RunStatus
	Input           []byte
	Output          []byte // set when completed
	Error           string // set when failed or cancelled
	CreatedAt       time.Time
	UpdatedAt       time.Time
	WakeAt          time.Time // not runnable before
	LeaseOwner      string
	LeaseExpires    time.Time
	LeaseEpoch      int64 // incremented by every claim
	CancelRequested bool
	// Kind is "" for a run of an engine's workflow and KindWorld for a
	// World run (package world), which no engine claims.
	Kind string
	// Parent is the run that started this one as its child; "" if none.
	Parent string
	// TraceParent is the W3C traceparent of the trace the run belongs to
	// (the caller's that started it, or one minted for it), so that every
	// execution of it, in any process, is a span of one trace; "" if none.
	TraceParent string
	// Queue is the limiter the run waited in before it started ("" if
	// none: CreateRunParams.Queue), QueueKey its fair-share group there,
	// Priority its place, Dedupe its deduplication key.
	Queue, QueueKey string
	Priority        int
	Dedupe          string
	// Queued: the run waits in its queue, not yet admitted (no claim
	// takes it until AdmitRuns does).
	Queued bool
	// Version is the application version the run started on (the
	// starting engine's Config.Version; "" if none): a worker claims only
	// the runs of the versions it can replay.
	Version string
	// Elided reports a run listed (ListRuns) without its Input and Output,
	// and its Error cut to MaxListedValue characters, one of the three
	// being over MaxListedValue bytes: GetRun has them. A page of a list
	// is then bounded, where a run's input may be 16 MiB.
	Elided bool
	// Lined reports a run ClaimRuns took from a limiter's line
	// (ClaimRunsParams.Lined): parked there before, it waits for a seat.
	// The claim makes it an ordinary run: claimable at its lease's end if
	// its worker dies, and no more lined.
	Lined bool
}

// MaxErrorBytes bounds a run's error as it is kept: what is past it is
// cut, with a note of how much (a failure's text is for people, and a run
// whose error held megabytes would make every read of it carry them).
const MaxErrorBytes = 64 << 10

// MaxListedValue is the largest input, output or error ListRuns carries:
// a run whose input or output is larger is listed without both, an error
// cut to it (Run.Elided).
const MaxListedValue = 4 << 10

// RunsWithin is an optional capability of a store: reading a run whose
// size the caller learns before it holds it. A server makes room for a
// run's reply before it reads the run, as a run's input may be 16 MiB and
// many clients may ask for it at once.
type RunsWithin interface {
	// GetRunWithin returns run id as GetRun does if its input and output
	// together are at most max bytes; a larger run comes without them
	// (Run.Elided), for the caller to make room before GetRun. size is
	// the bytes of its input, output and error either way. Returns
	// ErrNotFound if there is no such run.
	GetRunWithin(ctx context.Context, id string, max int64) (run *Run, size int64, err error)
}

// KindWorld is the Kind of a World run.
const KindWorld = "world"

// CreateRunParams creates a run.
type CreateRunParams struct {
	ID       string // required; the caller's idempotency key
	Workflow string // required
	Parent   string // the run starting it as its child; "" if none
	// OwnChild: a run that exists at ID is this one only if Parent started
	// it; another (a client's run at a child's default id, which is no
	// secret) is ErrRunConflict, never adopted.
	OwnChild bool
	// TraceParent is the W3C traceparent the run's spans descend from
	// (Run.TraceParent); at most MaxTraceParentLen bytes of text.
	TraceParent string
	Input       []byte
	WakeAt      time.Time // zero: runnable now
	// Owner, if set, leases the run to Owner for LeaseTTL as it is created,
	// as a ClaimRuns by Owner would (status running, LeaseEpoch 1), so that
	// the worker starting a run executes it without a claim. A run whose
	// WakeAt has not passed is not leased, nor is a run that existed (its
	// row is returned as it is). A worker that lost the reply and retries
	// finds its lease on the existing run: LeaseOwner is Owner and
	// LeaseEpoch 1.
	Owner    string
	LeaseTTL time.Duration // required with Owner

	// Queue, if set, names the limiter (store.Limits; ErrNotFound if none)
	// the run waits in before it starts: it is created Queued, and only
	// AdmitRuns lets it start, in line order, when the limiter's bounds
	// allow. With Owner, a run that would be the only one in its queue's
	// line and that its bounds have room for is admitted as it is created
	// and leased to Owner (one transaction, as without a queue); else it is
	// queued and Owner is ignored. A queued run holds its queue's slot from
	// its admission until it ends.
	Queue string
	// QueueKey is the run's group in its queue (a tenant): its runs share
	// the queue's PerKey bound, and the keys take turns. At most
	// limit.MaxNameLen bytes of UTF-8.
	QueueKey string
	// Priority: in its queue, runs of a higher priority start first.
	Priority int
	// Dedupe, with Queue, folds starts: while a run of Queue with this
	// Dedupe key is queued or running, a create with another id returns
	// that run (created false) and changes nothing, unless Debounce.
	Dedupe string
	// Version is the application version the run starts on; "" if none.
	// At most MaxVersionLen bytes of text.
	Version string
	// Debounce, with Dedupe, delays the run: it cannot start until
	// Debounce after the latest create of its key, and a create with its
	// key while it is still queued gives it that create's input and its
	// new start time. Once it started, creates are folded as with Dedupe.
	Debounce time.Duration
	// DebounceMax, with Debounce, caps how long a burst of creates can
	// postpone the run: it starts at the latest DebounceMax after its
	// first create (a fold never moves its start past that). At least
	// Debounce; 0: no cap.
	DebounceMax time.Duration

	// ElideFound: a run that exists at ID comes back (created false)
	// without its input and output if either is over MaxListedValue
	// bytes (Run.Elided), and they are not read: as a server's reply to
	// a start has it. A client that names a run of 15 MiB again and
	// again made each start read it whole, in the writer (red team,
	// round nineteen).
	ElideFound bool
	// SameInput: a run that exists at ID with another input than Input
	// (byte for byte; no input is null) is ErrKeyReused. The store
	// compares them without reading the run's input into the caller (a
	// start by an idempotency key, whose retry must carry the same
	// request).
	SameInput bool
}

// ListRunsParams filters ListRuns.
type ListRunsParams struct {
	Workflow string    // empty: any
	Status   RunStatus // empty: any
	// Before is a cursor: only runs created before this run (by creation
	// order). Empty: from the newest.
	Before string
	Limit  int // 0: 100
	// IDPrefix: only runs whose id begins with it. Empty: any.
	IDPrefix string
	// CreatedSince and CreatedBefore bound the runs' creation time: at or
	// after CreatedSince, before CreatedBefore. Zero: no bound.
	CreatedSince, CreatedBefore time.Time
	// Queue: only runs started in this queue. Empty: any.
	Queue string
	// Queued: only runs waiting in their queue, not yet admitted.
	Queued bool
	// NoData lists the runs' heads: their state, rank and queue without
	// their input, output or error (Elided, Error empty), none of which
	// is read. For a decision over many runs (a queued run's place in its
	// line, the runs no worker claims): a list of 1000 runs with values
	// of 4 KiB each read and held 12 MB (red team, round nineteen audit).
	NoData bool
}

// ListStandaloneParams filters ListStandaloneStreams.
type ListStandaloneParams struct {
	Prefix string // only paths that start with it; empty: all
	// After is a cursor: only paths after it (StreamList.Next of the page
	// before). Empty: from the first.
	After string
	Limit int       // 0: DefaultListLimit; at most MaxListLimit
	Now   time.Time // for expiry; zero: the store's clock
}

// StreamList is a page of ListStandaloneStreams.
type StreamList struct {
	Streams []*StreamInfo
	// Next is the cursor of the next page (ListStandaloneParams.After);
	// empty if this page is the last.
	Next string
}

// HookParams names a run's hook for CreateHook and DisposeHook.
type HookParams struct {
	RunID      string
	LeaseEpoch int64 // required: the caller holds the run's lease
	Token      string
	Op         int64     // the hook's operation in the run
	Now        time.Time // zero: the store's clock
}

// DeliverHookParams is one delivery to a hook.
type DeliverHookParams struct {
	Token   string
	Payload []byte // at most MaxHookPayload bytes
	// RunID, if set, is the run the hook must be of: a hook of another run
	// is ErrNotFound.
	RunID string
	// OnlyFirst makes the delivery only if the hook has received nothing;
	// otherwise it is answered as a Duplicate (with Seq 0) and adds
	// nothing: a child run's end is delivered once, by whoever comes
	// first.
	OnlyFirst bool
	// Close closes the hook with the delivery, in the same transaction: a
	// hook_disposed event follows the payload's (or stands alone, with an
	// empty Payload), deliveries after it are ErrGone, and the run's
	// takes get its payloads, then ErrHookDisposed. The sender's "that was
	// the last one".
	Close bool
	// IdempotencyKey, if set, makes the delivery idempotent per (token,
	// key) for KeyTTL; RequestDigest tells the same request from another.
	IdempotencyKey string
	RequestDigest  []byte
	KeyTTL         time.Duration // 0: DefaultKeyTTL
	Now            time.Time     // zero: the store's clock
}

// SendMessageParams is one message to a run.
type SendMessageParams struct {
	RunID   string
	Topic   string // CheckTopic
	Payload []byte // at most MaxMessagePayload bytes
	// IdempotencyKey, if set, makes the message idempotent per (run, key)
	// for KeyTTL; RequestDigest tells the same request from another.
	IdempotencyKey string
	RequestDigest  []byte
	KeyTTL         time.Duration // 0: DefaultKeyTTL
	Now            time.Time     // zero: the store's clock
}

// MessageSent is the reply to SendMessage.
type MessageSent struct {
	RunID string `json:"run_id"`
	Topic string `json:"topic"`
	Seq   int64  `json:"seq"` // the message_received event's seq in the run's log
	// Duplicate reports a message sent again with its idempotency key: it
	// added nothing.
	Duplicate bool `json:"duplicate,omitempty"`
}

// RunEvent is the latest value a run set for a key (weir.SetEvent).
type RunEvent struct {
	RunID string
	Key   string
	Value []byte    // JSON; nil when Elided
	Seq   int64     // its event_set event's seq in the run's log
	At    time.Time // when it was set
	// Size is the value's bytes, as stored (Value's length, unless
	// Elided).
	Size int
	// Elided reports a value a page (ListRunEventsPage) left out, being
	// over MaxInlineEventValue bytes: GetRunEvent has it.
	Elided bool
}

// MessageCounts is what a run's log says of the messages sent to it
// (CountMessages).
type MessageCounts struct {
	// Topics are the topics messages came on, in the order of each one's
	// first message, with how many came on it.
	Topics []TopicCount
	// Ended reports that the log holds an end of the run (run_completed,
	// run_failed, run_cancelled).
	Ended bool
	// Taken is how many of each topic's messages the run took, from its
	// messages_taken events (merged in the log's order, a later one's
	// count of a topic winning); nil if the log has none.
	Taken map[string]int
}

// TopicCount is how many messages came on one topic.
type TopicCount struct {
	Topic    string
	Received int
}

// The bounds of a page of a run's run events (ListRunEventsPage).
const (
	// MaxRunEventPage is the most keys a page lists.
	MaxRunEventPage = 1000
	// MaxInlineEventValue is the largest value a page carries: a larger
	// one is listed by its size alone (RunEvent.Elided).
	MaxInlineEventValue = 4 << 10
)

// ListRunEventsParams asks for a page of a run's run events
// (ListRunEventsPage).
type ListRunEventsParams struct {
	RunID string
	// After is the last key the reader has: the page starts after it, in
	// the order of the keys' bytes ("": at the first key).
	After string
	// Limit bounds the keys: 1 to MaxRunEventPage (0: MaxRunEventPage).
	Limit int
}

// Check validates a ListRunEventsPage call.
func (p *ListRunEventsParams) Check() error {
	if err := CheckRunID(p.RunID); err != nil {
		return err
	}
	if p.After != "" {
		if err := CheckTopic("run event key", p.After); err != nil {
			return err
		}
	}
	if p.Limit < 0 || p.Limit > MaxRunEventPage {
		return fmt.Errorf("%w: a page of %d run events (limit 1 to %d)", ErrInvalid, p.Limit, MaxRunEventPage)
	}
	return nil
}

// WithDefaults returns p with its bounds set.
func (p *ListRunEventsParams) WithDefaults() *ListRunEventsParams {
	q := *p
	if q.Limit == 0 {
		q.Limit = MaxRunEventPage
	}
	return &q
}

// RunEventPage is a page of a run's run events, by key.
type RunEventPage struct {
	Events []*RunEvent
	// More reports that keys follow the page's last.
	More bool
}

// HookDelivery is the reply to a delivery.
type HookDelivery struct {
	RunID string `json:"run_id"`
	Op    int64  `json:"op"`
	Seq   int64  `json:"seq"`   // the hook_received event's seq in the run's log
	Count int64  `json:"count"` // payloads the hook has received, this one included
	// Duplicate reports a delivery sent again with its idempotency key: it
	// added nothing.
	Duplicate bool `json:"duplicate,omitempty"`
	// Closed reports that the delivery closed the hook
	// (DeliverHookParams.Close).
	Closed bool `json:"closed,omitempty"`
}

// HookInfo describes a hook.
type HookInfo struct {
	Token     string
	RunID     string
	Op        int64
	Disposed  bool
	Received  int64 // payloads delivered
	CreatedAt time.Time
}

// ClaimRunsParams claims runs.
type ClaimRunsParams struct {
	Owner    string        // required: the worker's id
	Limit    int           // at least 1
	LeaseTTL time.Duration // required
	Now      time.Time     // zero: the store's clock
	// Workflows, if not nil, limits the claim to runs of these workflows:
	// an engine claims only what it can run, so engines with different
	// workflows can share a database.
	Workflows []string
	// SkipQueues: runs of these queues are not claimed (the worker runs
	// as many of them as it may, Config.QueueConcurrency).
	SkipQueues []string
	// Versions, if not nil, limits the claim to runs that started on these
	// application versions (Run.Version): a worker claims only the runs
	// its code can replay.
	Versions []string
	// Lined, if positive, claims first up to Lined runs parked in a
	// limiter's line (AdvanceParams.Lined) before their WakeAt, highest
	// LinePriority first, then oldest, within Limit: the worker has room
	// for as many in its lines (Config.LineRuns). Each is returned with
	// Run.Lined set; the claim clears its mark and makes its WakeAt now.
	Lined int
}

// MaxVersionLen bounds an application version.
const MaxVersionLen = 128

// MigrateRunsParams moves runs in flight from one application version to
// another (MigrateRuns).
type MigrateRunsParams struct {
	From, To string
	// RunIDs, if not nil, limits it to these runs.
	RunIDs []string
}

// Check validates a MigrateRuns call.
func (p *MigrateRunsParams) Check() error {
	if p.From == p.To {
		return fmt.Errorf("%w: a migration from version %q to itself", ErrInvalid, p.From)
	}
	// A version is checked as a start checks it (names.Version; "" is a
	// run started without one): a migration to a version no start could
	// name is refused, even when no run matches.
	for _, v := range []string{p.From, p.To} {
		if err := checkVersion(v); err != nil {
			return err
		}
	}
	for _, id := range p.RunIDs {
		if err := CheckID("run id", id); err != nil {
			return err
		}
	}
	return nil
}

// RenewLeaseParams extends a lease.
type RenewLeaseParams struct {
	RunID      string
	LeaseEpoch int64
	LeaseTTL   time.Duration
}

// EventType names an event of a run's log.
type EventType string

// Event types.
const (
	EventRunStarted     EventType = "run_started"
	EventStepStarted    EventType = "step_started"
	EventStepCompleted  EventType = "step_completed"
	EventStepFailed     EventType = "step_failed"
	EventSleepScheduled EventType = "sleep_scheduled"
	EventSleepFired     EventType = "sleep_fired"
	// EventSelected records which operation a Select chose (Data: its
	// index, JSON), so that replay chooses the same.
	EventSelected EventType = "selected"
	// The hooks' (CreateHook, DeliverHook, DisposeHook): Op is the hook's,
	// Name its token, Data a payload.
	EventHookCreated  EventType = "hook_created"
	EventHookReceived EventType = "hook_received"
	EventHookDisposed EventType = "hook_disposed"
	// EventChildStarted records a child run started (Name: its id, Data:
	// its workflow); its end comes as a hook_received at the same Op.
	EventChildStarted EventType = "child_started"
	// EventMessageReceived is a message sent to the run (SendMessage):
	// Name its topic, Data its payload; Op 0, for the run takes messages
	// whenever it asks.
	EventMessageReceived EventType = "message_received"
	// EventMessageSent records a message the run's workflow sent (Op: its
	// operation, Name: the run it went to, Data: {"topic", "seq"}), so
	// that replay does not send it again.
	EventMessageSent EventType = "message_sent"
	// EventSet is a run event the workflow set (weir.SetEvent): Name its
	// key, Data its value. An Advance that writes one also makes it the
	// key's latest value (GetRunEvent).
	EventSet EventType = "event_set"
	// EventPatched marks that the run took code patch Name's path
	// (weir.Patched) at Op, so that every replay takes it.
	EventPatched EventType = "patched"
	// EventMessagesTaken rides with the run's end: Data is how many
	// messages of each topic the run took ({"topic": n}); the others of
	// its log it left.
	EventMessagesTaken EventType = "messages_taken"
	// EventLimitWaiting: an attempt of a step (Op, Name, Attempt) waits
	// for a slot of its limiter (weir.WithLimiter); Data is {"limiter",
	// "reason"}. Once per attempt that waits; its step_started ends the
	// wait.
	EventLimitWaiting EventType = "limit_waiting"
	EventRunCompleted EventType = "run_completed"
	EventRunFailed    EventType = "run_failed"
	EventRunCancelled EventType = "run_cancelled"
)

// Event is one entry of a run's log.
type Event struct {
	Seq     int64 // dense per run from 1, assigned by the store
	Type    EventType
	Op      int64  // the durable operation's position in the run (steps, sleeps)
	Name    string // step name
	Attempt int64
	Data    []byte    // step output, encoded
	Error   string    // step or run error
	Final   bool      // step_failed: no more attempts
	At      time.Time // when it was recorded; set by the store if zero
	WakeAt  time.Time // sleep_scheduled: fire time; step_failed: retry time
}

// PurgeRunsParams selects the finished runs PurgeRuns deletes.
type PurgeRunsParams struct {
	Before time.Time // required: runs that ended before it
	Limit  int       // the most runs deleted; 0: 100
}

// ListEventsParams asks for a page of a run's log (ListEventsPage).
type ListEventsParams struct {
	RunID string
	// After is the seq of the last event the reader has: the page starts
	// after it (0: at the log's start).
	After int64
	// Limit bounds the events: 1 to MaxEventPage (0: DefaultEventPage).
	Limit int
	// MaxBytes bounds the page's data and errors: 1 to MaxEventPageBytes
	// (0: MaxEventPageBytes). The first event is taken whatever its size.
	MaxBytes int
	// DataOf, if set, is the one type of event whose data the page
	// carries: the others' Data is nil, never read and not counted in
	// MaxBytes (a log's outline: what /waiting reads, whose messages may
	// be megabytes; red team, round fifteen).
	DataOf EventType
}

// The bounds of an event page.
const (
	DefaultEventPage  = 100
	MaxEventPage      = 1000
	MaxEventPageBytes = 4 << 20
)

// Check validates a ListEventsPage call.
func (p *ListEventsParams) Check() error {
	if err := CheckRunID(p.RunID); err != nil {
		return err
	}
	if len(p.DataOf) > 64 {
		return fmt.Errorf("%w: an event type of %d bytes", ErrInvalid, len(p.DataOf))
	}
	if p.After < 0 || p.Limit < 0 || p.Limit > MaxEventPage || p.MaxBytes < 0 || p.MaxBytes > MaxEventPageBytes {
		return fmt.Errorf("%w: an event page after %d of %d events and %d bytes (limit 1 to %d, bytes 1 to %d)", ErrInvalid, p.After, p.Limit, p.MaxBytes, MaxEventPage, MaxEventPageBytes)
	}
	return nil
}

// WithDefaults returns p with its bounds set.
func (p *ListEventsParams) WithDefaults() *ListEventsParams {
	q := *p
	if q.Limit == 0 {
		q.Limit = DefaultEventPage
	}
	if q.MaxBytes == 0 {
		q.MaxBytes = MaxEventPageBytes
	}
	return &q
}

// EventPage is a page of a run's log.
type EventPage struct {
	Events []Event
	// More reports that the log goes on after the page's last event.
	More bool
}

// AdvanceParams is one engine transaction on a run.
type AdvanceParams struct {
	RunID      string
	LeaseEpoch int64 // required: fences a worker that lost the run
	// Events are appended to the run's log in order.
	Events []Event
	// Fence raises the lowest attempt Writer may append with on the run's
	// streams: a step attempt begins. Older attempts are then refused appends,
	// commits and aborts with *stream.FencedError, even on streams where the
	// newer attempt has not written. It is raised after the Advance's Finish,
	// which is decided against the fence as it was: an Advance may abort an
	// attempt and fence it off at once.
	Fence *Fence
	// Finish commits or aborts Writer at Attempt on every stream of the run it
	// wrote on.
	Finish *Finish
	// Status, if set, changes the run's status; Output and Error go with a
	// terminal status.
	Status RunStatus
	Output []byte
	Error  string
	// CloseStreams closes every stream of the run (with a terminal status).
	CloseStreams bool
	// Release gives the lease up, making the run claimable at WakeAt (zero:
	// at once). A terminal status releases it too.
	Release bool
	WakeAt  time.Time
	// SeenEvents, with Release and CheckSeen, is the seq of the last event
	// of the run's log the releasing worker knows, its own included (0: it
	// knows none): if the log has more (a hook payload or a message
	// delivered meanwhile, which no wake reached: the run was leased), the
	// run is claimable at once instead of at WakeAt.
	SeenEvents int64
	// CheckSeen makes SeenEvents count; without it nothing is compared
	// (a worker that cannot say what it saw).
	CheckSeen bool
	// Awaits, with Release, names the messages that wake the parked run:
	// nil, every message (a worker that cannot say); else only a message on
	// one of its Topics (a run asleep or waiting for a retry takes none:
	// Awaits{}). Another message waits in the log for the run's next look,
	// so a run is not replayed for messages it does not wait for.
	Awaits *Awaits
	// Limiters, with Release, are the limiters the parked run waits for (a
	// rate's or a budget's window, a held slot): a change of one of them
	// (SetLimiter) makes it claimable at once, and DeleteLimiter counts it
	// as a use. It is kept on the run's row until its next release or
	// status change, so it outlives the run's place in the limiter's line
	// (a place lasts a lease; a window may last a day).
	Limiters []string
	// Lined, with Release and Limiters, says the run waits in a limiter's
	// line for a held slot, not for a time: it is claimable (besides at
	// WakeAt) by a ClaimRuns with room in its lines (ClaimRunsParams.Lined),
	// highest LinePriority first, then oldest. A worker with more runs in
	// line than it keeps parks them so (Config.LineRuns), and claims never
	// stop at a flood of runs that wait for one limiter.
	Lined        bool
	LinePriority int
	// Deliver, if set, is a delivery to a hook of another run made in the
	// same transaction, after everything else (a child run's end, to its
	// parent's hook for it: the parent cannot miss it, whenever the
	// child's worker dies). Its RunID and OnlyFirst are required and its
	// IdempotencyKey must be empty. A delivery the hook refuses (its hook unknown,
	// disposed or of another run; its run ended or gone) refuses nothing
	// of the Advance: it is not made.
	Deliver *DeliverHookParams
}

// Awaits is what a parked run waits for among its messages: the topics
// whose messages wake it (AdvanceParams.Awaits).
type Awaits struct {
	Topics []string
}

// Wakes reports whether a message on topic wakes a run parked with a:
// always when a is nil.
func (a *Awaits) Wakes(topic string) bool {
	return a == nil || slices.Contains(a.Topics, topic)
}

// Fence is the lowest attempt a writer of a run may still append with.
type Fence struct {
	Writer  string
	Attempt int64
}

// Finish is a step writer's outcome.
type Finish struct {
	Writer  string
	Attempt int64
	Commit  bool // true: commit; false: abort for good
}

// StreamInfo describes a stream.
type StreamInfo struct {
	ID          int64  // never reused, even after DeleteStream
	Path        string // unique; a run's stream is at RunStreamPath(run, name)
	RunID       string // empty for a standalone stream
	Name        string // the name within its run
	ContentType string // as given at creation, parameters included
	NextOffset  int64
	Closed      bool
	CreatedAt   time.Time
	// DataBytes is the data bytes written to the stream since it was
	// created (a fork's copied records not included): what
	// AppendParams.MaxBytes limits.
	DataBytes int64

	// Durable Streams metadata. Run streams have none: no expiry, no forks.

	// Expiry is when the stream expires; the zero value never does.
	Expiry Expiry
	// LastAccess is when the sliding TTL was last renewed: at creation, by
	// every append (AppendParams.Now) and by TouchStream.
	LastAccess time.Time
	// ClosedBy is the idempotent producer request that closed the stream,
	// if one did (AppendParams.Producer with Close): its retries are
	// acknowledged.
	ClosedBy *stream.Producer
	// StreamSeq is the last Stream-Seq an append carried; empty if none.
	StreamSeq string
	// Fork describes where a fork was forked from; nil for other streams.
	Fork *ForkInfo
	// Forks counts the forks of this stream that exist (soft-deleted ones
	// included): a stream with forks is only soft-deleted by DeleteStream.
	Forks int64
	// Deleted marks a soft-deleted stream (see ErrGone).
	Deleted bool
}

// Expiry is a standalone stream's lifetime, as the Durable Streams protocol
// sets it: a sliding TTL that reads and appends renew, and/or an absolute
// time. The zero value never expires.
type Expiry struct {
	TTL    time.Duration // the sliding window, if HasTTL (0 is valid: already expired)
	HasTTL bool
	At     time.Time // the absolute expiry; zero: none
}

// Expired reports whether the stream is expired at now: its sliding TTL ran
// out since LastAccess, or its absolute expiry passed. Both are exact to the
// nanosecond the store keeps.
func (si *StreamInfo) Expired(now time.Time) bool { return si.Expiry.Passed(si.LastAccess, now) }

// Passed reports whether a stream with expiry e, last accessed at
// lastAccess, is expired at now: the one expiry rule of every backend.
func (e Expiry) Passed(lastAccess, now time.Time) bool {
	if e.HasTTL && !now.Before(lastAccess.Add(e.TTL)) {
		return true
	}
	return !e.At.IsZero() && !now.Before(e.At)
}

// ForkInfo is where a fork came from, as its creation gave it.
type ForkInfo struct {
	SourceID   int64
	SourcePath string
	Offset     int64 // the fork offset, resolved (ForkParams.Offset -1 is stored as the source's NextOffset)
	SubOffset  int64 // as requested; 0 for none
}

// CreateStreamParams creates a standalone stream.
type CreateStreamParams struct {
	Path        string   // required; not under "runs/"
	ContentType string   // empty: application/octet-stream
	Expiry      Expiry   // zero: never expires
	Chunks      [][]byte // initial records, anonymous and committed; the limits of CheckAppend apply
	Closed      bool     // close the stream after Chunks
	Fork        *ForkParams
	Now         time.Time // creation time and first LastAccess; zero: the store's clock
	// MaxStreams, if positive, refuses a new stream (ErrQuota) when the
	// store already holds that many standalone streams (not deleted; an
	// expired stream counts until it is purged). A create that finds its
	// stream is answered whatever the count.
	MaxStreams int64
	// MaxBytes, if positive, is the new stream's byte limit for its initial
	// Chunks (*stream.FullError beyond it), as AppendParams.MaxBytes is for
	// an append. A fork's copied records do not count toward it.
	MaxBytes int64
}

// ForkParams makes CreateStream create a fork: a new stream that starts as a
// copy of the live log of stream SourceID below Offset, at the same offsets,
// except that
//   - the source's close record is not copied: a fork starts open;
//   - a writer whose attempt is still open at Offset gets an
//     abort{fromSeq 0} record at the fork's first own offsets: its chunks
//     can never commit in the fork;
//   - nothing of the source's writer, producer or Stream-Seq state is
//     copied: the copied records never count toward the fork's writers
//     (a writer that writes on the fork starts afresh, and Writer.Replay
//     must not see the copied records), producers start anew.
//
// The fork's NextOffset is then at least Offset. The source gains a
// reference (Forks) in the same transaction.
type ForkParams struct {
	SourceID int64
	// Offset is the fork point: records at offsets below it are copied. -1
	// means the source's NextOffset. Past the source's NextOffset is
	// ErrInvalid.
	Offset int64
	// SubOffset > 0 moves the fork point into what follows Offset, where
	// the first data record at or after Offset is (ErrInvalid if there is
	// none):
	//   - with SubRecords, SubOffset data records from there on are copied
	//     too, with whatever records lie between them (ErrInvalid if the
	//     source has fewer);
	//   - otherwise the fork gets a new anonymous record holding the first
	//     SubOffset bytes of that data record, at that record's offset
	//     (ErrInvalid if the record is shorter).
	SubOffset  int64
	SubRecords bool
}

// DeleteStreamParams deletes a standalone stream.
type DeleteStreamParams struct {
	ID int64
	// IfExpiredAt, if set, deletes the stream only if it is expired at that
	// time (see DeleteStream).
	IfExpiredAt time.Time
}

// DeleteResult says what DeleteStream did.
type DeleteResult uint8

// DeleteStream results.
const (
	DeleteKept DeleteResult = iota // nothing: not expired at IfExpiredAt, or already soft-deleted
	DeleteSoft                     // soft-deleted: forks still reference it
	DeleteFull                     // deleted
)

// TouchStreamParams renews a stream's sliding TTL.
type TouchStreamParams struct {
	ID int64
	At time.Time // zero: the store's clock
}

// RunStreamPath is the path of a run's stream.
func RunStreamPath(runID, name string) string { return "runs/" + runID + "/" + name }

// OpenStreamParams opens or creates a stream. Either Path, or RunID and Name.
type OpenStreamParams struct {
	Path        string
	RunID       string
	Name        string
	Create      bool
	ContentType string // on create; empty: application/octet-stream
}

// AppendParams is one append request.
//
// The fields after Chunks are the Durable Streams protocol's request-level
// options. The store applies them, with the chunk rules, in one transaction,
// in this order; the first that refuses the request ends it and nothing is
// written:
//
//  1. The stream: ErrNotFound if it does not exist or is expired at Now
//     (StreamInfo.Expired); ErrGone if it is soft-deleted.
//  2. IdempotencyKey: a key this stream saw before with the same
//     RequestDigest, and not yet expired, returns that request's result again
//     (AppendResult.Replayed) and nothing else happens; with another digest,
//     ErrKeyReused.
//  3. A closed stream: a retry of the request that closed it (Producer equal
//     to StreamInfo.ClosedBy) is acknowledged (Duplicate); so is a close
//     alone (Close without Chunks, Writer or Producer); a Writer's exact
//     retransmits are acknowledged by the chunk rules; anything else is
//     stream.ErrClosed.
//  4. Producer (stream.Produce): a retry of an accepted request is
//     acknowledged as Duplicate and nothing else happens (no chunk, no
//     close, no Stream-Seq); or *stream.StaleEpochError,
//     stream.ErrEpochSeq, *stream.ProducerGapError.
//  5. StreamSeq (stream.CheckStreamSeq): *stream.StreamSeqError.
//  6. The chunks (stream.Append), as without the options.
//  7. Close closes the stream (stream.Close), recording Producer as
//     StreamInfo.ClosedBy.
//
// On success the producer's state, the Stream-Seq, LastAccess (= Now, for a
// stream with a TTL) and the idempotency key (with the result) are saved
// with the records.
type AppendParams struct {
	StreamID int64
	Writer   string // empty: anonymous, committed at once
	Attempt  int64  // 0: committed at append
	FirstSeq int64
	// Chunks are the chunks; at least one, unless Close is set.
	Chunks [][]byte
	// Late lets a committed attempt go on writing (stream.AppendRequest):
	// the World's step writers set it.
	Late bool
	// MaxBytes, if positive, is the stream's limit of data bytes: new data
	// that would take it past the limit is refused whole with
	// *stream.FullError (retransmits and adopted chunks are not new data).
	// The bytes a stream holds are those written to it since it was created
	// (StreamInfo.DataBytes).
	MaxBytes int64

	// Producer is a Durable Streams idempotent producer's request. It needs
	// an anonymous append (Writer empty): the producer rule replaces the
	// chunk-level dedupe.
	Producer *stream.Producer
	// StreamSeq is the request's Stream-Seq; empty for none.
	StreamSeq string
	// Close closes the stream after the chunks (which may then be none).
	Close bool
	// IdempotencyKey, if set, makes the append idempotent per (stream, key)
	// for KeyTTL: RequestDigest (up to 64 bytes, compared exactly) tells
	// the same request from another one.
	IdempotencyKey string
	RequestDigest  []byte
	KeyTTL         time.Duration // 0: 24h
	// Now is the time for expiry, TTL renewal and the key's lifetime; zero:
	// the store's clock.
	Now time.Time
}

// AppendResult is the reply to an append.
type AppendResult struct {
	Acks       []stream.Ack // one per chunk; none for a Duplicate
	NextOffset int64        // the stream's next offset after the append
	// Aborted reports that the append wrote an abort record: its writer's
	// attempt diverged from an earlier attempt's bytes (semantics.md).
	Aborted bool
	// Closed reports that the stream is closed after the append.
	Closed bool
	// Duplicate reports a retry of an accepted producer request (or of the
	// request that closed the stream) that was acknowledged without writing.
	Duplicate bool
	// ProducerEpoch and ProducerSeq are the producer's state after the
	// request: for a Duplicate, the highest seq accepted (or the closing
	// request's seq).
	ProducerEpoch int64
	ProducerSeq   int64
	// Replayed reports the stored result of an earlier request with the
	// same IdempotencyKey and RequestDigest; all other fields are that
	// request's.
	Replayed bool
}

// FinishWriterParams commits or aborts one writer on one stream.
type FinishWriterParams struct {
	StreamID int64
	Writer   string
	Attempt  int64
	Commit   bool
}

// ReadParams reads a stream's live view.
type ReadParams struct {
	StreamID int64
	From     int64 // first offset
	Limit    int   // most records; 0: 1000
	MaxBytes int   // at most this many data bytes, except one larger record alone; 0: 4 MiB
	// Pieces: a record larger than MaxBytes that would begin the page is
	// returned alone, as a piece of MaxBytes of its data at most
	// (ReadResult.Piece), so that a reader never holds more than its page
	// whatever the record sizes.
	Pieces bool
	// DataFrom, with Pieces, is the first byte of the data of record From
	// that the page returns: the page is that record's next piece alone.
	// It must be within the record's data.
	DataFrom int64
}

// ReadResult is a page of the live view.
type ReadResult struct {
	Records    []stream.Record
	NextOffset int64 // the stream's next offset when read
	Closed     bool
	// Piece is set when Records is one piece of a record (ReadParams.Pieces):
	// Records[0].Data are its data bytes from Piece.From on.
	Piece *Piece
}

// Piece is where a piece of a record's data lies in it.
type Piece struct {
	From int64 // the piece's first byte in the record's data
	Size int64 // the record's data length
}

// End is the byte of the record's data after the piece of n bytes.
func (p *Piece) End(n int) int64 { return p.From + int64(n) }

// HookRef is how logs, traces and run errors name a hook: "hook:" and 16
// hex digits of its token's SHA-256. A token is a capability (whoever
// holds it delivers to the hook), and those are read more widely than the
// API: the reference tells hooks apart and matches the token its owner
// holds, without giving it away. (weir.HookRef is the same.)
func HookRef(token string) string {
	d := sha256.Sum256([]byte(token))
	return "hook:" + hex.EncodeToString(d[:8])
}
