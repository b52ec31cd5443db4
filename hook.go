package weir

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/weirhq/weir/store"
)

// Hooks let a run wait for something from outside: a person's approval, a
// webhook, another system's answer. Workflow code creates a hook with a
// token; whoever has the token delivers payloads to it (Engine.DeliverHook,
// POST /v1/hooks/{token}, weir runs hook). Each delivery is recorded in
// the run's log, once, when it is acknowledged; the run takes payloads in
// that order, on replay too. A run that waits only for hooks (and timers)
// parks, holding no goroutine, and a delivery wakes it.

// ErrHookDisposed is returned to take a payload from a hook that was
// closed (Hook.Close) and has none left.
var ErrHookDisposed = errors.New("hook disposed")

// ErrHookConflict is returned to create a hook whose token a live hook of
// another run holds.
var ErrHookConflict = store.ErrHookConflict

// HookDelivery is the reply to a delivery: the run, the hook's operation,
// the seq of the delivery's event in the run's log, and how many payloads
// the hook has received.
type HookDelivery = store.HookDelivery

// Hook is a run's hook; T is its payloads' type (JSON).
type Hook[T any] struct {
	x  *execution
	op int64
	st *opState
}

// farFuture is when a run parked for hooks alone wakes if nothing comes.
const farFuture = 100 * 365 * 24 * time.Hour

// NewHook creates a hook as the run's next operation. token is the name
// deliveries use: chosen by the caller (an order id, say: unique among the
// live hooks of all runs) or, if empty, minted at random (Hook.Token
// returns it). The token is recorded, so replay gets the same hook.
// Returns an error matching ErrHookConflict if another run's live hook
// holds token.
func NewHook[T any](ctx Context, token string) (*Hook[T], error) {
	x := ctx.execution()
	op, st := x.nextOp()
	if st != nil && st.kind != opHook {
		x.leave(exitNonDeterminism, &NonDeterminismError{Op: op, Recorded: st.describe(), Replayed: "hook"})
	}
	if st == nil {
		if x.readOnly {
			x.leave(exitFrontier, nil)
		}
		if token == "" {
			b := make([]byte, 16)
			_, _ = rand.Read(b)
			token = "hook_" + hex.EncodeToString(b)
		}
		if err := store.CheckHookToken(token); err != nil {
			return nil, NonRetryable(err)
		}
		if strings.HasPrefix(token, childTokenPrefix) {
			return nil, NonRetryable(fmt.Errorf("%w: hook token %q: the prefix %q is the engine's, for children's ends", store.ErrInvalid, token, childTokenPrefix))
		}
		err := x.createHook(op, token)
		if errors.Is(err, store.ErrHookConflict) {
			return nil, NonRetryable(err)
		}
		if err != nil {
			x.storeFailed(err)
		}
		st = &opState{kind: opHook, token: token}
		x.ops[op] = st
	} else if token != "" && st.token != token {
		x.leave(exitNonDeterminism, &NonDeterminismError{Op: op, Recorded: st.describe(), Replayed: "hook " + HookRef(token)})
	}
	x.hooks++
	return &Hook[T]{x: x, op: op, st: st}, nil
}

func (x *execution) createHook(op int64, token string) error {
	x.settle()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), 30*time.Second)
	defer cancel()
	return x.e.store.CreateHook(ctx, &store.HookParams{RunID: x.run.ID, LeaseEpoch: x.epoch, Token: token, Op: op})
}

// storeFailed leaves the workflow goroutine after a store call failed.
func (x *execution) storeFailed(err error) {
	if errors.Is(err, store.ErrLeaseLost) {
		x.leave(exitLost, err)
	}
	if r, ok := x.interrupted(); ok {
		x.leave(r, err)
	}
	x.leave(exitStoreError, err)
}

// Token returns the hook's token.
func (h *Hook[T]) Token() string { return h.st.token }

// Receive waits for the hook's next payload and returns it. Payloads
// come in the order they were delivered; one delivered before Receive is
// kept for it. After Close, the payloads delivered before it are
// returned, then ErrHookDisposed. (The taking rule is package inbox's.)
func (h *Hook[T]) Receive(ctx Context) (T, error) {
	return h.Next().Get(ctx)
}

// Each yields the hook's payloads as they come, in order, until the hook
// is closed (with its payloads all taken) or the loop stops; an error ends
// it. It is Receive in a loop: for a hook that takes many payloads. The
// workflow ends it with break; the sender, by closing the hook with its
// last delivery (DeliverOptions.Close, POST /v1/hooks/{token}?close=true,
// weir runs hook --close).
func (h *Hook[T]) Each(ctx Context) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for {
			v, err := h.Receive(ctx)
			if errors.Is(err, ErrHookDisposed) {
				return
			}
			if !yield(v, err) || err != nil {
				return
			}
		}
	}
}

