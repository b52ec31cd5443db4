package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
	"github.com/weirhq/weir/store/internal/tail"
	"github.com/weirhq/weir/stream"
)

// wtx is what an op sees of the group transaction: the write statements and
// the caches. It is the store's apply.Tx. Loads go through the transaction,
// so they see the earlier ops of the same transaction, and name the cache
// entries they hand out (loaded): if the op fails after it began to change
// them (changed), the committer drops them, to be reloaded from SQL once the
// op is rolled back.
type wtx struct {
	c       *committer
	w       *wstmts
	loaded  []cacheKey
	changed bool                // the op saved something (or is about to)
	notify  []int64             // streams that got records
	tails   []tail.Add          // their records, for the tail cache (package tail)
	runs    []string            // runs whose watchers wake (store.RunWatcher)
	begins  []int64             // streams created while readers wait: tail.Cache.Begin
	watched []*store.StreamInfo // those streams, for CreatedStream
	buf     []byte              // EncodeBatch scratch
	recs    []stream.Record     // DecodeBatch scratch
}

var _ apply.Tx = (*wtx)(nil)

var bg = context.Background()

// reset readies tx for the next op.
func (tx *wtx) reset() {
	tx.loaded, tx.notify, tx.tails, tx.runs, tx.changed = tx.loaded[:0], tx.notify[:0], tx.tails[:0], tx.runs[:0], false
	tx.begins, tx.watched = tx.begins[:0], tx.watched[:0]
}

