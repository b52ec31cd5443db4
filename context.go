package weir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/weirhq/weir/store"
)

// Context is what a workflow function gets. It is a context.Context that is
// cancelled when the run is cancelled, and the handle through which the
// function reaches durable operations: Step, Sleep and its streams.
//
// Durable operations are numbered in the order the function calls them;
// replay after a crash must call the same ones in the same order. Use a
// Context only from the workflow function's own goroutine.
type Context interface {
	context.Context
	// RunID returns the run's id.
	RunID() string
	// Stream returns the run's stream name for writes from workflow code.
	// Each write is appended and committed before Write returns; on replay it
	// is recognised, not appended again.
	Stream(name string) *Writer
	execution() *execution
}

type wfContext struct {
	context.Context
	x *execution
}

func (c *wfContext) RunID() string         { return c.x.run.ID }
func (c *wfContext) execution() *execution { return c.x }
func (c *wfContext) Stream(name string) *Writer {
	return newWorkflowWriter(c.x, name)
}

// StepContext is what a step function gets: a context.Context cancelled when
// the run is cancelled or the step's attempt is superseded, the attempt
// number and a stable step id, and the step's stream writers.
type StepContext interface {
	context.Context
	// RunID returns the run's id.
	RunID() string
	// StepID returns the step's id, the same on every attempt and after a
	// crash: "<run id>/step/<position>". Use it as the idempotency key of the
	// step's other side effects.
	StepID() string
	// Attempt returns the attempt number, from 1.
	Attempt() int64
	// Stream returns the step's writer on the run's stream name. Its writes
	// are batched; identical chunks written again by a retry are adopted, not
	// appended, and the step's outcome commits or aborts them.
	Stream(name string) *Writer
}

type stepContext struct {
	context.Context
	x       *execution
	op      int64
	attempt int64
	writers map[string]*Writer
	cancel  context.CancelCauseFunc
}

func (s *stepContext) RunID() string  { return s.x.run.ID }
func (s *stepContext) Attempt() int64 { return s.attempt }
func (s *stepContext) StepID() string {
	return s.x.run.ID + "/step/" + strconv.FormatInt(s.op, 10)
}
func (s *stepContext) Stream(name string) *Writer {
	if w := s.writers[name]; w != nil {
		return w
	}
	w := newStepWriter(s, name)
	s.writers[name] = w
	return w
}

// StepOption configures one step.
type StepOption func(*stepConfig)

type stepConfig struct {
	retry RetryPolicy
}

// WithRetry sets the step's retry policy; zero fields take the engine's
// Config.Retry values.
func WithRetry(p RetryPolicy) StepOption {
	return func(c *stepConfig) {
		d := c.retry
		if p.MaxAttempts != 0 {
			d.MaxAttempts = p.MaxAttempts
		}
		if p.InitialInterval != 0 {
			d.InitialInterval = p.InitialInterval
		}
		if p.BackoffCoefficient != 0 {
			d.BackoffCoefficient = p.BackoffCoefficient
		}
		if p.MaxInterval != 0 {
			d.MaxInterval = p.MaxInterval
		}
		if p.Jitter != 0 {
			d.Jitter = p.Jitter
		}
		d.NonRetryable = append(d.NonRetryable, p.NonRetryable...)
		c.retry = d
	}
}

