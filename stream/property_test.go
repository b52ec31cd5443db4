package stream_test

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/weirhq/weir/stream"
)

// harness drives the rules through a tstream and checks the invariants of
// semantics.md after every operation and at the end of a history. It keeps
// a model built only from what the rules replied (acks, results), never from
// their internal state, so a wrong reply shows up as a broken invariant.
type harness struct {
	tb    testing.TB
	name  string // names the history in failures, e.g. its seed
	m     *tstream
	trace []string

	acked     map[wkey]map[int64]int64 // (writer, attempt) -> seq -> offset acked to that attempt
	autoAcked map[int64]bool           // offsets acked to attempt-0 appends (committed at append)
	committed map[string]int64         // writer -> the attempt that committed
	aborted   map[string]bool          // writers aborted for good

	filter    stream.Committed // fed as the log grows
	view      []stream.Record  // what filter released
	resume    []int64          // every NextOffset filter reported
	voids     stream.Voids     // fed as the log grows
	voided    map[int64]bool   // offsets voids reported
	voidsBug  *bool            // a Voids.Push panic was already reported
	lastResum int64
}

type wkey struct {
	w string
	a int64
}

func newHarness(tb testing.TB, voidsBug *bool) *harness {
	return &harness{
		tb: tb, m: newTStream(),
		acked: map[wkey]map[int64]int64{}, autoAcked: map[int64]bool{},
		committed: map[string]int64{}, aborted: map[string]bool{},
		voided: map[int64]bool{}, voidsBug: voidsBug,
	}
}

func (h *harness) fatalf(format string, args ...any) {
	h.tb.Helper()
	h.tb.Fatalf("%s%s\nhistory:\n  %s\nlog:\n  %s", h.name, fmt.Sprintf(format, args...),
		strings.Join(h.trace, "\n  "), strings.Join(recStrings(h.m.log), "\n  "))
}

// apply runs one operation and checks everything one operation can break.
func (h *harness) apply(o rop) result {
	h.tb.Helper()
	m := h.m
	headBefore := m.h
	wsBefore := map[string]*stream.Writer{}
	for id, w := range m.ws {
		wsBefore[id] = cloneWriter(w)
	}
	var before *stream.Writer // the target writer before the call
	if o.w != "" {
		before = cloneWriter(m.ws[o.w])
	}
	logLen := len(m.log)
	if o.op == "append" {
		h.probeLimit(o)
	}
	r := m.do(o)
	line := o.String()
	if r.err != nil {
		line += " -> " + r.err.Error()
	} else if o.op == "append" {
		line += fmt.Sprintf(" -> %v", ackStrings(r.acks))
	} else {
		line += fmt.Sprintf(" -> %v %v", r.res, recStrings(r.recs))
	}
	h.trace = append(h.trace, line)

	// Invariant 6: a zombie adds nothing; on an open stream it is fenced.
	var attemptBefore int64
	if before != nil {
		attemptBefore = before.Attempt
	}
	if o.op == "append" && o.w != "" && (o.a < attemptBefore || o.a < o.fence) {
		if len(r.recs) > 0 {
			h.fatalf("zombie %v wrote %v", o, r.recs)
		}
		if !headBefore.Closed {
			var fe *stream.FencedError
			if !errors.As(r.err, &fe) {
				h.fatalf("zombie %v: error %v, want a FencedError", o, r.err)
			}
			if want := max(attemptBefore, o.fence); fe.Current != want || fe.Attempt != o.a {
				h.fatalf("zombie %v: %+v, want Current %d", o, fe, want)
			}
		}
	}

	if r.err != nil {
		// Invariant 4: all or nothing.
		if r.acks != nil || r.recs != nil || r.res != 0 {
			h.fatalf("%v failed (%v) but returned acks %v res %v recs %v", o, r.err, r.acks, r.res, r.recs)
		}
		if m.h != headBefore || len(m.log) != logLen {
			h.fatalf("%v failed (%v) but changed the head %+v -> %+v", o, r.err, headBefore, m.h)
		}
		if len(m.ws) != len(wsBefore) {
			h.fatalf("%v failed but a writer was stored", o)
		}
		for id, w := range m.ws {
			if !equalWriter(w, wsBefore[id]) {
				h.fatalf("%v failed (%v) but changed writer %q:\n before %+v\n after  %+v", o, r.err, id, wsBefore[id], w)
			}
		}
		if r.w != nil && before == nil && !equalWriter(r.w, &stream.Writer{ID: o.w}) {
			h.fatalf("%v failed (%v) but changed the new writer: %+v", o, r.err, r.w)
		}
		return r
	}

	checkRecords(h.tb, headBefore.NextOffset, r.recs, m.h)
	switch o.op {
	case "append":
		h.checkAcks(o, r, headBefore, before)
	case "commit", "abort":
		if r.res == stream.Already {
			if len(r.recs) > 0 {
				h.fatalf("%v: Already but wrote %v", o, r.recs)
			}
			break
		}
		if r.res != stream.Done {
			h.fatalf("%v: result %v", o, r.res)
		}
		w := m.ws[o.w]
		if o.op == "abort" {
			h.aborted[o.w] = true
			if len(r.recs) != 1 || r.recs[0].Kind != stream.KindAbort || r.recs[0].FromSeq() != 0 {
				h.fatalf("%v wrote %v, want one abort from 0", o, r.recs)
			}
			break
		}
		h.committed[o.w] = o.a
		// What the committing attempt was told it wrote is what it commits.
		acked := h.acked[wkey{o.w, o.a}]
		if int64(len(acked)) != w.Next {
			h.fatalf("%v: commits %d chunks, attempt %d was acked %d", o, w.Next, o.a, len(acked))
		}
		last := r.recs[len(r.recs)-1]
		if last.Kind != stream.KindCommit || last.Count() != int64(len(acked)) || last.Attempt != o.a {
			h.fatalf("%v: last record %v, want commit of %d", o, last, len(acked))
		}
	case "close":
		if headBefore.Closed != (r.res == stream.Already) || !m.h.Closed {
			h.fatalf("close on closed=%v: %v", headBefore.Closed, r.res)
		}
	}
	h.feed(r.recs)
	return r
}

