package weir

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// ErrNoWorkflows is returned by Engine.Work when no workflow is registered.
var ErrNoWorkflows = errors.New("weir: no workflow is registered")

// Errors a caller of weir can test with errors.Is. The stream and store
// packages' sentinels are re-exported so SDK users need only this package.
var (
	// ErrNonDeterminism fails a run whose replay reached a different durable
	// operation at a position than the one recorded. See NonDeterminismError.
	ErrNonDeterminism = errors.New("non-determinism")
	// ErrCancelled is the error of a cancelled run, and the cause of the
	// contexts of its workflow and steps.
	ErrCancelled = errors.New("run cancelled")
	// ErrUnknownWorkflow is returned to start a run of a workflow that is not
	// registered. (An engine claims only runs of the workflows it has, so
	// engines with different workflows can share a database.)
	ErrUnknownWorkflow = api.ErrUnknownWorkflow
	// ErrRunFailed wraps the error of a run that failed, as Result returns it.
	ErrRunFailed = errors.New("run failed")
	// ErrWriterClosed is returned by a Writer used after its step returned
	// or, for a workflow's writer (Context.Stream), after its run's
	// execution ended: a writer does not outlive what it writes for.
	ErrWriterClosed = errors.New("weir: stream writer closed: its step or run has ended")
	// ErrEngineClosed is returned after Engine.Close.
	ErrEngineClosed = api.ErrEngineClosed
	// ErrStepTimeout is the error of a step attempt that ran past its
	// timeout (WithTimeout, WithHeartbeatTimeout). See TimeoutError.
	ErrStepTimeout = errors.New("step timed out")
	// ErrSlotLost is the error of a step attempt whose limiter slot was
	// lost while it ran (WithLimiter): its lease at the store ran out before
	// it was renewed, so the slot may be another's. See SlotLostError.
	ErrSlotLost = errors.New("step's limiter slot lost")
	// ErrRunTimeout fails a run still running at its deadline
	// (WithRunTimeout); it is the cause of its contexts then.
	ErrRunTimeout = errors.New("run deadline exceeded")

	ErrNotFound       = store.ErrNotFound        // unknown run or stream
	ErrClosed         = stream.ErrClosed         // append to a closed stream
	ErrFenced         = stream.ErrFenced         // a zombie attempt; its step must stop
	ErrGap            = stream.ErrGap            // a seq was skipped
	ErrConflict       = stream.ErrConflict       // other bytes at an acknowledged seq
	ErrWriterFinished = stream.ErrWriterFinished // the writer already committed or aborted
	ErrTooLarge       = store.ErrTooLarge        // a chunk or batch over the limits
	ErrRunConflict    = store.ErrRunConflict     // a run id taken by a run of another workflow
	ErrLeaseLost      = store.ErrLeaseLost       // another worker took the run over
	ErrKeyReused      = store.ErrKeyReused       // an idempotency key sent again with another request
)

// MaxChunkSize is the largest chunk a stream takes: 4 MiB.
const MaxChunkSize = store.MaxChunkSize

// NonDeterminismError says what replay expected and found. It matches
// ErrNonDeterminism.
type NonDeterminismError struct {
	Op       int64  // the operation's position in the run, from 1
	Recorded string // what the log holds there, e.g. `step "fetch"`
	Replayed string // what the code did there
}

func (e *NonDeterminismError) Error() string {
	return fmt.Sprintf("non-determinism at operation %d: the run's log has %s, the code did %s", e.Op, e.Recorded, e.Replayed)
}

// Is makes errors.Is(err, ErrNonDeterminism) true.
func (e *NonDeterminismError) Is(t error) bool { return t == ErrNonDeterminism }

// nonRetryable marks an error that must not be retried.
type nonRetryable struct{ err error }

func (e *nonRetryable) Error() string { return e.err.Error() }
func (e *nonRetryable) Unwrap() error { return e.err }

// NonRetryable marks err so that the step that returns it fails at once,
// whatever its retry policy.
func NonRetryable(err error) error {
	if err == nil {
		return nil
	}
	return &nonRetryable{err}
}

// IsNonRetryable reports whether err was marked by NonRetryable.
func IsNonRetryable(err error) bool {
	var n *nonRetryable
	return errors.As(err, &n)
}

