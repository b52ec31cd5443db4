package weir

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/weirhq/weir/names"
	"strconv"
	"time"

	"github.com/weirhq/weir/store"
)

// Child runs. A workflow starts a run of another workflow as its next
// operation; the child's id is deterministic, so replay finds the same
// child. Its end reaches the parent as a delivery to a hook the parent made
// for it (before creating the child), in the same transaction as the end
// itself (store.AdvanceParams.Deliver): recorded once in the parent's log,
// waking the parent if it parked, whenever the child's worker dies. A
// parent also looks at its children's rows now and then (a child that
// ended before weir did this, or whose parent's hook was missing), and
// delivers what it finds itself: OnlyFirst makes the two one.

// ChildOptions are optional settings of a child run.
type ChildOptions struct {
	// ID is the child's run id. Defaults to "<parent id>-<op>", op being
	// the StartChild's position among the run's durable operations, the
	// same on every replay (Child.ID holds it; Engine.Children lists a
	// run's children from outside). A run of another workflow with that id
	// fails the start.
	ID string
}

// Children returns the ids of the child runs run runID started, in the
// order it started them (from its log's child_started events). Returns
// ErrNotFound for an unknown run.
func (e *Engine) Children(ctx context.Context, runID string) ([]string, error) {
	evs, err := e.Events(ctx, runID, 0)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, ev := range evs {
		if ev.Type == store.EventChildStarted {
			ids = append(ids, ev.Name)
		}
	}
	return ids, nil
}

// Child is a child run: its id, and a Future of its output. Get returns the
// output, or an error matching ErrRunFailed (its error) or ErrCancelled.
// Waiting for it is optional: a parent that ends leaves its children
// running, unless it was cancelled (then they are cancelled too).
type Child[Out any] struct {
	Future[Out]
	ID string
}

// childRecheck is how often a parent waiting for a child looks at the
// child's row, in case the child's own word was lost.
const childRecheck = time.Minute

