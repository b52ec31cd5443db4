package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// A group is one transaction of the committer: see committer.go.
//
// Locks are taken run first, then streams, each set in id order and in one
// statement (ORDER BY id FOR UPDATE locks rows in that order), so groups in
// any number of processes cannot deadlock one another. A run is locked FOR
// UPDATE both for a Record and for an append by a writer to one of its
// streams: the append must read the run's fences after any Record that
// raises them has committed.
type group struct {
	s     *Store
	ops   []*op
	token int64
	ctx   context.Context
	x     *txn

	runs      map[string]*gRun
	streams   map[int64]*gStream
	byRun     map[string][]*gStream // locked streams of a run, by id
	writers   map[writerKey]*gWriter
	fences    map[fenceKey]*gFence
	producers map[prodKey]*gProducer
	keys      map[prodKey]*gKey
	anonDone  map[anonKey]bool // a retried anonymous append's batch exists

	inserted map[string]bool              // runs this group created
	existing map[string]*store.Run        // the runs create ops name, after the inserts
	opened   map[string]*store.StreamInfo // the streams open ops name, after the inserts
	creates  bool                         // the inserts wrote rows

	events  eventRows
	batches batchRows
	undo    []func()
	wrote   []head // the streams that got records, with their new heads
}

type fenceKey struct{ run, writer string }
type prodKey struct {
	stream int64
	id     string
}
type anonKey struct{ stream, token int64 }

type gRun struct {
	id                   string
	lastEvent, epoch     int64
	owner, status        string
	dbToken              int64
	dirty                bool
	setStatus            bool
	output               []byte
	errMsg               string
	release, ended       bool
	wake, now            int64
	finishedStatus       string
	hasFinishOrCloseWork bool
}

type gStream struct {
	id    int64
	meta  streamMeta
	dirty bool
}

type gWriter struct {
	w       *stream.Writer
	version int64 // the row's version; 0 if it has no row
	existed bool
	dbToken int64
	dirty   bool
}

type gFence struct {
	attempt int64
	dirty   bool
}

type gProducer struct {
	st    *stream.ProducerState
	dirty bool
}

type gKey struct {
	k     *storedKey
	dirty bool
}

func newGroup(s *Store, ops []*op) *group {
	return &group{
		s: s, ops: ops, token: newToken(),
		runs: map[string]*gRun{}, streams: map[int64]*gStream{}, byRun: map[string][]*gStream{},
		writers: map[writerKey]*gWriter{}, fences: map[fenceKey]*gFence{},
		producers: map[prodKey]*gProducer{}, keys: map[prodKey]*gKey{}, anonDone: map[anonKey]bool{},
	}
}

// run applies the group's ops. An error is the group's: every op not
// refused by itself fails with it.
func (g *group) run() (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = panicErr(p)
		}
	}()
	// One caller's context must not cut the others' transaction.
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	g.ctx = ctx
	if err := g.resolveStreams(); err != nil {
		return err
	}
	t := &try{}
	x, err := g.s.acquire(ctx, t)
	if err != nil {
		return err
	}
	defer x.release()
	g.x = x
	if err := g.lockAndRead(); err != nil {
		return err
	}
	if err := g.loadWriters(); err != nil {
		return err
	}
	for _, o := range g.ops {
		if o.err == nil {
			g.apply(o)
		}
	}
	if !g.dirty() {
		g.putWriters(false)
		return nil // read only: release rolls back
	}
	b := g.writes()
	for _, o := range g.ops {
		o.committing, o.token = true, g.token
	}
	if err := x.commit(ctx, b); err != nil {
		return err
	}
	g.putWriters(true)
	return nil
}

