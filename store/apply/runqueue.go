package apply

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
)

// QueueTx is what queued runs (store.CreateRunParams.Queue) need of a
// transaction: their queue's limiter row and the runs of the queue. The
// rules (what a dedupe folds, who is admitted) are here and in package
// limit; a backend holds only the SQL.
type QueueTx interface {
	LimiterTx
	// TryLockLimiter is LockLimiter if no other transaction holds the
	// limiter's row; if one does, it returns found true and locked false
	// at once, without waiting (on a store with one writer, it is
	// LockLimiter).
	TryLockLimiter(name string) (c *limit.Config, state []byte, found, locked bool, err error)
	// FindCreated returns the run at p.ID, nil if there is none, as a
	// create reads it (sqlrow.FoundRunCols): of its data what p asks
	// (FoundBound, FoundCompared), with what the read says of its input.
	FindCreated(p *store.CreateRunParams) (*store.Run, Found, error)
	// DedupeRun returns the run of queue with dedupe key that is pending
	// or running, nil if none. Its Input and Output may be left out
	// (nil): a fold replaces the input without reading it, and a backend
	// with one writer reads the data of a run it returns after its commit
	// (red team, round nineteen: a dedupe hit on a run with a 15 MiB
	// input read it with the writer held).
	DedupeRun(queue, dedupe string) (*store.Run, error)
	// InsertQueuedRun inserts p's run, queued, runnable from wake.
	InsertQueuedRun(p *store.CreateRunParams, wake, now time.Time) (*store.Run, error)
	// FoldRun gives queued run id input and wake (a debounced start).
	FoldRun(id string, input []byte, wake, now time.Time) (*store.Run, error)
	// ReadyQueues returns the queues with queued runs of workflows and
	// versions (nil: any) that can start at now: awake, no cancel asked.
	ReadyQueues(workflows, versions []string, now time.Time) ([]string, error)
	// QueueHeads returns queue's queued runs of workflows and versions
	// (nil: any) that can start at now, each key's first
	// store.HeadsPerKey by priority then creation, at most
	// store.MaxQueueHeads.
	QueueHeads(queue string, workflows, versions []string, now time.Time) ([]*store.Run, error)
	// InFlight returns which of runs ids are pending or running.
	InFlight(ids []string) (map[string]bool, error)
	// AdmitRun marks queued run id admitted and leases it to owner until
	// expires, as a claim would (status running, its epoch up by one).
	// Its Input and Output may be left out (nil), as DedupeRun's: a
	// backend with one writer reads them after its commit.
	AdmitRun(id, owner string, expires, now time.Time) (*store.Run, error)
}

// QueueRun creates p's run in queue p.Queue (p checked), or returns the
// run it is folded into: the run at p.ID, or the queue's run with p.Dedupe
// that is queued or running. A debounced start (p.Debounce) folded into a
// run still queued gives it p's input and moves its start to now +
// p.Debounce.
func QueueRun(tx QueueTx, p *store.CreateRunParams, now time.Time) (*store.Run, bool, error) {
	if run, f, err := tx.FindCreated(p); err != nil || run != nil {
		if err == nil {
			err = FoundConflict(run, p, f)
		}
		return run, false, err
	}
	// A dedupe decides on the queue's runs under its limiter's lock. A
	// start without one takes the lock only if it is free, to be admitted
	// at once (admitAtCreate): under contention it is queued without it,
	// for an admission that takes a batch, and starts do not wait on
	// each other.
	var c *limit.Config
	var b []byte
	var found, locked bool
	var err error
	if p.Dedupe != "" {
		c, b, found, err = tx.LockLimiter(p.Queue)
		locked = found
	} else {
		c, b, found, locked, err = tx.TryLockLimiter(p.Queue)
	}
	if err != nil {
		return nil, false, err
	} else if !found {
		return nil, false, fmt.Errorf("%w: no queue %q: a queue is a limiter (set it first)", store.ErrNotFound, p.Queue)
	}
	wake := p.WakeAt
	if p.Debounce > 0 && wake.Before(now.Add(p.Debounce)) {
		wake = now.Add(p.Debounce)
	}
	if p.Dedupe != "" {
		run, err := tx.DedupeRun(p.Queue, p.Dedupe)
		if err != nil {
			return nil, false, err
		}
		if run != nil {
			if run.Workflow != p.Workflow {
				return nil, false, fmt.Errorf("%w: dedupe key %q of queue %q is run %q's, of workflow %q, not %q",
					store.ErrRunConflict, p.Dedupe, p.Queue, run.ID, run.Workflow, p.Workflow)
			}
			if p.Debounce > 0 && run.Queued {
				if p.DebounceMax > 0 {
					// A burst postpones the run no further than its cap.
					wake = maxTime(now, minTime(wake, run.CreatedAt.Add(p.DebounceMax)))
				}
				run, err = tx.FoldRun(run.ID, p.Input, wake, now)
			}
			return run, false, err
		}
	}
	run, err := tx.InsertQueuedRun(p, wake, now)
	if err != nil || p.Owner == "" || wake.After(now) || !locked {
		return run, err == nil, err
	}
	admitted, err := admitAtCreate(tx, c, b, run, p, now)
	return admitted, err == nil, err
}

