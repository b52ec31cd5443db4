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

// This file holds what the Durable Streams protocol needs beyond appends:
// creation with options and forks, deletion and the TTL. The decisions are
// package apply's (ForkPoint, Delete, Release, Touch) and stream's
// (ForkCopy); this loads, copies and saves.

// CreateStream creates a standalone stream, or returns the one at p.Path.
func (s *Store) CreateStream(ctx context.Context, p *store.CreateStreamParams) (*store.StreamInfo, bool, error) {
	if err := p.Check(); err != nil {
		return nil, false, fmt.Errorf("create stream: %w", err)
	}
	p = p.WithDefaults(s.cfg.Now)
	if s.isClosed() {
		return nil, false, store.ErrClosedStore
	}
	// A retried create finds its stream without queueing for the writer.
	si, err := sqlrow.ScanStream(s.r.streamByPath.QueryRowContext(ctx, p.Path))
	if err == nil {
		return si, false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, false, fmt.Errorf("create stream: %w", s.readErr(err))
	}
	created := false
	err = s.write(ctx, func(tx *wtx) error {
		var err error
		si, created, err = tx.createStream(p)
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("create stream: %w", err)
	}
	return si, created, nil
}

func (tx *wtx) createStream(p *store.CreateStreamParams) (*store.StreamInfo, bool, error) {
	si, err := sqlrow.ScanStream(tx.w.streamByPath.QueryRowContext(bg, p.Path))
	if err == nil {
		return si, false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, false, translate(err)
	}
	if p.MaxStreams > 0 {
		var live int64
		if err := tx.w.countStandalone.QueryRowContext(bg).Scan(&live); err != nil {
			return nil, false, fmt.Errorf("count streams: %w", translate(err))
		}
		if err := apply.CheckCount(p, live); err != nil {
			return nil, false, err
		}
	}
	var src *apply.Stream
	var srcPath string
	fork := sql.NullInt64{}
	var forkOffset, forkSub int64
	if p.Fork != nil {
		if src, err = tx.Stream(p.Fork.SourceID); err != nil {
			return nil, false, fmt.Errorf("fork source: %w", err)
		}
		if forkOffset, err = apply.ForkPoint(src, p.Fork); err != nil {
			return nil, false, err
		}
		forkSub = p.Fork.SubOffset
		srcInfo, err := sqlrow.ScanStream(tx.w.streamInfo.QueryRowContext(bg, src.ID))
		if err != nil {
			return nil, false, fmt.Errorf("fork source: %w", translate(err))
		}
		srcPath = srcInfo.Path
		fork = sql.NullInt64{Int64: src.ID, Valid: true}
	}
	var ttl sql.NullInt64
	if p.Expiry.HasTTL {
		ttl = sql.NullInt64{Int64: int64(p.Expiry.TTL), Valid: true}
	}
	tx.changed = true
	var id int64
	if err := tx.w.createStream.QueryRowContext(bg, p.Path, p.ContentType, sqlrow.Nanos(p.Now), ttl, sqlrow.Nanos(p.Expiry.At),
		fork, srcPath, forkOffset, forkSub).Scan(&id); err != nil {
		return nil, false, fmt.Errorf("insert stream: %w", translate(err))
	}
	st, err := tx.Stream(id)
	if err != nil {
		return nil, false, err
	}
	if src != nil {
		if err := tx.copyFork(src, st, p.Fork, forkOffset); err != nil {
			return nil, false, err
		}
		src.Forks++
		if _, err := tx.w.setForks.ExecContext(bg, src.Forks, src.Deleted, src.ID); err != nil {
			return nil, false, fmt.Errorf("count fork: %w", translate(err))
		}
	}
	for _, recs := range apply.Initial(st, p) {
		if err := tx.AddRecords(st, recs); err != nil {
			return nil, false, err
		}
	}
	si, err = sqlrow.ScanStream(tx.w.streamInfo.QueryRowContext(bg, id))
	if err != nil {
		return nil, false, translate(err)
	}
	return si, true, nil
}

// copyFork makes dst, a new and empty stream, a copy of src's log below
// the fork point (store.ForkParams).
func (tx *wtx) copyFork(src, dst *apply.Stream, fp *store.ForkParams, offset int64) error {
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
	rows, err := tx.w.attemptWriters.QueryContext(bg, src.ID)
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
		rows, err = tx.w.batchesBelow.QueryContext(bg, src.ID, upTo, after)
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
			if b.last >= upTo || src.Head.Closed && b.last == src.Head.NextOffset-1 || writers[b.writer] {
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
			if _, err := tx.w.insertBatch.ExecContext(bg, dst.ID, last, b.first, "", data); err != nil {
				return fmt.Errorf("fork: copy records: %w", translate(err))
			}
		}
	}
	recs, next := fc.Tail(max(offset, upTo), prefix)
	dst.Head.NextOffset = next
	if len(recs) > 0 {
		buf := stream.EncodeBatch(nil, recs)
		if _, err := tx.w.insertBatch.ExecContext(bg, dst.ID, recs[len(recs)-1].Offset, recs[0].Offset, "", buf); err != nil {
			return fmt.Errorf("fork: %w", translate(err))
		}
	}
	return tx.saveHead(dst)
}