// resolveStreams learns the run of every stream an op writes by a writer
// (from the cache, else one query), and fails the ops on streams that do
// not exist.
func (g *group) resolveStreams() error {
	var missing []int64
	for _, o := range g.ops {
		if id, ok := o.writerStream(); ok {
			if _, ok := g.s.streamRun(id); !ok {
				missing = append(missing, id)
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	rows, err := g.s.pool.Query(g.ctx, `SELECT id, COALESCE(run_id, '') FROM `+g.s.q.schema+`.streams WHERE id = ANY($1)`, missing)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var run string
		if err := rows.Scan(&id, &run); err != nil {
			return err
		}
		g.s.setStreamRun(id, run)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, o := range g.ops {
		if id, ok := o.writerStream(); ok {
			if _, ok := g.s.streamRun(id); !ok {
				o.err = fmt.Errorf("stream %d: %w", id, store.ErrNotFound)
			}
		}
	}
	return nil
}

// writerStream returns the stream o writes as a writer, whose run it locks.
func (o *op) writerStream() (int64, bool) {
	switch {
	case o.kind == opAppend && o.append.Writer != "":
		return o.append.StreamID, true
	case o.kind == opFinish:
		return o.finish.StreamID, true
	}
	return 0, false
}

// lockAndRead is the group's first round trip: BEGIN, the locks, and what
// the ops read.
func (g *group) lockAndRead() error {
	var (
		runIDs          []string
		streamIDs       []int64
		workRuns        []string // runs whose every stream is locked: Finish, CloseStreams
		wStream         []int64  // (stream, writer) rows to read
		wWriter         []string
		rwRun, rwWriter []string // (run, writer): the writer's rows on the run's streams
		fRun, fWriter   []string // fences to read
		pStream         []int64
		pID             []string
		kStream         []int64
		kKey            []string
		aStream, aToken []int64
		cID, cWF        []string // runs to create
		cInput          [][]byte
		cNow, cWake     []int64
		sPath, sRun     []string // streams to create
		sName, sCT      []string
		sNow            []int64
		seenRun         = map[string]bool{}
		seenStream      = map[int64]bool{}
		seenFence       = map[fenceKey]bool{}
	)
	addRun := func(run string) {
		if run != "" && !seenRun[run] {
			seenRun[run] = true
			runIDs = append(runIDs, run)
		}
	}
	addStream := func(id int64) {
		if !seenStream[id] {
			seenStream[id] = true
			streamIDs = append(streamIDs, id)
		}
	}
	addFence := func(run, writer string) {
		k := fenceKey{run, writer}
		if run != "" && !seenFence[k] {
			seenFence[k] = true
			fRun, fWriter = append(fRun, run), append(fWriter, writer)
		}
	}
	for _, o := range g.ops {
		if o.err != nil {
			continue
		}
		switch o.kind {
		case opAppend:
			p := o.append
			addStream(p.StreamID)
			if p.Writer != "" {
				run, _ := g.s.streamRun(p.StreamID)
				addRun(run)
				wStream, wWriter = append(wStream, p.StreamID), append(wWriter, p.Writer)
				addFence(run, p.Writer)
			} else if o.prevToken != 0 {
				aStream, aToken = append(aStream, p.StreamID), append(aToken, o.prevToken)
			}
			if p.Producer != nil {
				pStream, pID = append(pStream, p.StreamID), append(pID, p.Producer.ID)
			}
			if p.IdempotencyKey != "" {
				kStream, kKey = append(kStream, p.StreamID), append(kKey, p.IdempotencyKey)
			}
		case opFinish:
			p := o.finish
			run, _ := g.s.streamRun(p.StreamID)
			addRun(run)
			addStream(p.StreamID)
			wStream, wWriter = append(wStream, p.StreamID), append(wWriter, p.Writer)
			addFence(run, p.Writer)
		case opClose:
			addStream(o.stream)
		case opCreateRun:
			p := o.create
			cID, cWF, cInput = append(cID, p.ID), append(cWF, p.Workflow), append(cInput, p.Input)
			cNow, cWake = append(cNow, o.now), append(cWake, nanos(p.WakeAt))
		case opOpenStream:
			p := o.open
			// The new row's foreign key locks its run: take that lock
			// with the others, in order, not after the streams'.
			addRun(p.RunID)
			sPath, sRun, sName = append(sPath, p.Path), append(sRun, p.RunID), append(sName, p.Name)
			sCT, sNow = append(sCT, o.openCT), append(sNow, o.now)
		case opRecord:
			p := o.record
			addRun(p.RunID)
			if p.Finish != nil || p.CloseStreams {
				workRuns = append(workRuns, p.RunID)
			}
			if f := p.Finish; f != nil {
				rwRun, rwWriter = append(rwRun, p.RunID), append(rwWriter, f.Writer)
				addFence(p.RunID, f.Writer)
			}
			if f := p.Fence; f != nil {
				addFence(p.RunID, f.Writer)
			}
		}
	}
	slices.Sort(runIDs)
	q := g.s.q
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(q.lockRuns, runIDs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			r := &gRun{}
			if err := rows.Scan(&r.id, &r.lastEvent, &r.epoch, &r.owner, &r.status, &r.dbToken); err != nil {
				return err
			}
			g.runs[r.id] = r
		}
		return rows.Err()
	})
	b.Queue(q.lockStreams, streamIDs, workRuns).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			st := &gStream{}
			var closedBy *string
			var cbEpoch, cbSeq int64
			m := &st.meta
			if err := rows.Scan(&st.id, &m.runID, &m.head.NextOffset, &m.head.Closed, &m.ttl, &m.expiresAt, &m.lastAccess,
				&closedBy, &cbEpoch, &cbSeq, &m.streamSeq, &m.deleted); err != nil {
				return err
			}
			if closedBy != nil {
				m.closedBy = &stream.Producer{ID: *closedBy, Epoch: cbEpoch, Seq: cbSeq}
			}
			g.streams[st.id] = st
			if m.runID != "" {
				g.byRun[m.runID] = append(g.byRun[m.runID], st) // in id order
			}
		}
		return rows.Err()
	})
	if len(wStream) > 0 || len(rwRun) > 0 {
		b.Queue(q.readWriters, wStream, wWriter, rwRun, rwWriter).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k writerKey
				var r writerRow
				if err := rows.Scan(&k.stream, &k.writer, &r.attempt, &r.next, &r.diverged, &r.status, &r.version, &r.token); err != nil {
					return err
				}
				g.writers[k] = &gWriter{version: r.version, existed: true, dbToken: r.token,
					w: &stream.Writer{ID: k.writer, Attempt: r.attempt, Next: r.next, Diverged: r.diverged, Status: stream.Status(r.status)}}
			}
			return rows.Err()
		})
	}
	if len(fRun) > 0 {
		b.Queue(q.readFences, fRun, fWriter).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k fenceKey
				var a int64
				if err := rows.Scan(&k.run, &k.writer, &a); err != nil {
					return err
				}
				g.fences[k] = &gFence{attempt: a}
			}
			return rows.Err()
		})
	}
	if len(pStream) > 0 {
		b.Queue(q.readProducers, pStream, pID).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k prodKey
				ps := &stream.ProducerState{}
				if err := rows.Scan(&k.stream, &k.id, &ps.Epoch, &ps.LastSeq); err != nil {
					return err
				}
				g.producers[k] = &gProducer{st: ps}
			}
			return rows.Err()
		})
	}
	if len(kStream) > 0 {
		b.Queue(q.readKeys, kStream, kKey).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k prodKey
				sk := &storedKey{}
				if err := rows.Scan(&k.stream, &k.id, &sk.digest, &sk.result, &sk.expiresAt); err != nil {
					return err
				}
				g.keys[k] = &gKey{k: sk}
			}
			return rows.Err()
		})
	}
	if len(aStream) > 0 {
		b.Queue(q.readAnonTokens, aStream, aToken).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k anonKey
				if err := rows.Scan(&k.stream, &k.token); err != nil {
					return err
				}
				g.anonDone[k] = true
			}
			return rows.Err()
		})
	}
	// Creations come last: an insert waits only for another transaction
	// inserting the same key, so every lock the group takes is taken before.
	if len(cID) > 0 {
		g.inserted, g.existing = map[string]bool{}, map[string]*store.Run{}
		b.Queue(q.insertRuns, cID, cWF, cInput, cNow, cWake).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					return err
				}
				g.inserted[id], g.creates = true, true
			}
			return rows.Err()
		})
		b.Queue(q.runsByID, cID).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				r, err := scanRun(rows)
				if err != nil {
					return err
				}
				g.existing[r.ID] = r
			}
			return rows.Err()
		})
	}
	// Claims come after the creations, so a run created in this group can
	// be claimed in it, and skip the runs the group holds: the group read
	// their leases before, and its ops rely on them.
	for _, o := range g.ops {
		if o.kind != opClaim || o.err != nil {
			continue
		}
		p := o.claim
		if runIDs == nil {
			runIDs = []string{}
		}
		b.Queue(q.claimIn, p.Owner, nanos(p.Now.Add(p.LeaseTTL)), nanos(p.Now), p.Limit, runIDs, g.token, o.prevToken, p.Workflows).Query(func(rows pgx.Rows) error {
			o.claimed = o.claimed[:0]
			for rows.Next() {
				var c claimedRun
				var err error
				if c.run, err = scanRun(rows, &c.seq); err != nil {
					return err
				}
				o.claimed = append(o.claimed, c)
				g.creates = true
			}
			return rows.Err()
		})
	}
	if len(sPath) > 0 {
		g.opened = map[string]*store.StreamInfo{}
		b.Queue(q.insertStreams, sPath, sRun, sName, sCT, sNow).Exec(func(ct pgconn.CommandTag) error {
			if ct.RowsAffected() > 0 {
				g.creates = true
			}
			return nil
		})
		b.Queue(q.streamsByPath, sPath).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				si, err := scanStream(rows)
				if err != nil {
					return err
				}
				g.opened[si.Path] = si
			}
			return rows.Err()
		})
	}
	return g.x.c.SendBatch(g.ctx, b).Close()
}

