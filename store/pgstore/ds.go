package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
	"github.com/weirhq/weir/stream"
)

// This file holds what the Durable Streams protocol needs beyond appends:
// creation with options and forks, deletion and the TTL, each in its own
// transaction. The decisions are package apply's (ForkPoint, Initial,
// Delete, Release) and stream's (ForkCopy); this locks, copies (server-side
// where it can) and saves.

// CreateStream creates a standalone stream, or returns the one at p.Path.
func (s *Store) CreateStream(ctx context.Context, p *store.CreateStreamParams) (*store.StreamInfo, bool, error) {
	if err := p.Check(); err != nil {
		return nil, false, fmt.Errorf("create stream: %w", err)
	}
	p = p.WithDefaults(s.cfg.Now)
	var si *store.StreamInfo
	var created bool
	var wrote []int64
	// Idempotent: a retry after a lost reply finds the stream (created false).
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var err error
		// A retried create finds its stream without a transaction.
		si, err = sqlrow.ScanStream(s.pool.QueryRow(ctx, s.q.streamByPath, p.Path))
		if err == nil {
			created = false
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		x, err := s.acquire(ctx, t)
		if err != nil {
			return err
		}
		defer x.release()
		var id int64
		id, wrote, err = s.createStream(ctx, x, p)
		if err != nil {
			return err
		}
		si, err = sqlrow.ScanStream(s.pool.QueryRow(ctx, s.q.streamByID, id))
		created = id != 0 && err == nil
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("create stream: %w", err)
	}
	s.wrote(wrote...)
	return si, created, nil
}

// createStream creates p's stream in one transaction on x and returns its
// id; or, if a stream at p.Path appeared meanwhile, the existing one's.
func (s *Store) createStream(ctx context.Context, x *txn, p *store.CreateStreamParams) (int64, []int64, error) {
	if _, err := x.c.Exec(ctx, "BEGIN"); err != nil {
		return 0, nil, err
	}
	var (
		src                 *apply.Stream
		srcPath             string
		fork                *int64
		forkOffset, forkSub int64
		ttl                 *int64
	)
	if p.Expiry.HasTTL {
		v := int64(p.Expiry.TTL)
		ttl = &v
	}
	if p.MaxStreams > 0 {
		// Creates under a limit take turns, so two cannot both take the
		// last place; the count is then exact.
		var live int64
		if _, err := x.c.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, s.q.schema+".streams"); err != nil {
			return 0, nil, err
		}
		if err := x.c.QueryRow(ctx, s.q.countStandalone).Scan(&live); err != nil {
			return 0, nil, err
		}
		if err := apply.CheckCount(p, live); err != nil {
			return 0, nil, err
		}
	}
	if fp := p.Fork; fp != nil {
		var err error
		if src, srcPath, err = s.lockStream(ctx, x, fp.SourceID); err != nil {
			return 0, nil, fmt.Errorf("fork source: %w", err)
		}
		if forkOffset, err = apply.ForkPoint(src, fp); err != nil {
			return 0, nil, err
		}
		forkSub, fork = fp.SubOffset, &fp.SourceID
	}
	var id int64
	err := x.c.QueryRow(ctx, s.q.createStream, p.Path, p.ContentType, sqlrow.Nanos(p.Now), ttl, sqlrow.Nanos(p.Expiry.At),
		fork, srcPath, forkOffset, forkSub).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		// Created by another transaction since our look: look again.
		return 0, nil, errCreatedElsewhere
	}
	if err != nil {
		return 0, nil, err
	}
	head := stream.Head{}
	if fp := p.Fork; fp != nil {
		if head, err = s.copyFork(ctx, x, fp.SourceID, &src.Head, id, fp, forkOffset); err != nil {
			return 0, nil, err
		}
		if _, err := x.c.Exec(ctx, `UPDATE `+s.q.schema+`.streams SET forks = forks + 1 WHERE id = $1`, fp.SourceID); err != nil {
			return 0, nil, err
		}
	}
	b := &pgx.Batch{}
	st := &apply.Stream{ID: id, Head: head}
	for _, recs := range apply.Initial(st, p) {
		b.Queue(s.q.insertBatch, id, recs[len(recs)-1].Offset, recs[0].Offset, "", stream.EncodeBatch(nil, recs), dataBytes(recs))
	}
	b.Queue(s.q.setHead, id, st.Head.NextOffset, st.Head.Closed, st.Bytes)
	b.Queue("COMMIT")
	if err := x.commit(ctx, b); err != nil {
		return 0, nil, err
	}
	var wrote []int64
	if st.Head.NextOffset > 0 {
		wrote = append(wrote, id)
	}
	return id, wrote, nil
}

