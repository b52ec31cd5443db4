package api

import (
	"encoding/json"
	"time"

	"github.com/weirhq/weir/runwait"
	"github.com/weirhq/weir/store"
)

// The runs API's JSON bodies, for the server and its clients alike.

// StartRequest is the body of POST /v1/runs.
type StartRequest struct {
	// Workflow is the registered workflow's name. Required.
	Workflow string `json:"workflow"`
	// Input is the workflow's input, any JSON value. Optional.
	Input json.RawMessage `json:"input,omitempty"`
	// ID is the run's id: starting a run with an id that exists returns
	// that run (200) instead of a new one (201). Optional; exclusive with an
	// Idempotency-Key header.
	ID string `json:"id,omitempty"`
	// Queue names the limiter the run waits in before it starts
	// (weir.StartOptions.Queue; 404 if there is none); QueueKey is its
	// fair-share group there (a tenant), Priority its place (higher
	// first). Optional.
	Queue    string `json:"queue,omitempty"`
	QueueKey string `json:"queue_key,omitempty"`
	Priority int    `json:"priority,omitempty"`
	// Dedupe folds starts: while a run of Queue with this key is queued or
	// running, a start returns that run (200, its own id) instead of a new
	// one. DebounceMS, with Dedupe, starts the run that many milliseconds
	// after the latest start of its key, with that start's input.
	Dedupe     string `json:"dedupe,omitempty"`
	DebounceMS int64  `json:"debounce_ms,omitempty"`
	// DebounceMaxMS, with DebounceMS, caps how long a burst of starts can
	// postpone the run: it starts at the latest that many milliseconds
	// after its first start.
	DebounceMaxMS int64 `json:"debounce_max_ms,omitempty"`
	// Version is the application version the run is for: a worker of
	// that version (or one that names it compatible) claims it. Optional;
	// default the server's engine's version.
	Version string `json:"version,omitempty"`
}

// Run is a run, as the runs API shows it.
type Run struct {
	ID              string          `json:"id"`
	Workflow        string          `json:"workflow"`
	Status          store.RunStatus `json:"status"`
	Input           json.RawMessage `json:"input,omitempty"`
	Output          json.RawMessage `json:"output,omitempty"`
	Error           string          `json:"error,omitempty"`
	CreatedAt       time.Time       `json:"created_at"`
	UpdatedAt       time.Time       `json:"updated_at"`
	WakeAt          *time.Time      `json:"wake_at,omitempty"`
	CancelRequested bool            `json:"cancel_requested,omitempty"`
	// Elided: a list (GET /v1/runs) left out the run's input and output,
	// one of which is over 4 KiB; GET /v1/runs/{id} has them.
	Elided bool `json:"elided,omitempty"`
	// Kind is "world" for a Vercel Workflow run on weir's World (its events,
	// steps and hooks are at /v1/world/runs/{id}), empty for a Go run.
	Kind string `json:"kind,omitempty"`
	// Parent is the run that started this one as its child (weir.StartChild).
	Parent string `json:"parent,omitempty"`
	// Queue, QueueKey, Priority and Dedupe are what the run was started
	// with (StartRequest); Queued: it waits in its queue, not yet admitted.
	Queue    string `json:"queue,omitempty"`
	QueueKey string `json:"queue_key,omitempty"`
	Priority int    `json:"priority,omitempty"`
	Dedupe   string `json:"dedupe,omitempty"`
	Queued   bool   `json:"queued,omitempty"`
	// Version is the application version the run started on; a worker
	// of that version (or one that names it compatible) claims it.
	Version string `json:"version,omitempty"`
}

// WorldEvent is one event of a World run's log (GET
// /v1/world/runs/{id}/events; docs/protocol.md, "The World API").
type WorldEvent struct {
	EventID       string          `json:"eventId"`
	EventType     string          `json:"eventType"`
	CorrelationID string          `json:"correlationId,omitempty"`
	EventData     json.RawMessage `json:"eventData,omitempty"`
	CreatedAt     time.Time       `json:"createdAt"`
}