// probeLimit checks the byte limit on copies of the stream: with the limit
// exactly what the request adds, it is answered as without a limit; one byte
// less, it is refused with a FullError (unless it fails anyway, with the same
// error) and changes nothing; a request that adds nothing (retransmits,
// adoptions) is answered however full the stream is.
func (h *harness) probeLimit(o rop) {
	h.tb.Helper()
	m := h.m
	held := stream.DataBytes(m.log)
	chunks := make([][]byte, len(o.chunks))
	for i, c := range o.chunks {
		chunks[i] = []byte(c)
	}
	run := func(limit int64) (stream.Head, *stream.Writer, []stream.Ack, []stream.Record, error) {
		hd := m.h
		w, _ := m.writerFor(o)
		w = cloneWriter(w)
		req := &stream.AppendRequest{Attempt: o.a, FirstSeq: o.s, Chunks: chunks, Fence: o.fence, Late: o.late, MaxBytes: limit, Bytes: held}
		acks, recs, err := stream.Append(&hd, w, req)
		return hd, w, acks, recs, err
	}
	h0, w0, acks0, recs0, err0 := run(0)
	added := stream.DataBytes(recs0)
	limits := []int64{held + added}
	if added == 0 {
		limits = append(limits, max(held, 1)) // full, or as full as can be
	}
	for _, limit := range limits {
		h1, w1, acks1, recs1, err1 := run(limit)
		if fmt.Sprint(err1) != fmt.Sprint(err0) || h1 != h0 || !equalWriter(w1, w0) ||
			!slices.Equal(acks1, acks0) || !slices.EqualFunc(recs1, recs0, sameRecord) {
			h.fatalf("%v with limit %d (holds %d, adds %d): %v %v %v, without a limit %v %v %v",
				o, limit, held, added, err1, acks1, recs1, err0, acks0, recs0)
		}
	}
	if err0 != nil || added == 0 || held+added-1 == 0 { // a limit of 0 is none
		return
	}
	hd, w1, acks1, recs1, err1 := run(held + added - 1)
	var fe *stream.FullError
	if !errors.As(err1, &fe) || !errors.Is(err1, stream.ErrFull) || fe.Holds != held || fe.Adding != added || fe.Limit != held+added-1 {
		h.fatalf("%v one byte past the limit (holds %d, adds %d): %v, want a FullError", o, held, added, err1)
	}
	w, _ := m.writerFor(o)
	if acks1 != nil || recs1 != nil || hd != m.h || !equalWriter(w1, w) {
		h.fatalf("%v refused as full but changed the stream: %v %v", o, acks1, recs1)
	}
}

