package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
	"github.com/weirhq/weir/stream"
)

// OpenStream returns the stream at p.Path (or at the path of p.RunID's stream
// p.Name), creating it if p.Create. A standalone stream cannot be created
// under "runs/": that prefix belongs to run streams.
func (s *Store) OpenStream(ctx context.Context, p *store.OpenStreamParams) (*store.StreamInfo, error) {
	path, err := p.ResolvePath()
	if err != nil {
		return nil, fmt.Errorf("open stream: %w", err)
	}
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	si, err := sqlrow.ScanStream(s.r.streamByPath.QueryRowContext(ctx, path))
	if err == nil {
		return si, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("open stream: %w", s.readErr(err))
	}
	if !p.Create {
		return nil, fmt.Errorf("open stream: stream %q: %w", path, store.ErrNotFound)
	}
	if err := p.CheckCreate(path); err != nil {
		return nil, fmt.Errorf("open stream: %w", err)
	}
	ct := store.ContentTypeOr(p.ContentType)
	now := sqlrow.Nanos(s.cfg.Now())
	err = s.write(ctx, func(tx *wtx) error {
		// Re-check: another op may have created it since our read.
		si, err = sqlrow.ScanStream(tx.w.streamByPath.QueryRowContext(bg, path))
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return translate(err)
		}
		if p.RunID != "" {
			if _, err := tx.Run(p.RunID); err != nil {
				return err
			}
		}
		si, err = tx.insertRunStream(path, p.RunID, p.Name, ct, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open stream: %w", err)
	}
	return si, nil
}

// insertRunStream inserts a stream; a run's wakes its run's watchers, and
// keeps its first records in the tail cache if they wait.
func (tx *wtx) insertRunStream(path, run, name, ct string, now int64) (*store.StreamInfo, error) {
	tx.changed = true
	si, err := sqlrow.ScanStream(tx.w.insertStream.QueryRowContext(bg, path, run, name, ct, now))
	if err != nil {
		return nil, translate(err)
	}
	if run != "" {
		tx.runs = append(tx.runs, run)
		if tx.c.s.runs.Has(store.RunKey(run)) {
			tx.begins = append(tx.begins, si.ID)
			tx.watched = append(tx.watched, si)
		}
	}
	return si, nil
}

// OpenAppend creates run p.RunID's stream p.Name with the first chunks of a
// step writer, after its start (store.StepAppender, apply.OpenAppend), in
// one transaction; a stream that exists gets the start alone.
func (s *Store) OpenAppend(ctx context.Context, p *store.OpenAppendParams) (*store.OpenAppendResult, error) {
	path, err := p.Check()
	if err != nil {
		return nil, fmt.Errorf("open-append: %w", err)
	}
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	ap := p.Append.WithDefaults(s.cfg.Now)
	q := *p
	q.Append = *ap
	now := s.cfg.Now()
	var res *store.OpenAppendResult
	err = s.write(ctx, func(tx *wtx) error {
		res = nil
		si, err := sqlrow.ScanStream(tx.w.streamByPath.QueryRowContext(bg, path))
		if err == nil {
			st, err := tx.Stream(si.ID)
			if err != nil {
				return err
			}
			res = &store.OpenAppendResult{Stream: si}
			res.Append, err = apply.OpenAppendExisting(tx, &q, st, now)
			return err
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return translate(err)
		}
		if _, err := tx.Run(q.RunID); err != nil {
			return err
		}
		if si, err = tx.insertRunStream(path, q.RunID, q.Name, store.ContentTypeOr(q.ContentType), sqlrow.Nanos(now)); err != nil {
			return err
		}
		st, err := tx.Stream(si.ID)
		if err != nil {
			return err
		}
		ar, err := apply.OpenAppend(tx, &q, st, now)
		if err != nil {
			return err
		}
		res = &store.OpenAppendResult{Stream: si, Created: true, Append: ar}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("open-append: %w", err)
	}
	return res, nil
}

// CreatedStream is store.RunWatcher's: a run stream this store created
// while its run was watched, with its head.
func (s *Store) CreatedStream(path string) (*store.StreamInfo, bool) {
	si, ok := s.created.Get(path)
	if !ok {
		return nil, false
	}
	if n, closed, ok := s.tail.Head(si.ID); ok && n >= si.NextOffset {
		si.NextOffset, si.Closed = n, closed
	}
	return si, true
}

// WatchRun is store.RunWatcher's: a stream of run created, a run event
// set, or the run ended.
func (s *Store) WatchRun(run string) (<-chan struct{}, func()) {
	k := store.RunKey(run)
	w := s.runs.Subscribe(k)
	return w.C, func() { s.runs.Unsubscribe(k, w) }
}

// GetStream returns a stream by id.
func (s *Store) GetStream(ctx context.Context, id int64) (*store.StreamInfo, error) {
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	si, err := sqlrow.ScanStream(s.r.stream.QueryRowContext(ctx, id))
	if err != nil {
		return nil, fmt.Errorf("get stream %d: %w", id, s.readErr(err))
	}
	return si, nil
}

// ListStreams returns the streams of a run by name; none for an unknown run.
func (s *Store) ListStreams(ctx context.Context, runID string) ([]*store.StreamInfo, error) {
	if err := store.CheckRunID(runID); err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	rows, err := s.r.runStreams.QueryContext(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("list streams: %w", s.readErr(err))
	}
	defer rows.Close()
	var out []*store.StreamInfo
	for rows.Next() {
		si, err := sqlrow.ScanStream(rows)
		if err != nil {
			return nil, fmt.Errorf("list streams: %w", s.readErr(err))
		}
		out = append(out, si)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list streams: %w", s.readErr(err))
	}
	return out, nil
}

// Append applies one append request, with its Durable Streams options (see
// store.AppendParams, and apply.Append for the rules). The chunks are not
// retained.
func (s *Store) Append(ctx context.Context, p *store.AppendParams) (*store.AppendResult, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("append: %w", err)
	}
	p = p.WithDefaults(s.cfg.Now)
	var res *store.AppendResult
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		res, err = apply.Append(tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("append: %w", err)
	}
	return res, nil
}

// FinishWriter commits or aborts one writer on one stream (apply.Finish).
func (s *Store) FinishWriter(ctx context.Context, p *store.FinishWriterParams) (stream.Result, error) {
	if err := p.Check(); err != nil {
		return 0, fmt.Errorf("finish writer: %w", err)
	}
	var res stream.Result
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		res, err = apply.Finish(tx, p)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("finish writer: %w", err)
	}
	return res, nil
}

