package weir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/weirhq/weir/internal/harness"
	"github.com/weirhq/weir/limit"
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
	Stream(name string, opts ...StreamOption) *Writer
	execution() *execution
}

type wfContext struct {
	context.Context
	x *execution
}

func (c *wfContext) RunID() string         { return c.x.run.ID }
func (c *wfContext) execution() *execution { return c.x }
func (c *wfContext) Stream(name string, opts ...StreamOption) *Writer {
	return newWorkflowWriter(c.x, name, streamOptionsOf(opts))
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
	// appended, and the step's outcome commits or aborts them. Options apply
	// to the stream when this call creates it (ContentType).
	Stream(name string, opts ...StreamOption) *Writer
	// Heartbeat tells the engine the attempt is alive: with
	// WithHeartbeatTimeout, an attempt that goes longer without one fails.
	// Without it, Heartbeat does nothing. Safe from any goroutine.
	Heartbeat()
}

type stepContext struct {
	context.Context
	x       *execution
	op      int64
	attempt int64
	cancel  context.CancelCauseFunc
	start   *stepStart
	beat    chan struct{} // nil without a heartbeat timeout

	mu      sync.Mutex
	writers map[string]*Writer
	closed  bool // fn returned: its writers are being closed
}

func (s *stepContext) Heartbeat() {
	select {
	case s.beat <- struct{}{}:
	default:
	}
}

// The torture checker tells an attempt's runs apart by their executions'
// epochs (harness.StepEpoch).
func init() {
	harness.StepEpoch = func(sc any) (int64, bool) {
		if c, ok := sc.(*stepContext); ok {
			return c.x.epoch, true
		}
		return 0, false
	}
}

func (s *stepContext) RunID() string  { return s.x.run.ID }
func (s *stepContext) Attempt() int64 { return s.attempt }
func (s *stepContext) StepID() string {
	return s.x.run.ID + "/step/" + strconv.FormatInt(s.op, 10)
}
func (s *stepContext) Stream(name string, opts ...StreamOption) *Writer {
	o := streamOptionsOf(opts)
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.writers[name]; w != nil {
		// Checked against the stream once opened, else the first call's ask.
		have := w.opts
		s.x.streamsMu.Lock()
		if ref, ok := s.x.streams[name]; ok {
			have = ref.opts
		}
		s.x.streamsMu.Unlock()
		if err := have.check(name, o.contentType); err != nil {
			return failedWriter(name, err)
		}
		return w
	}
	w := newStepWriter(s, name, o)
	if s.closed {
		w.closeNow() // asked for after fn returned (by a goroutine fn left)
	}
	s.writers[name] = w
	return w
}

// StepOption configures one step.
type StepOption func(*stepConfig)

type stepConfig struct {
	retry     RetryPolicy
	timeout   time.Duration // start-to-close; 0: none
	heartbeat time.Duration // the longest silence between heartbeats; 0: none
	limiter   string        // the limiter each attempt takes a slot of; "": none
	limitOpts LimitOptions
}

func (c *stepConfig) validate() error {
	if c.timeout < 0 || c.heartbeat < 0 {
		return fmt.Errorf("weir: negative step timeout (%v, heartbeat %v)", c.timeout, c.heartbeat)
	}
	if c.limiter != "" {
		r := limit.Request{Holder: "h", Key: c.limitOpts.Key, Lease: time.Second}
		if err := r.Check(); err != nil {
			return fmt.Errorf("weir: WithLimiter(%q): %w", c.limiter, err)
		}
		if len(c.limiter) > limit.MaxNameLen || !utf8.ValidString(c.limiter) {
			return fmt.Errorf("weir: WithLimiter: a limiter name of %d bytes or not UTF-8", len(c.limiter))
		}
	}
	return c.retry.validate()
}

