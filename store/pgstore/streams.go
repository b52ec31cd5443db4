package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
	"github.com/weirhq/weir/stream"
)

// OpenStream returns the stream at p.Path (or at the path of p.RunID's stream
// p.Name), creating it if p.Create.
func (s *Store) OpenStream(ctx context.Context, p *store.OpenStreamParams) (*store.StreamInfo, error) {
	path, err := p.ResolvePath()
	if err != nil {
		return nil, fmt.Errorf("open stream: %w", err)
	}
	if !p.Create || p.CheckCreate(path) != nil {
		// Found, or refused: a standalone path under "runs/" opens only
		// the run stream that is there.
		si, err := s.GetStreamByPath(ctx, path)
		if errors.Is(err, store.ErrNotFound) {
			if p.Create {
				return nil, fmt.Errorf("open stream: %w", p.CheckCreate(path))
			}
			return nil, fmt.Errorf("open stream: stream %q: %w", path, store.ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("open stream: %w", err)
		}
		return si, nil
	}
	// Created in a group commit, or found there if it exists.
	o := &openStreamOp{path: path, runID: p.RunID, name: p.Name, contentType: store.ContentTypeOr(p.ContentType), now: sqlrow.Nanos(s.cfg.Now())}
	if err := s.exec(ctx, o); err != nil {
		return nil, fmt.Errorf("open stream: %w", err)
	}
	si := o.info
	s.setStreamRun(si.ID, si.RunID)
	return si, nil
}

// GetStreamByPath returns the stream at path. Returns store.ErrNotFound.
func (s *Store) GetStreamByPath(ctx context.Context, path string) (*store.StreamInfo, error) {
	var si *store.StreamInfo
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var err error
		si, err = sqlrow.ScanStream(s.pool.QueryRow(ctx, s.q.streamByPath, path))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get stream %q: %w", path, err)
	}
	s.setStreamRun(si.ID, si.RunID)
	return si, nil
}

// GetStream returns a stream by id.
func (s *Store) GetStream(ctx context.Context, id int64) (*store.StreamInfo, error) {
	var si *store.StreamInfo
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var err error
		si, err = sqlrow.ScanStream(s.pool.QueryRow(ctx, s.q.streamByID, id))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get stream %d: %w", id, err)
	}
	s.setStreamRun(si.ID, si.RunID)
	return si, nil
}

// ListStreams returns the streams of a run by name; none for an unknown run.
func (s *Store) ListStreams(ctx context.Context, runID string) ([]*store.StreamInfo, error) {
	if err := store.CheckRunID(runID); err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	var out []*store.StreamInfo
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, s.q.runStreams, runID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			si, err := sqlrow.ScanStream(rows)
			if err != nil {
				return err
			}
			out = append(out, si)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	return out, nil
}

// Append applies one append request, with its Durable Streams options (see
// store.AppendParams, and apply.Append for the rules), in a group commit
// (committer.go). The chunks are not retained.
func (s *Store) Append(ctx context.Context, p *store.AppendParams) (*store.AppendResult, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("append: %w", err)
	}
	o := &appendOp{p: p.WithDefaults(s.cfg.Now)}
	if err := s.exec(ctx, o); err != nil {
		return nil, fmt.Errorf("append: %w", err)
	}
	return o.res, nil
}

// FinishWriter commits or aborts one writer on one stream (apply.Finish), in
// a group commit.
func (s *Store) FinishWriter(ctx context.Context, p *store.FinishWriterParams) (stream.Result, error) {
	if err := p.Check(); err != nil {
		return 0, fmt.Errorf("finish writer: %w", err)
	}
	o := &finishOp{p: p}
	if err := s.exec(ctx, o); err != nil {
		return 0, fmt.Errorf("finish writer: %w", err)
	}
	return o.result, nil
}

// CloseStream closes a stream, in a group commit; the second close writes
// nothing and returns stream.Already.
func (s *Store) CloseStream(ctx context.Context, id int64) (stream.Result, error) {
	o := &closeOp{id: id}
	if err := s.exec(ctx, o); err != nil {
		return 0, fmt.Errorf("close stream: %w", err)
	}
	return o.result, nil
}

// Read returns a page of the live view: the stream's head and its batches
// from p.From on, in one statement and so one snapshot.
func (s *Store) Read(ctx context.Context, p *store.ReadParams) (*store.ReadResult, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	p = p.WithDefaults()
	var res *store.ReadResult
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		res = &store.ReadResult{}
		rows, err := s.pool.Query(ctx, s.q.read, p.StreamID, p.From, p.Limit, p.MaxBytes)
		if err != nil {
			return err
		}
		defer rows.Close()
		var (
			scratch []stream.Record
			bytes   int
			found   bool
			full    bool
			first   *int64
			data    []byte
		)
		for rows.Next() {
			if err := rows.Scan(&res.NextOffset, &res.Closed, &first, &data); err != nil {
				return err
			}
			found = true
			if p.From > res.NextOffset {
				return fmt.Errorf("%w: offset %d is past the stream's next offset %d", store.ErrInvalid, p.From, res.NextOffset)
			}
			if first == nil || full {
				continue
			}
			// data is this row's own copy: records may alias it.
			scratch, err = stream.DecodeBatch(scratch[:0], data, *first, p.From)
			if err != nil {
				return fmt.Errorf("stream %d: %w", p.StreamID, err)
			}
			for _, r := range scratch {
				if !p.Fits(len(res.Records), bytes, &r) {
					full = true // ignore the rest
					break
				}
				bytes += len(r.Data)
				res.Records = append(res.Records, r)
			}
			data = nil
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("stream %d: %w", p.StreamID, store.ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	return res, nil
}

// ListStandaloneStreams lists standalone streams by path (apply.ListStandalone).
func (s *Store) ListStandaloneStreams(ctx context.Context, p *store.ListStandaloneParams) (*store.StreamList, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	p = p.WithDefaults(s.cfg.Now)
	var out *store.StreamList
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var err error
		out, err = apply.ListStandalone(p, func(from string, n int) ([]*store.StreamInfo, error) {
			rows, err := s.pool.Query(ctx, s.q.standalone, from, n)
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
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	return out, nil
}
