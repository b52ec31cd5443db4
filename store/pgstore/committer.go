package pgstore

import (
	"context"
	"fmt"

	"github.com/weirhq/weir/store/internal/queue"
)

// Group commit.
//
// Every write (Append, Advance, FinishWriter, CloseStream, CreateRun,
// OpenStream's creation, ClaimRuns) is an op handed to the store's
// committers. A committer takes the ops waiting, up to Config.MaxBatch, and
// applies them in one transaction of two pipelined round trips (group.go):
// the first locks every run and stream the ops touch and reads their state,
// set-wise (group_read.go); the rules of package apply run here, op after
// op, on that state; the second writes everything, set-wise, and commits
// (group_write.go). So concurrent writers share one commit, and a group of a
// hundred ops costs about as many statements as one. An op that the rules
// refuse changed nothing (apply's refusal contract) and gets its own error;
// the others are not affected.

// op is one write waiting for a committer. Each kind is a type of its own
// (ops_streams.go, ops_runs.go): adding one touches nothing else.
type op interface {
	base() *opBase
	// plan adds to the group's first round trip what the op reads, locks
	// and creates.
	plan(g *group, r *readPlan)
	// apply applies the op to the group's state, after the first round
	// trip; an error is the op's own and leaves the state as it was.
	apply(g *group) error
	// size is about how many bytes the op sends.
	size() int
	// clear forgets the outcome of a try before the next; keep says that
	// try's commit was sent, so its result is kept (as the op's previous
	// result) for the next try to return if it finds the try committed.
	clear(keep bool)
}

// opBase is what every op carries through the committers.
type opBase struct {
	// prevToken is the token of the group that last sent this op's commit
	// without an answer; 0 if none. The group checks the rows the op
	// writes for it: found, the op committed then.
	prevToken  int64
	err        error
	committing bool  // the group's commit was sent with this op in it
	token      int64 // that group's token
}

func (b *opBase) base() *opBase { return b }

// exec runs o through the committers, retrying as Store.do does. Every op
// may be retried after a lost reply: the group it was in left its token on
// the rows it wrote, and the retry looks for it (prevToken).
func (s *Store) exec(ctx context.Context, o op) error {
	b := o.base()
	return s.do(ctx, true, func(ctx context.Context, t *try) error {
		if t.n > 0 {
			o.clear(b.committing)
			if b.committing {
				b.prevToken = b.token
			}
			b.err, b.committing = nil, false
		}
		// Package queue's contract: an error means nothing was written, or
		// for a lost connection that the outcome is unknown (committing).
		if err := s.ops.Submit(ctx, &queue.Item[op]{Op: o}); err != nil {
			return err
		}
		t.committing = b.committing
		return b.err
	})
}

// committer takes ops until the queue is closed.
//
// Groups of small ops (a run's records, a step's first chunks) run one at
// a time: the committers take turns, each taking what queued while the
// other's group was in flight, so groups are as large as the load makes
// them. Two groups at once would each be half as large and cost as many
// statements, each, as one: on a short run's path the statements are the
// cost (one committer at a time did 1.5× the runs per second of two in
// parallel, at 55 % of the statements per run, `weir bench dbos-like`). A
// group that carries much data (appends of large batches) runs beside
// the others, so that their transfers and WAL flushes overlap.
func (s *Store) committer() {
	var batch []*queue.Item[op]
	size := func(o op) int { return o.size() }
	for {
		var ok bool
		if batch, ok = s.ops.Next(batch, s.cfg.MaxBatch, size, maxGroupBytes); !ok {
			return
		}
		small := true
		if n := 0; true {
			for _, it := range batch {
				n += it.Op.size()
			}
			small = n < parallelGroupBytes
		}
		if small {
			s.smallGroups.Lock()
			batch = s.ops.More(batch, s.cfg.MaxBatch, size, maxGroupBytes)
		}
		ops := make([]op, len(batch))
		for i, it := range batch {
			ops[i] = it.Op
		}
		s.runGroup(ops)
		if small {
			s.smallGroups.Unlock()
		}
		for _, it := range batch {
			it.Done()
		}
		clear(batch)
	}
}

// parallelGroupBytes is the data past which a group runs beside the others
// (committer).
const parallelGroupBytes = 256 << 10

// maxGroupBytes bounds the data one group sends: a group stops taking ops
// past it. (One append alone may carry store.MaxAppendBytes.) A group's
// data is in memory three times while it is sent: its encoded batches, the
// driver's encoding of them as parameters, and its send buffer, each grown
// by appending; at 64 MiB two committers took ~400 MiB beside the bodies.
// Past 8 MiB a group costs more round trips of data than of latency.
const maxGroupBytes = 8 << 20

// runGroup applies ops in one transaction and sets each op's outcome.
func (s *Store) runGroup(ops []op) {
	err := s.tryGroup(ops)
	if err != nil && len(ops) > 1 && !retryable(err) {
		// The server refused the group for a reason a retry will not cure:
		// one op's data, most likely (text PostgreSQL will not store, say).
		// Nothing was written: each op is applied alone, so that only the
		// culprit fails.
		for _, o := range ops {
			b := o.base()
			o.clear(false)
			b.err, b.committing = nil, false
			if err := s.tryGroup([]op{o}); err != nil && b.err == nil {
				b.err = err
			}
		}
		return
	}
	for _, o := range ops {
		if b := o.base(); err != nil && b.err == nil {
			b.err = err
		}
	}
}

// tryGroup applies ops in one transaction and wakes the readers of what it
// wrote; ops refused on their own keep their errors.
func (s *Store) tryGroup(ops []op) error {
	s.stats.groups.Add(1)
	s.stats.ops.Add(int64(len(ops)))
	g := newGroup(s, ops)
	if err := g.run(); err != nil {
		return err
	}
	// The records first: a reader the heads wake reads them from memory.
	for _, id := range g.begins {
		s.tail.Begin(id, 0)
	}
	for _, si := range g.watched {
		s.created.Put(si)
	}
	s.tail.Apply(g.tails, nil, s.hub.Has)
	s.wroteHeads(g.wrote)
	s.wakeRuns(g.runWakes)
	return nil
}

// closeOps stops taking ops and waits for the committers to finish the ones
// queued.
func (s *Store) closeOps() {
	s.ops.Close()
	s.committers.Wait()
}

// panicErr turns a panic in a group (a bug, or a database the rules cannot
// make sense of) into the group's error, so that no committer dies.
func panicErr(p any) error {
	return fmt.Errorf("pgstore: internal error: %v", p)
}

// Stats counts the store's group commits since it opened.
type Stats struct {
	Groups int64 // transactions of the committers
	Ops    int64 // writes they applied: Ops/Groups is the mean group size
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{Groups: s.stats.groups.Load(), Ops: s.stats.ops.Load()}
}
