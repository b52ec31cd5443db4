package world

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Spec is the World spec version weir serves: 3, @workflow/world 4.5.0's
// SPEC_VERSION_CURRENT (workflow 4.8.x).
const Spec = 3

// EventType names a World event.
type EventType string

// The event types of spec 3.
const (
	RunCreated    EventType = "run_created"
	RunStarted    EventType = "run_started"
	RunCompleted  EventType = "run_completed"
	RunFailed     EventType = "run_failed"
	RunCancelled  EventType = "run_cancelled"
	StepCreated   EventType = "step_created"
	StepStarted   EventType = "step_started"
	StepCompleted EventType = "step_completed"
	StepFailed    EventType = "step_failed"
	StepRetrying  EventType = "step_retrying"
	HookCreated   EventType = "hook_created"
	HookReceived  EventType = "hook_received"
	HookDisposed  EventType = "hook_disposed"
	HookConflict  EventType = "hook_conflict" // written by the World only
	WaitCreated   EventType = "wait_created"
	WaitCompleted EventType = "wait_completed"
)

// Valid reports whether t is a spec-3 event type a client may create.
func (t EventType) Valid() bool {
	switch t {
	case RunCreated, RunStarted, RunCompleted, RunFailed, RunCancelled,
		StepCreated, StepStarted, StepCompleted, StepFailed, StepRetrying,
		HookCreated, HookReceived, HookDisposed, WaitCreated, WaitCompleted:
		return true
	}
	return false
}

// Status is a run's or a step's status.
type Status string

// Statuses of runs and steps.
const (
	Pending   Status = "pending"
	Running   Status = "running"
	Completed Status = "completed"
	Failed    Status = "failed"
	Cancelled Status = "cancelled"
)

// Terminal reports a final status.
func (s Status) Terminal() bool { return s == Completed || s == Failed || s == Cancelled }

// Valid reports whether s is one of the statuses.
func (s Status) Valid() bool { return s == Pending || s == Running || s.Terminal() }

// Data fields (inputs, outputs, metadata, payloads) are the runtime's
// serialized values, kept as the JSON the World package sent them in (bytes
// travel as {"__type":"Uint8Array","data":"<base64>"}) and given back
// unchanged. weir reads none of them.

// StructuredError is a failed run's or step's error.
type StructuredError struct {
	Message string `json:"message"`
	Stack   string `json:"stack,omitempty"`
	Code    string `json:"code,omitempty"`
}

// Run is a World run (WorkflowRun).
type Run struct {
	RunID            string           `json:"runId"`
	Status           Status           `json:"status"`
	DeploymentID     string           `json:"deploymentId"`
	WorkflowName     string           `json:"workflowName"`
	SpecVersion      int              `json:"specVersion,omitempty"`
	ExecutionContext json.RawMessage  `json:"executionContext,omitempty"`
	Input            json.RawMessage  `json:"input,omitempty"`
	Output           json.RawMessage  `json:"output,omitempty"`
	Error            *StructuredError `json:"error,omitempty"`
	StartedAt        *time.Time       `json:"startedAt,omitempty"`
	CompletedAt      *time.Time       `json:"completedAt,omitempty"`
	CreatedAt        time.Time        `json:"createdAt"`
	UpdatedAt        time.Time        `json:"updatedAt"`
	// Events is how many events the run's log holds: the slot of its last.
	Events int64 `json:"-"`
	// Target is the app's base URL its last queue message named: where a
	// message weir sends the run (a cancel) goes.
	Target string `json:"-"`
	// Head: the run was read without its Input and Output, which may be
	// 30 MiB: a store decides an event on the run's state alone, and
	// reads its data only for a reply that carries it (what Decide set,
	// an output, is the outcome's).
	Head bool `json:"-"`
}

// Step is a step of a World run.
type Step struct {
	RunID       string           `json:"runId"`
	StepID      string           `json:"stepId"`
	StepName    string           `json:"stepName"`
	Status      Status           `json:"status"`
	Input       json.RawMessage  `json:"input,omitempty"`
	Output      json.RawMessage  `json:"output,omitempty"`
	Error       *StructuredError `json:"error,omitempty"`
	Attempt     int64            `json:"attempt"`
	StartedAt   *time.Time       `json:"startedAt,omitempty"`
	CompletedAt *time.Time       `json:"completedAt,omitempty"`
	CreatedAt   time.Time        `json:"createdAt"`
	UpdatedAt   time.Time        `json:"updatedAt"`
	RetryAfter  *time.Time       `json:"retryAfter,omitempty"`
	SpecVersion int              `json:"specVersion,omitempty"`
	// Closes are the streams the current attempt closed: their close waits
	// for the attempt's commit (see Decide).
	Closes []string `json:"-"`
}