// WithTimeout bounds each attempt of the step (start to close): an attempt
// still running after d fails with a *TimeoutError (ErrStepTimeout) and is
// retried by the step's policy. Its context is cancelled, and it is fenced
// at once: what it writes from then on is refused, what it wrote before is
// adopted or aborted by the next attempt as for any retry.
func WithTimeout(d time.Duration) StepOption {
	return func(c *stepConfig) { c.timeout = d }
}

// WithHeartbeatTimeout fails an attempt (a *TimeoutError, retried by its
// policy) that goes d without calling StepContext.Heartbeat: a long step
// that is stuck is told apart from one that is slow.
func WithHeartbeatTimeout(d time.Duration) StepOption {
	return func(c *stepConfig) { c.heartbeat = d }
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
// aborted. Panics in fn are failures of the attempt. To run steps at once,
// see Go.
func Step[T any](ctx Context, name string, fn func(StepContext) (T, error), opts ...StepOption) (T, error) {
	var zero T
	x := ctx.execution()
	cfg, err := x.stepConfig(opts)
	if err != nil {
		return zero, NonRetryable(err)
	}
	op, st := x.stepOp(name)
	if st.completed || st.failedFinal {
		return recorded[T](st)
	}
	if x.readOnly {
		x.leave(exitFrontier, nil)
	}
	return runStep(x.inline(), op, st, cfg, fn)
}

// stepConfig returns the engine's step defaults with opts applied.
func (x *execution) stepConfig(opts []StepOption) (stepConfig, error) {
	cfg := stepConfig{retry: x.e.cfg.Retry}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// stepOp takes the next operation for a step called name and returns its
// recorded state (new if none); a recorded operation of another kind or
// name is a non-determinism.
func (x *execution) stepOp(name string) (int64, *opState) {
	op, st := x.nextOp()
	if st != nil && (st.kind != opStep || st.name != name) {
		x.leave(exitNonDeterminism, &NonDeterminismError{Op: op, Recorded: st.describe(), Replayed: fmt.Sprintf("step %q", name)})
	}
	if st == nil {
		st = &opState{kind: opStep, name: name}
		x.ops[op] = st
	}
	return op, st
}

// recorded returns a finished step's result from its recorded state.
func recorded[T any](st *opState) (T, error) {
	var out T
	if st.failedFinal {
		return out, &StepError{Name: st.name, Attempt: st.lastAttempt, Message: st.errMsg, Err: causeOf(st.errKind)}
	}
	if err := json.Unmarshal(st.output, &out); err != nil {
		return out, NonRetryable(fmt.Errorf("decode output of step %q: %w", st.name, err))
	}
	return out, nil
}

// stepEnv is where a step's attempts run: inline on the workflow goroutine
// (Step), or on a goroutine of their own (Go). The attempts' rules are the
// same; what differs is how they wait and how they leave.
type stepEnv struct {
	x *execution
	// wait returns once t has passed, or wake is closed (nil: never); it
	// may leave instead (an interruption; a park, if park and t is far).
	wait func(t time.Time, wake <-chan struct{}, park bool)
	// leave stops the attempts for good with r; it does not return.
	leave func(r exitReason, err error)
	// acquire and release, if set, hold one of the run's step slots for
	// each attempt (Config.StepConcurrency).
	acquire func(env *stepEnv, op int64)
	release func()
	slot    <-chan struct{} // the first attempt's slot, asked for already
	// deferOK: a completed attempt's outcome may wait for the run's next
	// record (checkpoint.go). Only inline steps: the workflow goroutine
	// makes that record.
	deferOK bool
	// parks: a wait in a limiter's line may park the run (lined) when the
	// engine has no seat for it. Only inline steps: the workflow goroutine
	// parks the run.
	parks bool
	// standLined, for a step on a goroutine of its own (parks false), says
	// that it waits in w's line with no seat until the returned function
	// is called: it does not count as running, and the run parks lined
	// once none of its steps runs (execution.await).
	standLined func(w lineWant) (undo func())
}

// inline is the env of Step: the workflow goroutine's own waits and exits.
func (x *execution) inline() *stepEnv {
	return &stepEnv{x: x, wait: x.waitUntilOr, leave: x.leave, deferOK: true, parks: true}
}

// record writes p, leaving on failure as execution.record does.
func (env *stepEnv) record(p *store.AdvanceParams) {
	if err := env.x.recordErr(p); err != nil {
		env.fail(err)
	}
}

// fail leaves after a record's failure err.
func (env *stepEnv) fail(err error) {
	if errors.Is(err, store.ErrLeaseLost) {
		env.leave(exitLost, err)
	}
	if r, ok := env.x.interrupted(); ok {
		env.leave(r, err)
	}
	env.leave(exitStoreError, err)
}

// deferRecord makes p wait for the run's next record, with carry (the step
// writer's batch it never sent), leaving on failure as record does.
func (env *stepEnv) deferRecord(p *store.AdvanceParams, carry *carriedBatch) {
	if err := env.x.deferRecord(p, carry); err != nil {
		env.fail(err)
	}
}

// runStep runs a step's attempts from its recorded state st to its
// outcome, recording each.
func runStep[T any](env *stepEnv, op int64, st *opState, cfg stepConfig, fn func(StepContext) (T, error)) (T, error) {
	var zero T
	x, name, policy := env.x, st.name, cfg.retry
	for {
		if !st.retryAt.IsZero() {
			env.wait(st.retryAt, nil, true)
		}
		if env.acquire != nil {
			env.acquire(env, op)
		}
		attempt := st.lastAttempt + 1
		if attempt-st.base > int64(policy.MaxAttempts) {
			// The last allowed attempt died with its worker.
			msg := fmt.Sprintf("attempt %d ended without an outcome (worker lost) and no attempt is left", st.lastAttempt)
			env.record(&store.AdvanceParams{
				Events: []store.Event{{Type: store.EventStepFailed, Op: op, Name: name, Attempt: st.lastAttempt, Error: msg, Final: true}},
				Finish: &store.Finish{Writer: stepWriter(op), Attempt: st.lastAttempt},
			})
			st.open, st.failedFinal, st.errMsg = false, true, msg
			if env.release != nil {
				env.release()
			}
			return zero, &StepError{Name: name, Attempt: st.lastAttempt, Message: msg}
		}
		var giveBack func(cost int64)
		var slotLost <-chan struct{}
		if cfg.limiter != "" {
			var err error
			if giveBack, slotLost, err = env.takeSlot(op, st, attempt, &cfg); err != nil {
				// No slot to be had, ever: the step fails for good, and
				// an earlier attempt's output with it.
				msg := err.Error()
				p := &store.AdvanceParams{Events: []store.Event{{Type: store.EventStepFailed, Op: op, Name: name, Attempt: attempt, Error: msg, Final: true}}}
				if st.lastAttempt > 0 {
					p.Finish = &store.Finish{Writer: stepWriter(op), Attempt: st.lastAttempt}
				}
				env.record(p)
				st.lastAttempt, st.open, st.failedFinal, st.errMsg = attempt, false, true, msg
				if env.release != nil {
					env.release()
				}
				return zero, &StepError{Name: name, Attempt: attempt, Message: msg, Err: err}
			}
		}
		start := newStepStart(x, op, name, attempt)
		st.lastAttempt, st.open, st.retryAt = attempt, true, time.Time{}
		x.startAttemptSpan(start)

		out, err := runAttempt(x, start, st, &cfg, env.deferOK, slotLost, fn)
		if giveBack != nil {
			giveBack(start.cost.Load())
		}
		if env.release != nil {
			env.release()
		}
		if r, ok := x.interrupted(); ok {
			endAttemptSpan(start, "interrupted", context.Cause(x.ctx), 0)
			if err := x.endInterrupted(r, start, st); err != nil {
				env.fail(err)
			}
			env.leave(r, context.Cause(x.ctx))
		}
		if errors.Is(err, ErrFenced) || errors.Is(err, store.ErrLeaseLost) {
			// A newer attempt or another worker exists: this one is a zombie.
			endAttemptSpan(start, "lost", err, 0)
			start.fold(nil)
			env.leave(exitLost, err)
		}
		var data []byte
		if err == nil {
			if data, err = json.Marshal(out); err != nil {
				err = NonRetryable(fmt.Errorf("encode output of step %q: %w", name, err))
			}
		}
		if err == nil {
			wrote := attempt > 1 || start.written() || start.carry != nil
			p := start.fold(&store.AdvanceParams{
				Events: []store.Event{{Type: store.EventStepCompleted, Op: op, Name: name, Attempt: attempt, Data: data}},
			})
			if wrote {
				// A first attempt whose start waited for its outcome wrote
				// no stream (a write makes the start durable first), or
				// carries what it wrote in this record: there is nothing
				// else to commit.
				p.Finish = &store.Finish{Writer: stepWriter(op), Attempt: attempt, Commit: true}
			}
			if env.deferOK {
				env.deferRecord(p, start.carry)
			} else if err := x.recordVia(p, x.carryVia(start.carry)); err != nil {
				env.fail(err)
			}
			st.open, st.completed, st.output = false, true, data
			endAttemptSpan(start, "completed", nil, 0)
			return out, nil
		}
		// A timed-out attempt, or one that lost its limiter's slot, may
		// still be running: fence it at once, so that nothing it writes
		// from now on is taken.
		var fence *store.Fence
		if errors.Is(err, ErrStepTimeout) || errors.Is(err, ErrSlotLost) {
			fence = &store.Fence{Writer: stepWriter(op), Attempt: attempt + 1}
		}
		if policy.retryable(err) && attempt-st.base < int64(policy.MaxAttempts) {
			retryAt := time.Now().Add(policy.Backoff(attempt - st.base))
			p := start.fold(&store.AdvanceParams{
				Events: []store.Event{{Type: store.EventStepFailed, Op: op, Name: name, Attempt: attempt, Error: err.Error(), WakeAt: retryAt}},
			})
			if fence != nil {
				p.Fence = fence
			}
			endAttemptSpan(start, "retrying", err, time.Until(retryAt))
			env.record(p)
			st.open, st.retryAt, st.errMsg = false, retryAt, err.Error()
			continue
		}
		// The last attempt: its output is aborted, and a timed-out one is
		// fenced off at once too (the Advance decides its finish first).
		kind := failureOf(err)
		p := start.fold(&store.AdvanceParams{
			Events: []store.Event{{Type: store.EventStepFailed, Op: op, Name: name, Attempt: attempt, Error: err.Error(), Final: true, Data: kind}},
			Finish: &store.Finish{Writer: stepWriter(op), Attempt: attempt},
		})
		if fence != nil {
			p.Fence = fence
		}
		endAttemptSpan(start, "failed", err, 0)
		env.record(p)
		st.open, st.failedFinal, st.errMsg, st.errKind = false, true, err.Error(), kind
		return zero, &StepError{Name: name, Attempt: attempt, Message: err.Error(), Err: err}
	}
}

// runAttempt runs one attempt of a step: fn, then the flush of its writers,
// on a goroutine of its own. A panic in fn is the attempt's error. The
// attempt ends when fn returns, at its timeout (start-to-close or
// heartbeat), or when the run is interrupted (cancelled, past its deadline,
// lost, stopping), whether fn returns or not: fn is then told through its
// context and abandoned, a zombie its fence stops (Engine.abandoned
// reports it while it lingers).
//
// An inline step's attempt without a timeout runs fn on the workflow
// goroutine itself (a goroutine hand-off costs a short step a sixth of its
// time): if the run is interrupted while fn does not return, execute
// detaches it (execution.detach) and ends the run without it.
func runAttempt[T any](x *execution, start *stepStart, st *opState, cfg *stepConfig, inline bool, slotLost <-chan struct{}, fn func(StepContext) (T, error)) (out T, err error) {
	parent := x.ctx
	if start.span != nil {
		// The step's own spans (an LLM call's, an HTTP client's) are the
		// attempt's children.
		parent = trace.ContextWithSpan(parent, start.span)
	}
	ctx, cancel := context.WithCancelCause(parent)
	sc := &stepContext{Context: ctx, x: x, op: start.op, attempt: start.attempt, writers: map[string]*Writer{}, cancel: cancel, start: start}
	call := func() (out T, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("step panicked: %v\n%s", p, debug.Stack())
			}
		}()
		out, err = fn(sc)
		// Whatever fn returned, its writes must be settled before the
		// outcome is recorded: the commit covers exactly what was
		// acknowledged.
		sc.mu.Lock()
		ws := sc.writers
		sc.closed = true
		sc.mu.Unlock()
		if err == nil && len(ws) == 1 {
			// A step that returned before its one writer sent anything
			// hands that batch to its outcome: one transaction for both.
			for _, w := range ws {
				start.carry = w.carryFirst()
			}
		}
		for _, w := range ws {
			if ferr := w.Close(); ferr != nil && (err == nil || errors.Is(ferr, ErrFenced)) {
				err = ferr
			}
		}
		return out, err
	}
	if inline && cfg.timeout <= 0 && cfg.heartbeat <= 0 && slotLost == nil {
		a := &inlineAttempt{start: start, st: st, returned: make(chan struct{})}
		x.inlineRun.Store(a)
		if x.ctx.Err() == nil {
			out, err = call()
		} else {
			err = context.Cause(x.ctx)
		}
		if !a.state.CompareAndSwap(0, 1) {
			// Detached: the run ended without this attempt. Touch nothing
			// of it until its execution is done with it, then leave.
			close(a.returned)
			<-x.finished
			runtime.Goexit()
		}
		x.inlineRun.Store(nil)
		cancel(nil)
		return out, err
	}
	if cfg.heartbeat > 0 {
		sc.beat = make(chan struct{}, 1)
	}
	type result struct {
		out T
		err error
	}
	res := make(chan result, 1)
	returned := make(chan struct{})
	x.e.attempts.Add(1)
	go func() {
		defer x.e.attempts.Done()
		defer close(returned)
		out, err := call()
		res <- result{out, err}
	}()
	var deadline, idle <-chan time.Time
	if cfg.timeout > 0 {
		t := time.NewTimer(cfg.timeout)
		defer t.Stop()
		deadline = t.C
	}
	var hb *time.Timer
	if cfg.heartbeat > 0 {
		hb = time.NewTimer(cfg.heartbeat)
		defer hb.Stop()
		idle = hb.C
	}
	for {
		var why error
		select {
		case r := <-res:
			cancel(nil)
			return r.out, r.err
		case <-sc.beat:
			hb.Reset(cfg.heartbeat)
			continue
		case <-deadline:
			why = &TimeoutError{Step: start.name, Attempt: start.attempt, Kind: "start-to-close", After: cfg.timeout}
		case <-idle:
			why = &TimeoutError{Step: start.name, Attempt: start.attempt, Kind: "heartbeat", After: cfg.heartbeat}
		case <-slotLost:
			select {
			case r := <-res:
				// It returned as the slot was lost: it ran within its
				// slot, and its outcome stands.
				cancel(nil)
				return r.out, r.err
			default:
			}
			why = &SlotLostError{Step: start.name, Attempt: start.attempt, Limiter: cfg.limiter}
		case <-x.ctx.Done():
			// The run is interrupted: the caller records what it must.
			why = context.Cause(x.ctx)
		}
		cancel(why)
		x.e.abandoned(x, start, why, returned)
		return out, why
	}
}

