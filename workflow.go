package weir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/weirhq/weir/names"
	"time"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
)

// Workflow is a registered workflow function. Its runs replay from the top
// after a crash, so the function must be deterministic: everything that
// reads the outside world (clocks, randomness, I/O) belongs in a Step.
type Workflow[In, Out any] struct {
	e    *Engine
	name string
}

// WorkflowOption configures a registered workflow.
type WorkflowOption func(*registered)

// WithRunTimeout gives every run of the workflow a deadline, d after the
// run was created: a run still going then fails with ErrRunTimeout (its
// contexts are cancelled with that cause, the output of a step attempt in
// progress is aborted, its streams are closed). A parked run wakes for its
// deadline. The deadline follows from the run's creation time, so it holds
// across restarts.
func WithRunTimeout(d time.Duration) WorkflowOption {
	return func(r *registered) { r.timeout = d }
}

// UsesLimiters declares the limiters the workflow's steps name
// (WithLimiter): Engine.Work fails with ErrNotFound, naming them, if one of
// them is neither in the store nor in Config.Limiters, where a step would
// otherwise fail for good at run time on its first call. A limiter deleted
// after Work still fails its steps then.
func UsesLimiters(names ...string) WorkflowOption {
	return func(r *registered) { r.limiters = append(r.limiters, names...) }
}

// Register registers fn under name on e and returns a handle to start runs
// of it. It panics if name is taken or an option is invalid. Input and
// output are encoded as JSON.
func Register[In, Out any](e *Engine, name string, fn func(Context, In) (Out, error), opts ...WorkflowOption) *Workflow[In, Out] {
	if name == "" {
		panic("weir: empty workflow name")
	}
	reg := &registered{}
	for _, o := range opts {
		o(reg)
	}
	if reg.timeout < 0 {
		panic(fmt.Sprintf("weir: workflow %q: negative run timeout %v", name, reg.timeout))
	}
	reg.fn = func(ctx *wfContext, input []byte) ([]byte, error) {
		var in In
		if len(input) > 0 {
			if err := json.Unmarshal(input, &in); err != nil {
				return nil, NonRetryable(fmt.Errorf("decode input of %q: %w", name, err))
			}
		}
		out, err := fn(ctx, in)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, NonRetryable(fmt.Errorf("encode output of %q: %w", name, err))
		}
		return b, nil
	}
	e.register(name, reg)
	return &Workflow[In, Out]{e: e, name: name}
}

// WorkflowOf returns a handle to the workflow name: to start children of a
// workflow registered elsewhere (StartChild needs only its name; another
// process on the same store runs them), or to get Handles of its runs. It
// checks nothing: In and Out must be the workflow's.
func WorkflowOf[In, Out any](e *Engine, name string) *Workflow[In, Out] {
	return &Workflow[In, Out]{e: e, name: name}
}

// Name returns the workflow's registered name.
func (w *Workflow[In, Out]) Name() string { return w.name }

// StartOptions are optional settings of a new run.
type StartOptions struct {
	// ID is the run's id, chosen by the caller: starting a run with an id that
	// exists returns that run instead of a new one. Defaults to a random id.
	ID string
	// Delay postpones the run's start.
	Delay time.Duration

	// Queue names the limiter (store.Limits; `weir limiters set`) the run
	// waits in before it starts: its concurrency (runs in flight, counted
	// from admission to the run's end, parks included), its per-key
	// concurrency, its rate of starts, across every process on the
	// database. A queued run is admitted in line order: Priority, then the
	// key that holds fewer of the queue's slots, then the key served
	// longest ago, then age. Starting in a queue that does not exist
	// returns ErrNotFound.
	Queue string
	// QueueKey is the run's group in its queue (a tenant): its runs share
	// the queue's per-key bound, and keys take turns.
	QueueKey string
	// Priority: higher starts first.
	Priority int
	// Dedupe folds starts: while a run of Queue with this key is queued
	// or running, a start returns that run (created false) instead of a
	// new one, and its input is dropped.
	Dedupe string
	// Debounce, with Dedupe, waits for starts to stop: the run starts
	// Debounce after the latest start of its key, with that start's input
	// (a start while it waits replaces its input); once it started, starts
	// are folded as with Dedupe.
	Debounce time.Duration
	// DebounceMax, with Debounce, caps the wait: a burst of starts that
	// never stops still runs DebounceMax after its first start, with the
	// latest input then. 0: no cap.
	DebounceMax time.Duration
	// Version is the application version the run is for: only a worker of
	// that version, or one that names it in CompatibleVersions, claims
	// it (a canary's runs, a run that must wait for the next deploy).
	// "": the engine's Config.Version.
	Version string

	// ElideFound: a run that exists at ID comes back without its input
	// and output if either is over store.MaxListedValue bytes
	// (Run.Elided), and they are not read (store.CreateRunParams): for a
	// server, whose clients may name a run of 15 MiB again and again.
	ElideFound bool
	// SameInput: a run that exists at ID with another input than this
	// start's (byte for byte; no input is null) is ErrKeyReused, decided
	// without reading the run's input: a start by an idempotency key.
	SameInput bool
}

