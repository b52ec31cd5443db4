package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// testReopen checks what a restart must keep: the stores' caches are gone,
// the database is the same.
func testReopen(t *testing.T, h harness) {
	if h.Harness.Reopen == nil {
		t.Skip("no Reopen hook")
	}

	t.Run("DurableStreamsStateSurvives", func(t *testing.T) { t.Parallel(); testDSReopen(t, h) })

	t.Run("WriterStateSurvives", func(t *testing.T) {
		t.Parallel()
		// The same history, once without and once with restarts, must give
		// the same replies and the same log.
		plain := writerScenario(t, h.New(t), func(s store.Full) store.Full { return s })
		reopened := writerScenario(t, h.New(t), func(s store.Full) store.Full { return h.Reopen(t, s) })
		if !slices.Equal(plain, reopened) {
			t.Fatalf("with restarts the history differs:\n without %q\n with    %q", plain, reopened)
		}
	})

	t.Run("OffsetsAndRunsSurvive", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Events: []store.Event{{Type: store.EventRunStarted}}}))
		si := openRunStream(t, s, "r1", "out")
		closed := openStream(t, s, "closed")
		appendOK(t, s, si.ID, "", 0, 0, "a", "b", "c")
		appendOK(t, s, closed.ID, "", 0, 0, "x")
		_, err := s.CloseStream(ctx(t), closed.ID)
		must(t, err)
		s = h.Reopen(t, s)

		res := appendOK(t, s, si.ID, "", 0, 0, "d", "e")
		if res.Acks[0].Offset != 3 || res.NextOffset != 5 {
			t.Fatalf("after reopen: acks %v next %d, want offsets from 3", res.Acks, res.NextOffset)
		}
		appendErr(t, s, closed.ID, "", 0, 0, stream.ErrClosed, "y")
		if r, _ := s.CloseStream(ctx(t), closed.ID); r != stream.Already {
			t.Fatalf("closing a closed stream after reopen = %v, want Already", r)
		}
		r, err := s.GetRun(ctx(t), "r1")
		must(t, err)
		if r.LeaseEpoch != epoch || r.LeaseOwner != owner || r.Status != store.RunRunning {
			t.Fatalf("run after reopen = %+v", r)
		}
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Events: []store.Event{{Type: store.EventStepStarted}}}))
		evs, err := s.ListEvents(ctx(t), "r1", 0)
		must(t, err)
		if len(evs) != 2 || evs[1].Seq != 2 {
			t.Fatalf("events after reopen = %+v", evs)
		}
		checkDense(t, readAll(t, s, si.ID), 5)
	})
}

// writerScenario plays a step's history across two attempts, calling restart
// between phases, and returns every reply and the final logs as text.
func writerScenario(t *testing.T, s store.Full, restart func(store.Full) store.Full) []string {
	t.Helper()
	var out []string
	note := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	app := func(id int64, writer string, attempt, seq int64, cs ...string) {
		t.Helper()
		res, err := s.Append(ctx(t), &store.AppendParams{StreamID: id, Writer: writer, Attempt: attempt, FirstSeq: seq, Chunks: chunks(cs...)})
		if err != nil {
			note("append %s a%d s%d: %s", writer, attempt, seq, errKind(err))
			var fe *stream.FencedError
			if errors.As(err, &fe) {
				note("current %d", fe.Current)
			}
			return
		}
		note("append %s a%d s%d: %v next %d", writer, attempt, seq, res.Acks, res.NextOffset)
	}

	epoch := startRun(t, s, "r1")
	out1 := openRunStream(t, s, "r1", "out")
	side := openRunStream(t, s, "r1", "side")
	solo := openStream(t, s, "solo")

	// Attempt 1 writes, interleaved with another step and an anonymous
	// writer, and fails.
	app(out1.ID, "step/1", 1, 0, "a", "b", "c")
	app(out1.ID, "step/2", 1, 0, "x")
	app(out1.ID, "step/1", 1, 3, "d", "e")
	app(out1.ID, "", 0, 0, "n")
	app(solo.ID, "producer", 1, 0, "p0", "p1", "p2")
	must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Fence: &store.Fence{Writer: "step/1", Attempt: 2}}))
	s = restart(s)

	// The zombie is fenced on both streams, even where it never wrote.
	app(out1.ID, "step/1", 1, 5, "f")
	app(side.ID, "step/1", 1, 0, "f")
	// Attempt 2 adopts the identical prefix in two requests, then diverges.
	app(out1.ID, "step/1", 2, 0, "a", "b")
	s = restart(s)
	app(out1.ID, "step/1", 2, 2, "c")
	app(out1.ID, "step/1", 2, 3, "Z", "W")
	app(solo.ID, "producer", 2, 0, "p0", "q1")
	s = restart(s)

	// Retransmits of both attempts' acknowledged chunks, then a conflict.
	app(out1.ID, "step/1", 2, 3, "Z")
	app(out1.ID, "step/1", 2, 1, "b", "c", "Z", "W", "V")
	app(out1.ID, "step/1", 2, 4, "X")
	app(solo.ID, "producer", 2, 1, "q1")
	s = restart(s)

	must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Finish: &store.Finish{Writer: "step/1", Attempt: 2, Commit: true}}))
	r, err := s.FinishWriter(ctx(t), &store.FinishWriterParams{StreamID: solo.ID, Writer: "producer", Attempt: 2, Commit: true})
	must(t, err)
	note("commit producer: %v", r)
	s = restart(s)

	r, err = s.FinishWriter(ctx(t), &store.FinishWriterParams{StreamID: out1.ID, Writer: "step/1", Attempt: 2, Commit: true})
	must(t, err)
	note("commit again: %v", r)
	app(out1.ID, "step/1", 2, 0, "a")
	app(out1.ID, "step/1", 2, 6, "new")
	app(out1.ID, "step/2", 1, 1, "y")

	for _, si := range []*store.StreamInfo{out1, side, solo} {
		log := readAll(t, s, si.ID)
		note("%s live: %s", si.Path, kinds(log))
		note("%s committed: %q", si.Path, committed(log))
	}
	return out
}
