package weir

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/weirhq/weir/inbox"
	"github.com/weirhq/weir/store"
)

// Parallel operations. Go starts a step on a goroutine of its own and
// NewTimer a durable timer; both return a Future at once. Each takes its
// position (its op) when it is called, on the workflow goroutine, so replay
// numbers them the same whatever finished first. What finished first is
// itself recorded where code depends on it: Select records its choice.
//
// A run parks (holding no goroutine, no lease) only when nothing of it runs
// in process: every pending operation is a timer or a step waiting out a
// retry backoff, and the earliest of them is more than ParkAfter away.

// Awaitable is an operation Select and Await wait on: a *Future.
type Awaitable interface {
	fut() *future
}

// future is what every Future holds: its op, and how it resolved.
type future struct {
	op   int64
	kind opKind
	done chan struct{} // closed when resolved
	// Set before done is closed.
	err     error
	exit    exitReason // its goroutine stopped for a reason the run must leave for
	exitErr error
	order   int64 // when it resolved, for Select: 0 for operations resolved in the log

	st     *opState  // timers: the recorded state
	wakeAt time.Time // timers: when it fires

	hook *opState   // hooks and child runs: the operation's state (a hook's token; a child's end)
	box  *inbox.Box // hooks and messages: the box a take takes from
	// take decodes what a hook's Future took (a payload, its index), or a
	// child's end (index 0); nil: the Future failed before it began (err
	// is set).
	take  func(payload []byte, index int)
	child string // child runs: the child's id (its end comes to hook)
}

func (f *future) resolved() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// Future is the result of a step started with Go, or of a timer
// (NewTimer). Use it from the workflow goroutine only.
type Future[T any] struct {
	f   future
	val T
}

func (f *Future[T]) fut() *future { return &f.f }

// Get waits for the operation and returns its result: a step's output or
// *StepError, a timer's fire time.
func (f *Future[T]) Get(ctx Context) (T, error) {
	x := ctx.execution()
	x.await([]*future{&f.f}, false)
	x.took(&f.f)
	return f.val, f.f.err
}

// took is the workflow taking f's result, which await found ready: a
// timer's firing is recorded, a hook's payload taken (once: a Future got
// again keeps what it took).
func (x *execution) took(f *future) {
	switch f.kind {
	case opSleep:
		x.fireTimer(f)
	case opHook, opMessage:
		if f.resolved() {
			return
		}
		payload, i, s := f.box.Take()
		switch s {
		case inbox.Taken:
			f.take(payload, i)
		case inbox.Closed:
			// A hook by its reference, not its token: the error may become
			// the run's, which its readers see (a token is a capability).
			what := HookRef(f.hook.token)
			if f.kind == opMessage {
				what = strconv.Quote(f.hook.token) // a topic
			}
			f.err = fmt.Errorf("%w: %s", ErrHookDisposed, what)
		default:
			panic("weir: a Future taken with nothing to take") // await said it was ready
		}
		x.resolve(f)
	case opChild:
		if f.take != nil && f.err == nil && f.hook.end != nil {
			f.take(f.hook.end, 0)
			f.take = nil // decoded once
		}
	}
}

// resolve marks f resolved now (its order among the run's resolutions).
func (x *execution) resolve(f *future) {
	x.par.mu.Lock()
	x.par.order++
	f.order = x.par.order
	x.par.mu.Unlock()
	close(f.done)
}

// parallel is an execution's step goroutines.
type parallel struct {
	mu      sync.Mutex
	changed chan struct{} // closed, and replaced, at every change below
	running int           // goroutines running or about to run an attempt
	waits   map[*future]time.Time
	order   int64
	wg      sync.WaitGroup
	slots   *slots // Config.StepConcurrency
	// limiters counts the steps that wait for each limiter's window: a
	// park says so on the run's row (store.AdvanceParams.Limiters).
	limiters map[string]int
	// lined are the steps waiting in a limiter's line for which the
	// engine had no seat (stepEnv.standLined): if nothing else runs, the
	// run parks lined for them.
	lined map[*future]lineWant
}