// Start starts a run of w with input in (or returns the run opts.ID names).
func (w *Workflow[In, Out]) Start(ctx context.Context, in In, opts *StartOptions) (*Handle[Out], error) {
	if opts != nil && opts.ID != "" {
		if err := names.RunID(opts.ID); err != nil {
			return nil, fmt.Errorf("start run: %w: %w", store.ErrInvalid, err)
		}
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("encode input: %w", err)
	}
	r, _, err := w.e.StartRun(ctx, w.name, b, opts)
	if err != nil {
		return nil, err
	}
	return &Handle[Out]{e: w.e, ID: r.ID}, nil
}

// Handle returns the handle of run id of w, for a run started before (by
// another process, or before a restart). It does not look the run up:
// Result returns ErrNotFound if there is none.
func (w *Workflow[In, Out]) Handle(id string) *Handle[Out] { return &Handle[Out]{e: w.e, ID: id} }

// StartRun starts a run of the workflow registered as name, with input
// already encoded as JSON. created is false if opts.ID named an existing
// run. Returns ErrUnknownWorkflow if this engine has no such workflow.
func (e *Engine) StartRun(ctx context.Context, name string, input []byte, opts *StartOptions) (run *Run, created bool, err error) {
	e.mu.Lock()
	_, ok := e.workflows[name]
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, false, ErrEngineClosed
	}
	if !ok {
		return nil, false, fmt.Errorf("%w: %q", ErrUnknownWorkflow, name)
	}
	p := &store.CreateRunParams{Workflow: name, Input: input, TraceParent: traceParentOf(ctx), Version: e.cfg.Version}
	if opts != nil {
		p.ID = opts.ID
		if opts.Delay > 0 {
			p.WakeAt = time.Now().Add(opts.Delay)
		}
		p.Queue, p.QueueKey, p.Priority, p.Dedupe, p.Debounce, p.DebounceMax = opts.Queue, opts.QueueKey, opts.Priority, opts.Dedupe, opts.Debounce, opts.DebounceMax
		p.ElideFound, p.SameInput = opts.ElideFound, opts.SameInput
		if opts.Version != "" {
			if err := names.Version(opts.Version, store.MaxVersionLen); err != nil {
				return nil, false, fmt.Errorf("start run: %w: %w", store.ErrInvalid, err)
			}
			p.Version = opts.Version
		}
	}
	if p.ID == "" {
		p.ID = newRunID()
	}
	// With a slot free here, the run is leased to this engine as it is
	// created and executed at once: no claim, no look at an empty log. A
	// run in a queue is, if its queue lets it start at once (no one ahead,
	// room in its bounds); else it waits there, and an admission leases it
	// to a worker.
	var runCtx context.Context
	reserved := false
	if e.runsVersion(p.Version) {
		runCtx, reserved = e.reserve(p.Queue)
	}
	if reserved {
		p.Owner, p.LeaseTTL = e.cfg.WorkerID, e.cfg.LeaseTTL
	}
	r, created, err := e.store.CreateRun(ctx, p)
	if err == nil && created && r.Queued {
		e.grants.refuse(p.Queue)
	}
	if reserved {
		// Leased here at creation: by this call, or by a try of it whose
		// reply was lost (the store's retry finds the run, created false,
		// with this engine's first lease), unless it runs here already.
		leased := err == nil && r.LeaseOwner == e.cfg.WorkerID && r.LeaseEpoch == 1 && r.Status == store.RunRunning
		if leased && r.Elided && !e.isLaunched(r.ID) {
			// A lost try's lease, found without its data (ElideFound): its
			// execution needs its input. Not for a run running here, which
			// a client may name again and again.
			full, gerr := e.store.GetRun(ctx, r.ID)
			if leased = gerr == nil; leased {
				r = full
			}
		}
		if leased && e.launchStarted(runCtx, r, created) {
			return r, created, nil
		}
		// Not leased to this engine (delayed, queued, or it existed): a
		// claim or an admission takes it when it is runnable.
		e.unreserve(p.Queue)
	}
	if err != nil {
		return nil, false, fmt.Errorf("start run: %w", err)
	}
	e.nudge()
	return r, created, nil
}

// Handle refers to one run of a workflow.
type Handle[Out any] struct {
	e  *Engine
	ID string
}

// Result waits for the run to end and returns its output, or its error:
// ErrCancelled for a cancelled run, an error matching ErrRunFailed for a
// failed one.
func (h *Handle[Out]) Result(ctx context.Context) (Out, error) {
	var out Out
	r, err := h.e.wait(ctx, h.ID, false)
	if err != nil {
		return out, err
	}
	switch r.Status {
	case store.RunCompleted:
		if err := json.Unmarshal(r.Output, &out); err != nil {
			return out, fmt.Errorf("decode output: %w", err)
		}
		return out, nil
	case store.RunCancelled:
		return out, ErrCancelled
	default:
		return out, h.e.runError(ctx, r)
	}
}