// lockStream locks stream id (FOR UPDATE) and reads its state and path.
func (s *Store) lockStream(ctx context.Context, x *txn, id int64) (*apply.Stream, string, error) {
	var path string
	st, err := sqlrow.ScanState(x.c.QueryRow(ctx, s.q.lockStream, id), &path)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", fmt.Errorf("stream %d: %w", id, store.ErrNotFound)
	}
	return st, path, err
}

// errCreatedElsewhere makes CreateStream look again: another transaction
// created the stream at the path first.
var errCreatedElsewhere = &retryError{"stream created concurrently"}

// copyFork makes stream dst, new and empty, a copy of src's log below the
// fork point (store.ForkParams), and returns dst's head. The caller holds
// src's row lock.
func (s *Store) copyFork(ctx context.Context, x *txn, src int64, srcHead *stream.Head, dst int64, fp *store.ForkParams, offset int64) (stream.Head, error) {
	upTo := offset // records below upTo are copied
	var prefix *stream.Record
	if fp.SubOffset > 0 {
		rec, next, err := s.subOffset(ctx, x, src, offset, fp.SubOffset, fp.SubRecords)
		if err != nil {
			return stream.Head{}, err
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
	rows, err := x.c.Query(ctx, s.q.attemptWriters, src)
	if err != nil {
		return stream.Head{}, err
	}
	writers, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return stream.Head{}, err
	}
	isWriter := map[string]bool{}
	for _, w := range writers {
		isWriter[w] = true
	}
	closeAt := int64(-1) // the close record's offset, if src is closed
	if srcHead.Closed {
		closeAt = srcHead.NextOffset - 1
	}
	if writers == nil {
		writers = []string{}
	}
	// Batches taken whole are copied by the server.
	if _, err := x.c.Exec(ctx, s.q.copyBatches, src, dst, upTo, writers, closeAt); err != nil {
		return stream.Head{}, fmt.Errorf("fork: copy records: %w", err)
	}
	// The others are decoded here: one straddling the fork point, one
	// holding the close record, and every batch of a writer that may be
	// open at the fork point, whose fate the copy must settle.
	type batch struct {
		first, last int64
		writer      string
		data        []byte
	}
	rows, err = x.c.Query(ctx, s.q.specialBatches, src, upTo, writers, closeAt)
	if err != nil {
		return stream.Head{}, err
	}
	special, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (batch, error) {
		var b batch
		err := r.Scan(&b.first, &b.last, &b.writer, &b.data)
		return b, err
	})
	if err != nil {
		return stream.Head{}, fmt.Errorf("fork: %w", err)
	}
	fc := stream.ForkCopy{Tracked: func(w string) bool { return isWriter[w] }}
	b := &pgx.Batch{}
	for _, sb := range special {
		recs, err := stream.DecodeBatch(nil, sb.data, sb.first, sb.first)
		if err != nil {
			return stream.Head{}, fmt.Errorf("fork: %w", err)
		}
		keep := fc.Keep(recs, upTo)
		if len(keep) == 0 {
			continue
		}
		b.Queue(s.q.insertBatch, dst, keep[len(keep)-1].Offset, keep[0].Offset, "", stream.EncodeBatch(nil, keep), dataBytes(keep))
	}
	recs, next := fc.Tail(max(offset, upTo), prefix)
	if len(recs) > 0 {
		b.Queue(s.q.insertBatch, dst, recs[len(recs)-1].Offset, recs[0].Offset, "", stream.EncodeBatch(nil, recs), dataBytes(recs))
	}
	if b.Len() > 0 {
		if err := x.c.SendBatch(ctx, b).Close(); err != nil {
			return stream.Head{}, fmt.Errorf("fork: copy records: %w", err)
		}
	}
	return stream.Head{NextOffset: next}, nil
}