// loadWriters fills in the Live records of the writers read: from the cache
// where its version matches the row's, else rebuilt from their batches, in
// one query for all.
func (g *group) loadWriters() error {
	var miss []writerKey
	for k, gw := range g.writers {
		if cached, ok := g.s.writers.take(k, gw.version); ok {
			gw.w.Live = cached.Live
		} else {
			miss = append(miss, k)
		}
	}
	if len(miss) == 0 {
		return nil
	}
	ids := make([]int64, len(miss))
	names := make([]string, len(miss))
	for i, k := range miss {
		ids[i], names[i] = k.stream, k.writer
	}
	rows, err := g.x.Query(g.ctx, g.s.q.replayWriters, ids, names)
	if err != nil {
		return err
	}
	defer rows.Close()
	var recs []stream.Record
	var k writerKey
	var first int64
	var data pgtype.DriverBytes // aliases the connection's buffer: decoded before the next row
	for rows.Next() {
		if err := rows.Scan(&k.stream, &k.writer, &first, &data); err != nil {
			return err
		}
		if recs, err = stream.DecodeBatch(recs[:0], data, first, 0); err != nil {
			return fmt.Errorf("rebuild writer %q of stream %d: %w", k.writer, k.stream, err)
		}
		w := g.writers[k].w
		for i := range recs {
			if r := &recs[i]; r.Writer == w.ID {
				w.Replay(r)
			}
		}
	}
	return rows.Err()
}

