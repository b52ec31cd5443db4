package sqlrow

import (
	"fmt"
	"sync"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// Windows.
//
// A batch is one append: up to 16 MiB. A read page is about
// ReadParams.MaxBytes (the server's is 256 KiB), so a read fetches of a
// batch a window at a time (SQL substring), a window about a page, decoded
// with stream.DecodeHead: the driver's copy of what it fetched is then
// about a page too, and the records before the page's first are skipped
// without fetching their data. A page that ends inside a batch leaves a
// hint (Hints: the byte where its next record begins), so the next page of
// a reader that reads on fetches from there.

// DefaultWindow is the most of a batch a read fetches at once, unless the
// store's config says otherwise: 1 MiB less 1 KiB, so that a row of it fits
// a 1 MiB driver buffer.
const DefaultWindow = 1<<20 - 1<<10

// Window is the length of the windows a read of p (with its defaults)
// fetches: about its page (MaxBytes, an eighth more for the records' heads,
// and a head), and at most max.
func Window(p *store.ReadParams, max int) int {
	return min(max, p.MaxBytes+p.MaxBytes/8+stream.MaxHeadLen)
}

// Hints are where pages that ended inside a batch left off: the next page,
// from that offset, fetches its first window from there. Batches are never
// rewritten and stream ids never reused, so a hint stays true.
type Hints struct {
	mu sync.Mutex
	m  map[hintKey]Hint
}

type hintKey struct{ stream, offset int64 }

// Hint says that a record begins at byte Pos of the batch whose last
// offset is Last.
type Hint struct{ Last, Pos int64 }

// maxHints bounds the hints kept; beyond, an arbitrary one goes.
const maxHints = 4096

// Get returns the hint for the record at offset off of stream id.
func (h *Hints) Get(id, off int64) (Hint, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[hintKey{id, off}]
	return v, ok
}

// Leave records where pg stopped, if it stopped inside a batch (c).
func (h *Hints) Leave(id int64, c *Cursor) {
	if c == nil || c.Done() || c.filling {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[hintKey]Hint)
	}
	if len(h.m) >= maxHints {
		for k := range h.m {
			delete(h.m, k)
			break
		}
	}
	h.m[hintKey{id, c.Off}] = Hint{Last: c.Last, Pos: c.Pos}
}

// Cursor is where a read is in one batch.
type Cursor struct {
	Last, Size int64 // the batch's last offset (its key, with the stream's id) and encoded length
	Pos        int64 // the next byte to decode: a record's head, or the data being filled
	Off        int64 // the offset of the record at Pos, or being filled

	writer  string // the last record's writer
	fill    stream.Record
	filled  int  // bytes of fill.Data filled
	filling bool // fill is taken, its data filled from the next windows
	wide    bool // a window that began with the head at Pos ended inside it
	piece   bool // fill is a piece of the record at Off (ReadParams.Pieces)
	recPos  int64
}

// Begin sets c, a batch just fetched from byte c.Pos for a read from
// offset from, at the record there: a fetch from a hint (Pos > 0) begins at
// the read's record; one from the batch's start (Off, its first) at the
// batch's first.
func (c *Cursor) Begin(from int64) {
	if c.Pos > 0 {
		c.Off = from
	}
}

// Done reports whether the batch is read through.
func (c *Cursor) Done() bool { return c.Pos >= c.Size && !c.filling }

// After reports whether the page reads on to the batches after c (nil: after
// pg.Last), the batch it stopped in: c is read through, the page has room,
// and a batch follows before the head. (A page past MaxBytes is one larger
// record alone: nothing follows it.) It moves the page past c.
func (pg *Page) After(c *Cursor) bool {
	if c != nil {
		if !c.Done() {
			return false
		}
		pg.Last = c.Last
	}
	return !pg.Full() && pg.Bytes <= pg.p.MaxBytes && pg.Last+1 < pg.head
}

// WindowLen is how much of c's batch the next window of a read from from
// fetches: w; while it fills a record taken, the rest of its data, up to
// most (a page's window is small when the page's MaxBytes is, and its first
// record may be large); skip while c is at a record before from (a store
// whose queries cost little and read a whole row anyway fetches the rest of
// the batch then, to skip its records in one query); and a whole head at
// least if a window that began with it ended inside it.
func (c *Cursor) WindowLen(w, most, skip int, from int64) int {
	switch {
	case c.filling:
		w = max(w, min(most, len(c.fill.Data)-c.filled))
	case c.Off < from:
		w = skip
	}
	if c.wide {
		return max(w, stream.MaxHeadLen)
	}
	return w
}

