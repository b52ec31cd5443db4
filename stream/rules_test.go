package stream_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/weirhq/weir/stream"
)

// rop is one operation of a table case: an append, commit, abort or close.
type rop struct {
	op     string // "append", "commit", "abort", "close"
	w      string // "" = anonymous append; for commit/abort "" passes a nil writer
	a      int64
	s      int64
	fence  int64
	chunks []string
	late   bool
}

func app(w string, a, s int64, chunks ...string) rop {
	return rop{op: "append", w: w, a: a, s: s, chunks: chunks}
}

func fenced(w string, a, s, fence int64, chunks ...string) rop {
	return rop{op: "append", w: w, a: a, s: s, fence: fence, chunks: chunks}
}

func late(w string, a, s int64, chunks ...string) rop {
	return rop{op: "append", w: w, a: a, s: s, chunks: chunks, late: true}
}

func anon(chunks ...string) rop { return rop{op: "append", chunks: chunks} }

func commit(w string, a int64) rop { return rop{op: "commit", w: w, a: a} }

func abort(w string, a int64) rop { return rop{op: "abort", w: w, a: a} }

func closeOp() rop { return rop{op: "close"} }

func (o rop) String() string {
	switch o.op {
	case "append":
		return fmt.Sprintf("append(%q a%d s%d fence%d late%v %q)", o.w, o.a, o.s, o.fence, o.late, o.chunks)
	case "close":
		return "close"
	}
	return fmt.Sprintf("%s(%q a%d)", o.op, o.w, o.a)
}

// tstream is a store reduced to its state: what a backend loads and saves
// around each rule call. A writer joins the map only once a call on it
// succeeded, as a store would only save it then.
type tstream struct {
	h   stream.Head
	ws  map[string]*stream.Writer
	log []stream.Record
}

func newTStream() *tstream { return &tstream{ws: map[string]*stream.Writer{}} }

// result is what one rop returned.
type result struct {
	w    *stream.Writer // the writer the rules were given
	acks []stream.Ack
	res  stream.Result
	recs []stream.Record
	err  error
}

func cloneWriter(w *stream.Writer) *stream.Writer {
	if w == nil {
		return nil
	}
	c := *w
	c.Live = slices.Clone(w.Live)
	return &c
}

// writerFor returns the writer the op works on: the stored one, a fresh one
// for an append by a writer never seen, nil for anonymous appends and for
// commits/aborts of writers never stored.
func (m *tstream) writerFor(o rop) (w *stream.Writer, fresh bool) {
	if o.w == "" {
		return nil, false
	}
	if w := m.ws[o.w]; w != nil {
		return w, false
	}
	if o.op == "append" {
		return &stream.Writer{ID: o.w}, true
	}
	return nil, false
}

func (m *tstream) do(o rop) result {
	w, fresh := m.writerFor(o)
	r := result{w: w}
	switch o.op {
	case "append":
		chunks := make([][]byte, len(o.chunks))
		for i, c := range o.chunks {
			chunks[i] = []byte(c)
		}
		r.acks, r.recs, r.err = stream.Append(&m.h, w, &stream.AppendRequest{Attempt: o.a, FirstSeq: o.s, Chunks: chunks, Fence: o.fence, Late: o.late})
	case "commit":
		r.res, r.recs, r.err = stream.Commit(&m.h, w, o.a)
	case "abort":
		r.res, r.recs, r.err = stream.Abort(&m.h, w, o.a)
	case "close":
		r.res, r.recs = stream.Close(&m.h)
	default:
		panic("unknown op " + o.op)
	}
	if r.err == nil {
		if fresh {
			m.ws[w.ID] = w
		}
		m.log = append(m.log, r.recs...)
	}
	return r
}

func ackStrings(acks []stream.Ack) []string {
	out := []string{}
	for _, a := range acks {
		out = append(out, fmt.Sprintf("%d:%s", a.Offset, a.Outcome))
	}
	return out
}

func recStrings(recs []stream.Record) []string {
	out := []string{}
	for _, r := range recs {
		out = append(out, r.String())
	}
	return out
}

type ruleCase struct {
	name  string
	setup []rop
	do    rop
	// On success: the acks ("offset:outcome") of an append or the result of
	// a commit/abort/close, and the records written (Record.String).
	acks []string
	res  stream.Result
	recs []string
	// On failure: the sentinel the error matches (anyErr: any error), and
	// an optional check of its details.
	err    error
	anyErr bool
	detail func(t *testing.T, err error)
	// after checks the state once the op ran.
	after func(t *testing.T, m *tstream)
}

func wantFenced(attempt, current int64) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		var fe *stream.FencedError
		if !errors.As(err, &fe) {
			t.Fatalf("error %v is not a *FencedError", err)
		}
		if fe.Attempt != attempt || fe.Current != current {
			t.Fatalf("FencedError{Attempt: %d, Current: %d}, want {%d, %d}", fe.Attempt, fe.Current, attempt, current)
		}
	}
}

func wantGap(expected, got int64) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		var ge *stream.GapError
		if !errors.As(err, &ge) {
			t.Fatalf("error %v is not a *GapError", err)
		}
		if ge.Expected != expected || ge.Got != got {
			t.Fatalf("GapError{Expected: %d, Got: %d}, want {%d, %d}", ge.Expected, ge.Got, expected, got)
		}
	}
}

