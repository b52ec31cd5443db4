package pgstore

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
	"github.com/weirhq/weir/stream"
)

// readPlan is what a group's first round trip reads, locks and creates, as
// its ops' plans add it: what the rules load (apply.Reads), and what the
// store's own ops need.
type readPlan struct {
	apply.Reads
	anon    []anonKey // anonymous appends retried: did their batch land?
	creates []*createRunOp
	opens   []*openStreamOp
	claims  []*claimOp
	world   []worldReads
}

// resolveStreams learns the run of every stream an op writes by a writer
// (from the cache, else one query), and fails the ops on streams that do
// not exist: the plans lock those runs.
func (g *group) resolveStreams() error {
	var missing []int64
	for _, o := range g.ops {
		if id, ok := writerStream(o); ok && o.base().err == nil {
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
		if id, ok := writerStream(o); ok {
			if _, ok := g.s.streamRun(id); !ok {
				o.base().err = fmt.Errorf("stream %d: %w", id, store.ErrNotFound)
			}
		}
	}
	return nil
}

// writerOp is an op that may write to a stream as a writer: its plan then
// locks the stream's run, which resolveStreams learns first.
type writerOp interface{ writerStream() (int64, bool) }

func writerStream(o op) (int64, bool) {
	if w, ok := o.(writerOp); ok {
		return w.writerStream()
	}
	return 0, false
}

// runOf returns the run of stream id, as resolveStreams learnt it.
func (g *group) runOf(id int64) string {
	run, _ := g.s.streamRun(id)
	return run
}

// lockAndRead is the group's first round trip: BEGIN, the locks, and what
// the ops read, each set in one statement.
func (g *group) lockAndRead() error {
	var r readPlan
	for _, o := range g.ops {
		if o.base().err == nil {
			o.plan(g, &r)
		}
	}
	runIDs := sortedSet(r.Runs)
	if runIDs == nil {
		runIDs = []string{} // claimIn compares with it
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	g.queueLocks(b, &r, runIDs)
	g.queueStateReads(b, &r)
	if len(r.world) > 0 {
		g.queueWorldReads(b, r.world)
	}
	// Creations come last: an insert waits only for another transaction
	// inserting the same key, so every lock the group takes is taken before.
	if len(r.creates) > 0 {
		g.queueCreateRuns(b, r.creates)
	}
	// Claims come after the creations, so a run created in this group can
	// be claimed in it, and skip the runs the group holds: the group read
	// their leases before, and its ops rely on them.
	for _, o := range r.claims {
		g.queueClaim(b, o, runIDs)
	}
	if len(r.opens) > 0 {
		g.queueOpenStreams(b, r.opens)
	}
	if g.createsOnly() {
		// New runs alone: the insert decided everything (a run that
		// exists is found, not changed), so the group commits in this
		// round trip.
		b.Queue("COMMIT")
		g.x.t.committing, g.early = true, true
	}
	return g.x.c.SendBatch(g.ctx, b).Close()
}

// createsOnly reports whether every op of the group is a CreateRun.
func (g *group) createsOnly() bool {
	for _, o := range g.ops {
		if _, ok := o.(*createRunOp); !ok {
			return false
		}
	}
	return len(g.ops) > 0
}

// queueLocks queues the locks of the hooks, runs and streams the ops
// touch, in that order (a hook's own transactions lock it before its
// run), reading their rows.
func (g *group) queueLocks(b *pgx.Batch, r *readPlan, runIDs []string) {
	q := g.s.q
	if len(r.Hooks) > 0 {
		// Hooks before runs, as a hook's own transactions lock them.
		b.Queue(q.lockHooks, sortedSet(r.Hooks)).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				h := &apply.Hook{}
				var created int64
				if err := rows.Scan(&h.Token, &h.RunID, &h.Op, &h.Disposed, &h.Received, &created); err != nil {
					return err
				}
				h.CreatedAt = sqlrow.Time(created)
				g.hooks[h.Token] = &gHook{h: h}
			}
			return rows.Err()
		})
	}
	// A group of creations alone (new runs, standalone streams' opens)
	// locks nothing: a statement with no key is not sent.
	if len(runIDs) > 0 {
		g.queueLockRuns(b, runIDs)
	}
	streams, runStreams := sortedSet(r.Streams), sortedSet(r.RunStreams)
	if len(streams) == 0 && len(runStreams) == 0 {
		return
	}
	b.Queue(q.lockStreams, streams, runStreams).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			as, err := sqlrow.ScanState(rows)
			if err != nil {
				return err
			}
			st := &gStream{Stream: *as}
			g.streams[st.ID] = st
			if st.RunID != "" {
				g.byRun[st.RunID] = append(g.byRun[st.RunID], st) // in id order
			}
		}
		return rows.Err()
	})
}