func equalWriter(a, b *stream.Writer) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ID == b.ID && a.Attempt == b.Attempt && a.Next == b.Next && a.Diverged == b.Diverged &&
		a.Status == b.Status && slices.Equal(a.Live, b.Live)
}

func (h *harness) checkAcks(o rop, r result, headBefore stream.Head, before *stream.Writer) {
	h.tb.Helper()
	if len(r.acks) != len(o.chunks) {
		h.fatalf("%v: %d acks for %d chunks", o, len(r.acks), len(o.chunks))
	}
	if headBefore.Closed && len(r.recs) > 0 {
		h.fatalf("%v on a closed stream wrote %v", o, r.recs)
	}
	log := h.m.log
	for i, ack := range r.acks {
		if ack.Offset < 0 || ack.Offset >= int64(len(log)) {
			h.fatalf("%v: ack %d at offset %d outside the log", o, i, ack.Offset)
		}
		rec := log[ack.Offset]
		d := stream.Sum([]byte(o.chunks[i]))
		if rec.Kind != stream.KindData || rec.Digest != d || string(rec.Data) != o.chunks[i] {
			h.fatalf("%v: chunk %d acked at %d, which holds %v", o, i, ack.Offset, rec)
		}
		fresh := ack.Offset >= headBefore.NextOffset
		if fresh != (ack.Outcome == stream.Appended) {
			h.fatalf("%v: chunk %d %v at offset %d (head was %d)", o, i, ack.Outcome, ack.Offset, headBefore.NextOffset)
		}
		if o.w == "" {
			if ack.Outcome != stream.Appended || rec.Writer != "" || rec.Attempt != 0 {
				h.fatalf("%v: anonymous chunk %d: %v %v", o, i, ack.Outcome, rec)
			}
			h.autoAcked[ack.Offset] = true
			continue
		}
		q := o.s + int64(i)
		if rec.Writer != o.w || rec.Seq != q {
			h.fatalf("%v: chunk %d (seq %d) acked at %v", o, i, q, rec)
		}
		switch ack.Outcome {
		case stream.Appended:
			if rec.Attempt != o.a {
				h.fatalf("%v: appended %v", o, rec)
			}
		case stream.Adopted:
			if rec.Attempt >= o.a || headBefore.Closed {
				h.fatalf("%v: adopted %v", o, rec)
			}
		case stream.Retransmit:
		default:
			h.fatalf("%v: outcome %v", o, ack.Outcome)
		}
		if rec.Attempt == 0 {
			if ack.Outcome == stream.Retransmit && !h.autoAcked[ack.Offset] {
				h.fatalf("%v: chunk %d is a retransmit of %v, never acked", o, i, rec)
			}
			h.autoAcked[ack.Offset] = true
			if o.a != 0 && !headBefore.Closed {
				h.fatalf("%v: attempt %d acked an attempt-0 record %v", o, o.a, rec)
			}
			continue
		}
		// A closed stream acknowledges retransmits whatever the attempt
		// (see the report): only keep what the writer's current attempt got.
		if headBefore.Closed && (before == nil || o.a != before.Attempt) {
			continue
		}
		k := wkey{o.w, o.a}
		if h.acked[k] == nil {
			h.acked[k] = map[int64]int64{}
		}
		if prev, ok := h.acked[k][q]; ok && prev != ack.Offset {
			h.fatalf("%v: seq %d acked at %d, earlier at %d", o, q, ack.Offset, prev)
		}
		// A retransmit is a seq this attempt was acked before; an adoption
		// (and an append) one it was not.
		if _, ok := h.acked[k][q]; ok != (ack.Outcome == stream.Retransmit) {
			h.fatalf("%v: seq %d %v, acked to attempt %d before: %v", o, q, ack.Outcome, o.a, ok)
		}
		h.acked[k][q] = ack.Offset
	}
}

