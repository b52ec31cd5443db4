package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
	"github.com/weirhq/weir/stream"
)

// Forks and resumes (store.Forks): each is its own transaction, not a
// group's, as hooks are (they are rare next to appends). The rules are
// package apply's; forkTx loads what they ask for, locking the streams it
// changes (FOR UPDATE, as a group does), and saves at once. A group
// writing to a stream waits for the lock, then reads what this wrote; the
// writer cache is kept right by the writers rows' versions, which every
// save here raises.

type forkTx struct {
	hookTx
	streams map[int64]*apply.Stream
	wrote   []int64 // streams that got records
	// pend holds the record batches written and not sent yet, heads the
	// streams whose heads they move: a fork's copy is thousands of
	// batches, sent pipelined (nothing in a fork or a resume reads what
	// it wrote).
	pend  *pgx.Batch
	heads map[int64]*apply.Stream
	// inputs are the inputs of the runs FindRun read whole, for RunInput:
	// a fork reads its source's once.
	inputs map[string][]byte
}

// flush sends the batches pending, then the heads they moved.
func (t *forkTx) flush() error {
	if t.pend == nil || t.pend.Len() == 0 && len(t.heads) == 0 {
		return nil
	}
	for _, st := range t.heads {
		t.pend.Queue(t.s.q.setHead, st.ID, st.Head.NextOffset, st.Head.Closed, st.Bytes)
	}
	clear(t.heads)
	b := t.pend
	t.pend = &pgx.Batch{}
	return t.x.c.SendBatch(t.ctx, b).Close()
}

var (
	_ apply.ForkTx   = (*forkTx)(nil)
	_ apply.ResumeTx = (*forkTx)(nil)
)

// ForkRun forks a run from one of its operations. A retry after a commit
// whose reply was lost finds the fork (created false).
func (s *Store) ForkRun(ctx context.Context, p *store.ForkRunParams) (*store.Run, bool, error) {
	if err := p.Check(); err != nil {
		return nil, false, fmt.Errorf("fork run: %w", err)
	}
	q := *p
	if q.Now.IsZero() {
		q.Now = s.cfg.Now()
	}
	var run *store.Run
	var created bool
	var wrote []int64
	err := s.inTx(ctx, true, func(ctx context.Context, x *txn) error {
		t := newForkTx(ctx, x, s)
		var err error
		if run, created, err = apply.ForkRun(t, &q); err != nil {
			return err
		}
		wrote = t.wrote
		return t.flush()
	})
	if err != nil {
		return nil, false, fmt.Errorf("fork run: %w", err)
	}
	s.wrote(wrote...)
	return run, created, nil
}

// ResumeRun makes a failed or cancelled run pending again. A retry after
// a commit whose reply was lost finds the run resumed (apply.PlanResume).
func (s *Store) ResumeRun(ctx context.Context, p *store.ResumeRunParams) (*store.Run, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("resume run: %w", err)
	}
	q := *p
	if q.Now.IsZero() {
		q.Now = s.cfg.Now()
	}
	var run *store.Run
	var wrote []int64
	err := s.inTx(ctx, true, func(ctx context.Context, x *txn) error {
		t := newForkTx(ctx, x, s)
		var err error
		if run, err = apply.ResumeRun(t, &q); err != nil {
			return err
		}
		wrote = t.wrote
		return t.flush()
	})
	if err != nil {
		return nil, fmt.Errorf("resume run: %w", err)
	}
	s.wrote(wrote...)
	return run, nil
}

func newForkTx(ctx context.Context, x *txn, s *Store) *forkTx {
	return &forkTx{hookTx: hookTx{ctx: ctx, x: x, s: s}, streams: map[int64]*apply.Stream{}, pend: &pgx.Batch{}, heads: map[int64]*apply.Stream{}}
}

func (t *forkTx) schema() string { return t.s.q.schema }

