package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
	"github.com/weirhq/weir/stream"
)

// OpenAppend creates run p.RunID's stream p.Name with the first chunks of a
// step writer, after its start (store.StepAppender, apply.OpenAppend), in
// one group commit: the stream is inserted in the group's first round
// trip, and the group, holding the row it inserted, applies the rules to
// it as to any locked stream. A stream that exists gets the start alone.
func (s *Store) OpenAppend(ctx context.Context, p *store.OpenAppendParams) (*store.OpenAppendResult, error) {
	path, err := p.Check()
	if err != nil {
		return nil, fmt.Errorf("open-append: %w", err)
	}
	q := *p
	q.Append = *p.Append.WithDefaults(s.cfg.Now)
	now := sqlrow.Nanos(s.cfg.Now())
	o := &openAppendOp{
		p:    &q,
		open: &openStreamOp{path: path, runID: q.RunID, name: q.Name, contentType: store.ContentTypeOr(q.ContentType), now: now},
		now:  now,
	}
	if err := s.exec(ctx, o); err != nil {
		var ab *abortGroup
		if errors.As(err, &ab) {
			err = ab.err
		}
		return nil, fmt.Errorf("open-append: %w", err)
	}
	si := o.res.Stream
	s.setStreamRun(si.ID, si.RunID)
	if !o.res.Created {
		s.known.see(head{id: si.ID, next: si.NextOffset, closed: si.Closed, known: true})
	}
	return o.res, nil
}

// openAppendOp is an OpenAppend: its stream's creation is planned as an
// openStreamOp's; the start's retry detection is an Advance's (the run's
// token), the append's needs none (a retry after a committed try finds the
// stream made, and its caller's append by id is a retransmit).
type openAppendOp struct {
	opBase
	p    *store.OpenAppendParams // checked, with its defaults
	open *openStreamOp
	now  int64
	res  *store.OpenAppendResult
}

func (o *openAppendOp) plan(g *group, r *readPlan) {
	r.OpenAppendReads(o.p)
	r.opens = append(r.opens, o.open)
}

func (o *openAppendOp) apply(g *group) error {
	if err := o.open.apply(g); err != nil {
		return err
	}
	si := o.open.info
	start := o.p.Start
	if run := g.runs[o.p.RunID]; run != nil {
		if o.prevToken != 0 && run.dbToken == o.prevToken && o.p.Start != nil {
			start = nil // the lost try committed the start (and made the stream)
		} else if o.prevToken != 0 && run.dbToken == o.prevToken {
			// The lost try committed all of it: the stream, the chunks and
			// the record that followed them.
			o.res = &store.OpenAppendResult{Stream: si, Created: true, Append: &store.AppendResult{}}
			return nil
		} else if start != nil || o.p.Then != nil {
			run.recorded = true
		}
	}
	now := sqlrow.Time(o.now)
	if !g.created[si.Path] {
		// It exists (or another op of the group took the creation): the
		// start alone, and the caller appends by id. With a Then, the
		// chunks by id and the Then, if the group holds the stream (a
		// Then's finish locks every stream of its run); if not (it was
		// made after the locks), nothing.
		o.res = &store.OpenAppendResult{Stream: si}
		st := g.streams[si.ID]
		if o.p.Then != nil && st == nil {
			return nil
		}
		q := *o.p
		q.Start = start
		if st == nil {
			st = &gStream{Stream: apply.Stream{ID: si.ID, RunID: si.RunID}} // the start alone reads nothing of it
		}
		ar, err := apply.OpenAppendExisting(g, &q, &st.Stream, now)
		if err != nil && q.Then != nil {
			return &abortGroup{err} // the chunks, or a part of the Then, may be in the group's state
		}
		o.res.Append = ar
		return err
	}
	delete(g.created, si.Path) // one op appends to the new stream
	st := &gStream{Stream: apply.Stream{ID: si.ID, RunID: si.RunID, Head: stream.Head{}, LastAccess: si.LastAccess, Bytes: si.DataBytes}}
	g.streams[si.ID] = st
	g.byRun[si.RunID] = append(g.byRun[si.RunID], st)
	slices.SortFunc(g.byRun[si.RunID], func(a, b *gStream) int { return int(a.ID - b.ID) })
	q := *o.p
	q.Start = start
	ar, err := apply.OpenAppend(g, &q, &st.Stream, now)
	if err != nil {
		// The row this group inserted, and whatever the start saved, must
		// not be written: the whole group is tried again, each op alone.
		return &abortGroup{err}
	}
	o.res = &store.OpenAppendResult{Stream: si, Created: true, Append: ar}
	return nil
}

func (o *openAppendOp) size() int {
	n := 512
	for _, c := range o.p.Append.Chunks {
		n += len(c) + 32
	}
	return n
}

func (o *openAppendOp) clear(bool) { o.res = nil; o.open.clear(false) }

// abortGroup is an op's refusal that its group must not commit around: the
// op changed the group's state before it was refused (an open-append's
// insert and start). The group fails; runGroup then applies each op alone,
// and this one, alone, rolls back.
type abortGroup struct{ err error }

func (e *abortGroup) Error() string { return e.err.Error() }
func (e *abortGroup) Unwrap() error { return e.err }