// putWriters gives the writers back to the cache, at the versions their rows
// have now; unless the group failed, when their state may be ahead of the
// database's.
func (g *group) putWriters(committed bool) {
	for k, gw := range g.writers {
		v := gw.version
		if gw.dirty {
			if !committed {
				continue
			}
			v++
			if !gw.existed {
				v = 1
			}
		}
		g.s.writers.put(k, gw.w, v)
	}
}

func (g *group) dirty() bool {
	if g.creates || len(g.events.run) > 0 || len(g.batches.stream) > 0 {
		return true
	}
	for _, r := range g.runs {
		if r.dirty {
			return true
		}
	}
	for _, st := range g.streams {
		if st.dirty {
			return true
		}
	}
	for _, m := range []func() bool{
		func() bool { return anyDirty(g.writers, func(w *gWriter) bool { return w.dirty }) },
		func() bool { return anyDirty(g.fences, func(f *gFence) bool { return f.dirty }) },
		func() bool { return anyDirty(g.producers, func(p *gProducer) bool { return p.dirty }) },
		func() bool { return anyDirty(g.keys, func(k *gKey) bool { return k.dirty }) },
	} {
		if m() {
			return true
		}
	}
	return false
}

func anyDirty[K comparable, V any](m map[K]V, dirty func(V) bool) bool {
	for _, v := range m {
		if dirty(v) {
			return true
		}
	}
	return false
}

