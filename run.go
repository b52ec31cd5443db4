package weir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirhq/weir/inbox"
	"github.com/weirhq/weir/store"
)

// exitReason says why a workflow goroutine stopped before its function
// returned. The engine unwinds workflow code with runtime.Goexit, which runs
// its deferred calls and cannot be recovered, so user code cannot swallow a
// park or a lost lease.
type exitReason int

const (
	exitNone           exitReason = iota
	exitPark                      // waiting past ParkAfter: lease released, WakeAt set
	exitLost                      // lease lost or fenced: another worker owns the run
	exitStopping                  // the engine is closing: release the lease
	exitCancelled                 // the run was cancelled
	exitNonDeterminism            // replay diverged from the log
	exitStoreError                // the store failed: leave the run to be resumed
	exitFrontier                  // Replay reached the end of the log
	exitRunTimeout                // the run's deadline passed (WithRunTimeout)
)

// opKind is the kind of a durable operation.
type opKind string

const (
	opStep   opKind = "step"
	opSleep  opKind = "sleep" // Sleep and NewTimer
	opSelect opKind = "select"
	opHook   opKind = "hook"
	opChild  opKind = "child"
	opSend   opKind = "send"  // Send: a message to a run
	opEvent  opKind = "event" // SetEvent
	opPatch  opKind = "patch" // Patched
	// opMessage is a message Future's kind (Recv): it takes no op.
	opMessage opKind = "message"
)

// opState is what the event log says of one durable operation.
type opState struct {
	kind        opKind
	name        string
	lastAttempt int64
	limitWait   int64 // the last attempt whose wait for its limiter is in the log
	open        bool  // lastAttempt started and has no outcome (it crashed, or runs now)
	completed   bool
	output      []byte
	failedFinal bool
	errMsg      string
	errKind     []byte // the final failure's cause (failureOf), for replay's StepError
	base        int64  // attempts before the run's last resume: the retry policy counts from it
	retryAt     time.Time
	wakeAt      time.Time
	fired       bool
	chosen      int       // select: the index chosen
	token       string    // hook: its token
	box         inbox.Box // hook: its payloads, in log order, and its close
	child       string    // child: the child run's id
	end         []byte    // child: its end, as delivered to the parent (a hook's first payload, whatever the op)
}

func (s *opState) describe() string {
	switch s.kind {
	case opSleep:
		return "sleep"
	case opSelect:
		return "select"
	case opHook:
		return "hook " + HookRef(s.token)
	case opChild:
		return fmt.Sprintf("child run %s", s.child)
	case opSend:
		return fmt.Sprintf("a message to run %s", s.child)
	case opEvent:
		return fmt.Sprintf("run event %q", s.name)
	case opPatch:
		return fmt.Sprintf("patch %q", s.name)
	}
	return fmt.Sprintf("step %q", s.name)
}

// execution is one execution of a run by this engine, from a claim to the
// moment the run ends, parks or is lost.
type execution struct {
	// span is this execution's span (tracing.go); outcome and outcomeErr
	// are what it ends with.
	span       trace.Span
	outcome    string
	outcomeErr error
	e          *Engine
	run        *store.Run
	epoch      int64
	ctx        context.Context
	cancel     context.CancelCauseFunc

	ops    map[int64]*opState
	maxOp  int64 // highest op in the log
	opSeq  int64 // ops reached by this replay
	events int   // events in the log when the execution began

	streamsMu sync.Mutex
	streams   map[string]streamRef // by name: the streams this execution opened
	wfSeq     map[string]int64     // workflow writer: next seq per stream
	wfDirty   bool                 // the workflow wrote since the last stream mark (fork.go)
	marksMu   sync.Mutex
	marks     []streamMark // stream marks not written yet

	readOnly bool        // Replay: run nothing, write nothing
	ended    atomic.Bool // the workflow goroutine has exited

	par        parallel              // step goroutines (Go)
	deadline   time.Time             // the run's deadline (WithRunTimeout); zero: none
	polled     int64                 // the last event seq this execution has read
	gained     bool                  // the last read of the log brought a delivery
	hooks      int                   // hooks of the run (child runs too): deliveries may come
	topics     map[string]*inbox.Box // messages to the run, by topic, in log order
	receives   bool                  // the workflow takes messages (Recv): they may come
	childCheck time.Time             // when this execution last looked at its children's rows

	rec      recorder // the records that wait (checkpoint.go)
	freeSlot func()   // gives the run's slot back (once); nil: none (Replay)
	// Of the engine's slots (e.mu): the steps waiting in a limiter's line
	// for a held slot, whether the run is aside for them (not counted in
	// e.inflight: Config.LineRuns), and whether its slot was given back.
	lineWaits int
	aside     bool
	slotGone  bool
	seat      *lineSeat // while aside
	// linedClaim: claimed as a lined run (store.ClaimRunsParams.Lined) and
	// not yet in a line: counted in e.linedPending.
	linedClaim bool

	// inlineRun is the attempt of an inline step whose function runs on
	// the workflow goroutine now, if any; finished is closed when execute
	// is done with the run (a detached workflow goroutine waits for it).
	inlineRun atomic.Pointer[inlineAttempt]
	finished  chan struct{}

	exit    exitReason
	exitErr error
}