func wantConflict(seq, offset int64, want, got string) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		var ce *stream.ConflictError
		if !errors.As(err, &ce) {
			t.Fatalf("error %v is not a *ConflictError", err)
		}
		w := stream.ConflictError{Seq: seq, Offset: offset, Want: stream.Sum([]byte(want)), Got: stream.Sum([]byte(got))}
		if *ce != w {
			t.Fatalf("ConflictError %+v, want %+v", *ce, w)
		}
	}
}

func wantWriter(id string, attempt, next int64, status stream.Status, live ...int64) func(*testing.T, *tstream) {
	return func(t *testing.T, m *tstream) {
		t.Helper()
		w := m.ws[id]
		if w == nil {
			t.Fatalf("writer %q not stored", id)
		}
		var offs []int64
		for _, e := range w.Live {
			offs = append(offs, e.Offset)
		}
		if w.Attempt != attempt || w.Next != next || w.Status != status || !slices.Equal(offs, live) {
			t.Fatalf("writer %q = {Attempt %d Next %d Status %s Live %v}, want {Attempt %d Next %d Status %s Live %v}",
				id, w.Attempt, w.Next, w.Status, offs, attempt, next, status, live)
		}
	}
}

// three chunks x, y, z at offsets 0, 1, 2 by attempt 1 of writer s.
var wrote3 = []rop{app("s", 1, 0, "x", "y", "z")}