// inlineAttempt is the attempt of an inline step whose function runs on
// the workflow goroutine. Whoever moves state from 0 owns the attempt's
// end: 1, the workflow goroutine (fn returned); 2, execute (detach).
type inlineAttempt struct {
	state    atomic.Int32
	start    *stepStart
	st       *opState
	returned chan struct{} // closed when a detached attempt's fn returns
}

// endInterrupted records the end of attempt start of step st, which the
// run's interruption r stopped: for a cancel or a deadline its output is
// aborted and the attempt, which may run on, fenced off every stream of
// the run, with its final failure; for a stop or a lost lease nothing (the
// next owner fences it).
func (x *execution) endInterrupted(r exitReason, start *stepStart, st *opState) error {
	if r != exitCancelled && r != exitRunTimeout {
		start.fold(nil)
		return nil
	}
	op, attempt := start.op, start.attempt
	p := start.fold(&store.AdvanceParams{
		Events: []store.Event{{Type: store.EventStepFailed, Op: op, Name: start.name, Attempt: attempt, Error: context.Cause(x.ctx).Error(), Final: true}},
		Finish: &store.Finish{Writer: stepWriter(op), Attempt: attempt},
	})
	p.Fence = &store.Fence{Writer: stepWriter(op), Attempt: attempt + 1}
	if err := x.recordErr(p); err != nil {
		return err
	}
	st.open, st.failedFinal = false, true
	return nil
}

