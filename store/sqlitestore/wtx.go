package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// wtx is what an op sees of the group transaction: the write statements and
// the caches. Loads go through the transaction, so they see the earlier ops
// of the same transaction.
type wtx struct {
	c      *committer
	w      *wstmts
	dirty  []cacheKey
	notify []int64
	tails  []tailAdd       // records for the tail cache, see tail.go
	buf    []byte          // EncodeBatch scratch
	recs   []stream.Record // DecodeBatch scratch
}

var bg = context.Background()

// stream returns stream id's cached state, loading it on a miss.
func (tx *wtx) stream(id int64) (*streamState, error) {
	if st, ok := tx.c.streams.get(id); ok {
		return st, nil
	}
	st := &streamState{id: id}
	var ttl sql.NullInt64
	var closedBy sql.NullString
	var cbEpoch, cbSeq int64
	err := tx.w.streamHead.QueryRowContext(bg, id).Scan(&st.runID, &st.head.NextOffset, &st.head.Closed,
		&ttl, &st.expiresAt, &st.lastAccess, &closedBy, &cbEpoch, &cbSeq, &st.streamSeq,
		&st.forkSource, &st.forks, &st.deleted)
	st.ttl = -1
	if ttl.Valid {
		st.ttl = ttl.Int64
	}
	if closedBy.Valid {
		st.closedBy = &stream.Producer{ID: closedBy.String, Epoch: cbEpoch, Seq: cbSeq}
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("stream %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("load stream: %w", translate(err))
	}
	tx.c.streams.put(id, st)
	return st, nil
}

// writer returns the state of writer id on st, or nil if it never wrote
// there. On a cache miss it loads the persisted fields and replays the
// writer's records to rebuild Live.
func (tx *wtx) writer(st *streamState, id string) (*stream.Writer, error) {
	k := writerKey{st.id, id}
	if w, ok := tx.c.writers.get(k); ok {
		return w, nil
	}
	w := &stream.Writer{ID: id}
	var status int64
	err := tx.w.writer.QueryRowContext(bg, st.id, id).Scan(&w.Attempt, &w.Next, &w.Diverged, &status)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load writer: %w", translate(err))
	}
	w.Status = stream.Status(status)
	if err := tx.replay(st.id, w); err != nil {
		return nil, fmt.Errorf("rebuild writer %q: %w", id, err)
	}
	tx.c.writers.put(k, w)
	return w, nil
}

func (tx *wtx) replay(streamID int64, w *stream.Writer) error {
	rows, err := tx.w.writerBatches.QueryContext(bg, streamID, w.ID)
	if err != nil {
		return translate(err)
	}
	defer rows.Close()
	for rows.Next() {
		var first int64
		var data sql.RawBytes
		if err := rows.Scan(&first, &data); err != nil {
			return translate(err)
		}
		tx.recs, err = stream.DecodeBatch(tx.recs[:0], data, first, 0)
		if err != nil {
			return err
		}
		for i := range tx.recs {
			if r := &tx.recs[i]; r.Writer == w.ID {
				w.Replay(r)
			}
		}
	}
	clear(tx.recs) // drop references to the driver's buffer
	return translate(rows.Err())
}

// fence returns the lowest attempt writer may use on run's streams, 0 if none.
func (tx *wtx) fence(run, writer string) (int64, error) {
	k := fenceKey{run, writer}
	if f, ok := tx.c.fences.get(k); ok {
		return f, nil
	}
	var f int64
	err := tx.w.fence.QueryRowContext(bg, run, writer).Scan(&f)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("load fence: %w", translate(err))
	}
	tx.c.fences.put(k, f)
	return f, nil
}

// raiseFence sets the fence of writer on run to at least attempt.
func (tx *wtx) raiseFence(run, writer string, attempt int64) error {
	cur, err := tx.fence(run, writer)
	if err != nil {
		return err
	}
	if attempt <= cur {
		return nil
	}
	tx.dirty = append(tx.dirty, cacheKey{kind: keyFence, run: run, writer: writer})
	tx.c.fences.put(fenceKey{run, writer}, attempt)
	if _, err := tx.w.putFence.ExecContext(bg, run, writer, attempt); err != nil {
		return fmt.Errorf("save fence: %w", translate(err))
	}
	return nil
}

// changed marks st (and w, if any) as modified by the current op, before the
// SQL that persists it runs.
func (tx *wtx) changed(st *streamState, w *stream.Writer) {
	tx.dirty = append(tx.dirty, cacheKey{kind: keyStream, stream: st.id})
	if w != nil {
		tx.dirty = append(tx.dirty, cacheKey{kind: keyWriter, stream: st.id, writer: w.ID})
	}
}

// writeRecords stores recs, the records of one rules call on st, as one
// batch, and saves st's head.
func (tx *wtx) writeRecords(st *streamState, recs []stream.Record) error {
	if len(recs) == 0 {
		return nil
	}
	tx.buf = stream.EncodeBatch(tx.buf[:0], recs)
	first, last := recs[0].Offset, recs[len(recs)-1].Offset
	if _, err := tx.w.insertBatch.ExecContext(bg, st.id, last, first, recs[0].Writer, tx.buf); err != nil {
		return fmt.Errorf("insert records: %w", translate(err))
	}
	if _, err := tx.w.setHead.ExecContext(bg, st.head.NextOffset, st.head.Closed, st.id); err != nil {
		return fmt.Errorf("save stream head: %w", translate(err))
	}
	tx.notify = append(tx.notify, st.id)
	if s := tx.c.s; s.tail.has(st.id) || s.notify.has(st.id) {
		tx.tails = append(tx.tails, tailAdd{id: st.id, recs: copyRecords(recs)})
	}
	return nil
}

func (tx *wtx) saveWriter(streamID int64, w *stream.Writer) error {
	_, err := tx.w.putWriter.ExecContext(bg, streamID, w.ID, w.Attempt, w.Next, w.Diverged, int64(w.Status))
	if err != nil {
		return fmt.Errorf("save writer: %w", translate(err))
	}
	return nil
}

// checkFence refuses a commit or abort by an attempt older than the run's
// fence for the writer, as Append refuses its chunks: a zombie attempt adds no
// record after a newer attempt began, even one that wrote nothing here yet.
func (tx *wtx) checkFence(st *streamState, writer string, attempt int64) error {
	if st.runID == "" || writer == "" {
		return nil
	}
	f, err := tx.fence(st.runID, writer)
	if err != nil {
		return err
	}
	if attempt < f {
		return &stream.FencedError{Attempt: attempt, Current: f}
	}
	return nil
}

// finish commits or aborts writer at attempt on st (stream.Commit,
// stream.Abort).
func (tx *wtx) finish(st *streamState, writer string, attempt int64, commit bool) (stream.Result, error) {
	w, err := tx.writer(st, writer)
	if err != nil {
		return 0, err
	}
	if w != nil {
		if err := tx.checkFence(st, writer, attempt); err != nil {
			return 0, err
		}
	}
	rule := stream.Abort
	if commit {
		rule = stream.Commit
	}
	res, recs, err := rule(&st.head, w, attempt)
	if err != nil || res == stream.Already {
		return res, err
	}
	tx.changed(st, w)
	if err := tx.writeRecords(st, recs); err != nil {
		return 0, err
	}
	return res, tx.saveWriter(st.id, w)
}

// closeStream applies stream.Close to st.
func (tx *wtx) closeStream(st *streamState) (stream.Result, error) {
	res, recs := stream.Close(&st.head)
	if res == stream.Already {
		return res, nil
	}
	tx.changed(st, nil)
	return res, tx.writeRecords(st, recs)
}