func (g *group) queueLockRuns(b *pgx.Batch, runIDs []string) {
	b.Queue(g.s.q.lockRuns, runIDs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			gr := &gRun{}
			var status string
			if err := rows.Scan(&gr.ID, &gr.LastEvent, &gr.Epoch, &gr.Owner, &status, &gr.dbToken, &gr.CancelRequested); err != nil {
				return err
			}
			gr.Status = store.RunStatus(status)
			g.runs[gr.ID] = gr
		}
		return rows.Err()
	})
}

// queueStateReads queues the reads of the state the rules decide with:
// writers, fences, producers, idempotency keys, anonymous appends' tokens.
func (g *group) queueStateReads(b *pgx.Batch, r *readPlan) {
	q := g.s.q
	if len(r.Writers) > 0 || len(r.RunWriters) > 0 {
		var c cols2[int64, string]
		for _, w := range r.Writers {
			c.add(w.Stream, w.Writer)
		}
		var rw cols2[string, string]
		for _, w := range r.RunWriters {
			rw.add(w.Run, w.Writer)
		}
		b.Queue(q.readWriters, c.a, c.b, rw.a, rw.b).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k writerKey
				var wr writerRow
				if err := rows.Scan(&k.stream, &k.writer, &wr.attempt, &wr.next, &wr.diverged, &wr.status, &wr.version, &wr.token); err != nil {
					return err
				}
				g.writers[k] = &gWriter{version: wr.version, existed: true, dbToken: wr.token,
					w: &stream.Writer{ID: k.writer, Attempt: wr.attempt, Next: wr.next, Diverged: wr.diverged, Status: stream.Status(wr.status)}}
			}
			return rows.Err()
		})
	}
	if len(r.Fences) > 0 {
		var c cols2[string, string]
		for _, f := range distinct(r.Fences) {
			c.add(f.Run, f.Writer)
		}
		b.Queue(q.readFences, c.a, c.b).Query(func(rows pgx.Rows) error {
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
	if len(r.Producers) > 0 {
		c := streamKeyCols(r.Producers)
		b.Queue(q.readProducers, c.a, c.b).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k prodKey
				gp := &gProducer{}
				if err := rows.Scan(&k.stream, &k.id, &gp.st.Epoch, &gp.st.LastSeq); err != nil {
					return err
				}
				g.producers[k] = gp
			}
			return rows.Err()
		})
	}
	if len(r.Keys) > 0 {
		c := streamKeyCols(r.Keys)
		b.Queue(q.readKeys, c.a, c.b).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k prodKey
				sk := &apply.Key{}
				var expires int64
				if err := rows.Scan(&k.stream, &k.id, &sk.Digest, &sk.Result, &expires); err != nil {
					return err
				}
				sk.ExpiresAt = sqlrow.Time(expires)
				g.keys[k] = &gKey{k: sk}
			}
			return rows.Err()
		})
	}
	if len(r.anon) > 0 {
		var c cols2[int64, int64]
		for _, a := range r.anon {
			c.add(a.stream, a.token)
		}
		b.Queue(q.readAnonTokens, c.a, c.b).Query(func(rows pgx.Rows) error {
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
}

func (g *group) queueCreateRuns(b *pgx.Batch, ops []*createRunOp) {
	var id, wf, parent, status, owner, trace, version []string
	var input [][]byte
	var now, wake, expires, epoch, bound []int64
	var same []bool
	for _, o := range ops {
		id, wf, input = append(id, o.p.ID), append(wf, o.p.Workflow), append(input, o.p.Input)
		now, wake, parent = append(now, o.now), append(wake, sqlrow.Nanos(o.p.WakeAt)), append(parent, o.p.Parent)
		status, owner = append(status, string(o.lease.Status)), append(owner, o.lease.Owner)
		expires, epoch = append(expires, sqlrow.Nanos(o.lease.Expires)), append(epoch, o.lease.Epoch)
		trace, version = append(trace, o.p.TraceParent), append(version, o.p.Version)
		bound, same = append(bound, apply.FoundBound(o.p)), append(same, o.p.SameInput)
	}
	g.inserted, g.existing = map[string]bool{}, map[string]*store.Run{}
	b.Queue(g.s.q.runsByID, id, wf, input, now, wake, parent, status, owner, expires, epoch, trace, version, bound, same).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var inserted bool
			var i int64
			r, f, err := sqlrow.ScanFoundRun(rows, &inserted, &i)
			if err != nil {
				return err
			}
			g.existing[r.ID] = r
			if inserted {
				g.inserted[r.ID], g.creates = true, true
			} else if i >= 1 && int(i) <= len(ops) {
				ops[i-1].found, ops[i-1].foundAs = r, f
			}
		}
		return rows.Err()
	})
}

