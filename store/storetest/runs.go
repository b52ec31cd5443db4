package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
)

func testRuns(t *testing.T, h harness) {
	t.Run("CreateRunIsIdempotentByID", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		wake := time.Now().Add(time.Minute).Truncate(time.Millisecond)
		p := &store.CreateRunParams{ID: "r1", Workflow: "wf", Input: []byte(`{"n":1}`), WakeAt: wake}
		r1, created, err := s.CreateRun(ctx(t), p)
		must(t, err)
		if !created {
			t.Fatal("first CreateRun: created = false")
		}
		if r1.ID != "r1" || r1.Workflow != "wf" || r1.Status != store.RunPending || !bytes.Equal(r1.Input, p.Input) ||
			!r1.WakeAt.Equal(wake) || r1.CreatedAt.IsZero() || r1.LeaseEpoch != 0 || r1.LeaseOwner != "" || r1.CancelRequested {
			t.Fatalf("created run = %+v", r1)
		}
		// The same id again, even with other input: the existing run.
		r2, created, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "r1", Workflow: "wf", Input: []byte("other")})
		must(t, err)
		if created {
			t.Fatal("second CreateRun: created = true")
		}
		if r2.ID != r1.ID || !bytes.Equal(r2.Input, p.Input) || !r2.CreatedAt.Equal(r1.CreatedAt) {
			t.Fatalf("second CreateRun = %+v, want %+v", r2, r1)
		}
		got, err := s.GetRun(ctx(t), "r1")
		must(t, err)
		if got.ID != "r1" || !bytes.Equal(got.Input, p.Input) || !got.WakeAt.Equal(wake) || !got.CreatedAt.Equal(r1.CreatedAt) {
			t.Fatalf("GetRun = %+v, want %+v", got, r1)
		}
	})

	// A run keeps its trace: GetRun, a claim, a lease at creation and a
	// reopen all give it back; one too long is refused.
	t.Run("TraceParent", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		r, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "traced", Workflow: "wf", TraceParent: tp})
		must(t, err)
		if r.TraceParent != tp {
			t.Fatalf("CreateRun: TraceParent %q", r.TraceParent)
		}
		leased, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "traced-leased", Workflow: "wf", TraceParent: tp, Owner: "w", LeaseTTL: time.Minute})
		must(t, err)
		if leased.TraceParent != tp {
			t.Fatalf("CreateRun leased: TraceParent %q", leased.TraceParent)
		}
		got, err := s.GetRun(ctx(t), "traced")
		must(t, err)
		claimed, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: "w", Limit: 10, LeaseTTL: time.Minute})
		must(t, err)
		if got.TraceParent != tp || len(claimed) != 1 || claimed[0].TraceParent != tp {
			t.Fatalf("GetRun %q, claimed %v", got.TraceParent, claimed)
		}
		_, _, err = s.CreateRun(ctx(t), &store.CreateRunParams{ID: "too-long", Workflow: "wf", TraceParent: strings.Repeat("a", store.MaxTraceParentLen+1)})
		wantErr(t, err, store.ErrInvalid)
	})
	t.Run("CreateRunConflict", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		createRun(t, s, "r1")
		_, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "r1", Workflow: "other"})
		wantErr(t, err, store.ErrRunConflict)
	})

	t.Run("CreateRunInvalid", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		_, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "", Workflow: "wf"})
		wantErr(t, err, store.ErrInvalid)
		_, _, err = s.CreateRun(ctx(t), &store.CreateRunParams{ID: "r1"})
		wantErr(t, err, store.ErrInvalid)
	})

	t.Run("GetRunNotFound", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		_, err := s.GetRun(ctx(t), "nope")
		wantErr(t, err, store.ErrNotFound)
	})

	t.Run("ListRuns", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		for _, r := range []struct{ id, wf string }{{"r1", "a"}, {"r2", "b"}, {"r3", "a"}, {"r4", "a"}, {"r5", "b"}} {
			_, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: r.id, Workflow: r.wf})
			must(t, err)
		}
		// Claim the oldest two: r1 and r2 become running.
		runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 2, LeaseTTL: ttl})
		must(t, err)
		if got := runIDs(runs); !slices.Equal(got, []string{"r1", "r2"}) {
			t.Fatalf("claimed %v, want [r1 r2]", got)
		}
		list := func(p store.ListRunsParams) []string {
			t.Helper()
			runs, err := s.ListRuns(ctx(t), &p)
			must(t, err)
			return runIDs(runs)
		}
		for _, c := range []struct {
			name string
			p    store.ListRunsParams
			want []string
		}{
			{"all newest first", store.ListRunsParams{}, []string{"r5", "r4", "r3", "r2", "r1"}},
			{"workflow", store.ListRunsParams{Workflow: "a"}, []string{"r4", "r3", "r1"}},
			{"status", store.ListRunsParams{Status: store.RunRunning}, []string{"r2", "r1"}},
			{"workflow and status", store.ListRunsParams{Workflow: "b", Status: store.RunPending}, []string{"r5"}},
			{"limit", store.ListRunsParams{Limit: 2}, []string{"r5", "r4"}},
			{"before", store.ListRunsParams{Before: "r4", Limit: 2}, []string{"r3", "r2"}},
			{"before with filter", store.ListRunsParams{Before: "r4", Workflow: "a"}, []string{"r3", "r1"}},
			{"before the oldest", store.ListRunsParams{Before: "r1"}, nil},
			{"no match", store.ListRunsParams{Workflow: "zzz"}, nil},
		} {
			if got := list(c.p); !slices.Equal(got, c.want) {
				t.Errorf("%s: got %v, want %v", c.name, got, c.want)
			}
		}
		// Paging with the cursor visits every run once.
		var all []string
		before := ""
		for {
			page := list(store.ListRunsParams{Before: before, Limit: 2})
			if len(page) == 0 {
				break
			}
			all = append(all, page...)
			before = page[len(page)-1]
		}
		if !slices.Equal(all, []string{"r5", "r4", "r3", "r2", "r1"}) {
			t.Fatalf("paged = %v", all)
		}
		// Heads alone (NoData): the runs' state, not their values.
		_, _, err = s.CreateRun(ctx(t), &store.CreateRunParams{ID: "r6", Workflow: "a", Input: []byte(`{"x":1}`)})
		must(t, err)
		heads, err := s.ListRuns(ctx(t), &store.ListRunsParams{Limit: 2, NoData: true})
		must(t, err)
		if got := runIDs(heads); !slices.Equal(got, []string{"r6", "r5"}) {
			t.Fatalf("heads: %v", got)
		}
		if h := heads[0]; h.Input != nil || h.Output != nil || !h.Elided || h.Workflow != "a" || h.Status != store.RunPending || h.CreatedAt.IsZero() {
			t.Fatalf("a head: %+v", h)
		}
		if whole, err := s.ListRuns(ctx(t), &store.ListRunsParams{Limit: 1}); err != nil || string(whole[0].Input) != `{"x":1}` || whole[0].Elided {
			t.Fatalf("listed with its data: %+v, %v", whole, err)
		}
		_, err = s.ListRuns(ctx(t), &store.ListRunsParams{Status: "bogus"})
		wantErr(t, err, store.ErrInvalid)
	})

	t.Run("ListRunsSearch", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		ids := []string{"order-1", "order-12", "order_2", "ORDER-3", "näive-1"}
		created := map[string]time.Time{}
		for _, id := range ids {
			r, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: id, Workflow: "wf"})
			must(t, err)
			created[id] = r.CreatedAt
		}
		list := func(p store.ListRunsParams) []string {
			t.Helper()
			runs, err := s.ListRuns(ctx(t), &p)
			must(t, err)
			return runIDs(runs)
		}
		// The ids whose creation time passes keep, newest first.
		where := func(keep func(time.Time) bool) []string {
			var out []string
			for i := len(ids) - 1; i >= 0; i-- {
				if keep(created[ids[i]]) {
					out = append(out, ids[i])
				}
			}
			return out
		}
		mid := created["order_2"]
		for _, c := range []struct {
			name string
			p    store.ListRunsParams
			want []string
		}{
			{"prefix", store.ListRunsParams{IDPrefix: "order-1"}, []string{"order-12", "order-1"}},
			{"prefix is not a pattern", store.ListRunsParams{IDPrefix: "order_"}, []string{"order_2"}},
			{"nor a percent", store.ListRunsParams{IDPrefix: "ord%"}, nil},
			{"case matters", store.ListRunsParams{IDPrefix: "ORDER"}, []string{"ORDER-3"}},
			{"characters, not bytes", store.ListRunsParams{IDPrefix: "nä"}, []string{"näive-1"}},
			{"a whole id", store.ListRunsParams{IDPrefix: "order-12"}, []string{"order-12"}},
			{"longer than any id", store.ListRunsParams{IDPrefix: "order-123"}, nil},
			{"since", store.ListRunsParams{CreatedSince: mid}, where(func(c time.Time) bool { return !c.Before(mid) })},
			{"before", store.ListRunsParams{CreatedBefore: mid}, where(func(c time.Time) bool { return c.Before(mid) })},
			{"a range and a prefix", store.ListRunsParams{IDPrefix: "order", CreatedSince: created["order-1"], CreatedBefore: mid},
				[]string{"order-12", "order-1"}},
		} {
			if got := list(c.p); !slices.Equal(got, c.want) {
				t.Errorf("%s: got %v, want %v", c.name, got, c.want)
			}
		}
		_, err := s.ListRuns(ctx(t), &store.ListRunsParams{CreatedSince: mid, CreatedBefore: mid})
		wantErr(t, err, store.ErrInvalid)
	})

	t.Run("ListEvents", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		_, err := s.ListEvents(ctx(t), "nope", 0)
		wantErr(t, err, store.ErrNotFound)
		createRun(t, s, "r1")
		evs, err := s.ListEvents(ctx(t), "r1", 0)
		must(t, err)
		if len(evs) != 0 {
			t.Fatalf("new run has events %v", evs)
		}
	})
}