// runError is a failed run's *RunError, with the step that failed it.
func (e *Engine) runError(ctx context.Context, r *store.Run) error {
	re := &RunError{RunID: r.ID, Message: r.Error}
	evs, err := e.store.ListEvents(ctx, r.ID, 0)
	for delay := 50 * time.Millisecond; err != nil && transient(err) && ctx.Err() == nil; delay = min(2*delay, time.Second) {
		select { // the store is away: Result rides it out
		case <-ctx.Done():
		case <-time.After(delay):
		}
		evs, err = e.store.ListEvents(ctx, r.ID, 0)
	}
	if err == nil {
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].Type != store.EventRunFailed {
				continue
			}
			var sj stepErrorJSON
			if len(evs[i].Data) > 0 && json.Unmarshal(evs[i].Data, &sj) == nil && sj.Name != "" {
				re.Step = &StepError{Name: sj.Name, Attempt: sj.Attempt, Message: sj.Message}
			}
			break
		}
	}
	return re
}

// Events returns a run's event log from afterSeq on (0: all of it).
// Returns ErrNotFound for an unknown run.
func (e *Engine) Events(ctx context.Context, runID string, afterSeq int64) ([]Event, error) {
	if _, err := e.runHead(ctx, runID); err != nil {
		return nil, err
	}
	return e.store.ListEvents(ctx, runID, afterSeq)
}

// Wait waits for a run to end and returns it.
func (e *Engine) Wait(ctx context.Context, id string) (*Run, error) {
	return e.wait(ctx, id, true)
}

// wait waits for run id to end. Unless exact, a run that ended here is
// returned as its execution ended it, without reading its row: its status,
// output and error are the row's; its timestamps may not be.
func (e *Engine) wait(ctx context.Context, id string, exact bool) (*store.Run, error) {
	d := e.doneChan(id)
	delay := 5 * time.Millisecond
	// A run launched here a moment ago has not ended: its end tells d.
	look := !e.launchedHere(id)
	for {
		if look {
			// Its head at each look, the run whole once it has ended: a
			// waiter looks every 250 ms at most, and a run may carry a
			// 15 MiB input (red team, round nineteen audit).
			r, err := e.runHead(ctx, id)
			if err == nil && r.Status.Terminal() {
				r, err = e.store.GetRun(ctx, id) // resumed since: not terminal
			}
			switch {
			case err == nil && r.Status.Terminal():
				return r, nil
			case err != nil && !transient(err):
				return nil, err
			case err != nil:
				// The store is away (a database restarting): a wait rides it
				// out until its own context ends.
				e.log.Debug("weir: wait for a run: store error; looking again", "run", id, "err", err)
				delay = max(delay, 100*time.Millisecond)
			}
		}
		look = true
		poll := delay
		if e.executing(id) || e.launchedHere(id) {
			// Its end here tells d: a poll only catches it being lost to
			// another worker.
			poll = max(poll, 250*time.Millisecond)
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-d.ch:
			if d.run != nil && !exact {
				t.Stop()
				return d.run, nil
			}
			d = e.doneChan(id)
		case <-t.C:
		}
		t.Stop()
		// Runs executed elsewhere are polled, more slowly as time passes.
		delay = min(delay*2, 250*time.Millisecond)
	}
}

// transient reports whether a store error may pass if the same call is
// made again later (a connection cut, a database restarting), so that a
// wait or a following reader rides it out: not a refusal, not a closed
// store or engine, not a context's end.
func transient(err error) bool {
	return api.Retryable(err) && !errors.Is(err, store.ErrClosedStore) && !errors.Is(err, ErrEngineClosed)
}

// launchedHere reports whether an execution of run id was launched here and
// has not returned. (One that is returning may have ended the run before
// Wait looked: Wait's poll timer catches that.)
func (e *Engine) launchedHere(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.launched[id] > 0
}

// executing reports whether run id is executing on this engine now.
func (e *Engine) executing(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running[id] != nil
}

// Cancel asks for a run to be cancelled. The step running now sees its
// context cancelled, fails for good (its stream output is aborted), and the
// run ends as cancelled with its streams closed. Cancelling a finished run
// does nothing. Returns ErrNotFound for an unknown run.
func (e *Engine) Cancel(ctx context.Context, id string) error {
	if err := e.store.RequestCancel(ctx, id); err != nil {
		return fmt.Errorf("cancel run: %w", err)
	}
	// Executing here: the heartbeat would notice within LeaseTTL/3; don't
	// wait for it.
	e.interrupt(id, ErrCancelled)
	e.nudge()
	return nil
}

// GetRun returns a run. Returns ErrNotFound.
func (e *Engine) GetRun(ctx context.Context, id string) (*Run, error) {
	return e.store.GetRun(ctx, id)
}

// runHead reads run id without its input and output, its error cut
// (store.RunsWithin with no room for values): what a look at its existence
// or status needs, whatever the run holds.
func (e *Engine) runHead(ctx context.Context, id string) (*store.Run, error) {
	r, _, err := e.store.GetRunWithin(ctx, id, 0)
	return r, err
}