func ruleCases() []ruleCase {
	committed := append(slices.Clone(wrote3), commit("s", 1))
	aborted := append(slices.Clone(wrote3), abort("s", 1))
	wf := []rop{app("wf", 0, 0, "x", "y")}
	return []ruleCase{
		// Anonymous appends.
		{name: "anonymous/open", do: anon("x", "y"),
			acks: []string{"0:appended", "1:appended"},
			recs: []string{`0:data{ a0 s0 "x"}`, `1:data{ a0 s0 "y"}`}},
		{name: "anonymous/after other records", setup: wrote3, do: anon("p"),
			acks: []string{"3:appended"}, recs: []string{`3:data{ a0 s0 "p"}`}},
		{name: "anonymous/identical chunks are appended again", setup: []rop{anon("x")}, do: anon("x"),
			acks: []string{"1:appended"}, recs: []string{`1:data{ a0 s0 "x"}`}},
		{name: "anonymous/attempt, seq and fence are ignored: committed at append",
			do:   rop{op: "append", a: 3, s: 7, fence: 9, chunks: []string{"x"}},
			acks: []string{"0:appended"}, recs: []string{`0:data{ a0 s0 "x"}`}},
		{name: "anonymous/closed", setup: []rop{anon("x"), closeOp()}, do: anon("x"), err: stream.ErrClosed},

		// Late writes (AppendRequest.Late): a committed attempt goes on.
		{name: "late/after the commit: appended and committed at once", setup: committed, do: late("s", 1, 3, "p", "q"),
			acks:  []string{"4:appended", "5:appended"},
			recs:  []string{`4:data{s a1 s3 "p"}`, `5:data{s a1 s4 "q"}`, `6:commit{s a1 count 5}`},
			after: wantWriter("s", 1, 5, stream.WriterCommitted, 0, 1, 2, 4, 5)},
		{name: "late/retransmits first, then new chunks", setup: committed, do: late("s", 1, 2, "z", "p"),
			acks: []string{"2:retransmit", "4:appended"},
			recs: []string{`4:data{s a1 s3 "p"}`, `5:commit{s a1 count 4}`}},
		{name: "late/only retransmits write nothing", setup: committed, do: late("s", 1, 1, "y", "z"),
			acks: []string{"1:retransmit", "2:retransmit"}},
		{name: "late/a gap", setup: committed, do: late("s", 1, 4, "p"), anyErr: true, detail: wantGap(3, 4)},
		{name: "late/a retransmit that differs", setup: committed, do: late("s", 1, 2, "Z", "p"),
			anyErr: true, detail: wantConflict(2, 2, "z", "Z")},
		{name: "late/an aborted writer stays finished", setup: aborted, do: late("s", 1, 0, "x"), err: stream.ErrWriterFinished},
		{name: "late/a newer attempt of a committed writer", setup: committed, do: late("s", 2, 0, "x"), err: stream.ErrWriterFinished},
		{name: "late/a zombie is fenced", setup: committed, do: rop{op: "append", w: "s", a: 1, s: 3, fence: 2, late: true, chunks: []string{"p"}},
			anyErr: true, detail: wantFenced(1, 2)},
		{name: "late/closed: only retransmits", setup: append(slices.Clone(committed), closeOp()), do: late("s", 1, 3, "p"), err: stream.ErrClosed},
		{name: "late/without the flag a write after the commit is refused", setup: committed, do: app("s", 1, 3, "p"), err: stream.ErrWriterFinished},
		{name: "late/an open writer appends as usual", setup: wrote3, do: late("s", 1, 3, "p"),
			acks: []string{"3:appended"}, recs: []string{`3:data{s a1 s3 "p"}`}},

		// Closed stream, named writer.
		{name: "closed/exact retransmit of an open writer", setup: append(slices.Clone(wrote3), closeOp()),
			do: app("s", 1, 0, "x", "y"), acks: []string{"0:retransmit", "1:retransmit"}},
		{name: "closed/exact retransmit of a committed writer", setup: append(slices.Clone(committed), closeOp()),
			do: app("s", 1, 1, "y", "z"), acks: []string{"1:retransmit", "2:retransmit"}},
		{name: "closed/one chunk differs", setup: append(slices.Clone(wrote3), closeOp()),
			do: app("s", 1, 0, "x", "Y", "z"), err: stream.ErrClosed},
		{name: "closed/retransmit then a new seq", setup: append(slices.Clone(wrote3), closeOp()),
			do: app("s", 1, 2, "z", "w"), err: stream.ErrClosed},
		{name: "closed/new writer", setup: []rop{closeOp()}, do: app("t", 1, 0, "x"), err: stream.ErrClosed},
		{name: "closed/negative seq", setup: append(slices.Clone(wrote3), closeOp()),
			do: app("s", 1, -1, "x"), err: stream.ErrClosed},
		{name: "closed/seq live from an earlier attempt but not sent by this one",
			setup: append(slices.Clone(wrote3), app("s", 2, 0, "x"), closeOp()),
			do:    app("s", 2, 1, "y"), err: stream.ErrClosed},
		{name: "closed/aborted writer", setup: append(slices.Clone(aborted), closeOp()),
			do: app("s", 1, 0, "x"), err: stream.ErrClosed},

		// Fences and zombies.
		{name: "fence/above the writer's attempt", setup: wrote3,
			do: fenced("s", 1, 3, 2, "w"), err: stream.ErrFenced, detail: wantFenced(1, 2)},
		{name: "fence/above the attempt of a new writer", do: fenced("t", 1, 0, 3, "x"),
			err: stream.ErrFenced, detail: wantFenced(1, 3)},
		{name: "fence/equal to the attempt", setup: wrote3, do: fenced("s", 2, 0, 2, "x"),
			acks: []string{"0:adopted"}},
		{name: "fence/below the writer's attempt: current is the writer's",
			setup: append(slices.Clone(wrote3), app("s", 3, 0, "x")),
			do:    fenced("s", 2, 0, 1, "x"), err: stream.ErrFenced, detail: wantFenced(2, 3)},
		{name: "fence/attempt 0 writer", setup: wf, do: fenced("wf", 0, 2, 1, "z"),
			err: stream.ErrFenced, detail: wantFenced(0, 1)},
		{name: "zombie/older attempt", setup: append(slices.Clone(wrote3), app("s", 2, 0, "x")),
			do: app("s", 1, 3, "w"), err: stream.ErrFenced, detail: wantFenced(1, 2)},
		{name: "zombie/exact retransmit is fenced too", setup: append(slices.Clone(wrote3), app("s", 2, 0, "x")),
			do: app("s", 1, 0, "x"), err: stream.ErrFenced, detail: wantFenced(1, 2)},
		{name: "zombie/after an empty request began the attempt",
			setup: append(slices.Clone(wrote3), app("s", 2, 0)),
			do:    app("s", 1, 3, "w"), err: stream.ErrFenced, detail: wantFenced(1, 2)},
		{name: "zombie/of a committed writer", setup: append(slices.Clone(wrote3), app("s", 2, 0, "x"), commit("s", 2)),
			do: app("s", 1, 0, "x"), err: stream.ErrFenced, detail: wantFenced(1, 2)},

		// Attempt 0: committed at append (workflow code, external producers).
		{name: "attempt0/first write", do: app("wf", 0, 0, "x", "y"),
			acks: []string{"0:appended", "1:appended"},
			recs: []string{`0:data{wf a0 s0 "x"}`, `1:data{wf a0 s1 "y"}`}},
		{name: "attempt0/retransmit (replay)", setup: wf, do: app("wf", 0, 0, "x", "y"),
			acks: []string{"0:retransmit", "1:retransmit"}},
		{name: "attempt0/retransmit then new", setup: wf, do: app("wf", 0, 1, "y", "z"),
			acks: []string{"1:retransmit", "2:appended"}, recs: []string{`2:data{wf a0 s2 "z"}`}},
		{name: "attempt0/conflict (non-determinism)", setup: wf, do: app("wf", 0, 1, "Y"),
			err: stream.ErrConflict, detail: wantConflict(1, 1, "y", "Y")},
		{name: "attempt0/gap", setup: wf, do: app("wf", 0, 3, "w"),
			err: stream.ErrGap, detail: wantGap(2, 3)},
		{name: "attempt0/then attempt 1 is a mode error", setup: wf, do: app("wf", 1, 0, "x"), err: stream.ErrMode},
		{name: "attempt0/then attempt 1 retransmit is a mode error", setup: wf, do: app("wf", 1, 2, "z"), err: stream.ErrMode},
		{name: "attempt0/commit is a mode error", setup: wf, do: commit("wf", 0), err: stream.ErrMode},
		{name: "attempt0/commit at attempt 1 is a mode error", setup: wf, do: commit("wf", 1), err: stream.ErrMode},
		{name: "attempt0/abort is a mode error", setup: wf, do: abort("wf", 0), err: stream.ErrMode},
		{name: "attempt0/empty request then attempts", setup: []rop{app("wf", 0, 0)}, do: app("wf", 1, 0, "x"),
			acks: []string{"0:appended"}, recs: []string{`0:data{wf a1 s0 "x"}`}},

		// Negative seqs.
		{name: "negative seq/new writer", do: app("t", 1, -1, "x"), err: stream.ErrGap, detail: wantGap(0, -1)},
		{name: "negative seq/same attempt", setup: wrote3, do: app("s", 1, -2, "x"), err: stream.ErrGap, detail: wantGap(3, -2)},
		// A higher attempt expects seq 0, whatever the previous attempt reached.
		{name: "negative seq/new attempt", setup: wrote3, do: app("s", 2, -1, "x"), err: stream.ErrGap, detail: wantGap(0, -1)},
		{name: "negative seq/attempt 0", setup: wf, do: app("wf", 0, -1, "x", "y"), err: stream.ErrGap, detail: wantGap(2, -1)},
		{name: "negative seq/committed writer", setup: committed, do: app("s", 1, -1, "x"), anyErr: true},
		{name: "negative seq/empty request", setup: wrote3, do: app("s", 1, -1), err: stream.ErrGap},

		// Open writer, same attempt.
		{name: "same attempt/next seqs", setup: wrote3, do: app("s", 1, 3, "w", "v"),
			acks: []string{"3:appended", "4:appended"},
			recs: []string{`3:data{s a1 s3 "w"}`, `4:data{s a1 s4 "v"}`}},
		{name: "same attempt/exact retransmit", setup: wrote3, do: app("s", 1, 0, "x", "y", "z"),
			acks: []string{"0:retransmit", "1:retransmit", "2:retransmit"}},
		{name: "same attempt/prefix retransmit, rest new", setup: wrote3, do: app("s", 1, 1, "y", "z", "w"),
			acks: []string{"1:retransmit", "2:retransmit", "3:appended"}, recs: []string{`3:data{s a1 s3 "w"}`},
			after: wantWriter("s", 1, 4, stream.WriterOpen, 0, 1, 2, 3)},
		{name: "same attempt/conflict at the first chunk", setup: wrote3, do: app("s", 1, 0, "X"),
			err: stream.ErrConflict, detail: wantConflict(0, 0, "x", "X")},
		{name: "same attempt/conflict in the middle", setup: wrote3, do: app("s", 1, 0, "x", "Y", "z", "w"),
			err: stream.ErrConflict, detail: wantConflict(1, 1, "y", "Y")},
		{name: "same attempt/conflict at the last retransmit before new chunks", setup: wrote3, do: app("s", 1, 1, "y", "Z", "w", "v"),
			err: stream.ErrConflict, detail: wantConflict(2, 2, "z", "Z")},
		{name: "same attempt/gap", setup: wrote3, do: app("s", 1, 4, "v"), err: stream.ErrGap, detail: wantGap(3, 4)},
		{name: "same attempt/gap of a new writer", do: app("t", 1, 1, "x"), err: stream.ErrGap, detail: wantGap(0, 1)},
		{name: "same attempt/empty request", setup: wrote3, do: app("s", 1, 3), acks: []string{}},
		{name: "same attempt/empty request past next is a gap", setup: wrote3, do: app("s", 1, 5), err: stream.ErrGap, detail: wantGap(3, 5)},

		// A higher attempt.
		{name: "new attempt/gap (expects 0)", setup: wrote3, do: app("s", 2, 1, "y"),
			err: stream.ErrGap, detail: wantGap(0, 1)},
		{name: "new attempt/gap at seq 3", setup: wrote3, do: app("s", 2, 3, "w"),
			err: stream.ErrGap, detail: wantGap(0, 3)},
		{name: "new attempt/adopt all", setup: wrote3, do: app("s", 2, 0, "x", "y", "z"),
			acks:  []string{"0:adopted", "1:adopted", "2:adopted"},
			after: wantWriter("s", 2, 3, stream.WriterOpen, 0, 1, 2)},
		{name: "new attempt/adopt then append past the old end", setup: wrote3, do: app("s", 2, 0, "x", "y", "z", "w"),
			acks: []string{"0:adopted", "1:adopted", "2:adopted", "3:appended"}, recs: []string{`3:data{s a2 s3 "w"}`}},
		{name: "new attempt/diverge in the middle", setup: wrote3, do: app("s", 2, 0, "x", "Q", "z"),
			acks:  []string{"0:adopted", "4:appended", "5:appended"},
			recs:  []string{`3:abort{s a2 from 1}`, `4:data{s a2 s1 "Q"}`, `5:data{s a2 s2 "z"}`},
			after: wantWriter("s", 2, 3, stream.WriterOpen, 0, 4, 5)},
		{name: "new attempt/diverge at seq 0", setup: wrote3, do: app("s", 2, 0, "Q"),
			acks: []string{"4:appended"}, recs: []string{`3:abort{s a2 from 0}`, `4:data{s a2 s0 "Q"}`},
			after: wantWriter("s", 2, 1, stream.WriterOpen, 4)},
		{name: "new attempt/diverged across pages: no second abort, no adoption",
			setup: append(slices.Clone(wrote3), app("s", 2, 0, "x", "Q")),
			do:    app("s", 2, 2, "z"), acks: []string{"5:appended"}, recs: []string{`5:data{s a2 s2 "z"}`}},
		{name: "new attempt/adopt across pages", setup: append(slices.Clone(wrote3), app("s", 2, 0, "x")),
			do: app("s", 2, 1, "y"), acks: []string{"1:adopted"}},
		{name: "new attempt/re-sent page of adopted chunks is a retransmit",
			setup: append(slices.Clone(wrote3), app("s", 2, 0, "x", "y")),
			do:    app("s", 2, 0, "x", "y", "z"), acks: []string{"0:retransmit", "1:retransmit", "2:adopted"}},
		{name: "new attempt/re-sent page conflicts with an adopted chunk",
			setup: append(slices.Clone(wrote3), app("s", 2, 0, "x", "y")),
			do:    app("s", 2, 1, "Y"), err: stream.ErrConflict, detail: wantConflict(1, 1, "y", "Y")},
		{name: "new attempt/third attempt adopts from the first and second",
			setup: append(slices.Clone(wrote3), app("s", 2, 0, "x", "Q")),
			do:    app("s", 3, 0, "x", "Q"), acks: []string{"0:adopted", "4:adopted"},
			after: wantWriter("s", 3, 2, stream.WriterOpen, 0, 4)},
		{name: "new attempt/third attempt diverges from the second",
			setup: append(slices.Clone(wrote3), app("s", 2, 0, "x", "Q")),
			do:    app("s", 3, 0, "x", "y"), acks: []string{"0:adopted", "6:appended"},
			recs: []string{`5:abort{s a3 from 1}`, `6:data{s a3 s1 "y"}`}},
		{name: "new attempt/shorter attempt keeps the old suffix live until commit",
			setup: append(slices.Clone(wrote3), app("s", 2, 0, "x")),
			do:    app("s", 3, 0, "x", "y", "z"), acks: []string{"0:adopted", "1:adopted", "2:adopted"}},
		{name: "new attempt/empty request begins the attempt", setup: wrote3, do: app("s", 2, 0),
			acks: []string{}, after: wantWriter("s", 2, 0, stream.WriterOpen, 0, 1, 2)},
		{name: "new attempt/skipping attempts", setup: wrote3, do: app("s", 7, 0, "x"),
			acks: []string{"0:adopted"}, after: wantWriter("s", 7, 1, stream.WriterOpen, 0, 1, 2)},

		// Finished writers.
		{name: "committed/exact retransmit", setup: committed, do: app("s", 1, 0, "x", "y"),
			acks: []string{"0:retransmit", "1:retransmit"}},
		{name: "committed/new seq", setup: committed, do: app("s", 1, 3, "w"), err: stream.ErrWriterFinished},
		{name: "committed/retransmit then new seq", setup: committed, do: app("s", 1, 2, "z", "w"), err: stream.ErrWriterFinished},
		{name: "committed/conflict", setup: committed, do: app("s", 1, 0, "x", "Y"),
			err: stream.ErrConflict, detail: wantConflict(1, 1, "y", "Y")},
		{name: "committed/higher attempt", setup: committed, do: app("s", 2, 0, "x"), err: stream.ErrWriterFinished},
		{name: "committed/surplus of an earlier attempt is not retransmittable",
			setup: append(slices.Clone(wrote3), app("s", 2, 0, "x"), commit("s", 2)),
			do:    app("s", 2, 1, "y"), err: stream.ErrWriterFinished},
		{name: "aborted/same attempt retransmit", setup: aborted, do: app("s", 1, 0, "x"), err: stream.ErrWriterFinished},
		{name: "aborted/higher attempt", setup: aborted, do: app("s", 2, 0, "x"), err: stream.ErrWriterFinished},
		{name: "aborted/older attempt", setup: append(slices.Clone(wrote3), abort("s", 2)),
			do: app("s", 1, 3, "x"), err: stream.ErrFenced, detail: wantFenced(1, 2)},

		// Commit.
		{name: "commit/nil writer", do: commit("nobody", 1), err: stream.ErrUnknownWriter},
		{name: "commit/writer that never wrote", setup: []rop{anon("x")},
			do: rop{op: "commit-fresh", w: "t", a: 1}, err: stream.ErrUnknownWriter},
		{name: "commit/attempt that wrote", setup: wrote3, do: commit("s", 1),
			res: stream.Done, recs: []string{"3:commit{s a1 count 3}"}, after: wantWriter("s", 1, 3, stream.WriterCommitted, 0, 1, 2)},
		{name: "commit/repeated", setup: committed, do: commit("s", 1), res: stream.Already},
		{name: "commit/shorter attempt aborts the surplus", setup: append(slices.Clone(wrote3), app("s", 2, 0, "x")),
			do: commit("s", 2), res: stream.Done, recs: []string{"3:abort{s a2 from 1}", "4:commit{s a2 count 1}"},
			after: wantWriter("s", 2, 1, stream.WriterCommitted, 0)},
		{name: "commit/higher attempt that wrote nothing here", setup: wrote3, do: commit("s", 3),
			res: stream.Done, recs: []string{"3:abort{s a3 from 0}", "4:commit{s a3 count 0}"},
			after: wantWriter("s", 3, 0, stream.WriterCommitted)},
		{name: "commit/attempt begun by an empty request", setup: []rop{app("s", 1, 0)}, do: commit("s", 1),
			res: stream.Done, recs: []string{"0:commit{s a1 count 0}"}},
		{name: "commit/fenced", setup: append(slices.Clone(wrote3), app("s", 2, 0, "x")),
			do: commit("s", 1), err: stream.ErrFenced, detail: wantFenced(1, 2)},
		{name: "commit/after abort", setup: aborted, do: commit("s", 1), err: stream.ErrWriterFinished},
		{name: "commit/after abort, higher attempt", setup: aborted, do: commit("s", 2), err: stream.ErrWriterFinished},
		{name: "commit/other attempt after commit", setup: committed, do: commit("s", 2), err: stream.ErrWriterFinished},
		{name: "commit/older attempt after commit", setup: append(slices.Clone(wrote3), commit("s", 2)),
			do: commit("s", 1), err: stream.ErrFenced, detail: wantFenced(1, 2)},
		{name: "commit/closed stream", setup: append(slices.Clone(wrote3), closeOp()), do: commit("s", 1), err: stream.ErrClosed},
		{name: "commit/repeated on a closed stream", setup: append(slices.Clone(committed), closeOp()),
			do: commit("s", 1), res: stream.Already},

		// Abort.
		{name: "abort/nil writer", do: abort("nobody", 1), err: stream.ErrUnknownWriter},
		{name: "abort/writer that never wrote", do: rop{op: "abort-fresh", w: "t", a: 1}, err: stream.ErrUnknownWriter},
		{name: "abort/open writer", setup: wrote3, do: abort("s", 1),
			res: stream.Done, recs: []string{"3:abort{s a1 from 0}"}, after: wantWriter("s", 1, 0, stream.WriterAborted)},
		{name: "abort/higher attempt", setup: wrote3, do: abort("s", 4),
			res: stream.Done, recs: []string{"3:abort{s a4 from 0}"}, after: wantWriter("s", 4, 0, stream.WriterAborted)},
		{name: "abort/repeated", setup: aborted, do: abort("s", 1), res: stream.Already},
		{name: "abort/repeated on a closed stream", setup: append(slices.Clone(aborted), closeOp()),
			do: abort("s", 1), res: stream.Already},
		{name: "abort/other attempt after abort", setup: aborted, do: abort("s", 2), err: stream.ErrWriterFinished},
		{name: "abort/older attempt after abort", setup: append(slices.Clone(wrote3), abort("s", 2)),
			do: abort("s", 1), err: stream.ErrFenced, detail: wantFenced(1, 2)},
		{name: "abort/after commit", setup: committed, do: abort("s", 1), err: stream.ErrWriterFinished},
		{name: "abort/fenced", setup: append(slices.Clone(wrote3), app("s", 2, 0)),
			do: abort("s", 1), err: stream.ErrFenced, detail: wantFenced(1, 2)},
		{name: "abort/closed stream", setup: append(slices.Clone(wrote3), closeOp()), do: abort("s", 1), err: stream.ErrClosed},

		// Close.
		{name: "close/empty stream", do: closeOp(), res: stream.Done, recs: []string{"0:close"}},
		{name: "close/after records", setup: wrote3, do: closeOp(), res: stream.Done, recs: []string{"3:close"}},
		{name: "close/repeated", setup: []rop{closeOp()}, do: closeOp(), res: stream.Already},
	}
}