// ReceiveWithin is Receive with a durable timeout: ok is false if no
// payload came within d (the wait is a timer of the run's: it holds across
// restarts).
func (h *Hook[T]) ReceiveWithin(ctx Context, d time.Duration) (v T, ok bool, err error) {
	if d < 0 {
		return v, false, NonRetryable(fmt.Errorf("weir: hook %s: negative timeout %v", HookRef(h.st.token), d))
	}
	next := h.Next()
	if Select(ctx, next, NewTimer(ctx, d)) == 1 {
		return v, false, nil
	}
	v, err = next.Get(ctx)
	return v, err == nil, err
}

// Next returns a Future of one of the hook's payloads, to race it against
// other operations with Select or wait for several at once. The Future
// takes its payload when it is taken (Get, or Select choosing it), not
// when it is made: each take gets the hook's next payload not yet taken,
// in delivery order, so All(h.Next(), h.Next()) gets the first two, and a
// Future never taken (a Select that chose another case) leaves its
// payload for the next take.
func (h *Hook[T]) Next() *Future[T] {
	f := &Future[T]{f: future{op: h.op, kind: opHook, done: make(chan struct{}), hook: h.st, box: &h.st.box}}
	f.f.take = func(payload []byte, index int) {
		if err := json.Unmarshal(payload, &f.val); err != nil {
			f.f.err = NonRetryable(fmt.Errorf("hook %s: decode payload %d: %w", HookRef(h.st.token), index+1, err))
		}
	}
	return f
}

// Close disposes of the hook: deliveries to its token are refused (410)
// from then on. The payloads delivered before it stay to be taken (Close
// reads the run's log up to its own disposal); takes after those get
// ErrHookDisposed. A run's hooks are disposed when it ends.
func (h *Hook[T]) Close(ctx Context) {
	x := ctx.execution()
	if h.st.box.IsClosed() {
		return
	}
	if x.readOnly {
		x.leave(exitFrontier, nil)
	}
	x.settle()
	c, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), 30*time.Second)
	defer cancel()
	if err := x.e.store.DisposeHook(c, &store.HookParams{RunID: x.run.ID, LeaseEpoch: x.epoch, Token: h.st.token, Op: h.op}); err != nil {
		x.storeFailed(err)
	}
	// Every payload acknowledged before the disposal is in the log before
	// its hook_disposed: read up to it, so this execution takes what its
	// replay will.
	if err := x.pollErr(c); err != nil {
		x.storeFailed(err)
	}
	h.st.box.Close()
}

// loadHook applies a hook event of the log to its operation's state: a
// hook's payloads and close go to its box, a child's end to st.end.
func (x *execution) loadHook(st *opState, ev *store.Event) {
	switch ev.Type {
	case store.EventHookCreated:
		if st.kind == "" {
			st.kind = opHook
		}
		st.token = ev.Name
	case store.EventHookReceived:
		if st.kind == "" {
			st.kind = opHook
		}
		if st.end == nil {
			// A child's end, if the op is a child's: its first word (a
			// second is the same end). It may come before child_started
			// in the log (the child ended before its parent recorded its
			// start), so it is kept whatever the op is yet.
			st.end = ev.Data
		}
		if st.kind == opChild {
			return
		}
		if st.box.IsClosed() {
			// The store refuses deliveries after a disposal: a log that
			// has one is not weir's.
			x.e.log.Error("weir: a hook payload after its hook's disposal in the log; ignored", "run", x.run.ID, "op", ev.Op, "seq", ev.Seq)
			return
		}
		st.box.Deliver(ev.Data)
	case store.EventHookDisposed:
		st.box.Close()
	}
}

// poll reads what the run's log gained since this execution last read it
// (deliveries to its hooks) and reports whether it gained one. A failed
// read is logged and reports nothing: the next look tries again.
func (x *execution) poll() bool {
	if x.hooks == 0 && !x.receives {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), 10*time.Second)
	defer cancel()
	before := x.polled
	if err := x.pollErr(ctx); err != nil {
		x.e.log.Warn("weir: read run log", "run", x.run.ID, "err", err)
		return false
	}
	return x.polled > before && x.gained
}

// pollErr reads the run's log past what this execution has read, and
// applies the hook events that are not its own doing (deliveries, and
// closes by their senders) and its own disposals, whose place among the
// deliveries only the log knows. x.gained reports whether one came.
func (x *execution) pollErr(ctx context.Context) error {
	x.gained = false
	evs, err := x.e.store.ListEvents(ctx, x.run.ID, x.polled)
	if err != nil {
		return err
	}
	for i := range evs {
		ev := &evs[i]
		x.polled = max(x.polled, ev.Seq)
		if ev.Type == store.EventMessageReceived {
			x.topic(ev.Name).Deliver(ev.Data)
			x.gained = true
			continue
		}
		if ev.Type != store.EventHookReceived && ev.Type != store.EventHookDisposed {
			continue // this execution's own
		}
		if st := x.ops[ev.Op]; st != nil && (st.kind == opHook || st.kind == opChild) {
			if ev.Type == store.EventHookDisposed && st.box.IsClosed() {
				continue
			}
			x.loadHook(st, ev)
			x.gained = true
		}
	}
	return nil
}

