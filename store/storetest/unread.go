package storetest

import (
	"runtime"
	"strings"
	"testing"

	"github.com/weirhq/weir/store"
)

// LeavesRunDataUnread checks that a read that asks whether a run is
// there, not what it holds, reads none of the run's input: a run event's
// key the run never set (GetRunEvent: the run exists, the key does not).
// A server's wait for such a key looks at every backoff, and each look
// read a run with a 15 MiB input whole, 31 ms (red team, round
// nineteen).
//
// It measures the bytes the process allocates (a value read is copied
// into the heap at least once, by either driver), so it must run with no
// other test in the process: call it from a top-level test that is not
// parallel, on a store of its own.
func LeavesRunDataUnread(t *testing.T, st store.Store) {
	s := store.Capable(st)
	const big = 8 << 20
	input := []byte(`"` + strings.Repeat("i", big-2) + `"`)
	_, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "big", Workflow: "wf", Input: input})
	must(t, err)
	const tries = 4
	allocated := func(f func()) uint64 {
		var before, after runtime.MemStats
		f() // the connections and statements warm
		runtime.ReadMemStats(&before)
		for range tries {
			f()
		}
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	n := allocated(func() {
		_, err := s.GetRunEvent(ctx(t), "big", "never")
		wantErr(t, err, store.ErrNotFound)
	})
	if n >= big {
		t.Errorf("%d GetRunEvent of a key never set allocated %d bytes: the run's input (%d bytes) was read", tries, n, big)
	}
	_, err = s.GetRunEvent(ctx(t), "nope", "never")
	wantErr(t, err, store.ErrNotFound)
}