// feed pushes new records to the incremental committed filter and voids
// tracker and checks the last stable offset.
func (h *harness) feed(recs []stream.Record) {
	h.tb.Helper()
	for i := range recs {
		r := &recs[i]
		h.filter.Push(r, func(c *stream.Record) {
			cp := *c
			h.view = append(h.view, cp)
		})
		n := h.filter.NextOffset()
		if n < h.lastResum {
			h.fatalf("Committed.NextOffset went back from %d to %d", h.lastResum, n)
		}
		h.lastResum = n
		h.resume = append(h.resume, n)
		for _, off := range h.pushVoids(r) {
			v := h.m.log[off]
			if v.Kind != stream.KindData || v.Attempt == 0 || h.voided[off] || off >= r.Offset {
				h.fatalf("%v voided offset %d: %v (voided before: %v)", r, off, v, h.voided[off])
			}
			if r.Kind == stream.KindAbort && (v.Writer != r.Writer || v.Seq < r.FromSeq()) {
				h.fatalf("%v voided %v", r, v)
			}
			h.voided[off] = true
		}
	}
	// The last stable offset: the first live record of a writer still open.
	want := h.m.h.NextOffset
	pending := 0
	if !h.m.h.Closed {
		for _, w := range h.m.ws {
			if w.Status != stream.WriterOpen {
				continue
			}
			for _, e := range w.Live {
				if h.m.log[e.Offset].Attempt > 0 {
					want = min(want, e.Offset)
					pending++
				}
			}
		}
	}
	if got := h.filter.NextOffset(); got != want {
		h.fatalf("Committed.NextOffset = %d, want the last stable offset %d", got, want)
	}
	if got := h.filter.Pending(); got != pending {
		h.fatalf("Committed.Pending = %d, want %d", got, pending)
	}
	if len(h.view) > 0 && h.view[len(h.view)-1].Offset >= want {
		h.fatalf("committed view released %v past the last stable offset %d", h.view[len(h.view)-1], want)
	}
}

// pushVoids is Voids.Push that survives the nil-map panic of an abort seen
// before any attempted data (TestVoidsAbortFirst), reporting it once.
func (h *harness) pushVoids(r *stream.Record) (out []int64) {
	defer func() {
		if p := recover(); p != nil {
			if !*h.voidsBug {
				*h.voidsBug = true
				h.tb.Errorf("Voids.Push(%v) panicked: %v (see TestVoidsAbortFirst)", r, p)
			}
			out = nil
		}
	}()
	return h.voids.Push(r)
}