// CloseStream closes a stream; the second close writes nothing and returns
// stream.Already.
func (s *Store) CloseStream(ctx context.Context, id int64) (stream.Result, error) {
	var res stream.Result
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		res, err = apply.Close(tx, id)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("close stream: %w", err)
	}
	return res, nil
}

// Read returns a page of the live view. Records' Data share one buffer per
// batch read, of exactly their size (sqlrow.Page), or the tail cache's.
func (s *Store) Read(ctx context.Context, p *store.ReadParams) (*store.ReadResult, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	p = p.WithDefaults()
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	if res, ok, err := s.tail.Read(p, -1); ok {
		return res, err
	}
	res := &store.ReadResult{}
	// The head first: records committed after it are left for the next read,
	// so the page and NextOffset agree without a read transaction.
	err := s.r.head.QueryRowContext(ctx, p.StreamID).Scan(&res.NextOffset, &res.Closed)
	if err != nil {
		return nil, fmt.Errorf("read: stream %d: %w", p.StreamID, s.readErr(err))
	}
	if p.From > res.NextOffset {
		return nil, fmt.Errorf("read: %w: offset %d is past the stream's next offset %d", store.ErrInvalid, p.From, res.NextOffset)
	}
	if p.From == res.NextOffset {
		return res, nil
	}
	// The batches are fetched a window of about a page at a time
	// (sqlrow's windows): the driver copies a row's blob whole into memory
	// of its own, so a page read from whole 16 MiB appends allocated 16 MiB.
	// (SQLite itself still reads the whole blob for each window, into its
	// page cache; a page that ended inside a batch leaves a hint, so the
	// next page is one such read, as it was.)
	pg := sqlrow.NewPage(p, res.NextOffset)
	win := sqlrow.Window(p, s.cfg.ReadWindow)
	hl, hp := int64(-1), int64(0)
	if h, ok := s.hints.Get(p.StreamID, p.From); ok {
		hl, hp = h.Last, h.Pos
	}
	var cur *sqlrow.Cursor // the batch the page stopped in
	for from := p.From; !pg.Full(); from = pg.Last + 1 {
		if cur, err = s.readBatches(ctx, pg, from, hl, hp, win); err != nil {
			return nil, err
		}
		for cur != nil && !cur.Done() && !pg.Full() {
			ok, err := s.readWindow(ctx, pg, cur, cur.WindowLen(win, s.cfg.ReadWindow, int(cur.Size-cur.Pos), p.From))
			if err != nil {
				return nil, err
			}
			if !ok {
				break // the batch is gone: the stream was deleted
			}
		}
		if cur == nil || !pg.After(cur) {
			break
		}
		hl = -1
	}
	s.hints.Leave(p.StreamID, cur)
	res.Records, res.Piece = pg.Records, pg.Piece
	return res, nil
}

