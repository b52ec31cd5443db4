package pgstore

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// Group commit.
//
// Every write (Append, Record, FinishWriter, CloseStream, CreateRun,
// OpenStream's creation, ClaimRuns) is an op handed to the store's
// committers. A committer takes
// the ops waiting, up to Config.MaxBatch, and applies them in one
// transaction of two pipelined round trips (see group.go): the first locks
// every run and stream the ops touch and reads their state, set-wise; the
// rules run here, op after op, on that state; the second writes everything,
// set-wise, and commits. So concurrent writers share one commit, and a group
// of a hundred ops costs about as many statements as one. An op that the
// rules (or a lost lease) refuse writes nothing and gets its own error; the
// others are not affected.

// opKind is what an op does.
type opKind uint8

const (
	opAppend opKind = iota
	opRecord
	opFinish
	opClose
	opCreateRun
	opOpenStream
	opClaim
)

// op is one write waiting for a committer.
type op struct {
	kind   opKind
	append *store.AppendParams
	now    int64 // the append's clock (nanoseconds)
	record *store.RecordParams
	evs    *eventArrays
	chg    *runChange
	finish *store.FinishWriterParams
	stream int64 // CloseStream's
	create *store.CreateRunParams
	open   *store.OpenStreamParams // with its Path set and Create true
	openCT string                  // its content type
	claim  *store.ClaimRunsParams  // with Now set

	// prevToken is the token of the group that last sent this op's commit
	// without an answer; 0 if none. The group checks the rows this op
	// writes for it: found, the op committed then, and prevRes is its
	// result.
	prevToken int64
	prevRes   *store.AppendResult
	prevFin   stream.Result

	// Outcome.
	computed    *store.AppendResult // the result computed in the last group, even if it failed
	computedFin stream.Result
	run         *store.Run          // create run
	created     bool                // create run
	info        *store.StreamInfo   // open stream
	claimed     []claimedRun        // claim
	res         *store.AppendResult // append
	result      stream.Result       // finish, close
	err         error
	committing  bool  // the group's commit was sent with this op in it
	token       int64 // that group's token

	state atomic.Int32
	done  chan struct{}
}

const (
	opQueued int32 = iota
	opTaken
	opCancelled
)

// exec runs o through the committers, retrying as Store.do does. Every op
// may be retried after a lost reply: the group it was in left its token on
// the rows it wrote, and the retry looks for it (prevToken).
func (s *Store) exec(ctx context.Context, o *op) error {
	return s.do(ctx, true, func(ctx context.Context, t *try) error {
		if t.n > 0 {
			if o.committing {
				o.prevToken, o.prevRes, o.prevFin = o.token, o.computed, o.computedFin
			}
			o.reset()
			o.state.Store(opQueued)
		}
		return s.submit(ctx, t, o)
	})
}

// submit hands o to the committers and waits for its outcome. If ctx ends
// before a committer took o, o is dropped; after that, submit waits for the
// outcome, so that an error means nothing was written (or, for a lost
// connection, that the outcome is unknown: t.committing).
func (s *Store) submit(ctx context.Context, t *try, o *op) error {
	o.done = make(chan struct{})
	s.opsMu.RLock()
	if s.opsClosed {
		s.opsMu.RUnlock()
		return store.ErrClosedStore
	}
	select {
	case s.ops <- o:
		s.opsMu.RUnlock()
	case <-ctx.Done():
		s.opsMu.RUnlock()
		return ctx.Err()
	}
	select {
	case <-o.done:
	case <-ctx.Done():
		if o.state.CompareAndSwap(opQueued, opCancelled) {
			return ctx.Err()
		}
		<-o.done
	}
	t.committing = o.committing
	return o.err
}

// committer takes ops until the queue is closed.
func (s *Store) committer() {
	max := s.cfg.MaxBatch
	batch := make([]*op, 0, max)
	for {
		o, ok := <-s.ops
		if !ok {
			return
		}
		batch = append(batch[:0], o)
		size := o.size()
	fill:
		for len(batch) < max && size < maxGroupBytes {
			select {
			case o, ok := <-s.ops:
				if !ok {
					break fill
				}
				batch = append(batch, o)
				size += o.size()
			default:
				break fill
			}
		}
		ops := batch[:0]
		for _, o := range batch {
			if o.state.CompareAndSwap(opQueued, opTaken) {
				ops = append(ops, o)
			}
		}
		if len(ops) > 0 {
			s.runGroup(ops)
		}
		clear(batch)
	}
}

// maxGroupBytes bounds the data one group sends: a group stops taking ops
// past it. (One append alone may carry store.MaxAppendBytes.)
const maxGroupBytes = 64 << 20

// size is about how many bytes o sends.
func (o *op) size() int {
	n := 256
	switch o.kind {
	case opAppend:
		for _, c := range o.append.Chunks {
			n += len(c) + 32
		}
	case opRecord:
		n += len(o.record.Output)
		for i := range o.record.Events {
			n += len(o.record.Events[i].Data) + len(o.record.Events[i].Error)
		}
	case opCreateRun:
		n += len(o.create.Input)
	}
	return n
}

// runGroup applies ops in one transaction and replies to each.
func (s *Store) runGroup(ops []*op) {
	err := s.tryGroup(ops)
	if err != nil && len(ops) > 1 && !retryable(err) {
		// The server refused the group for a reason a retry will not cure:
		// one op's data, most likely (text PostgreSQL will not store, say).
		// Nothing was written: each op is applied alone, so that only the
		// culprit fails.
		for _, o := range ops {
			o.reset()
			if err := s.tryGroup([]*op{o}); err != nil && o.err == nil {
				o.err = err
			}
			o.reply()
		}
		return
	}
	if err != nil {
		for _, o := range ops {
			if o.err == nil {
				o.err = err
			}
		}
	}
	for _, o := range ops {
		o.reply()
	}
}

// tryGroup applies ops in one transaction and wakes the readers of what it
// wrote; ops refused on their own keep their errors.
func (s *Store) tryGroup(ops []*op) error {
	s.stats.groups.Add(1)
	s.stats.ops.Add(int64(len(ops)))
	g := newGroup(s, ops)
	if err := g.run(); err != nil {
		return err
	}
	s.wroteHeads(g.wrote)
	return nil
}

// reset clears what a group did with o.
func (o *op) reset() {
	o.res, o.result, o.err, o.committing = nil, 0, nil, false
	o.run, o.created, o.info, o.claimed = nil, false, nil, nil
}

// reply hands o's outcome to its submitter.
func (o *op) reply() {
	o.computed, o.computedFin = o.res, o.result
	if o.err != nil {
		o.res = nil
	}
	close(o.done)
}

// closeOps stops taking ops and waits for the committers to finish the ones
// queued.
func (s *Store) closeOps() {
	s.opsMu.Lock()
	if s.opsClosed {
		s.opsMu.Unlock()
		return
	}
	s.opsClosed = true
	close(s.ops)
	s.opsMu.Unlock()
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
