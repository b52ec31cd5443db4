package storetest

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

func testRecord(t *testing.T, h harness) {
	t.Run("EventsGetDenseSeqs", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
		wake := at.Add(time.Hour)
		first := []store.Event{
			{Type: store.EventRunStarted},
			{Type: store.EventStepStarted, Op: 1, Name: "fetch", Attempt: 1, At: at},
		}
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Events: first}))
		second := []store.Event{
			{Type: store.EventStepFailed, Op: 1, Name: "fetch", Attempt: 1, Error: "timeout", Final: false, WakeAt: wake},
			{Type: store.EventStepCompleted, Op: 1, Name: "fetch", Attempt: 2, Data: []byte(`"ok"`)},
		}
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Events: second}))
		evs, err := s.ListEvents(ctx(t), "r1", 0)
		must(t, err)
		want := append(first, second...)
		if len(evs) != len(want) {
			t.Fatalf("got %d events, want %d", len(evs), len(want))
		}
		for i, e := range evs {
			w := want[i]
			if e.Seq != int64(i+1) || e.Type != w.Type || e.Op != w.Op || e.Name != w.Name || e.Attempt != w.Attempt ||
				!bytes.Equal(e.Data, w.Data) || e.Error != w.Error || e.Final != w.Final || !e.WakeAt.Equal(w.WakeAt) {
				t.Fatalf("event %d = %+v, want %+v with seq %d", i, e, w, i+1)
			}
			if e.At.IsZero() || !w.At.IsZero() && !e.At.Equal(w.At) {
				t.Fatalf("event %d at %v, want %v (or the store's clock if zero)", i, e.At, w.At)
			}
		}
		evs, err = s.ListEvents(ctx(t), "r1", 2)
		must(t, err)
		if len(evs) != 2 || evs[0].Seq != 3 {
			t.Fatalf("events after 2 = %+v", evs)
		}
	})

	t.Run("StaleEpochWritesNothing", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		si := openRunStream(t, s, "r1", "out")
		appendOK(t, s, si.ID, "step/1", 1, 0, "a")
		err := s.Advance(ctx(t), &store.AdvanceParams{
			RunID: "r1", LeaseEpoch: epoch + 1,
			Events:       []store.Event{{Type: store.EventRunCompleted}},
			Finish:       &store.Finish{Writer: "step/1", Attempt: 1, Commit: true},
			Status:       store.RunCompleted,
			CloseStreams: true,
		})
		wantErr(t, err, store.ErrLeaseLost)
		evs, err := s.ListEvents(ctx(t), "r1", 0)
		must(t, err)
		r, err := s.GetRun(ctx(t), "r1")
		must(t, err)
		if len(evs) != 0 || r.Status != store.RunRunning || r.LeaseOwner != owner {
			t.Fatalf("after a fenced Advance: events %v, run %+v", evs, r)
		}
		if log := readAll(t, s, si.ID); len(log) != 1 {
			t.Fatalf("after a fenced Advance the stream has %v", log)
		}
		err = s.Advance(ctx(t), &store.AdvanceParams{RunID: "nope", LeaseEpoch: 1})
		wantErr(t, err, store.ErrNotFound)
	})

	t.Run("StatusOutputError", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Status: store.RunCompleted, Output: []byte("42")}))
		r, err := s.GetRun(ctx(t), "r1")
		must(t, err)
		if r.Status != store.RunCompleted || string(r.Output) != "42" || r.LeaseOwner != "" {
			t.Fatalf("completed run = %+v", r)
		}
		epoch = startRun(t, s, "r2")
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r2", LeaseEpoch: epoch, Status: store.RunFailed, Error: "boom"}))
		r, err = s.GetRun(ctx(t), "r2")
		must(t, err)
		if r.Status != store.RunFailed || r.Error != "boom" || r.LeaseOwner != "" {
			t.Fatalf("failed run = %+v", r)
		}
		err = s.Advance(ctx(t), &store.AdvanceParams{RunID: "r2", LeaseEpoch: epoch, Status: "bogus"})
		wantErr(t, err, store.ErrInvalid)
	})

	t.Run("TerminalReleasesForever", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Status: store.RunCancelled, Error: "cancelled"}))
		runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 10, LeaseTTL: ttl, Now: time.Now().Add(1000 * time.Hour)})
		must(t, err)
		if len(runs) != 0 {
			t.Fatalf("claimed a finished run: %v", runIDs(runs))
		}
		// The run is over: even its last lease holder records nothing more.
		err = s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Events: []store.Event{{Type: store.EventRunStarted}}})
		wantErr(t, err, store.ErrLeaseLost)
	})

	t.Run("ReleaseParksUntilWakeAt", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		wake := time.Now().Add(time.Hour)
		must(t, s.Advance(ctx(t), &store.AdvanceParams{
			RunID: "r1", LeaseEpoch: epoch, Release: true, WakeAt: wake,
			Events: []store.Event{{Type: store.EventSleepScheduled, Op: 1, WakeAt: wake}},
		}))
		r, err := s.GetRun(ctx(t), "r1")
		must(t, err)
		if r.LeaseOwner != "" || !r.WakeAt.Equal(wake) || r.Status != store.RunRunning {
			t.Fatalf("parked run = %+v", r)
		}
		// A released lease is not held: its epoch records nothing.
		err = s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Events: []store.Event{{Type: store.EventSleepFired}}})
		wantErr(t, err, store.ErrLeaseLost)
		claim := func(at time.Time) []*store.Run {
			runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 1, LeaseTTL: ttl, Now: at})
			must(t, err)
			return runs
		}
		if runs := claim(wake.Add(-time.Second)); len(runs) != 0 {
			t.Fatal("claimed before WakeAt")
		}
		runs := claim(wake.Add(time.Second))
		if len(runs) != 1 || runs[0].LeaseEpoch != epoch+1 {
			t.Fatalf("claim after WakeAt = %+v", runs)
		}
		// Release without WakeAt: claimable at once.
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch + 1, Release: true}))
		if runs := claim(time.Now()); len(runs) != 1 {
			t.Fatal("a run released without WakeAt is not claimable")
		}
	})

	t.Run("CloseStreamsClosesTheRunsStreams", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		a := openRunStream(t, s, "r1", "a")
		b := openRunStream(t, s, "r1", "b")
		appendOK(t, s, a.ID, "", 0, 0, "x")
		other := openStream(t, s, "standalone")
		startRun(t, s, "r2")
		r2s := openRunStream(t, s, "r2", "a")
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Status: store.RunCompleted, CloseStreams: true}))
		for _, c := range []struct {
			si     *store.StreamInfo
			closed bool
			next   int64
		}{{a, true, 2}, {b, true, 1}, {other, false, 0}, {r2s, false, 0}} {
			si, err := s.GetStream(ctx(t), c.si.ID)
			must(t, err)
			if si.Closed != c.closed || si.NextOffset != c.next {
				t.Errorf("stream %s: closed %v next %d, want %v %d", si.Path, si.Closed, si.NextOffset, c.closed, c.next)
			}
			if c.closed {
				log := readAll(t, s, si.ID)
				if last := log[len(log)-1]; last.Kind != stream.KindClose {
					t.Errorf("stream %s ends with %v", si.Path, last)
				}
			}
		}
	})

	t.Run("FenceRefusesOlderAttemptsOnEveryStream", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		a := openRunStream(t, s, "r1", "a")
		b := openRunStream(t, s, "r1", "b")
		appendOK(t, s, a.ID, "step/1", 1, 0, "a0")
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Fence: &store.Fence{Writer: "step/1", Attempt: 2}}))
		for _, si := range []*store.StreamInfo{a, b} {
			// b: the writer never wrote there, and attempt 2 has not either.
			err := appendErr(t, s, si.ID, "step/1", 1, 1, stream.ErrFenced, "a1")
			var fe *stream.FencedError
			if !errors.As(err, &fe) || fe.Current != 2 || fe.Attempt != 1 {
				t.Fatalf("stream %s: err = %#v, want *stream.FencedError{Attempt: 1, Current: 2}", si.Path, err)
			}
		}
		// Nor can the fenced attempt commit or abort, though on a the writer
		// itself is still at attempt 1: a fenced attempt adds no record.
		for _, commit := range []bool{true, false} {
			err := s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Finish: &store.Finish{Writer: "step/1", Attempt: 1, Commit: commit}})
			wantErr(t, err, stream.ErrFenced)
		}
		res := appendOK(t, s, a.ID, "step/1", 2, 0, "a0", "a1")
		if res.Acks[0] != (stream.Ack{Offset: 0, Outcome: stream.Adopted}) || res.Acks[1].Outcome != stream.Appended {
			t.Fatalf("attempt 2 acks = %v", res.Acks)
		}
		appendOK(t, s, b.ID, "step/1", 2, 0, "b0")
		// Other writers and standalone streams are not fenced.
		appendOK(t, s, a.ID, "step/2", 1, 0, "c0")
		appendOK(t, s, a.ID, "", 0, 0, "anon")
		// A fence never goes down.
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Fence: &store.Fence{Writer: "step/1", Attempt: 1}}))
		appendErr(t, s, b.ID, "step/1", 1, 0, stream.ErrFenced, "b0")
	})

	t.Run("FinishCommitsEveryStreamTheWriterWrote", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		a := openRunStream(t, s, "r1", "a")
		b := openRunStream(t, s, "r1", "b")
		c := openRunStream(t, s, "r1", "c")
		appendOK(t, s, a.ID, "step/1", 1, 0, "a0", "a1")
		appendOK(t, s, b.ID, "step/1", 1, 0, "b0")
		appendOK(t, s, c.ID, "step/2", 1, 0, "c0")
		must(t, s.Advance(ctx(t), &store.AdvanceParams{
			RunID: "r1", LeaseEpoch: epoch,
			Events: []store.Event{{Type: store.EventStepCompleted, Op: 1, Attempt: 1}},
			Finish: &store.Finish{Writer: "step/1", Attempt: 1, Commit: true},
		}))
		for _, x := range []struct {
			si    *store.StreamInfo
			count int64
		}{{a, 2}, {b, 1}} {
			log := readAll(t, s, x.si.ID)
			last := log[len(log)-1]
			if last.Kind != stream.KindCommit || last.Writer != "step/1" || last.Attempt != 1 || last.Count() != x.count {
				t.Fatalf("stream %s: last record %v, want commit{step/1 a1 count %d}", x.si.Path, last, x.count)
			}
		}
		if log := readAll(t, s, c.ID); len(log) != 1 {
			t.Fatalf("stream c, where step/1 never wrote, has %v", log)
		}
		if got := committed(readAll(t, s, a.ID)); !slices.Equal(got, []string{"a0", "a1"}) {
			t.Fatalf("committed view of a = %q", got)
		}
		// Finished: a new chunk is refused, an exact retransmit acknowledged.
		appendErr(t, s, a.ID, "step/1", 1, 2, stream.ErrWriterFinished, "a2")
		appendOK(t, s, a.ID, "step/1", 1, 1, "a1")
		// A repeated commit is acknowledged and writes nothing.
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Finish: &store.Finish{Writer: "step/1", Attempt: 1, Commit: true}}))
		if log := readAll(t, s, a.ID); len(log) != 3 {
			t.Fatalf("repeated commit wrote: %v", log)
		}
	})

	t.Run("FinishAbortVoidsEveryStream", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		a := openRunStream(t, s, "r1", "a")
		b := openRunStream(t, s, "r1", "b")
		appendOK(t, s, a.ID, "step/1", 1, 0, "a0", "a1")
		appendOK(t, s, b.ID, "step/1", 2, 0, "b0")
		must(t, s.Advance(ctx(t), &store.AdvanceParams{
			RunID: "r1", LeaseEpoch: epoch,
			Events: []store.Event{{Type: store.EventStepFailed, Op: 1, Attempt: 2, Final: true}},
			Finish: &store.Finish{Writer: "step/1", Attempt: 2, Commit: false},
		}))
		for _, si := range []*store.StreamInfo{a, b} {
			log := readAll(t, s, si.ID)
			last := log[len(log)-1]
			if last.Kind != stream.KindAbort || last.Writer != "step/1" || last.FromSeq() != 0 {
				t.Fatalf("stream %s: last record %v, want abort{step/1 from 0}", si.Path, last)
			}
			if got := committed(log); len(got) != 0 {
				t.Fatalf("stream %s: committed view %q after abort", si.Path, got)
			}
		}
		appendErr(t, s, a.ID, "step/1", 3, 0, stream.ErrWriterFinished, "x")
	})

	t.Run("FinishThenFence", func(t *testing.T) {
		// An Advance decides its finish against the fence as it was, then
		// raises its own: the last attempt of a step fails, its output is
		// aborted and it is fenced off the run's other streams at once.
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		a := openRunStream(t, s, "r1", "a")
		b := openRunStream(t, s, "r1", "b")
		appendOK(t, s, a.ID, "step/1", 2, 0, "a0")
		must(t, s.Advance(ctx(t), &store.AdvanceParams{
			RunID: "r1", LeaseEpoch: epoch,
			Events: []store.Event{{Type: store.EventStepFailed, Op: 1, Attempt: 2, Final: true}},
			Finish: &store.Finish{Writer: "step/1", Attempt: 2},
			Fence:  &store.Fence{Writer: "step/1", Attempt: 3},
		}))
		log := readAll(t, s, a.ID)
		if last := log[len(log)-1]; last.Kind != stream.KindAbort || last.Attempt != 2 {
			t.Fatalf("last record %v, want abort{step/1 a2}", last)
		}
		appendErr(t, s, a.ID, "step/1", 2, 1, stream.ErrFenced, "a1")
		appendErr(t, s, b.ID, "step/1", 2, 0, stream.ErrFenced, "b0")
		// A finish below the fence as it was is refused, and writes nothing.
		err := s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch,
			Finish: &store.Finish{Writer: "step/1", Attempt: 2, Commit: true}, Fence: &store.Fence{Writer: "step/1", Attempt: 4}})
		wantErr(t, err, stream.ErrFenced)
		appendOK(t, s, b.ID, "step/1", 3, 0, "b0")
	})

	t.Run("RecordIsAtomic", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		a := openRunStream(t, s, "r1", "a")
		b := openRunStream(t, s, "r1", "b")
		// On a the writer is at attempt 1, on b attempt 2 has begun: a's
		// commit of attempt 1 succeeds, b's is fenced, so neither happens.
		appendOK(t, s, a.ID, "step/1", 1, 0, "a0")
		appendOK(t, s, b.ID, "step/1", 1, 0, "b0")
		appendOK(t, s, b.ID, "step/1", 2, 0, "b0")
		logA, logB := readAll(t, s, a.ID), readAll(t, s, b.ID)
		err := s.Advance(ctx(t), &store.AdvanceParams{
			RunID: "r1", LeaseEpoch: epoch,
			Events:       []store.Event{{Type: store.EventStepCompleted, Op: 1, Attempt: 1}},
			Finish:       &store.Finish{Writer: "step/1", Attempt: 1, Commit: true},
			Fence:        &store.Fence{Writer: "step/9", Attempt: 5},
			Status:       store.RunCompleted,
			CloseStreams: true,
		})
		var fe *stream.FencedError
		if !errors.As(err, &fe) || fe.Current != 2 {
			t.Fatalf("err = %v, want *stream.FencedError with Current 2", err)
		}
		evs, err := s.ListEvents(ctx(t), "r1", 0)
		must(t, err)
		r, err := s.GetRun(ctx(t), "r1")
		must(t, err)
		if len(evs) != 0 || r.Status != store.RunRunning || r.LeaseOwner != owner {
			t.Fatalf("after a failed Advance: events %v, run %+v", evs, r)
		}
		if got := readAll(t, s, a.ID); !slices.EqualFunc(got, logA, sameRecord) {
			t.Fatalf("stream a changed: %v, was %v", got, logA)
		}
		if got := readAll(t, s, b.ID); !slices.EqualFunc(got, logB, sameRecord) {
			t.Fatalf("stream b changed: %v, was %v", got, logB)
		}
		// The fence of the failed Advance did not happen either.
		appendOK(t, s, a.ID, "step/9", 1, 0, "z")
		// And the state the failed Advance touched is intact: attempt 2
		// commits on both; on a, where it wrote nothing, everything attempt
		// 1 wrote is voided.
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Finish: &store.Finish{Writer: "step/1", Attempt: 2, Commit: true}}))
		logA = readAll(t, s, a.ID)
		if want := "0:data{step/1 a1 s0 \"a0\"} 1:data{step/9 a1 s0 \"z\"} 2:abort{step/1 a2 from 0} 3:commit{step/1 a2 count 0} "; kinds(logA) != want {
			t.Fatalf("stream a = %s\nwant       %s", kinds(logA), want)
		}
		if got := committed(readAll(t, s, b.ID)); !slices.Equal(got, []string{"b0"}) {
			t.Fatalf("committed view of b = %q", got)
		}
	})
}
