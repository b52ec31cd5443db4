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
	s.known.see(head{id: si.ID, next: si.NextOffset, closed: si.Closed, known: true})
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
	s.known.see(head{id: si.ID, next: si.NextOffset, closed: si.Closed, known: true})
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
	s.known.see(head{id: si.ID, next: si.NextOffset, closed: si.Closed, known: true})
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
