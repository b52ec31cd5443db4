package weir

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/weirhq/weir/store"
)

// A run's records, and the two that wait.
//
// Every write of an execution goes through recordErr. Two kinds of record
// need not be durable the moment they are made, and wait to ride along
// with the run's next record, so that a short run costs one or two
// transactions instead of one per step:
//
//   - the run's start (run_started): a run leased to its starter, or
//     claimed, is already running; the event is written with the first
//     record the execution makes, whatever it is;
//   - a completed step's outcome (an inline Step's step_completed, with the
//     commit of its stream output): Step returns its result at once, and
//     the outcome is written with the next record of the run (the next
//     step's start or outcome, a sleep, a hook, the run's end) or after
//     Config.StepOutcomeDelay, whichever comes first.
//
// What a crash costs is what it already cost: a step whose outcome was not
// written runs again on resume (steps are at-least-once; its stream output,
// never committed, is adopted or aborted by the retry as any retry's is),
// and readers of the committed view see its output up to StepOutcomeDelay
// later. Workflow code between steps is deterministic and has no effects
// of its own, so nothing outside the run can have acted on an unwritten
// outcome but the run itself, which a replay repeats. Temporal records local
// activities' results the same way, with the workflow task that follows.
type recorder struct {
	// mu is held while a record that carries the waiting ones is written,
	// so that nothing the run records later can commit before them.
	mu      sync.Mutex
	start   bool                 // run_started is not written yet
	startAt time.Time            // when the execution began: run_started's time
	pending *store.AdvanceParams // a step outcome not written yet
	// carry is the first batch of a stream that pending's step wrote and
	// never sent (Writer.carryFirst): it goes in the same transaction,
	// before pending.
	carry *carriedBatch
	timer *time.Timer // writes pending when StepOutcomeDelay passes
	err   error       // the failure of a write the timer made, for the next record
}

// recordErr writes p with whatever waits to be written (recorder), fenced by
// this execution's lease.
func (x *execution) recordErr(p *store.AdvanceParams) error { return x.recordVia(p, nil) }

// pendingVia returns how the waiting outcome is written: with its carried
// batch, if it has one (which it gives up). r.mu held.
func (x *execution) pendingVia() advanceVia {
	c := x.rec.carry
	x.rec.carry = nil
	if c == nil {
		return nil
	}
	return x.carryVia(c)
}

// advanceVia writes a record another way than store.Advance: with the
// first chunks of a step's stream (Writer.openAppend).
type advanceVia func(ctx context.Context, p *store.AdvanceParams) error

// recordVia is recordErr, writing p (with what waits) through via if not
// nil; the records that cannot ride with p go first, through Advance.
func (x *execution) recordVia(p *store.AdvanceParams, via advanceVia) error {
	r := &x.rec
	r.mu.Lock()
	if err := r.err; err != nil {
		r.err = nil
		r.mu.Unlock()
		return err
	}
	if r.pending == nil && !r.start {
		r.mu.Unlock()
		return x.write(p, via)
	}
	defer r.mu.Unlock()
	if pend := r.pending; pend != nil {
		r.pending = nil
		r.stopTimer()
		pv := x.pendingVia()
		if pv == nil || via == nil {
			if m, ok := mergeRecords(pend, p); ok {
				if via == nil {
					via = pv
				}
				return x.writeLocked(m, via)
			}
		}
		if err := x.writeLocked(pend, pv); err != nil {
			return err
		}
	}
	return x.writeLocked(p, via)
}

// deferRecord makes p, a completed step's outcome, wait for the run's next
// record (recorder); with StepOutcomeDelay NoWait it is written now.
func (x *execution) deferRecord(p *store.AdvanceParams, carry *carriedBatch) error {
	delay := x.e.cfg.StepOutcomeDelay
	if delay == NoWait {
		return x.recordVia(p, x.carryVia(carry))
	}
	now := time.Now()
	for i := range p.Events {
		if p.Events[i].At.IsZero() {
			p.Events[i].At = now // when it happened, not when it is written
		}
	}
	r := &x.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.err; err != nil {
		r.err = nil
		return err
	}
	if pend := r.pending; pend != nil {
		if r.carry == nil || carry == nil {
			if m, ok := mergeRecords(pend, p); ok {
				r.pending = m
				r.carry = cmp.Or(r.carry, carry)
				return nil
			}
		}
		r.pending = nil
		r.stopTimer()
		if err := x.writeLocked(pend, x.pendingVia()); err != nil {
			return err
		}
	}
	r.pending, r.carry = p, carry
	if r.timer == nil {
		r.timer = time.AfterFunc(delay, x.flushDeferred)
	}
	return nil
}

