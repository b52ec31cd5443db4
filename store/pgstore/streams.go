package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

const defaultContentType = "application/octet-stream"

func scanStream(row pgx.Row) (*store.StreamInfo, error) {
	var si store.StreamInfo
	var created, expires, access, cbEpoch, cbSeq, forkOffset, forkSub int64
	var ttl, forkSource *int64
	var closedBy *string
	var forkPath string
	if err := row.Scan(&si.ID, &si.Path, &si.RunID, &si.Name, &si.ContentType, &si.NextOffset, &si.Closed, &created,
		&ttl, &expires, &access, &closedBy, &cbEpoch, &cbSeq, &si.StreamSeq,
		&forkSource, &forkPath, &forkOffset, &forkSub, &si.Forks, &si.Deleted); err != nil {
		return nil, err
	}
	si.CreatedAt = fromNanos(created)
	si.LastAccess = fromNanos(access)
	if ttl != nil {
		si.Expiry.HasTTL, si.Expiry.TTL = true, time.Duration(*ttl)
	}
	si.Expiry.At = fromNanos(expires)
	if closedBy != nil {
		si.ClosedBy = &stream.Producer{ID: *closedBy, Epoch: cbEpoch, Seq: cbSeq}
	}
	if forkSource != nil {
		si.Fork = &store.ForkInfo{SourceID: *forkSource, SourcePath: forkPath, Offset: forkOffset, SubOffset: forkSub}
	}
	return &si, nil
}

