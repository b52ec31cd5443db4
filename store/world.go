package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/weirhq/weir/world"
)

// WorldStore is the storage of weir's World (package world): Vercel Workflow
// runs, their events, steps, hooks and waits, their streams by name, and the
// durable queue that pushes their messages to the app. Both backends
// implement it beside Store; a World run is also a run of Store (kind
// "world", never claimed by an engine), so its streams are run streams.
type WorldStore interface {
	// WorldEvent applies one events.create (world.Decide) and its stream
	// effects in one transaction. Returns the world package's errors.
	WorldEvent(ctx context.Context, p *WorldEventParams) (*WorldEventResult, error)
	// WorldRun returns a World run; world.ErrRunNotFound.
	WorldRun(ctx context.Context, id string) (*world.Run, error)
	// WorldRunHead returns a World run without its input and output (a
	// world.Run.Head), for a reply that leaves them out (resolveData=none):
	// they may be 30 MiB, and were read to be stripped (red team, round
	// twenty); world.ErrRunNotFound.
	WorldRunHead(ctx context.Context, id string) (*world.Run, error)
	// WorldRuns lists World runs, newest first.
	WorldRuns(ctx context.Context, p *WorldListParams) (*WorldPage[world.Run], error)
	// WorldEvents lists a run's events by slot (p.RunID), or the events of
	// a correlation id (p.CorrelationID, in every run or in p.RunID's).
	WorldEvents(ctx context.Context, p *WorldListParams) (*WorldPage[world.Event], error)
	// WorldEventByID returns one event of a run; store.ErrNotFound.
	WorldEventByID(ctx context.Context, runID, eventID string) (*world.Event, error)
	// WorldStep returns a step of a run (runID empty: of any run, the
	// oldest: the runtime mints step ids unique);
	// world.ErrStepNotFound.
	WorldStep(ctx context.Context, runID, stepID string) (*world.Step, error)
	// WorldSteps lists a run's steps, oldest first.
	WorldSteps(ctx context.Context, p *WorldListParams) (*WorldPage[world.Step], error)
	// WorldHook returns a live hook by id; world.ErrHookNotFound.
	WorldHook(ctx context.Context, hookID string) (*world.Hook, error)
	// WorldHookByToken returns the live hook holding token;
	// world.ErrHookNotFound.
	WorldHookByToken(ctx context.Context, token string) (*world.Hook, error)
	// WorldHooks lists live hooks, of p.RunID if set, oldest first.
	WorldHooks(ctx context.Context, p *WorldListParams) (*WorldPage[world.Hook], error)

	// WorldOpenStream returns World stream name of run runID, creating
	// it (a run stream, indexed by name) if it does not exist. Returns
	// world.ErrRunNotFound, and world.ErrConflict for a name another run's
	// stream has.
	WorldOpenStream(ctx context.Context, runID, name string) (*StreamInfo, error)
	// WorldStream returns the stream a World stream name names (names are
	// globally unique); store.ErrNotFound.
	WorldStream(ctx context.Context, name string) (*StreamInfo, error)
	// WorldStreams lists the names of a World run's streams.
	WorldStreams(ctx context.Context, runID string) ([]string, error)
	// WorldCloseStream closes a World stream: at once without a step
	// attempt, else when that attempt commits (world.CloseAfterCommit).
	// closed reports a close done now.
	WorldCloseStream(ctx context.Context, p *WorldCloseParams) (closed bool, err error)

	// Enqueue stores a queue message, or returns the message with the same
	// id (a retry), or else the pending message with the same queue name
	// and idempotency key, with created false.
	Enqueue(ctx context.Context, p *EnqueueParams) (msg *Message, created bool, err error)
	// ClaimMessages leases up to p.Limit due messages to p.Owner, oldest
	// due first; one another owner holds is skipped until its lease ends.
	ClaimMessages(ctx context.Context, p *ClaimMessagesParams) ([]*Message, error)
	// SettleMessage records a delivery's outcome (see SettleParams). It
	// does nothing if the lease is not p.Lease any more (the message was
	// claimed again), returning store.ErrLeaseLost.
	SettleMessage(ctx context.Context, p *SettleParams) error
	// CoalesceMessages deletes the pending workflow messages of p.RunID
	// that were due before p.Before and that no delivery holds, and returns
	// how many. The deliverer calls it after a workflow delivery of the run
	// that began at p.Before succeeded: that replay saw every event those
	// messages were sent to wake it for, and every timer of theirs had
	// fired. (A message due later, a sleep's wake-up, stays.)
	CoalesceMessages(ctx context.Context, p *CoalesceParams) (int, error)
	// RenewMessage extends a delivery's lease to p.Until, while the
	// delivery goes on; store.ErrLeaseLost if the lease is not p.Lease.
	RenewMessage(ctx context.Context, p *RenewMessageParams) error
	// Messages lists messages of one state, oldest first: "pending" or
	// "dead" (dead letters, kept until retention or a redelivery).
	Messages(ctx context.Context, p *MessagesParams) ([]*Message, error)
	// RedeliverMessage makes a dead message pending and due now;
	// store.ErrNotFound.
	RedeliverMessage(ctx context.Context, id string) error
	// NextMessageDue returns when the next pending message becomes
	// claimable (its due time, or its lease's end); zero if none is.
	NextMessageDue(ctx context.Context) (time.Time, error)
	// WatchMessages returns a channel that the next Enqueue, reschedule or
	// redelivery closes (in any process of the store), and a func that
	// stops the watch. Watch before claiming, so that nothing enqueued
	// between the claim and the wait is missed.
	WatchMessages(ctx context.Context) (<-chan struct{}, func())
}