// subOffset resolves a fork's sub-offset: the first data record at or after
// offset (bytes), or the offset after the n-th data record from offset on
// (records).
func (tx *wtx) subOffset(src *apply.Stream, offset, n int64, records bool) (*stream.Record, int64, error) {
	rows, err := tx.w.batchesFrom.QueryContext(bg, src.ID, offset)
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

// DeleteStream deletes (or soft-deletes) a standalone stream, as
// apply.Delete decides, and releases its fork source up the chain.
func (s *Store) DeleteStream(ctx context.Context, p *store.DeleteStreamParams) (store.DeleteResult, error) {
	var res store.DeleteResult
	err := s.write(ctx, func(tx *wtx) error {
		st, err := tx.Stream(p.ID)
		if err != nil {
			return err
		}
		if res, err = apply.Delete(st, p); err != nil || res == store.DeleteKept {
			return err
		}
		tx.changed = true
		if res == store.DeleteSoft {
			if _, err := tx.w.setForks.ExecContext(bg, st.Forks, true, st.ID); err != nil {
				return fmt.Errorf("soft-delete: %w", translate(err))
			}
			tx.notify = append(tx.notify, st.ID)
			return nil
		}
		for st != nil {
			src := st.ForkSource
			if err := tx.purge(st); err != nil {
				return err
			}
			st = nil
			if src == 0 {
				break
			}
			parent, err := tx.Stream(src)
			if errors.Is(err, store.ErrNotFound) {
				break
			}
			if err != nil {
				return err
			}
			if apply.Release(parent) {
				st = parent
				continue
			}
			if _, err := tx.w.setForks.ExecContext(bg, parent.Forks, parent.Deleted, parent.ID); err != nil {
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
func (tx *wtx) purge(st *apply.Stream) error {
	tx.changed = true
	for _, q := range []*sql.Stmt{tx.w.delBatches, tx.w.delWriters, tx.w.delProducers, tx.w.delKeys, tx.w.delStream} {
		if _, err := q.ExecContext(bg, st.ID); err != nil {
			return fmt.Errorf("delete stream %d: %w", st.ID, translate(err))
		}
	}
	if _, err := tx.w.bumpCounter.ExecContext(bg, "stream_id", st.ID); err != nil {
		return fmt.Errorf("delete stream %d: %w", st.ID, translate(err))
	}
	tx.c.streams.remove(st.ID)
	tx.notify = append(tx.notify, st.ID)
	return nil
}

// TouchStream renews a stream's sliding TTL (apply.Touch).
func (s *Store) TouchStream(ctx context.Context, p *store.TouchStreamParams) error {
	at := p.At
	if at.IsZero() {
		at = s.cfg.Now()
	}
	err := s.write(ctx, func(tx *wtx) error {
		st, err := tx.Stream(p.ID)
		if err != nil {
			return err
		}
		if !apply.Touch(st, at) {
			return nil
		}
		tx.changed = true
		if _, err := tx.w.touch.ExecContext(bg, sqlrow.Nanos(st.LastAccess), st.ID); err != nil {
			return fmt.Errorf("touch: %w", translate(err))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("touch stream: %w", err)
	}
	return nil
}
