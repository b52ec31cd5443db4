package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/tail"
	"github.com/weirhq/weir/stream"
)

// A group is one transaction of the committer (committer.go): the first
// round trip locks and reads what its ops need (group_read.go), the rules
// run on that state in memory, op after op, through the group's apply.Tx
// methods below, and the second round trip writes what they changed
// (group_write.go) and commits.
//
// Locks are taken run first, then streams, each set in id order and in one
// statement (ORDER BY id FOR UPDATE locks rows in that order), so groups in
// any number of processes cannot deadlock one another. A run is locked FOR
// UPDATE both for an Advance and for an append by a writer to one of its
// streams: the append must read the run's fences after any Advance that
// raises them has committed.
type group struct {
	s     *Store
	ops   []op
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
	hooks     map[string]*gHook // locked, by token (an Advance's delivery)
	runEvents []runEventRow     // run events set (event_set events)
	anonDone  map[anonKey]bool  // a retried anonymous append's batch exists

	inserted map[string]bool              // runs this group created
	existing map[string]*store.Run        // the runs create ops name, after the inserts
	opened   map[string]*store.StreamInfo // the streams open ops name, after the inserts
	created  map[string]bool              // the paths of those this group inserted
	creates  bool                         // the first round trip wrote rows
	early    bool                         // and committed them: the group is done

	w *worldGroup // the World's state, if an op needs it (world.go)

	events  eventRows
	batches batchRows
	wrote   []head     // the streams that got records, with their new heads
	tails   []tail.Add // records of followed streams, for the tail cache
	// runWakes are the runs whose watchers wake after the commit: a
	// stream of theirs created, a run event set, their end
	// (store.RunWatcher).
	runWakes []string
	begins   []int64             // streams created for readers waiting: tail.Cache.Begin
	watched  []*store.StreamInfo // those streams, for CreatedStream
}

var _ apply.Tx = (*group)(nil)

// testHookLocked, if set (by tests only), runs after a group's first round
// trip when it holds run locks.
var testHookLocked func()

type fenceKey struct{ run, writer string }
type prodKey struct {
	stream int64
	id     string
}
type anonKey struct{ stream, token int64 }

// gRun is a locked run: its lease, and the change an Advance makes.
type gRun struct {
	apply.Run
	dbToken int64 // the token of the last Advance that committed on it
	change  *apply.RunChange
	// recorded: an Advance of this run is in the group, whose token the row
	// then gets; a run only delivered to keeps its own.
	recorded bool
}

// gHook is a locked hook; dirty: its row must be written.
type gHook struct {
	h     *apply.Hook
	dirty bool
}

// gStream is a locked stream; dirty: its row must be written.
type gStream struct {
	apply.Stream
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
	st    stream.ProducerState
	dirty bool
}

type gKey struct {
	k     *apply.Key
	dirty bool
}