// finished checks the invariants that hold once every writer finished.
func (h *harness) finished() {
	h.tb.Helper()
	m := h.m
	if !m.h.Closed {
		for _, w := range m.ws {
			if w.Status == stream.WriterOpen && (w.Attempt > 0 || len(w.Live) == 0) && w.Next+int64(len(w.Live)) > 0 {
				h.fatalf("writer %q still open", w.ID)
			}
		}
	}
	// Invariant 3: dense offsets.
	for i, r := range m.log {
		if r.Offset != int64(i) {
			h.fatalf("log[%d] has offset %d", i, r.Offset)
		}
	}
	// The view built as the log grew is the view of the whole log.
	full := committedView(m.log, 0)
	if !slices.EqualFunc(full, h.view, sameRecord) {
		h.fatalf("committed view built incrementally\n %v\ndiffers from the one-pass view\n %v", h.view, full)
	}
	if len(full) > 0 && full[len(full)-1].Offset >= m.h.NextOffset {
		h.fatalf("view past the log")
	}
	if m.h.Closed && (len(full) == 0 || full[len(full)-1].Kind != stream.KindClose) {
		h.fatalf("committed view of a closed stream does not end with close: %v", full)
	}
	if got := h.filter.NextOffset(); got != m.h.NextOffset {
		h.fatalf("every writer finished, yet NextOffset %d < %d", got, m.h.NextOffset)
	}

	// Invariants 1 and 3 on the committed view.
	type ws struct {
		w   string
		seq int64
	}
	seen := map[ws]bool{}
	byWriter := map[string]map[int64]int64{} // writer -> seq -> offset
	var data []int64
	inView := map[int64]bool{}
	for i, r := range full {
		if i > 0 && r.Offset <= full[i-1].Offset {
			h.fatalf("committed view not strictly increasing at %v", r)
		}
		if r.Kind == stream.KindClose {
			if i != len(full)-1 {
				h.fatalf("close is not last in the committed view")
			}
			continue
		}
		if r.Kind != stream.KindData {
			h.fatalf("committed view holds %v", r)
		}
		if h.voided[r.Offset] {
			h.fatalf("committed view holds voided %v", r)
		}
		if !sameRecord(r, m.log[r.Offset]) {
			h.fatalf("committed view holds %v, the log %v", r, m.log[r.Offset])
		}
		data = append(data, r.Offset)
		inView[r.Offset] = true
		if r.Writer == "" {
			if !h.autoAcked[r.Offset] {
				h.fatalf("committed view holds unacked anonymous %v", r)
			}
			continue
		}
		k := ws{r.Writer, r.Seq}
		if seen[k] {
			h.fatalf("committed view holds (%s, seq %d) twice", r.Writer, r.Seq)
		}
		seen[k] = true
		if byWriter[r.Writer] == nil {
			byWriter[r.Writer] = map[int64]int64{}
		}
		byWriter[r.Writer][r.Seq] = r.Offset
	}
	// Invariant 2: every chunk acked to an attempt that committed is in the
	// view at its acked offset, and nothing else of that writer is.
	for id := range m.ws {
		got := byWriter[id]
		a, ok := h.committed[id]
		switch {
		case ok:
			want := h.acked[wkey{id, a}]
			if !maps.Equal(got, want) && len(got)+len(want) > 0 {
				h.fatalf("writer %q committed attempt %d: view seq->offset %v, acked %v", id, a, got, want)
			}
		case m.ws[id].Attempt == 0 && m.ws[id].Status == stream.WriterOpen:
			for q, e := range m.ws[id].Live {
				if got[int64(q)] != e.Offset {
					h.fatalf("attempt-0 writer %q: seq %d at %d missing from the view", id, q, e.Offset)
				}
			}
			if len(got) != len(m.ws[id].Live) {
				h.fatalf("attempt-0 writer %q: %d records in the view, %d written", id, len(got), len(m.ws[id].Live))
			}
		default:
			if len(got) > 0 {
				h.fatalf("writer %q never committed (aborted %v) but the view holds %v", id, h.aborted[id], got)
			}
		}
	}
	for off := range h.autoAcked {
		if !inView[off] {
			h.fatalf("attempt-0 record at %d acked but not in the committed view", off)
		}
	}
	// Invariant 5: the live view with its aborts applied is the committed view.
	var live []int64
	for _, r := range m.log {
		if r.Kind == stream.KindData && !h.voided[r.Offset] {
			live = append(live, r.Offset)
		}
	}
	if !slices.Equal(live, data) {
		h.fatalf("live view with aborts applied %v != committed view %v", live, data)
	}
	checkReplay(h.tb, m.log, m.ws)
	h.checkResume(full)
}

// checkResume restarts the committed filter at offsets an earlier run gave
// as NextOffset and compares what it releases with the full view's suffix.
func (h *harness) checkResume(full []stream.Record) {
	h.tb.Helper()
	froms := slices.Compact(slices.Clone(h.resume))
	if len(froms) > 12 { // keep it fast: the first, the last and some between
		pick := []int64{froms[0], froms[len(froms)-1]}
		for i := 1; i < len(froms)-1; i += len(froms) / 10 {
			pick = append(pick, froms[i])
		}
		froms = pick
	}
	froms = append(froms, 0)
	for _, from := range froms {
		got := committedView(h.m.log, from)
		i, _ := slices.BinarySearchFunc(full, from, func(r stream.Record, off int64) int { return int(r.Offset - off) })
		if !slices.EqualFunc(got, full[i:], sameRecord) {
			h.fatalf("committed view resumed at %d:\n %v\nwant the suffix\n %v", from, got, full[i:])
		}
		// With its data bounded, the filter lets data go and releases
		// records without it: read again from the log, the view is the
		// same.
		for _, hold := range []int{1, 5, 40, 200, 400, 1000} {
			if got := committedViewHeld(h.tb, h.m.log, from, hold); !slices.EqualFunc(got, full[i:], sameRecord) {
				h.fatalf("committed view resumed at %d, holding %d bytes:\n %v\nwant the suffix\n %v", from, hold, got, full[i:])
			}
		}
	}
}

