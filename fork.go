package weir

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/weirhq/weir/names"
	"maps"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
)

// ForkOptions say where a fork of a run begins and what it starts with.
type ForkOptions struct {
	// ID is the fork's id; a fork with this id that exists is returned if
	// it forks the same run from the same operation (ErrRunConflict
	// otherwise). Defaults to a random id.
	ID string
	// Op is the first operation the fork runs again, by its position in
	// the run's log (1 is the first; see Engine.Replay and `weir runs
	// show`). The operations before it are kept: the fork replays their
	// recorded outcomes and runs the rest with the code of its version.
	Op int64
	// Step, with Op zero, names the fork point: the first operation that
	// is a step of that name.
	Step string
	// Input, if not nil, is the fork's input (JSON); nil keeps the
	// source's. The kept operations replay what they recorded whatever
	// it is; what the workflow's code writes to a stream before the fork
	// point must be the same with it (the fork keeps those chunks), or the
	// fork fails as non-deterministic.
	Input json.RawMessage
	// Version is the application version the fork starts on: the workers
	// of that version claim it. "" keeps the source's.
	Version string
}

// Fork starts a new run from run runID's operation o.Op (or its step
// o.Step): its log begins with the run's operations before that point,
// which it replays without running them, and its streams begin with the
// committed output of those operations and the chunks the workflow code
// wrote before that point, in the run's order; nothing of the operations
// it runs again. Readers of the source run see nothing change.
//
// A fork point inside a parallel group (an operation started while one
// before it still ran), past the run's end (more than one past its last
// operation) or at a step the run never reached is ErrInvalid; a fork that
// keeps a hook the source run still holds live is ErrHookConflict (cancel
// the source first). Returns ErrNotFound for an unknown run.
func (e *Engine) Fork(ctx context.Context, runID string, o ForkOptions) (*Run, error) {
	id := o.ID
	if id == "" {
		id = newRunID()
	} else if err := names.RunID(id); err != nil {
		return nil, fmt.Errorf("fork run %s: %w: %w", runID, store.ErrInvalid, err)
	}
	if o.Input != nil && !json.Valid(o.Input) {
		return nil, fmt.Errorf("fork run %s: %w: the input is not JSON", runID, store.ErrInvalid)
	}
	run, _, err := e.store.ForkRun(ctx, &store.ForkRunParams{
		Source: runID, ID: id, Op: o.Op, Step: o.Step, Input: o.Input, Version: o.Version,
	})
	if err != nil {
		return nil, err
	}
	e.nudge()
	return run, nil
}

// Resume makes a failed or cancelled run run again, with its id and its
// history: the steps whose final failures ended it (the failed step, or
// the steps a cancel aborted) run again under their retry policies, from
// their next attempt, with a fresh count of attempts; the rest replays.
// Its streams reopen: a reader that stopped at their close saw the run as
// it ended; one that reads on from there sees a reopen record and the new
// attempts' output (docs/semantics.md). A run that is running, pending or
// completed is ErrInvalid (store.ErrNotResumable). Returns ErrNotFound.
//
// A run that failed at its deadline (WithRunTimeout) fails again at once:
// its deadline counts from its creation.
func (e *Engine) Resume(ctx context.Context, runID string) (*Run, error) {
	run, err := e.store.ResumeRun(ctx, &store.ResumeRunParams{ID: runID})
	if err != nil {
		return nil, err
	}
	e.nudge()
	return run, nil
}

// RetryFrom is Fork's shorthand: a new run from run runID's step named
// step with the run's input and version, or, with step "", from the step
// whose failure ended the run.
func (e *Engine) RetryFrom(ctx context.Context, runID, step string) (*Run, error) {
	o := ForkOptions{Step: step}
	if step == "" {
		op, err := e.failedOp(ctx, runID)
		if err != nil {
			return nil, err
		}
		o.Op = op
	}
	return e.Fork(ctx, runID, o)
}