// linedPark is the park, lined, of a run whose running steps all wait in a
// limiter's line with no seat, if any wait so: the limiters they and the
// steps waiting for a window wait for, and the best of their priorities.
func (p *parallel) linedPark() (*store.AdvanceParams, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lined) == 0 {
		return nil, false
	}
	park := &store.AdvanceParams{Lined: true}
	first := true
	for _, w := range p.lined {
		if !slices.Contains(park.Limiters, w.limiter) {
			park.Limiters = append(park.Limiters, w.limiter)
		}
		if first || w.prio > park.LinePriority {
			park.LinePriority, first = w.prio, false
		}
	}
	for l := range p.limiters {
		if !slices.Contains(park.Limiters, l) {
			park.Limiters = append(park.Limiters, l)
		}
	}
	slices.Sort(park.Limiters)
	return park, true
}

// waitFor counts a step waiting for limiter's window until the returned
// function is called.
func (p *parallel) waitFor(limiter string) func() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.limiters == nil {
		p.limiters = map[string]int{}
	}
	p.limiters[limiter]++
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.limiters[limiter]--; p.limiters[limiter] <= 0 {
			delete(p.limiters, limiter)
		}
	}
}

// waitedFor is the limiters the run's steps wait for, sorted.
func (p *parallel) waitedFor() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.limiters) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(p.limiters))
}

// change wakes whoever waits on the state. Call with mu held.
func (p *parallel) change() {
	if p.changed != nil {
		close(p.changed)
	}
	p.changed = make(chan struct{})
}

// snapshot returns the channel the next change closes, whether a goroutine
// runs, and the earliest time a waiting goroutine resumes (zero: none).
func (p *parallel) snapshot() (ch <-chan struct{}, running bool, earliest time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	for _, t := range p.waits {
		if earliest.IsZero() || t.Before(earliest) {
			earliest = t
		}
	}
	return p.changed, p.running > 0, earliest
}

// StepAsync starts the step name as the run's next durable operation, on a
// goroutine of its own, and returns at once. The step runs as Step runs it
// (retries, timeouts, its own stream writer), up to Config.StepConcurrency
// steps of one run at once. Steps started together that write one stream
// interleave there, and each commits or aborts only its own chunks.
//
// A run ends only when the steps it started have finished, gotten or not.
func StepAsync[T any](ctx Context, name string, fn func(StepContext) (T, error), opts ...StepOption) *Future[T] {
	x := ctx.execution()
	f := &Future[T]{f: future{kind: opStep, done: make(chan struct{})}}
	cfg, err := x.stepConfig(opts)
	if err != nil {
		f.f.err = NonRetryable(err)
		close(f.f.done)
		return f
	}
	op, st := x.stepOp(name)
	f.f.op = op
	if st.completed || st.failedFinal {
		f.val, f.f.err = recorded[T](st)
		close(f.f.done)
		return f
	}
	if x.readOnly {
		return f // pending: waiting for it reaches the end of the log
	}
	p := &x.par
	p.mu.Lock()
	p.running++
	p.mu.Unlock()
	// The step asks for its slot now, on the workflow goroutine: steps ask
	// in op order, whichever goroutine runs first.
	slot := p.slots.acquire(op)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer func() {
			p.mu.Lock()
			p.running--
			p.order++
			f.f.order = p.order
			close(f.f.done)
			p.change()
			p.mu.Unlock()
		}()
		env := &stepEnv{x: x, acquire: x.acquireSlot, release: x.releaseSlot, slot: slot}
		env.leave = func(r exitReason, err error) {
			f.f.exit, f.f.exitErr = r, err
			switch r {
			case exitLost:
				x.cancel(errLeaseLost)
			case exitStoreError:
				x.cancel(fmt.Errorf("%w: %w", errStoreFailed, err))
			}
			runtime.Goexit()
		}
		env.standLined = func(w lineWant) func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.running--
			if p.lined == nil {
				p.lined = map[*future]lineWant{}
			}
			p.lined[&f.f] = w
			p.change()
			return sync.OnceFunc(func() {
				p.mu.Lock()
				defer p.mu.Unlock()
				delete(p.lined, &f.f)
				p.running++
				p.change()
			})
		}
		env.wait = func(t time.Time, wake <-chan struct{}, park bool) {
			// A wait that may park (a backoff, a limiter's window) is the
			// run's wake time for await; one that must not (a place in a
			// limiter's line, whose turn a parked run would not hear) counts
			// as running, so the run stays.
			if park {
				p.mu.Lock()
				p.running--
				if p.waits == nil {
					p.waits = map[*future]time.Time{}
				}
				p.waits[&f.f] = t
				p.change()
				p.mu.Unlock()
				defer func() {
					p.mu.Lock()
					delete(p.waits, &f.f)
					p.running++
					p.change()
					p.mu.Unlock()
				}()
			}
			timer := time.NewTimer(time.Until(t))
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-wake:
			case <-x.ctx.Done():
				r, _ := x.interrupted()
				env.leave(r, context.Cause(x.ctx))
			}
		}
		f.val, f.f.err = runStep(env, op, st, cfg, fn)
	}()
	return f
}

