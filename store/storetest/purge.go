package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// testPurge checks retention: PurgeRuns deletes finished runs that ended
// before a time, with everything they hold, in batches, and nothing else.
func testPurge(t *testing.T, h harness) {
	t.Run("DeletesFinishedRunsAndTheirStreams", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		// old: finished with events, a fence, two streams (one with a
		// committed writer, one closed by the run's end).
		epoch := startRun(t, s, "old")
		out := openRunStream(t, s, "old", "out")
		side := openRunStream(t, s, "old", "side")
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "old", LeaseEpoch: epoch,
			Events: []store.Event{{Type: store.EventStepStarted, Op: 1, Attempt: 1}},
			Fence:  &store.Fence{Writer: "step/1", Attempt: 1}}))
		appendOK(t, s, out.ID, "step/1", 1, 0, "a", "b")
		appendOK(t, s, side.ID, "", 0, 0, "x")
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "old", LeaseEpoch: epoch,
			Events: []store.Event{{Type: store.EventStepCompleted, Op: 1, Attempt: 1}, {Type: store.EventRunCompleted}},
			Finish: &store.Finish{Writer: "step/1", Attempt: 1, Commit: true},
			Status: store.RunCompleted, CloseStreams: true}))
		time.Sleep(5 * time.Millisecond)
		cut := time.Now()
		time.Sleep(5 * time.Millisecond)
		// recent: finished after the cut. running: not finished. A
		// standalone stream belongs to no run.
		epoch = startRun(t, s, "recent")
		recent := openRunStream(t, s, "recent", "out")
		appendOK(t, s, recent.ID, "", 0, 0, "r")
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "recent", LeaseEpoch: epoch, Status: store.RunFailed, Error: "x", CloseStreams: true}))
		startRun(t, s, "running")
		running := openRunStream(t, s, "running", "out")
		appendOK(t, s, running.ID, "", 0, 0, "y")
		solo := openStream(t, s, "solo")
		appendOK(t, s, solo.ID, "", 0, 0, "z")

		n, err := s.PurgeRuns(ctx(t), &store.PurgeRunsParams{Before: cut})
		must(t, err)
		if n != 1 {
			t.Fatalf("purged %d runs, want 1", n)
		}
		_, err = s.GetRun(ctx(t), "old")
		wantErr(t, err, store.ErrNotFound)
		_, err = s.ListEvents(ctx(t), "old", 0)
		wantErr(t, err, store.ErrNotFound)
		for _, si := range []*store.StreamInfo{out, side} {
			_, err = s.GetStream(ctx(t), si.ID)
			wantErr(t, err, store.ErrNotFound)
			_, err = s.Read(ctx(t), &store.ReadParams{StreamID: si.ID})
			wantErr(t, err, store.ErrNotFound)
			_, err = s.OpenStream(ctx(t), &store.OpenStreamParams{Path: si.Path})
			wantErr(t, err, store.ErrNotFound)
		}
		if list, err := s.ListStreams(ctx(t), "old"); err != nil || len(list) != 0 {
			t.Fatalf("ListStreams(old) = %v, %v", list, err)
		}
		// Everything else is intact.
		for id, want := range map[int64][]string{recent.ID: {"r"}, running.ID: {"y"}, solo.ID: {"z"}} {
			log := readAll(t, s, id)
			var got []string
			for _, r := range log {
				if r.Kind == stream.KindData {
					got = append(got, string(r.Data))
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("stream %d after purge: %v", id, log)
			}
		}
		for _, id := range []string{"recent", "running"} {
			if _, err := s.GetRun(ctx(t), id); err != nil {
				t.Fatalf("run %s after purge: %v", id, err)
			}
		}
		// Nothing more before the cut.
		n, err = s.PurgeRuns(ctx(t), &store.PurgeRunsParams{Before: cut})
		must(t, err)
		if n != 0 {
			t.Fatalf("second purge deleted %d runs", n)
		}

		// The id is free: a new run of that id starts afresh, its stream
		// too, and nothing of the old fence stays.
		epoch = startRun(t, s, "old")
		evs, err := s.ListEvents(ctx(t), "old", 0)
		must(t, err)
		if len(evs) != 0 {
			t.Fatalf("the new run has the old one's events %v", evs)
		}
		again := openRunStream(t, s, "old", "out")
		if again.ID == out.ID || again.NextOffset != 0 || again.Closed {
			t.Fatalf("the new run's stream = %+v (old id %d)", again, out.ID)
		}
		res := appendOK(t, s, again.ID, "step/1", 1, 0, "a")
		if res.Acks[0] != (stream.Ack{Offset: 0, Outcome: stream.Appended}) {
			t.Fatalf("append on the new run's stream: %v", res.Acks)
		}
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "old", LeaseEpoch: epoch,
			Finish: &store.Finish{Writer: "step/1", Attempt: 1, Commit: true}}))
	})

	t.Run("InBatches", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		for i := range 5 {
			id := fmt.Sprintf("r%d", i)
			epoch := startRun(t, s, id)
			si := openRunStream(t, s, id, "out")
			appendOK(t, s, si.ID, "", 0, 0, "x")
			must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: id, LeaseEpoch: epoch, Status: store.RunCancelled, CloseStreams: true}))
		}
		before := time.Now().Add(time.Second)
		var got []int
		for {
			n, err := s.PurgeRuns(ctx(t), &store.PurgeRunsParams{Before: before, Limit: 2})
			must(t, err)
			got = append(got, n)
			if n < 2 {
				break
			}
		}
		if !slices.Equal(got, []int{2, 2, 1}) {
			t.Fatalf("batches %v, want [2 2 1]", got)
		}
		runs, err := s.ListRuns(ctx(t), &store.ListRunsParams{})
		must(t, err)
		if len(runs) != 0 {
			t.Fatalf("runs left: %v", runIDs(runs))
		}
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		_, err := s.PurgeRuns(ctx(t), &store.PurgeRunsParams{})
		wantErr(t, err, store.ErrInvalid)
		_, err = s.PurgeRuns(ctx(t), &store.PurgeRunsParams{Before: time.Now(), Limit: -1})
		wantErr(t, err, store.ErrInvalid)
	})
}