// apply applies one op to the group's state; a refused op undoes its
// changes and keeps its error.
func (g *group) apply(o *op) {
	g.undo = g.undo[:0]
	ne, nb := len(g.events.run), len(g.batches.stream)
	var err error
	switch o.kind {
	case opAppend:
		err = g.applyAppend(o)
	case opRecord:
		err = g.applyRecord(o)
	case opFinish:
		err = g.applyFinish(o)
	case opClose:
		err = g.applyClose(o)
	case opCreateRun:
		err = g.applyCreateRun(o)
	case opOpenStream:
		err = g.applyOpenStream(o)
	case opClaim:
		// Done in the first round trip.
	}
	if err != nil {
		for i := len(g.undo) - 1; i >= 0; i-- {
			g.undo[i]()
		}
		g.events.truncate(ne)
		g.batches.truncate(nb)
		o.err = err
	}
	g.undo = g.undo[:0]
}

// fence returns the fence of writer on run, as this group has it.
func (g *group) fence(run, writer string) int64 {
	if f := g.fences[fenceKey{run, writer}]; f != nil {
		return f.attempt
	}
	return 0
}

func (g *group) applyAppend(o *op) error {
	p := o.append
	st := g.streams[p.StreamID]
	if st == nil {
		return fmt.Errorf("stream %d: %w", p.StreamID, store.ErrNotFound)
	}
	wk := writerKey{p.StreamID, p.Writer}
	gw := g.writers[wk]
	if o.prevToken != 0 && o.prevRes != nil {
		// An earlier try of this op committed if its group's token is on
		// the rows it wrote.
		if p.Writer != "" && gw != nil && gw.existed && gw.dbToken == o.prevToken ||
			p.Writer == "" && g.anonDone[anonKey{p.StreamID, o.prevToken}] {
			o.res = o.prevRes
			return nil
		}
	}
	m := &st.meta
	// 1. The stream.
	if m.deleted {
		return fmt.Errorf("stream %d: %w", p.StreamID, store.ErrGone)
	}
	if m.expired(o.now) {
		return fmt.Errorf("stream %d expired: %w", p.StreamID, store.ErrNotFound)
	}
	// 2. The idempotency key.
	kk := prodKey{p.StreamID, p.IdempotencyKey}
	if p.IdempotencyKey != "" {
		if k := g.keys[kk]; k != nil && k.k.expiresAt > o.now {
			if !bytes.Equal(k.k.digest, p.RequestDigest) {
				return fmt.Errorf("%w: key %q", store.ErrKeyReused, p.IdempotencyKey)
			}
			res, err := decodeKeyResult(k.k.result)
			if err != nil {
				return fmt.Errorf("idempotency key %q: stored result: %w", p.IdempotencyKey, err)
			}
			o.res = res
			return nil
		}
	}
	fence := int64(0)
	if p.Writer != "" && m.runID != "" {
		fence = g.fence(m.runID, p.Writer)
	}
	var w *stream.Writer
	if gw != nil {
		w = gw.w
	}
	pk := prodKey{}
	var prod *stream.ProducerState
	if p.Producer != nil {
		pk = prodKey{p.StreamID, p.Producer.ID}
		if gp := g.producers[pk]; gp != nil {
			prod = gp.st
		}
	}
	// applyAppend changes m and w only when it succeeds, and nothing after
	// it can fail: no undo is needed.
	res, plan, err := g.s.applyAppend(p, m, fence, w, prod, o.now)
	if err != nil {
		return err
	}
	o.res = res
	if plan == nil {
		return nil
	}
	token := int64(0)
	if p.Writer == "" {
		token = g.token // the retry's proof (anonDone)
	}
	for _, recs := range plan.batches {
		g.batches.add(p.StreamID, recs, token)
	}
	if plan.meta {
		st.dirty = true
	}
	if plan.writer != nil {
		if gw == nil {
			gw = &gWriter{w: plan.writer}
			g.writers[wk] = gw
		}
		gw.dirty = true
	}
	if plan.producer != nil {
		g.producers[pk] = &gProducer{st: plan.producer, dirty: true}
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
		g.keys[kk] = &gKey{k: &storedKey{digest: digest, result: encodeKeyResult(res), expiresAt: o.now + int64(ttl)}, dirty: true}
	}
	return nil
}

