package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
				return &retryError{"stream vanished during create"}
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

// Append applies one append request, with its Durable Streams options (see
// store.AppendParams). The chunks are not retained.
//
// An append by a writer, or with options, is one transaction of two
// pipelined round trips: the first locks the run (FOR KEY SHARE, for a
// writer) and the stream (FOR UPDATE) and reads what the rules need (the
// fence, the writer's row, the producer, the idempotency key); the rules run
// here; the second writes the batch, the stream, the writer and the rest,
// and commits. Appends to one stream are serialized by its row lock, nothing
// else. An anonymous append without options is one statement.
func (s *Store) Append(ctx context.Context, p *store.AppendParams) (*store.AppendResult, error) {
	if err := store.CheckAppend(p); err != nil {
		return nil, fmt.Errorf("append: %w", err)
	}
	now := p.Now
	if now.IsZero() {
		now = s.cfg.Now()
	}
	var res *store.AppendResult
	var err error
	if p.Writer == "" && p.Producer == nil && p.StreamSeq == "" && !p.Close && p.IdempotencyKey == "" {
		res, err = s.appendAnon(ctx, p, nanos(now))
	} else {
		res, err = s.appendTx(ctx, p, nanos(now))
	}
	if err != nil {
		return nil, fmt.Errorf("append: %w", err)
	}
	return res, nil
}

func (s *Store) appendAnon(ctx context.Context, p *store.AppendParams, now int64) (*store.AppendResult, error) {
	// The records do not depend on the stream: only their offsets do.
	var h stream.Head
	acks, recs, _ := stream.Append(&h, nil, &stream.AppendRequest{Chunks: p.Chunks})
	data := stream.EncodeBatch(make([]byte, 0, encodedSize(p.Chunks)), recs)
	token := newToken()
	var base int64
	// Idempotent: the batch carries the token, so a retry after a lost
	// reply finds it if that try committed. The retry looks in a
	// transaction that first locks the stream: an earlier try still in
	// flight on a connection we lost commits or aborts before the look.
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var closed, deleted, ok bool
		var dup *int64
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
		defer cancel()
		args := []any{p.StreamID, int64(len(recs)), data, now, token, t.n > 0}
		var err error
		t.committing = true
		if t.n == 0 {
			err = s.pool.QueryRow(cctx, s.q.appendAnon, args...).Scan(&base, &closed, &deleted, &ok, &dup)
		} else {
			b := &pgx.Batch{}
			b.Queue("BEGIN")
			b.Queue(s.q.lockStreamOnly, p.StreamID)
			b.Queue(s.q.appendAnon, args...)
			b.Queue("COMMIT")
			err = func() error {
				br := s.pool.SendBatch(cctx, b)
				defer br.Close()
				if _, err := br.Exec(); err != nil {
					return err
				}
				if _, err := br.Exec(); err != nil {
					return err
				}
				if err := br.QueryRow().Scan(&base, &closed, &deleted, &ok, &dup); err != nil {
					return err
				}
				if _, err := br.Exec(); err != nil {
					return err
				}
				return br.Close()
			}()
		}
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("stream %d: %w", p.StreamID, store.ErrNotFound)
		case err != nil || ok:
			return err
		case dup != nil:
			base = *dup // an earlier try committed
			return nil
		case deleted:
			return fmt.Errorf("stream %d: %w", p.StreamID, store.ErrGone)
		case closed:
			return stream.ErrClosed
		}
		return fmt.Errorf("stream %d expired: %w", p.StreamID, store.ErrNotFound)
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

func (m *streamMeta) scan(row pgx.Row) error {
	var closedBy *string
	var cbEpoch, cbSeq int64
	if err := row.Scan(&m.runID, &m.head.NextOffset, &m.head.Closed, &m.ttl, &m.expiresAt, &m.lastAccess,
		&closedBy, &cbEpoch, &cbSeq, &m.streamSeq, &m.deleted); err != nil {
		return err
	}
	if closedBy != nil {
		m.closedBy = &stream.Producer{ID: *closedBy, Epoch: cbEpoch, Seq: cbSeq}
	}
	return nil
}

// expired reports whether the stream is expired at now (StreamInfo.Expired).
func (m *streamMeta) expired(now int64) bool {
	if m.ttl != nil && now-m.lastAccess >= *m.ttl {
		return true
	}
	return m.expiresAt != 0 && now >= m.expiresAt
}

// locked is what the first round trip of an append or a finish reads.
type locked struct {
	streamMeta
	fence    int64
	row      writerRow
	hasRow   bool
	producer *stream.ProducerState
	key      *storedKey
}

type storedKey struct {
	digest, result []byte
	expiresAt      int64
}