// Feed decodes w, c's batch from byte c.Pos on, into pg: the records from
// the page's From on, while they fit. It leaves c at the first byte it did
// not decode: a record's head that goes on past w (or did not fit), or past
// the data of a record before From, which is not fetched; or in the data of
// a record taken whose data goes on past w, filled from the next windows. w
// is not retained.
func (pg *Page) Feed(c *Cursor, w []byte) error {
	if len(w) == 0 && !c.Done() {
		return fmt.Errorf("%w: batch %d ends at byte %d of %d", stream.ErrCorrupt, c.Last, c.Pos, c.Size)
	}
	i := 0
	if c.filling {
		c.wide = false
		k := copy(c.fill.Data[c.filled:], w)
		c.filled += k
		i = k
		if c.filled < len(c.fill.Data) {
			c.Pos += int64(k)
			return nil
		}
		pg.TakeOwned(c.fill)
		c.fill, c.filling = stream.Record{}, false
		if c.piece {
			// The page is the piece: the cursor goes back to the
			// record's head, where a hint leads the next piece.
			c.piece, c.Pos, pg.Done = false, c.recPos, true
			return nil
		}
		c.Off++
	}
	var (
		take  []stream.Record // records whose data is in w: copied together
		bytes int
	)
	defer func() { pg.Take(take) }()
	for !pg.Done && c.Pos+int64(i) < c.Size {
		r, head, size, ok, err := stream.DecodeHead(w[i:], c.Off, c.writer)
		if !ok {
			if c.Pos+int64(len(w)) >= c.Size || len(w)-i >= stream.MaxHeadLen {
				return err // the batch ends inside a head: corrupt
			}
			c.wide = i == 0 // the next window begins with it, and holds it
			break
		}
		if err != nil {
			return err
		}
		c.wide = false
		c.writer = r.Writer
		total := head + size
		if c.Off < pg.p.From {
			// Before the page: skipped, and its data not fetched.
			c.Off++
			if i+total <= len(w) {
				i += total
				continue
			}
			c.Pos += int64(i + total)
			return nil
		}
		if len(pg.Records)+len(take) == 0 && pg.p.Piece(c.Off, size) {
			return pg.piece(c, w, i, head, size, r)
		}
		if !pg.Fits(c.Off, len(take), bytes, size) {
			pg.Done = true
			break
		}
		if i+total <= len(w) {
			if r.Kind == stream.KindData {
				r.Data = w[i+head : i+total : i+total]
			}
			take = append(take, r)
			bytes += size
			i += total
			c.Off++
			continue
		}
		// Taken, and its data goes on past w: it gets its own buffer,
		// filled from the next windows (after the records before it).
		pg.Take(take)
		take = nil
		r.Data = make([]byte, size)
		k := copy(r.Data, w[i+head:])
		c.fill, c.filled, c.filling = r, k, true
		c.Pos += int64(i + head + k)
		return nil
	}
	c.Pos += int64(i)
	return nil
}

// piece takes a piece of record r (its head at w[i:], of head bytes, and
// size data bytes) as the page (store.ReadParams.Pieces): its data from
// DataFrom on, at most MaxBytes, copied from w and filled from the next
// windows. The cursor is left at the record's head, or filling the piece.
func (pg *Page) piece(c *Cursor, w []byte, i, head, size int, r stream.Record) error {
	if r.Kind != stream.KindData {
		return fmt.Errorf("%w: byte %d of record %d, which holds no data", store.ErrInvalid, pg.p.DataFrom, c.Off)
	}
	piece, n, err := pg.p.PieceOf(size)
	if err != nil {
		return err
	}
	pg.Piece = piece
	r.Data = make([]byte, n)
	start := int64(i+head) + piece.From // in w, or past it
	k := 0
	if start < int64(len(w)) {
		k = copy(r.Data, w[start:])
	}
	recPos := c.Pos + int64(i)
	if k == n {
		pg.TakeOwned(r)
		c.Pos, pg.Done = recPos, true
		return nil
	}
	c.fill, c.filled, c.filling, c.piece, c.recPos = r, k, true, true, recPos
	c.Pos += start + int64(k)
	return nil
}