// committedViewHeld is committedView with Hold: records released without
// their data are read again from the log.
func committedViewHeld(tb testing.TB, log []stream.Record, from int64, hold int) []stream.Record {
	var out []stream.Record
	f := stream.NewCommitted(from)
	f.Hold(hold)
	for i := from; i < int64(len(log)); i++ {
		f.Push(&log[i], func(r *stream.Record) {
			if r.Kind == stream.KindData && r.Data == nil {
				if !reflect.DeepEqual(*r, stream.Record{Offset: r.Offset, Kind: stream.KindData}) {
					tb.Fatalf("a record released without its data tells more than its offset: %v", r)
				}
				out = append(out, log[r.Offset])
				return
			}
			out = append(out, *r)
		})
	}
	return out
}

func committedView(log []stream.Record, from int64) []stream.Record {
	var out []stream.Record
	f := stream.NewCommitted(from)
	for i := from; i < int64(len(log)); i++ {
		f.Push(&log[i], func(r *stream.Record) { out = append(out, *r) })
	}
	return out
}

func sameRecord(a, b stream.Record) bool {
	return a.Offset == b.Offset && a.Kind == b.Kind && a.Writer == b.Writer && a.Attempt == b.Attempt &&
		a.Seq == b.Seq && a.Digest == b.Digest && string(a.Data) == string(b.Data)
}

// finish finishes every writer still open: commit or abort at its current
// attempt, maybe close. Each must succeed.
func (h *harness) finish(r *rand.Rand) {
	h.tb.Helper()
	mode := r.IntN(4) // 0: close only, 1: finish every writer, 2 and 3: both
	if !h.m.h.Closed && mode > 0 {
		for _, id := range slices.Sorted(maps.Keys(h.m.ws)) {
			w := h.m.ws[id]
			if w.Status != stream.WriterOpen || w.Attempt == 0 {
				continue
			}
			o := commit(id, w.Attempt)
			if r.IntN(5) < 2 {
				o = abort(id, w.Attempt)
			}
			if res := h.apply(o); res.err != nil {
				h.fatalf("finishing %v: %v", o, res.err)
			}
		}
	}
	if !h.m.h.Closed && mode != 1 {
		h.apply(closeOp())
	}
	h.finished()
}

// genWriter is what the generator knows of one attempted writer: the output
// its current attempt means to write and how far it got.
type genWriter struct {
	id      string
	attempt int64
	out     []string
	prev    []string
	sent    int64
}

func freshChunk(r *rand.Rand, id string, attempt, q int64) string {
	if r.IntN(2) == 0 { // a tiny alphabet: chance agreements between attempts
		return string(rune('a' + r.IntN(3)))
	}
	return fmt.Sprintf("%s.%d.%d.%d", id, attempt, q, r.IntN(1000))
}

// page returns chunks [s, s+n) of the writer's output, extending it.
func (g *genWriter) page(r *rand.Rand, s, n int64) []string {
	for int64(len(g.out)) < s+n {
		g.out = append(g.out, freshChunk(r, g.id, g.attempt, int64(len(g.out))))
	}
	return slices.Clone(g.out[s : s+n])
}

// nextAttempt starts a retry: the same output up to a divergence point
// (often the whole), then other bytes.
func (g *genWriter) nextAttempt(r *rand.Rand) {
	g.prev = g.out
	g.attempt++
	if r.IntN(10) == 0 {
		g.attempt++
	}
	d := len(g.prev)
	if r.IntN(5) < 2 {
		d = r.IntN(len(g.prev) + 1)
	}
	n := max(0, len(g.prev)+r.IntN(3)-1)
	g.out = nil
	for i := range n {
		if i < d && i < len(g.prev) {
			g.out = append(g.out, g.prev[i])
		} else {
			g.out = append(g.out, freshChunk(r, g.id, g.attempt, int64(i)))
		}
	}
	g.sent = 0
}

