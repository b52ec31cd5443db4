package apply

import (
	"errors"
	"fmt"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
	"github.com/weirhq/weir/world"
)

// Advance applies one engine transaction on tx (store.AdvanceParams), in this
// order: the lease check, the events, the writer's finish on every stream
// of the run it wrote on, the fence, the stream closes, the run's change.
// The finish is the outcome of an attempt the fence as it stood allowed;
// a fence above it, in the same Advance, then keeps that attempt out of
// every stream of the run (a step whose last attempt timed out fails for
// good with its output aborted, and its zombie is fenced even from the
// streams it had not reached).
// p must be checked; now stamps the events without a time and the run.
//
// Everything that can refuse it is checked first: the lease, then the
// finish on each stream (tried on copies of the streams' and writers'
// state). So a refused Advance has changed nothing, and one that passes
// cannot fail but for a save.
func Advance(tx Tx, p *store.AdvanceParams, now time.Time) error {
	run, err := tx.Run(p.RunID)
	if err != nil {
		return err
	}
	if err := CheckLease(run, p.LeaseEpoch); err != nil {
		return err
	}
	var fence int64 // the fence of p.Fence's writer before this Advance
	if f := p.Fence; f != nil {
		if fence, err = tx.Fence(run.ID, f.Writer); err != nil {
			return err
		}
	}
	finishes, err := tryFinish(tx, run.ID, p.Finish)
	if err != nil {
		return err
	}
	var closes []*Stream
	if p.CloseStreams {
		if closes, err = tx.RunStreams(run.ID); err != nil {
			return err
		}
	}

	// Nothing can refuse the Advance from here on.
	unseen := p.Release && p.CheckSeen && run.LastEvent > p.SeenEvents
	if len(p.Events) > 0 {
		evs := make([]store.Event, len(p.Events))
		for i, e := range p.Events {
			e.Seq = run.LastEvent + int64(i) + 1
			if e.At.IsZero() {
				e.At = now
			}
			evs[i] = e
		}
		run.LastEvent += int64(len(evs))
		if err := tx.AddEvents(run, evs); err != nil {
			return err
		}
		for i := range evs {
			if evs[i].Type == store.EventSet {
				if err := tx.SaveRunEvent(run, &evs[i]); err != nil {
					return err
				}
			}
		}
	}
	if err := saveFinishes(tx, finishes); err != nil {
		return err
	}
	if f := p.Fence; f != nil && f.Attempt > fence {
		if err := tx.SaveFence(run.ID, f.Writer, f.Attempt); err != nil {
			return err
		}
	}
	for _, st := range closes {
		for _, f := range finishes {
			if f.st.ID == st.ID {
				st = f.st // the state the finish changed, if a cache gave two
			}
		}
		if _, err := closeStream(tx, st); err != nil {
			return err
		}
	}
	c := Change(p, now)
	if (unseen || run.CancelRequested) && c.Release && !c.Ended {
		// The log grew behind the worker's back, or a cancel came while
		// it held the run: a worker must look again now.
		c.WakeAt = now
	}
	if c.Status != "" {
		run.Status = c.Status
	}
	if c.Release {
		run.Owner = ""
	}
	if err := tx.SaveRun(run, c); err != nil {
		return err
	}
	return deliverWith(tx, p.Deliver, now)
}

// deliverWith makes an Advance's delivery (store.AdvanceParams.Deliver) on tx:
// a delivery the hook's rules refuse is not made, and refuses nothing.
func deliverWith(tx Tx, d *store.DeliverHookParams, now time.Time) error {
	if d == nil {
		return nil
	}
	ht, ok := tx.(HookTx)
	if !ok {
		return fmt.Errorf("%w: this store's records cannot deliver to hooks", store.ErrInvalid)
	}
	q := *d
	q.Now = now
	_, err := DeliverHook(ht, &q)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrGone) {
		return nil // no hook of that run, or it ended: nobody to tell
	}
	return err
}

