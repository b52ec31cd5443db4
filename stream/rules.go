package stream

import "fmt"

// Head is the per-stream state the rules need.
type Head struct {
	NextOffset int64 // the offset the next record gets
	Closed     bool
}

// Status is where a writer stands on one stream.
type Status uint8

// Writer statuses.
const (
	WriterOpen      Status = 0 // writing; its live records wait for a commit or abort
	WriterCommitted Status = 1 // its attempt committed: finished
	WriterAborted   Status = 2 // aborted for good: finished
)

// String returns the status's lower-case name.
func (s Status) String() string {
	switch s {
	case WriterOpen:
		return "open"
	case WriterCommitted:
		return "committed"
	case WriterAborted:
		return "aborted"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Entry locates one live data record of a writer.
type Entry struct {
	Offset int64
	Digest Digest
}

// Writer is the dedupe state of one writer on one stream.
//
// Attempt, Next, Diverged and Status are what a store must persist: adopted
// chunks leave no record, so Next cannot be derived from the log. Live can:
// [Writer.Replay] rebuilds it from the writer's data and abort records, so a
// store may keep it in a cache and rebuild it on a miss.
type Writer struct {
	ID       string
	Attempt  int64 // the current attempt A
	Next     int64 // next(A): the seq the current attempt writes next
	Diverged bool  // the current attempt wrote other bytes than an earlier one
	Status   Status
	// Live[q] is the writer's live data record with seq q. It is always a
	// prefix: len(Live) >= Next.
	Live []Entry
}

// Outcome says what an append did with one chunk.
type Outcome uint8

// Append outcomes.
const (
	Appended   Outcome = 1 // a new data record
	Adopted    Outcome = 2 // an earlier attempt's identical record stands for it
	Retransmit Outcome = 3 // the same attempt sent it before
)

// String returns the outcome's lower-case name.
func (o Outcome) String() string {
	switch o {
	case Appended:
		return "appended"
	case Adopted:
		return "adopted"
	case Retransmit:
		return "retransmit"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Ack is the reply for one chunk.
type Ack struct {
	Offset  int64
	Outcome Outcome
}

// AppendRequest is one all-or-nothing append by one writer.
type AppendRequest struct {
	Attempt  int64    // 0: committed at append (no commit record needed)
	FirstSeq int64    // seq of Chunks[0]
	Chunks   [][]byte // the chunks; records reference them, nothing is copied
	// Fence is the lowest attempt the engine still lets write: the engine raises
	// it when a step's next attempt begins, so a zombie is fenced even before
	// the new attempt wrote anything here. 0 means no fence.
	Fence int64
	// Late lets the attempt a writer committed go on writing after its
	// commit: chunks at seq next(a) on are appended and committed at once
	// (data records, then one commit record). A Vercel Workflow step's
	// stream can outlive the step: the runtime pipes a returned stream
	// after the step completed (docs/world.md). Other writers leave it off:
	// a chunk after the commit is refused (ErrWriterFinished).
	Late bool
	// MaxBytes, if positive, is the stream's limit of data bytes: a request
	// whose new data records (not its retransmits, not the chunks an
	// earlier attempt's records adopt) would take Bytes past it is refused
	// with *FullError. A retransmit is acknowledged however full the
	// stream is.
	MaxBytes int64
	// Bytes is the data bytes the stream holds, for MaxBytes.
	Bytes int64
}

// room refuses add new data bytes that would take the stream past the
// request's limit.
func (req *AppendRequest) room(add int64) error {
	if req.MaxBytes > 0 && req.Bytes+add > req.MaxBytes {
		return &FullError{Limit: req.MaxBytes, Holds: req.Bytes, Adding: add}
	}
	return nil
}

// DataBytes is the data bytes recs hold: what a stream's byte count
// (AppendRequest.Bytes) grows by when they are written.
func DataBytes(recs []Record) int64 {
	var n int64
	for i := range recs {
		if recs[i].Kind == KindData {
			n += int64(len(recs[i].Data))
		}
	}
	return n
}

// chunkBytes is the bytes of chunks.
func chunkBytes(chunks [][]byte) int64 {
	var n int64
	for _, c := range chunks {
		n += int64(len(c))
	}
	return n
}

// Append applies one append request of writer w to the stream h and returns
// one ack per chunk and the records to write, in offset order. w nil is an
// anonymous append: every chunk is appended and committed at once.
//
// On error nothing is changed. Errors: ErrClosed, *FencedError,
// ErrWriterFinished, ErrMode, *GapError, *ConflictError, *FullError.
func Append(h *Head, w *Writer, req *AppendRequest) ([]Ack, []Record, error) {
	if w == nil {
		return appendAnonymous(h, req)
	}
	digests := make([]Digest, len(req.Chunks))
	for i, c := range req.Chunks {
		digests[i] = Sum(c)
	}
	a := req.Attempt
	// 1. Closed: only an exact retransmit, by the attempt it was acknowledged
	// to, is acknowledged.
	if h.Closed {
		return retransmitsOnly(w, req, digests, func(q int64) bool { return a != w.Attempt || q < 0 || q >= w.Next }, nil)
	}
	// 2. Zombies.
	if cur := max(w.Attempt, req.Fence); a < cur {
		return nil, nil, &FencedError{Attempt: a, Current: cur}
	}
	if a > 0 && w.Attempt == 0 && len(w.Live) > 0 {
		return nil, nil, fmt.Errorf("%w: writer %q wrote with attempt %d, got attempt %d", ErrMode, w.ID, w.Attempt, a)
	}
	if w.Status != WriterOpen {
		return appendFinished(h, w, req, digests)
	}
	return appendOpen(h, w, req, digests)
}

// appendAnonymous appends every chunk of an anonymous append, committed at
// once.
func appendAnonymous(h *Head, req *AppendRequest) ([]Ack, []Record, error) {
	if h.Closed {
		return nil, nil, ErrClosed
	}
	if err := req.room(chunkBytes(req.Chunks)); err != nil {
		return nil, nil, err
	}
	acks := make([]Ack, len(req.Chunks))
	recs := make([]Record, len(req.Chunks))
	for i, c := range req.Chunks {
		recs[i] = Record{Offset: h.NextOffset, Kind: KindData, Digest: Sum(c), Data: c}
		acks[i] = Ack{Offset: h.NextOffset, Outcome: Appended}
		h.NextOffset++
	}
	return acks, recs, nil
}

// retransmitsOnly acknowledges req when every chunk is an exact
// retransmit of w's live record at its seq; refused(q) says a seq no
// retransmit may have, refused with ErrClosed, or with past(q) if it is
// not nil.
func retransmitsOnly(w *Writer, req *AppendRequest, digests []Digest, refused func(q int64) bool, past func(q int64) error) ([]Ack, []Record, error) {
	acks := make([]Ack, len(digests))
	for i, d := range digests {
		q := req.FirstSeq + int64(i)
		if refused(q) {
			if past != nil {
				return nil, nil, past(q)
			}
			return nil, nil, ErrClosed
		}
		e := w.Live[q]
		if e.Digest != d {
			if past != nil {
				return nil, nil, &ConflictError{Seq: q, Offset: e.Offset, Want: e.Digest, Got: d}
			}
			return nil, nil, ErrClosed
		}
		acks[i] = Ack{Offset: e.Offset, Outcome: Retransmit}
	}
	return acks, nil, nil
}

// appendFinished is an append by a committed or aborted writer: it
// acknowledges exact retransmits and nothing else, but for a late append
// (AppendRequest.Late) past a committed attempt's end.
func appendFinished(h *Head, w *Writer, req *AppendRequest, digests []Digest) ([]Ack, []Record, error) {
	a, s, n := req.Attempt, req.FirstSeq, int64(len(digests))
	if w.Status == WriterAborted || a > w.Attempt {
		return nil, nil, fmt.Errorf("%w: writer %q is %s at attempt %d", ErrWriterFinished, w.ID, w.Status, w.Attempt)
	}
	if s < 0 || (req.Late && s > w.Next) {
		return nil, nil, &GapError{Expected: w.Next, Got: s}
	}
	if req.Late && w.Status == WriterCommitted && s+n > w.Next {
		return appendLate(h, w, req, digests)
	}
	return retransmitsOnly(w, req, digests, func(q int64) bool { return q >= w.Next }, func(q int64) error {
		return fmt.Errorf("%w: writer %q committed %d chunks, got seq %d", ErrWriterFinished, w.ID, w.Next, q)
	})
}

// appendOpen is an append by an open writer: retransmits within the
// attempt first, then chunks adopted while they match the earlier
// attempts' live records, then, from the first difference, one abort and
// the new chunks appended.
func appendOpen(h *Head, w *Writer, req *AppendRequest, digests []Digest) ([]Ack, []Record, error) {
	n, a, s := len(digests), req.Attempt, req.FirstSeq
	acks := make([]Ack, n)
	// 3. A higher attempt begins (applied below, once nothing can fail).
	next := w.Next
	begins := a > w.Attempt
	if begins {
		next = 0
	}
	// 4. q > next anywhere means q > next at the first chunk: the seqs of one
	// request are consecutive and next only moves with them.
	if s > next || s < 0 {
		return nil, nil, &GapError{Expected: next, Got: s}
	}
	// q < next: retransmits inside this attempt; they come first.
	i := 0
	for ; i < n && s+int64(i) < next; i++ {
		q := s + int64(i)
		e := w.Live[q]
		if e.Digest != digests[i] {
			return nil, nil, &ConflictError{Seq: q, Offset: e.Offset, Want: e.Digest, Got: digests[i]}
		}
		acks[i] = Ack{Offset: e.Offset, Outcome: Retransmit}
	}
	// The rest are adopted while they match the earlier attempts' live
	// records, then appended: only those count against the limit.
	if req.MaxBytes > 0 {
		q, adopting, add := next, !w.Diverged || begins, int64(0)
		for j := i; j < n; j, q = j+1, q+1 {
			if adopting && q < int64(len(w.Live)) && w.Live[q].Digest == digests[j] {
				continue
			}
			adopting = false
			add += int64(len(req.Chunks[j]))
		}
		if err := req.room(add); err != nil {
			return nil, nil, err
		}
	}

	// Nothing can fail from here on: mutate.
	if begins {
		w.Attempt, w.Next, w.Diverged = a, 0, false
	}
	var recs []Record
	for ; i < n; i++ {
		q := w.Next
		if q < int64(len(w.Live)) {
			if e := w.Live[q]; e.Digest == digests[i] && !w.Diverged {
				acks[i] = Ack{Offset: e.Offset, Outcome: Adopted}
				w.Next++
				continue
			}
			// First divergence: void the earlier attempts' suffix.
			if recs == nil {
				recs = make([]Record, 0, n-i+1)
			}
			recs = append(recs, Record{Offset: h.NextOffset, Kind: KindAbort, Writer: w.ID, Attempt: a, Seq: q})
			h.NextOffset++
			w.Live = w.Live[:q]
			w.Diverged = true
		}
		if recs == nil {
			recs = make([]Record, 0, n-i)
		}
		off := h.NextOffset
		h.NextOffset++
		recs = append(recs, Record{Offset: off, Kind: KindData, Writer: w.ID, Attempt: a, Seq: q, Digest: digests[i], Data: req.Chunks[i]})
		w.Live = append(w.Live, Entry{Offset: off, Digest: digests[i]})
		w.Next++
		acks[i] = Ack{Offset: off, Outcome: Appended}
	}
	return acks, recs, nil
}

// appendLate appends chunks of a committed writer's attempt past next(a)
// (AppendRequest.Late): the ones before next(a) must be retransmits; the rest
// are appended and committed by one commit record.
func appendLate(h *Head, w *Writer, req *AppendRequest, digests []Digest) ([]Ack, []Record, error) {
	n, s := len(digests), req.FirstSeq
	acks := make([]Ack, n)
	i := 0
	for ; s+int64(i) < w.Next; i++ {
		q := s + int64(i)
		if e := w.Live[q]; e.Digest != digests[i] {
			return nil, nil, &ConflictError{Seq: q, Offset: e.Offset, Want: e.Digest, Got: digests[i]}
		}
		acks[i] = Ack{Offset: w.Live[q].Offset, Outcome: Retransmit}
	}
	if err := req.room(chunkBytes(req.Chunks[i:])); err != nil {
		return nil, nil, err
	}
	recs := make([]Record, 0, n-i+1)
	for ; i < n; i++ {
		off := h.NextOffset
		h.NextOffset++
		recs = append(recs, Record{Offset: off, Kind: KindData, Writer: w.ID, Attempt: w.Attempt, Seq: w.Next, Digest: digests[i], Data: req.Chunks[i]})
		w.Live = append(w.Live, Entry{Offset: off, Digest: digests[i]})
		w.Next++
		acks[i] = Ack{Offset: off, Outcome: Appended}
	}
	recs = append(recs, Record{Offset: h.NextOffset, Kind: KindCommit, Writer: w.ID, Attempt: w.Attempt, Seq: w.Next})
	h.NextOffset++
	return acks, recs, nil
}

// Result is what a commit or abort did.
type Result uint8

// Commit and abort results.
const (
	Done    Result = 1 // the record(s) were written
	Already Result = 2 // the same attempt already committed (or aborted): nothing written
)

// Commit commits attempt a of writer w: its live records with seq < next(a)
// join the committed view. If an earlier attempt wrote more than a did, the
// surplus is aborted first. If a is newer than the writer's attempt, a wrote
// nothing here and everything earlier attempts wrote is aborted.
//
// Errors: ErrUnknownWriter (w nil or never wrote), ErrClosed, *FencedError,
// ErrWriterFinished, ErrMode.
func Commit(h *Head, w *Writer, a int64) (Result, []Record, error) {
	if w == nil {
		return 0, nil, ErrUnknownWriter
	}
	if w.Status == WriterCommitted && a == w.Attempt {
		return Already, nil, nil
	}
	if err := finishable(h, w, a); err != nil {
		return 0, nil, err
	}
	if a > w.Attempt {
		w.Attempt, w.Next, w.Diverged = a, 0, false
	}
	var recs []Record
	if int64(len(w.Live)) > w.Next {
		recs = append(recs, Record{Offset: h.NextOffset, Kind: KindAbort, Writer: w.ID, Attempt: a, Seq: w.Next})
		h.NextOffset++
		w.Live = w.Live[:w.Next]
	}
	recs = append(recs, Record{Offset: h.NextOffset, Kind: KindCommit, Writer: w.ID, Attempt: a, Seq: w.Next})
	h.NextOffset++
	w.Status = WriterCommitted
	return Done, recs, nil
}

// Abort aborts writer w for good at attempt a: every live record it has is
// void and it is finished.
//
// Errors: as Commit.
func Abort(h *Head, w *Writer, a int64) (Result, []Record, error) {
	if w == nil {
		return 0, nil, ErrUnknownWriter
	}
	if w.Status == WriterAborted && a == w.Attempt {
		return Already, nil, nil
	}
	if err := finishable(h, w, a); err != nil {
		return 0, nil, err
	}
	if a > w.Attempt {
		w.Attempt, w.Diverged = a, false
	}
	rec := Record{Offset: h.NextOffset, Kind: KindAbort, Writer: w.ID, Attempt: a, Seq: 0}
	h.NextOffset++
	w.Live, w.Next, w.Status = nil, 0, WriterAborted
	return Done, []Record{rec}, nil
}

func finishable(h *Head, w *Writer, a int64) error {
	if w.Attempt == 0 && len(w.Live) > 0 {
		return fmt.Errorf("%w: writer %q commits at append (attempt 0)", ErrMode, w.ID)
	}
	if w.Status == WriterOpen && w.Attempt == 0 && len(w.Live) == 0 && w.Next == 0 {
		return fmt.Errorf("%w: writer %q never wrote on this stream", ErrUnknownWriter, w.ID)
	}
	if a < w.Attempt {
		return &FencedError{Attempt: a, Current: w.Attempt}
	}
	if w.Status != WriterOpen {
		return fmt.Errorf("%w: writer %q is %s at attempt %d", ErrWriterFinished, w.ID, w.Status, w.Attempt)
	}
	if h.Closed {
		return ErrClosed
	}
	return nil
}

// Close closes the stream. Closing finishes every writer still open: data not
// committed before the close never joins the committed view. A second close
// writes nothing and returns Already.
func Close(h *Head) (Result, []Record) {
	if h.Closed {
		return Already, nil
	}
	rec := Record{Offset: h.NextOffset, Kind: KindClose}
	h.NextOffset++
	h.Closed = true
	return Done, []Record{rec}
}

// Reopen reopens a closed stream: a reopen record follows the close, and
// appends are taken again. The close stays in the log: a reader that
// stopped there saw the stream as it was when it closed. Reopening an open
// stream writes nothing and returns Already.
func Reopen(h *Head) (Result, []Record) {
	if !h.Closed {
		return Already, nil
	}
	rec := Record{Offset: h.NextOffset, Kind: KindReopen}
	h.NextOffset++
	h.Closed = false
	return Done, []Record{rec}
}

// Revive makes a writer aborted for good open again at its attempt, so
// that a newer attempt can write (a resumed run's failed step runs again).
// Its records stay void: the abort voided them all. It reports whether w
// changed; a writer that is not aborted is left alone.
func Revive(w *Writer) bool {
	if w == nil || w.Status != WriterAborted {
		return false
	}
	w.Status, w.Live, w.Next, w.Diverged = WriterOpen, nil, 0, false
	return true
}

// Replay applies one of w's own records, read back from the log in offset
// order, to w.Live. A store calls it for every data and abort record of the
// writer to rebuild Live after a cache miss; the persisted Attempt, Next,
// Diverged and Status are not touched.
func (w *Writer) Replay(r *Record) {
	switch r.Kind {
	case KindData:
		if r.Seq <= int64(len(w.Live)) {
			w.Live = append(w.Live[:r.Seq], Entry{Offset: r.Offset, Digest: r.Digest})
		}
	case KindAbort:
		if r.Seq < int64(len(w.Live)) {
			w.Live = w.Live[:r.Seq]
		}
	}
}
