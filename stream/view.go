package stream

// View selects which records a reader sees.
type View uint8

// Views.
const (
	// Live is every record in offset order, as written: data of open attempts,
	// aborted data, and the abort, commit and close records themselves.
	Live View = 0
	// CommittedView is the data of committed writers only, each chunk once, in
	// offset order, never past the last stable offset; and the close record.
	CommittedView View = 1
)

// String returns "live" or "committed".
func (v View) String() string {
	if v == CommittedView {
		return "committed"
	}
	return "live"
}

// ParseView parses "live" or "committed"; "" is Live.
func ParseView(s string) (View, bool) {
	switch s {
	case "", "live":
		return Live, true
	case "committed":
		return CommittedView, true
	}
	return 0, false
}

type queued struct {
	rec   Record
	state uint8 // 0 pending, 1 committed, 2 void
}

// Committed computes the committed view incrementally from the live view.
// Push every record of the live view, in offset order, starting at any offset
// that a committed reader was told to resume from (NextOffset); it releases
// committed records in offset order.
//
// It is correct from any such offset because a record's fate is decided by
// records after it: commits and aborts only ever follow the data they settle.
// The zero value is ready to use at offset 0; use NewCommitted otherwise.
type Committed struct {
	q       []queued
	base    int              // absolute index of q[0]
	pending map[string][]int // writer -> absolute indexes of its pending data
	next    int64
}

// NewCommitted returns a filter whose reader resumes at offset from.
func NewCommitted(from int64) *Committed { return &Committed{next: from} }

// NextOffset is where a committed reader resumes: the last stable offset
// (the first record still waiting for its writer's commit), or the offset
// after the last record pushed when nothing waits.
func (c *Committed) NextOffset() int64 {
	if len(c.q) > 0 {
		return c.q[0].rec.Offset
	}
	return c.next
}

// Pending reports how many data records wait for their writer.
func (c *Committed) Pending() int {
	n := 0
	for _, l := range c.pending {
		n += len(l)
	}
	return n
}

// Push takes the next record of the live view and calls emit for every record
// of the committed view it releases. Records emitted alias r's Data.
func (c *Committed) Push(r *Record, emit func(*Record)) {
	c.next = r.Offset + 1
	switch r.Kind {
	case KindData:
		if r.Attempt == 0 {
			if len(c.q) == 0 {
				emit(r)
				return
			}
			c.q = append(c.q, queued{rec: *r, state: 1})
			return
		}
		if c.pending == nil {
			c.pending = make(map[string][]int)
		}
		c.pending[r.Writer] = append(c.pending[r.Writer], c.base+len(c.q))
		c.q = append(c.q, queued{rec: *r})
		return
	case KindCommit:
		for _, i := range c.pending[r.Writer] {
			e := &c.q[i-c.base]
			if e.rec.Seq < r.Count() {
				e.state = 1
			} else {
				e.state = 2
			}
		}
		delete(c.pending, r.Writer)
	case KindAbort:
		l := c.pending[r.Writer]
		keep := l[:0]
		for _, i := range l {
			e := &c.q[i-c.base]
			if e.rec.Seq >= r.FromSeq() {
				e.state = 2
			} else {
				keep = append(keep, i)
			}
		}
		if len(keep) == 0 {
			delete(c.pending, r.Writer)
		} else {
			c.pending[r.Writer] = keep
		}
	case KindClose:
		// Writers still open at the close never commit.
		for w, l := range c.pending {
			for _, i := range l {
				c.q[i-c.base].state = 2
			}
			delete(c.pending, w)
		}
		if len(c.q) == 0 {
			emit(r)
			return
		}
		c.q = append(c.q, queued{rec: *r, state: 1})
	}
	c.drain(emit)
}

func (c *Committed) drain(emit func(*Record)) {
	i := 0
	for ; i < len(c.q) && c.q[i].state != 0; i++ {
		if c.q[i].state == 1 {
			emit(&c.q[i].rec)
		}
	}
	if i == 0 {
		return
	}
	c.base += i
	if i == len(c.q) {
		c.q = c.q[:0]
		return
	}
	// Re-slice instead of moving the rest forward: with many writers waiting,
	// a copy per release is quadratic. Compact once the dead prefix dominates.
	c.q = c.q[i:]
	if cap(c.q) > 4*len(c.q)+64 {
		c.q = append([]queued(nil), c.q...)
	}
}

// Voids tells a live reader which data records it already saw are now void.
// Push every record in offset order; an abort or close returns the offsets
// voided among the records this tracker saw. The zero value is ready to use.
type Voids struct {
	seen map[string][]seen // writer -> its open data records, in order
}

type seen struct{ seq, offset int64 }

// Push records r and returns the offsets it voids, if any.
func (v *Voids) Push(r *Record) []int64 {
	switch r.Kind {
	case KindData:
		if r.Attempt > 0 {
			if v.seen == nil {
				v.seen = make(map[string][]seen)
			}
			v.seen[r.Writer] = append(v.seen[r.Writer], seen{r.Seq, r.Offset})
		}
	case KindCommit:
		delete(v.seen, r.Writer)
	case KindAbort:
		var out []int64
		l := v.seen[r.Writer]
		keep := l[:0]
		for _, e := range l {
			if e.seq >= r.FromSeq() {
				out = append(out, e.offset)
			} else {
				keep = append(keep, e)
			}
		}
		if len(l) > 0 {
			v.seen[r.Writer] = keep
		}
		return out
	case KindClose:
		var out []int64
		for w, l := range v.seen {
			for _, e := range l {
				out = append(out, e.offset)
			}
			delete(v.seen, w)
		}
		return out
	}
	return nil
}