// acquireSlot takes one of the run's step slots for the step at op, or
// leaves if the run is interrupted meanwhile.
func (x *execution) acquireSlot(env *stepEnv, op int64) {
	ch := env.slot // asked for when the step began (Go)
	if ch != nil {
		env.slot = nil
	} else {
		ch = x.par.slots.acquire(op)
	}
	select {
	case <-ch:
	case <-x.ctx.Done():
		if !x.par.slots.forget(op, ch) {
			x.par.slots.release() // granted meanwhile: give it back
		}
		r, _ := x.interrupted()
		env.leave(r, context.Cause(x.ctx))
	}
}

func (x *execution) releaseSlot() { x.par.slots.release() }

// slots are a run's step slots (Config.StepConcurrency). A freed slot goes
// to the waiting step with the lowest op, not to whichever goroutine the
// scheduler wakes first: with more steps than slots, which of them run
// first is the same on every run (a Select between them is not decided by
// slot luck).
type slots struct {
	mu      sync.Mutex
	free    int
	waiting map[int64]chan struct{} // op -> closed when it gets a slot
}

func newSlots(n int) *slots { return &slots{free: n, waiting: map[int64]chan struct{}{}} }

// acquire returns a channel closed once the step at op has a slot.
func (s *slots) acquire(op int64) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	if s.free > 0 && len(s.waiting) == 0 {
		s.free--
		close(ch)
		return ch
	}
	s.waiting[op] = ch
	return ch
}

// forget withdraws op's wait; false: it was granted a slot meanwhile.
func (s *slots) forget(op int64, ch <-chan struct{}) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.waiting[op]; ok && w == ch {
		delete(s.waiting, op)
		return true
	}
	return false
}

// release frees a slot: the lowest op waiting gets it.
func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiting) == 0 {
		s.free++
		return
	}
	lowest := int64(-1)
	for op := range s.waiting {
		if lowest < 0 || op < lowest {
			lowest = op
		}
	}
	close(s.waiting[lowest])
	delete(s.waiting, lowest)
}

// NewTimer starts a durable timer as the run's next operation: its Future
// resolves d from now, and its fire time is recorded, so a restart neither
// loses nor restarts it. Race it against other operations with Select
// ("the approval, or 24 hours"). Sleep is NewTimer and Get.
func NewTimer(ctx Context, d time.Duration) *Future[time.Time] {
	x := ctx.execution()
	op, st := x.nextOp()
	if st != nil && st.kind != opSleep {
		x.leave(exitNonDeterminism, &NonDeterminismError{Op: op, Recorded: st.describe(), Replayed: "timer"})
	}
	f := &Future[time.Time]{f: future{op: op, kind: opSleep, done: make(chan struct{})}}
	if st == nil {
		if x.readOnly {
			x.leave(exitFrontier, nil)
		}
		st = &opState{kind: opSleep, wakeAt: time.Now().Add(max(d, 0))}
		x.ops[op] = st
		x.record(&store.AdvanceParams{Events: []store.Event{{Type: store.EventSleepScheduled, Op: op, WakeAt: st.wakeAt}}})
	}
	f.f.st, f.f.wakeAt, f.val = st, st.wakeAt, st.wakeAt
	if st.fired {
		close(f.f.done)
	}
	return f
}

// fireTimer records that a timer the workflow observed fired (once).
func (x *execution) fireTimer(f *future) {
	if f.st == nil || f.st.fired {
		return
	}
	x.record(&store.AdvanceParams{Events: []store.Event{{Type: store.EventSleepFired, Op: f.op}}})
	f.st.fired = true
}