// QueueWake is the hub id the queue's wakes use: no stream has it.
const QueueWake = -1

// WorldEventParams is one events.create.
type WorldEventParams struct {
	Request world.Request
	// Now is the event's time; zero: the store's clock.
	Now time.Time
}

// Check refuses p before any store reads for it: eventData over
// MaxPayload (ErrTooLarge), and what world.CheckRequest refuses.
func (p *WorldEventParams) Check() error {
	if len(p.Request.Data) > MaxPayload {
		return fmt.Errorf("%w: eventData of %d bytes, the limit is %d", ErrTooLarge, len(p.Request.Data), MaxPayload)
	}
	return world.CheckRequest(&p.Request)
}

// WorldEventResult is what an events.create returns: the events appended
// (none for an idempotent run_started), and the entities Returns names.
type WorldEventResult struct {
	Events []world.Event
	Run    *world.Run
	Step   *world.Step
	Hook   *world.Hook
	Wait   *world.Wait
}

// WorldListParams pages a World list. Cursor is the previous page's
// NextCursor; Limit defaults to DefaultListLimit (at most 1000).
type WorldListParams struct {
	RunID         string
	CorrelationID string
	WorkflowName  string
	Status        world.Status
	Cursor        string
	Limit         int
	Desc          bool // newest first (runs: the default, see WorldRuns)
	// NoData (resolveData=none): a run's or a step's input and output are
	// neither read nor returned, a run's being up to 30 MiB (red team,
	// round nineteen audit: they were read, then stripped). Events keep
	// their data: world.StripData keeps its other fields.
	NoData bool
	// Reserve, if set, is told the payload bytes (WorldItemBytes) of the
	// page so far with the next item, before that item joins the page: a
	// server makes room for the page's reply as it is read. An error ends
	// the list with it. A read tried again tells it from 0.
	Reserve func(bytes int) error
}

// WorldPage is a page of a World list.
type WorldPage[T any] struct {
	Data       []T
	NextCursor string // empty: no more
}

// Check validates p.
func (p *WorldListParams) Check() error {
	if p.Limit < 0 || p.Limit > 1000 {
		return fmt.Errorf("%w: limit %d: 0 to 1000", ErrInvalid, p.Limit)
	}
	if p.Status != "" && !p.Status.Valid() {
		return fmt.Errorf("%w: status %q", ErrInvalid, p.Status)
	}
	for _, f := range [...]struct{ what, s string }{{"run id", p.RunID}, {"correlation id", p.CorrelationID},
		{"workflow name", p.WorkflowName}, {"cursor", p.Cursor}} {
		if err := checkName(f.what, f.s, MaxIDLen); err != nil {
			return err
		}
	}
	return nil
}