func (g *group) queueClaim(b *pgx.Batch, o *claimOp, held []string) {
	p := o.p
	b.Queue(g.s.q.claimIn, p.Owner, sqlrow.Nanos(p.Now.Add(p.LeaseTTL)), sqlrow.Nanos(p.Now), p.Limit, held, g.token, o.prevToken, p.Workflows, p.SkipQueues, p.Versions, p.Lined).Query(func(rows pgx.Rows) error {
		o.claimed = o.claimed[:0]
		for rows.Next() {
			var c claimedRun
			var err error
			var lined bool
			if c.run, err = sqlrow.ScanRun(rows, &c.seq, &lined); err != nil {
				return err
			}
			c.run.Lined = lined
			o.claimed = append(o.claimed, c)
			g.creates = true
		}
		return rows.Err()
	})
}

func (g *group) queueOpenStreams(b *pgx.Batch, ops []*openStreamOp) {
	var path, run, name, ct []string
	var now []int64
	for _, o := range ops {
		path, run, name = append(path, o.path), append(run, o.runID), append(name, o.name)
		ct, now = append(ct, o.contentType), append(now, o.now)
	}
	g.opened, g.created = map[string]*store.StreamInfo{}, map[string]bool{}
	b.Queue(g.s.q.streamsByPath, path, run, name, ct, now).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var inserted bool
			si, err := sqlrow.ScanStream(rows, &inserted)
			if err != nil {
				return err
			}
			g.opened[si.Path] = si
			if inserted {
				g.created[si.Path], g.creates = true, true
			}
		}
		return rows.Err()
	})
}

// loadWriters fills in the Live records of the writers read: from the cache
// where its version matches the row's, else rebuilt from their batches, in
// one query for all.
func (g *group) loadWriters() error {
	var miss cols2[int64, string]
	for k, gw := range g.writers {
		if cached, ok := g.s.writers.take(k, gw.version); ok {
			gw.w.Live = cached.Live
		} else {
			miss.add(k.stream, k.writer)
		}
	}
	if len(miss.a) == 0 {
		return nil
	}
	rows, err := g.x.Query(g.ctx, g.s.q.replayWriters, miss.a, miss.b)
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

// cols2 is two parallel columns of keys, as unnest takes them.
type cols2[A, B any] struct {
	a []A
	b []B
}

func (c *cols2[A, B]) add(a A, b B) { c.a, c.b = append(c.a, a), append(c.b, b) }

func streamKeyCols(ks []apply.StreamKey) cols2[int64, string] {
	var c cols2[int64, string]
	for _, k := range ks {
		c.add(k.Stream, k.Key)
	}
	return c
}

// sortedSet returns the distinct values of xs, sorted: the order locks are
// taken in.
func sortedSet[T cmp.Ordered](xs []T) []T {
	out := distinct(xs)
	slices.Sort(out)
	return out
}

// distinct returns the distinct values of xs, in their first order.
func distinct[T comparable](xs []T) []T {
	if len(xs) == 0 {
		return nil
	}
	seen := make(map[T]bool, len(xs))
	out := make([]T, 0, len(xs))
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
