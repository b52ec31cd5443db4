package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
)

// testHooks checks hooks: a run's tokens, deliveries to them recorded once
// in its log, and what ends them.
func testHooks(t *testing.T, h harness) {
	hook := func(run string, epoch int64, token string, op int64) *store.HookParams {
		return &store.HookParams{RunID: run, LeaseEpoch: epoch, Token: token, Op: op}
	}
	events := func(t *testing.T, s store.Full, run string, typ store.EventType) []store.Event {
		t.Helper()
		evs, err := s.ListEvents(ctx(t), run, 0)
		must(t, err)
		var out []store.Event
		for _, e := range evs {
			if e.Type == typ {
				out = append(out, e)
			}
		}
		return out
	}

	t.Run("CreateDeliverDispose", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		must(t, s.CreateHook(ctx(t), hook("r1", epoch, "approve", 3)))
		must(t, s.CreateHook(ctx(t), hook("r1", epoch, "approve", 3))) // a retry
		if got := events(t, s, "r1", store.EventHookCreated); len(got) != 1 || got[0].Op != 3 || got[0].Name != "approve" {
			t.Fatalf("hook_created events %+v, want one at op 3", got)
		}
		wantErr(t, s.CreateHook(ctx(t), hook("r1", epoch+1, "other", 4)), store.ErrLeaseLost)

		res, err := s.DeliverHook(ctx(t), &store.DeliverHookParams{Token: "approve", Payload: []byte(`{"ok":true}`)})
		must(t, err)
		if res.RunID != "r1" || res.Op != 3 || res.Count != 1 || res.Duplicate {
			t.Fatalf("delivery %+v", res)
		}
		keyed := &store.DeliverHookParams{Token: "approve", Payload: []byte(`2`), IdempotencyKey: "k", RequestDigest: []byte("d")}
		first, err := s.DeliverHook(ctx(t), keyed)
		must(t, err)
		again, err := s.DeliverHook(ctx(t), keyed)
		must(t, err)
		if !again.Duplicate || again.Seq != first.Seq || again.Count != 2 {
			t.Fatalf("a delivery sent again: %+v, first %+v", again, first)
		}
		_, err = s.DeliverHook(ctx(t), &store.DeliverHookParams{Token: "approve", Payload: []byte(`3`), IdempotencyKey: "k", RequestDigest: []byte("other")})
		wantErr(t, err, store.ErrKeyReused)
		got := events(t, s, "r1", store.EventHookReceived)
		if len(got) != 2 || string(got[0].Data) != `{"ok":true}` || string(got[1].Data) != `2` || got[1].Seq != first.Seq || got[0].Op != 3 {
			t.Fatalf("hook_received events %+v", got)
		}
		info, err := s.GetHook(ctx(t), "approve")
		must(t, err)
		if info.RunID != "r1" || info.Op != 3 || info.Received != 2 || info.Disposed {
			t.Fatalf("hook %+v", info)
		}

		must(t, s.DisposeHook(ctx(t), hook("r1", epoch, "approve", 3)))
		must(t, s.DisposeHook(ctx(t), hook("r1", epoch, "approve", 3)))
		_, err = s.DeliverHook(ctx(t), &store.DeliverHookParams{Token: "approve", Payload: []byte(`4`)})
		wantErr(t, err, store.ErrGone)
		// The first reply still answers a re-sent delivery.
		if again, err := s.DeliverHook(ctx(t), keyed); err != nil || !again.Duplicate {
			t.Fatalf("re-sent after the dispose: %+v %v", again, err)
		}
		if n := len(events(t, s, "r1", store.EventHookDisposed)); n != 1 {
			t.Fatalf("%d hook_disposed events, want 1", n)
		}
		wantErr(t, s.DisposeHook(ctx(t), hook("r1", epoch, "nope", 3)), store.ErrNotFound)
		_, err = s.DeliverHook(ctx(t), &store.DeliverHookParams{Token: "nope"})
		wantErr(t, err, store.ErrNotFound)
		_, err = s.GetHook(ctx(t), "nope")
		wantErr(t, err, store.ErrNotFound)
	})

	t.Run("TokensAreUniqueWhileLive", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		e1 := startRun(t, s, "r1")
		must(t, s.CreateHook(ctx(t), hook("r1", e1, "tok", 1)))
		e2 := startRun(t, s, "r2")
		err := s.CreateHook(ctx(t), hook("r2", e2, "tok", 1))
		wantErr(t, err, store.ErrHookConflict)
		if !strings.Contains(err.Error(), "r1") || strings.Contains(err.Error(), `"tok"`) || !strings.Contains(err.Error(), store.HookRef("tok")) {
			t.Fatalf("conflict %q does not name the run holding the token, or names the token (a capability) and not its reference", err)
		}
		_, err = s.DeliverHook(ctx(t), &store.DeliverHookParams{Token: "tok", Payload: []byte(`1`), IdempotencyKey: "k"})
		must(t, err)
		// r1 ends: its hook is disposed, deliveries are refused, and the
		// token is free for r2, whose hook knows nothing of r1's keys.
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: e1, Status: store.RunCompleted,
			Events: []store.Event{{Type: store.EventRunCompleted}}}))
		_, err = s.DeliverHook(ctx(t), &store.DeliverHookParams{Token: "tok", Payload: []byte(`2`)})
		wantErr(t, err, store.ErrGone)
		must(t, s.CreateHook(ctx(t), hook("r2", e2, "tok", 1)))
		res, err := s.DeliverHook(ctx(t), &store.DeliverHookParams{Token: "tok", Payload: []byte(`3`), IdempotencyKey: "k"})
		must(t, err)
		if res.RunID != "r2" || res.Duplicate {
			t.Fatalf("delivery to the token's new hook: %+v", res)
		}
		hs, err := s.ListHooks(ctx(t), "r2")
		must(t, err)
		if len(hs) != 1 || hs[0].Token != "tok" || hs[0].Received != 1 {
			t.Fatalf("r2's hooks %+v", hs)
		}
		if hs, _ := s.ListHooks(ctx(t), "r1"); len(hs) != 0 {
			t.Fatalf("r1 still lists %+v", hs)
		}
	})

	t.Run("DeliveryWakesAParkedRun", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		must(t, s.CreateHook(ctx(t), hook("r1", epoch, "tok", 1)))
		far := time.Now().Add(24 * time.Hour)
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Release: true, WakeAt: far}))
		if runs, _ := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 1, LeaseTTL: ttl}); len(runs) != 0 {
			t.Fatalf("a parked run was claimed: %v", runIDs(runs))
		}
		_, err := s.DeliverHook(ctx(t), &store.DeliverHookParams{Token: "tok", Payload: []byte(`1`)})
		must(t, err)
		runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 1, LeaseTTL: ttl})
		must(t, err)
		if len(runs) != 1 {
			t.Fatal("the delivery did not wake the parked run")
		}
		// A worker that parks without having seen a delivery made
		// meanwhile is woken at once: its SeenEvents is behind the log.
		epoch = runs[0].LeaseEpoch
		evs, err := s.ListEvents(ctx(t), "r1", 0)
		must(t, err)
		seen := evs[len(evs)-1].Seq
		_, err = s.DeliverHook(ctx(t), &store.DeliverHookParams{Token: "tok", Payload: []byte(`2`)})
		must(t, err)
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Release: true, WakeAt: far, SeenEvents: seen, CheckSeen: true}))
		if runs, _ := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 1, LeaseTTL: ttl}); len(runs) != 1 {
			t.Fatal("a run parked behind an unseen delivery stayed parked")
		}
	})

	t.Run("ARecordDeliversToAnotherRunsHook", func(t *testing.T) {
		// A child's end and the delivery of it to its parent's hook are one
		// transaction: a parked parent is claimable at once, a second
		// delivery of an end (OnlyFirst) adds nothing, and a delivery
		// nobody takes refuses nothing of the Advance.
		t.Parallel()
		s := h.New(t)
		pe := startRun(t, s, "parent")
		must(t, s.CreateHook(ctx(t), hook("parent", pe, "child_c1", 2)))
		must(t, s.CreateHook(ctx(t), hook("parent", pe, "child_c2", 3)))
		far := time.Now().Add(24 * time.Hour)
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "parent", LeaseEpoch: pe, Release: true, WakeAt: far}))
		for _, id := range []string{"c1", "c2"} {
			_, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: id, Workflow: "wf", Parent: "parent"})
			must(t, err)
		}
		runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 2, LeaseTTL: ttl})
		must(t, err)
		if len(runs) != 2 {
			t.Fatalf("claimed %v, want the two children", runIDs(runs))
		}
		epochs := map[string]int64{runs[0].ID: runs[0].LeaseEpoch, runs[1].ID: runs[1].LeaseEpoch}
		end := func(child string, d *store.DeliverHookParams) error {
			return s.Advance(ctx(t), &store.AdvanceParams{RunID: child, LeaseEpoch: epochs[child], Status: store.RunCompleted,
				Output: []byte(`1`), Events: []store.Event{{Type: store.EventRunCompleted}}, Deliver: d})
		}
		must(t, end("c1", &store.DeliverHookParams{RunID: "parent", Token: "child_c1", Payload: []byte(`{"status":"completed"}`), OnlyFirst: true}))
		got := events(t, s, "parent", store.EventHookReceived)
		if len(got) != 1 || got[0].Op != 2 || string(got[0].Data) != `{"status":"completed"}` {
			t.Fatalf("the parent's hook_received events %+v, want the child's end at op 2", got)
		}
		if r, err := s.GetRun(ctx(t), "parent"); err != nil || r.WakeAt.After(time.Now().Add(time.Hour)) {
			t.Fatalf("the parked parent was not woken: %+v %v", r, err)
		}
		// The parent's own look at its child (OnlyFirst) adds nothing now.
		res, err := s.DeliverHook(ctx(t), &store.DeliverHookParams{RunID: "parent", Token: "child_c1", Payload: []byte(`{}`), OnlyFirst: true})
		if err != nil || !res.Duplicate || res.Count != 1 {
			t.Fatalf("a second end: %+v %v, want a duplicate", res, err)
		}
		// A delivery to a hook of another run than it names, or to none,
		// is not made; the Advance is.
		must(t, end("c2", &store.DeliverHookParams{RunID: "elsewhere", Token: "child_c2", Payload: []byte(`1`), OnlyFirst: true}))
		if r, _ := s.GetRun(ctx(t), "c2"); r.Status != store.RunCompleted {
			t.Fatalf("child c2 is %s", r.Status)
		}
		if got := events(t, s, "parent", store.EventHookReceived); len(got) != 1 {
			t.Fatalf("the parent got %d deliveries, want 1", len(got))
		}
		bad := &store.AdvanceParams{RunID: "c1", LeaseEpoch: 1, Deliver: &store.DeliverHookParams{RunID: "parent", Token: "t", IdempotencyKey: "k"}}
		wantErr(t, s.Advance(ctx(t), bad), store.ErrInvalid)
		counted := &store.AdvanceParams{RunID: "c1", LeaseEpoch: 1, Deliver: &store.DeliverHookParams{RunID: "parent", Token: "t", Payload: []byte(`1`)}}
		wantErr(t, s.Advance(ctx(t), counted), store.ErrInvalid)
	})

	t.Run("ASenderClosesTheHook", func(t *testing.T) {
		// A delivery may close the hook after its payload, or alone: a
		// hook_disposed event follows, deliveries after it are gone, and a
		// parked run is woken to take what came.
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		must(t, s.CreateHook(ctx(t), hook("r1", epoch, "a", 1)))
		must(t, s.CreateHook(ctx(t), hook("r1", epoch, "b", 2)))
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Release: true, WakeAt: time.Now().Add(24 * time.Hour)}))
		res, err := s.DeliverHook(ctx(t), &store.DeliverHookParams{Token: "a", Payload: []byte(`1`), Close: true})
		must(t, err)
		if !res.Closed || res.Count != 1 {
			t.Fatalf("closing delivery %+v", res)
		}
		keyed := &store.DeliverHookParams{Token: "b", Close: true, IdempotencyKey: "k", RequestDigest: []byte("d")}
		res, err = s.DeliverHook(ctx(t), keyed)
		must(t, err)
		if !res.Closed || res.Count != 0 {
			t.Fatalf("a close alone %+v", res)
		}
		if again, err := s.DeliverHook(ctx(t), keyed); err != nil || !again.Duplicate {
			t.Fatalf("the close sent again: %+v %v", again, err)
		}
		for _, tok := range []string{"a", "b"} {
			_, err := s.DeliverHook(ctx(t), &store.DeliverHookParams{Token: tok, Payload: []byte(`2`)})
			wantErr(t, err, store.ErrGone)
			info, err := s.GetHook(ctx(t), tok)
			must(t, err)
			if !info.Disposed {
				t.Fatalf("hook %s not closed: %+v", tok, info)
			}
		}
		evs, err := s.ListEvents(ctx(t), "r1", 0)
		must(t, err)
		var types []string
		for _, e := range evs[len(evs)-3:] {
			types = append(types, fmt.Sprintf("%s@%d", e.Type, e.Op))
		}
		if want := "hook_received@1 hook_disposed@1 hook_disposed@2"; strings.Join(types, " ") != want {
			t.Fatalf("the log ends with %v, want %s", types, want)
		}
		if runs, _ := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 1, LeaseTTL: ttl}); len(runs) != 1 {
			t.Fatal("a sender's close did not wake the parked run")
		}
	})

	t.Run("ACancelledRunIsNotLeftAsleep", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		must(t, s.RequestCancel(ctx(t), "r1"))
		// The worker had not heard of the cancel when it parked the run.
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Release: true, WakeAt: time.Now().Add(time.Hour)}))
		runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 1, LeaseTTL: ttl})
		must(t, err)
		if len(runs) != 1 || !runs[0].CancelRequested {
			t.Fatalf("a run parked after its cancel was requested is not claimable: %v", runIDs(runs))
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		for _, p := range []*store.HookParams{hook("r1", epoch, "", 1), hook("r1", epoch, "a/b", 1), hook("r1", epoch, "t\xff", 1), hook("r1", epoch, "t", 0)} {
			wantErr(t, s.CreateHook(ctx(t), p), store.ErrInvalid)
		}
		must(t, s.CreateHook(ctx(t), hook("r1", epoch, "t", 1)))
		_, err := s.DeliverHook(ctx(t), &store.DeliverHookParams{Token: "t", Payload: make([]byte, store.MaxHookPayload+1)})
		wantErr(t, err, store.ErrTooLarge)
		if n := len(events(t, s, "r1", store.EventHookReceived)); n != 0 {
			t.Fatalf("a refused delivery recorded %d events", n)
		}
		var gone error = store.ErrGone
		if errors.Is(store.ErrNotFound, gone) {
			t.Fatal("ErrGone and ErrNotFound must differ")
		}
	})

	t.Run("PurgeRemovesHooks", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		must(t, s.CreateHook(ctx(t), hook("r1", epoch, "t", 1)))
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Status: store.RunCompleted}))
		n, err := s.PurgeRuns(ctx(t), &store.PurgeRunsParams{Before: time.Now().Add(time.Hour)})
		must(t, err)
		if n != 1 {
			t.Fatalf("purged %d runs", n)
		}
		_, err = s.GetHook(ctx(t), "t")
		wantErr(t, err, store.ErrNotFound)
	})
}

// testParent checks that a child run knows its parent, on every read.
func testParent(t *testing.T, h harness) {
	s := h.New(t)
	_, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "child", Workflow: "wf", Parent: "parent"})
	must(t, err)
	r, err := s.GetRun(ctx(t), "child")
	must(t, err)
	if r.Parent != "parent" {
		t.Fatalf("GetRun: parent %q", r.Parent)
	}
	runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 1, LeaseTTL: ttl})
	must(t, err)
	if len(runs) != 1 || runs[0].Parent != "parent" {
		t.Fatalf("ClaimRuns: %+v", runs)
	}
	l, err := s.ListRuns(ctx(t), &store.ListRunsParams{})
	must(t, err)
	if len(l) != 1 || l[0].Parent != "parent" {
		t.Fatalf("ListRuns: %+v", l)
	}
	wantErr(t, func() error {
		_, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "c2", Workflow: "wf", Parent: "p\xff"})
		return err
	}(), store.ErrInvalid)
}
