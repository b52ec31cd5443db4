package pgstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/internal/sqlrow"
	"github.com/weirhq/weir/stream"
)

// Reads.
//
// A batch is one append: up to 16 MiB. A read page is about
// ReadParams.MaxBytes (the server's is 256 KiB), so a read fetches only
// what its page can reach, and of each batch a window of at most
// Config.ReadWindow bytes at a time, decoded with stream.DecodeHead; the
// records' data it keeps are copied out of the driver's memory into
// allocations of exactly their size (sqlrow.Page). What a read costs is
// then its page, plus a window of the driver's buffer while it runs (pgx
// reads a row whole, into a buffer it keeps for the connection until the
// connection's next query). A page that ends inside a batch leaves a hint
// (Store.hints: the byte where its next record begins), so the next page of
// a reader that reads on starts there, without fetching the records before
// it again.

// readHints are where pages that ended inside a batch left off: the next
// page, from that offset, fetches its first window from there. Batches are
// never rewritten and stream ids never reused, so a hint stays true.
type readHints struct {
	mu sync.Mutex
	m  map[hintKey]hint
}

type hintKey struct{ stream, offset int64 }

// hint says that the record at hintKey.offset begins at byte pos of the
// batch whose last offset is last.
type hint struct{ last, pos int64 }

// maxHints bounds the hints kept; beyond, an arbitrary one goes.
const maxHints = 4096

func (h *readHints) get(id, off int64) (hint, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[hintKey{id, off}]
	return v, ok
}

func (h *readHints) put(id, off int64, v hint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[hintKey]hint)
	}
	if len(h.m) >= maxHints {
		for k := range h.m {
			delete(h.m, k)
			break
		}
	}
	h.m[hintKey{id, off}] = v
}