func (g *group) applyRecord(o *op) error {
	p := o.record
	run := g.runs[p.RunID]
	if run == nil {
		return fmt.Errorf("run %q: %w", p.RunID, store.ErrNotFound)
	}
	if o.prevToken != 0 && run.dbToken == o.prevToken {
		return nil // an earlier try committed
	}
	if run.epoch != p.LeaseEpoch || run.owner == "" || store.RunStatus(run.status).Terminal() {
		return leaseLostErr(p.RunID, p.LeaseEpoch, run.epoch, run.owner, run.status)
	}
	old := *run
	g.undo = append(g.undo, func() { *run = old })
	ev := o.evs
	for i := range ev.types {
		g.events.add(run.id, run.lastEvent+int64(i)+1, ev, i)
	}
	run.lastEvent += int64(len(ev.types))
	if f := p.Fence; f != nil {
		g.raiseFence(run.id, f.Writer, f.Attempt)
	}
	if f := p.Finish; f != nil {
		fence := g.fence(run.id, f.Writer)
		rule := stream.Abort
		if f.Commit {
			rule = stream.Commit
		}
		for _, st := range g.byRun[run.id] {
			gw := g.writers[writerKey{st.id, f.Writer}]
			if gw == nil {
				continue // the writer never wrote here
			}
			if f.Attempt < fence {
				return fmt.Errorf("finish writer %q on stream %d: %w", f.Writer, st.id,
					&stream.FencedError{Attempt: f.Attempt, Current: fence})
			}
			g.saveStream(st)
			g.saveWriter(gw)
			res, recs, err := rule(&st.meta.head, gw.w, f.Attempt)
			if err != nil {
				return fmt.Errorf("finish writer %q on stream %d: %w", f.Writer, st.id, err)
			}
			if res == stream.Done {
				gw.dirty, st.dirty = true, true
				g.batches.add(st.id, recs, 0)
			}
		}
	}
	if p.CloseStreams {
		for _, st := range g.byRun[run.id] {
			g.saveStream(st)
			if res, recs := stream.Close(&st.meta.head); res == stream.Done {
				st.dirty = true
				g.batches.add(st.id, recs, 0)
			}
		}
	}
	c := o.chg
	run.dirty, run.now = true, c.now
	if c.status != "" {
		run.setStatus, run.status, run.output, run.errMsg = true, c.status, c.output, c.errMsg
	}
	if c.release {
		run.release, run.wake, run.owner = true, c.wake, ""
	}
	if c.terminal {
		run.ended = true
	}
	return nil
}

// saveStream and saveWriter let the current op's failure restore st and gw.
func (g *group) saveStream(st *gStream) {
	old := *st
	g.undo = append(g.undo, func() { *st = old })
}

func (g *group) saveWriter(gw *gWriter) {
	old, oldW := *gw, *gw.w // Commit and Abort only reslice Live
	g.undo = append(g.undo, func() { *gw = old; *gw.w = oldW })
}

func (g *group) raiseFence(run, writer string, attempt int64) {
	k := fenceKey{run, writer}
	f := g.fences[k]
	if f == nil {
		f = &gFence{}
		g.fences[k] = f
		g.undo = append(g.undo, func() { delete(g.fences, k) })
	} else {
		old := *f
		g.undo = append(g.undo, func() { *f = old })
	}
	if attempt > f.attempt {
		f.attempt, f.dirty = attempt, true
	}
}

func (g *group) applyFinish(o *op) error {
	p := o.finish
	st := g.streams[p.StreamID]
	if st == nil {
		return fmt.Errorf("stream %d: %w", p.StreamID, store.ErrNotFound)
	}
	gw := g.writers[writerKey{p.StreamID, p.Writer}]
	if o.prevToken != 0 && gw != nil && gw.existed && gw.dbToken == o.prevToken {
		o.result = o.prevFin
		return nil
	}
	var w *stream.Writer
	if gw != nil {
		w = gw.w
		if fence := g.fence(st.meta.runID, p.Writer); st.meta.runID != "" && p.Attempt < fence {
			return &stream.FencedError{Attempt: p.Attempt, Current: fence}
		}
	}
	rule := stream.Abort
	if p.Commit {
		rule = stream.Commit
	}
	// The rules change nothing when they refuse.
	res, recs, err := rule(&st.meta.head, w, p.Attempt)
	o.result = res
	if err != nil || res == stream.Already {
		return err
	}
	gw.dirty, st.dirty = true, true
	g.batches.add(st.id, recs, 0)
	return nil
}