// WorldEventPage is a page of a World run's events.
type WorldEventPage struct {
	Data    []WorldEvent `json:"data"`
	Cursor  *string      `json:"cursor"`
	HasMore bool         `json:"hasMore"`
}

// WorldMessage is a World queue message as GET /v1/world/queue lists it:
// a message weir delivers to an app, its deliveries so far, and why the
// last one failed.
type WorldMessage struct {
	ID           string     `json:"messageId"`
	QueueName    string     `json:"queueName"`
	RunID        string     `json:"runId,omitempty"`
	Target       string     `json:"target"`
	State        string     `json:"state"` // pending or dead
	Attempt      int64      `json:"attempt"`
	Failures     int64      `json:"failures"`
	DeliverAt    time.Time  `json:"deliverAt"`
	FirstFailure *time.Time `json:"firstFailure,omitempty"`
	LastError    string     `json:"lastError,omitempty"`
	// Hint says what the last error most likely means, and what to check
	// (delivery.Hint).
	Hint           string          `json:"hint,omitempty"`
	CreatedAt      time.Time       `json:"createdAt"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	Payload        json.RawMessage `json:"payload,omitempty"`
}

// WorldMessageList is the reply of GET /v1/world/queue.
type WorldMessageList struct {
	Messages []WorldMessage `json:"messages"`
}

// RunList is the reply of GET /v1/runs: a page of runs, newest first.
type RunList struct {
	Runs []Run `json:"runs"`
	// NextCursor, if set, is the before= value of the next (older) page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Event is one entry of a run's event log.
type Event struct {
	Seq     int64           `json:"seq"`
	Type    store.EventType `json:"type"`
	Op      int64           `json:"op,omitempty"`
	Name    string          `json:"name,omitempty"`
	Attempt int64           `json:"attempt,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
	Error   string          `json:"error,omitempty"`
	Final   bool            `json:"final,omitempty"`
	At      time.Time       `json:"at"`
	WakeAt  *time.Time      `json:"wake_at,omitempty"`
}

// EventList is the reply of GET /v1/runs/{id}/events.
type EventList struct {
	Events []Event `json:"events"`
	// More reports that the log goes on: ask again with after=NextAfter.
	// A page holds at most limit events (1,000 by default and at most) and
	// about 4 MiB of their data.
	More      bool  `json:"more,omitempty"`
	NextAfter int64 `json:"next_after,omitempty"`
}

// StreamInfo describes one stream of a run.
type StreamInfo struct {
	Name        string `json:"name"`
	Path        string `json:"path"` // read it at /v1/stream/<path>
	ContentType string `json:"content_type"`
	// NextOffset is the stream's record count: the offset its next record
	// will have.
	NextOffset int64     `json:"next_offset"`
	Closed     bool      `json:"closed"`
	CreatedAt  time.Time `json:"created_at"`
	// Bytes is the data bytes written to the stream (a fork's copied
	// records not included): what --max-stream-bytes limits.
	Bytes int64 `json:"bytes"`
}

// StreamList is the reply of GET /v1/runs/{id}/streams and GET
// /v1/streams.
type StreamList struct {
	Streams []StreamInfo `json:"streams"`
	// NextCursor, if set, is the after= value of the next page (GET
	// /v1/streams).
	NextCursor string `json:"next_cursor,omitempty"`
}

// WorkflowList is the reply of GET /v1/workflows.
type WorkflowList struct {
	Workflows []string `json:"workflows"`
}

// Hook is one hook of a run, in GET /v1/runs/{id}/hooks.
type Hook struct {
	Token     string    `json:"token"`
	Op        int64     `json:"op"`
	Received  int64     `json:"received"` // payloads delivered
	Disposed  bool      `json:"disposed"` // closed, or its run ended
	CreatedAt time.Time `json:"created_at"`
}

// HookList is the reply of GET /v1/runs/{id}/hooks.
type HookList struct {
	Hooks []Hook `json:"hooks"`
}