// Read returns a page of the live view: the stream's head and its batches
// from p.From on, in one statement and so one snapshot (the rest of a
// batch, and the batches after one that began before p.From, in more:
// queries.go, readMore and readWindow).
func (s *Store) Read(ctx context.Context, p *store.ReadParams) (*store.ReadResult, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	p = p.WithDefaults()
	var res *store.ReadResult
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var err error
		res, err = s.readPage(ctx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	return res, nil
}

// cursor is where a read is in one batch.
type cursor struct {
	last, size int64  // the batch's last offset (its key, with the stream's id) and encoded length
	pos        int64  // the next byte to decode: a record's head, or the data being filled
	off        int64  // the offset of the record at pos, or being filled
	writer     string // the last record's writer
	fill       stream.Record
	filled     int  // bytes of fill.Data filled
	filling    bool // fill is taken, its data filled from the next windows
	wide       bool // a window that began with the head at pos ended inside it
}

func (c *cursor) done() bool { return c.pos >= c.size && !c.filling }

// windowLen is how much of c's batch the next window fetches: w, or a
// whole head at least if a window of w bytes ended inside it.
func (c *cursor) windowLen(w int) int {
	if c.wide {
		return max(w, stream.MaxHeadLen)
	}
	return w
}

func (s *Store) readPage(ctx context.Context, p *store.ReadParams) (*store.ReadResult, error) {
	res := &store.ReadResult{}
	hl, hp := int64(-1), int64(0)
	if h, ok := s.hints.get(p.StreamID, p.From); ok {
		hl, hp = h.last, h.pos
	}
	rows, err := s.pool.Query(ctx, s.q.read, p.StreamID, p.From, p.Limit, p.MaxBytes, hl, hp, s.cfg.ReadWindow)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var (
		pg    *sqlrow.Page
		cur   *cursor // the batch the page stopped in
		found bool
	)
	for rows.Next() {
		var (
			first, last, size, start *int64
			data                     pgtype.DriverBytes // valid until the next row
		)
		if err := rows.Scan(&res.NextOffset, &res.Closed, &first, &last, &size, &start, &data); err != nil {
			return nil, err
		}
		if !found {
			found = true
			if p.From > res.NextOffset {
				return nil, fmt.Errorf("%w: offset %d is past the stream's next offset %d", store.ErrInvalid, p.From, res.NextOffset)
			}
			pg = sqlrow.NewPage(p, res.NextOffset)
		}
		if first == nil {
			break // no batch: the head alone
		}
		c := &cursor{last: *last, size: *size, pos: *start, off: *first}
		if c.pos > 0 {
			c.off = p.From // the hint's record
		}
		if err := feed(pg, p.From, c, data); err != nil {
			return nil, fmt.Errorf("stream %d: %w", p.StreamID, err)
		}
		if !c.done() || pg.Full() {
			cur = c // the statement's other rows, if any, are not scanned
			break
		}
		pg.Last = c.last
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("stream %d: %w", p.StreamID, store.ErrNotFound)
	}
	for !pg.Full() {
		if cur != nil && !cur.done() {
			ok, err := s.readWindow(ctx, p.StreamID, cur, func(w []byte) error { return feed(pg, p.From, cur, w) })
			if err != nil {
				return nil, err
			}
			if !ok {
				break // the batch is gone: the stream was deleted
			}
			continue
		}
		if cur != nil {
			pg.Last, cur = cur.last, nil
		}
		// The batches after: the first batch began before p.From and was
		// counted whole, or was read a window at a time. (A page past
		// MaxBytes is one larger record alone: nothing follows it.)
		if pg.Bytes > p.MaxBytes || pg.Last+1 >= res.NextOffset {
			break
		}
		if cur, err = s.readMore(ctx, p, pg, res.NextOffset); err != nil {
			return nil, err
		}
		if cur == nil {
			break
		}
	}
	if cur != nil && !cur.done() && !cur.filling {
		s.hints.put(p.StreamID, cur.off, hint{last: cur.last, pos: cur.pos})
	}
	res.Records = pg.Records
	return res, nil
}

// readMore continues pg from the batch after pg.Last, and returns the batch
// it stopped in (nil if none).
func (s *Store) readMore(ctx context.Context, p *store.ReadParams, pg *sqlrow.Page, head int64) (*cursor, error) {
	rows, err := s.pool.Query(ctx, s.q.readMore, p.StreamID, pg.Last+1, p.Limit-len(pg.Records), p.MaxBytes-pg.Bytes, head, s.cfg.ReadWindow)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var (
		c    *cursor
		data pgtype.DriverBytes
	)
	for rows.Next() {
		c = &cursor{}
		if err := rows.Scan(&c.off, &c.last, &c.size, &c.pos, &data); err != nil {
			return nil, err
		}
		if err := feed(pg, p.From, c, data); err != nil {
			return nil, fmt.Errorf("stream %d: %w", p.StreamID, err)
		}
		if !c.done() || pg.Full() {
			break
		}
		pg.Last = c.last
	}
	rows.Close()
	return c, rows.Err()
}

// readWindow fetches the next window of c's batch and gives it to f (the
// driver's memory: valid during the call). ok is false if the batch is
// gone.
func (s *Store) readWindow(ctx context.Context, id int64, c *cursor, f func([]byte) error) (ok bool, err error) {
	rows, err := s.pool.Query(ctx, s.q.readWindow, id, c.last, c.pos, c.windowLen(s.cfg.ReadWindow))
	if err != nil {
		return false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return false, rows.Err()
	}
	var data pgtype.DriverBytes
	if err := rows.Scan(&data); err != nil {
		return false, err
	}
	if err := f(data); err != nil {
		return false, fmt.Errorf("stream %d: %w", id, err)
	}
	rows.Close()
	return true, rows.Err()
}

// feed decodes w, c's batch from byte c.pos on, into pg: the records from
// offset from on while they fit. It leaves c at the first byte it did not
// decode: a record's head that goes on past w (or did not fit), or past
// data of a record before from, which is not fetched; or in the data of a
// record taken whose data goes on past w, filled from the next windows.
func feed(pg *sqlrow.Page, from int64, c *cursor, w []byte) error {
	if len(w) == 0 && !c.done() {
		return fmt.Errorf("%w: batch %d ends at byte %d of %d", stream.ErrCorrupt, c.last, c.pos, c.size)
	}
	i := 0
	if c.filling {
		c.wide = false
		k := copy(c.fill.Data[c.filled:], w)
		c.filled += k
		i = k
		if c.filled < len(c.fill.Data) {
			c.pos += int64(k)
			return nil
		}
		pg.TakeOwned(c.fill)
		c.fill, c.filling = stream.Record{}, false
		c.off++
	}
	var (
		take  []stream.Record // records whose data is in w: copied together
		bytes int
	)
	defer func() { pg.Take(take) }()
	for !pg.Done && c.pos+int64(i) < c.size {
		r, head, size, ok, err := stream.DecodeHead(w[i:], c.off, c.writer)
		if !ok {
			if c.pos+int64(len(w)) >= c.size || len(w)-i >= stream.MaxHeadLen {
				return err // the batch ends inside a head: corrupt
			}
			c.wide = i == 0 // the next window begins with it, and holds it
			break
		}
		c.wide = false
		if err != nil {
			return err
		}
		c.writer = r.Writer
		total := head + size
		if c.off < from {
			// Before the page: skipped, and its data not fetched.
			c.off++
			if i+total <= len(w) {
				i += total
				continue
			}
			c.pos += int64(i + total)
			return nil
		}
		if !pg.Fits(c.off, len(take), bytes, size) {
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
			c.off++
			continue
		}
		// Taken, and its data goes on past w: it gets its own buffer,
		// filled from the next windows (after the records before it).
		pg.Take(take)
		take = nil
		r.Data = make([]byte, size)
		k := copy(r.Data, w[i+head:])
		c.fill, c.filled, c.filling = r, k, true
		c.pos += int64(i + head + k)
		return nil
	}
	c.pos += int64(i)
	return nil
}
