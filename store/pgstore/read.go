package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/internal/sqlrow"
	"github.com/weirhq/weir/stream"
)

// Reads fetch a page's batches a window at a time (sqlrow's windows), of
// at most Config.ReadWindow: pgx reads a row whole, into a buffer it keeps
// for the connection until the connection's next query, so the windows
// bound what a read costs beyond its page, and what each pooled connection
// keeps. Records before the page are skipped in whole windows too: a round
// trip costs more than the bytes.

// Read returns a page of the live view: the stream's head and its batches
// from p.From on, in one statement and so one snapshot (the rest of a
// batch, and the batches after one that began before p.From, in more:
// queries.go, readMore and readWindow).
func (s *Store) Read(ctx context.Context, p *store.ReadParams) (*store.ReadResult, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	p = p.WithDefaults()
	if h, ok := s.known.get(p.StreamID); ok {
		// The records this process committed, if they reach the newest
		// head it heard of (heads.go).
		if res, ok, err := s.tail.Read(p, h.next); ok {
			return res, err
		}
	}
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

func (s *Store) readPage(ctx context.Context, p *store.ReadParams) (*store.ReadResult, error) {
	res := &store.ReadResult{}
	win := sqlrow.Window(p, s.cfg.ReadWindow)
	hl, hp := int64(-1), int64(0)
	if h, ok := s.hints.Get(p.StreamID, p.From); ok {
		hl, hp = h.Last, h.Pos
	}
	rows, err := s.pool.Query(ctx, s.q.read, p.StreamID, p.From, p.Limit, p.MaxBytes, hl, hp, win)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var (
		pg    *sqlrow.Page
		cur   *sqlrow.Cursor // the batch the page stopped in
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
		c := &sqlrow.Cursor{Off: *first, Last: *last, Size: *size, Pos: *start}
		c.Begin(p.From)
		if err := pg.Feed(c, data); err != nil {
			return nil, fmt.Errorf("stream %d: %w", p.StreamID, err)
		}
		if !c.Done() || pg.Full() {
			cur = c // the statement's other rows, if any, are not scanned
			break
		}
		pg.Last = c.Last
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("stream %d: %w", p.StreamID, store.ErrNotFound)
	}
	for !pg.Full() {
		if cur != nil && !cur.Done() {
			ok, err := s.readWindow(ctx, p.StreamID, cur, win, func(w []byte) error { return pg.Feed(cur, w) })
			if err != nil {
				return nil, err
			}
			if !ok {
				break // the batch is gone: the stream was deleted
			}
			continue
		}
		// The batches after: the first batch began before p.From and was
		// counted whole, or was read a window at a time.
		if !pg.After(cur) {
			break
		}
		if cur, err = s.readMore(ctx, p, pg, res.NextOffset, win); err != nil {
			return nil, err
		}
		if cur == nil {
			break
		}
	}
	s.hints.Leave(p.StreamID, cur)
	res.Records, res.Piece = pg.Records, pg.Piece
	s.known.see(head{id: p.StreamID, next: res.NextOffset, closed: res.Closed, known: true})
	return res, nil
}

// readMore continues pg from the batch after pg.Last, and returns the batch
// it stopped in (nil if none).
func (s *Store) readMore(ctx context.Context, p *store.ReadParams, pg *sqlrow.Page, head int64, win int) (*sqlrow.Cursor, error) {
	rows, err := s.pool.Query(ctx, s.q.readMore, p.StreamID, pg.Last+1, p.Limit-len(pg.Records), p.MaxBytes-pg.Bytes, head, win)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var (
		c    *sqlrow.Cursor
		data pgtype.DriverBytes
	)
	for rows.Next() {
		c = &sqlrow.Cursor{}
		if err := rows.Scan(&c.Off, &c.Last, &c.Size, &c.Pos, &data); err != nil {
			return nil, err
		}
		if err := pg.Feed(c, data); err != nil {
			return nil, fmt.Errorf("stream %d: %w", p.StreamID, err)
		}
		if !c.Done() || pg.Full() {
			break
		}
		pg.Last = c.Last
	}
	rows.Close()
	return c, rows.Err()
}

// readWindow fetches the next window of c's batch and gives it to f (the
// driver's memory: valid during the call). ok is false if the batch is
// gone.
func (s *Store) readWindow(ctx context.Context, id int64, c *sqlrow.Cursor, win int, f func([]byte) error) (ok bool, err error) {
	rows, err := s.pool.Query(ctx, s.q.readWindow, id, c.Last, c.Pos, c.WindowLen(win, s.cfg.ReadWindow, win, 0))
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

var _ store.WriterStatuses = (*Store)(nil)

// WriterStatus is store.WriterStatuses's: writer's status on stream id.
func (s *Store) WriterStatus(ctx context.Context, id int64, writer string) (stream.Status, int64, bool, bool, error) {
	var st int16
	var attempt int64
	var diverged bool
	found := true
	err := s.do(ctx, true, func(ctx context.Context, _ *try) error {
		found = true
		err := s.pool.QueryRow(ctx, `SELECT status, attempt, diverged FROM `+s.q.schema+`.writers WHERE stream_id = $1 AND writer = $2`, id, writer).Scan(&st, &attempt, &diverged)
		if errors.Is(err, pgx.ErrNoRows) {
			found = false
			return nil
		}
		return err
	})
	if err != nil {
		return 0, 0, false, false, fmt.Errorf("writer status: %w", err)
	}
	return stream.Status(st), attempt, diverged, found, nil
}

var _ store.LogSizer = (*Store)(nil)

// LogBytes is store.LogSizer's: the bytes of data of run's events, its
// input and its output, summed by PostgreSQL (octet_length reads a TOASTed value's size,
// not the value).
func (s *Store) LogBytes(ctx context.Context, run string) (int64, error) {
	var n int64
	err := s.do(ctx, true, func(ctx context.Context, _ *try) error {
		return s.pool.QueryRow(ctx, `SELECT (COALESCE((SELECT sum(octet_length(data)) FROM `+s.q.schema+`.events WHERE run_id = $1), 0)
			+ COALESCE((SELECT COALESCE(octet_length(input), 0) + COALESCE(octet_length(output), 0) FROM `+s.q.schema+`.runs WHERE id = $1), 0))::bigint`, run).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("log bytes: %w", err)
	}
	return n, nil
}