// FindRun returns run id, nil if none, whole: PostgreSQL has no one
// writer to hold, and a run found is a reply (a retried fork or resume).
func (t *forkTx) FindRun(id string) (*store.Run, error) {
	run, err := sqlrow.ScanRun(t.x.c.QueryRow(t.ctx, `SELECT `+sqlrow.RunCols+` FROM `+t.schema()+`.runs WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err == nil {
		if t.inputs == nil {
			t.inputs = map[string][]byte{}
		}
		t.inputs[id] = run.Input
	}
	return run, err
}

// RunInput returns run id's input.
func (t *forkTx) RunInput(id string) ([]byte, error) {
	if in, ok := t.inputs[id]; ok {
		return in, nil
	}
	var input []byte
	err := t.x.c.QueryRow(t.ctx, `SELECT input FROM `+t.schema()+`.runs WHERE id = $1`, id).Scan(&input)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return input, err
}

// RunOutline returns run's log without its messages' payloads.
func (t *forkTx) RunOutline(run string) ([]store.Event, error) {
	rows, err := t.x.c.Query(t.ctx, `SELECT `+sqlrow.EventOutlineCols+` FROM `+t.schema()+`.events WHERE run_id = $1 ORDER BY seq`, run)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Event, error) { return sqlrow.ScanEvent(r) })
}

// RunEvents returns run's log, in order.
func (t *forkTx) RunEvents(run string) ([]store.Event, error) {
	rows, err := t.x.c.Query(t.ctx, t.s.q.events, run, 0)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Event, error) { return sqlrow.ScanEvent(r) })
}

// AddEvents appends evs to run's log, in one statement, and moves the
// run's last event.
func (t *forkTx) AddEvents(run *apply.Run, evs []store.Event) error {
	if len(evs) == 0 {
		return nil
	}
	n := len(evs)
	ids, seqs, types, ops := make([]string, n), make([]int64, n), make([]string, n), make([]int64, n)
	names, attempts, data, errs := make([]string, n), make([]int64, n), make([][]byte, n), make([]string, n)
	finals, ats, wakes := make([]bool, n), make([]int64, n), make([]int64, n)
	for i, e := range evs {
		ids[i], seqs[i], types[i], ops[i] = run.ID, e.Seq, string(e.Type), e.Op
		names[i], attempts[i], data[i], errs[i] = e.Name, e.Attempt, e.Data, e.Error
		finals[i], ats[i], wakes[i] = e.Final, sqlrow.Nanos(e.At), sqlrow.Nanos(e.WakeAt)
	}
	if _, err := t.x.c.Exec(t.ctx, t.s.q.insertEventsMany, ids, seqs, types, ops, names, attempts, data, errs, finals, ats, wakes); err != nil {
		return err
	}
	_, err := t.x.c.Exec(t.ctx, `UPDATE `+t.schema()+`.runs SET last_event = GREATEST(last_event, $2) WHERE id = $1`,
		run.ID, evs[n-1].Seq)
	return err
}

// Two forks or resumes at once each look before they write, unlocked: the
// one that finds its write taken by the other tries again, and then sees
// it (a fork with the same id and point is that fork; a resumed run is
// pending, resumed).
var (
	errForkedElsewhere  = &retryError{"run created concurrently"}
	errResumedElsewhere = &retryError{"run resumed concurrently"}
)

// InsertRun inserts p's run, pending, runnable at now.
func (t *forkTx) InsertRun(p *store.CreateRunParams, now time.Time) (*store.Run, error) {
	n := sqlrow.Nanos(now)
	run, err := sqlrow.ScanRun(t.x.c.QueryRow(t.ctx, `INSERT INTO `+t.schema()+`.runs (id, workflow, status, input, created_at, updated_at,
			wake_at, parent_id, lease_owner, lease_expires, lease_epoch, trace_parent, version)
		VALUES ($1, $2, 'pending', $3, $4, $4, $4, $5, '', 0, 0, $6, $7) ON CONFLICT (id) DO NOTHING RETURNING `+sqlrow.RunCols,
		p.ID, p.Workflow, p.Input, n, p.Parent, p.TraceParent, p.Version))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errForkedElsewhere
	}
	return run, err
}

// StreamsOfRun returns every stream of run, by id.
func (t *forkTx) StreamsOfRun(run string) ([]*store.StreamInfo, error) {
	rows, err := t.x.c.Query(t.ctx, `SELECT `+sqlrow.StreamCols+` FROM `+t.schema()+`.streams WHERE run_id = $1 ORDER BY id`, run)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.StreamInfo, error) { return sqlrow.ScanStream(r) })
}

// CreateRunStream creates run's stream name.
func (t *forkTx) CreateRunStream(run, name, contentType string, now time.Time) (*apply.Stream, error) {
	var id int64
	n := sqlrow.Nanos(now)
	err := t.x.c.QueryRow(t.ctx, `INSERT INTO `+t.schema()+`.streams (path, run_id, name, content_type, created_at, last_access)
		VALUES ($1, $2, $3, $4, $5, $5) RETURNING id`, store.RunStreamPath(run, name), run, name, contentType, n).Scan(&id)
	if err != nil {
		return nil, err
	}
	st := &apply.Stream{ID: id, RunID: run}
	t.streams[id] = st
	return st, nil
}

// Stream locks stream id and returns its state.
func (t *forkTx) Stream(id int64) (*apply.Stream, error) {
	if st, ok := t.streams[id]; ok {
		return st, nil
	}
	st, _, err := t.s.lockStream(t.ctx, t.x, id)
	if err != nil {
		return nil, err
	}
	t.streams[id] = st
	return st, nil
}

// Records calls fn with st's records below upTo, a page of batches at a
// time: fn's own statements need the connection the page was read on.
func (t *forkTx) Records(st *apply.Stream, upTo int64, fn func([]stream.Record) error) error {
	type batch struct {
		first, last int64
		data        []byte
	}
	var recs []stream.Record
	for after := int64(-1); ; {
		rows, err := t.x.c.Query(t.ctx, `SELECT first_offset, last_offset, data FROM `+t.schema()+`.batches
			WHERE stream_id = $1 AND first_offset < $2 AND last_offset > $3 ORDER BY last_offset LIMIT 256`, st.ID, upTo, after)
		if err != nil {
			return err
		}
		page, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (batch, error) {
			var b batch
			err := r.Scan(&b.first, &b.last, &b.data)
			return b, err
		})
		if err != nil {
			return err
		}
		if len(page) == 0 {
			return nil
		}
		after = page[len(page)-1].last
		for _, b := range page {
			if recs, err = stream.DecodeBatch(recs[:0], b.data, b.first, b.first); err != nil {
				return err
			}
			if err := fn(recs); err != nil {
				return err
			}
		}
	}
}

// Writer returns writer id's state on st, nil if it never wrote there.
func (t *forkTx) Writer(st *apply.Stream, id string) (*stream.Writer, error) {
	w := &stream.Writer{ID: id}
	var status int16
	err := t.x.c.QueryRow(t.ctx, `SELECT attempt, next, diverged, status FROM `+t.schema()+`.writers
		WHERE stream_id = $1 AND writer = $2`, st.ID, id).Scan(&w.Attempt, &w.Next, &w.Diverged, &status)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	w.Status = stream.Status(status)
	rows, err := t.x.c.Query(t.ctx, t.s.q.replayWriters, []int64{st.ID}, []string{id})
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var recs []stream.Record
	for rows.Next() {
		var sid, first int64
		var wr string
		var data []byte
		if err := rows.Scan(&sid, &wr, &first, &data); err != nil {
			return nil, err
		}
		if recs, err = stream.DecodeBatch(recs[:0], data, first, 0); err != nil {
			return nil, err
		}
		for i := range recs {
			if r := &recs[i]; r.Writer == id {
				w.Replay(r)
			}
		}
	}
	return w, rows.Err()
}

// AddRecords writes recs as one batch and st's head (sent by flush).
func (t *forkTx) AddRecords(st *apply.Stream, recs []stream.Record) error {
	if len(recs) == 0 {
		return nil
	}
	t.pend.Queue(t.s.q.insertBatch, st.ID, recs[len(recs)-1].Offset, recs[0].Offset, recs[0].Writer,
		stream.EncodeBatch(nil, recs), dataBytes(recs))
	if t.heads[st.ID] == nil && !slices.Contains(t.wrote, st.ID) {
		t.wrote = append(t.wrote, st.ID)
	}
	t.heads[st.ID] = st
	if t.pend.Len() >= 1000 {
		return t.flush()
	}
	return nil
}

// SaveWriter persists w's state on st; its row's version moves, so that
// every process's cached state of it is dropped.
func (t *forkTx) SaveWriter(st *apply.Stream, w *stream.Writer, created bool) error {
	_, err := t.x.c.Exec(t.ctx, `INSERT INTO `+t.schema()+`.writers AS w (stream_id, writer, attempt, next, diverged, status, version, token)
		VALUES ($1, $2, $3, $4, $5, $6, 1, 0)
		ON CONFLICT (stream_id, writer) DO UPDATE SET attempt = excluded.attempt, next = excluded.next,
			diverged = excluded.diverged, status = excluded.status, version = w.version + 1`,
		st.ID, w.ID, w.Attempt, w.Next, w.Diverged, int16(w.Status))
	return err
}

// SaveRunEvent makes ev its key's latest value.
func (t *forkTx) SaveRunEvent(run *apply.Run, ev *store.Event) error {
	_, err := t.x.c.Exec(t.ctx, t.s.q.putRunEvents, []string{run.ID}, []string{ev.Name}, [][]byte{ev.Data},
		[]int64{ev.Seq}, []int64{sqlrow.Nanos(ev.At)})
	return err
}

// ReviveRun makes run id pending again.
func (t *forkTx) ReviveRun(id string, now time.Time) (*store.Run, error) {
	n := sqlrow.Nanos(now)
	run, err := sqlrow.ScanRun(t.x.c.QueryRow(t.ctx, `UPDATE `+t.schema()+`.runs SET status = 'pending', output = NULL, error = '',
			lease_owner = '', lease_expires = 0, wake_at = $2, cancel_requested = false, updated_at = $2, ended_at = 0
		WHERE id = $1 AND status IN ('failed', 'cancelled') RETURNING `+sqlrow.RunCols, id, n))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errResumedElsewhere // or purged: the next try says which
	}
	return run, err
}

// The rest of apply.Tx: forks and resumes use none of it.

var errForkUnused = errors.New("pgstore: not part of a fork or a resume")

func (t *forkTx) Fence(run, writer string) (int64, error) { return 0, errForkUnused }
func (t *forkTx) Producer(st *apply.Stream, id string) (*stream.ProducerState, error) {
	return nil, errForkUnused
}
func (t *forkTx) Key(st *apply.Stream, key string) (*apply.Key, error) { return nil, errForkUnused }
func (t *forkTx) WriterStreams(run, writer string) ([]*apply.Stream, error) {
	return nil, errForkUnused
}
func (t *forkTx) RunStreams(run string) ([]*apply.Stream, error) { return nil, errForkUnused }
func (t *forkTx) SaveStream(st *apply.Stream) error              { return errForkUnused }
func (t *forkTx) SaveFence(run, writer string, attempt int64) error {
	return errForkUnused
}
func (t *forkTx) SaveProducer(st *apply.Stream, id string, ps stream.ProducerState) error {
	return errForkUnused
}
func (t *forkTx) SaveKey(st *apply.Stream, key string, k *apply.Key) error { return errForkUnused }