// flushDeferred writes the waiting outcome: StepOutcomeDelay has passed.
// A failure is the next record's.
func (x *execution) flushDeferred() {
	r := &x.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = nil
	pend := r.pending
	if pend == nil {
		return
	}
	r.pending = nil
	if err := x.writeLocked(pend, x.pendingVia()); err != nil {
		r.err = err
	}
}

// settle writes what waits (an outcome, the run's start) before a write of
// the run that is not a record (a hook's creation or disposal, a child's
// creation, a workflow-code stream write): the log then shows the outcome
// before anything the run did after it. From workflow code only; a failure
// leaves as a record's does.
func (x *execution) settle() {
	r := &x.rec
	r.mu.Lock()
	pend, err := r.pending, r.err
	r.pending, r.err = nil, nil
	r.stopTimer()
	if pend == nil && r.start {
		pend = &store.AdvanceParams{} // the run's start, alone
	}
	via := x.pendingVia()
	if pend != nil && err == nil {
		err = x.writeLocked(pend, via)
	}
	r.mu.Unlock()
	if err != nil {
		x.storeFailed(err)
	}
}

// dropDeferred forgets what waits: the execution has ended without a
// record to carry it (its lease lost), and a resume repeats it.
func (x *execution) dropDeferred() {
	r := &x.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopTimer()
	r.pending, r.err, r.carry = nil, nil, nil
}

func (r *recorder) stopTimer() {
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
}

// writeLocked writes p, preceded by the run's start if it is not written
// yet; the caller holds rec.mu.
func (x *execution) writeLocked(p *store.AdvanceParams, via advanceVia) error {
	if !x.rec.start {
		return x.write(p, via)
	}
	q := *p
	q.Events = append([]store.Event{{Type: store.EventRunStarted, At: x.rec.startAt}}, p.Events...)
	if err := x.write(&q, via); err != nil {
		return err
	}
	x.rec.start = false
	return nil
}

// write is one store transaction: an Advance, or via.
func (x *execution) write(p *store.AdvanceParams, via advanceVia) error {
	p.RunID, p.LeaseEpoch = x.run.ID, x.epoch
	// The run's own context may be cancelled (a cancel, a stop) while the
	// outcome still has to be written.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), 30*time.Second)
	defer cancel()
	restore := x.takeMarks(p)
	var err error
	if via != nil {
		err = via(ctx, p)
	} else {
		err = x.e.store.Advance(ctx, p)
	}
	if err != nil {
		restore()
	}
	return err
}

// mergeRecords returns one record that does what a then b do, if there is
// one: a is a step outcome (events, a fence, a finish) the recorder owns and
// drops; a record has at most one fence and one finish, and decides its
// finish before it raises its fence.
func mergeRecords(a, b *store.AdvanceParams) (*store.AdvanceParams, bool) {
	if a.Fence != nil && b.Fence != nil || a.Finish != nil && b.Finish != nil {
		return nil, false
	}
	if a.Fence != nil && b.Finish != nil && a.Fence.Writer == b.Finish.Writer {
		return nil, false // apart, a's fence would come before b's finish
	}
	if a.Status != "" || a.Release || a.CloseStreams {
		return nil, false
	}
	m := *b
	// a is the recorder's own (a waiting outcome, dropped once merged): its
	// events' array may grow in place, so a run of short steps appends each
	// outcome's events once rather than copying the run's so far each time.
	m.Events = append(a.Events, b.Events...)
	if a.Fence != nil {
		m.Fence = a.Fence
	}
	if a.Finish != nil {
		m.Finish = a.Finish
	}
	return &m, true
}
