package store

import (
	"context"
	"fmt"

	"github.com/weirhq/weir/stream"
)

// CommittedReader reads the committed view of one stream a page at a time,
// and holds about a page of data whatever the stream holds.
//
// The committed view cannot release a record before every record ahead of
// it is settled (the last stable offset), so a reader that reaches a writer
// still open reads on past it to learn its fate, and holds what it read
// (stream.Committed). Left alone, a reader of a stream where one writer
// appended 64 MiB and never committed held those 64 MiB: four plain reads
// of it added 360 MB to the server. A CommittedReader keeps the data of
// the records it holds up to its hold; past it, only their places (a run of
// one writer's consecutive records is one entry), and it reads the records
// the filter releases without their data again, page by page, from the
// store.
type CommittedReader struct {
	// Pieces makes a record larger than a page come as its first piece
	// alone (ReadParams.Pieces): Next returns it with its Piece, and the
	// caller reads the rest with ReadPieces. Without it, such a record
	// comes whole, alone.
	Pieces bool

	st     Store
	id     int64
	filter *stream.Committed
	pos    int64      // the next offset of the live view to read
	ready  []released // released by the filter, not yet returned
	head   int64      // the stream's next offset at the last read
	closed bool       // ... and whether it was closed then
	read   bool       // the live view was read once at least
	// blocked: the writer of the record at the last stable offset was
	// open at the store when the last Next would have read on (WriterStatuses):
	// nothing past it can be released until it finishes, so the reader
	// did not read on to learn its fate.
	blocked bool
}

// WriterStatuses is a store that tells a writer's status on a stream. A
// committed reader held at a writer still open reads no further, where
// it would otherwise read the rest of the stream, and hold a place for
// each record of it, to find the writer's commit: a stream where one
// writer left a million records uncommitted, or twenty thousand writers
// one each, cost every read of its committed view a walk of all of it
// (red team, round eight: 0.8 s on SQLite, 9.3 s on PostgreSQL, and 31
// to 86 MiB a stalled reader).
type WriterStatuses interface {
	// WriterStatus returns writer's status on stream id, the attempt it
	// is at, and whether that attempt diverged from the one before it
	// (stream.Writer.Diverged); found is false if it never wrote there.
	WriterStatus(ctx context.Context, id int64, writer string) (status stream.Status, attempt int64, diverged, found bool, err error)
}

// WriterStatusesOf returns s, or the store it wraps, as WriterStatuses.
func WriterStatusesOf(s Store) (WriterStatuses, bool) { return as[WriterStatuses](s) }

// released is a record the filter released, or a run of n records it
// released without their data, from rec.Offset on, to read again.
type released struct {
	rec stream.Record
	n   int64
}

// NewCommittedReader returns a reader of stream id's committed view from
// offset from (0, or an offset a committed reader was told to resume at),
// holding at most hold bytes of the data of records that wait for their
// writers (0: DefaultReadBytes).
func NewCommittedReader(st Store, id, from int64, hold int) *CommittedReader {
	if hold <= 0 {
		hold = DefaultReadBytes
	}
	f := stream.NewCommitted(from)
	f.Hold(hold)
	return &CommittedReader{st: st, id: id, filter: f, pos: from}
}

// Next returns the next records of the view (data, and the close), by the
// page rule (ReadParams.FitsSize: at most limit records, 0: DefaultReadLimit;
// about maxBytes of data, 0: DefaultReadBytes, or one larger record alone),
// reading the store until the page is full or the reader is caught up.
// None: nothing more is in the view now (CaughtUp), or all that is waits
// for its writers.
//
// With Pieces, a record larger than maxBytes comes alone, as its first
// piece: piece says where it lies in the record.
func (c *CommittedReader) Next(ctx context.Context, limit, maxBytes int) (recs []stream.Record, piece *Piece, err error) {
	p := (&ReadParams{Limit: limit, MaxBytes: maxBytes, Pieces: c.Pieces}).WithDefaults()
	var (
		out   []stream.Record
		bytes int
		read  bool // the live view was read in this call
	)
	c.blocked = false
	for {
		full, piece, err := c.take(ctx, p, &out, &bytes)
		if err != nil || full || (read && c.pos >= c.head) {
			return out, piece, err
		}
		if c.pos < c.head || !c.read {
			if open, err := c.heldByOpenWriter(ctx); err != nil || open {
				if c.blocked = open; open {
					// It waits: the places of what it holds, not their data.
					c.filter.LetGo()
				}
				return out, nil, err
			}
		}
		read = true
		// Past the first records, only what is left of the page: a read
		// of a whole page to learn that its first record does not fit
		// would be held beside the page.
		mb := p.MaxBytes
		if len(out) > 0 {
			mb = max(p.MaxBytes-bytes, 1)
		}
		res, err := c.st.Read(ctx, &ReadParams{StreamID: c.id, From: c.pos, Limit: p.Limit - len(out), MaxBytes: mb, Pieces: c.Pieces})
		if err != nil {
			return out, nil, err
		}
		c.head, c.closed, c.read = res.NextOffset, res.Closed, true
		if res.Piece != nil {
			// Its data is read again, a piece at a time, once the filter
			// releases it.
			res.Records[0].Data = nil
		}
		for i := range res.Records {
			c.pos = res.Records[i].Offset + 1
			c.filter.Push(&res.Records[i], c.release)
		}
		if len(res.Records) == 0 {
			c.pos = max(c.pos, c.head)
		}
	}
}