// failedOp is the first step whose final failure ended run id. It
// decides from the run's head and plans from its log's outline: a retry
// of a run that did not fail is refused having read none of its data, and
// a plan reads no step's output or message's payload (red team, round
// nineteen audit: a retry of a running run with a 15 MiB input and a
// 16 MiB log read both, whole, to answer 400).
func (e *Engine) failedOp(ctx context.Context, id string) (int64, error) {
	r, err := e.runHead(ctx, id)
	if err != nil {
		return 0, err
	}
	if r.Status != store.RunFailed && r.Status != store.RunCancelled {
		return 0, fmt.Errorf("%w: run %s is %s: name the step to retry from", store.ErrInvalid, id, r.Status)
	}
	// The one type whose data the outline keeps is the run's failure,
	// which has none: PlanResume reads the events' types, ops and Final.
	evs, err := store.Outline(ctx, e.store, id, store.EventRunFailed)
	if err != nil {
		return 0, err
	}
	ops, err := apply.PlanResume(r, evs)
	if err != nil {
		return 0, err
	}
	if len(ops) == 0 {
		return 0, fmt.Errorf("%w: no step's failure ended run %s: name the step to retry from", store.ErrInvalid, id)
	}
	return ops[0], nil
}

// CheckFork reports what Fork(ctx, runID, o) would refuse (ErrNotFound;
// ErrInvalid: a World run, no step of that name, a fork point past the
// log or inside a parallel group, a child not ended), deciding from the
// run's head and its log's outline, read outside any transaction and
// without a payload; nil if the fork would go on to be made. A server asks
// it before it holds its replies' budget for the whole log a fork reads
// (red team, round twenty: refused forks of a run of 10,000 messages held
// the budget, and most other clients' reads were 503 while they ran).
func (e *Engine) CheckFork(ctx context.Context, runID string, o ForkOptions) error {
	src, err := e.runHead(ctx, runID)
	if err != nil {
		return err
	}
	// The one type whose data a plan reads is the stream marks'.
	evs, err := store.Outline(ctx, e.store, runID, store.EventStreamMark)
	if err != nil {
		return err
	}
	_, err = apply.PlanFork(src, evs, &store.ForkRunParams{Source: runID, ID: o.ID, Op: o.Op, Step: o.Step, Input: o.Input, Version: o.Version})
	return err
}

// CheckRetry is CheckFork for RetryFrom(ctx, runID, step).
func (e *Engine) CheckRetry(ctx context.Context, runID, step string) error {
	o := ForkOptions{Step: step}
	if step == "" {
		op, err := e.failedOp(ctx, runID)
		if err != nil {
			return err
		}
		o.Op = op
	}
	return e.CheckFork(ctx, runID, o)
}

// CheckResume reports what Resume(ctx, runID) would refuse from the run's
// head alone (ErrNotFound; ErrNotResumable: a run running or completed, a
// World run); nil if it may resume, or is pending (a resume retried,
// which the store tells from its log).
func (e *Engine) CheckResume(ctx context.Context, runID string) error {
	r, err := e.runHead(ctx, runID)
	if err != nil || r.Status == store.RunPending {
		return err
	}
	_, err = apply.PlanResume(r, nil)
	return err
}

// streamMark is the workflow writer's count on each stream when the
// workflow reached an operation (store.EventStreamMark).
type streamMark struct {
	op     int64
	counts map[string]int64
}

// markOp notes, as the workflow reaches operation op for the first time,
// how far its code has written on each stream, if it wrote since the
// last mark: the next record of the run carries it, so that a fork from
// op can cut the workflow's chunks there.
func (x *execution) markOp(op int64) {
	if !x.wfDirty || op <= x.maxOp || x.readOnly {
		return
	}
	x.wfDirty = false
	x.marksMu.Lock()
	x.marks = append(x.marks, streamMark{op: op, counts: maps.Clone(x.wfSeq)})
	x.marksMu.Unlock()
}

// takeMarks returns the marks waiting as events, leading p's.
func (x *execution) takeMarks(p *store.AdvanceParams) (restore func()) {
	x.marksMu.Lock()
	marks := x.marks
	x.marks = nil
	x.marksMu.Unlock()
	if len(marks) == 0 {
		return func() {}
	}
	evs := make([]store.Event, 0, len(marks)+len(p.Events))
	for _, m := range marks {
		data, _ := json.Marshal(m.counts)
		evs = append(evs, store.Event{Type: store.EventStreamMark, Op: m.op, Data: data})
	}
	orig := p.Events
	p.Events = append(evs, p.Events...)
	return func() {
		// Not written: they ride with the next record.
		p.Events = orig
		x.marksMu.Lock()
		x.marks = append(marks, x.marks...)
		x.marksMu.Unlock()
	}
}
