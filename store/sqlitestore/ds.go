package sqlitestore

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// This file holds what the Durable Streams protocol needs beyond the
// exactly-once rules: creation with options and forks, deletion, the TTL,
// producers and idempotency keys. The rules themselves (stream.Produce,
// stream.CheckStreamSeq) are pure; this only loads and saves.

// expired reports whether st is expired at now (store.StreamInfo.Expired).
func (st *streamState) expired(now int64) bool {
	if st.ttl >= 0 && now-st.lastAccess >= st.ttl {
		return true
	}
	return st.expiresAt != 0 && now >= st.expiresAt
}

// producer returns the state of producer id on stream, nil if it has none.
func (tx *wtx) producer(streamID int64, id string) (*stream.ProducerState, error) {
	var ps stream.ProducerState
	err := tx.w.producer.QueryRowContext(bg, streamID, id).Scan(&ps.Epoch, &ps.LastSeq)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load producer: %w", translate(err))
	}
	return &ps, nil
}

func (tx *wtx) saveProducer(streamID int64, id string, ps stream.ProducerState) error {
	if _, err := tx.w.putProducer.ExecContext(bg, streamID, id, ps.Epoch, ps.LastSeq); err != nil {
		return fmt.Errorf("save producer: %w", translate(err))
	}
	return nil
}

// saveMeta persists st's last access, closing producer and Stream-Seq; the
// caller marked st changed.
func (tx *wtx) saveMeta(st *streamState) error {
	var cb sql.NullString
	var cbEpoch, cbSeq int64
	if st.closedBy != nil {
		cb = sql.NullString{String: st.closedBy.ID, Valid: true}
		cbEpoch, cbSeq = st.closedBy.Epoch, st.closedBy.Seq
	}
	if _, err := tx.w.setMeta.ExecContext(bg, st.lastAccess, cb, cbEpoch, cbSeq, st.streamSeq, st.id); err != nil {
		return fmt.Errorf("save stream metadata: %w", translate(err))
	}
	return nil
}

// keyResult is an append result as an idempotency key keeps it.
type keyResult struct {
	Acks          [][2]int64 `json:"a,omitempty"` // offset, outcome
	NextOffset    int64      `json:"n"`
	Aborted       bool       `json:"ab,omitempty"`
	Closed        bool       `json:"c,omitempty"`
	Duplicate     bool       `json:"d,omitempty"`
	ProducerEpoch int64      `json:"pe,omitempty"`
	ProducerSeq   int64      `json:"ps,omitempty"`
}

