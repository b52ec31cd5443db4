package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
)

// testQueues: runs that wait in a queue (CreateRunParams.Queue) until
// AdmitRuns lets them start, in line order while the queue's limiter
// allows; dedupe and debounce folding starts; a cancel reaching a queued
// run; concurrent admissions by many workers never beyond the limit; bad
// input refused with nothing changed.
func testQueues(t *testing.T, h harness) {
	newStore := func(t *testing.T) (store.Store, store.Limits) {
		s := h.Harness.New(t)
		l, ok := s.(store.Limits)
		if !ok {
			t.Skip("the store has no store.Limits")
		}
		return s, l
	}
	enqueue := func(t *testing.T, s store.Store, p store.CreateRunParams) *store.Run {
		t.Helper()
		if p.Workflow == "" {
			p.Workflow = "wf"
		}
		r, created, err := s.CreateRun(ctx(t), &p)
		must(t, err)
		if !created {
			t.Fatalf("run %q was not created (folded into %q)", p.ID, r.ID)
		}
		if !r.Queued || r.Queue != p.Queue || r.QueueKey != p.QueueKey || r.Priority != p.Priority || r.Status != store.RunPending {
			t.Fatalf("queued run %+v", r)
		}
		return r
	}
	admit := func(t *testing.T, l store.Limits, owner string, n int, now time.Time) []string {
		t.Helper()
		runs, err := l.AdmitRuns(ctx(t), &store.AdmitRunsParams{Owner: owner, Limit: n, LeaseTTL: time.Minute, Now: now})
		must(t, err)
		var ids []string
		for _, r := range runs {
			if r.Queued || r.Status != store.RunRunning || r.LeaseOwner != owner || r.LeaseEpoch != 1 {
				t.Fatalf("admitted run %+v", r)
			}
			ids = append(ids, r.ID)
		}
		return ids
	}
	end := func(t *testing.T, s store.Store, id string) {
		t.Helper()
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: id, LeaseEpoch: 1, Status: store.RunCompleted, Output: []byte(`1`),
			Events: []store.Event{{Type: store.EventRunCompleted}}}))
	}
	soon := func() time.Time { return time.Now().Add(time.Second) }

	// An admitted run comes with its input, admitted at its start or by
	// AdmitRuns: a backend may read it after the admission's commit
	// (apply.QueueTx.AdmitRun), not with its locks held.
	t.Run("AdmittedWithTheirInput", func(t *testing.T) {
		t.Parallel()
		s, l := newStore(t)
		must(t, l.SetLimiter(ctx(t), &limit.Config{Name: "q", Concurrency: 3}))
		r, created, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "now", Workflow: "wf", Queue: "q", Input: []byte(`"now"`),
			Owner: "w", LeaseTTL: time.Minute})
		must(t, err)
		if !created || r.Queued || string(r.Input) != `"now"` || r.Output != nil {
			t.Fatalf("a start admitted at once: created %v, %+v", created, r)
		}
		in := map[string]string{"a": `"a"`, "b": `{"b":2}`, "none": ""}
		for id, input := range in {
			p := store.CreateRunParams{ID: id, Queue: "q"}
			if input != "" {
				p.Input = []byte(input)
			}
			enqueue(t, s, p)
		}
		runs, err := l.AdmitRuns(ctx(t), &store.AdmitRunsParams{Owner: "w", Limit: 10, LeaseTTL: time.Minute})
		must(t, err)
		if len(runs) != 2 {
			t.Fatalf("admitted %d runs, want 2 (the limit)", len(runs))
		}
		for _, r := range runs {
			if string(r.Input) != in[r.ID] || r.Output != nil || r.Status != store.RunRunning {
				t.Errorf("admitted %s: %s, input %q, want %q", r.ID, r.Status, r.Input, in[r.ID])
			}
		}
	})

	t.Run("AdmittedAtCreate", func(t *testing.T) {
		t.Parallel()
		s, l := newStore(t)
		must(t, l.SetLimiter(ctx(t), &limit.Config{Name: "q", Concurrency: 2}))
		start := func(id string, p store.CreateRunParams) *store.Run {
			t.Helper()
			p.ID, p.Workflow, p.Queue, p.Owner, p.LeaseTTL = id, "wf", "q", "w", time.Minute
			r, created, err := s.CreateRun(ctx(t), &p)
			must(t, err)
			if !created {
				t.Fatalf("%s not created", id)
			}
			return r
		}
		// Room and no one ahead: admitted and leased as it is created.
		if r := start("a", store.CreateRunParams{}); r.Queued || r.Status != store.RunRunning || r.LeaseOwner != "w" || r.LeaseEpoch != 1 {
			t.Fatalf("a start in a queue with room: %+v", r)
		}
		// Not due yet (a delay, a debounce): queued.
		if r := start("later", store.CreateRunParams{WakeAt: time.Now().Add(time.Hour)}); !r.Queued || r.LeaseOwner != "" {
			t.Fatalf("a delayed start: %+v", r)
		}
		if r := start("deb", store.CreateRunParams{Dedupe: "k", Debounce: time.Hour}); !r.Queued {
			t.Fatalf("a debounced start: %+v", r)
		}
		if r := start("b", store.CreateRunParams{}); r.Queued {
			t.Fatalf("the second slot: %+v", r)
		}
		// Full: queued, for an admission.
		if r := start("c", store.CreateRunParams{}); !r.Queued || r.Status != store.RunPending {
			t.Fatalf("a start in a full queue: %+v", r)
		}
		end(t, s, "a")
		// A slot is free, but c waits ahead: d waits behind it.
		if r := start("d", store.CreateRunParams{}); !r.Queued {
			t.Fatalf("a start that jumped the line: %+v", r)
		}
		if got := admit(t, l, "w", 10, time.Now()); !slices.Equal(got, []string{"c"}) {
			t.Fatalf("admitted %v, want c", got)
		}
		st, err := l.LimiterState(ctx(t), "q", time.Time{})
		must(t, err)
		if limit.Held(*st) != 2 {
			t.Fatalf("the queue holds %d slots, want 2 (b, c): %+v", limit.Held(*st), st.Holds)
		}
	})
	t.Run("AdmitInOrder", func(t *testing.T) {
		t.Parallel()
		s, l := newStore(t)
		must(t, l.SetLimiter(ctx(t), &limit.Config{Name: "q", Concurrency: 2}))
		enqueue(t, s, store.CreateRunParams{ID: "low", Queue: "q"})
		enqueue(t, s, store.CreateRunParams{ID: "high", Queue: "q", Priority: 5})
		enqueue(t, s, store.CreateRunParams{ID: "mid", Queue: "q", Priority: 1})
		// Queued runs are not claimed.
		claimed, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: "w", Limit: 10, LeaseTTL: time.Minute, Now: soon()})
		must(t, err)
		if len(claimed) != 0 {
			t.Fatalf("claimed %d queued runs", len(claimed))
		}
		if got := admit(t, l, "w", 10, soon()); !slices.Equal(got, []string{"high", "mid"}) {
			t.Fatalf("admitted %v, want high then mid", got)
		}
		if got := admit(t, l, "w", 10, soon()); len(got) != 0 {
			t.Fatalf("admitted %v beyond the concurrency", got)
		}
		st, err := l.LimiterState(ctx(t), "q", soon())
		must(t, err)
		if len(st.Holds) != 2 {
			t.Fatalf("holds %+v", st.Holds)
		}
		end(t, s, "high")
		if got := admit(t, l, "w", 10, soon()); !slices.Equal(got, []string{"low"}) {
			t.Fatalf("after high ended: %v", got)
		}
		// A changed limit applies to the next admission.
		must(t, l.SetLimiter(ctx(t), &limit.Config{Name: "q", Concurrency: 3}))
		enqueue(t, s, store.CreateRunParams{ID: "late", Queue: "q"})
		if got := admit(t, l, "w", 10, soon()); !slices.Equal(got, []string{"late"}) {
			t.Fatalf("after the limit rose: %v", got)
		}
	})

	t.Run("FairShareAndPerKey", func(t *testing.T) {
		t.Parallel()
		s, l := newStore(t)
		must(t, l.SetLimiter(ctx(t), &limit.Config{Name: "q", Concurrency: 3, PerKey: 2}))
		for i := range 5 {
			enqueue(t, s, store.CreateRunParams{ID: fmt.Sprint("a", i), Queue: "q", QueueKey: "a"})
		}
		enqueue(t, s, store.CreateRunParams{ID: "b0", Queue: "q", QueueKey: "b"})
		if got := admit(t, l, "w", 10, soon()); !slices.Equal(got, []string{"a0", "b0", "a1"}) {
			t.Fatalf("admitted %v, want a0 b0 a1 (b's one run does not wait for a's five)", got)
		}
		end(t, s, "b0")
		if got := admit(t, l, "w", 10, soon()); len(got) != 0 {
			t.Fatalf("a holds its 2: admitted %v", got)
		}
	})

	t.Run("Rate", func(t *testing.T) {
		t.Parallel()
		s, l := newStore(t)
		must(t, l.SetLimiter(ctx(t), &limit.Config{Name: "q", Rate: 2, Period: time.Hour}))
		for i := range 3 {
			enqueue(t, s, store.CreateRunParams{ID: fmt.Sprint("r", i), Queue: "q"})
		}
		now := soon()
		if got := admit(t, l, "w", 10, now); len(got) != 2 {
			t.Fatalf("admitted %v, rate 2", got)
		}
		if got := admit(t, l, "w", 10, now.Add(59*time.Minute)); len(got) != 0 {
			t.Fatalf("admitted %v within the hour", got)
		}
		if got := admit(t, l, "w", 10, now.Add(61*time.Minute)); !slices.Equal(got, []string{"r2"}) {
			t.Fatalf("after the hour: %v", got)
		}
	})

	t.Run("Dedupe", func(t *testing.T) {
		t.Parallel()
		s, l := newStore(t)
		must(t, l.SetLimiter(ctx(t), &limit.Config{Name: "q", Concurrency: 5}))
		first := enqueue(t, s, store.CreateRunParams{ID: "first", Queue: "q", Dedupe: "order-7", Input: []byte(`1`)})
		for _, id := range []string{"second", "third"} {
			r, created, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: id, Workflow: "wf", Queue: "q", Dedupe: "order-7", Input: []byte(`2`)})
			must(t, err)
			if created || r.ID != first.ID || string(r.Input) != `1` {
				t.Fatalf("%s folded into %+v (created %v)", id, r, created)
			}
			if _, err := s.GetRun(ctx(t), id); err == nil {
				t.Fatalf("folded start %s made a run", id)
			}
		}
		// Of another workflow: refused.
		_, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "other", Workflow: "wf2", Queue: "q", Dedupe: "order-7"})
		wantErr(t, err, store.ErrRunConflict)
		// Folded while running too; once it ended the key is free.
		admit(t, l, "w", 10, soon())
		r, created, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "fourth", Workflow: "wf", Queue: "q", Dedupe: "order-7"})
		must(t, err)
		if created || r.ID != "first" {
			t.Fatalf("while running: %+v", r)
		}
		end(t, s, "first")
		enqueue(t, s, store.CreateRunParams{ID: "fifth", Queue: "q", Dedupe: "order-7"})
	})

	t.Run("Debounce", func(t *testing.T) {
		t.Parallel()
		s, l := newStore(t)
		must(t, l.SetLimiter(ctx(t), &limit.Config{Name: "q", Concurrency: 5}))
		p := store.CreateRunParams{ID: "d1", Queue: "q", Dedupe: "doc-1", Debounce: time.Hour, Input: []byte(`"v1"`)}
		first := enqueue(t, s, p)
		if first.WakeAt.Before(time.Now().Add(59 * time.Minute)) {
			t.Fatalf("debounced run wakes at %v", first.WakeAt)
		}
		p.ID, p.Input, p.Workflow = "d2", []byte(`"v2"`), "wf"
		r, created, err := s.CreateRun(ctx(t), &p)
		must(t, err)
		if created || r.ID != "d1" || string(r.Input) != `"v2"` || !r.WakeAt.After(first.WakeAt) {
			t.Fatalf("a debounced start folded into %+v (created %v), want d1 with v2, later", r, created)
		}
		if got := admit(t, l, "w", 10, soon()); len(got) != 0 {
			t.Fatalf("admitted %v before its debounce", got)
		}
		if got := admit(t, l, "w", 10, r.WakeAt.Add(time.Millisecond)); !slices.Equal(got, []string{"d1"}) {
			t.Fatalf("after its debounce: %v", got)
		}
	})

	t.Run("DebounceMax", func(t *testing.T) {
		t.Parallel()
		s, l := newStore(t)
		must(t, l.SetLimiter(ctx(t), &limit.Config{Name: "q", Concurrency: 5}))
		// A cap equal to the debounce: a fold may not move the start past
		// an hour after the first start.
		p := store.CreateRunParams{ID: "m1", Queue: "q", Dedupe: "doc-2", Debounce: time.Hour, DebounceMax: time.Hour, Input: []byte(`"v1"`)}
		first := enqueue(t, s, p)
		capAt := first.CreatedAt.Add(time.Hour)
		if first.WakeAt.After(capAt) {
			t.Fatalf("wakes at %v, past its cap %v", first.WakeAt, capAt)
		}
		for i, in := range []string{`"v2"`, `"v3"`} {
			p.ID, p.Input, p.Workflow = fmt.Sprintf("m%d", i+2), []byte(in), "wf"
			r, created, err := s.CreateRun(ctx(t), &p)
			must(t, err)
			if created || r.ID != "m1" || string(r.Input) != in || !r.WakeAt.Equal(capAt) {
				t.Fatalf("fold %d: %+v (created %v), want m1 with %s waking at its cap %v", i+1, r, created, in, capAt)
			}
		}
		for _, bad := range []store.CreateRunParams{
			{ID: "x", Workflow: "wf", Queue: "q", Dedupe: "k", DebounceMax: time.Hour},
			{ID: "x", Workflow: "wf", Queue: "q", Dedupe: "k", Debounce: time.Hour, DebounceMax: time.Minute},
			{ID: "x", Workflow: "wf", DebounceMax: time.Hour},
		} {
			_, _, err := s.CreateRun(ctx(t), &bad)
			wantErr(t, err, store.ErrInvalid)
		}
	})

	t.Run("CancelAQueuedRun", func(t *testing.T) {
		t.Parallel()
		s, l := newStore(t)
		must(t, l.SetLimiter(ctx(t), &limit.Config{Name: "q", Concurrency: 1}))
		enqueue(t, s, store.CreateRunParams{ID: "holder", Queue: "q"})
		admit(t, l, "w", 10, soon())
		enqueue(t, s, store.CreateRunParams{ID: "waiting", Queue: "q"})
		must(t, s.RequestCancel(ctx(t), "waiting"))
		// The queue is full, but a claim takes the cancelled run to end it.
		claimed, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: "w", Limit: 10, LeaseTTL: time.Minute, Now: soon()})
		must(t, err)
		if len(claimed) != 1 || claimed[0].ID != "waiting" || !claimed[0].CancelRequested {
			t.Fatalf("claimed %+v", claimed)
		}
	})

	t.Run("SkipQueues", func(t *testing.T) {
		t.Parallel()
		s, l := newStore(t)
		must(t, l.SetLimiter(ctx(t), &limit.Config{Name: "q", Concurrency: 5}))
		enqueue(t, s, store.CreateRunParams{ID: "a", Queue: "q"})
		admit(t, l, "w1", 10, soon())
		// Its worker died: the lease runs out; a claim skipping q leaves it.
		later := soon().Add(2 * time.Minute)
		claimed, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: "w2", Limit: 10, LeaseTTL: time.Minute, Now: later, SkipQueues: []string{"q"}})
		must(t, err)
		if len(claimed) != 0 {
			t.Fatalf("claimed %+v of a skipped queue", claimed)
		}
		claimed, err = s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: "w2", Limit: 10, LeaseTTL: time.Minute, Now: later})
		must(t, err)
		if len(claimed) != 1 || claimed[0].ID != "a" || claimed[0].Queued {
			t.Fatalf("claimed %+v", claimed)
		}
		// Room bounds what one admission takes from a queue.
		for i := range 3 {
			enqueue(t, s, store.CreateRunParams{ID: fmt.Sprint("b", i), Queue: "q"})
		}
		runs, err := l.AdmitRuns(ctx(t), &store.AdmitRunsParams{Owner: "w3", Limit: 10, LeaseTTL: time.Minute, Room: map[string]int{"q": 1}})
		must(t, err)
		if len(runs) != 1 {
			t.Fatalf("admitted %d with room for 1", len(runs))
		}
	})

	t.Run("ConcurrentAdmissionsKeepTheLimit", func(t *testing.T) {
		t.Parallel()
		s, l := newStore(t)
		must(t, l.SetLimiter(ctx(t), &limit.Config{Name: "q", Concurrency: 3}))
		for i := range 12 {
			enqueue(t, s, store.CreateRunParams{ID: fmt.Sprint("r", i), Queue: "q"})
		}
		var mu sync.Mutex
		var got []string
		var wg sync.WaitGroup
		for w := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runs, err := l.AdmitRuns(ctx(t), &store.AdmitRunsParams{Owner: fmt.Sprint("w", w), Limit: 2, LeaseTTL: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, r := range runs {
					got = append(got, r.ID)
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		if len(got) != 3 {
			t.Fatalf("6 workers admitted %v, concurrency 3", got)
		}
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		s, l := newStore(t)
		must(t, l.SetLimiter(ctx(t), &limit.Config{Name: "q", Concurrency: 1}))
		for _, p := range []store.CreateRunParams{
			{ID: "x", Workflow: "wf", Queue: "nope"},
			{ID: "x", Workflow: "wf", QueueKey: "tenant"},
			{ID: "x", Workflow: "wf", Queue: "q", QueueKey: string([]byte{0xff})},
			{ID: "x", Workflow: "wf", Queue: "q", QueueKey: string(make([]byte, limit.MaxNameLen+1))},
			{ID: "x", Workflow: "wf", Queue: "q", Debounce: time.Second},
			{ID: "x", Workflow: "wf", Queue: "q", Dedupe: "k", Debounce: -time.Second},
		} {
			_, _, err := s.CreateRun(ctx(t), &p)
			if err == nil {
				t.Fatalf("%+v: created", p)
			}
		}
		_, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "x", Workflow: "wf", Queue: "nope"})
		wantErr(t, err, store.ErrNotFound)
		if _, err := s.GetRun(ctx(t), "x"); err == nil {
			t.Fatal("a refused start made a run")
		}
	})
}