// detach ends the inline attempt running on the workflow goroutine, if
// there is one and its function has not returned, for the interrupted run
// (execute): it records the attempt's end, counts it abandoned, and sets
// the run's exit, and the run goes on to its end while the function
// lingers. It reports whether it did; if not, the workflow goroutine
// leaves by itself.
func (x *execution) detach() bool {
	a := x.inlineRun.Load()
	if a == nil || !a.state.CompareAndSwap(0, 2) {
		return false
	}
	r, _ := x.interrupted()
	why := context.Cause(x.ctx)
	x.e.attempts.Add(1) // Close waits for the function, as for any attempt's
	go func() {
		<-a.returned
		x.e.attempts.Done()
	}()
	x.e.abandoned(x, a.start, why, a.returned)
	if err := x.endInterrupted(r, a.start, a.st); err != nil {
		x.e.log.Warn("weir: record the end of an abandoned step attempt", "run", x.run.ID, "step", a.start.name, "err", err)
		if errors.Is(err, store.ErrLeaseLost) {
			r = exitLost
		}
	}
	x.exit, x.exitErr = r, why
	return true
}

// lingerReport is how long an abandoned attempt's function may take to
// return before the engine says it lingers.
const lingerReport = time.Second

// abandoned counts an attempt whose function the engine stopped waiting
// for (returned is closed when it returns), and logs it if it lingers
// past lingerReport: a step deaf to its context holds a goroutine, and
// whatever it holds, until it returns (EngineStats.LingeringAttempts).
func (e *Engine) abandoned(x *execution, start *stepStart, why error, returned <-chan struct{}) {
	e.lingering.Add(1)
	e.abandonedTotal.Add(1)
	go func() {
		defer e.lingering.Add(-1)
		t := time.NewTimer(lingerReport)
		defer t.Stop()
		select {
		case <-returned:
			return // it heard its context
		case <-t.C:
		}
		since := time.Now().Add(-lingerReport)
		e.log.Warn("weir: an abandoned step attempt is still running: its function ignores its context",
			"run", x.run.ID, "step", start.name, "op", start.op, "attempt", start.attempt, "why", why)
		<-returned
		e.log.Info("weir: an abandoned step attempt returned", "run", x.run.ID, "step", start.name, "op", start.op,
			"attempt", start.attempt, "after", time.Since(since).Round(time.Millisecond))
	}()
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
		x.record(&store.AdvanceParams{Events: []store.Event{{Type: store.EventSleepScheduled, Op: op, WakeAt: st.wakeAt}}})
	}
	if st.fired {
		return
	}
	// Its span ends when it fires here, or with the execution (a park).
	_, sp := x.e.tracer.Start(x.ctx, "weir.sleep")
	if sp.IsRecording() {
		sp.SetAttributes(attrRunID.String(x.run.ID), attrOp.Int64(op), attribute.String("weir.wait.until", st.wakeAt.UTC().Format(time.RFC3339Nano)))
	}
	defer sp.End()
	x.waitUntil(st.wakeAt)
	x.record(&store.AdvanceParams{Events: []store.Event{{Type: store.EventSleepFired, Op: op}}})
	st.fired = true
}