// subOffset resolves a fork's sub-offset: the first data record at or after
// offset (bytes), or the offset after the n-th data record from offset on
// (records).
func (s *Store) subOffset(ctx context.Context, x *txn, src, offset, n int64, records bool) (*stream.Record, int64, error) {
	rows, err := x.c.Query(ctx, s.q.batchesFrom, src, offset)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	so := store.SubOffset{N: n, Records: records, From: offset}
	for rows.Next() {
		var first int64
		var data []byte
		if err := rows.Scan(&first, &data); err != nil {
			return nil, 0, err
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
		return nil, 0, err
	}
	return nil, 0, so.Missing()
}

// DeleteStream deletes (or soft-deletes) a standalone stream.
func (s *Store) DeleteStream(ctx context.Context, p *store.DeleteStreamParams) (store.DeleteResult, error) {
	var res store.DeleteResult
	var wrote []int64
	// Idempotent enough: a retry after a lost reply finds the stream gone
	// (ErrNotFound) or soft-deleted (ErrGone).
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		x, err := s.acquire(ctx, t)
		if err != nil {
			return err
		}
		defer x.release()
		res, wrote, err = s.deleteStream(ctx, x, p)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete stream: %w", err)
	}
	if len(wrote) > 0 {
		s.writers.forget(setOf(wrote))
		s.wrote(wrote...)
	}
	return res, nil
}

func setOf(ids []int64) map[int64]bool {
	m := make(map[int64]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// deleteStream deletes p's stream in one transaction on x, and the sources
// it releases up its fork chain (each locked after its fork: a fork's
// creation locks only its source, so this order cannot deadlock with it).
func (s *Store) deleteStream(ctx context.Context, x *txn, p *store.DeleteStreamParams) (store.DeleteResult, []int64, error) {
	if _, err := x.c.Exec(ctx, "BEGIN"); err != nil {
		return 0, nil, err
	}
	st, _, err := s.lockStream(ctx, x, p.ID)
	if err != nil {
		return 0, nil, err
	}
	res, err := apply.Delete(st, p)
	if err != nil || res == store.DeleteKept {
		return res, nil, err
	}
	b := &pgx.Batch{}
	if res == store.DeleteSoft {
		b.Queue(s.q.setForks, st.ID, st.Forks, true)
		b.Queue("COMMIT")
		if err := x.commit(ctx, b); err != nil {
			return 0, nil, err
		}
		return store.DeleteSoft, []int64{st.ID}, nil
	}
	// Delete, and release the source up the chain.
	var gone []int64
	for {
		for _, q := range []string{s.q.delBatches, s.q.delWriters, s.q.delProducers, s.q.delKeys, s.q.delStream} {
			b.Queue(q, st.ID)
		}
		gone = append(gone, st.ID)
		if st.ForkSource == 0 {
			break
		}
		parent, _, err := s.lockStream(ctx, x, st.ForkSource)
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if err != nil {
			return 0, nil, err
		}
		if apply.Release(parent) {
			st = parent
			continue
		}
		b.Queue(s.q.setForks, parent.ID, parent.Forks, parent.Deleted)
		break
	}
	b.Queue("COMMIT")
	if err := x.commit(ctx, b); err != nil {
		return 0, nil, err
	}
	return store.DeleteFull, gone, nil
}

// TouchStream renews a stream's sliding TTL.
func (s *Store) TouchStream(ctx context.Context, p *store.TouchStreamParams) error {
	at := p.At
	if at.IsZero() {
		at = s.cfg.Now()
	}
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var exists bool
		t.committing = true
		if err := s.pool.QueryRow(ctx, s.q.touch, p.ID, sqlrow.Nanos(at)).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("stream %d: %w", p.ID, store.ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("touch stream: %w", err)
	}
	return nil
}