// StepError is what a step that failed for good returns to its workflow:
// the step's name, its last attempt and that attempt's error message. After a
// replay only the message survives, so Err is nil then.
type StepError struct {
	Name    string
	Attempt int64
	Message string
	Err     error // the live error, when the step failed in this execution
}

func (e *StepError) Error() string {
	return fmt.Sprintf("step %q failed after attempt %d: %s", e.Name, e.Attempt, e.Message)
}

// Unwrap returns the live error, if any.
func (e *StepError) Unwrap() error { return e.Err }

// stepErrorJSON is a *StepError in a run_failed event.
type stepErrorJSON struct {
	Name    string `json:"step"`
	Attempt int64  `json:"attempt"`
	Message string `json:"message"`
}

// RunError is the error of a failed run, as Handle.Result returns it. It
// matches ErrRunFailed, and ErrRunTimeout for a run that failed at its
// deadline; errors.As finds the *StepError of the step that failed it, if
// one did.
type RunError struct {
	RunID   string
	Message string     // the run's error
	Step    *StepError // the step that failed the run; nil if none
}

func (e *RunError) Error() string { return fmt.Sprintf("%v: %s", ErrRunFailed, e.Message) }

// Unwrap makes errors.Is(err, ErrRunFailed) true (and ErrRunTimeout, for a
// run that failed at its deadline) and lets errors.As find the *StepError.
func (e *RunError) Unwrap() []error {
	errs := []error{ErrRunFailed}
	if e.Message == ErrRunTimeout.Error() {
		errs = append(errs, ErrRunTimeout)
	}
	if e.Step != nil {
		errs = append(errs, e.Step)
	}
	return errs
}

// TimeoutError is the error of a step attempt that timed out. It matches
// ErrStepTimeout; it is retried by the step's policy like any failure.
type TimeoutError struct {
	Step    string        `json:"step"`
	Attempt int64         `json:"attempt"`
	Kind    string        `json:"kind"`  // "start-to-close" or "heartbeat"
	After   time.Duration `json:"after"` // the timeout
}

func (e *TimeoutError) Error() string {
	if e.Kind == "heartbeat" {
		return fmt.Sprintf("step %q attempt %d timed out: no heartbeat for %v", e.Step, e.Attempt, e.After)
	}
	return fmt.Sprintf("step %q attempt %d timed out after %v", e.Step, e.Attempt, e.After)
}

// Is makes errors.Is(err, ErrStepTimeout) true.
func (e *TimeoutError) Is(t error) bool { return t == ErrStepTimeout }

// SlotLostError is the error of a step attempt stopped because its
// limiter slot was lost while it ran: the store had not heard its renewal
// within the slot's lease (a stalled process, an unreachable database), or
// said the slot was no longer held. The attempt's context is cancelled and
// it is fenced off its streams before the slot can be another's, so that
// never more steps run than the limiter's bound; the step's policy retries
// it, with a slot of its own. It matches ErrSlotLost.
type SlotLostError struct {
	Step    string `json:"step"`
	Attempt int64  `json:"attempt"`
	Limiter string `json:"limiter"`
}

func (e *SlotLostError) Error() string {
	return fmt.Sprintf("step %q attempt %d lost its slot of limiter %q: its lease ran out before it was renewed", e.Step, e.Attempt, e.Limiter)
}

// Is makes errors.Is(err, ErrSlotLost) true.
func (e *SlotLostError) Is(t error) bool { return t == ErrSlotLost }

// stepFailure is what a final step_failed event keeps of its error (in its
// Data), so that the *StepError a replay returns matches what the live one
// did: errors.Is(err, ErrStepTimeout) must not change its answer after a
// restart, or workflow code that tests it would not replay.
type stepFailure struct {
	Timeout *TimeoutError `json:"timeout,omitempty"`
}

// failureOf encodes what err's kind is, if a replay must know it; nil if
// not.
func failureOf(err error) []byte {
	var te *TimeoutError
	if !errors.As(err, &te) {
		return nil
	}
	b, _ := json.Marshal(stepFailure{Timeout: te})
	return b
}

// causeOf decodes failureOf's encoding: the live error's kind (nil if
// none is recorded).
func causeOf(b []byte) error {
	var f stepFailure
	if len(b) == 0 || json.Unmarshal(b, &f) != nil {
		return nil
	}
	if f.Timeout != nil {
		return f.Timeout
	}
	return nil
}