func TestRules(t *testing.T) {
	for _, c := range ruleCases() {
		t.Run(c.name, func(t *testing.T) {
			m := newTStream()
			for i, o := range c.setup {
				if r := m.do(o); r.err != nil {
					t.Fatalf("setup %d %v: %v", i, o, r.err)
				}
			}
			o := c.do
			// commit-fresh / abort-fresh: a store that hands the rules a
			// writer it just created rather than nil.
			var r result
			var w *stream.Writer
			switch o.op {
			case "commit-fresh", "abort-fresh":
				w = &stream.Writer{ID: o.w}
			default:
				w, _ = m.writerFor(o)
			}
			headBefore := m.h
			wBefore := cloneWriter(w)
			wsBefore := map[string]*stream.Writer{}
			for id, sw := range m.ws {
				wsBefore[id] = cloneWriter(sw)
			}
			logLen := len(m.log)
			switch o.op {
			case "commit-fresh":
				r.res, r.recs, r.err = stream.Commit(&m.h, w, o.a)
			case "abort-fresh":
				r.res, r.recs, r.err = stream.Abort(&m.h, w, o.a)
			default:
				r = m.do(o)
			}

			if c.err != nil || c.anyErr {
				if r.err == nil {
					t.Fatalf("%v: got acks %v res %v recs %v, want error %v", o, ackStrings(r.acks), r.res, recStrings(r.recs), c.err)
				}
				if c.err != nil && !errors.Is(r.err, c.err) {
					t.Fatalf("%v: error %v, want %v", o, r.err, c.err)
				}
				if c.detail != nil {
					c.detail(t, r.err)
				}
				// All or nothing: nothing returned, nothing changed.
				if r.acks != nil || r.recs != nil || r.res != 0 {
					t.Errorf("%v failed but returned acks %v res %v recs %v", o, r.acks, r.res, r.recs)
				}
				if m.h != headBefore {
					t.Errorf("%v failed but changed the head: %+v -> %+v", o, headBefore, m.h)
				}
				if w != nil && !reflect.DeepEqual(w, wBefore) {
					t.Errorf("%v failed but changed the writer:\n before %+v\n after  %+v", o, wBefore, w)
				}
				for id, sw := range m.ws {
					if !reflect.DeepEqual(sw, wsBefore[id]) {
						t.Errorf("%v failed but changed writer %q", o, id)
					}
				}
				if len(m.log) != logLen {
					t.Errorf("%v failed but wrote records", o)
				}
				if c.after != nil {
					c.after(t, m)
				}
				return
			}
			if r.err != nil {
				t.Fatalf("%v: unexpected error %v", o, r.err)
			}
			if o.op == "append" {
				if got := ackStrings(r.acks); !slices.Equal(got, c.acks) {
					t.Errorf("%v: acks %q, want %q", o, got, c.acks)
				}
			} else if r.res != c.res {
				t.Errorf("%v: result %v, want %v", o, r.res, c.res)
			}
			want := c.recs
			if want == nil {
				want = []string{}
			}
			if got := recStrings(r.recs); !slices.Equal(got, want) {
				t.Errorf("%v: records\n got  %q\n want %q", o, got, want)
			}
			if r.res == stream.Already && len(r.recs) > 0 {
				t.Errorf("%v: Already but wrote %v", o, r.recs)
			}
			checkRecords(t, headBefore.NextOffset, r.recs, m.h)
			if c.after != nil {
				c.after(t, m)
			}
		})
	}
}

