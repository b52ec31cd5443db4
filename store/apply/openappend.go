package apply

import (
	"fmt"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// OpenAppend applies a store.OpenAppend to st, the stream the transaction
// has just created (empty, locked by the transaction): the start, if any,
// then the append, then the record that follows it (Then), if any. The append is checked against the fence the start
// leaves before the start saves anything, so the only refusals left after
// it are the append's own checks of its chunks, which a writer's first
// batch on an empty stream passes; the backends still undo the start if
// one comes (all or nothing); a Then the rules refuse (a lost lease) undoes
// the append the same way. Reads: AdvanceReads of p.Start and p.Then, and
// the fence of (p.RunID, p.Append.Writer) and the run.
func OpenAppend(tx Tx, p *store.OpenAppendParams, st *Stream, now time.Time) (*store.AppendResult, error) {
	if st.RunID != p.RunID || st.Head.NextOffset != 0 {
		return nil, fmt.Errorf("%w: open-append to stream %d, not a new stream of run %q", store.ErrInvalid, st.ID, p.RunID)
	}
	if s := p.Start; s != nil {
		f, err := tx.Fence(p.RunID, p.Append.Writer)
		if err != nil {
			return nil, err
		}
		if sf := s.Fence; sf != nil && sf.Writer == p.Append.Writer {
			f = max(f, sf.Attempt)
		}
		if p.Append.Attempt < f {
			return nil, &stream.FencedError{Attempt: p.Append.Attempt, Current: f}
		}
		if err := Advance(tx, s, now); err != nil {
			return nil, err
		}
	}
	a := p.Append
	a.StreamID = st.ID
	res, err := Append(tx, &a)
	if err != nil {
		return nil, err
	}
	if p.Then != nil {
		if err := Advance(tx, p.Then, now); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// OpenAppendExisting applies a store.OpenAppend to st, a stream that
// existed before it: the start alone (the caller appends by id, after); with
// a Then, the chunks by id, then the Then. The append's result is nil
// without a Then. A backend that cannot hold st in the transaction (it
// appeared after the transaction's locks) applies nothing, and the caller
// does it itself.
func OpenAppendExisting(tx Tx, p *store.OpenAppendParams, st *Stream, now time.Time) (*store.AppendResult, error) {
	if p.Start != nil {
		if err := Advance(tx, p.Start, now); err != nil {
			return nil, err
		}
	}
	if p.Then == nil {
		return nil, nil
	}
	a := p.Append
	a.StreamID = st.ID
	res, err := Append(tx, &a)
	if err != nil {
		return nil, err
	}
	if err := Advance(tx, p.Then, now); err != nil {
		return nil, err
	}
	return res, nil
}

// OpenAppendReads adds what OpenAppend(p) loads, but the stream, which the
// transaction creates.
func (r *Reads) OpenAppendReads(p *store.OpenAppendParams) {
	if p.Start != nil {
		r.AdvanceReads(p.Start)
	}
	if p.Then != nil {
		r.AdvanceReads(p.Then)
	}
	r.Runs = append(r.Runs, p.RunID)
	r.Fences = append(r.Fences, RunWriter{p.RunID, p.Append.Writer})
}
