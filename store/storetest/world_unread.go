package storetest

import (
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/world"
)

// LeavesWorldRunDataUnread checks that what asks a World run's state, not
// what it holds, reads none of its input: the list of its events (a
// token-less GET a UI polls every 500 ms), the open of one of its streams
// (red team, round nineteen audit). A run may carry a 15 MiB input.
//
// It measures the bytes the process allocates, as LeavesRunDataUnread
// does: call it from a top-level test that is not parallel, on a store of
// its own.
func LeavesWorldRunDataUnread(t *testing.T, st store.Store) {
	s := store.Capable(st)
	const big = 8 << 20
	input := `"` + strings.Repeat("i", big-2) + `"`
	res, err := wevErr(t, s, "wrun_big", world.RunCreated, "", jmap{"deploymentId": "dpl_1", "workflowName": "wf//big", "input": json.RawMessage(input)})
	must(t, err)
	if len(res.Run.Input) != big {
		t.Fatalf("run_created: an input of %d bytes, want %d", len(res.Run.Input), big)
	}
	wev(t, s, "wrun_big", world.RunStarted, "", nil)
	const tries = 4
	allocated := func(what string, f func()) {
		t.Helper()
		var before, after runtime.MemStats
		f() // the connections and statements warm
		runtime.ReadMemStats(&before)
		for range tries {
			f()
		}
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n >= big {
			t.Errorf("%d × %s allocated %d bytes: the run's input (%d bytes) was read", tries, what, n, big)
		}
	}

	// A page past the run_created event, whose data is the input.
	allocated("a page of the run's events", func() {
		page, err := s.WorldEvents(ctx(t), &store.WorldListParams{RunID: "wrun_big", Cursor: "1"})
		must(t, err)
		if len(page.Data) != 1 || page.Data[0].EventType != world.RunStarted {
			t.Fatalf("events past the first: %+v, want run_started", page.Data)
		}
	})
	_, err = s.WorldEvents(ctx(t), &store.WorldListParams{RunID: "wrun_none"})
	wantErr(t, err, world.ErrRunNotFound)

	allocated("an open of the run's stream", func() {
		if _, err := s.WorldOpenStream(ctx(t), "wrun_big", "strm_1"); err != nil {
			t.Fatal(err)
		}
	})
	n := 0
	allocated("an open of a new stream of the run", func() {
		n++
		if _, err := s.WorldOpenStream(ctx(t), "wrun_big", "strm_new"+strings.Repeat("x", n)); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := s.WorldOpenStream(ctx(t), "wrun_none", "strm_2"); !errors.Is(err, world.ErrRunNotFound) {
		t.Fatalf("open of a stream of no run: %v, want ErrRunNotFound", err)
	}
}