// Hook is a live hook: its token is unique among live hooks.
type Hook struct {
	RunID       string          `json:"runId"`
	HookID      string          `json:"hookId"`
	Token       string          `json:"token"`
	OwnerID     string          `json:"ownerId"`
	ProjectID   string          `json:"projectId"`
	Environment string          `json:"environment"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	CreatedAt   time.Time       `json:"createdAt"`
	SpecVersion int             `json:"specVersion,omitempty"`
	IsWebhook   bool            `json:"isWebhook"`
}

// Wait is a durable wait (sleep) of a run.
type Wait struct {
	WaitID      string     `json:"waitId"`
	RunID       string     `json:"runId"`
	Status      string     `json:"status"` // "waiting" or "completed"
	ResumeAt    *time.Time `json:"resumeAt,omitempty"`
	CompletedAt *time.Time `json:"completedAt,omitempty"`
	CreatedAt   time.Time  `json:"createdAt"`
	UpdatedAt   time.Time  `json:"updatedAt"`
	SpecVersion int        `json:"specVersion,omitempty"`
}

// Event is one entry of a run's event log. Slot is its dense position in
// the log, from 1; EventID its id (evnt_<ULID>).
type Event struct {
	RunID         string          `json:"runId"`
	EventID       string          `json:"eventId"`
	EventType     EventType       `json:"eventType"`
	CorrelationID string          `json:"correlationId,omitempty"`
	EventData     json.RawMessage `json:"eventData,omitempty"`
	CreatedAt     time.Time       `json:"createdAt"`
	SpecVersion   int             `json:"specVersion,omitempty"`
	Slot          int64           `json:"-"`
}

// Errors of the state machine; test with errors.Is. The server answers each
// with the status the runtime maps to its error classes.
var (
	// ErrConflict is an event the run's state refuses as a duplicate or an
	// illegal transition (EntityConflictError, 409): replays meet it as a
	// normal path.
	ErrConflict = errors.New("world: conflict")
	// ErrRunExpired is an event that needs a live run on a terminal one
	// (RunExpiredError, 410).
	ErrRunExpired = errors.New("world: run expired")
	// ErrTooEarly is a step_started before the step's retryAfter
	// (TooEarlyError, 425). See TooEarlyError.
	ErrTooEarly = errors.New("world: too early")
	// ErrRunNotFound is an unknown run (WorkflowRunNotFoundError, 404).
	ErrRunNotFound = errors.New("world: run not found")
	// ErrHookNotFound is an unknown or disposed hook (HookNotFoundError,
	// 404).
	ErrHookNotFound = errors.New("world: hook not found")
	// ErrStepNotFound is a step event before the step's step_created.
	ErrStepNotFound = errors.New("world: step not found")
	// ErrWaitNotFound is a wait_completed before its wait_created.
	ErrWaitNotFound = errors.New("world: wait not found")
	// ErrNotSupported is a run of a newer spec (RunNotSupportedError, 422).
	ErrNotSupported = errors.New("world: run not supported")
	// ErrInvalid is a malformed event.
	ErrInvalid = errors.New("world: invalid event")
)

// TooEarlyError says when a step may start. It matches ErrTooEarly.
type TooEarlyError struct {
	StepID     string
	RetryAfter time.Duration // from now
}

func (e *TooEarlyError) Error() string {
	return fmt.Sprintf("world: too early: step %q may start in %v", e.StepID, e.RetryAfter.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrTooEarly) true.
func (e *TooEarlyError) Is(target error) bool { return target == ErrTooEarly }

// StepWriter is the stream writer of a step's writes: one identity for
// every attempt, as a Go step's "step/<n>".
func StepWriter(stepID string) string { return "step/" + stepID }

// StepOfWriter returns the step id of a StepWriter.
func StepOfWriter(writer string) (string, bool) {
	id, ok := strings.CutPrefix(writer, "step/")
	return id, ok && id != ""
}

// StreamName checks a World stream name: its runtime makes them globally
// unique (strm_<ULID>_user…).
func StreamName(name string) error {
	if name == "" || len(name) > 512 {
		return fmt.Errorf("%w: a stream name of 1 to 512 bytes is required", ErrInvalid)
	}
	for _, c := range []byte(name) {
		if c <= ' ' || c == '/' || c == 0x7f {
			return fmt.Errorf("%w: stream name %.40q: no spaces, controls or slashes", ErrInvalid, name)
		}
	}
	// A dot segment cannot be read back (an HTTP path cleans it away),
	// and PostgreSQL refuses text that is not UTF-8 where SQLite kept it.
	if name == "." || name == ".." {
		return fmt.Errorf("%w: stream name %q: not a dot segment", ErrInvalid, name)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("%w: stream name %.40q is not valid UTF-8", ErrInvalid, name)
	}
	return nil
}

// HealthCheckPrefix begins the names of the streams the runtime's health
// check writes (`workflow health`: @workflow/core's healthCheck): each is
// written, closed and read once, under a run id made up for it.
const HealthCheckPrefix = "__health_check__"

// HealthCheckStream reports whether name is a health check's stream: a
// World keeps it without a run (the runtime writes it for no run), for a
// short while.
func HealthCheckStream(name string) bool { return strings.HasPrefix(name, HealthCheckPrefix) }