// checkRecords checks the records one successful call returned: dense
// offsets from the head's old next offset, the head advanced past them, data
// digests that match.
func checkRecords(t testing.TB, from int64, recs []stream.Record, h stream.Head) {
	t.Helper()
	for i, r := range recs {
		if r.Offset != from+int64(i) {
			t.Fatalf("record %d has offset %d, want %d: %v", i, r.Offset, from+int64(i), recs)
		}
		if r.Kind == stream.KindData && r.Digest != stream.Sum(r.Data) {
			t.Fatalf("record %v: digest %s is not the data's", r, r.Digest)
		}
		if r.Kind != stream.KindData && (r.Data != nil || r.Digest != (stream.Digest{})) {
			t.Fatalf("record %v carries data", r)
		}
	}
	if h.NextOffset != from+int64(len(recs)) {
		t.Fatalf("head next offset %d after %d records from %d", h.NextOffset, len(recs), from)
	}
}

// TestAppendAttemptZeroSeqs checks the seq of every record an attempt-0
// writer and an anonymous append write: anonymous records carry seq 0,
// named ones their seq.
func TestAppendAttemptZeroSeqs(t *testing.T) {
	m := newTStream()
	for _, o := range []rop{app("wf", 0, 0, "x", "y"), anon("p", "q"), app("wf", 0, 1, "y", "z")} {
		if r := m.do(o); r.err != nil {
			t.Fatal(r.err)
		}
	}
	want := []string{`0:data{wf a0 s0 "x"}`, `1:data{wf a0 s1 "y"}`, `2:data{ a0 s0 "p"}`, `3:data{ a0 s0 "q"}`, `4:data{wf a0 s2 "z"}`}
	if got := recStrings(m.log); !slices.Equal(got, want) {
		t.Fatalf("log\n got  %q\n want %q", got, want)
	}
	for _, r := range m.log {
		if !r.Autocommit() {
			t.Errorf("%v is not autocommit", r)
		}
	}
}