// stepStartDelay is how long a step runs before its start is recorded on its
// own. Most steps never get there: their start is recorded with their
// outcome, in one transaction.
const stepStartDelay = 100 * time.Millisecond

// stepStart records an attempt's start lazily. The start must be durable
// before the attempt writes a stream (its attempt number fences zombies and
// tells a retry apart) and, so that a crash counts as an attempt, once the
// step runs for a while; otherwise it rides along with the outcome, which
// halves the cost of a short step. Temporal records retried activities'
// starts the same way.
type stepStart struct {
	x           *execution
	op, attempt int64
	name        string
	at          time.Time
	timer       *time.Timer
	mu          sync.Mutex
	done        bool
	err         error
	// span is the attempt's span; stats what its stream writes did
	// (tracing.go).
	span  trace.Span
	stats streamStats
	// cost is what ChargeLimiter reported, charged to the step's limiter
	// when the attempt ends.
	cost atomic.Int64
	// carry is the batch the attempt's writer never sent, for its outcome
	// (Writer.carryFirst); set when the function has returned.
	carry *carriedBatch
}

func newStepStart(x *execution, op int64, name string, attempt int64) *stepStart {
	s := &stepStart{x: x, op: op, name: name, attempt: attempt, at: time.Now()}
	s.timer = time.AfterFunc(stepStartDelay, func() { _ = s.ensure() })
	return s
}