// OpenStream returns the stream at p.Path (or at the path of p.RunID's stream
// p.Name), creating it if p.Create.
func (s *Store) OpenStream(ctx context.Context, p *store.OpenStreamParams) (*store.StreamInfo, error) {
	path, err := store.StreamPath(p)
	if err != nil {
		return nil, err
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
	var si *store.StreamInfo
	if !p.Create {
		var err error
		if si, err = s.GetStreamByPath(ctx, path); err != nil {
			return nil, fmt.Errorf("open stream: %w", err)
		}
		return si, nil
	}
	// Created in a group commit, or found there if it exists.
	o := &op{kind: opOpenStream, open: &store.OpenStreamParams{Path: path, RunID: p.RunID, Name: p.Name}, openCT: ct, now: nanos(s.cfg.Now())}
	if err := s.exec(ctx, o); err != nil {
		return nil, fmt.Errorf("open stream: %w", err)
	}
	si = o.info
	s.setStreamRun(si.ID, si.RunID)
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
	s.setStreamRun(si.ID, si.RunID)
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
	s.setStreamRun(si.ID, si.RunID)
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

// Append applies one append request, with its Durable Streams options (see
// store.AppendParams), in a group commit (committer.go). The chunks are not
// retained.
func (s *Store) Append(ctx context.Context, p *store.AppendParams) (*store.AppendResult, error) {
	if err := store.CheckAppend(p); err != nil {
		return nil, fmt.Errorf("append: %w", err)
	}
	now := p.Now
	if now.IsZero() {
		now = s.cfg.Now()
	}
	o := &op{kind: opAppend, append: p, now: nanos(now)}
	if err := s.exec(ctx, o); err != nil {
		return nil, fmt.Errorf("append: %w", err)
	}
	return o.res, nil
}

// streamMeta is a stream as an append sees it, read with its row locked.
type streamMeta struct {
	runID      string
	head       stream.Head
	ttl        *int64
	expiresAt  int64
	lastAccess int64
	closedBy   *stream.Producer
	streamSeq  string
	deleted    bool
}

// expired reports whether the stream is expired at now (StreamInfo.Expired).
func (m *streamMeta) expired(now int64) bool {
	if m.ttl != nil && now-m.lastAccess >= *m.ttl {
		return true
	}
	return m.expiresAt != 0 && now >= m.expiresAt
}

type storedKey struct {
	digest, result []byte
	expiresAt      int64
}

// appendPlan is what an append writes; nil when it writes nothing.
type appendPlan struct {
	batches  [][]stream.Record // one per rules call, each one writer's
	writer   *stream.Writer    // to save, if any
	producer *stream.ProducerState
	meta     bool // the stream's head or metadata changed
}

// applyAppend applies steps 3 to 7 of store.AppendParams to m (which it
// changes) and w: the reply, and what to write (nil for nothing).
func (s *Store) applyAppend(p *store.AppendParams, m *streamMeta, fence int64, w *stream.Writer,
	prod *stream.ProducerState, now int64) (*store.AppendResult, *appendPlan, error) {
	// 3. A closed stream.
	if m.head.Closed {
		switch {
		case p.Producer != nil && m.closedBy != nil && *p.Producer == *m.closedBy:
			return &store.AppendResult{NextOffset: m.head.NextOffset, Closed: true, Duplicate: true,
				ProducerEpoch: p.Producer.Epoch, ProducerSeq: p.Producer.Seq}, nil, nil
		case p.Close && len(p.Chunks) == 0 && p.Writer == "" && p.Producer == nil:
			return &store.AppendResult{NextOffset: m.head.NextOffset, Closed: true}, nil, nil
		case p.Writer == "":
			return nil, nil, stream.ErrClosed
		}
	}
	res := &store.AppendResult{}
	plan := &appendPlan{}
	// 4. The producer.
	if p.Producer != nil {
		next, dup, err := stream.Produce(prod, *p.Producer)
		if err != nil {
			return nil, nil, err
		}
		res.ProducerEpoch, res.ProducerSeq = next.Epoch, next.LastSeq
		if dup {
			res.Duplicate, res.NextOffset, res.Closed = true, m.head.NextOffset, m.head.Closed
			return res, nil, nil
		}
		plan.producer = &next
	}
	// 5. Stream-Seq.
	if err := stream.CheckStreamSeq(m.streamSeq, p.StreamSeq); err != nil {
		return nil, nil, err
	}
	// 6. The chunks.
	if len(p.Chunks) > 0 {
		fresh := w == nil && p.Writer != ""
		if fresh {
			w = &stream.Writer{ID: p.Writer}
		}
		var before stream.Writer
		if w != nil {
			before = *w
		}
		acks, recs, err := stream.Append(&m.head, w, &stream.AppendRequest{
			Attempt: p.Attempt, FirstSeq: p.FirstSeq, Chunks: p.Chunks, Fence: fence,
		})
		if err != nil {
			return nil, nil, err
		}
		res.Acks = acks
		if len(recs) > 0 {
			plan.batches = append(plan.batches, recs)
			plan.meta = true
		}
		for i := range recs {
			res.Aborted = res.Aborted || recs[i].Kind == stream.KindAbort
		}
		if w != nil && (fresh || !sameState(&before, w)) {
			plan.writer = w
		}
	}
	// 7. Close, and the metadata.
	if p.Close {
		if r, recs := stream.Close(&m.head); r == stream.Done {
			plan.batches = append(plan.batches, recs)
			plan.meta = true
		}
		if p.Producer != nil {
			pr := *p.Producer
			m.closedBy = &pr
		}
	}
	if p.StreamSeq != "" {
		m.streamSeq, plan.meta = p.StreamSeq, true
	}
	if m.ttl != nil && now > m.lastAccess {
		m.lastAccess, plan.meta = now, true
	}
	res.NextOffset, res.Closed = m.head.NextOffset, m.head.Closed
	if len(plan.batches) == 0 && plan.writer == nil && plan.producer == nil && !plan.meta && p.IdempotencyKey == "" {
		return res, nil, nil // retransmits only: nothing to write
	}
	return res, plan, nil
}

// keyResult is an append result as an idempotency key keeps it (the same
// JSON as the SQLite store's).
type keyResult struct {
	Acks          [][2]int64 `json:"a,omitempty"` // offset, outcome
	NextOffset    int64      `json:"n"`
	Aborted       bool       `json:"ab,omitempty"`
	Closed        bool       `json:"c,omitempty"`
	Duplicate     bool       `json:"d,omitempty"`
	ProducerEpoch int64      `json:"pe,omitempty"`
	ProducerSeq   int64      `json:"ps,omitempty"`
}

func encodeKeyResult(res *store.AppendResult) []byte {
	kr := keyResult{NextOffset: res.NextOffset, Aborted: res.Aborted, Closed: res.Closed, Duplicate: res.Duplicate,
		ProducerEpoch: res.ProducerEpoch, ProducerSeq: res.ProducerSeq}
	if len(res.Acks) > 0 {
		kr.Acks = make([][2]int64, len(res.Acks))
		for i, a := range res.Acks {
			kr.Acks[i] = [2]int64{a.Offset, int64(a.Outcome)}
		}
	}
	b, _ := json.Marshal(kr) // cannot fail: plain fields
	return b
}

func decodeKeyResult(b []byte) (*store.AppendResult, error) {
	var kr keyResult
	if err := json.Unmarshal(b, &kr); err != nil {
		return nil, err
	}
	res := &store.AppendResult{NextOffset: kr.NextOffset, Aborted: kr.Aborted, Closed: kr.Closed, Duplicate: kr.Duplicate,
		ProducerEpoch: kr.ProducerEpoch, ProducerSeq: kr.ProducerSeq, Replayed: true}
	if len(kr.Acks) > 0 {
		res.Acks = make([]stream.Ack, len(kr.Acks))
		for i, a := range kr.Acks {
			res.Acks[i] = stream.Ack{Offset: a[0], Outcome: stream.Outcome(a[1])}
		}
	}
	return res, nil
}

// sameState reports whether the persisted fields of a and b are equal.
func sameState(a, b *stream.Writer) bool {
	return a.Attempt == b.Attempt && a.Next == b.Next && a.Diverged == b.Diverged && a.Status == b.Status
}

// FinishWriter commits or aborts one writer on one stream, in a group
// commit.
func (s *Store) FinishWriter(ctx context.Context, p *store.FinishWriterParams) (stream.Result, error) {
	if p.Writer == "" || p.Attempt < 0 {
		return 0, fmt.Errorf("finish writer: %w: a writer and an attempt >= 0 are required", store.ErrInvalid)
	}
	o := &op{kind: opFinish, finish: p}
	if err := s.exec(ctx, o); err != nil {
		return 0, fmt.Errorf("finish writer: %w", err)
	}
	return o.result, nil
}

// CloseStream closes a stream, in a group commit; the second close writes
// nothing and returns stream.Already.
func (s *Store) CloseStream(ctx context.Context, id int64) (stream.Result, error) {
	o := &op{kind: opClose, stream: id}
	if err := s.exec(ctx, o); err != nil {
		return 0, fmt.Errorf("close stream: %w", err)
	}
	return o.result, nil
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