// replayKey returns the stored result of p's idempotency key, nil if the
// key is new (or expired), or store.ErrKeyReused.
func (tx *wtx) replayKey(streamID int64, p *store.AppendParams, now int64) (*store.AppendResult, error) {
	var digest, result []byte
	var expires int64
	err := tx.w.key.QueryRowContext(bg, streamID, p.IdempotencyKey).Scan(&digest, &result, &expires)
	if errors.Is(err, sql.ErrNoRows) || err == nil && expires <= now {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load idempotency key: %w", translate(err))
	}
	if !bytes.Equal(digest, p.RequestDigest) {
		return nil, fmt.Errorf("%w: key %q", store.ErrKeyReused, p.IdempotencyKey)
	}
	var kr keyResult
	if err := json.Unmarshal(result, &kr); err != nil {
		return nil, fmt.Errorf("idempotency key %q: stored result: %w", p.IdempotencyKey, err)
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

// saveKey remembers res as the result of p's idempotency key, and now and
// then forgets expired keys.
func (tx *wtx) saveKey(streamID int64, p *store.AppendParams, res *store.AppendResult, now int64) error {
	kr := keyResult{NextOffset: res.NextOffset, Aborted: res.Aborted, Closed: res.Closed, Duplicate: res.Duplicate,
		ProducerEpoch: res.ProducerEpoch, ProducerSeq: res.ProducerSeq}
	if len(res.Acks) > 0 {
		kr.Acks = make([][2]int64, len(res.Acks))
		for i, a := range res.Acks {
			kr.Acks[i] = [2]int64{a.Offset, int64(a.Outcome)}
		}
	}
	b, err := json.Marshal(kr)
	if err != nil {
		return err
	}
	ttl := p.KeyTTL
	if ttl <= 0 {
		ttl = 24 * time.Hour
	}
	digest := p.RequestDigest
	if digest == nil {
		digest = []byte{}
	}
	if _, err := tx.w.putKey.ExecContext(bg, streamID, p.IdempotencyKey, digest, b, now+int64(ttl)); err != nil {
		return fmt.Errorf("save idempotency key: %w", translate(err))
	}
	tx.c.keysSaved++
	if tx.c.keysSaved%256 == 0 {
		if _, err := tx.w.purgeKeys.ExecContext(bg, now); err != nil {
			return fmt.Errorf("purge idempotency keys: %w", translate(err))
		}
	}
	return nil
}

// CreateStream creates a standalone stream, or returns the one at p.Path.
func (s *Store) CreateStream(ctx context.Context, p *store.CreateStreamParams) (*store.StreamInfo, bool, error) {
	if err := store.CheckCreateStream(p); err != nil {
		return nil, false, err
	}
	if s.isClosed() {
		return nil, false, store.ErrClosedStore
	}
	// A retried create finds its stream without queueing for the writer.
	si, err := scanStream(s.r.streamByPath.QueryRowContext(ctx, p.Path))
	if err == nil {
		return si, false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, false, fmt.Errorf("create stream: %w", s.readErr(err))
	}
	now := p.Now
	if now.IsZero() {
		now = s.cfg.Now()
	}
	created := false
	err = s.write(ctx, func(tx *wtx) error {
		var err error
		si, created, err = tx.createStream(p, now.UnixNano())
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("create stream: %w", err)
	}
	return si, created, nil
}

func (tx *wtx) createStream(p *store.CreateStreamParams, now int64) (*store.StreamInfo, bool, error) {
	si, err := scanStream(tx.w.streamByPath.QueryRowContext(bg, p.Path))
	if err == nil {
		return si, false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, false, translate(err)
	}
	var src *streamState
	var srcPath string
	fork := sql.NullInt64{}
	var forkOffset, forkSub int64
	if p.Fork != nil {
		if src, err = tx.stream(p.Fork.SourceID); err != nil {
			return nil, false, fmt.Errorf("fork source: %w", err)
		}
		if src.deleted {
			return nil, false, fmt.Errorf("fork source %d: %w", src.id, store.ErrGone)
		}
		forkOffset, forkSub = p.Fork.Offset, p.Fork.SubOffset
		if forkOffset == -1 {
			forkOffset = src.head.NextOffset
		}
		if forkOffset > src.head.NextOffset {
			return nil, false, fmt.Errorf("%w: fork offset %d is past the source's next offset %d", store.ErrInvalid, forkOffset, src.head.NextOffset)
		}
		srcInfo, err := scanStream(tx.w.streamInfo.QueryRowContext(bg, src.id))
		if err != nil {
			return nil, false, fmt.Errorf("fork source: %w", translate(err))
		}
		srcPath = srcInfo.Path
		fork = sql.NullInt64{Int64: src.id, Valid: true}
	}
	ct := p.ContentType
	if ct == "" {
		ct = defaultContentType
	}
	var ttl sql.NullInt64
	if p.Expiry.HasTTL {
		ttl = sql.NullInt64{Int64: int64(p.Expiry.TTL), Valid: true}
	}
	var id int64
	if err := tx.w.createStream.QueryRowContext(bg, p.Path, ct, now, ttl, nanos(p.Expiry.At),
		fork, srcPath, forkOffset, forkSub).Scan(&id); err != nil {
		return nil, false, fmt.Errorf("insert stream: %w", translate(err))
	}
	st, err := tx.stream(id)
	if err != nil {
		return nil, false, err
	}
	tx.changed(st, nil)
	if src != nil {
		if err := tx.copyFork(src, st, p.Fork, forkOffset); err != nil {
			return nil, false, err
		}
		tx.changed(src, nil)
		src.forks++
		if _, err := tx.w.setForks.ExecContext(bg, src.forks, src.deleted, src.id); err != nil {
			return nil, false, fmt.Errorf("count fork: %w", translate(err))
		}
	}
	if len(p.Chunks) > 0 {
		if _, _, err := tx.appendChunks(st, &store.AppendParams{StreamID: id, Chunks: p.Chunks}); err != nil {
			return nil, false, err
		}
	}
	if p.Closed {
		if _, err := tx.closeStream(st); err != nil {
			return nil, false, err
		}
	}
	si, err = scanStream(tx.w.streamInfo.QueryRowContext(bg, id))
	if err != nil {
		return nil, false, translate(err)
	}
	return si, true, nil
}

// copyFork makes dst, a new and empty stream, a copy of src's log below
// the fork point (store.ForkParams).
func (tx *wtx) copyFork(src, dst *streamState, fp *store.ForkParams, offset int64) error {
	upTo := offset // records below upTo are copied
	var prefix *stream.Record
	if fp.SubOffset > 0 {
		rec, next, err := tx.subOffset(src, offset, fp.SubOffset, fp.SubRecords)
		if err != nil {
			return err
		}
		if fp.SubRecords {
			upTo = next
		} else {
			upTo = rec.Offset
			prefix = &stream.Record{Offset: rec.Offset, Kind: stream.KindData, Data: rec.Data[:fp.SubOffset]}
			prefix.Digest = stream.Sum(prefix.Data)
		}
	}
	// Writers that wrote with attempts may be open at the fork point; their
	// batches are tagged with their id in src (a fork's inherited batches
	// are untagged, and settled).
	writers := map[string]bool{}
	rows, err := tx.w.attemptWriters.QueryContext(bg, src.id)
	if err != nil {
		return fmt.Errorf("fork: %w", translate(err))
	}
	for rows.Next() {
		var w string
		if err := rows.Scan(&w); err != nil {
			rows.Close()
			return fmt.Errorf("fork: %w", translate(err))
		}
		writers[w] = true
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("fork: %w", translate(err))
	}
	fc := stream.ForkCopy{Tracked: func(w string) bool { return writers[w] }}

	// Copy page by page: the write connection does not step a query over
	// batches while it inserts into them.
	type batch struct {
		first, last int64
		writer      string
		data        []byte
	}
	var page []batch
	for after := int64(-1); ; {
		page = page[:0]
		rows, err = tx.w.batchesBelow.QueryContext(bg, src.id, upTo, after)
		if err != nil {
			return fmt.Errorf("fork: %w", translate(err))
		}
		for rows.Next() {
			var b batch
			if err := rows.Scan(&b.first, &b.last, &b.writer, &b.data); err != nil {
				rows.Close()
				return fmt.Errorf("fork: %w", translate(err))
			}
			page = append(page, b)
		}
		if err := rows.Close(); err != nil {
			return fmt.Errorf("fork: %w", translate(err))
		}
		if len(page) == 0 {
			break
		}
		after = page[len(page)-1].last
		for _, b := range page {
			data, last := b.data, b.last
			// Decode a batch that straddles the fork point, may hold the
			// close record, or belongs to a writer that may be open.
			if b.last >= upTo || src.head.Closed && b.last == src.head.NextOffset-1 || writers[b.writer] {
				recs, err := stream.DecodeBatch(nil, b.data, b.first, b.first)
				if err != nil {
					return fmt.Errorf("fork: %w", err)
				}
				keep := fc.Keep(recs, upTo)
				if len(keep) == 0 {
					continue
				}
				data = stream.EncodeBatch(nil, keep)
				last = keep[len(keep)-1].Offset
			}
			// Untagged: the copy never counts toward the fork's writers.
			if _, err := tx.w.insertBatch.ExecContext(bg, dst.id, last, b.first, "", data); err != nil {
				return fmt.Errorf("fork: copy records: %w", translate(err))
			}
		}
	}
	recs, next := fc.Tail(max(offset, upTo), prefix)
	dst.head.NextOffset = next
	if len(recs) > 0 {
		buf := stream.EncodeBatch(nil, recs)
		if _, err := tx.w.insertBatch.ExecContext(bg, dst.id, recs[len(recs)-1].Offset, recs[0].Offset, "", buf); err != nil {
			return fmt.Errorf("fork: %w", translate(err))
		}
	}
	if _, err := tx.w.setHead.ExecContext(bg, dst.head.NextOffset, dst.head.Closed, dst.id); err != nil {
		return fmt.Errorf("fork: save stream head: %w", translate(err))
	}
	tx.notify = append(tx.notify, dst.id)
	return nil
}

// subOffset resolves a fork's sub-offset: the first data record at or after
// offset (bytes), or the offset after the n-th data record from offset on
// (records).
func (tx *wtx) subOffset(src *streamState, offset, n int64, records bool) (*stream.Record, int64, error) {
	rows, err := tx.w.batchesFrom.QueryContext(bg, src.id, offset)
	if err != nil {
		return nil, 0, fmt.Errorf("fork: %w", translate(err))
	}
	defer rows.Close()
	so := store.SubOffset{N: n, Records: records, From: offset}
	for rows.Next() {
		var first int64
		var data []byte
		if err := rows.Scan(&first, &data); err != nil {
			return nil, 0, fmt.Errorf("fork: %w", translate(err))
		}
		recs, err := stream.DecodeBatch(nil, data, first, offset)
		if err != nil {
			return nil, 0, fmt.Errorf("fork: %w", err)
		}
		if r, end, found, err := so.Push(recs); found || err != nil {
			return r, end, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("fork: %w", translate(err))
	}
	return nil, 0, so.Missing()
}

// DeleteStream deletes (or soft-deletes) a standalone stream.
func (s *Store) DeleteStream(ctx context.Context, p *store.DeleteStreamParams) (store.DeleteResult, error) {
	var res store.DeleteResult
	err := s.write(ctx, func(tx *wtx) error {
		st, err := tx.stream(p.ID)
		if err != nil {
			return err
		}
		if st.runID != "" {
			return fmt.Errorf("%w: stream %d is a run's stream", store.ErrInvalid, st.id)
		}
		if !p.IfExpiredAt.IsZero() {
			if st.deleted || !st.expired(p.IfExpiredAt.UnixNano()) {
				res = store.DeleteKept
				return nil
			}
		} else if st.deleted {
			return fmt.Errorf("stream %d: %w", st.id, store.ErrGone)
		}
		if st.forks > 0 {
			tx.changed(st, nil)
			st.deleted = true
			if _, err := tx.w.setForks.ExecContext(bg, st.forks, true, st.id); err != nil {
				return fmt.Errorf("soft-delete: %w", translate(err))
			}
			res = store.DeleteSoft
			tx.notify = append(tx.notify, st.id)
			return nil
		}
		res = store.DeleteFull
		// Delete, and release the source up the chain.
		for st != nil {
			src := st.forkSource
			if err := tx.purge(st); err != nil {
				return err
			}
			st = nil
			if src == 0 {
				break
			}
			parent, err := tx.stream(src)
			if errors.Is(err, store.ErrNotFound) {
				break
			}
			if err != nil {
				return err
			}
			tx.changed(parent, nil)
			parent.forks--
			if parent.forks <= 0 && parent.deleted {
				st = parent
				continue
			}
			if _, err := tx.w.setForks.ExecContext(bg, max(parent.forks, 0), parent.deleted, parent.id); err != nil {
				return fmt.Errorf("release fork source: %w", translate(err))
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("delete stream: %w", err)
	}
	return res, nil
}

// purge deletes st and everything it holds, and wakes its waiters.
func (tx *wtx) purge(st *streamState) error {
	for _, q := range []*sql.Stmt{tx.w.delBatches, tx.w.delWriters, tx.w.delProducers, tx.w.delKeys, tx.w.delStream} {
		if _, err := q.ExecContext(bg, st.id); err != nil {
			return fmt.Errorf("delete stream %d: %w", st.id, translate(err))
		}
	}
	if _, err := tx.w.bumpCounter.ExecContext(bg, "stream_id", st.id); err != nil {
		return fmt.Errorf("delete stream %d: %w", st.id, translate(err))
	}
	tx.changed(st, nil)
	tx.c.streams.remove(st.id)
	tx.notify = append(tx.notify, st.id)
	return nil
}

// TouchStream renews a stream's sliding TTL.
func (s *Store) TouchStream(ctx context.Context, p *store.TouchStreamParams) error {
	at := p.At
	if at.IsZero() {
		at = s.cfg.Now()
	}
	err := s.write(ctx, func(tx *wtx) error {
		st, err := tx.stream(p.ID)
		if err != nil {
			return err
		}
		if st.ttl < 0 || at.UnixNano() <= st.lastAccess {
			return nil
		}
		tx.changed(st, nil)
		st.lastAccess = at.UnixNano()
		if _, err := tx.w.touch.ExecContext(bg, st.lastAccess, st.id); err != nil {
			return fmt.Errorf("touch: %w", translate(err))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("touch stream: %w", err)
	}
	return nil
}