// MessageSent is the reply of POST /v1/runs/{id}/messages/{topic}.
type MessageSent struct {
	RunID     string `json:"run_id"`
	Topic     string `json:"topic"`
	Seq       int64  `json:"seq"` // the message's event in the run's log
	Duplicate bool   `json:"duplicate,omitempty"`
}

// RunEvent is a run event's latest value, in GET /v1/runs/{id}/events/{key}
// and GET /v1/runs/{id}/state.
type RunEvent struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value,omitempty"` // absent when Elided
	Seq   int64           `json:"seq"`             // the event that set it, in the run's log
	At    time.Time       `json:"at"`
	// Size is the value's bytes.
	Size int `json:"size,omitempty"`
	// Elided: /state left out a value over 4 KiB
	// (store.MaxInlineEventValue); GET /v1/runs/{id}/events/{key} has it.
	Elided bool `json:"elided,omitempty"`
}

// TopicMessages is what a run's log says of one topic's messages: how many
// came, and, once the run ended, how many it took and left (-1 before).
type TopicMessages struct {
	Topic    string `json:"topic"`
	Received int    `json:"received"`
	Taken    int    `json:"taken"`
	Left     int    `json:"left"`
}

// RunState is the reply of GET /v1/runs/{id}/state: the run events it
// published (latest value by key) and the messages sent to it, by topic.
type RunState struct {
	// Events are a page of the run events, by key (in the order of their
	// bytes): at most 1,000 (store.MaxRunEventPage), values over 4 KiB
	// elided.
	Events   []RunEvent      `json:"events"`
	Messages []TopicMessages `json:"messages"`
	// More reports that keys follow this page: ask again with
	// after=NextAfter.
	More      bool   `json:"more,omitempty"`
	NextAfter string `json:"next_after,omitempty"`
}

// Waiting is the reply of GET /v1/runs/{id}/waiting: what a run that has
// not ended waits on now (package runwait). Waits is empty for a run that
// has ended or that executes workflow code between operations.
type Waiting struct {
	Waits []Wait `json:"waits"`
	// Summary is the waits in one sentence; "" when there are none.
	Summary string `json:"summary"`
}

// Wait is one thing a run waits on.
type Wait struct {
	Kind    runwait.Kind `json:"kind"`           // worker, step, retry, timer, hook, child, limiter, scheduled or park
	Name    string       `json:"name,omitempty"` // the step's name, the hook's token, the child run's id; a worker wait's application version
	Op      int64        `json:"op,omitempty"`
	Attempt int64        `json:"attempt,omitempty"`
	Since   time.Time    `json:"since"`
	Until   *time.Time   `json:"until,omitempty"` // when it ends at the latest
	Text    string       `json:"text"`            // the wait in a sentence
	// Limiter and Ahead, of a limiter wait: the limiter, and how many of
	// its line go first (-1: not in line now).
	Limiter string `json:"limiter,omitempty"`
	Ahead   *int   `json:"ahead,omitempty"`
}

// Limiter is a limiter as the limiters API gives and takes it (GET and PUT
// /v1/limiters/{name}). Zero bounds are none; Period is a Go duration
// ("1m", "500ms"), required with a rate or a budget.
type Limiter struct {
	Name        string `json:"name"`
	Concurrency int    `json:"concurrency,omitempty"`
	// PerKey bounds the slots one key (a tenant) holds at once.
	PerKey int    `json:"per_key,omitempty"`
	Rate   int    `json:"rate,omitempty"`
	Budget int64  `json:"budget,omitempty"`
	Period string `json:"period,omitempty"`
	// State is what it holds now (GET only).
	State *LimiterState `json:"state,omitempty"`
}

// LimiterState is what a limiter holds now: the slots held, the waiters in
// line, the slots taken and the cost charged in its window.
type LimiterState struct {
	Held    int   `json:"held"`
	Waiting int   `json:"waiting"`
	Taken   int   `json:"taken"`
	Spent   int64 `json:"spent"`
	// Queued is how many runs wait in it as a queue.
	Queued int `json:"queued"`
}