// Change is how p changes its run's row.
func Change(p *store.AdvanceParams, now time.Time) *RunChange {
	terminal := p.Status.Terminal()
	c := &RunChange{Status: p.Status, Release: p.Release || terminal, Ended: terminal, Now: now}
	if p.Status != "" {
		c.Output, c.Error = p.Output, world.CutText(p.Error, store.MaxErrorBytes)
	}
	if p.Release && !terminal {
		c.WakeAt, c.Awaits = p.WakeAt, p.Awaits
		c.Limiters, c.Lined, c.LinePriority = p.Limiters, p.Lined, p.LinePriority
	}
	return c
}

// tried is one stream's finish, decided on copies of its state.
type tried struct {
	st    *Stream
	w     *stream.Writer
	head  stream.Head
	after stream.Writer
	res   stream.Result
	recs  []stream.Record
}

// tryFinish decides finish f (nil: none) on every stream of run its writer
// wrote on, without changing them, against the writer's fence as it is.
func tryFinish(tx Tx, run string, f *store.Finish) ([]tried, error) {
	if f == nil {
		return nil, nil
	}
	return tryFinishOn(tx, run, f, 0)
}

// tryFinishAll decides finish f on every stream of run its writer wrote on,
// below fence, without changing them: commit and abort only reslice a
// writer's Live records, so a shallow copy is theirs to change.
func tryFinishAll(tx Tx, run string, f *store.Finish, fence int64) ([]tried, error) {
	sts, err := tx.WriterStreams(run, f.Writer)
	if err != nil {
		return nil, err
	}
	rule := stream.Abort
	if f.Commit {
		rule = stream.Commit
	}
	out := make([]tried, 0, len(sts))
	for _, st := range sts {
		w, err := tx.Writer(st, f.Writer)
		if err != nil {
			return nil, err
		}
		if w == nil {
			continue // raced a delete: it wrote nothing there any more
		}
		if f.Attempt < fence {
			return nil, fmt.Errorf("finish writer %q on stream %d: %w", f.Writer, st.ID,
				&stream.FencedError{Attempt: f.Attempt, Current: fence})
		}
		t := tried{st: st, w: w, head: st.Head, after: *w}
		if t.res, t.recs, err = rule(&t.head, &t.after, f.Attempt); err != nil {
			return nil, fmt.Errorf("finish writer %q on stream %d: %w", f.Writer, st.ID, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// CheckLease returns nil if run is leased at epoch, else why not: an error
// matching store.ErrLeaseLost. Advance and RenewLease explain a lost lease
// with it on every backend.
func CheckLease(run *Run, epoch int64) error {
	switch {
	case run.Epoch != epoch:
		return fmt.Errorf("%w: run %q is at lease epoch %d, not %d", store.ErrLeaseLost, run.ID, run.Epoch, epoch)
	case run.Status.Terminal():
		return fmt.Errorf("%w: run %q is %s", store.ErrLeaseLost, run.ID, run.Status)
	case run.Owner == "":
		return fmt.Errorf("%w: run %q's lease was released", store.ErrLeaseLost, run.ID)
	}
	return nil
}

// LeaseLost explains why run is not leased at epoch when a backend's
// conditional update found no row to change; it never returns nil.
func LeaseLost(run *Run, epoch int64) error {
	if err := CheckLease(run, epoch); err != nil {
		return err
	}
	return fmt.Errorf("%w: run %q", store.ErrLeaseLost, run.ID)
}

// NewRunLease is the lease a run is created with (store.CreateRunParams.Owner).
type NewRunLease struct {
	Status  store.RunStatus // pending, or running when leased
	Owner   string          // "" when not leased
	Expires time.Time       // zero when not leased
	Epoch   int64           // 0, or 1 when leased
}

// CreateLease decides the lease of a run p creates at now: leased to
// p.Owner, as a claim would lease it, if p asks for it and the run is
// runnable now; otherwise pending and free, as every run once was. Both
// backends insert what it returns.
func CreateLease(p *store.CreateRunParams, now time.Time) NewRunLease {
	if p.Owner == "" || p.WakeAt.After(now) {
		return NewRunLease{Status: store.RunPending}
	}
	return NewRunLease{Status: store.RunRunning, Owner: p.Owner, Expires: now.Add(p.LeaseTTL), Epoch: 1}
}