// Select waits for the first of fs to finish and returns its index. Its
// choice is recorded as the run's next operation: replay returns the same
// index whatever finishes first then. Get the chosen Future for its result;
// the others go on (a step runs to its end, a timer can be selected again).
func Select(ctx Context, fs ...Awaitable) int {
	x := ctx.execution()
	if len(fs) == 0 {
		panic("weir: Select of nothing")
	}
	op, st := x.nextOp()
	if st != nil && st.kind != opSelect {
		x.leave(exitNonDeterminism, &NonDeterminismError{Op: op, Recorded: st.describe(), Replayed: "select"})
	}
	futs := make([]*future, len(fs))
	for i, a := range fs {
		futs[i] = a.fut()
	}
	if st != nil {
		if st.chosen >= len(fs) {
			x.leave(exitNonDeterminism, &NonDeterminismError{Op: op, Recorded: fmt.Sprintf("select of case %d", st.chosen),
				Replayed: fmt.Sprintf("select of %d cases", len(fs))})
		}
		f := futs[st.chosen]
		x.await([]*future{f}, false)
		x.took(f)
		return st.chosen
	}
	i := x.await(futs, true)
	if x.readOnly {
		x.leave(exitFrontier, nil)
	}
	evs := []store.Event{{Type: store.EventSelected, Op: op, Data: []byte(strconv.Itoa(i))}}
	f := futs[i]
	if f.kind == opSleep && !f.st.fired {
		evs = append(evs, store.Event{Type: store.EventSleepFired, Op: f.op})
		f.st.fired = true
	}
	x.ops[op] = &opState{kind: opSelect, chosen: i}
	x.record(&store.AdvanceParams{Events: evs})
	if f.kind == opHook || f.kind == opMessage {
		x.took(f) // chosen: it takes its payload now
	}
	return i
}

// Await waits until every one of fs has finished.
func Await(ctx Context, fs ...Awaitable) {
	x := ctx.execution()
	futs := make([]*future, len(fs))
	for i, a := range fs {
		futs[i] = a.fut()
	}
	x.await(futs, false)
}

// All waits for every one of fs and returns their results in order, and
// the first error among them (by position), if any.
func All[T any](ctx Context, fs ...*Future[T]) ([]T, error) {
	as := make([]Awaitable, len(fs))
	for i, f := range fs {
		as[i] = f
	}
	Await(ctx, as...)
	out := make([]T, len(fs))
	var first error
	for i, f := range fs {
		v, err := f.Get(ctx)
		out[i] = v
		if err != nil && first == nil {
			first = err
		}
	}
	return out, first
}

// await blocks the workflow goroutine until one of fs (any) or all of them
// are ready, and returns the index of the one chosen (any: the first to be
// ready; -1 otherwise). A step's or timer's Future is ready once resolved,
// a child's once its end came; a hook's Future, which resolves only when
// taken, is ready when its hook could serve it (package inbox): all of
// fs's untaken Futures of one hook at once, or any one of them. It parks
// the run if nothing can happen in process for longer than ParkAfter, and
// leaves if the run is interrupted or a goroutine it waits on stopped for
// a reason the run must leave for.
func (x *execution) await(fs []*future, any bool) int {
	var demand map[*inbox.Box]int // untaken Futures per box (a hook, a topic)
	for _, f := range fs {
		if f.box != nil && !f.resolved() {
			if demand == nil {
				demand = map[*inbox.Box]int{}
			}
			demand[f.box]++
		}
	}
	var wait trace.Span
	for {
		// The state first: a change after it wakes the wait below.
		changed, running, wakes := x.par.snapshot()
		now := time.Now()
		chosen, pending, hooks := -1, 0, false
		var children []string
		var next time.Time // the earliest unresolved timer among fs
		for i, f := range fs {
			// Timers and children resolve on the workflow goroutine.
			if !f.resolved() && (f.kind == opSleep && !now.Before(f.wakeAt) || f.kind == opChild && f.hook != nil && f.hook.end != nil) {
				x.resolve(f)
			}
			ready := f.resolved()
			if !ready && f.box != nil {
				k := 1
				if !any {
					k = demand[f.box]
				}
				if ready = f.box.Ready(k); ready && f.order == 0 {
					x.par.mu.Lock()
					x.par.order++
					f.order = x.par.order // when it was first seen ready, for Select
					x.par.mu.Unlock()
				}
			}
			if !ready {
				pending++
				hooks = hooks || f.box != nil || f.kind == opChild
				if f.kind == opChild {
					children = append(children, f.child)
				}
				if f.kind == opSleep && (next.IsZero() || f.wakeAt.Before(next)) {
					next = f.wakeAt
				}
				continue
			}
			if f.exit != exitNone {
				x.leave(f.exit, f.exitErr)
			}
			if chosen < 0 || f.order < fs[chosen].order {
				chosen = i
			}
		}
		if pending == 0 || (any && chosen >= 0) {
			if !any {
				chosen = -1
			}
			return chosen
		}
		if wait == nil {
			// The run waits: on a hook's payload or a message, a child's
			// end, a timer. Its span ends when the wait does, or with the
			// execution (a park, an interruption).
			wait = x.startWaitSpan(fs, children, next)
			defer wait.End()
		}
		if r, ok := x.interrupted(); ok {
			x.leave(r, context.Cause(x.ctx))
		}
		if x.readOnly {
			// Replay: what is not in the log has not happened yet.
			x.leave(exitFrontier, nil)
		}
		if !wakes.IsZero() && (next.IsZero() || wakes.Before(next)) {
			next = wakes
		}
		if hooks {
			// A delivery is in the log, not in this process: look for it.
			if x.poll() {
				continue
			}
			if len(children) > 0 && now.Sub(x.childCheck) >= childRecheck {
				// A child's word may be lost: look at the children too.
				x.childCheck = now
				for _, id := range children {
					x.checkChild(id)
				}
				if x.poll() {
					continue
				}
			}
			if len(children) > 0 && (next.IsZero() || next.After(now.Add(childRecheck))) {
				next = now.Add(childRecheck)
			}
			if next.IsZero() {
				next = now.Add(farFuture)
			}
		}
		if !running && (next.IsZero() || time.Until(next) > x.e.cfg.ParkAfter) {
			// Every step of the run that has not ended waits in a
			// limiter's line with no seat in this engine, or for a window:
			// the run parks lined (lineseats.go), claimed again when an
			// engine has a seat, or at its next wake.
			if lined, ok := x.par.linedPark(); ok {
				at := now.Add(linedRecheck)
				if !next.IsZero() && next.Before(at) {
					at = next
				}
				x.parkWith(at, false, awaited(fs), lined)
			}
		}
		if !running && !next.IsZero() && time.Until(next) > x.e.cfg.ParkAfter {
			x.park(next, false, awaited(fs))
		}
		if hooks && time.Until(next) > x.e.cfg.PollInterval {
			next = time.Now().Add(x.e.cfg.PollInterval) // the next look
		}
		var timer <-chan time.Time
		var t *time.Timer
		if !next.IsZero() {
			t = time.NewTimer(time.Until(next))
			timer = t.C
		}
		select {
		case <-changed:
		case <-timer:
		case <-x.ctx.Done():
		}
		if t != nil {
			t.Stop()
		}
	}
}

