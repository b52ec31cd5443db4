package storetest

import (
	"bytes"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
)

// LeavesRunDataUnread checks that a read that asks whether a run is
// there, not what it holds, reads none of the run's input: a run event's
// key the run never set (GetRunEvent: the run exists, the key does not),
// and a create that finds the run at its id (CreateRunParams.ElideFound,
// SameInput), queued or not. A server's wait for such a key looks at
// every backoff, and a client may send a start naming a run again and
// again: each read a run with a 15 MiB input whole, 31 ms, the start's
// in the writer (red team, round nineteen). A found run within the bound
// still comes whole, and a key's input is still compared.
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
	allocated := func(f func()) uint64 { return allocatedBy(tries, f) }
	n := allocated(func() {
		_, err := s.GetRunEvent(ctx(t), "big", "never")
		wantErr(t, err, store.ErrNotFound)
	})
	if n >= big {
		t.Errorf("%d GetRunEvent of a key never set allocated %d bytes: the run's input (%d bytes) was read", tries, n, big)
	}
	_, err = s.GetRunEvent(ctx(t), "nope", "never")
	wantErr(t, err, store.ErrNotFound)

	// A create that finds the run: elided, unread, whatever its own
	// input (a small one: the create's own bytes are not the run's).
	must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "q", Concurrency: 1}))
	for _, queue := range []string{"", "q"} {
		for _, same := range []bool{false, true} {
			p := &store.CreateRunParams{ID: "big", Workflow: "wf", Input: []byte(`1`), ElideFound: true, SameInput: same, Queue: queue}
			n := allocated(func() {
				run, created, err := s.CreateRun(ctx(t), p)
				switch {
				case same:
					wantErr(t, err, store.ErrKeyReused)
				case err != nil || created || run.Workflow != "wf":
					t.Fatalf("create finding run big: created %v, %v", created, err)
				case !run.Elided || run.Input != nil:
					t.Errorf("create finding a run of %d bytes: elided %v, %d bytes of input", big, run.Elided, len(run.Input))
				}
			})
			if n >= big {
				t.Errorf("queue %q, same input %v: %d creates finding the run allocated %d bytes: the run's input (%d bytes) was read", queue, same, tries, n, big)
			}
		}
		// The same input, or another of its length: compared, not
		// returned. Another workflow is still a conflict.
		p := &store.CreateRunParams{ID: "big", Workflow: "wf", Input: input, ElideFound: true, SameInput: true, Queue: queue}
		run, created, err := s.CreateRun(ctx(t), p)
		if err != nil || created || !run.Elided || run.Input != nil {
			t.Fatalf("queue %q: create with the run's input: created %v, %v", queue, created, err)
		}
		other := slices.Clone(input)
		other[len(other)/2] = 'j'
		p.Input = other
		_, _, err = s.CreateRun(ctx(t), p)
		wantErr(t, err, store.ErrKeyReused)
		p.Workflow, p.Input = "other", input
		_, _, err = s.CreateRun(ctx(t), p)
		wantErr(t, err, store.ErrRunConflict)
		// Without ElideFound, or within the bound, the run comes whole.
		run, _, err = s.CreateRun(ctx(t), &store.CreateRunParams{ID: "big", Workflow: "wf", Queue: queue})
		if err != nil || run.Elided || !bytes.Equal(run.Input, input) {
			t.Fatalf("queue %q: create without ElideFound: elided %v, %d bytes of input, %v", queue, run.Elided, len(run.Input), err)
		}
	}
	small := []byte(`{"a":1}`)
	_, _, err = s.CreateRun(ctx(t), &store.CreateRunParams{ID: "small", Workflow: "wf", Input: small})
	must(t, err)
	_, _, err = s.CreateRun(ctx(t), &store.CreateRunParams{ID: "none", Workflow: "wf"})
	must(t, err)
	for _, c := range []struct {
		id    string
		input []byte
		ok    bool
	}{{"small", small, true}, {"small", []byte(`{"a":2}`), false}, {"small", nil, false},
		{"none", nil, true}, {"none", []byte(`null`), true}, {"none", []byte(`1`), false}} {
		for _, queue := range []string{"", "q"} {
			run, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: c.id, Workflow: "wf", Input: c.input, ElideFound: true, SameInput: true, Queue: queue})
			if !c.ok {
				wantErr(t, err, store.ErrKeyReused)
				continue
			}
			if err != nil || run.Elided || c.id == "small" && !bytes.Equal(run.Input, small) || c.id == "none" && run.Input != nil {
				t.Fatalf("queue %q: %s with input %s: elided %v, input %s, %v", queue, c.id, c.input, run.Elided, run.Input, err)
			}
		}
	}
}

// tries is how many times the unread checks repeat what they measure.
const tries = 4

// allocatedBy is the bytes the process allocates in n calls of f, after
// one that warms the connections and statements.
func allocatedBy(n int, f func()) uint64 {
	var before, after runtime.MemStats
	f()
	runtime.ReadMemStats(&before)
	for range n {
		f()
	}
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