func (x *execution) load(events []store.Event) {
	x.ops = make(map[int64]*opState)
	for i := range events {
		ev := &events[i]
		x.events++
		x.polled = max(x.polled, ev.Seq)
		switch ev.Type {
		case store.EventMessageReceived:
			x.topic(ev.Name).Deliver(ev.Data)
			continue
		case store.EventStreamMark:
			continue
		case store.EventRunResumed:
			x.resumed(ev.Data)
			continue
		}
		if ev.Op == 0 {
			continue
		}
		st := x.ops[ev.Op]
		if st == nil {
			st = &opState{}
			x.ops[ev.Op] = st
			x.maxOp = max(x.maxOp, ev.Op)
		}
		switch ev.Type {
		case store.EventStepStarted:
			st.kind, st.name = opStep, ev.Name
			st.lastAttempt, st.open, st.retryAt, st.failedFinal = ev.Attempt, true, time.Time{}, false
		case store.EventStepCompleted:
			st.open, st.completed, st.output = false, true, ev.Data
		case store.EventStepFailed:
			st.kind, st.name = opStep, ev.Name
			st.lastAttempt = max(st.lastAttempt, ev.Attempt)
			st.open, st.errMsg = false, ev.Error
			if ev.Final {
				st.failedFinal, st.errKind = true, ev.Data
			} else {
				st.retryAt = ev.WakeAt
			}
		case store.EventSleepScheduled:
			st.kind, st.wakeAt = opSleep, ev.WakeAt
		case store.EventSleepFired:
			st.fired = true
		case store.EventSelected:
			st.kind, st.chosen = opSelect, selected(ev.Data)
		case store.EventChildStarted:
			st.kind, st.child = opChild, ev.Name
		case store.EventMessageSent:
			st.kind, st.child, st.errMsg, st.output = opSend, ev.Name, ev.Error, ev.Data
		case store.EventSet:
			st.kind, st.name = opEvent, ev.Name
		case store.EventPatched:
			st.kind, st.name = opPatch, ev.Name
		case store.EventLimitWaiting:
			st.kind, st.name, st.limitWait = opStep, ev.Name, ev.Attempt
		default:
			x.loadHook(st, ev)
		}
	}
}

// resumed applies a run_resumed event (store.Forks.ResumeRun): the final
// failures of its steps are undone, and their next attempts count afresh.
func (x *execution) resumed(data []byte) {
	var d struct{ Ops []int64 }
	if err := json.Unmarshal(data, &d); err != nil {
		x.e.log.Warn("weir: run_resumed event", "run", x.run.ID, "err", err)
		return
	}
	for _, op := range d.Ops {
		if st := x.ops[op]; st != nil && st.failedFinal {
			st.failedFinal, st.errKind, st.errMsg, st.retryAt = false, nil, "", time.Time{}
			st.base = st.lastAttempt
		}
	}
}

// leave unwinds the workflow goroutine. Call it only from workflow code.
func (x *execution) leave(r exitReason, err error) {
	x.exit, x.exitErr = r, err
	runtime.Goexit()
}

// interrupted maps a cancelled run context to the reason to leave.
func (x *execution) interrupted() (exitReason, bool) {
	if x.ctx.Err() == nil {
		return exitNone, false
	}
	switch cause := context.Cause(x.ctx); {
	case errors.Is(cause, ErrCancelled):
		return exitCancelled, true
	case errors.Is(cause, ErrRunTimeout):
		return exitRunTimeout, true
	case errors.Is(cause, errEngineStopping), errors.Is(cause, errUnwinding):
		return exitStopping, true
	case errors.Is(cause, errStoreFailed):
		return exitStoreError, true
	default:
		return exitLost, true
	}
}

