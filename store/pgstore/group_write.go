package pgstore

import (
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
	"github.com/weirhq/weir/stream"
)

// writes is the group's second round trip: every change, set-wise, one
// statement per table, and COMMIT; nil if the group changed nothing.
func (g *group) writes() *pgx.Batch {
	q := g.s.q
	b := &pgx.Batch{}
	if g.w != nil {
		for _, st := range g.w.stmts {
			b.Queue(st.sql, st.args...)
		}
	}
	if len(g.events.run) > 0 {
		b.Queue(q.insertEventsMany, g.events.args()...)
	}
	if len(g.runEvents) > 0 {
		// One row per (run, key): the latest of the group's.
		latest := map[[2]string]*store.Event{}
		for _, r := range g.runEvents {
			k := [2]string{r.run, r.ev.Name}
			if e := latest[k]; e == nil || e.Seq < r.ev.Seq {
				latest[k] = r.ev
			}
		}
		var runs, keys []string
		var values [][]byte
		var seqs, ats []int64
		for k, e := range latest {
			runs, keys, values = append(runs, k[0]), append(keys, k[1]), append(values, e.Data)
			seqs, ats = append(seqs, e.Seq), append(ats, sqlrow.Nanos(e.At))
		}
		b.Queue(q.putRunEvents, runs, keys, values, seqs, ats)
	}
	var fences fenceRows
	for k, f := range g.fences {
		if f.dirty {
			fences.add(k, f.attempt)
		}
	}
	if len(fences.run) > 0 {
		b.Queue(q.putFences, fences.args()...)
	}
	if len(g.batches.stream) > 0 {
		b.Queue(q.insertBatchesMany, g.batches.args()...)
		seen := map[int64]bool{}
		for _, id := range g.batches.stream {
			if !seen[id] {
				seen[id] = true
				h := g.streams[id].Head
				g.wrote = append(g.wrote, head{id: id, next: h.NextOffset, closed: h.Closed, known: true})
			}
		}
	}
	var streams streamRows
	for _, st := range g.sortedStreams() {
		if st.dirty {
			streams.add(st)
		}
	}
	if len(streams.id) > 0 {
		b.Queue(q.setStreams, streams.args()...)
	}
	var writers writerRows
	for k, gw := range g.writers {
		if gw.dirty {
			writers.add(k, gw.w)
		}
	}
	if len(writers.stream) > 0 {
		b.Queue(q.putWriters, append(writers.args(), g.token)...)
	}
	var producers producerRows
	for k, p := range g.producers {
		if p.dirty {
			producers.add(k, p.st)
		}
	}
	if len(producers.stream) > 0 {
		b.Queue(q.putProducers, producers.args()...)
	}
	var keys keyRows
	for k, gk := range g.keys {
		if gk.dirty {
			keys.add(k, gk)
		}
	}
	if n := int64(len(keys.stream)); n > 0 {
		b.Queue(q.putKeys, keys.args()...)
		if saved := g.s.keysSaved.Add(n); saved/apply.KeyPurgeEvery != (saved-n)/apply.KeyPurgeEvery {
			b.Queue(q.purgeKeys, sqlrow.Nanos(g.s.cfg.Now()))
		}
	}
	for _, gh := range g.hooks {
		if gh.dirty {
			h := gh.h
			b.Queue(q.setHook, h.Token, h.Disposed, h.Received)
		}
	}
	var runs runRows
	for _, r := range g.runs {
		if r.change != nil {
			runs.add(r)
			if r.change.Ended {
				g.runWakes = append(g.runWakes, r.ID)
			}
		}
	}
	if len(runs.id) > 0 {
		b.Queue(q.updateRuns, append(runs.args(), g.token, runs.awaits, runs.limiters, runs.linePrio)...)
	}
	if b.Len() == 0 && !g.creates {
		return nil
	}
	b.Queue("COMMIT")
	return b
}

func (g *group) sortedStreams() []*gStream {
	out := make([]*gStream, 0, len(g.streams))
	for _, st := range g.streams {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b *gStream) int { return int(a.ID - b.ID) })
	return out
}

// The rows of each table a group writes, as columns: unnest takes them.

type eventRows struct {
	run, typ, name, err []string
	seq, op, attempt    []int64
	data                [][]byte
	final               []bool
	at, wake            []int64
}

func (e *eventRows) add(run string, ev *store.Event) {
	e.run, e.seq = append(e.run, run), append(e.seq, ev.Seq)
	e.typ, e.op, e.name, e.attempt = append(e.typ, string(ev.Type)), append(e.op, ev.Op), append(e.name, ev.Name), append(e.attempt, ev.Attempt)
	e.data, e.err, e.final = append(e.data, ev.Data), append(e.err, ev.Error), append(e.final, ev.Final)
	e.at, e.wake = append(e.at, sqlrow.Nanos(ev.At)), append(e.wake, sqlrow.Nanos(ev.WakeAt))
}

func (e *eventRows) args() []any {
	return []any{e.run, e.seq, e.typ, e.op, e.name, e.attempt, e.data, e.err, e.final, e.at, e.wake}
}

// batchRows are batches to insert: one per rules call.
type batchRows struct {
	stream, last, first, token, bytes []int64
	writer                            []string
	data                              [][]byte
}

