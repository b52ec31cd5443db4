package stream_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/weirhq/weir/stream"
)

// TestVoidsAbortFirst: a zero Voids is documented as ready to use, and a
// live reader may start at any offset, so the first record it sees can be an
// abort (or a writer may abort having written nothing, e.g. an attempt begun
// by an empty append). Push must return nothing, not panic on its nil map.
func TestVoidsAbortFirst(t *testing.T) {
	for name, recs := range map[string][]stream.Record{
		"reader starting at an abort": {
			{Offset: 7, Kind: stream.KindAbort, Writer: "s", Attempt: 2, Seq: 1},
		},
		"abort after only attempt-0 data": {
			{Offset: 0, Kind: stream.KindData, Writer: "wf", Seq: 0, Data: []byte("x")},
			{Offset: 1, Kind: stream.KindAbort, Writer: "s", Attempt: 1},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var v stream.Voids
			for i := range recs {
				func() {
					defer func() {
						if p := recover(); p != nil {
							t.Fatalf("Push(%v) panicked: %v", recs[i], p)
						}
					}()
					if got := v.Push(&recs[i]); len(got) != 0 {
						t.Fatalf("Push(%v) = %v, want nothing", recs[i], got)
					}
				}()
			}
		})
	}
}

// The same history through the rules: an attempt begun by an empty append,
// then aborted for good.
func TestVoidsAbortOfEmptyAttempt(t *testing.T) {
	m := newTStream()
	for _, o := range []rop{app("s", 1, 0), abort("s", 1)} {
		if r := m.do(o); r.err != nil {
			t.Fatal(r.err)
		}
	}
	if got := recStrings(m.log); !slices.Equal(got, []string{"0:abort{s a1 from 0}"}) {
		t.Fatalf("log %q", got)
	}
	var v stream.Voids
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("Voids.Push panicked: %v", p)
		}
	}()
	if got := v.Push(&m.log[0]); len(got) != 0 {
		t.Fatalf("voided %v", got)
	}
}

func TestVoids(t *testing.T) {
	m := newTStream()
	var v stream.Voids
	var voided []int64
	do := func(o rop) {
		t.Helper()
		r := m.do(o)
		if r.err != nil {
			t.Fatalf("%v: %v", o, r.err)
		}
		for i := range r.recs {
			voided = append(voided, v.Push(&r.recs[i])...)
		}
	}
	do(app("s", 1, 0, "x", "y", "z")) // 0 1 2
	do(app("t", 1, 0, "p"))           // 3
	do(app("wf", 0, 0, "w"))          // 4
	do(app("s", 2, 0, "x", "Q"))      // adopt 0, 5 abort from 1, 6 Q
	if !slices.Equal(voided, []int64{1, 2}) {
		t.Fatalf("after divergence voided %v", voided)
	}
	do(commit("s", 2)) // 7
	do(app("u", 1, 0, "a", "b"))
	do(app("u", 2, 0, "a"))
	do(commit("u", 2)) // abort from 1 voids b
	if !slices.Equal(voided, []int64{1, 2, 9}) {
		t.Fatalf("after commit of a shorter attempt voided %v", voided)
	}
	do(closeOp()) // t is open: its record 3 is void; committed and attempt-0 records are not
	if !slices.Equal(voided, []int64{1, 2, 9, 3}) {
		t.Fatalf("after close voided %v", voided)
	}
}

// TestCommittedLastStableOffset walks a small history and checks what the
// committed view releases and where it would resume.
func TestCommittedLastStableOffset(t *testing.T) {
	m := newTStream()
	var f stream.Committed
	var out []string
	step := func(o rop, wantNext int64, wantOut ...string) {
		t.Helper()
		r := m.do(o)
		if r.err != nil {
			t.Fatalf("%v: %v", o, r.err)
		}
		out = out[:0]
		for i := range r.recs {
			f.Push(&r.recs[i], func(c *stream.Record) { out = append(out, c.String()) })
		}
		if !slices.Equal(out, wantOut) && len(out)+len(wantOut) > 0 {
			t.Fatalf("%v released %q, want %q", o, out, wantOut)
		}
		if got := f.NextOffset(); got != wantNext {
			t.Fatalf("%v: NextOffset %d, want %d", o, got, wantNext)
		}
	}
	step(anon("a"), 1, `0:data{ a0 s0 "a"}`)
	step(app("s", 1, 0, "x"), 1)
	step(anon("b"), 1) // waits behind s
	step(app("t", 1, 0, "p"), 1)
	// 4 aborts 1, 5 is Q: the last stable offset moves to t's 3, releasing b.
	step(app("s", 2, 0, "Q"), 3, `2:data{ a0 s0 "b"}`)
	if f.Pending() != 2 {
		t.Fatalf("pending %d", f.Pending())
	}
	step(commit("t", 1), 5, `3:data{t a1 s0 "p"}`)
	step(commit("s", 2), 8, `5:data{s a2 s0 "Q"}`)
	step(closeOp(), 9, "8:close")
	step(closeOp(), 9)
}