// WithDefaults returns a copy of p with its Limit set.
func (p *WorldListParams) WithDefaults() *WorldListParams {
	out := *p
	if out.Limit == 0 {
		out.Limit = DefaultListLimit
	}
	return &out
}

// WorldCloseParams closes a World stream.
type WorldCloseParams struct {
	RunID, Name string
	// StepID and Attempt are the step attempt that closed it, if any.
	StepID  string
	Attempt int64
}

// Message is a queue message of the World.
type Message struct {
	ID             string          // msg_<ULID>: stable across deliveries
	QueueName      string          // __wkf_workflow_<name> or __wkf_step_<name>
	Kind           string          // "workflow" or "step": world.QueueKind of QueueName
	Payload        json.RawMessage // delivered verbatim
	Target         string          // the app's base URL
	IdempotencyKey string
	DeploymentID   string
	RunID          string // the run its payload names, if any
	State          string // "pending" or "dead"
	Attempt        int64  // deliveries so far
	Failures       int64  // failed deliveries in a row
	DeliverAt      time.Time
	FirstFailure   time.Time // of the current run of failures; zero if none
	LastError      string
	CreatedAt      time.Time
	// Lease is the claim's token while a delivery holds the message.
	Lease string
}

// EnqueueParams is a queue() call.
type EnqueueParams struct {
	ID             string // required: msg_<ULID>
	QueueName      string
	Payload        json.RawMessage
	Target         string
	IdempotencyKey string
	DeploymentID   string
	RunID          string
	Delay          time.Duration
	Now            time.Time // zero: the store's clock
}

// MaxPayload bounds a queue message's payload and a World event's data.
const MaxPayload = 16 << 20

// Check validates p.
func (p *EnqueueParams) Check() error {
	if _, ok := world.QueueKind(p.QueueName); !ok || len(p.QueueName) > MaxIDLen {
		return fmt.Errorf("%w: queue name %.60q is not __[ns_]wkf_workflow_… or __[ns_]wkf_step_…", ErrInvalid, p.QueueName)
	}
	if err := CheckID("message id", p.ID); err != nil {
		return err
	}
	// Both go out as headers of every delivery (x-vqs-queue-name,
	// x-vqs-message-id): one that no HTTP client can send would fail
	// each delivery until it is dead-lettered.
	for _, f := range [...]struct{ what, s string }{{"queue name", p.QueueName}, {"message id", p.ID}} {
		if i := strings.IndexFunc(f.s, func(r rune) bool { return r < ' ' || r == 0x7f }); i >= 0 {
			return fmt.Errorf("%w: %s %.60q has a control character at byte %d: it is sent as a header", ErrInvalid, f.what, f.s, i)
		}
	}
	if len(p.Payload) == 0 || len(p.Payload) > MaxPayload || !json.Valid(p.Payload) {
		return fmt.Errorf("%w: a payload of JSON, at most %d bytes", ErrInvalid, MaxPayload)
	}
	for _, f := range [...]struct{ what, s string }{{"target", p.Target}, {"idempotency key", p.IdempotencyKey},
		{"deployment id", p.DeploymentID}, {"run id", p.RunID}} {
		if err := checkName(f.what, f.s, MaxPathLen); err != nil {
			return err
		}
	}
	if p.Target == "" {
		return fmt.Errorf("%w: a message needs a target", ErrInvalid)
	}
	if p.Delay < 0 {
		return fmt.Errorf("%w: negative delay", ErrInvalid)
	}
	return nil
}

// ClaimMessagesParams claims due messages.
type ClaimMessagesParams struct {
	Owner string
	Limit int
	Lease time.Duration // how long a delivery may hold the message
	// SkipRuns are runs whose workflow messages are not claimed (their
	// step messages are): the deliverer has a workflow delivery of each in
	// flight, and a second would replay the run for nothing.
	SkipRuns []string
	// SkipTargets are targets whose messages are not claimed: the
	// deliverer has as many deliveries to each in flight as it allows.
	SkipTargets []string
	Now         time.Time // zero: the store's clock
}

// Check validates p.
func (p *ClaimMessagesParams) Check() error {
	if p.Limit < 1 || p.Lease <= 0 {
		return fmt.Errorf("%w: a claim needs a limit >= 1 and a lease > 0", ErrInvalid)
	}
	return CheckID("owner", p.Owner)
}

