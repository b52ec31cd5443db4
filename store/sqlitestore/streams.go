package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

const defaultContentType = "application/octet-stream"

type rowScanner interface{ Scan(dest ...any) error }

func scanStream(row rowScanner) (*store.StreamInfo, error) {
	var si store.StreamInfo
	var created, expires, access, cbEpoch, cbSeq, forkOffset, forkSub int64
	var ttl, forkSource sql.NullInt64
	var closedBy sql.NullString
	var forkPath string
	if err := row.Scan(&si.ID, &si.Path, &si.RunID, &si.Name, &si.ContentType, &si.NextOffset, &si.Closed, &created,
		&ttl, &expires, &access, &closedBy, &cbEpoch, &cbSeq, &si.StreamSeq,
		&forkSource, &forkPath, &forkOffset, &forkSub, &si.Forks, &si.Deleted); err != nil {
		return nil, err
	}
	si.CreatedAt = fromNanos(created)
	si.LastAccess = fromNanos(access)
	if ttl.Valid {
		si.Expiry.HasTTL, si.Expiry.TTL = true, time.Duration(ttl.Int64)
	}
	si.Expiry.At = fromNanos(expires)
	if closedBy.Valid {
		si.ClosedBy = &stream.Producer{ID: closedBy.String, Epoch: cbEpoch, Seq: cbSeq}
	}
	if forkSource.Valid {
		si.Fork = &store.ForkInfo{SourceID: forkSource.Int64, SourcePath: forkPath, Offset: forkOffset, SubOffset: forkSub}
	}
	return &si, nil
}

// OpenStream returns the stream at p.Path (or at the path of p.RunID's stream
// p.Name), creating it if p.Create. A standalone stream cannot be created
// under "runs/": that prefix belongs to run streams.
func (s *Store) OpenStream(ctx context.Context, p *store.OpenStreamParams) (*store.StreamInfo, error) {
	path, err := store.StreamPath(p)
	if err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	si, err := scanStream(s.r.streamByPath.QueryRowContext(ctx, path))
	if err == nil {
		return si, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("open stream: %w", s.readErr(err))
	}
	if !p.Create {
		return nil, fmt.Errorf("open stream %q: %w", path, store.ErrNotFound)
	}
	if p.RunID == "" && strings.HasPrefix(path, "runs/") {
		return nil, fmt.Errorf("open stream: %w: path %q is reserved for run streams; give RunID and Name", store.ErrInvalid, path)
	}
	ct := p.ContentType
	if ct == "" {
		ct = defaultContentType
	}
	now := nanos(s.cfg.Now())
	err = s.write(ctx, func(tx *wtx) error {
		// Re-check: another op may have created it since our read.
		si, err = scanStream(tx.w.streamByPath.QueryRowContext(bg, path))
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return translate(err)
		}
		if p.RunID != "" {
			var epoch int64
			var owner, status string
			err := tx.w.runLease.QueryRowContext(bg, p.RunID).Scan(&epoch, &owner, &status)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("run %q: %w", p.RunID, store.ErrNotFound)
			}
			if err != nil {
				return translate(err)
			}
		}
		si, err = scanStream(tx.w.insertStream.QueryRowContext(bg, path, p.RunID, p.Name, ct, now))
		return translate(err)
	})
	if err != nil {
		return nil, fmt.Errorf("create stream: %w", err)
	}
	return si, nil
}

// GetStream returns a stream by id.
func (s *Store) GetStream(ctx context.Context, id int64) (*store.StreamInfo, error) {
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	si, err := scanStream(s.r.stream.QueryRowContext(ctx, id))
	if err != nil {
		return nil, fmt.Errorf("get stream %d: %w", id, s.readErr(err))
	}
	return si, nil
}

// ListStreams returns the streams of a run by name; none for an unknown run.
func (s *Store) ListStreams(ctx context.Context, runID string) ([]*store.StreamInfo, error) {
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
		si, err := scanStream(rows)
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
// store.AppendParams). The chunks are not retained.
func (s *Store) Append(ctx context.Context, p *store.AppendParams) (*store.AppendResult, error) {
	if err := store.CheckAppend(p); err != nil {
		return nil, fmt.Errorf("append: %w", err)
	}
	now := p.Now
	if now.IsZero() {
		now = s.cfg.Now()
	}
	var res *store.AppendResult
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		res, err = tx.append(p, now.UnixNano())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("append: %w", err)
	}
	return res, nil
}