// Stream returns stream id's cached state, loading it on a miss.
func (tx *wtx) Stream(id int64) (*apply.Stream, error) {
	tx.loaded = append(tx.loaded, cacheKey{kind: keyStream, stream: id})
	if st, ok := tx.c.streams.get(id); ok {
		return st, nil
	}
	st, err := sqlrow.ScanState(tx.w.streamHead.QueryRowContext(bg, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("stream %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("load stream: %w", translate(err))
	}
	tx.c.streams.put(id, st)
	return st, nil
}

// Writer returns the state of writer id on st, or nil if it never wrote
// there. On a cache miss it loads the persisted fields and replays the
// writer's records to rebuild Live.
func (tx *wtx) Writer(st *apply.Stream, id string) (*stream.Writer, error) {
	tx.loaded = append(tx.loaded, cacheKey{kind: keyWriter, stream: st.ID, writer: id})
	k := writerKey{st.ID, id}
	if w, ok := tx.c.writers.get(k); ok {
		return w, nil
	}
	w := &stream.Writer{ID: id}
	var status int64
	err := tx.w.writer.QueryRowContext(bg, st.ID, id).Scan(&w.Attempt, &w.Next, &w.Diverged, &status)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load writer: %w", translate(err))
	}
	w.Status = stream.Status(status)
	if err := tx.replay(st.ID, w); err != nil {
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

// Fence returns the lowest attempt writer may use on run's streams, 0 if none.
func (tx *wtx) Fence(run, writer string) (int64, error) {
	tx.loaded = append(tx.loaded, cacheKey{kind: keyFence, run: run, writer: writer})
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

// Producer returns the state of producer id on st, nil if it has none.
func (tx *wtx) Producer(st *apply.Stream, id string) (*stream.ProducerState, error) {
	var ps stream.ProducerState
	err := tx.w.producer.QueryRowContext(bg, st.ID, id).Scan(&ps.Epoch, &ps.LastSeq)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load producer: %w", translate(err))
	}
	return &ps, nil
}

// Key returns what st keeps of idempotency key key, nil if nothing.
func (tx *wtx) Key(st *apply.Stream, key string) (*apply.Key, error) {
	var k apply.Key
	var expires int64
	err := tx.w.key.QueryRowContext(bg, st.ID, key).Scan(&k.Digest, &k.Result, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load idempotency key: %w", translate(err))
	}
	k.ExpiresAt = sqlrow.Time(expires)
	return &k, nil
}

// Run returns run id's lease and last event.
func (tx *wtx) Run(id string) (*apply.Run, error) {
	r := &apply.Run{ID: id}
	var status string
	err := tx.w.runLease.QueryRowContext(bg, id).Scan(&r.Epoch, &r.Owner, &status, &r.CancelRequested, &r.LastEvent)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("run %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("load run: %w", translate(err))
	}
	r.Status = store.RunStatus(status)
	return r, nil
}

// WriterStreams returns the streams of run that writer wrote on, by id.
func (tx *wtx) WriterStreams(run, writer string) ([]*apply.Stream, error) {
	return tx.streams(tx.w.writerStreams, run, writer)
}

// RunStreams returns the streams of run not closed, by id.
func (tx *wtx) RunStreams(run string) ([]*apply.Stream, error) {
	return tx.streams(tx.w.openRunStreams, run)
}

func (tx *wtx) streams(q *sql.Stmt, args ...any) ([]*apply.Stream, error) {
	ids, err := tx.ids(q, args...)
	if err != nil {
		return nil, err
	}
	out := make([]*apply.Stream, len(ids))
	for i, id := range ids {
		if out[i], err = tx.Stream(id); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// AddRecords stores recs, the records of one rules call on st, as one
// batch, and saves st's head.
func (tx *wtx) AddRecords(st *apply.Stream, recs []stream.Record) error {
	tx.changed = true
	if len(recs) == 0 {
		return nil
	}
	tx.buf = stream.EncodeBatch(tx.buf[:0], recs)
	first, last := recs[0].Offset, recs[len(recs)-1].Offset
	if _, err := tx.w.insertBatch.ExecContext(bg, st.ID, last, first, recs[0].Writer, tx.buf); err != nil {
		return fmt.Errorf("insert records: %w", translate(err))
	}
	if err := tx.saveHead(st); err != nil {
		return err
	}
	if s := tx.c.s; s.tail.Has(st.ID) || s.notify.Has(st.ID) || slices.Contains(tx.begins, st.ID) {
		tx.tails = append(tx.tails, tail.Add{ID: st.ID, Recs: tail.CopyRecords(recs)})
	}
	return nil
}

// saveHead saves st's head and wakes its waiters after the commit.
func (tx *wtx) saveHead(st *apply.Stream) error {
	tx.changed = true
	if _, err := tx.w.setHead.ExecContext(bg, st.Head.NextOffset, st.Head.Closed, st.Bytes, st.ID); err != nil {
		return fmt.Errorf("save stream head: %w", translate(err))
	}
	tx.notify = append(tx.notify, st.ID)
	return nil
}

// SaveStream persists st's last access, closing producer and Stream-Seq.
func (tx *wtx) SaveStream(st *apply.Stream) error {
	tx.changed = true
	cb, cbEpoch, cbSeq := sqlrow.ClosedBy(st.ClosedBy)
	if _, err := tx.w.setMeta.ExecContext(bg, sqlrow.Nanos(st.LastAccess), cb, cbEpoch, cbSeq, st.StreamSeq, st.ID); err != nil {
		return fmt.Errorf("save stream metadata: %w", translate(err))
	}
	return nil
}

// SaveWriter persists w's state on st; a new writer joins the cache.
func (tx *wtx) SaveWriter(st *apply.Stream, w *stream.Writer, created bool) error {
	tx.changed = true
	if created {
		tx.loaded = append(tx.loaded, cacheKey{kind: keyWriter, stream: st.ID, writer: w.ID})
		tx.c.writers.put(writerKey{st.ID, w.ID}, w)
	}
	_, err := tx.w.putWriter.ExecContext(bg, st.ID, w.ID, w.Attempt, w.Next, w.Diverged, int64(w.Status))
	if err != nil {
		return fmt.Errorf("save writer: %w", translate(err))
	}
	return nil
}

// SaveFence raises the fence of writer on run to attempt.
func (tx *wtx) SaveFence(run, writer string, attempt int64) error {
	tx.changed = true
	tx.loaded = append(tx.loaded, cacheKey{kind: keyFence, run: run, writer: writer})
	tx.c.fences.put(fenceKey{run, writer}, attempt)
	if _, err := tx.w.putFence.ExecContext(bg, run, writer, attempt); err != nil {
		return fmt.Errorf("save fence: %w", translate(err))
	}
	return nil
}

// SaveProducer persists producer id's state on st.
func (tx *wtx) SaveProducer(st *apply.Stream, id string, ps stream.ProducerState) error {
	tx.changed = true
	if _, err := tx.w.putProducer.ExecContext(bg, st.ID, id, ps.Epoch, ps.LastSeq); err != nil {
		return fmt.Errorf("save producer: %w", translate(err))
	}
	return nil
}

// SaveKey stores k for key on st, and now and then forgets expired keys.
func (tx *wtx) SaveKey(st *apply.Stream, key string, k *apply.Key) error {
	tx.changed = true
	if _, err := tx.w.putKey.ExecContext(bg, st.ID, key, k.Digest, k.Result, sqlrow.Nanos(k.ExpiresAt)); err != nil {
		return fmt.Errorf("save idempotency key: %w", translate(err))
	}
	tx.c.keysSaved++
	if tx.c.keysSaved%apply.KeyPurgeEvery == 0 {
		if _, err := tx.w.purgeKeys.ExecContext(bg, sqlrow.Nanos(tx.c.s.cfg.Now())); err != nil {
			return fmt.Errorf("purge idempotency keys: %w", translate(err))
		}
	}
	return nil
}

// AddEvents appends evs to run's log.
func (tx *wtx) AddEvents(run *apply.Run, evs []store.Event) error {
	tx.changed = true
	for i := range evs {
		e := &evs[i]
		_, err := tx.w.insertEvent.ExecContext(bg, run.ID, e.Seq, string(e.Type), e.Op, e.Name, e.Attempt,
			e.Data, e.Error, e.Final, sqlrow.Nanos(e.At), sqlrow.Nanos(e.WakeAt))
		if err != nil {
			return fmt.Errorf("insert event: %w", translate(err))
		}
	}
	return nil
}

// SaveRun applies c to run's row.
func (tx *wtx) SaveRun(run *apply.Run, c *apply.RunChange) error {
	tx.changed = true
	var limiters any
	if c.Release {
		limiters = sqlrow.EncodeLimiters(c.Limiters)
	}
	_, err := tx.w.updateRun.ExecContext(bg, string(c.Status), c.Output, c.Error, c.Release, sqlrow.Nanos(c.WakeAt), sqlrow.Nanos(c.Now), run.ID, c.Wake, sqlrow.EncodeAwaits(c.Awaits),
		limiters, sqlrow.LinePriority(c.Lined && c.Release, c.LinePriority))
	if err != nil {
		return fmt.Errorf("update run: %w", translate(err))
	}
	if c.Status != "" {
		if err := tx.setOutput(run.ID, c.Output); err != nil {
			return fmt.Errorf("update run: %w", err)
		}
	}
	if c.Ended {
		tx.runs = append(tx.runs, run.ID)
	}
	return nil
}

// ids runs a query returning one integer column.
func (tx *wtx) ids(q *sql.Stmt, args ...any) ([]int64, error) {
	rows, err := q.QueryContext(bg, args...)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, translate(err)
		}
		out = append(out, id)
	}
	return out, translate(rows.Err())
}