// TestCommittedOpenAtClose: writers still open at the close never commit.
func TestCommittedOpenAtClose(t *testing.T) {
	m := newTStream()
	for _, o := range []rop{app("s", 1, 0, "x"), anon("a"), app("wf", 0, 0, "w"), closeOp()} {
		if r := m.do(o); r.err != nil {
			t.Fatal(r.err)
		}
	}
	var got []string
	for _, r := range committedView(m.log, 0) {
		got = append(got, r.String())
	}
	want := []string{`1:data{ a0 s0 "a"}`, `2:data{wf a0 s0 "w"}`, "3:close"}
	if !slices.Equal(got, want) {
		t.Fatalf("committed view %q, want %q", got, want)
	}
}

// A resumed run's stream: a step's attempt aborted for good, the close, a
// reopen, the writer revived and its new attempt committed. The committed
// view holds the close and the reopen in order and the new attempt's
// chunks, never the aborted attempt's.
func TestReopenAndRevive(t *testing.T) {
	h := &stream.Head{}
	w := &stream.Writer{ID: "step/2"}
	var log []stream.Record
	add := func(recs []stream.Record) { log = append(log, recs...) }
	_, recs, err := stream.Append(h, w, &stream.AppendRequest{Attempt: 1, Chunks: [][]byte{[]byte("x"), []byte("y")}})
	if err != nil {
		t.Fatal(err)
	}
	add(recs)
	_, recs, err = stream.Abort(h, w, 1)
	if err != nil {
		t.Fatal(err)
	}
	add(recs)
	_, recs = stream.Close(h)
	add(recs)
	if _, _, err := stream.Append(h, w, &stream.AppendRequest{Attempt: 2, Chunks: [][]byte{[]byte("z")}}); !errors.Is(err, stream.ErrClosed) && !errors.Is(err, stream.ErrWriterFinished) {
		t.Fatalf("append before the reopen: %v", err)
	}
	if res, recs := stream.Reopen(&stream.Head{NextOffset: 9}); res != stream.Already || recs != nil {
		t.Fatalf("reopen of an open stream: %v %v", res, recs)
	}
	res, recs := stream.Reopen(h)
	if res != stream.Done || len(recs) != 1 || recs[0].Kind != stream.KindReopen || h.Closed {
		t.Fatalf("reopen: %v %v %+v", res, recs, h)
	}
	add(recs)
	if _, _, err := stream.Append(h, w, &stream.AppendRequest{Attempt: 2, Chunks: [][]byte{[]byte("z")}}); !errors.Is(err, stream.ErrWriterFinished) {
		t.Fatalf("append by an aborted writer: %v, want ErrWriterFinished", err)
	}
	if !stream.Revive(w) || stream.Revive(w) || stream.Revive(nil) {
		t.Fatal("Revive: want true once")
	}
	_, recs, err = stream.Append(h, w, &stream.AppendRequest{Attempt: 2, Chunks: [][]byte{[]byte("x"), []byte("z")}})
	if err != nil {
		t.Fatal(err)
	}
	add(recs)
	if _, _, err := stream.Append(h, w, &stream.AppendRequest{Attempt: 1, Chunks: [][]byte{[]byte("q")}}); !errors.Is(err, stream.ErrFenced) {
		t.Fatalf("the old attempt after a revive: %v, want ErrFenced", err)
	}
	_, recs, err = stream.Commit(h, w, 2)
	if err != nil {
		t.Fatal(err)
	}
	add(recs)
	var got []string
	for _, r := range committedView(log, 0) {
		got = append(got, r.String())
	}
	want := []string{"3:close", "4:reopen", `5:data{step/2 a2 s0 "x"}`, `6:data{step/2 a2 s1 "z"}`}
	if !slices.Equal(got, want) {
		t.Fatalf("committed view %q, want %q", got, want)
	}
}