// SettleParams is a delivery's outcome: Done deletes the message; else it
// becomes due at DeliverAt (a {timeoutSeconds} reply, or a failure's
// backoff when Failed), or dead when Dead.
type SettleParams struct {
	ID, Lease string
	Done      bool
	Failed    bool // a failed delivery: Failures grows, LastError is kept
	Dead      bool
	// Back puts a message claimed but not delivered back in the queue, due
	// at DeliverAt: its failures, first failure and last error are kept,
	// and its claim is not counted as an attempt (a deliverer that took
	// more than it may send at once). Neither Back nor another outcome:
	// the delivery was answered "later", its failures start again.
	Back      bool
	DeliverAt time.Time
	LastError string
	Now       time.Time // zero: the store's clock
}

// RenewMessageParams extends a lease.
type RenewMessageParams struct {
	ID, Lease string
	Until     time.Time
}

// CoalesceParams names the workflow messages a replay made redundant.
type CoalesceParams struct {
	RunID  string
	Before time.Time // the replay's start: messages due before it go
	Now    time.Time // zero: the store's clock
}

// MessagesParams lists messages.
type MessagesParams struct {
	State string // "pending" or "dead"
	Limit int    // 0: DefaultListLimit
	RunID string // only the messages of this run; "": every run's
	// Reserve, if set, is told the bytes of the messages so far (their
	// payloads and last errors) with the next one, before it joins the
	// list, as WorldListParams.Reserve is. An error ends the list with it.
	// The list ends anyway before MaxWorldPageBytes (Reserving).
	Reserve func(bytes int) error
}

// Reserving returns what a read of the list tells each message it reads,
// in order, before the message joins the list: ErrPageFull for one that
// would take the list past MaxWorldPageBytes of payloads and errors (the
// first whatever its size; the list is the messages before it), else
// Reserve's check, counting from 0 (a read tried again calls Reserving
// again).
func (p *MessagesParams) Reserving() func(m *Message) error {
	total := 0
	return func(m *Message) error {
		n := len(m.Payload) + JSONStringBytes(m.LastError)
		if total > 0 && total+n > MaxWorldPageBytes {
			return ErrPageFull
		}
		total += n
		if p.Reserve == nil {
			return nil
		}
		return p.Reserve(total)
	}
}

// ErrPageFull ends the read of a list whose next item would take it past
// its bound in bytes: the items read so far are the list (a page).
var ErrPageFull = errors.New("page full")

// Check validates p and returns it with its defaults.
func (p *MessagesParams) Check() (*MessagesParams, error) {
	if p.State != "pending" && p.State != "dead" {
		return nil, fmt.Errorf("%w: state %q is not pending or dead", ErrInvalid, p.State)
	}
	if err := checkName("run id", p.RunID, MaxIDLen); err != nil {
		return nil, err
	}
	out := *p
	if out.Limit <= 0 {
		out.Limit = DefaultListLimit
	}
	return &out, nil
}

// MaxWorldPageBytes bounds the payloads (inputs, outputs, event data,
// metadata) of one page of a World list: a page ends before the item that
// would pass it (the first is taken whatever its size), with a cursor to
// the rest. A World run's input may be 16 MiB, and a page may ask for
// 1,000 of them.
const MaxWorldPageBytes = 4 << 20

// MaxRunWorldStreams bounds the World streams of one run: a client with
// the token names and makes them, and a run's streams are listed whole
// (the World's listStreamsByRunId, GET /v1/runs/{id}/streams).
const MaxRunWorldStreams = 1000

// CheckWorldStreamCount refuses run a new World stream when it holds n of
// them already (ErrQuota).
func CheckWorldStreamCount(run string, n int) error {
	if n >= MaxRunWorldStreams {
		return fmt.Errorf("%w: run %s holds %d World streams, the most a run may", ErrQuota, run, n)
	}
	return nil
}

// WorldItemBytes is what one item of a World list carries of payloads, as
// its JSON reply carries them: the raw JSON values (input, output, data,
// metadata) as they are, an error's texts as escaped (a control byte is
// six bytes in JSON), so that a page bounded by it is bounded as sent.
func WorldItemBytes(v any) int {
	switch x := v.(type) {
	case *world.Run:
		return len(x.Input) + len(x.Output) + len(x.ExecutionContext) + errorBytes(x.Error)
	case *world.Step:
		return len(x.Input) + len(x.Output) + errorBytes(x.Error)
	case *world.Event:
		return len(x.EventData)
	case *world.Hook:
		return len(x.Metadata)
	}
	return 0
}