// readWindow feeds pg the next n bytes of c's batch; ok is false if the
// batch is gone.
func (s *Store) readWindow(ctx context.Context, pg *sqlrow.Page, c *sqlrow.Cursor, n int) (ok bool, err error) {
	id := pg.Params().StreamID
	rows, err := s.r.window.QueryContext(ctx, id, c.Last, c.Pos, n)
	if err != nil {
		return false, fmt.Errorf("read: %w", s.readErr(err))
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return false, fmt.Errorf("read: %w", s.readErr(err))
		}
		return false, nil
	}
	var w sql.RawBytes // the driver's copy, valid until Close
	if err := rows.Scan(&w); err != nil {
		return false, fmt.Errorf("read: %w", s.readErr(err))
	}
	if err := pg.Feed(c, w); err != nil {
		return false, fmt.Errorf("read: stream %d: %w", id, err)
	}
	return true, nil
}

// readBatches adds to pg the batches from offset from on (from byte hp of
// the batch whose last offset is hl), stepped one at a time while the page
// is not full, and returns the batch it stopped in: one it took in part
// (the rest is fetched a window at a time), or the last it read (nil if
// none). A batch of at most a window is decoded at once.
func (s *Store) readBatches(ctx context.Context, pg *sqlrow.Page, from, hl, hp int64, win int) (*sqlrow.Cursor, error) {
	p := pg.Params()
	rows, err := s.r.batches.QueryContext(ctx, p.StreamID, from, hl, hp, win, pg.Head())
	if err != nil {
		return nil, fmt.Errorf("read: %w", s.readErr(err))
	}
	defer rows.Close()
	var c *sqlrow.Cursor
	for !pg.Full() && rows.Next() {
		c = &sqlrow.Cursor{}
		var data sql.RawBytes // valid until the next row
		if err := rows.Scan(&c.Off, &c.Last, &c.Size, &c.Pos, &data); err != nil {
			return nil, fmt.Errorf("read: %w", s.readErr(err))
		}
		if c.Pos == 0 && int64(len(data)) == c.Size && len(data) <= win && !p.Pieces {
			// Whole, and no larger than a window: the next page reads it
			// again if this one ends inside it (no hint).
			err = pg.Add(data, c.Off)
			c.Pos = c.Size
		} else {
			c.Begin(p.From)
			err = pg.Feed(c, data)
		}
		if err != nil {
			return nil, fmt.Errorf("read: stream %d: %w", p.StreamID, err)
		}
		if !c.Done() {
			break
		}
		pg.Last = c.Last
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read: %w", s.readErr(err))
	}
	return c, nil
}

