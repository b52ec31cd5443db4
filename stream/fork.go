package stream

import "slices"

// ForkCopy is the rule of a fork's copy, shared by every store: a fork gets
// its source's records below the fork point, at the same offsets, without
// the source's close record; and every writer whose attempt is still open at
// the fork point gets an abort record in the fork, because its chunks can
// never be committed there.
//
// Feed it every decoded batch of the source below the fork point, in offset
// order, through Keep; then Tail gives the records that end the fork's copy.
// The zero value is ready to use.
type ForkCopy struct {
	// Tracked, if set, limits the writers that can be open to those it
	// accepts (a store may know which writers wrote with attempts; a fork's
	// inherited records are settled). Nil: every writer.
	Tracked func(writer string) bool
	open    map[string]*forkWriter
}

type forkWriter struct {
	attempt int64
	seqs    []int64 // data seqs neither committed nor voided
}

// Keep filters recs, one decoded batch of the source, in place: it drops the
// records at or past upTo and the close record, follows the writers, and
// returns what the fork keeps.
func (f *ForkCopy) Keep(recs []Record, upTo int64) []Record {
	keep := recs[:0]
	for i := range recs {
		r := &recs[i]
		if r.Offset >= upTo || r.Kind == KindClose {
			continue
		}
		f.track(r)
		keep = append(keep, *r)
	}
	return keep
}

func (f *ForkCopy) track(r *Record) {
	if f.Tracked != nil && !f.Tracked(r.Writer) {
		return
	}
	switch r.Kind {
	case KindData:
		if r.Attempt > 0 {
			if f.open == nil {
				f.open = make(map[string]*forkWriter)
			}
			ow := f.open[r.Writer]
			if ow == nil {
				ow = &forkWriter{}
				f.open[r.Writer] = ow
			}
			ow.attempt = r.Attempt
			ow.seqs = append(ow.seqs, r.Seq)
		}
	case KindCommit:
		delete(f.open, r.Writer)
	case KindAbort:
		if ow := f.open[r.Writer]; ow != nil {
			ow.seqs = slices.DeleteFunc(ow.seqs, func(q int64) bool { return q >= r.FromSeq() })
			if len(ow.seqs) == 0 {
				delete(f.open, r.Writer)
			}
		}
	}
}

// Tail returns the records that end the copy, from offset next: prefix (a
// fork's sub-offset record, if not nil; it must have offset next) and then
// one abort per writer still open, in writer order. It returns the fork's
// next offset after them.
func (f *ForkCopy) Tail(next int64, prefix *Record) ([]Record, int64) {
	var recs []Record
	if prefix != nil {
		recs = append(recs, *prefix)
		next = prefix.Offset + 1
	}
	ids := make([]string, 0, len(f.open))
	for w := range f.open {
		ids = append(ids, w)
	}
	slices.Sort(ids)
	for _, w := range ids {
		recs = append(recs, Record{Offset: next, Kind: KindAbort, Writer: w, Attempt: f.open[w].attempt})
		next++
	}
	return recs, next
}