func (s *stepStart) params() *store.AdvanceParams {
	return &store.AdvanceParams{
		Events: []store.Event{{Type: store.EventStepStarted, Op: s.op, Name: s.name, Attempt: s.attempt, At: s.at}},
		Fence:  &store.Fence{Writer: stepWriter(s.op), Attempt: s.attempt},
	}
}

// ensure makes the start durable now; safe from any goroutine. A lost lease
// is final: the attempt cannot write.
func (s *stepStart) ensure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return s.err
	}
	err := s.x.recordErr(s.params())
	if err == nil || errors.Is(err, store.ErrLeaseLost) {
		// Settled; a transient failure is tried again by the next caller.
		s.done, s.err = true, err
	}
	return err
}

// ensureVia is ensure, the start written through via (with a stream's
// first batch: Writer.openAppend). If the start was recorded already, via
// is not called.
func (s *stepStart) ensureVia(via advanceVia) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return s.err
	}
	err := s.x.recordVia(s.params(), via)
	if err == nil || errors.Is(err, store.ErrLeaseLost) {
		s.done, s.err = true, err
	}
	return err
}

// fold stops the timer and, if the start is not recorded yet, puts it in
// front of p (the attempt's outcome). p may be nil: the attempt is abandoned.
func (s *stepStart) fold(p *store.AdvanceParams) *store.AdvanceParams {
	s.timer.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done || p == nil {
		s.done = true
		return p
	}
	s.done = true
	sp := s.params()
	p.Events = append(sp.Events, p.Events...)
	if s.attempt > 1 {
		// A first attempt has no older one to fence.
		p.Fence = sp.Fence
	}
	return p
}

// written reports whether the start was recorded on its own (ensure): only
// then may the attempt have written a stream.
func (s *stepStart) written() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done && s.err == nil
}