// DeliverOptions are optional settings of a delivery.
type DeliverOptions struct {
	// IdempotencyKey makes the delivery idempotent: sent again with the
	// same key and payload, it is answered as the first time (Duplicate)
	// and adds nothing; with another payload it is ErrKeyReused.
	IdempotencyKey string
	// Close closes the hook with this delivery (its last payload; the
	// payload may be nil, to close alone): the run's takes get the
	// payloads delivered so far, then ErrHookDisposed, so a Hook.Each loop
	// ends; deliveries after it are refused (ErrGone).
	Close bool
}

// DeliverHook delivers payload (JSON, at most 1 MiB) to the hook holding
// token. It returns once the delivery is in the run's log. Returns
// ErrNotFound for an unknown token, an error matching store.ErrGone for a
// hook disposed or whose run ended, ErrKeyReused, ErrTooLarge, and
// store.ErrInvalid for a payload that is not JSON.
func (e *Engine) DeliverHook(ctx context.Context, token string, payload json.RawMessage, opts *DeliverOptions) (*HookDelivery, error) {
	if len(payload) > store.MaxHookPayload {
		return nil, fmt.Errorf("deliver to hook %q: %w: a payload of %d bytes, the limit is %d", token, store.ErrTooLarge, len(payload), store.MaxHookPayload)
	}
	if strings.HasPrefix(token, childTokenPrefix) {
		// A child's end is delivered by its engine, never from outside:
		// answered as for a hook that is not there.
		return nil, fmt.Errorf("deliver to hook %q: %w: a child's end is its engine's to deliver", token, store.ErrNotFound)
	}
	closing := opts != nil && opts.Close
	if !json.Valid(payload) && !(closing && len(payload) == 0) {
		return nil, fmt.Errorf("deliver to hook %q: %w: the payload is not JSON", token, store.ErrInvalid)
	}
	p := &store.DeliverHookParams{Token: token, Payload: payload, Close: closing}
	if opts != nil && opts.IdempotencyKey != "" {
		p.IdempotencyKey = opts.IdempotencyKey
		d := digestOf(payload)
		if closing {
			d[0] ^= 1 // a closing delivery is another request than the same payload alone
		}
		p.RequestDigest = d
	}
	res, err := e.store.DeliverHook(ctx, p)
	if err != nil {
		return nil, err
	}
	if !res.Duplicate {
		e.hookDelivered(res.RunID)
	}
	e.nudge()
	return res, nil
}

// CloseHook closes the hook holding token from outside its run: its
// sender's "no more". The run's takes get the payloads delivered before
// it, then ErrHookDisposed (a Hook.Each loop ends). It is DeliverHook with
// Close and no payload.
func (e *Engine) CloseHook(ctx context.Context, token string, opts *DeliverOptions) (*HookDelivery, error) {
	o := DeliverOptions{Close: true}
	if opts != nil {
		o.IdempotencyKey = opts.IdempotencyKey
	}
	return e.DeliverHook(ctx, token, nil, &o)
}

// Hook returns the hook holding token. Returns ErrNotFound.
func (e *Engine) Hook(ctx context.Context, token string) (*HookInfo, error) {
	return e.store.GetHook(ctx, token)
}

// Hooks returns run runID's hooks, by op: their tokens, how many payloads
// each received, and whether it is closed (a child run's hook is one).
// Returns ErrNotFound for an unknown run.
func (e *Engine) Hooks(ctx context.Context, runID string) ([]*HookInfo, error) {
	if _, err := e.runHead(ctx, runID); err != nil { // is it there: not its data
		return nil, err
	}
	return e.store.ListHooks(ctx, runID)
}

// HookInfo describes a hook: its token, run and op, the payloads it
// received, and whether it is closed.
type HookInfo = store.HookInfo

// hookDelivered wakes the run's execution here, if any, to read its log.
func (e *Engine) hookDelivered(run string) {
	e.mu.Lock()
	x := e.running[run]
	e.mu.Unlock()
	if x != nil {
		x.par.mu.Lock()
		x.par.change()
		x.par.mu.Unlock()
	}
}

// digestOf tells one delivery's payload from another's.
func digestOf(payload []byte) []byte {
	d := sha256.Sum256(payload)
	return d[:]
}