// Step runs fn as the run's next durable operation and returns its result.
// If the log already holds the step's outcome (a replay), fn does not run and
// the recorded result is returned. Otherwise fn runs, and runs again on
// failure as its retry policy allows; the result is encoded as JSON.
//
// A step that fails for good returns a *StepError; its stream output is
// aborted. Panics in fn are failures of the attempt.
func Step[T any](ctx Context, name string, fn func(StepContext) (T, error), opts ...StepOption) (T, error) {
	var zero T
	x := ctx.execution()
	cfg := stepConfig{retry: x.e.cfg.Retry}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.retry.validate(); err != nil {
		return zero, NonRetryable(err)
	}
	op, st := x.nextOp()
	if st != nil && (st.kind != opStep || st.name != name) {
		x.leave(exitNonDeterminism, &NonDeterminismError{Op: op, Recorded: st.describe(), Replayed: fmt.Sprintf("step %q", name)})
	}
	if st == nil {
		st = &opState{kind: opStep, name: name}
		x.ops[op] = st
	}
	decode := func(b []byte) (T, error) {
		var out T
		if err := json.Unmarshal(b, &out); err != nil {
			return zero, NonRetryable(fmt.Errorf("decode output of step %q: %w", name, err))
		}
		return out, nil
	}
	switch {
	case st.completed:
		return decode(st.output)
	case st.failedFinal:
		return zero, &StepError{Name: name, Attempt: st.lastAttempt, Message: st.errMsg}
	case x.readOnly:
		x.leave(exitFrontier, nil)
	}
	policy := cfg.retry
	for {
		if !st.retryAt.IsZero() {
			x.waitUntil(st.retryAt)
		}
		attempt := st.lastAttempt + 1
		if attempt > int64(policy.MaxAttempts) {
			// The last allowed attempt died with its worker.
			msg := fmt.Sprintf("attempt %d ended without an outcome (worker lost) and no attempt is left", st.lastAttempt)
			x.record(&store.RecordParams{
				Events: []store.Event{{Type: store.EventStepFailed, Op: op, Name: name, Attempt: st.lastAttempt, Error: msg, Final: true}},
				Finish: &store.Finish{Writer: stepWriter(op), Attempt: st.lastAttempt},
			})
			st.open, st.failedFinal, st.errMsg = false, true, msg
			return zero, &StepError{Name: name, Attempt: st.lastAttempt, Message: msg}
		}
		x.record(&store.RecordParams{
			Events: []store.Event{{Type: store.EventStepStarted, Op: op, Name: name, Attempt: attempt}},
			Fence:  &store.Fence{Writer: stepWriter(op), Attempt: attempt},
		})
		st.lastAttempt, st.open, st.retryAt = attempt, true, time.Time{}

		out, err := runAttempt(x, op, attempt, fn)
		if r, ok := x.interrupted(); ok {
			if r == exitCancelled {
				x.record(&store.RecordParams{
					Events: []store.Event{{Type: store.EventStepFailed, Op: op, Name: name, Attempt: attempt, Error: ErrCancelled.Error(), Final: true}},
					Finish: &store.Finish{Writer: stepWriter(op), Attempt: attempt},
				})
				st.open, st.failedFinal = false, true
			}
			x.leave(r, context.Cause(x.ctx))
		}
		if errors.Is(err, ErrFenced) {
			// A newer attempt exists: this one is a zombie.
			x.leave(exitLost, err)
		}
		var data []byte
		if err == nil {
			if data, err = json.Marshal(out); err != nil {
				err = NonRetryable(fmt.Errorf("encode output of step %q: %w", name, err))
			}
		}
		if err == nil {
			x.record(&store.RecordParams{
				Events: []store.Event{{Type: store.EventStepCompleted, Op: op, Name: name, Attempt: attempt, Data: data}},
				Finish: &store.Finish{Writer: stepWriter(op), Attempt: attempt, Commit: true},
			})
			st.open, st.completed, st.output = false, true, data
			return out, nil
		}
		if policy.retryable(err) && attempt < int64(policy.MaxAttempts) {
			retryAt := time.Now().Add(policy.Backoff(attempt))
			x.record(&store.RecordParams{
				Events: []store.Event{{Type: store.EventStepFailed, Op: op, Name: name, Attempt: attempt, Error: err.Error(), WakeAt: retryAt}},
			})
			st.open, st.retryAt, st.errMsg = false, retryAt, err.Error()
			continue
		}
		x.record(&store.RecordParams{
			Events: []store.Event{{Type: store.EventStepFailed, Op: op, Name: name, Attempt: attempt, Error: err.Error(), Final: true}},
			Finish: &store.Finish{Writer: stepWriter(op), Attempt: attempt},
		})
		st.open, st.failedFinal, st.errMsg = false, true, err.Error()
		return zero, &StepError{Name: name, Attempt: attempt, Message: err.Error(), Err: err}
	}
}

// runAttempt runs one attempt of a step: fn, then the flush of its writers.
// A panic in fn is the attempt's error.
func runAttempt[T any](x *execution, op, attempt int64, fn func(StepContext) (T, error)) (out T, err error) {
	ctx, cancel := context.WithCancelCause(x.ctx)
	sc := &stepContext{Context: ctx, x: x, op: op, attempt: attempt, writers: map[string]*Writer{}, cancel: cancel}
	defer cancel(nil)
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("step panicked: %v\n%s", p, debug.Stack())
			}
		}()
		out, err = fn(sc)
	}()
	// Whatever fn returned, its writes must be settled before the outcome is
	// recorded: the commit covers exactly what was acknowledged.
	for _, w := range sc.writers {
		if ferr := w.Close(); ferr != nil && (err == nil || errors.Is(ferr, ErrFenced)) {
			err = ferr
		}
	}
	return out, err
}

// Sleep is a durable sleep: the wake time is recorded, so a restart neither
// loses nor repeats it. A sleep longer than Config.ParkAfter parks the run.
func Sleep(ctx Context, d time.Duration) {
	x := ctx.execution()
	op, st := x.nextOp()
	if st != nil && st.kind != opSleep {
		x.leave(exitNonDeterminism, &NonDeterminismError{Op: op, Recorded: st.describe(), Replayed: "sleep"})
	}
	if x.readOnly && (st == nil || !st.fired) {
		x.leave(exitFrontier, nil)
	}
	if st == nil {
		st = &opState{kind: opSleep, wakeAt: time.Now().Add(d)}
		x.ops[op] = st
		x.record(&store.RecordParams{Events: []store.Event{{Type: store.EventSleepScheduled, Op: op, WakeAt: st.wakeAt}}})
	}
	if st.fired {
		return
	}
	x.waitUntil(st.wakeAt)
	x.record(&store.RecordParams{Events: []store.Event{{Type: store.EventSleepFired, Op: op}}})
	st.fired = true
}