// record writes one engine transaction, fenced by this execution's lease.
// From workflow code, a failure unwinds the goroutine.
func (x *execution) record(p *store.AdvanceParams) {
	if x.readOnly {
		x.leave(exitFrontier, nil)
	}
	if err := x.recordErr(p); err != nil {
		if errors.Is(err, store.ErrLeaseLost) {
			x.leave(exitLost, err)
		}
		if r, ok := x.interrupted(); ok {
			x.leave(r, err)
		}
		x.leave(exitStoreError, err)
	}
}

func stepWriter(op int64) string { return "step/" + strconv.FormatInt(op, 10) }

func (e *Engine) execute(ctx context.Context, cancel context.CancelCauseFunc, r *store.Run, fresh bool, free func()) {
	x := &execution{e: e, run: r, epoch: r.LeaseEpoch, ctx: ctx, cancel: cancel, finished: make(chan struct{})}
	if free != nil {
		x.freeSlot = func() {
			// An aside run's slot was given back already.
			e.mu.Lock()
			if x.aside {
				x.aside = false
				e.aside--
				e.inflight++
				e.dropSeat(x)
			}
			if x.linedClaim {
				x.linedClaim = false
				e.linedPending--
			}
			x.slotGone = true
			e.mu.Unlock()
			free()
		}
	}
	defer close(x.finished) // last: a detached workflow goroutine waits for it
	e.mu.Lock()
	if e.linedRuns[r.ID] {
		delete(e.linedRuns, r.ID)
		x.linedClaim = x.freeSlot != nil
		if !x.linedClaim {
			e.linedPending--
		}
	}
	if e.closed {
		e.mu.Unlock()
		x.release()
		return
	}
	e.running[r.ID] = x
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.running, r.ID)
		e.mu.Unlock()
	}()

	var events []store.Event
	if !fresh {
		var err error
		if events, err = e.store.ListEvents(ctx, r.ID, 0); err != nil {
			e.log.Warn("weir: load run", "run", r.ID, "err", err)
			x.release()
			return
		}
	}
	x.load(events)
	ctx = x.startRunSpan(ctx, len(events))
	x.ctx = ctx
	x.outcome = "released"
	defer func() { x.endRunSpan(x.outcome, x.outcomeErr) }()

	hbDone := make(chan struct{})
	defer close(hbDone)
	go x.heartbeat(hbDone)

	e.mu.Lock()
	wf := e.workflows[r.Workflow]
	e.mu.Unlock()
	if r.CancelRequested {
		x.outcome = "cancelled"
		x.takenByReplay(ctx, events, wf)
		x.finishCancelled()
		return
	}
	if wf == nil {
		x.outcome, x.outcomeErr = "failed", ErrUnknownWorkflow
		x.finish(store.RunFailed, nil, fmt.Errorf("%w: %q is not registered on worker %s", ErrUnknownWorkflow, r.Workflow, e.cfg.WorkerID))
		return
	}
	x.par.slots = newSlots(e.cfg.StepConcurrency)
	if wf.timeout > 0 {
		x.deadline = r.CreatedAt.Add(wf.timeout)
		if !time.Now().Before(x.deadline) {
			x.outcome, x.outcomeErr = "failed", ErrRunTimeout
			x.takenByReplay(ctx, events, wf)
			x.finishAborted(store.RunFailed, ErrRunTimeout)
			return
		}
		dctx, stop := context.WithDeadlineCause(ctx, x.deadline, ErrRunTimeout)
		defer stop()
		x.ctx, ctx = dctx, dctx
	}
	// A claim or a lease at creation made the run running; its start
	// event rides along with its first record.
	x.rec.start, x.rec.startAt = x.events == 0, time.Now()
	defer x.dropDeferred()

	x.conclude(x.runWorkflow(ctx, wf, r.Input))
}

// workflowExit is how a run's workflow function left: it returned (out,
// err), panicked, or was left behind (interrupted inside an inline step's
// function that does not return).
type workflowExit struct {
	out      []byte
	err      error
	returned bool
	panicked any
	stack    []byte
}

