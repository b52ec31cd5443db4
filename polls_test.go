package weir_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
)

// The engine's looks at a run for its status or its existence read its
// head, not its data: Wait's poll, a following Read waiting for a stream
// on a run that has not ended, Hooks. Red team, round nineteen audit: each
// read the run whole, a run with a 15 MiB input at every look, a waiter
// every 250 ms at most. Not parallel: it measures the process's
// allocations.
func TestPollsReadNoRunData(t *testing.T) {
	s, _ := openStore(t)
	e := newEngine(t, s, nil)
	const big = 8 << 20
	input := []byte(`"` + strings.Repeat("i", big-2) + `"`)
	// Pending, not runnable for an hour: it does not end while looked at.
	if _, _, err := s.CreateRun(testCtx(t), &store.CreateRunParams{ID: "big", Workflow: "nobody", Input: input, WakeAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	allocated := func(f func()) uint64 {
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		f()
		runtime.ReadMemStats(&b)
		return b.TotalAlloc - a.TotalAlloc
	}
	for _, c := range []struct {
		what string
		f    func()
	}{
		{"4 Hooks", func() {
			for range 4 {
				if _, err := e.Hooks(testCtx(t), "big"); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"a Wait of 300ms", func() {
			ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
			defer cancel()
			if _, err := e.Wait(ctx, "big"); err == nil {
				t.Fatal("the run ended")
			}
		}},
		{"a following Read of 300ms", func() {
			ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
			defer cancel()
			for _, err := range e.Read(ctx, "big", "out", &weir.ReadOptions{Follow: true}) {
				if err == nil {
					t.Fatal("a record of a stream never written")
				}
			}
		}},
	} {
		if n := allocated(c.f); n >= big {
			t.Errorf("%s of a pending run allocated %d bytes: its input (%d bytes) was read", c.what, n, big)
		}
	}
}