// awaited is what messages wake a run parked waiting for fs: those on the
// topics of fs's untaken message Futures. The workflow goroutine waits on
// fs alone, so any other message waits in the log for its next look.
func awaited(fs []*future) *store.Awaits {
	a := &store.Awaits{}
	for _, f := range fs {
		if f.kind == opMessage && !f.resolved() && !slices.Contains(a.Topics, f.hook.token) {
			a.Topics = append(a.Topics, f.hook.token)
		}
	}
	return a
}

// park releases the run until t and leaves; any worker resumes it then.
// look: read the log first, so that what this execution recorded does not
// count as unseen (await has just read it, and must not miss what it
// would find now). awaits: the messages that wake it (nil: every one).
func (x *execution) park(t time.Time, look bool, awaits *store.Awaits) {
	x.parkWith(t, look, awaits, nil)
}

// parkWith is park with what the run waits for in a limiter's line
// (lined's Limiters, Lined and LinePriority; nil: the limiters whose
// windows its steps wait for).
func (x *execution) parkWith(t time.Time, look bool, awaits *store.Awaits, lined *store.AdvanceParams) {
	if !x.deadline.IsZero() && x.deadline.Before(t) {
		t = x.deadline
	}
	p := &store.AdvanceParams{Release: true, WakeAt: t, Awaits: awaits, Limiters: x.par.waitedFor()}
	if lined != nil {
		p.Events, p.Limiters, p.Lined, p.LinePriority = lined.Events, lined.Limiters, lined.Lined, lined.LinePriority
	}
	if x.hooks > 0 || x.receives {
		// A delivery after this execution's last look wakes the run at
		// once (the store compares the log with what it saw).
		if look {
			x.poll()
		}
		// x.polled may be 0, a log this execution found empty: a message
		// sent since, while the run was leased, woke nobody.
		p.SeenEvents, p.CheckSeen = x.polled, true
	}
	x.record(p)
	x.leave(exitPark, nil)
}

// selected decodes a recorded Select's choice.
func selected(data []byte) int {
	var i int
	if err := json.Unmarshal(data, &i); err != nil || i < 0 {
		return 1 << 30 // a choice no Select has: replay reports it
	}
	return i
}