// runWorkflow runs the workflow function on a goroutine of its own until
// it returns or the run is interrupted, then waits for the steps it
// started.
func (x *execution) runWorkflow(ctx context.Context, wf *registered, input []byte) *workflowExit {
	w := &workflowExit{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if x.exit == exitNone && !w.returned {
				if p := recover(); p != nil {
					w.panicked, w.stack = p, debug.Stack()
				}
			}
		}()
		w.out, w.err = wf.fn(&wfContext{Context: ctx, x: x}, input)
		w.returned = true
	}()
	select {
	case <-done:
	case <-x.ctx.Done():
		// Interrupted (cancelled, past its deadline, stopping, lost): the
		// workflow goroutine leaves at its next operation, unless it is
		// inside an inline step's function that does not return: then the
		// run goes on to its end without it (detach).
		if !x.detach() {
			<-done
		}
	}
	if !w.returned {
		// The workflow goroutine left: its steps' goroutines stop too, as
		// at a crash. A function that returned waits for the steps it
		// started (StepAsync).
		x.cancel(errUnwinding)
	}
	x.par.wg.Wait()
	x.ended.Store(true)
	return w
}

// conclude ends the execution as the run's exit and its workflow's say:
// parked, lost, released for another worker, or finished with its outcome.
func (x *execution) conclude(w *workflowExit) {
	e, r := x.e, x.run
	switch {
	case x.exit == exitPark:
		// The park was recorded with the sleep or retry.
		x.outcome = "parked"
	case x.exit == exitLost:
		x.outcome = "lost"
		e.log.Info("weir: run lost to another worker", "run", r.ID, "err", x.exitErr)
	case x.exit == exitStopping:
		x.release()
	case x.exit == exitStoreError:
		e.log.Warn("weir: store error; run left for resume", "run", r.ID, "err", x.exitErr)
		x.release()
	case x.exit == exitCancelled:
		x.outcome = "cancelled"
		x.finishCancelled()
	case x.exit == exitRunTimeout:
		x.outcome, x.outcomeErr = "failed", ErrRunTimeout
		x.finishAborted(store.RunFailed, ErrRunTimeout)
	case x.exit == exitNonDeterminism:
		x.outcome, x.outcomeErr = "failed", x.exitErr
		x.finish(store.RunFailed, nil, x.exitErr)
	case w.panicked != nil:
		x.outcome, x.outcomeErr = "failed", fmt.Errorf("workflow panicked: %v", w.panicked)
		x.finish(store.RunFailed, nil, fmt.Errorf("workflow panicked: %v\n%s", w.panicked, w.stack))
	case w.returned:
		x.concludeReturned(w.out, w.err)
	}
}

// concludeReturned finishes a run whose workflow function returned out and
// runErr: as the run was interrupted meanwhile if it was, failed if its
// function returned before the operations its log records
// (non-determinism), else with what it returned.
func (x *execution) concludeReturned(out []byte, runErr error) {
	if reason, ok := x.interrupted(); ok && reason == exitRunTimeout {
		x.outcome, x.outcomeErr = "failed", ErrRunTimeout
		x.finishAborted(store.RunFailed, ErrRunTimeout)
		return
	} else if ok && reason != exitCancelled {
		x.release()
		return
	} else if ok || errors.Is(runErr, ErrCancelled) {
		x.outcome = "cancelled"
		x.finishCancelled()
		return
	}
	if runErr == nil && x.opSeq < x.maxOp {
		st := x.ops[x.opSeq+1]
		runErr = &NonDeterminismError{Op: x.opSeq + 1, Recorded: st.describe(), Replayed: "return from the workflow"}
	}
	if runErr != nil {
		x.outcome, x.outcomeErr = "failed", runErr
		x.finish(store.RunFailed, nil, runErr)
	} else {
		x.outcome = "completed"
		x.finish(store.RunCompleted, out, nil)
	}
}

// release gives the lease up so any worker resumes the run at once.
func (x *execution) release() {
	if err := x.recordErr(&store.AdvanceParams{Release: true}); err != nil && !errors.Is(err, store.ErrLeaseLost) {
		x.e.log.Warn("weir: release run", "run", x.run.ID, "err", err)
	}
}