// LimiterList is the reply of GET /v1/limiters.
type LimiterList struct {
	Limiters []Limiter `json:"limiters"`
	// More reports that limiters follow this page: ask again with
	// after=NextAfter.
	More      bool   `json:"more"`
	NextAfter string `json:"next_after,omitempty"`
}

// Schedule is a schedule, as the schedules API shows it (PUT takes the
// configuration fields; the others are what it did).
type Schedule struct {
	Name     string `json:"name"`
	Workflow string `json:"workflow"`
	// Input is every run's input; absent: null.
	Input json.RawMessage `json:"input,omitempty"`
	// Spec is a cron expression, a macro (@daily) or an interval
	// ("@every 15m"); TZ the IANA time zone it is read in ("": UTC).
	Spec string `json:"spec"`
	TZ   string `json:"tz,omitempty"`
	// Overlap: skip (the default), buffer_one or allow.
	Overlap string `json:"overlap,omitempty"`
	// Backfill is how late a tick may be and still start, a duration
	// ("1h"); absent: a minute.
	Backfill string `json:"backfill,omitempty"`
	Paused   bool   `json:"paused,omitempty"`

	// What it did (GET, and the reply of PUT).
	NextDue   *time.Time `json:"next_due,omitempty"`
	LastTick  *time.Time `json:"last_tick,omitempty"`
	LastRun   string     `json:"last_run,omitempty"`
	Buffered  *time.Time `json:"buffered,omitempty"`
	Started   int64      `json:"started"`
	Skipped   int64      `json:"skipped"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
}

// ScheduleList is the reply of GET /v1/schedules: a page of the
// schedules, by name.
type ScheduleList struct {
	Schedules []Schedule `json:"schedules"`
	// More reports that schedules follow this page: ask again with
	// after=NextAfter.
	More      bool   `json:"more"`
	NextAfter string `json:"next_after,omitempty"`
}

// MigrateRequest is the body of POST /v1/runs/migrate: the runs in flight
// of application version From (those of Runs, if set) move to To.
type MigrateRequest struct {
	From string   `json:"from"`
	To   string   `json:"to"`
	Runs []string `json:"runs,omitempty"`
}

// ForkRequest is the body of POST /v1/runs/{id}/fork: a new run from one
// of the run's operations (Op, 1-based, or the first step named Step).
type ForkRequest struct {
	ID      string          `json:"id,omitempty"` // the fork's id; "": a random one
	Op      int64           `json:"op,omitempty"`
	Step    string          `json:"step,omitempty"`
	Input   json.RawMessage `json:"input,omitempty"`   // the fork's input; absent: the source's
	Version string          `json:"version,omitempty"` // the fork's application version; "": the source's
}

// RetryRequest is the body of POST /v1/runs/{id}/retry: a fork from the
// step named Step, or, with Step empty, from the step whose failure ended
// the run.
type RetryRequest struct {
	Step string `json:"step,omitempty"`
}

// MigrateReply is what POST /v1/runs/migrate moved: how many runs, and
// the first MaxMigratedListed of them by id.
type MigrateReply struct {
	// Count is how many runs moved.
	Count int `json:"count"`
	// Migrated are the runs that moved, by id in the order of their
	// bytes: all of them, or the first MaxMigratedListed if More.
	Migrated []string `json:"migrated"`
	// More reports that more runs moved than Migrated lists.
	More bool `json:"more,omitempty"`
}

// MaxMigratedListed is the most runs a reply of POST /v1/runs/migrate
// lists by id. A version may have any number of runs in flight, and the
// reply of a committed write is never refused at the replies' budget: a
// list of them all would be a reply of any size (red team, round
// fourteen). A thousand ids of at most 128 bytes keep it under 140 KB;
// the runs past them moved all the same (Count), and each one's version
// is in its JSON (GET /v1/runs/{id}).
const MaxMigratedListed = 1000
