package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

const defaultContentType = "application/octet-stream"

func scanStream(row pgx.Row) (*store.StreamInfo, error) {
	var si store.StreamInfo
	var created int64
	if err := row.Scan(&si.ID, &si.Path, &si.RunID, &si.Name, &si.ContentType, &si.NextOffset, &si.Closed, &created); err != nil {
		return nil, err
	}
	si.CreatedAt = fromNanos(created)
	return &si, nil
}

// OpenStream returns the stream at p.Path (or at the path of p.RunID's stream
// p.Name), creating it if p.Create.
func (s *Store) OpenStream(ctx context.Context, p *store.OpenStreamParams) (*store.StreamInfo, error) {
	path := p.Path
	if p.RunID != "" || p.Name != "" {
		if p.RunID == "" || p.Name == "" {
			return nil, fmt.Errorf("open stream: %w: a run stream needs both a run id and a name", store.ErrInvalid)
		}
		path = store.RunStreamPath(p.RunID, p.Name)
		if p.Path != "" && p.Path != path {
			return nil, fmt.Errorf("open stream: %w: path %q is not run %q's stream %q", store.ErrInvalid, p.Path, p.RunID, p.Name)
		}
	}
	if path == "" {
		return nil, fmt.Errorf("open stream: %w: empty path", store.ErrInvalid)
	}
	if p.Create && p.RunID == "" && strings.HasPrefix(path, "runs/") {
		// Unless it exists: a run stream opened by its path.
		si, err := s.GetStreamByPath(ctx, path)
		if err == nil {
			return si, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("open stream: %w: path %q is reserved for run streams; give RunID and Name", store.ErrInvalid, path)
	}
	ct := p.ContentType
	if ct == "" {
		ct = defaultContentType
	}
	now := nanos(s.cfg.Now())
	var si *store.StreamInfo
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var err error
		if p.Create {
			// Create first: the engine opens a stream once per run, new.
			t.committing = true
			si, err = scanStream(s.pool.QueryRow(ctx, s.q.insertStream, path, p.RunID, p.Name, ct, now))
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "23503" { // foreign key: no such run
				return fmt.Errorf("run %q: %w", p.RunID, store.ErrNotFound)
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			t.committing = false
		}
		si, err = scanStream(s.pool.QueryRow(ctx, s.q.streamByPath, path))
		if errors.Is(err, pgx.ErrNoRows) {
			if p.Create {
				// Purged between the two statements: try again.
				return &pgconn.PgError{Code: "40001", Message: "stream vanished during create"}
			}
			return fmt.Errorf("stream %q: %w", path, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open stream: %w", err)
	}
	return si, nil
}

// GetStreamByPath returns the stream at path. Returns store.ErrNotFound.
func (s *Store) GetStreamByPath(ctx context.Context, path string) (*store.StreamInfo, error) {
	var si *store.StreamInfo
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var err error
		si, err = scanStream(s.pool.QueryRow(ctx, s.q.streamByPath, path))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get stream %q: %w", path, err)
	}
	return si, nil
}

// GetStream returns a stream by id.
func (s *Store) GetStream(ctx context.Context, id int64) (*store.StreamInfo, error) {
	var si *store.StreamInfo
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var err error
		si, err = scanStream(s.pool.QueryRow(ctx, s.q.streamByID, id))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get stream %d: %w", id, err)
	}
	return si, nil
}

// ListStreams returns the streams of a run by name; none for an unknown run.
func (s *Store) ListStreams(ctx context.Context, runID string) ([]*store.StreamInfo, error) {
	var out []*store.StreamInfo
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, s.q.runStreams, runID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			si, err := scanStream(rows)
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

// Append applies one append request. The chunks are not retained.
//
// An append by a writer is one transaction of two pipelined round trips:
// the first locks the run (FOR KEY SHARE) and the stream (FOR UPDATE) and
// reads the fence and the writer's row; the rules run here; the second
// writes the batch, the head and the writer, and commits. Appends to one
// stream are serialized by its row lock, nothing else. An anonymous append
// is one statement.
func (s *Store) Append(ctx context.Context, p *store.AppendParams) (*store.AppendResult, error) {
	if err := store.CheckAppend(p); err != nil {
		return nil, fmt.Errorf("append: %w", err)
	}
	var res *store.AppendResult
	var err error
	if p.Writer == "" {
		res, err = s.appendAnon(ctx, p)
	} else {
		res, err = s.appendWriter(ctx, p)
	}
	if err != nil {
		return nil, fmt.Errorf("append: %w", err)
	}
	return res, nil
}

func (s *Store) appendAnon(ctx context.Context, p *store.AppendParams) (*store.AppendResult, error) {
	// The records do not depend on the stream: only their offsets do.
	var h stream.Head
	acks, recs, _ := stream.Append(&h, nil, &stream.AppendRequest{Chunks: p.Chunks})
	data := stream.EncodeBatch(make([]byte, 0, encodedSize(p.Chunks)), recs)
	var base int64
	// Not idempotent: an anonymous append whose reply was lost cannot tell
	// whether it landed, so it is not retried then.
	err := s.do(ctx, false, func(ctx context.Context, t *try) error {
		var closed bool
		t.committing = true
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
		defer cancel()
		err := s.pool.QueryRow(cctx, s.q.appendAnon, p.StreamID, int64(len(recs)), data, false).Scan(&base, &closed)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("stream %d: %w", p.StreamID, store.ErrNotFound)
		}
		if err == nil && closed {
			return stream.ErrClosed
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for i := range acks {
		acks[i].Offset += base
	}
	s.wrote(p.StreamID)
	return &store.AppendResult{Acks: acks, NextOffset: base + int64(len(recs))}, nil
}

func encodedSize(chunks [][]byte) int {
	n := 0
	for _, c := range chunks {
		n += len(c) + stream.DigestSize + 8
	}
	return n
}

// lockedWriter is what the first round trip of a writer's operation reads.
type lockedWriter struct {
	runID  string
	head   stream.Head
	fence  int64
	row    writerRow
	hasRow bool
}

// lockWriter begins x's transaction: it locks stream id's run and the stream,
// and reads the fence and writer's row.
func (s *Store) lockWriter(ctx context.Context, x *txn, id int64, writer string) (*lockedWriter, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(s.q.lockRunOfStream, id)
	b.Queue(s.q.lockStream, id)
	b.Queue(s.q.streamFence, id, writer)
	b.Queue(s.q.writer, id, writer)
	br := x.send(ctx, b)
	defer br.Close()
	var lw lockedWriter
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	err := br.QueryRow().Scan(&lw.runID, &lw.head.NextOffset, &lw.head.Closed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("stream %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if err := br.QueryRow().Scan(&lw.fence); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	err = lw.row.scan(br.QueryRow())
	lw.hasRow = err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	return &lw, br.Close()
}

// saveWriter queues the writes of one rules call of writer w on stream id
// and the commit.
func (s *Store) saveWriter(b *pgx.Batch, id int64, h *stream.Head, w *stream.Writer, recs []stream.Record, token int64) {
	if len(recs) > 0 {
		data := stream.EncodeBatch(nil, recs)
		b.Queue(s.q.insertBatch, id, recs[len(recs)-1].Offset, recs[0].Offset, recs[0].Writer, data)
		b.Queue(s.q.setHead, id, h.NextOffset, h.Closed)
	}
	b.Queue(s.q.putWriter, id, w.ID, w.Attempt, w.Next, w.Diverged, int16(w.Status), token)
	b.Queue("COMMIT")
}

func (s *Store) appendWriter(ctx context.Context, p *store.AppendParams) (*store.AppendResult, error) {
	key := writerKey{p.StreamID, p.Writer}
	token := newToken()
	var res, sent *store.AppendResult
	// Idempotent: a retry whose earlier try committed finds its token on
	// the writer's row and returns that try's reply.
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		x, err := s.acquire(ctx, t)
		if err != nil {
			return err
		}
		defer x.release()
		lw, err := s.lockWriter(ctx, x, p.StreamID, p.Writer)
		if err != nil {
			return err
		}
		if sent != nil && lw.hasRow && lw.row.token == token {
			res = sent
			return nil
		}
		w := &stream.Writer{ID: p.Writer}
		if lw.hasRow {
			if w, err = s.loadWriter(ctx, x, p.StreamID, p.Writer, &lw.row); err != nil {
				return err
			}
		}
		before := *w
		acks, recs, err := stream.Append(&lw.head, w, &stream.AppendRequest{
			Attempt: p.Attempt, FirstSeq: p.FirstSeq, Chunks: p.Chunks, Fence: lw.fence,
		})
		if err != nil {
			if lw.hasRow {
				s.writers.put(key, w, lw.row.version) // the rules change nothing on error
			}
			return err
		}
		r := &store.AppendResult{Acks: acks, NextOffset: lw.head.NextOffset}
		if len(recs) == 0 && lw.hasRow && sameState(&before, w) {
			s.writers.put(key, w, lw.row.version)
			res = r
			return nil // retransmits only: nothing to write
		}
		b := &pgx.Batch{}
		s.saveWriter(b, p.StreamID, &lw.head, w, recs, token)
		sent = r
		if err := x.commit(ctx, b); err != nil {
			return err
		}
		s.writers.put(key, w, lw.row.version+1)
		res = r
		if len(recs) > 0 {
			s.wrote(p.StreamID)
		}
		return nil
	})
	return res, err
}

// sameState reports whether the persisted fields of a and b are equal.
func sameState(a, b *stream.Writer) bool {
	return a.Attempt == b.Attempt && a.Next == b.Next && a.Diverged == b.Diverged && a.Status == b.Status
}

// FinishWriter commits or aborts one writer on one stream.
func (s *Store) FinishWriter(ctx context.Context, p *store.FinishWriterParams) (stream.Result, error) {
	if p.Writer == "" || p.Attempt < 0 {
		return 0, fmt.Errorf("finish writer: %w: a writer and an attempt >= 0 are required", store.ErrInvalid)
	}
	key := writerKey{p.StreamID, p.Writer}
	token := newToken()
	var res stream.Result
	var sent bool
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		x, err := s.acquire(ctx, t)
		if err != nil {
			return err
		}
		defer x.release()
		lw, err := s.lockWriter(ctx, x, p.StreamID, p.Writer)
		if err != nil {
			return err
		}
		if sent && lw.hasRow && lw.row.token == token {
			res = stream.Done
			return nil
		}
		var w *stream.Writer
		if lw.hasRow {
			if w, err = s.loadWriter(ctx, x, p.StreamID, p.Writer, &lw.row); err != nil {
				return err
			}
			if lw.runID != "" && p.Attempt < lw.fence {
				s.writers.put(key, w, lw.row.version)
				return &stream.FencedError{Attempt: p.Attempt, Current: lw.fence}
			}
		}
		rule := stream.Abort
		if p.Commit {
			rule = stream.Commit
		}
		r, recs, err := rule(&lw.head, w, p.Attempt)
		if err != nil || r == stream.Already {
			if w != nil {
				s.writers.put(key, w, lw.row.version)
			}
			res = r
			return err
		}
		b := &pgx.Batch{}
		s.saveWriter(b, p.StreamID, &lw.head, w, recs, token)
		sent = true
		if err := x.commit(ctx, b); err != nil {
			return err
		}
		s.writers.put(key, w, lw.row.version+1)
		res = r
		s.wrote(p.StreamID)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("finish writer: %w", err)
	}
	return res, nil
}

// CloseStream closes a stream; the second close writes nothing and returns
// stream.Already. One statement: the close record depends on nothing.
func (s *Store) CloseStream(ctx context.Context, id int64) (stream.Result, error) {
	h := stream.Head{}
	_, recs := stream.Close(&h)
	data := stream.EncodeBatch(nil, recs)
	var res stream.Result
	// Idempotent: a retry after a lost reply finds the stream closed.
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var base int64
		var closed bool
		t.committing = true
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
		defer cancel()
		err := s.pool.QueryRow(cctx, s.q.appendAnon, id, int64(1), data, true).Scan(&base, &closed)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("stream %d: %w", id, store.ErrNotFound)
		}
		res = stream.Done
		if closed {
			res = stream.Already
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("close stream: %w", err)
	}
	if res == stream.Done {
		s.wrote(id)
	}
	return res, nil
}

// Read returns a page of the live view: the stream's head and its batches
// from p.From on, in one statement and so one snapshot.
func (s *Store) Read(ctx context.Context, p *store.ReadParams) (*store.ReadResult, error) {
	if p.From < 0 || p.Limit < 0 || p.MaxBytes < 0 {
		return nil, fmt.Errorf("read: %w: negative from, limit or max bytes", store.ErrInvalid)
	}
	limit, maxBytes := p.Limit, p.MaxBytes
	if limit == 0 {
		limit = 1000
	}
	if maxBytes == 0 {
		maxBytes = 4 << 20
	}
	var res *store.ReadResult
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		res = &store.ReadResult{}
		rows, err := s.pool.Query(ctx, s.q.read, p.StreamID, p.From, limit, maxBytes)
		if err != nil {
			return err
		}
		defer rows.Close()
		var (
			scratch []stream.Record
			bytes   int
			found   bool
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
			if first == nil || len(res.Records) == limit {
				continue
			}
			// data is this row's own copy: records may alias it.
			scratch, err = stream.DecodeBatch(scratch[:0], data, *first, p.From)
			if err != nil {
				return fmt.Errorf("stream %d: %w", p.StreamID, err)
			}
			for _, r := range scratch {
				if len(res.Records) == limit || len(res.Records) > 0 && bytes+len(r.Data) > maxBytes {
					limit = len(res.Records) // full: ignore the rest
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