func (g *group) applyClose(o *op) error {
	st := g.streams[o.stream]
	if st == nil {
		return fmt.Errorf("stream %d: %w", o.stream, store.ErrNotFound)
	}
	res, recs := stream.Close(&st.meta.head)
	o.result = res
	if res == stream.Done {
		st.dirty = true
		g.batches.add(st.id, recs, 0)
	}
	return nil
}

func (g *group) applyCreateRun(o *op) error {
	p := o.create
	r := g.existing[p.ID]
	if r == nil {
		return &retryError{"run vanished during create"} // purged since
	}
	if r.Workflow != p.Workflow {
		return fmt.Errorf("%w: run %q is of workflow %q, not %q", store.ErrRunConflict, p.ID, r.Workflow, p.Workflow)
	}
	// The first op of the group with this id created it.
	o.run, o.created = r, g.inserted[p.ID]
	delete(g.inserted, p.ID)
	return nil
}

func (g *group) applyOpenStream(o *op) error {
	p := o.open
	si := g.opened[p.Path]
	if si == nil {
		if p.RunID != "" {
			return fmt.Errorf("run %q: %w", p.RunID, store.ErrNotFound)
		}
		return &retryError{"stream vanished during create"} // deleted since
	}
	o.info = si
	return nil
}

// writes is the group's second round trip: every change, set-wise, and
// COMMIT.
func (g *group) writes() *pgx.Batch {
	q := g.s.q
	b := &pgx.Batch{}
	if e := &g.events; len(e.run) > 0 {
		b.Queue(q.insertEventsMany, e.run, e.seq, e.typ, e.op, e.name, e.attempt, e.data, e.err, e.final, e.at, e.wake)
	}
	if len(g.fences) > 0 {
		var runs, writers []string
		var attempts []int64
		for k, f := range g.fences {
			if f.dirty {
				runs, writers, attempts = append(runs, k.run), append(writers, k.writer), append(attempts, f.attempt)
			}
		}
		if len(runs) > 0 {
			b.Queue(q.putFences, runs, writers, attempts)
		}
	}
	if bt := &g.batches; len(bt.stream) > 0 {
		b.Queue(q.insertBatchesMany, bt.stream, bt.last, bt.first, bt.writer, bt.data, bt.token)
		seen := map[int64]bool{}
		for _, id := range bt.stream {
			if !seen[id] {
				seen[id] = true
				h := g.streams[id].meta.head
				g.wrote = append(g.wrote, head{id: id, next: h.NextOffset, closed: h.Closed, known: true})
			}
		}
	}
	{
		var (
			ids, next, access, cbEpoch, cbSeq []int64
			closed                            []bool
			closedBy                          []*string
			seqs                              []string
		)
		for _, st := range g.sortedStreams() {
			if !st.dirty {
				continue
			}
			m := &st.meta
			ids, next, closed, access = append(ids, st.id), append(next, m.head.NextOffset), append(closed, m.head.Closed), append(access, m.lastAccess)
			var cb *string
			var e, s int64
			if m.closedBy != nil {
				id := m.closedBy.ID
				cb, e, s = &id, m.closedBy.Epoch, m.closedBy.Seq
			}
			closedBy, cbEpoch, cbSeq, seqs = append(closedBy, cb), append(cbEpoch, e), append(cbSeq, s), append(seqs, m.streamSeq)
		}
		if len(ids) > 0 {
			b.Queue(q.setStreams, ids, next, closed, access, closedBy, cbEpoch, cbSeq, seqs)
		}
	}
	{
		var (
			ids, attempt, next []int64
			names              []string
			diverged           []bool
			status             []int16
		)
		for k, gw := range g.writers {
			if gw.dirty {
				w := gw.w
				ids, names, attempt, next = append(ids, k.stream), append(names, k.writer), append(attempt, w.Attempt), append(next, w.Next)
				diverged, status = append(diverged, w.Diverged), append(status, int16(w.Status))
			}
		}
		if len(ids) > 0 {
			b.Queue(q.putWriters, ids, names, attempt, next, diverged, status, g.token)
		}
	}
	{
		var (
			ids             []int64
			names           []string
			epochs, lastSeq []int64
		)
		for k, p := range g.producers {
			if p.dirty {
				ids, names, epochs, lastSeq = append(ids, k.stream), append(names, k.id), append(epochs, p.st.Epoch), append(lastSeq, p.st.LastSeq)
			}
		}
		if len(ids) > 0 {
			b.Queue(q.putProducers, ids, names, epochs, lastSeq)
		}
	}
	{
		var (
			ids, expires    []int64
			keys            []string
			digests, result [][]byte
		)
		for k, gk := range g.keys {
			if gk.dirty {
				ids, keys, digests = append(ids, k.stream), append(keys, k.id), append(digests, gk.k.digest)
				result, expires = append(result, gk.k.result), append(expires, gk.k.expiresAt)
			}
		}
		if len(ids) > 0 {
			b.Queue(q.putKeys, ids, keys, digests, result, expires)
			if n := g.s.keysSaved.Add(int64(len(ids))); n/256 != (n-int64(len(ids)))/256 {
				b.Queue(q.purgeKeys, nanos(g.s.cfg.Now()))
			}
		}
	}
	{
		var (
			ids, statuses, errs       []string
			setStatus, release, ended []bool
			outputs                   [][]byte
			wake, now, lastEvent      []int64
		)
		for _, r := range g.runs {
			if !r.dirty {
				continue
			}
			ids, setStatus, statuses, outputs, errs = append(ids, r.id), append(setStatus, r.setStatus), append(statuses, r.status), append(outputs, r.output), append(errs, r.errMsg)
			release, wake, now, ended, lastEvent = append(release, r.release), append(wake, r.wake), append(now, r.now), append(ended, r.ended), append(lastEvent, r.lastEvent)
		}
		if len(ids) > 0 {
			b.Queue(q.updateRuns, ids, setStatus, statuses, outputs, errs, release, wake, now, ended, lastEvent, g.token)
		}
	}
	b.Queue("COMMIT")
	return b
}