// errorBytes is what a World error adds to a page.
func errorBytes(e *world.StructuredError) int {
	if e == nil {
		return 0
	}
	return JSONStringBytes(e.Message) + JSONStringBytes(e.Stack) + JSONStringBytes(e.Code)
}

// JSONStringBytes bounds the bytes of s in a JSON reply, quotes left out:
// a control byte, an invalid UTF-8 byte, U+2028 and U+2029 as \uXXXX (6),
// a quote or a backslash escaped (2), the rest as it is.
func JSONStringBytes(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c < 0x20:
			n, i = n+6, i+1
		case c == '"' || c == '\\':
			n, i = n+2, i+1
		case c < utf8.RuneSelf:
			n, i = n+1, i+1
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				n, i = n+6, i+1
			case r == '\u2028' || r == '\u2029':
				n, i = n+6, i+size
			default:
				n, i = n+size, i+size
			}
		}
	}
	return n
}

// WorldSizer is a store that tells a World item's size before it is read:
// the bytes of its payloads (WorldItemBytes). A server charges a reply's
// budget by it before the read, so that requests refused at the budget
// read nothing.
type WorldSizer interface {
	// WorldItemSize returns the payload bytes of the item ref names, 0
	// if there is none (its read then says so).
	WorldItemSize(ctx context.Context, ref WorldItemRef) (int64, error)
}

// WorldItemRef names one World item: Kind "run" (ID), "run-head" (ID: the
// run without its input and output, WorldRunHead), "step" (ID, in
// RunID if set), "event" (ID, in RunID), "hook" (ID) or "hook-token" (ID,
// the token).
type WorldItemRef struct {
	Kind, RunID, ID string
}

// WorldSizerOf returns s, or the store it wraps, as a WorldSizer.
func WorldSizerOf(s Store) (WorldSizer, bool) { return as[WorldSizer](s) }

// WorldItemSizeQuery is the SQL of a WorldItemSize, with the backend's
// schema prefix (S: "" or "schema.") and placeholders (ph(i), from 1),
// and its arguments: both backends ask the same.
func WorldItemSizeQuery(ref WorldItemRef, S string, ph func(int) string) (string, []any, error) {
	l := func(col string) string { return "COALESCE(length(" + col + "), 0)" }
	switch ref.Kind {
	case "run":
		return `SELECT ` + l("r.input") + ` + ` + l("r.output") + ` + ` + l("w.execution_context") + ` + ` + l("w.error_json") +
			` FROM ` + S + `runs r JOIN ` + S + `world_runs w ON w.run_id = r.id WHERE r.id = ` + ph(1), []any{ref.ID}, nil
	case "run-head":
		return `SELECT ` + l("execution_context") + ` + ` + l("error_json") + ` FROM ` + S + `world_runs WHERE run_id = ` + ph(1), []any{ref.ID}, nil
	case "step":
		return `SELECT COALESCE(max(` + l("input") + ` + ` + l("output") + ` + ` + l("error_json") + `), 0) FROM ` + S +
			`world_steps WHERE step_id = ` + ph(1) + ` AND (` + ph(2) + ` = '' OR run_id = ` + ph(2) + `)`, []any{ref.ID, ref.RunID}, nil
	case "event":
		return `SELECT ` + l("data") + ` FROM ` + S + `world_events WHERE run_id = ` + ph(1) + ` AND event_id = ` + ph(2), []any{ref.RunID, ref.ID}, nil
	case "hook":
		return `SELECT ` + l("metadata") + ` FROM ` + S + `world_hooks WHERE hook_id = ` + ph(1), []any{ref.ID}, nil
	case "hook-token":
		return `SELECT ` + l("metadata") + ` FROM ` + S + `world_hooks WHERE token = ` + ph(1), []any{ref.ID}, nil
	}
	return "", nil, fmt.Errorf("%w: a World item of kind %q", ErrInvalid, ref.Kind)
}