// runHoldsChecked is how many run holds a queue's state keeps before a
// start admitted at its creation looks which of their runs ended.
const runHoldsChecked = 64

// admitAtCreate admits run, just queued, at once and leases it to p.Owner
// if its queue's line is empty and its bounds have room: a start in a
// queue that does not bind is one transaction, as an unqueued start is.
// Otherwise it stays queued, for AdmitRuns.
func admitAtCreate(tx QueueTx, c *limit.Config, b []byte, run *store.Run, p *store.CreateRunParams, now time.Time) (*store.Run, error) {
	heads, err := tx.QueueHeads(p.Queue, nil, nil, now)
	if err != nil || len(heads) != 1 || heads[0].ID != run.ID {
		return run, err // others wait: they go first
	}
	st0, err := DecodeLimiterState(b)
	if err != nil {
		return nil, err
	}
	cand := []limit.Candidate{{Holder: limit.RunHolder(run.ID), Key: run.QueueKey, Priority: run.Priority, Since: run.CreatedAt}}
	// Counting every run hold as in flight, the room there is is room
	// there is: the look at which runs ended (a query over them all) is
	// saved for when it matters, a queue that would be full, or holds
	// piling up (kept to runHoldsChecked).
	a, st := limit.Admit(c, st0, cand, func(string) bool { return true }, now, 1)
	if len(a.Runs) == 0 || len(limit.RunHolds(st)) > runHoldsChecked {
		var ids []string
		for _, h := range limit.RunHolds(st0) {
			ids = append(ids, strings.TrimPrefix(h, "run:"))
		}
		live, err := tx.InFlight(ids)
		if err != nil {
			return nil, err
		}
		a, st = limit.Admit(c, st0, cand, func(h string) bool { return live[strings.TrimPrefix(h, "run:")] }, now, 1)
	}
	if len(a.Runs) == 0 {
		return run, nil
	}
	nb, err := EncodeLimiterState(st)
	if err != nil {
		return nil, err
	}
	if err := tx.SaveLimiter(c, nb); err != nil {
		return nil, err
	}
	admitted, err := tx.AdmitRun(run.ID, p.Owner, now.Add(p.LeaseTTL), now)
	if err == nil && admitted.Input == nil {
		// Left out (AdmitRun): the run was inserted now, with p's input
		// and no output yet.
		admitted.Input = run.Input
	}
	return admitted, err
}

// AdmitRuns applies an AdmitRuns call (p checked, p.Now set): queue by
// queue, in name order, limit.Admit over each one's heads, until p.Limit
// runs are admitted.
func AdmitRuns(tx QueueTx, p *store.AdmitRunsParams) ([]*store.Run, error) {
	queues, err := tx.ReadyQueues(p.Workflows, p.Versions, p.Now)
	if err != nil {
		return nil, err
	}
	slices.Sort(queues)
	var out []*store.Run
	for _, q := range queues {
		room := p.Limit - len(out)
		if r, ok := p.Room[q]; ok {
			room = min(room, r)
		}
		if room <= 0 {
			continue
		}
		c, b, found, err := tx.LockLimiter(q)
		if err != nil {
			return nil, err
		}
		if !found {
			continue // runs of a queue that is gone wait until it is set again
		}
		st, err := DecodeLimiterState(b)
		if err != nil {
			return nil, err
		}
		heads, err := tx.QueueHeads(q, p.Workflows, p.Versions, p.Now)
		if err != nil {
			return nil, err
		}
		cands := make([]limit.Candidate, len(heads))
		for i, r := range heads {
			cands[i] = limit.Candidate{Holder: limit.RunHolder(r.ID), Key: r.QueueKey, Priority: r.Priority, Since: r.CreatedAt}
		}
		var ids []string
		for _, h := range limit.RunHolds(st) {
			ids = append(ids, strings.TrimPrefix(h, "run:"))
		}
		live, err := tx.InFlight(ids)
		if err != nil {
			return nil, err
		}
		a, st := limit.Admit(c, st, cands, func(h string) bool { return live[strings.TrimPrefix(h, "run:")] }, p.Now, room)
		for _, x := range a.Runs {
			run, err := tx.AdmitRun(strings.TrimPrefix(x.Holder, "run:"), p.Owner, p.Now.Add(p.LeaseTTL), p.Now)
			if err != nil {
				return nil, err
			}
			out = append(out, run)
		}
		// A poll that changed nothing (a full queue) writes nothing.
		nb, err := EncodeLimiterState(st)
		if err != nil {
			return nil, err
		}
		if len(a.Runs) > 0 || !bytes.Equal(nb, b) {
			if err := tx.SaveLimiter(c, nb); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