// finish ends the run with status: a terminal event, the status, and every
// stream of the run closed, in one transaction.
func (x *execution) finish(status store.RunStatus, out []byte, runErr error) {
	p := &store.AdvanceParams{Status: status, Output: out, CloseStreams: true}
	switch status {
	case store.RunCompleted:
		p.Events = []store.Event{{Type: store.EventRunCompleted, Data: out}}
	case store.RunFailed:
		p.Error = runErr.Error()
		ev := store.Event{Type: store.EventRunFailed, Error: p.Error}
		// The step that failed it, for Handle.Result's *StepError.
		var se *StepError
		if errors.As(runErr, &se) {
			ev.Data, _ = json.Marshal(stepErrorJSON{Name: se.Name, Attempt: se.Attempt, Message: se.Message})
		}
		p.Events = []store.Event{ev}
	case store.RunCancelled:
		p.Error = ErrCancelled.Error()
		p.Events = []store.Event{{Type: store.EventRunCancelled, Error: p.Error}}
	}
	if taken := x.messagesTaken(); taken != nil {
		// Before the end: how many of each topic's messages the run took;
		// the others its log holds it left.
		p.Events = append([]store.Event{{Type: store.EventMessagesTaken, Data: taken}}, p.Events...)
	}
	if x.run.Parent != "" {
		// A child's end reaches its parent in the same transaction, so no
		// death of this worker can come between them.
		p.Deliver = childEndDelivery(x.run, childEnd{Status: status, Output: out, Error: p.Error})
	}
	if err := x.recordErr(p); err != nil {
		x.e.log.Warn("weir: finish run", "run", x.run.ID, "status", status, "err", err)
		return
	}
	if x.run.Parent != "" {
		x.e.hookDelivered(x.run.Parent) // the parent, if it runs here, reads its log
		x.e.nudge()                     // and, if parked, is claimable now
	}
	end := *x.run
	end.Status, end.Output, end.Error = status, out, p.Error
	end.LeaseOwner, end.LeaseExpires = "", time.Time{}
	if x.freeSlot != nil {
		x.freeSlot() // before the waiters hear: one may start a run at once
	}
	x.e.notifyDone(x.run.ID, &end)
}

// takenByReplay learns, for a run ended without running its workflow (a
// cancel found at its claim), what its workflow took of its inbox before:
// takes are in no record, only in what the workflow did after them, so the
// log is replayed (Replay) to count them. Without it the run's end said it
// took none of the messages an earlier execution took and acted on, and
// they were counted as left (torture, seed 626822).
func (x *execution) takenByReplay(ctx context.Context, events []store.Event, wf *registered) {
	if len(x.topics) == 0 || wf == nil || x.maxOp == 0 {
		return // no inbox, or nothing the workflow did after a take
	}
	rx, _, panicked := x.e.replayLog(ctx, x.run, events, wf)
	if panicked != nil || rx.exit == exitNonDeterminism {
		x.e.log.Warn("weir: replaying a cancelled run to count the messages it took failed; its end counts none", "run", x.run.ID)
		return
	}
	x.topics = rx.topics
}

// finishCancelled aborts the output of step attempts left open, then ends
// the run as cancelled.
func (x *execution) finishCancelled() { x.finishAborted(store.RunCancelled, ErrCancelled) }

// finishAborted aborts the output of step attempts left open, then ends the
// run with status (cancelled, or failed at its deadline) and cause. A
// cancelled run's children that have not ended are cancelled too.
func (x *execution) finishAborted(status store.RunStatus, cause error) {
	if status == store.RunCancelled {
		x.cancelChildren()
	}
	for op, st := range x.ops {
		if st.kind == opStep && st.open {
			p := &store.AdvanceParams{
				Events: []store.Event{{Type: store.EventStepFailed, Op: op, Name: st.name, Attempt: st.lastAttempt, Error: cause.Error(), Final: true}},
				Finish: &store.Finish{Writer: stepWriter(op), Attempt: st.lastAttempt},
			}
			if err := x.recordErr(p); err != nil {
				x.e.log.Warn("weir: abort step of ended run", "run", x.run.ID, "err", err)
				return
			}
			st.open, st.failedFinal = false, true
		}
	}
	x.finish(status, nil, cause)
}