// heldByOpenWriter reports whether the view is held at its last stable
// offset by a writer still open at the store at the attempt of the record
// there, or at a later one that adopted it (WriterStatuses): none of what
// follows can be released until it finishes, and its finish appends to
// the stream, which wakes the reader's wait. A later attempt that
// diverged may have voided the record (its abort lies ahead): the reader
// reads on to learn it.
func (c *CommittedReader) heldByOpenWriter(ctx context.Context) (bool, error) {
	w, attempt, ok := c.filter.HeadWriter()
	if !ok {
		return false, nil
	}
	ws, ok := WriterStatusesOf(c.st)
	if !ok {
		return false, nil
	}
	st, at, diverged, found, err := ws.WriterStatus(ctx, c.id, w)
	// At a newer attempt that adopted what came before (not diverged),
	// the record waits for that attempt's finish too (red team, round
	// nine: an adopted head let readers walk a million records again).
	return found && st == stream.WriterOpen && (at == attempt || at > attempt && !diverged), err
}

// ReadPieces reads the data of record off of stream id from byte from on,
// a piece of at most maxBytes at a time (ReadParams.Pieces), and gives each
// to f, until size bytes of it were read: the rest of a record that came
// as a piece.
func ReadPieces(ctx context.Context, st Store, id, off, from, size int64, maxBytes int, f func([]byte) error) error {
	for from < size {
		res, err := st.Read(ctx, &ReadParams{StreamID: id, From: off, MaxBytes: maxBytes, Pieces: true, DataFrom: from})
		if err != nil {
			return err
		}
		if res.Piece == nil || len(res.Records) != 1 || res.Records[0].Offset != off || res.Piece.From != from || len(res.Records[0].Data) == 0 {
			return fmt.Errorf("%w: stream %d: record %d from byte %d is not there when read again", stream.ErrCorrupt, id, off, from)
		}
		if err := f(res.Records[0].Data); err != nil {
			return err
		}
		from = res.Piece.End(len(res.Records[0].Data))
	}
	return nil
}

func (c *CommittedReader) release(r *stream.Record) {
	if r.Kind != stream.KindData || r.Data != nil {
		c.ready = append(c.ready, released{rec: *r})
		return
	}
	if n := len(c.ready); n > 0 {
		if last := &c.ready[n-1]; last.n > 0 && last.rec.Offset+last.n == r.Offset {
			last.n++
			return
		}
	}
	c.ready = append(c.ready, released{rec: stream.Record{Offset: r.Offset, Kind: stream.KindData}, n: 1})
}

// take moves the records ready to out while they fit, reading again the
// ones released without their data; full: one did not fit, or out is a
// piece of one (piece).
func (c *CommittedReader) take(ctx context.Context, p *ReadParams, out *[]stream.Record, bytes *int) (full bool, piece *Piece, err error) {
	for len(c.ready) > 0 {
		e := &c.ready[0]
		if e.n == 0 {
			if !p.Fits(len(*out), *bytes, &e.rec) {
				return true, nil, nil
			}
			*out = append(*out, e.rec)
			*bytes += len(e.rec.Data)
			c.ready = c.ready[1:]
			continue
		}
		if len(*out) >= p.Limit {
			return true, nil, nil
		}
		mb := p.MaxBytes
		if len(*out) > 0 {
			mb = max(p.MaxBytes-*bytes, 1)
		}
		res, err := c.st.Read(ctx, &ReadParams{StreamID: c.id, From: e.rec.Offset, Limit: int(min(e.n, int64(p.Limit-len(*out)))),
			MaxBytes: mb, Pieces: p.Pieces})
		if err != nil {
			return false, nil, err
		}
		if len(res.Records) == 0 || res.Records[0].Offset != e.rec.Offset {
			return false, nil, fmt.Errorf("%w: stream %d: the committed record at offset %d is not there when read again", stream.ErrCorrupt, c.id, e.rec.Offset)
		}
		if res.Piece != nil {
			if len(*out) > 0 {
				return true, nil, nil // the next page's, alone
			}
			*out = append(*out, res.Records[0])
			e.rec.Offset++
			if e.n--; e.n == 0 {
				c.ready = c.ready[1:]
			}
			return true, res.Piece, nil
		}
		for i := range res.Records {
			r := &res.Records[i]
			if e.n == 0 || r.Offset != e.rec.Offset {
				break
			}
			if !p.Fits(len(*out), *bytes, r) {
				return true, nil, nil
			}
			*out = append(*out, *r)
			*bytes += len(r.Data)
			e.rec.Offset++
			e.n--
		}
		if e.n == 0 {
			c.ready = c.ready[1:]
		}
	}
	return false, nil, nil
}

// NextOffset is where a later reader of the view resumes: the first record
// not returned yet, or the last stable offset.
func (c *CommittedReader) NextOffset() int64 {
	if len(c.ready) > 0 {
		return c.ready[0].rec.Offset
	}
	return c.filter.NextOffset()
}

// CaughtUp reports that the view holds nothing more now: everything the
// stream held at the last read was returned, or waits for its writers.
// A reader held at a writer still open is caught up too: nothing more can
// come before that writer finishes.
func (c *CommittedReader) CaughtUp() bool {
	return c.read && len(c.ready) == 0 && (c.pos >= c.head || c.blocked)
}

// Head is the stream's next offset at the last read, and whether it was
// closed then.
func (c *CommittedReader) Head() (next int64, closed bool) { return c.head, c.closed }

// Pos is the next offset of the live view the reader reads.
//
// Held at a writer still open, it is the stream's head at the last read:
// what a reader waits on is the stream growing past it (the writer's
// finish, or more appends), not the records it chose not to read, which
// are there already (red team, round nine: a wait from them returned at
// once, and a held long-poll spun a core until its timeout).
func (c *CommittedReader) Pos() int64 {
	if c.blocked {
		return max(c.pos, c.head)
	}
	return c.pos
}