func (b *batchRows) add(id int64, recs []stream.Record, token int64) {
	b.stream, b.first, b.last = append(b.stream, id), append(b.first, recs[0].Offset), append(b.last, recs[len(recs)-1].Offset)
	b.writer, b.token = append(b.writer, recs[0].Writer), append(b.token, token)
	b.data, b.bytes = append(b.data, stream.EncodeBatch(nil, recs)), append(b.bytes, dataBytes(recs))
}

// dataBytes is the data bytes of recs: what a read page counts.
func dataBytes(recs []stream.Record) int64 {
	n := 0
	for i := range recs {
		n += len(recs[i].Data)
	}
	return int64(n)
}

func (b *batchRows) args() []any {
	return []any{b.stream, b.last, b.first, b.writer, b.data, b.token, b.bytes}
}

type fenceRows struct {
	run, writer []string
	attempt     []int64
}

func (f *fenceRows) add(k fenceKey, attempt int64) {
	f.run, f.writer, f.attempt = append(f.run, k.run), append(f.writer, k.writer), append(f.attempt, attempt)
}

func (f *fenceRows) args() []any { return []any{f.run, f.writer, f.attempt} }

type streamRows struct {
	id, next, access, cbEpoch, cbSeq []int64
	bytes                            []int64
	closed                           []bool
	closedBy                         []*string
	seq                              []string
}

func (s *streamRows) add(st *gStream) {
	var cb *string
	var e, q int64
	if p := st.ClosedBy; p != nil {
		id := p.ID
		cb, e, q = &id, p.Epoch, p.Seq
	}
	s.id, s.next, s.closed, s.access = append(s.id, st.ID), append(s.next, st.Head.NextOffset), append(s.closed, st.Head.Closed), append(s.access, sqlrow.Nanos(st.LastAccess))
	s.closedBy, s.cbEpoch, s.cbSeq, s.seq = append(s.closedBy, cb), append(s.cbEpoch, e), append(s.cbSeq, q), append(s.seq, st.StreamSeq)
	s.bytes = append(s.bytes, st.Bytes)
}

func (s *streamRows) args() []any {
	return []any{s.id, s.next, s.closed, s.access, s.closedBy, s.cbEpoch, s.cbSeq, s.seq, s.bytes}
}

type writerRows struct {
	stream, attempt, next []int64
	writer                []string
	diverged              []bool
	status                []int16
}

func (r *writerRows) add(k writerKey, w *stream.Writer) {
	r.stream, r.writer, r.attempt, r.next = append(r.stream, k.stream), append(r.writer, k.writer), append(r.attempt, w.Attempt), append(r.next, w.Next)
	r.diverged, r.status = append(r.diverged, w.Diverged), append(r.status, int16(w.Status))
}

func (r *writerRows) args() []any {
	return []any{r.stream, r.writer, r.attempt, r.next, r.diverged, r.status}
}

type producerRows struct {
	stream, epoch, lastSeq []int64
	id                     []string
}

func (r *producerRows) add(k prodKey, ps stream.ProducerState) {
	r.stream, r.id, r.epoch, r.lastSeq = append(r.stream, k.stream), append(r.id, k.id), append(r.epoch, ps.Epoch), append(r.lastSeq, ps.LastSeq)
}

func (r *producerRows) args() []any { return []any{r.stream, r.id, r.epoch, r.lastSeq} }

type keyRows struct {
	stream, expires []int64
	key             []string
	digest, result  [][]byte
}

func (r *keyRows) add(k prodKey, gk *gKey) {
	r.stream, r.key, r.digest = append(r.stream, k.stream), append(r.key, k.id), append(r.digest, gk.k.Digest)
	r.result, r.expires = append(r.result, gk.k.Result), append(r.expires, sqlrow.Nanos(gk.k.ExpiresAt))
}

func (r *keyRows) args() []any { return []any{r.stream, r.key, r.digest, r.result, r.expires} }

type runRows struct {
	id, status, errMsg        []string
	setStatus, release, ended []bool
	output                    [][]byte
	wake, now, lastEvent      []int64
	wakeNow, recorded         []bool
	awaits, limiters          []*string
	linePrio                  []*int64
}

func (r *runRows) add(gr *gRun) {
	c := gr.change
	r.id, r.setStatus, r.status = append(r.id, gr.ID), append(r.setStatus, c.Status != ""), append(r.status, string(c.Status))
	r.output, r.errMsg = append(r.output, c.Output), append(r.errMsg, c.Error)
	r.release, r.wake, r.now = append(r.release, c.Release), append(r.wake, sqlrow.Nanos(c.WakeAt)), append(r.now, sqlrow.Nanos(c.Now))
	r.ended, r.lastEvent = append(r.ended, c.Ended), append(r.lastEvent, gr.LastEvent)
	r.wakeNow, r.recorded = append(r.wakeNow, c.Wake && !c.Release), append(r.recorded, gr.recorded)
	var a *string
	if s, ok := sqlrow.EncodeAwaits(c.Awaits).(string); ok {
		a = &s
	}
	r.awaits = append(r.awaits, a)
	var l *string
	if s, ok := sqlrow.EncodeLimiters(c.Limiters).(string); ok && c.Release {
		l = &s
	}
	r.limiters = append(r.limiters, l)
	var lp *int64
	if v, ok := sqlrow.LinePriority(c.Lined && c.Release, c.LinePriority).(int64); ok {
		lp = &v
	}
	r.linePrio = append(r.linePrio, lp)
}

func (r *runRows) args() []any {
	return []any{r.id, r.setStatus, r.status, r.output, r.errMsg, r.release, r.wake, r.now, r.ended, r.lastEvent, r.wakeNow, r.recorded}
}
