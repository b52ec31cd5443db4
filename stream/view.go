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
	// n > 0: a run of n records whose data the filter let go (Hold):
	// offsets rec.Offset.., and, for a writer's, seqs rec.Seq.., of
	// rec.Writer; rec.Data is nil.
	n int64
}

// Committed computes the committed view incrementally from the live view.
// Push every record of the live view, in offset order, starting at any offset
// that a committed reader was told to resume from (NextOffset); it releases
// committed records in offset order.
//
// It is correct from any such offset because a record's fate is decided by
// records after it: commits and aborts only ever follow the data they settle.
// The zero value is ready to use at offset 0; use NewCommitted otherwise.
//
// What it holds is the records from the last stable offset on. With Hold,
// it keeps their data up to that many bytes; past it, it lets the data of
// the records it holds go and keeps their places only: a run of one
// writer's consecutive records is one entry, whatever its length. It then
// releases those records without their data: a data record with nil Data
// and nothing but its offset, for the reader to read again
// (store.CommittedReader does).
type Committed struct {
	q       []queued
	base    int              // absolute index of q[0]
	pending map[string][]int // writer -> absolute indexes of its pending data
	next    int64

	hold  int  // 0: keep all data
	held  int  // bytes held in q (heldCost)
	light bool // q's data was let go: new records join it without theirs
}

// NewCommitted returns a filter whose reader resumes at offset from.
func NewCommitted(from int64) *Committed { return &Committed{next: from} }

// Hold bounds the data the filter keeps of the records it holds (0: no
// bound). See Committed.
func (c *Committed) Hold(bytes int) { c.hold = bytes }

// NextOffset is where a committed reader resumes: the last stable offset
// (the first record still waiting for its writer's commit), or the offset
// after the last record pushed when nothing waits.
func (c *Committed) NextOffset() int64 {
	if len(c.q) > 0 {
		return c.q[0].rec.Offset
	}
	return c.next
}

// HeadWriter is the writer, and its attempt, whose record holds the view
// at its last stable offset (the first record waiting for its writer), if
// one does.
func (c *Committed) HeadWriter() (string, int64, bool) {
	if len(c.q) > 0 && c.q[0].state == 0 {
		return c.q[0].rec.Writer, c.q[0].rec.Attempt, true
	}
	return "", 0, false
}

// Pending reports how many data records wait for their writer.
func (c *Committed) Pending() int {
	n := 0
	for _, l := range c.pending {
		for _, i := range l {
			n += int(max(c.q[i-c.base].n, 1))
		}
	}
	return n
}

// Push takes the next record of the live view and calls emit for every record
// of the committed view it releases. Records emitted alias r's Data, or
// have none (Hold).
func (c *Committed) Push(r *Record, emit func(*Record)) {
	c.next = r.Offset + 1
	switch r.Kind {
	case KindData:
		if r.Attempt == 0 {
			if len(c.q) == 0 {
				emit(r)
				return
			}
			c.queue(r, 1)
			return
		}
		if c.pending == nil {
			c.pending = make(map[string][]int)
		}
		if !c.queue(r, 0) {
			c.pending[r.Writer] = append(c.pending[r.Writer], c.base+len(c.q)-1)
		}
		return
	case KindCommit:
		for _, i := range c.pending[r.Writer] {
			e := &c.q[i-c.base]
			if e.n > 0 {
				// The run's seqs below the count commit, the rest are void.
				if k := min(e.n, max(r.Count()-e.rec.Seq, 0)); k > 0 {
					e.n, e.state = k, 1
				} else {
					e.state = 2
				}
				continue
			}
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
			if e.n > 0 {
				// The run's seqs from the abort's on are void.
				if k := min(e.n, max(r.FromSeq()-e.rec.Seq, 0)); k > 0 {
					e.n = k
					keep = append(keep, i)
				} else {
					e.state = 2
				}
				continue
			}
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
	case KindReopen:
		// In order, as the close: the committed view goes on after it.
		if len(c.q) == 0 {
			emit(r)
			return
		}
		c.q = append(c.q, queued{rec: *r, state: 1})
	}
	c.drain(emit)
}

// queue holds data record r, in state; true if it joined the run it
// follows (light: one writer's consecutive records, or committed records
// of consecutive offsets), else it is a new entry.
func (c *Committed) queue(r *Record, state uint8) bool {
	if !c.light && c.hold > 0 && c.held+heldCost(r) > c.hold {
		c.letGo()
	}
	if !c.light {
		c.q = append(c.q, queued{rec: *r, state: state})
		c.held += heldCost(r)
		return false
	}
	if n := len(c.q); n > 0 {
		last := &c.q[n-1]
		if last.n > 0 && last.state == state && last.rec.Offset+last.n == r.Offset &&
			(state == 1 || last.rec.Writer == r.Writer && last.rec.Seq+last.n == r.Seq) {
			last.n++
			return true
		}
	}
	e := queued{rec: *r, state: state, n: 1}
	e.rec.Data, e.rec.Digest = nil, Digest{}
	c.q = append(c.q, e)
	return false
}

// LetGo lets the data of the records it holds go, as past Hold: they are
// released without it, to be read again. A reader that will wait a while
// (held at a writer still open) holds their places only.
func (c *Committed) LetGo() {
	if !c.light && len(c.q) > 0 {
		c.letGo()
	}
}

// heldCost is what holding r whole costs, counted against Hold: its data,
// its writer's name and the entry itself. Counting the data alone, a
// million one-byte records of a writer never committed were a million
// entries held whole (red team, round eight: 86 MiB a committed reader).
func heldCost(r *Record) int { return len(r.Data) + len(r.Writer) + entryCost }

// entryCost is about what one held entry costs beside its data and its
// writer's name.
const entryCost = 160

// letGo lets the data of every record held go: they are released without
// it, to be read again.
func (c *Committed) letGo() {
	for i := range c.q {
		e := &c.q[i]
		if e.n == 0 && e.rec.Kind == KindData {
			e.rec.Data, e.rec.Digest, e.n = nil, Digest{}, 1
		}
	}
	c.light, c.held = true, 0
}

func (c *Committed) drain(emit func(*Record)) {
	i := 0
	for ; i < len(c.q) && c.q[i].state != 0; i++ {
		e := &c.q[i]
		if e.state != 1 {
			continue
		}
		if e.n == 0 {
			c.held -= heldCost(&e.rec)
			emit(&e.rec)
			continue
		}
		// Released without data: only the offset is told, the reader
		// reads the record again.
		for k := range e.n {
			emit(&Record{Offset: e.rec.Offset + k, Kind: KindData})
		}
	}
	if i == 0 {
		return
	}
	for k := range i {
		if e := c.q[k]; e.state == 2 && e.n == 0 {
			c.held -= heldCost(&e.rec)
		}
	}
	c.base += i
	if i == len(c.q) {
		c.q = c.q[:0]
		c.light, c.held = false, 0
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