// lock begins x's transaction: it locks stream id's run (for a writer) and
// the stream, and reads the fence and the writer's row (for a writer), the
// producer's state and the idempotency key.
func (s *Store) lock(ctx context.Context, x *txn, id int64, writer, producer, key string) (*locked, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	if writer != "" {
		b.Queue(s.q.lockRunOfStream, id)
	}
	b.Queue(s.q.lockStream, id)
	if writer != "" {
		b.Queue(s.q.streamFence, id, writer)
		b.Queue(s.q.writer, id, writer)
	}
	if producer != "" {
		b.Queue(s.q.producer, id, producer)
	}
	if key != "" {
		b.Queue(s.q.key, id, key)
	}
	br := x.send(ctx, b)
	defer br.Close()
	var l locked
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	if writer != "" {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	err := l.scan(br.QueryRow())
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("stream %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if writer != "" {
		if err := br.QueryRow().Scan(&l.fence); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
		err = l.row.scan(br.QueryRow())
		l.hasRow = err == nil
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
	}
	if producer != "" {
		var ps stream.ProducerState
		err := br.QueryRow().Scan(&ps.Epoch, &ps.LastSeq)
		if err == nil {
			l.producer = &ps
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
	}
	if key != "" {
		var k storedKey
		err := br.QueryRow().Scan(&k.digest, &k.result, &k.expiresAt)
		if err == nil {
			l.key = &k
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
	}
	return &l, br.Close()
}

// appendTx is an append by a writer or with options.
func (s *Store) appendTx(ctx context.Context, p *store.AppendParams, now int64) (*store.AppendResult, error) {
	key := writerKey{p.StreamID, p.Writer}
	token := newToken()
	var producerID string
	if p.Producer != nil {
		producerID = p.Producer.ID
	}
	var res, sent *store.AppendResult
	var wroteRecs bool
	// A retry after a lost reply is safe for a writer (its token on the
	// writer's row tells whether the lost try committed), a producer (the
	// retry is a duplicate) and a key (the retry is replayed).
	idempotent := p.Writer != "" || p.Producer != nil || p.IdempotencyKey != ""
	err := s.do(ctx, idempotent, func(ctx context.Context, t *try) error {
		x, err := s.acquire(ctx, t)
		if err != nil {
			return err
		}
		defer x.release()
		l, err := s.lock(ctx, x, p.StreamID, p.Writer, producerID, p.IdempotencyKey)
		if err != nil {
			return err
		}
		if sent != nil && l.hasRow && l.row.token == token {
			res = sent
			return nil
		}
		// 1. The stream.
		if l.deleted {
			return fmt.Errorf("stream %d: %w", p.StreamID, store.ErrGone)
		}
		if l.expired(now) {
			return fmt.Errorf("stream %d expired: %w", p.StreamID, store.ErrNotFound)
		}
		// 2. The idempotency key.
		if l.key != nil && l.key.expiresAt > now {
			if !bytes.Equal(l.key.digest, p.RequestDigest) {
				return fmt.Errorf("%w: key %q", store.ErrKeyReused, p.IdempotencyKey)
			}
			res, err = decodeKeyResult(l.key.result)
			if err != nil {
				return fmt.Errorf("idempotency key %q: stored result: %w", p.IdempotencyKey, err)
			}
			return nil
		}
		var w *stream.Writer
		var version int64
		if l.hasRow {
			if w, err = s.loadWriter(ctx, x, p.StreamID, p.Writer, &l.row); err != nil {
				return err
			}
			version = l.row.version
		}
		r, plan, err := s.applyAppend(p, &l.streamMeta, l.fence, w, l.producer, now)
		if err != nil || plan == nil {
			if w != nil {
				s.writers.put(key, w, version) // unchanged: the rules change nothing on error
			}
			res = r
			return err
		}
		b := &pgx.Batch{}
		s.queueAppend(b, p, &l.streamMeta, plan, r, token, now)
		sent = r
		if err := x.commit(ctx, b); err != nil {
			return err
		}
		if plan.writer != nil {
			s.writers.put(key, plan.writer, version+1)
		}
		res, wroteRecs = r, len(plan.batches) > 0
		return nil
	})
	if err != nil {
		return nil, err
	}
	if wroteRecs {
		s.wrote(p.StreamID)
	}
	return res, nil
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

// queueAppend queues plan's writes, the key's and the commit.
func (s *Store) queueAppend(b *pgx.Batch, p *store.AppendParams, m *streamMeta, plan *appendPlan, res *store.AppendResult, token, now int64) {
	for _, recs := range plan.batches {
		b.Queue(s.q.insertBatch, p.StreamID, recs[len(recs)-1].Offset, recs[0].Offset, recs[0].Writer, stream.EncodeBatch(nil, recs))
	}
	if plan.meta {
		var cb *string
		var cbEpoch, cbSeq int64
		if m.closedBy != nil {
			cb, cbEpoch, cbSeq = &m.closedBy.ID, m.closedBy.Epoch, m.closedBy.Seq
		}
		b.Queue(s.q.setStream, p.StreamID, m.head.NextOffset, m.head.Closed, m.lastAccess, cb, cbEpoch, cbSeq, m.streamSeq)
	}
	if w := plan.writer; w != nil {
		b.Queue(s.q.putWriter, p.StreamID, w.ID, w.Attempt, w.Next, w.Diverged, int16(w.Status), token)
	}
	if ps := plan.producer; ps != nil {
		b.Queue(s.q.putProducer, p.StreamID, p.Producer.ID, ps.Epoch, ps.LastSeq)
	}
	if p.IdempotencyKey != "" {
		ttl := p.KeyTTL
		if ttl <= 0 {
			ttl = 24 * time.Hour
		}
		digest := p.RequestDigest
		if digest == nil {
			digest = []byte{}
		}
		b.Queue(s.q.putKey, p.StreamID, p.IdempotencyKey, digest, encodeKeyResult(res), now+int64(ttl))
		if s.keysSaved.Add(1)%256 == 0 {
			b.Queue(s.q.purgeKeys, now)
		}
	}
	b.Queue("COMMIT")
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
		lw, err := s.lock(ctx, x, p.StreamID, p.Writer, "", "")
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
		b.Queue(s.q.insertBatch, p.StreamID, recs[len(recs)-1].Offset, recs[0].Offset, recs[0].Writer, stream.EncodeBatch(nil, recs))
		b.Queue(s.q.setHead, p.StreamID, lw.head.NextOffset, lw.head.Closed)
		b.Queue(s.q.putWriter, p.StreamID, w.ID, w.Attempt, w.Next, w.Diverged, int16(w.Status), token)
		b.Queue("COMMIT")
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
		var closed bool
		t.committing = true
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
		defer cancel()
		err := s.pool.QueryRow(cctx, s.q.closeStream, id, data).Scan(&closed)
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