// heartbeat renews the lease until done; it cancels the run's context when
// the lease is lost or a cancel is requested.
func (x *execution) heartbeat(done chan struct{}) {
	if k := x.e.leases; k != nil {
		k.hold(x)
		<-done
		k.drop(x)
		return
	}
	ttl := x.e.cfg.LeaseTTL
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), ttl/3)
		cancelled, err := x.e.store.RenewLease(ctx, &store.RenewLeaseParams{RunID: x.run.ID, LeaseEpoch: x.epoch, LeaseTTL: ttl})
		cancel()
		switch {
		case err == nil:
			last = time.Now()
			if cancelled {
				x.cancel(ErrCancelled)
			}
		case errors.Is(err, store.ErrLeaseLost):
			x.cancel(errLeaseLost)
			return
		default:
			x.e.log.Warn("weir: renew lease", "run", x.run.ID, "err", err)
			if time.Since(last) > ttl {
				// Someone else may own the run by now.
				x.cancel(errLeaseLost)
				return
			}
		}
	}
}

// nextOp returns the position of the next durable operation and what the log
// says of it (nil if nothing).
func (x *execution) nextOp() (int64, *opState) {
	x.opSeq++
	x.markOp(x.opSeq)
	return x.opSeq, x.ops[x.opSeq]
}

// waitUntil waits in process until t, or parks the run if t is further than
// ParkAfter. It returns only when t has passed.
func (x *execution) waitUntil(t time.Time) { x.waitUntilOr(t, nil, true) }

// waitUntilOr is waitUntil that also returns when wake is closed (nil:
// never), and parks the run only if park is set.
func (x *execution) waitUntilOr(t time.Time, wake <-chan struct{}, park bool) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	if park && d > x.e.cfg.ParkAfter {
		// Steps running on their goroutines (Go) keep the run here; ones
		// waiting out a backoff resume it when they are due.
		_, running, wakes := x.par.snapshot()
		if !running {
			if !wakes.IsZero() && wakes.Before(t) {
				t = wakes
			}
			x.park(t, true, &store.Awaits{}) // a message waits for its Recv
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-wake:
	case <-x.ctx.Done():
		r, _ := x.interrupted()
		x.leave(r, context.Cause(x.ctx))
	}
}

// Replay re-executes a recorded run's workflow function against its event
// log, running no step and writing nothing, up to the end of the log (a
// running run) or the function's return (a finished one). It returns a
// *NonDeterminismError if the registered code no longer replays the log: use
// it in tests to check that a new version of a workflow still resumes the
// runs in flight. Returns ErrNotFound and ErrUnknownWorkflow.
func (e *Engine) Replay(ctx context.Context, runID string) error {
	r, err := e.store.GetRun(ctx, runID)
	if err != nil {
		return err
	}
	events, err := e.store.ListEvents(ctx, runID, 0)
	if err != nil {
		return err
	}
	e.mu.Lock()
	wf := e.workflows[r.Workflow]
	e.mu.Unlock()
	if wf == nil {
		return fmt.Errorf("%w: %q", ErrUnknownWorkflow, r.Workflow)
	}
	x, returned, panicked := e.replayLog(ctx, r, events, wf)
	switch {
	case x.exit == exitNonDeterminism:
		return x.exitErr
	case panicked != nil:
		return fmt.Errorf("replay of run %s panicked: %v", runID, panicked)
	case returned && x.opSeq < x.maxOp:
		return &NonDeterminismError{Op: x.opSeq + 1, Recorded: x.ops[x.opSeq+1].describe(), Replayed: "return from the workflow"}
	}
	return nil
}

// replayLog runs wf over run r's log events without running or writing
// anything (Replay), until it returns or reaches the end of the log, and
// returns the replay's execution: what the workflow took of its inbox,
// say.
func (e *Engine) replayLog(ctx context.Context, r *store.Run, events []store.Event, wf *registered) (x *execution, returned bool, panicked any) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	x = &execution{e: e, run: r, epoch: r.LeaseEpoch, ctx: ctx, cancel: cancel, readOnly: true}
	x.par.slots = newSlots(1)
	x.load(events)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if x.exit == exitNone && !returned {
				panicked = recover()
			}
		}()
		_, _ = wf.fn(&wfContext{Context: ctx, x: x}, r.Input)
		returned = true
	}()
	<-done
	return x, returned, panicked
}

// MigrateRuns moves the runs in flight (pending or running) of application
// version from to version to, or only those of ids if any are given, and
// returns the runs it moved: a worker of to then claims them. Move runs
// only to a version whose code replays their logs (Config.Version,
// Patched). The same as `weir runs migrate` and POST /v1/runs/migrate.
func (e *Engine) MigrateRuns(ctx context.Context, from, to string, ids ...string) ([]string, error) {
	return e.store.MigrateRuns(ctx, &store.MigrateRunsParams{From: from, To: to, RunIDs: ids})
}