// step applies one random operation.
func (h *harness) step(r *rand.Rand, gws []*genWriter, wf *genWriter) {
	h.tb.Helper()
	g := gws[r.IntN(len(gws))]
	var o rop
	switch x := r.IntN(100); {
	case x < 35: // the next page
		n := int64(r.IntN(5))
		o = app(g.id, g.attempt, g.sent, g.page(r, g.sent, n)...)
		if r.IntN(10) == 0 {
			o.fence = g.attempt + int64(r.IntN(3)) - 1
		}
	case x < 43: // a re-sent page, maybe running into new seqs
		s := int64(r.IntN(int(g.sent) + 1))
		o = app(g.id, g.attempt, s, g.page(r, s, int64(r.IntN(5)))...)
	case x < 48: // an acknowledged seq with other bytes
		s := int64(r.IntN(int(g.sent) + 1))
		c := g.page(r, s, int64(1+r.IntN(3)))
		c[r.IntN(len(c))] = "conflict" + fmt.Sprint(r.IntN(3))
		o = app(g.id, g.attempt, s, c...)
	case x < 52: // a gap
		s := g.sent + 1 + int64(r.IntN(2))
		o = app(g.id, g.attempt, s, g.page(r, s, 1)...)
	case x < 54: // a negative seq
		o = app(g.id, g.attempt, -1-int64(r.IntN(2)), "neg")
	case x < 60: // a zombie of an earlier attempt
		a := int64(r.IntN(int(g.attempt)))
		if a == 0 {
			a = 1
		}
		s := int64(r.IntN(3))
		c := []string{freshChunk(r, g.id, a, s)}
		if s < int64(len(g.prev)) {
			c[0] = g.prev[s]
		}
		o = app(g.id, a, s, c...)
	case x < 68: // the next attempt begins
		g.nextAttempt(r)
		if r.IntN(2) == 0 {
			return
		}
		n := int64(r.IntN(4))
		o = app(g.id, g.attempt, 0, g.page(r, 0, n)...)
	case x < 74:
		a := g.attempt
		if r.IntN(10) == 0 {
			a++
		}
		o = commit(g.id, a)
	case x < 77:
		a := g.attempt
		if r.IntN(10) == 0 {
			a += int64(r.IntN(3)) - 1
		}
		o = abort(g.id, a)
	case x < 85:
		c := make([]string, r.IntN(4))
		for i := range c {
			c[i] = freshChunk(r, "anon", 0, 0)
		}
		o = anon(c...)
	case x < 97: // workflow code: attempt 0, replayed from the start
		g = wf
		s := g.sent
		switch y := r.IntN(10); {
		case y < 3:
			s = 0
		case y < 4:
			s = int64(r.IntN(int(g.sent) + 1))
			c := g.page(r, s, 1)
			c[0] += "!"
			o = app(g.id, 0, s, c...)
		case y < 5:
			o = app(g.id, 1, 0, g.page(r, 0, 1)...)
		}
		if o.op == "" {
			o = app(g.id, 0, s, g.page(r, s, int64(r.IntN(4)))...)
		}
	case x < 98:
		o = closeOp()
	default:
		o = rop{op: []string{"commit", "abort"}[r.IntN(2)], w: "ghost", a: 1}
	}
	res := h.apply(o)
	if res.err == nil && o.op == "append" && o.a == g.attempt {
		g.sent = max(g.sent, o.s+int64(len(o.chunks)))
	}
}

func runHistory(tb testing.TB, seed uint64, voidsBug *bool) {
	r := rand.New(rand.NewPCG(seed, 0x57e1))
	h := newHarness(tb, voidsBug)
	h.name = fmt.Sprintf("seed %d: ", seed)
	var gws []*genWriter
	for i := range 1 + r.IntN(3) {
		gws = append(gws, &genWriter{id: fmt.Sprintf("step/%d", i), attempt: 1})
	}
	wf := &genWriter{id: "workflow"}
	for range 1 + r.IntN(40) {
		h.step(r, gws, wf)
	}
	// Live while writers are still open: earlier attempts' suffixes, adopted
	// records.
	checkReplay(tb, h.m.log, h.m.ws)
	h.finish(r)
}

// TestProperties runs random histories through the rules and checks the
// invariants of semantics.md. Seeds are fixed: a failure names its seed.
func TestProperties(t *testing.T) {
	n := uint64(4000)
	if testing.Short() {
		n = 500
	}
	var voidsBug bool
	for seed := range n {
		runHistory(t, seed, &voidsBug)
	}
}