func testClaims(t *testing.T, h harness) {
	t.Run("ClaimLeasesAndIncrementsEpoch", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		createRun(t, s, "r1")
		now := time.Now().Truncate(time.Millisecond)
		runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 10, LeaseTTL: time.Minute, Now: now})
		must(t, err)
		if len(runs) != 1 {
			t.Fatalf("claimed %v", runIDs(runs))
		}
		r := runs[0]
		if r.Status != store.RunRunning || r.LeaseOwner != owner || r.LeaseEpoch != 1 || !r.LeaseExpires.Equal(now.Add(time.Minute)) {
			t.Fatalf("claimed run = %+v", r)
		}
		got, err := s.GetRun(ctx(t), "r1")
		must(t, err)
		if got.Status != store.RunRunning || got.LeaseOwner != owner || got.LeaseEpoch != 1 {
			t.Fatalf("GetRun after claim = %+v", got)
		}
		// Leased: nobody else gets it.
		runs, err = s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: "worker-2", Limit: 10, LeaseTTL: time.Minute, Now: now})
		must(t, err)
		if len(runs) != 0 {
			t.Fatalf("claimed a leased run: %v", runIDs(runs))
		}
	})

	t.Run("CreateRunLeasedToItsStarter", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		before := time.Now()
		r, created, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "mine", Workflow: "wf", Owner: owner, LeaseTTL: time.Minute})
		must(t, err)
		if !created || r.Status != store.RunRunning || r.LeaseOwner != owner || r.LeaseEpoch != 1 ||
			r.LeaseExpires.Before(before.Add(time.Minute-time.Second)) || r.LeaseExpires.After(time.Now().Add(time.Minute+time.Second)) {
			t.Fatalf("created = %v, run = %+v", created, r)
		}
		// Leased: no claim takes it, and its starter records at epoch 1.
		runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: "worker-2", Limit: 10, LeaseTTL: time.Minute})
		must(t, err)
		if len(runs) != 0 {
			t.Fatalf("claimed a run leased at creation: %v", runIDs(runs))
		}
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "mine", LeaseEpoch: 1, Events: []store.Event{{Type: store.EventRunStarted}}}))
		// A retried create finds the lease; another starter does not get it.
		again, created, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "mine", Workflow: "wf", Owner: "worker-2", LeaseTTL: time.Minute})
		must(t, err)
		if created || again.LeaseOwner != owner || again.LeaseEpoch != 1 {
			t.Fatalf("second create = %v, %+v", created, again)
		}
		// Not runnable yet: created pending and free, claimed at its time.
		later, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "later", Workflow: "wf", WakeAt: time.Now().Add(time.Hour), Owner: owner, LeaseTTL: time.Minute})
		must(t, err)
		if later.Status != store.RunPending || later.LeaseOwner != "" || later.LeaseEpoch != 0 {
			t.Fatalf("delayed run = %+v", later)
		}
		// Expired, the lease is claimable as any other.
		runs, err = s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: "worker-2", Limit: 10, LeaseTTL: time.Minute, Now: time.Now().Add(2 * time.Minute)})
		must(t, err)
		if got := runIDs(runs); !slices.Equal(got, []string{"mine"}) || runs[0].LeaseEpoch != 2 {
			t.Fatalf("claimed %v after the lease expired", got)
		}
		if _, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "x", Workflow: "wf", Owner: owner}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("an owner without a lease TTL: %v", err)
		}
	})

	t.Run("ClaimOnlyRunnable", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		now := time.Now()
		_, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "later", Workflow: "wf", WakeAt: now.Add(time.Hour)})
		must(t, err)
		epoch := startRun(t, s, "done")
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "done", LeaseEpoch: epoch, Status: store.RunCompleted}))
		createRun(t, s, "now")
		claim := func(at time.Time) []string {
			t.Helper()
			runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 10, LeaseTTL: 10 * time.Hour, Now: at})
			must(t, err)
			return runIDs(runs)
		}
		if got := claim(now); !slices.Equal(got, []string{"now"}) {
			t.Fatalf("claimed %v, want [now]", got)
		}
		if got := claim(now.Add(30 * time.Minute)); len(got) != 0 {
			t.Fatalf("claimed %v before the wake time", got)
		}
		if got := claim(now.Add(2 * time.Hour)); !slices.Equal(got, []string{"later"}) {
			t.Fatalf("claimed %v after the wake time, want [later]", got)
		}
	})

	t.Run("HostileIDs", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		// Ids no run can have: NUL bytes, invalid UTF-8. Either answer
		// says so; neither may be a driver error.
		for _, id := range []string{"a\x00b", "\xff\xfe", strings.Repeat("x", 10000)} {
			_, err := s.GetRun(ctx(t), id)
			if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("GetRun(%.20q) = %v, want ErrNotFound or ErrInvalid", id, err)
			}
			_, err = s.OpenStream(ctx(t), &store.OpenStreamParams{Path: "p/" + id})
			if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("OpenStream(%.20q) = %v, want ErrNotFound or ErrInvalid", id, err)
			}
		}
	})

	t.Run("ClaimOnlyListedWorkflows", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		for id, wf := range map[string]string{"a1": "alpha", "b1": "beta", "g1": "gamma"} {
			_, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: id, Workflow: wf})
			must(t, err)
		}
		claim := func(wfs []string) []string {
			t.Helper()
			runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 10, LeaseTTL: ttl, Workflows: wfs})
			must(t, err)
			ids := runIDs(runs)
			slices.Sort(ids)
			return ids
		}
		if got := claim([]string{}); len(got) != 0 {
			t.Fatalf("an empty list claimed %v", got)
		}
		if got := claim([]string{"beta", "gamma", "delta"}); !slices.Equal(got, []string{"b1", "g1"}) {
			t.Fatalf("claimed %v, want [b1 g1]", got)
		}
		if got := claim(nil); !slices.Equal(got, []string{"a1"}) {
			t.Fatalf("nil (any workflow) claimed %v, want [a1]", got)
		}
	})

	t.Run("ClaimLimit", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		for _, id := range []string{"r1", "r2", "r3"} {
			createRun(t, s, id)
		}
		runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 2, LeaseTTL: ttl})
		must(t, err)
		if got := runIDs(runs); !slices.Equal(got, []string{"r1", "r2"}) {
			t.Fatalf("claimed %v, want the two oldest", got)
		}
		_, err = s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 0, LeaseTTL: ttl})
		wantErr(t, err, store.ErrInvalid)
		_, err = s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: "", Limit: 1, LeaseTTL: ttl})
		wantErr(t, err, store.ErrInvalid)
	})

	t.Run("ConcurrentClaimersNeverShareARun", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		const n = 40
		for i := range n {
			createRun(t, s, fmt.Sprintf("r%d", i))
		}
		var mu sync.Mutex
		seen := map[string]string{}
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				name := fmt.Sprintf("w%d", w)
				for {
					runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: name, Limit: 3, LeaseTTL: ttl})
					if err != nil {
						t.Error(err)
						return
					}
					if len(runs) == 0 {
						return
					}
					mu.Lock()
					for _, r := range runs {
						if prev, ok := seen[r.ID]; ok {
							t.Errorf("run %s claimed by %s and %s", r.ID, prev, name)
						}
						seen[r.ID] = name
						if r.LeaseOwner != name || r.LeaseEpoch != 1 {
							t.Errorf("run %s: owner %q epoch %d", r.ID, r.LeaseOwner, r.LeaseEpoch)
						}
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(seen) != n {
			t.Fatalf("claimed %d runs, want %d", len(seen), n)
		}
	})

	t.Run("ExpiredLeaseIsClaimableAgain", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		createRun(t, s, "r1")
		now := time.Now()
		runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: "w1", Limit: 1, LeaseTTL: time.Minute, Now: now})
		must(t, err)
		if len(runs) != 1 {
			t.Fatal("first claim got nothing")
		}
		runs, err = s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: "w2", Limit: 1, LeaseTTL: time.Minute, Now: now.Add(2 * time.Minute)})
		must(t, err)
		if len(runs) != 1 || runs[0].LeaseOwner != "w2" || runs[0].LeaseEpoch != 2 {
			t.Fatalf("second claim = %v", runs)
		}
		// The first worker is fenced everywhere.
		_, err = s.RenewLease(ctx(t), &store.RenewLeaseParams{RunID: "r1", LeaseEpoch: 1, LeaseTTL: time.Minute})
		wantErr(t, err, store.ErrLeaseLost)
		err = s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: 1, Events: []store.Event{{Type: store.EventRunStarted}}})
		wantErr(t, err, store.ErrLeaseLost)
		cancel, err := s.RenewLease(ctx(t), &store.RenewLeaseParams{RunID: "r1", LeaseEpoch: 2, LeaseTTL: time.Minute})
		must(t, err)
		if cancel {
			t.Fatal("cancel reported without a request")
		}
	})

	t.Run("RenewLease", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		before, err := s.GetRun(ctx(t), "r1")
		must(t, err)
		_, err = s.RenewLease(ctx(t), &store.RenewLeaseParams{RunID: "r1", LeaseEpoch: epoch, LeaseTTL: 2 * ttl})
		must(t, err)
		after, err := s.GetRun(ctx(t), "r1")
		must(t, err)
		if !after.LeaseExpires.After(before.LeaseExpires) {
			t.Fatalf("lease expiry %v not extended past %v", after.LeaseExpires, before.LeaseExpires)
		}
		_, err = s.RenewLease(ctx(t), &store.RenewLeaseParams{RunID: "r1", LeaseEpoch: epoch + 1, LeaseTTL: ttl})
		wantErr(t, err, store.ErrLeaseLost)
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Status: store.RunFailed, Error: "boom"}))
		_, err = s.RenewLease(ctx(t), &store.RenewLeaseParams{RunID: "r1", LeaseEpoch: epoch, LeaseTTL: ttl})
		wantErr(t, err, store.ErrLeaseLost)
	})

	t.Run("ListElidesLargeValues", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		big := []byte(`"` + strings.Repeat("x", store.MaxListedValue) + `"`)
		_, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "big", Workflow: "wf", Input: big})
		must(t, err)
		_, _, err = s.CreateRun(ctx(t), &store.CreateRunParams{ID: "small", Workflow: "wf", Input: []byte(`1`)})
		must(t, err)
		runs, err := s.ListRuns(ctx(t), &store.ListRunsParams{})
		must(t, err)
		got := map[string]*store.Run{}
		for _, r := range runs {
			got[r.ID] = r
		}
		if r := got["big"]; r == nil || !r.Elided || r.Input != nil {
			t.Fatalf("a run with a %d-byte input, listed: %+v", len(big), r)
		}
		if r := got["small"]; r == nil || r.Elided || string(r.Input) != "1" {
			t.Fatalf("a run with a small input, listed: %+v", r)
		}
		r, err := s.GetRun(ctx(t), "big")
		must(t, err)
		if r.Elided || string(r.Input) != string(big) {
			t.Fatalf("GetRun of the large run: elided %v, %d bytes of input", r.Elided, len(r.Input))
		}
		// GetRunWithin: the size first, the values only within the bound.
		r, size, err := s.GetRunWithin(ctx(t), "big", int64(len(big)))
		must(t, err)
		if r.Elided || string(r.Input) != string(big) || size != int64(len(big)) {
			t.Fatalf("GetRunWithin at its size: elided %v, %d bytes of input, size %d", r.Elided, len(r.Input), size)
		}
		r, size, err = s.GetRunWithin(ctx(t), "big", int64(len(big))-1)
		must(t, err)
		if !r.Elided || r.Input != nil || r.Output != nil || size != int64(len(big)) || r.Workflow != "wf" {
			t.Fatalf("GetRunWithin a byte short: %+v, size %d", r, size)
		}
		_, _, err = s.GetRunWithin(ctx(t), "nope", 1)
		wantErr(t, err, store.ErrNotFound)
	})

	t.Run("ErrorsBounded", func(t *testing.T) {
		// A run's error is kept to MaxErrorBytes (cut, with a note), listed
		// to MaxListedValue characters, and counted by GetRunWithin.
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "failed")
		huge := strings.Repeat("e", 3*store.MaxErrorBytes)
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "failed", LeaseEpoch: epoch, Events: []store.Event{{Type: store.EventRunFailed, Error: "boom"}},
			Status: store.RunFailed, Error: huge, CloseStreams: true}))
		r, err := s.GetRun(ctx(t), "failed")
		must(t, err)
		if len(r.Error) > store.MaxErrorBytes || !strings.HasPrefix(r.Error, "eee") || !strings.Contains(r.Error, "bytes cut") {
			t.Fatalf("an error of %d bytes kept as %d bytes ending %q", len(huge), len(r.Error), r.Error[max(0, len(r.Error)-40):])
		}
		kept := int64(len(r.Error))
		runs, err := s.ListRuns(ctx(t), &store.ListRunsParams{})
		must(t, err)
		for _, l := range runs {
			if l.ID == "failed" && (!l.Elided || len(l.Error) > store.MaxListedValue) {
				t.Fatalf("the failed run listed: elided %v, %d bytes of error", l.Elided, len(l.Error))
			}
		}
		r, size, err := s.GetRunWithin(ctx(t), "failed", 1024)
		must(t, err)
		if !r.Elided || len(r.Error) > store.MaxListedValue || size < kept {
			t.Fatalf("GetRunWithin of the failed run: elided %v, %d bytes of error, size %d (its error is %d)", r.Elided, len(r.Error), size, kept)
		}
	})

	t.Run("RenewLeases", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		r, ok := store.LeaseRenewerOf(s)
		if !ok {
			t.Skip("the store renews no leases at once (store.LeaseRenewer)")
		}
		a, b, c := startRun(t, s, "a"), startRun(t, s, "b"), startRun(t, s, "c")
		must(t, s.RequestCancel(ctx(t), "b"))
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "c", LeaseEpoch: c, Status: store.RunCompleted}))
		before, err := s.GetRun(ctx(t), "a")
		must(t, err)
		res, err := r.RenewLeases(ctx(t), []store.RenewLeaseParams{
			{RunID: "a", LeaseEpoch: a, LeaseTTL: 2 * ttl},
			{RunID: "b", LeaseEpoch: b, LeaseTTL: ttl},
			{RunID: "c", LeaseEpoch: c, LeaseTTL: ttl},
			{RunID: "a", LeaseEpoch: a + 1, LeaseTTL: ttl},
			{RunID: "nope", LeaseEpoch: 1, LeaseTTL: ttl},
			{RunID: "bad\x00id", LeaseEpoch: 1, LeaseTTL: ttl},
		})
		must(t, err)
		if len(res) != 6 {
			t.Fatalf("%d results for 6 leases", len(res))
		}
		if res[0].Err != nil || res[0].Cancel || res[1].Err != nil || !res[1].Cancel {
			t.Fatalf("held leases: %+v, %+v", res[0], res[1])
		}
		wantErr(t, res[2].Err, store.ErrLeaseLost) // the run ended
		wantErr(t, res[3].Err, store.ErrLeaseLost) // an older epoch's
		wantErr(t, res[4].Err, store.ErrNotFound)
		wantErr(t, res[5].Err, store.ErrInvalid)
		after, err := s.GetRun(ctx(t), "a")
		must(t, err)
		if !after.LeaseExpires.After(before.LeaseExpires) {
			t.Fatalf("lease expiry %v not extended past %v", after.LeaseExpires, before.LeaseExpires)
		}
		if res, err := r.RenewLeases(ctx(t), nil); err != nil || len(res) != 0 {
			t.Fatalf("no leases: %v %v", res, err)
		}
	})

	t.Run("RequestCancel", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		wantErr(t, s.RequestCancel(ctx(t), "nope"), store.ErrNotFound)

		// A parked run becomes claimable at once.
		epoch := startRun(t, s, "r1")
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Release: true, WakeAt: time.Now().Add(24 * time.Hour)}))
		runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 1, LeaseTTL: ttl})
		must(t, err)
		if len(runs) != 0 {
			t.Fatal("claimed a parked run")
		}
		must(t, s.RequestCancel(ctx(t), "r1"))
		runs, err = s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 1, LeaseTTL: ttl})
		must(t, err)
		if len(runs) != 1 || !runs[0].CancelRequested {
			t.Fatalf("after cancel claimed %+v, want r1 with CancelRequested", runs)
		}
		cancel, err := s.RenewLease(ctx(t), &store.RenewLeaseParams{RunID: "r1", LeaseEpoch: runs[0].LeaseEpoch, LeaseTTL: ttl})
		must(t, err)
		if !cancel {
			t.Fatal("RenewLease did not report the cancel")
		}

		// A finished run is left alone.
		epoch = startRun(t, s, "r2")
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r2", LeaseEpoch: epoch, Status: store.RunCompleted}))
		must(t, s.RequestCancel(ctx(t), "r2"))
		r2, err := s.GetRun(ctx(t), "r2")
		must(t, err)
		if r2.CancelRequested || r2.Status != store.RunCompleted {
			t.Fatalf("finished run after cancel = %+v", r2)
		}
	})
}