func newGroup(s *Store, ops []op) *group {
	return &group{
		s: s, ops: ops, token: newToken(),
		runs: map[string]*gRun{}, streams: map[int64]*gStream{}, byRun: map[string][]*gStream{},
		writers: map[writerKey]*gWriter{}, fences: map[fenceKey]*gFence{},
		producers: map[prodKey]*gProducer{}, keys: map[prodKey]*gKey{}, anonDone: map[anonKey]bool{}, hooks: map[string]*gHook{},
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
	if testHookLocked != nil && len(g.runs) > 0 {
		testHookLocked() // the process tests freeze here, holding run locks
	}
	if err := g.loadWriters(); err != nil {
		return err
	}
	for _, o := range g.ops {
		if b := o.base(); b.err == nil {
			b.err = o.apply(g)
			var ab *abortGroup
			if errors.As(b.err, &ab) {
				return b.err
			}
		}
	}
	if g.early {
		for _, o := range g.ops {
			ob := o.base()
			ob.committing, ob.token = true, g.token
		}
		return nil
	}
	b := g.writes()
	if b == nil {
		g.putWriters(false)
		return nil // read only: release rolls back
	}
	for _, o := range g.ops {
		ob := o.base()
		ob.committing, ob.token = true, g.token
	}
	if err := x.commit(ctx, b); err != nil {
		return err
	}
	g.putWriters(true)
	return nil
}

// The group's apply.Tx: loads find what the first round trip read (an op's
// plan lists it, from apply's Reads), saves mark it to be written.

// Stream returns a locked stream.
func (g *group) Stream(id int64) (*apply.Stream, error) {
	if st := g.streams[id]; st != nil {
		return &st.Stream, nil
	}
	return nil, fmt.Errorf("stream %d: %w", id, store.ErrNotFound)
}

// Writer returns a writer read for the group, nil if it has no row.
func (g *group) Writer(st *apply.Stream, id string) (*stream.Writer, error) {
	if gw := g.writers[writerKey{st.ID, id}]; gw != nil {
		return gw.w, nil
	}
	return nil, nil
}

// Fence returns a fence read for the group (or raised by it), 0 if none.
func (g *group) Fence(run, writer string) (int64, error) {
	if f := g.fences[fenceKey{run, writer}]; f != nil {
		return f.attempt, nil
	}
	return 0, nil
}

// Producer returns a producer read for the group (or saved by it).
func (g *group) Producer(st *apply.Stream, id string) (*stream.ProducerState, error) {
	if p := g.producers[prodKey{st.ID, id}]; p != nil {
		ps := p.st
		return &ps, nil
	}
	return nil, nil
}

// Key returns an idempotency key read for the group (or saved by it).
func (g *group) Key(st *apply.Stream, key string) (*apply.Key, error) {
	if k := g.keys[prodKey{st.ID, key}]; k != nil {
		return k.k, nil
	}
	return nil, nil
}

// Run returns a locked run.
func (g *group) Run(id string) (*apply.Run, error) {
	if r := g.runs[id]; r != nil {
		return &r.Run, nil
	}
	return nil, fmt.Errorf("run %q: %w", id, store.ErrNotFound)
}

// WriterStreams returns the locked streams of run that writer wrote on.
func (g *group) WriterStreams(run, writer string) ([]*apply.Stream, error) {
	var out []*apply.Stream
	for _, st := range g.byRun[run] {
		if g.writers[writerKey{st.ID, writer}] != nil {
			out = append(out, &st.Stream)
		}
	}
	return out, nil
}

// RunStreams returns the locked streams of run not closed.
func (g *group) RunStreams(run string) ([]*apply.Stream, error) {
	var out []*apply.Stream
	for _, st := range g.byRun[run] {
		if !st.Head.Closed {
			out = append(out, &st.Stream)
		}
	}
	return out, nil
}

// AddRecords queues one batch. An anonymous batch carries the group's token:
// a retried anonymous append finds it (anonDone) if the group committed.
func (g *group) AddRecords(st *apply.Stream, recs []stream.Record) error {
	if len(recs) == 0 {
		return nil
	}
	token := int64(0)
	if recs[0].Writer == "" {
		token = g.token
	}
	g.batches.add(st.ID, recs, token)
	g.streams[st.ID].dirty = true
	if g.s.hub.Has(st.ID) || g.s.tail.Has(st.ID) || slices.Contains(g.begins, st.ID) {
		g.tails = append(g.tails, tail.Add{ID: st.ID, Recs: tail.CopyRecords(recs)})
	}
	return nil
}

// SaveStream marks st's row to be written.
func (g *group) SaveStream(st *apply.Stream) error {
	g.streams[st.ID].dirty = true
	return nil
}

// SaveWriter marks w's row to be written.
func (g *group) SaveWriter(st *apply.Stream, w *stream.Writer, created bool) error {
	k := writerKey{st.ID, w.ID}
	gw := g.writers[k]
	if gw == nil {
		gw = &gWriter{w: w}
		g.writers[k] = gw
	}
	gw.w, gw.dirty = w, true
	return nil
}

// SaveFence raises a fence.
func (g *group) SaveFence(run, writer string, attempt int64) error {
	g.fences[fenceKey{run, writer}] = &gFence{attempt: attempt, dirty: true}
	return nil
}

// SaveProducer saves a producer's state.
func (g *group) SaveProducer(st *apply.Stream, id string, ps stream.ProducerState) error {
	g.producers[prodKey{st.ID, id}] = &gProducer{st: ps, dirty: true}
	return nil
}

// SaveKey saves an idempotency key.
func (g *group) SaveKey(st *apply.Stream, key string, k *apply.Key) error {
	g.keys[prodKey{st.ID, key}] = &gKey{k: k, dirty: true}
	return nil
}

// SaveRunEvent queues a run event's latest value (the later of two in
// one group wins: their seqs order them).
func (g *group) SaveRunEvent(run *apply.Run, ev *store.Event) error {
	g.runEvents = append(g.runEvents, runEventRow{run: run.ID, ev: ev})
	// Its waiters (GET /v1/runs/{id}/events/{key}?wait=) wake, here and
	// in the other processes.
	if n := len(g.runWakes); n == 0 || g.runWakes[n-1] != run.ID {
		g.runWakes = append(g.runWakes, run.ID)
	}
	return nil
}

// runEventRow is a run event a group saves.
type runEventRow struct {
	run string
	ev  *store.Event
}

// AddEvents queues events.
func (g *group) AddEvents(run *apply.Run, evs []store.Event) error {
	for i := range evs {
		g.events.add(run.ID, &evs[i])
	}
	return nil
}

// SaveRun records the change of a run, to be written with the group's
// token (a retried Advance finds it: see advanceOp).
func (g *group) SaveRun(run *apply.Run, c *apply.RunChange) error {
	r := g.runs[run.ID]
	if old := r.change; old != nil {
		// Two changes of one run in one group (two Advances, or an Advance and
		// a delivery): the row ends as if they had been written one after
		// the other.
		if c.Status == "" {
			c.Status, c.Output, c.Error = old.Status, old.Output, old.Error
		}
		if !c.Release && old.Release {
			c.Release, c.WakeAt, c.Awaits = true, old.WakeAt, old.Awaits
			c.Limiters, c.Lined, c.LinePriority = old.Limiters, old.Lined, old.LinePriority
		}
		c.Ended = c.Ended || old.Ended
		c.Wake = c.Wake || old.Wake && !c.Release
	}
	if c.Wake && c.Release {
		c.WakeAt = c.Now // a delivery came after the release: claimable now
	}
	r.change = c
	return nil
}

// The group's apply.HookTx, for an Advance's delivery: its hook was locked
// in the first round trip; the keys of deliveries are never loaded (a
// Advance's delivery has none).

var _ apply.HookTx = (*group)(nil)

// Hook returns a locked hook, nil if none.
func (g *group) Hook(token string) (*apply.Hook, error) {
	if h := g.hooks[token]; h != nil {
		return h.h, nil
	}
	return nil, nil
}

// RunInbox is not planned: an Advance's delivery is a child's end
// (OnlyFirst), which no inbox counts.
func (g *group) RunInbox(run string) (int64, int64, error) {
	return 0, 0, fmt.Errorf("pgstore: a group reads no inbox (run %q)", run)
}

// AddInbox is not planned, as RunInbox.
func (g *group) AddInbox(run string, n, bytes int64) error {
	return fmt.Errorf("pgstore: a group counts no inbox (run %q)", run)
}

// HookKey is not planned: an Advance's delivery has no idempotency key.
func (g *group) HookKey(token, key string) (*apply.Key, error) {
	return nil, fmt.Errorf("pgstore: a group reads no hook keys (hook %q, key %q)", token, key)
}

// SaveHook marks a hook's row to be written. A group never creates one.
func (g *group) SaveHook(h *apply.Hook, fresh bool) error {
	gh := g.hooks[h.Token]
	if gh == nil || fresh {
		return fmt.Errorf("pgstore: a group saves only the hooks it locked (%q)", h.Token)
	}
	gh.h, gh.dirty = h, true
	return nil
}

// SaveHookKey is never called: an Advance's delivery has no idempotency key.
func (g *group) SaveHookKey(token, key string, k *apply.Key) error {
	return fmt.Errorf("pgstore: a group saves no hook keys (hook %q, key %q)", token, key)
}