// childEnd is what a child's end delivers to its parent.
type childEnd struct {
	Status store.RunStatus `json:"status"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// childToken is the token of the hook a parent waits on for child id.
func childToken(id string) string {
	d := sha256.Sum256([]byte(id))
	return childTokenPrefix + hex.EncodeToString(d[:16])
}

// childTokenPrefix begins the tokens of the hooks children's ends come to.
// Those are the engine's to deliver: a client could compute one (the
// child's id is no secret), so Engine.DeliverHook refuses them, and a
// workflow's own hook may not take the prefix.
const childTokenPrefix = "child_"

// StartChild starts a run of wf with input in, as the run's next operation,
// and returns at once. See Child.
func StartChild[In, Out any](ctx Context, wf *Workflow[In, Out], in In, opts *ChildOptions) *Child[Out] {
	x := ctx.execution()
	op, st := x.nextOp()
	id := x.run.ID + "-" + strconv.FormatInt(op, 10)
	check := names.MintedRunID
	// A run at the default id is this run's child only if it started it:
	// anyone can compute the id. One the code names may be adopted.
	own := true
	if opts != nil && opts.ID != "" {
		id, check, own = opts.ID, names.RunID, false // the code's choice: a client's rule
	}
	token := childToken(id)
	c := &Child[Out]{ID: id}
	if err := check(id); err != nil {
		err = fmt.Errorf("child run id: %w: %w", store.ErrInvalid, err)
		// A bad id is the code's, not the store's: fail the child, not
		// the run's execution (which would be resumed, and fail again).
		c.f = future{op: op, kind: opChild, done: make(chan struct{}), err: NonRetryable(err)}
		close(c.f.done)
		return c
	}
	c.f = future{op: op, kind: opChild, done: make(chan struct{})}
	switch {
	case st == nil:
	case st.kind == opChild && st.child == id, st.kind == opHook && st.token == token:
	default:
		x.leave(exitNonDeterminism, &NonDeterminismError{Op: op, Recorded: st.describe(), Replayed: "child run " + id})
	}
	fail := func(err error) *Child[Out] {
		c.f.err = err
		close(c.f.done)
		return c
	}
	if st == nil || st.kind == opHook {
		if x.readOnly {
			x.leave(exitFrontier, nil)
		}
		if st == nil {
			// The hook first: the child's end must find it.
			if err := x.createHook(op, token); err != nil {
				if errors.Is(err, store.ErrHookConflict) {
					return fail(NonRetryable(fmt.Errorf("child run %s: %w", id, err)))
				}
				x.storeFailed(err)
			}
			st = &opState{kind: opHook, token: token}
			x.ops[op] = st
		}
		input, err := json.Marshal(in)
		if err != nil {
			return fail(NonRetryable(fmt.Errorf("child run %s: encode input: %w", id, err)))
		}
		x.settle()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), 30*time.Second)
		_, _, err = x.e.store.CreateRun(cctx, &store.CreateRunParams{ID: id, Workflow: wf.name, Input: input, Parent: x.run.ID, OwnChild: own, TraceParent: traceParentOf(x.ctx), Version: x.e.cfg.Version})
		cancel()
		if errors.Is(err, store.ErrRunConflict) {
			return fail(NonRetryable(fmt.Errorf("child run: %w", err)))
		}
		if err != nil {
			x.storeFailed(err)
		}
		x.record(&store.AdvanceParams{Events: []store.Event{{Type: store.EventChildStarted, Op: op, Name: id, Data: []byte(strconv.Quote(wf.name))}}})
		st.kind, st.child = opChild, id
		x.e.nudge()
	}
	x.hooks++
	c.f.hook, c.f.child = st, id
	c.f.take = func(payload []byte, _ int) {
		var end childEnd
		if err := json.Unmarshal(payload, &end); err != nil {
			c.f.err = NonRetryable(fmt.Errorf("child run %s: decode its end: %w", id, err))
			return
		}
		switch end.Status {
		case store.RunCompleted:
			var v Out
			if err := json.Unmarshal(end.Output, &v); err != nil {
				c.f.err = NonRetryable(fmt.Errorf("child run %s: decode output: %w", id, err))
			}
			c.val = v
		case store.RunCancelled:
			c.f.err = fmt.Errorf("child run %s: %w", id, ErrCancelled)
		default:
			c.f.err = fmt.Errorf("%w: child run %s: %s", ErrRunFailed, id, end.Error)
		}
	}
	return c
}

// childEndDelivery is the delivery of child run r's end to its parent's
// hook for it.
func childEndDelivery(r *store.Run, end childEnd) *store.DeliverHookParams {
	b, _ := json.Marshal(end)
	return &store.DeliverHookParams{RunID: r.Parent, Token: childToken(r.ID), Payload: b, OnlyFirst: true}
}

// checkChild looks at a child run's row: ended, its end is delivered (once,
// whoever delivers it first). It looks at the child's head, and reads the
// child whole (its output) only once it has ended: each awaited child is
// looked at every recheck, and its input may be 15 MiB (red team, round
// nineteen audit).
func (x *execution) checkChild(id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), 10*time.Second)
	defer cancel()
	r, err := x.e.runHead(ctx, id)
	if err != nil || !r.Status.Terminal() {
		return
	}
	if r, err = x.e.store.GetRun(ctx, id); err != nil || !r.Status.Terminal() {
		return
	}
	p := childEndDelivery(r, childEnd{Status: r.Status, Output: r.Output, Error: r.Error})
	p.RunID = x.run.ID
	res, err := x.e.store.DeliverHook(ctx, p)
	if err != nil {
		x.e.log.Warn("weir: deliver a child's end", "run", x.run.ID, "child", id, "err", err)
		return
	}
	if !res.Duplicate {
		x.e.log.Info("weir: a child's end was not delivered with it; its parent delivered it", "run", x.run.ID, "child", id)
	}
}

// cancelChildren asks every child of the run that has not ended to cancel.
func (x *execution) cancelChildren() {
	for _, st := range x.ops {
		if st.kind != opChild || st.end != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), 10*time.Second)
		if err := x.e.Cancel(ctx, st.child); err != nil && !errors.Is(err, store.ErrNotFound) {
			x.e.log.Warn("weir: cancel child run", "run", x.run.ID, "child", st.child, "err", err)
		}
		cancel()
	}
}