func (tx *wtx) append(p *store.AppendParams, now int64) (*store.AppendResult, error) {
	st, err := tx.stream(p.StreamID)
	if err != nil {
		return nil, err
	}
	if st.deleted {
		return nil, fmt.Errorf("stream %d: %w", st.id, store.ErrGone)
	}
	if st.expired(now) {
		return nil, fmt.Errorf("stream %d expired: %w", st.id, store.ErrNotFound)
	}
	if p.IdempotencyKey != "" {
		if res, err := tx.replayKey(st.id, p, now); res != nil || err != nil {
			return res, err
		}
	}
	res, err := tx.appendOnce(st, p, now)
	if err != nil {
		return nil, err
	}
	if p.IdempotencyKey != "" {
		if err := tx.saveKey(st.id, p, res, now); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// appendOnce applies steps 3 to 7 of store.AppendParams.
func (tx *wtx) appendOnce(st *streamState, p *store.AppendParams, now int64) (*store.AppendResult, error) {
	// 3. A closed stream.
	if st.head.Closed {
		switch {
		case p.Producer != nil && st.closedBy != nil && *p.Producer == *st.closedBy:
			return &store.AppendResult{NextOffset: st.head.NextOffset, Closed: true, Duplicate: true,
				ProducerEpoch: p.Producer.Epoch, ProducerSeq: p.Producer.Seq}, nil
		case p.Close && len(p.Chunks) == 0 && p.Writer == "" && p.Producer == nil:
			return &store.AppendResult{NextOffset: st.head.NextOffset, Closed: true}, nil
		case p.Writer == "":
			return nil, stream.ErrClosed
		}
	}
	// 4. The producer.
	res := &store.AppendResult{}
	var prod stream.ProducerState
	if p.Producer != nil {
		cur, err := tx.producer(st.id, p.Producer.ID)
		if err != nil {
			return nil, err
		}
		var dup bool
		prod, dup, err = stream.Produce(cur, *p.Producer)
		if err != nil {
			return nil, err
		}
		res.ProducerEpoch, res.ProducerSeq = prod.Epoch, prod.LastSeq
		if dup {
			res.Duplicate, res.NextOffset, res.Closed = true, st.head.NextOffset, st.head.Closed
			return res, nil
		}
	}
	// 5. Stream-Seq.
	if err := stream.CheckStreamSeq(st.streamSeq, p.StreamSeq); err != nil {
		return nil, err
	}
	// 6. The chunks.
	if len(p.Chunks) > 0 {
		acks, aborted, err := tx.appendChunks(st, p)
		if err != nil {
			return nil, err
		}
		res.Acks, res.Aborted = acks, aborted
	}
	// 7. Close, and the metadata.
	if p.Close {
		if _, err := tx.closeStream(st); err != nil {
			return nil, err
		}
	}
	metaChanged := false
	if p.Producer != nil {
		if err := tx.saveProducer(st.id, p.Producer.ID, prod); err != nil {
			return nil, err
		}
		if p.Close {
			tx.changed(st, nil)
			pr := *p.Producer
			st.closedBy, metaChanged = &pr, true
		}
	}
	if p.StreamSeq != "" {
		tx.changed(st, nil)
		st.streamSeq, metaChanged = p.StreamSeq, true
	}
	if st.ttl >= 0 && now > st.lastAccess {
		tx.changed(st, nil)
		st.lastAccess, metaChanged = now, true
	}
	if metaChanged {
		if err := tx.saveMeta(st); err != nil {
			return nil, err
		}
	}
	res.NextOffset, res.Closed = st.head.NextOffset, st.head.Closed
	return res, nil
}

// appendChunks applies the chunk rules (stream.Append) to p's chunks, and
// reports whether they wrote an abort record.
func (tx *wtx) appendChunks(st *streamState, p *store.AppendParams) ([]stream.Ack, bool, error) {
	req := stream.AppendRequest{Attempt: p.Attempt, FirstSeq: p.FirstSeq, Chunks: p.Chunks}
	var w *stream.Writer
	fresh := false
	var err error
	if p.Writer != "" {
		if w, err = tx.writer(st, p.Writer); err != nil {
			return nil, false, err
		}
		if w == nil {
			w, fresh = &stream.Writer{ID: p.Writer}, true
		}
		if st.runID != "" {
			if req.Fence, err = tx.fence(st.runID, p.Writer); err != nil {
				return nil, false, err
			}
		}
	}
	var before stream.Writer
	if w != nil {
		before = *w
	}
	acks, recs, err := stream.Append(&st.head, w, &req)
	if err != nil {
		return nil, false, err
	}
	if len(recs) == 0 && (w == nil || !fresh && sameState(&before, w)) {
		return acks, false, nil // retransmits only: nothing to write
	}
	tx.changed(st, w)
	if fresh {
		tx.c.writers.put(writerKey{st.id, w.ID}, w)
	}
	if err := tx.writeRecords(st, recs); err != nil {
		return nil, false, err
	}
	if w != nil {
		if err := tx.saveWriter(st.id, w); err != nil {
			return nil, false, err
		}
	}
	aborted := false
	for i := range recs {
		aborted = aborted || recs[i].Kind == stream.KindAbort
	}
	return acks, aborted, nil
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
	var res stream.Result
	err := s.write(ctx, func(tx *wtx) error {
		st, err := tx.stream(p.StreamID)
		if err != nil {
			return err
		}
		res, err = tx.finish(st, p.Writer, p.Attempt, p.Commit)
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
		st, err := tx.stream(id)
		if err != nil {
			return err
		}
		res, err = tx.closeStream(st)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("close stream: %w", err)
	}
	return res, nil
}

// Read returns a page of the live view. Records' Data share one buffer per
// call.
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
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	if recs, next, closed, ok := s.tail.read(p.StreamID, p.From, limit, maxBytes); ok {
		return &store.ReadResult{Records: recs, NextOffset: next, Closed: closed}, nil
	}
	res := &store.ReadResult{}
	// The head first: records committed after it are left for the next read,
	// so the page and NextOffset agree without a read transaction.
	err := s.r.head.QueryRowContext(ctx, p.StreamID).Scan(&res.NextOffset, &res.Closed)
	if err != nil {
		return nil, fmt.Errorf("read stream %d: %w", p.StreamID, s.readErr(err))
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
	var (
		scratch []stream.Record
		arena   []byte
		bytes   int
	)
rows:
	for rows.Next() {
		var first int64
		var data sql.RawBytes
		if err := rows.Scan(&first, &data); err != nil {
			return nil, fmt.Errorf("read: %w", s.readErr(err))
		}
		scratch, err = stream.DecodeBatch(scratch[:0], data, first, p.From)
		if err != nil {
			return nil, fmt.Errorf("read stream %d: %w", p.StreamID, err)
		}
		for i := range scratch {
			r := scratch[i]
			if r.Offset >= res.NextOffset || len(res.Records) == limit ||
				len(res.Records) > 0 && bytes+len(r.Data) > maxBytes {
				break rows
			}
			if r.Data != nil {
				// RawBytes die with the next row: copy into one arena per call.
				if cap(arena)-len(arena) < len(r.Data) {
					arena = make([]byte, 0, max(len(r.Data), 2*cap(arena), min(maxBytes, 4<<10)))
				}
				n := len(arena)
				arena = append(arena, r.Data...)
				r.Data = arena[n:len(arena):len(arena)]
			}
			bytes += len(r.Data)
			res.Records = append(res.Records, r)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read: %w", s.readErr(err))
	}
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
	w := s.notify.subscribe(id)
	defer s.notify.unsubscribe(id, w)
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
	case <-w.ch:
		return false, nil
	case <-ctx.Done():
		return true, ctx.Err()
	case <-s.closing:
		return true, store.ErrClosedStore
	}
}