// TestAppendRecordsAliasChunks pins the documented aliasing: records
// reference the request's chunks, nothing is copied.
func TestAppendRecordsAliasChunks(t *testing.T) {
	var h stream.Head
	chunk := []byte("abc")
	_, recs, err := stream.Append(&h, &stream.Writer{ID: "s"}, &stream.AppendRequest{Attempt: 1, Chunks: [][]byte{chunk}})
	if err != nil {
		t.Fatal(err)
	}
	if &recs[0].Data[0] != &chunk[0] {
		t.Fatal("record data does not alias the chunk")
	}
}

// TestReplayTable rebuilds Live from the log after hand-picked histories.
func TestReplayTable(t *testing.T) {
	histories := map[string][]rop{
		"adopt":          append(slices.Clone(wrote3), app("s", 2, 0, "x", "y", "z")),
		"diverge":        append(slices.Clone(wrote3), app("s", 2, 0, "x", "Q", "z", "w")),
		"diverge twice":  append(slices.Clone(wrote3), app("s", 2, 0, "x", "Q"), app("s", 3, 0, "R")),
		"commit surplus": append(slices.Clone(wrote3), app("s", 2, 0, "x"), commit("s", 2)),
		"commit higher":  append(slices.Clone(wrote3), commit("s", 3)),
		"abort":          append(slices.Clone(wrote3), abort("s", 1)),
		"attempt 0":      {app("s", 0, 0, "x", "y"), anon("p"), app("s", 0, 1, "y", "z")},
		"interleaved":    {app("s", 1, 0, "x"), app("t", 1, 0, "x"), app("s", 2, 0, "y"), app("t", 1, 1, "y"), app("s", 2, 1, "z"), closeOp()},
	}
	for name, h := range histories {
		t.Run(name, func(t *testing.T) {
			m := newTStream()
			for _, o := range h {
				if r := m.do(o); r.err != nil {
					t.Fatalf("%v: %v", o, r.err)
				}
			}
			checkReplay(t, m.log, m.ws)
		})
	}
}