func (g *group) sortedStreams() []*gStream {
	out := make([]*gStream, 0, len(g.streams))
	for _, st := range g.streams {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b *gStream) int { return int(a.id - b.id) })
	return out
}

// eventRows are events to insert, as columns.
type eventRows struct {
	run, typ, name, err []string
	seq, op, attempt    []int64
	data                [][]byte
	final               []bool
	at, wake            []int64
}

func (e *eventRows) add(run string, seq int64, a *eventArrays, i int) {
	e.run, e.seq = append(e.run, run), append(e.seq, seq)
	e.typ, e.op, e.name, e.attempt = append(e.typ, a.types[i]), append(e.op, a.ops[i]), append(e.name, a.names[i]), append(e.attempt, a.attempts[i])
	e.data, e.err, e.final = append(e.data, a.data[i]), append(e.err, a.errs[i]), append(e.final, a.final[i])
	e.at, e.wake = append(e.at, a.at[i]), append(e.wake, a.wake[i])
}

func (e *eventRows) truncate(n int) {
	e.run, e.seq, e.typ, e.op, e.name, e.attempt = e.run[:n], e.seq[:n], e.typ[:n], e.op[:n], e.name[:n], e.attempt[:n]
	e.data, e.err, e.final, e.at, e.wake = e.data[:n], e.err[:n], e.final[:n], e.at[:n], e.wake[:n]
}

// batchRows are batches to insert, as columns: one per rules call.
type batchRows struct {
	stream, last, first, token []int64
	writer                     []string
	data                       [][]byte
}

func (b *batchRows) add(id int64, recs []stream.Record, token int64) {
	if len(recs) == 0 {
		return
	}
	b.stream, b.first, b.last = append(b.stream, id), append(b.first, recs[0].Offset), append(b.last, recs[len(recs)-1].Offset)
	b.writer, b.token = append(b.writer, recs[0].Writer), append(b.token, token)
	b.data = append(b.data, stream.EncodeBatch(nil, recs))
}

func (b *batchRows) truncate(n int) {
	b.stream, b.last, b.first, b.token, b.writer, b.data = b.stream[:n], b.last[:n], b.first[:n], b.token[:n], b.writer[:n], b.data[:n]
}
