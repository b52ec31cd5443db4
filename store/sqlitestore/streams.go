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
		tx.changed = true
		si, err = sqlrow.ScanStream(tx.w.insertStream.QueryRowContext(bg, path, p.RunID, p.Name, ct, now))
		return translate(err)
	})
	if err != nil {
		return nil, fmt.Errorf("open stream: %w", err)
	}
	return si, nil
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
	if recs, next, closed, ok := s.tail.read(p.StreamID, p.From, p); ok {
		return &store.ReadResult{Records: recs, NextOffset: next, Closed: closed}, nil
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
	rows, err := s.r.batches.QueryContext(ctx, p.StreamID, p.From)
	if err != nil {
		return nil, fmt.Errorf("read: %w", s.readErr(err))
	}
	defer rows.Close()
	// Rows are stepped one at a time, and no more once the page is full:
	// the page copies what it keeps out of each (RawBytes die with the next
	// row), so it holds about MaxBytes whatever the size of the appends.
	pg := sqlrow.NewPage(p, res.NextOffset)
	for !pg.Full() && rows.Next() {
		var first int64
		var data sql.RawBytes
		if err := rows.Scan(&first, &data); err != nil {
			return nil, fmt.Errorf("read: %w", s.readErr(err))
		}
		if err := pg.Add(data, first); err != nil {
			return nil, fmt.Errorf("read: stream %d: %w", p.StreamID, err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read: %w", s.readErr(err))
	}
	res.Records = pg.Records
	return res, nil
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
	n, closed, ok := s.tail.head(id)
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