// checkReplay rebuilds every writer's Live from the log with Writer.Replay
// and compares it with the Live the rules built.
func checkReplay(t testing.TB, log []stream.Record, ws map[string]*stream.Writer) {
	t.Helper()
	rebuilt := map[string]*stream.Writer{}
	for id := range ws {
		rebuilt[id] = &stream.Writer{ID: id}
	}
	for i := range log {
		r := &log[i]
		if r.Writer == "" || (r.Kind != stream.KindData && r.Kind != stream.KindAbort) {
			continue
		}
		w := rebuilt[r.Writer]
		if w == nil {
			t.Fatalf("record %v of a writer the store does not know", r)
		}
		w.Replay(r)
	}
	for id, w := range ws {
		got, want := rebuilt[id].Live, w.Live
		// nil and empty are the same Live.
		if len(got) != len(want) || (len(got) > 0 && !slices.Equal(got, want)) {
			t.Fatalf("writer %q: replayed Live %v, want %v", id, got, want)
		}
	}
}

// TestErrorMessages makes sure the typed errors print their details.
func TestErrorMessages(t *testing.T) {
	for _, err := range []error{
		&stream.FencedError{Attempt: 1, Current: 2},
		&stream.GapError{Expected: 3, Got: 5},
		&stream.ConflictError{Seq: 1, Offset: 7},
	} {
		if s := err.Error(); !strings.ContainsAny(s, "123457") {
			t.Errorf("%T: %q", err, s)
		}
	}
	if errors.Is(&stream.FencedError{}, stream.ErrGap) || errors.Is(&stream.GapError{}, stream.ErrConflict) || errors.Is(&stream.ConflictError{}, stream.ErrFenced) {
		t.Error("typed errors match other sentinels")
	}
}