// Wait blocks until stream id has a record at offset >= next or is closed.
func (s *Store) Wait(ctx context.Context, id int64, next int64) error {
	for {
		done, err := s.waitOnce(ctx, id, next)
		if done || err != nil {
			return err
		}
	}
}

// waitOnce waits for one commit on stream id, unless the stream is already
// past next or closed (done).
func (s *Store) waitOnce(ctx context.Context, id int64, next int64) (done bool, err error) {
	// Subscribe before looking, so a commit between the look and the wait
	// still wakes us.
	w := s.notify.Subscribe(id)
	defer s.notify.Unsubscribe(id, w)
	if s.isClosed() {
		return true, store.ErrClosedStore
	}
	n, closed, ok := s.tail.Head(id)
	if !ok {
		if err := s.r.head.QueryRowContext(ctx, id).Scan(&n, &closed); err != nil {
			return true, fmt.Errorf("wait stream %d: %w", id, s.readErr(err))
		}
	}
	if n > next || closed {
		return true, nil
	}
	select {
	case <-w.C:
		return false, nil
	case <-ctx.Done():
		return true, ctx.Err()
	case <-s.closing:
		return true, store.ErrClosedStore
	}
}

// ListStandaloneStreams lists standalone streams by path (apply.ListStandalone).
func (s *Store) ListStandaloneStreams(ctx context.Context, p *store.ListStandaloneParams) (*store.StreamList, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	p = p.WithDefaults(s.cfg.Now)
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	out, err := apply.ListStandalone(p, func(from string, n int) ([]*store.StreamInfo, error) {
		rows, err := s.r.standalone.QueryContext(ctx, from, n)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var page []*store.StreamInfo
		for rows.Next() {
			si, err := sqlrow.ScanStream(rows)
			if err != nil {
				return nil, err
			}
			page = append(page, si)
		}
		return page, rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list streams: %w", s.readErr(err))
	}
	return out, nil
}

var _ store.WriterStatuses = (*Store)(nil)

// WriterStatus is store.WriterStatuses's: writer's status on stream id.
func (s *Store) WriterStatus(ctx context.Context, id int64, writer string) (stream.Status, int64, bool, bool, error) {
	if s.isClosed() {
		return 0, 0, false, false, store.ErrClosedStore
	}
	var st int
	var attempt int64
	var diverged bool
	err := s.rdb.QueryRowContext(ctx, `SELECT status, attempt, diverged FROM writers WHERE stream_id = ? AND writer = ?`, id, writer).Scan(&st, &attempt, &diverged)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, false, false, nil
	}
	if err != nil {
		return 0, 0, false, false, fmt.Errorf("writer status: %w", s.readErr(err))
	}
	return stream.Status(st), attempt, diverged, true, nil
}

var _ store.LogSizer = (*Store)(nil)

// LogBytes is store.LogSizer's: the bytes of data of run's events, its
// input and its output (SQLite's length() of a blob reads its size from
// the record's header).
func (s *Store) LogBytes(ctx context.Context, run string) (int64, error) {
	if s.isClosed() {
		return 0, store.ErrClosedStore
	}
	var n int64
	if err := s.rdb.QueryRowContext(ctx, `SELECT COALESCE((SELECT sum(length(data)) FROM events WHERE run_id = ?1), 0)
		+ COALESCE((SELECT COALESCE(length(d.input), 0) + COALESCE(length(d.output), 0) FROM runs r JOIN run_data d ON d.seq = r.seq WHERE r.id = ?1), 0)`, run).Scan(&n); err != nil {
		return 0, fmt.Errorf("log bytes: %w", s.readErr(err))
	}
	return n, nil
}