func TestStringers(t *testing.T) {
	for k := stream.KindData; k <= stream.KindReopen; k++ {
		if p, ok := stream.ParseKind(k.String()); !ok || p != k {
			t.Errorf("ParseKind(%q) = %v, %v", k.String(), p, ok)
		}
	}
	if _, ok := stream.ParseKind("kind(9)"); ok {
		t.Error("ParseKind accepts kind(9)")
	}
	for _, v := range []stream.View{stream.Live, stream.CommittedView} {
		if p, ok := stream.ParseView(v.String()); !ok || p != v {
			t.Errorf("ParseView(%q) = %v, %v", v.String(), p, ok)
		}
	}
	if v, ok := stream.ParseView(""); !ok || v != stream.Live {
		t.Error(`ParseView("") is not Live`)
	}
	if _, ok := stream.ParseView("raw"); ok {
		t.Error(`ParseView("raw") ok`)
	}
	want := map[string]string{
		stream.Appended.String(): "appended", stream.Adopted.String(): "adopted", stream.Retransmit.String(): "retransmit",
		stream.WriterOpen.String(): "open", stream.WriterCommitted.String(): "committed", stream.WriterAborted.String(): "aborted",
	}
	for got, w := range want {
		if got != w {
			t.Errorf("%q, want %q", got, w)
		}
	}
}

// A full stream still acknowledges retransmits and lets a retried attempt
// adopt what the earlier one wrote; only new data is refused.
func TestByteLimit(t *testing.T) {
	var h stream.Head
	w := &stream.Writer{ID: "step"}
	req := func(a, s int64, limit int64, chunks ...string) *stream.AppendRequest {
		r := &stream.AppendRequest{Attempt: a, FirstSeq: s, MaxBytes: limit}
		for _, c := range chunks {
			r.Chunks = append(r.Chunks, []byte(c))
		}
		return r
	}
	var held int64
	do := func(r *stream.AppendRequest) ([]stream.Ack, error) {
		r.Bytes = held
		acks, recs, err := stream.Append(&h, w, r)
		held += stream.DataBytes(recs)
		return acks, err
	}
	if _, err := do(req(1, 0, 6, "abc", "def")); err != nil {
		t.Fatal(err)
	}
	if _, err := do(req(1, 0, 6, "abc", "def")); err != nil {
		t.Fatalf("retransmit to a full stream: %v", err)
	}
	acks, err := do(req(2, 0, 6, "abc", "def"))
	if err != nil || acks[0].Outcome != stream.Adopted || acks[1].Outcome != stream.Adopted {
		t.Fatalf("adoption on a full stream: %v %v", acks, err)
	}
	_, err = do(req(3, 0, 6, "abc", "xyz"))
	var fe *stream.FullError
	if !errors.As(err, &fe) || fe.Holds != 6 || fe.Adding != 3 {
		t.Fatalf("divergent retry on a full stream: %v, want FullError{Holds 6, Adding 3}", err)
	}
	if w.Attempt != 2 {
		t.Fatalf("a refused attempt began: attempt %d", w.Attempt)
	}
	if _, _, err := stream.Append(&h, nil, &stream.AppendRequest{Chunks: [][]byte{{1}}, MaxBytes: 6, Bytes: held}); !errors.Is(err, stream.ErrFull) {
		t.Fatalf("anonymous append to a full stream: %v", err)
	}
	if _, _, err := stream.Append(&h, nil, &stream.AppendRequest{Chunks: [][]byte{{1}}, MaxBytes: 7, Bytes: held}); err != nil {
		t.Fatalf("an append that fits: %v", err)
	}
}
