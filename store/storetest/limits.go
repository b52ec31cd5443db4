package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
)

// testLimits: limiters (store.Limits) as package limit decides them, kept
// by the store: a configuration set, read and changed (the change applies
// to the next request); slots granted, refused with why and when, given
// back, charged once, taken back with their lease; the state kept across a
// reopen; concurrent requests never granted beyond the limit; bad input
// refused with nothing changed.
func testLimits(t *testing.T, h harness) {
	newLimits := func(t *testing.T) store.Limits {
		s, ok := h.Harness.New(t).(store.Limits)
		if !ok {
			t.Skip("the store has no store.Limits")
		}
		return s
	}
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	acq := func(t *testing.T, s store.Limits, name, holder string, ms int) *limit.Decision {
		t.Helper()
		d, err := s.AcquireSlot(ctx(t), &store.AcquireSlotParams{Limiter: name, Request: limit.Request{Holder: holder, Key: holder[:1], Lease: 10 * time.Second}, Now: at(ms)})
		must(t, err)
		return d
	}

	t.Run("Config", func(t *testing.T) {
		t.Parallel()
		s := newLimits(t)
		_, err := s.GetLimiter(ctx(t), "openai")
		wantErr(t, err, store.ErrNotFound)
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "openai", Concurrency: 2, Rate: 60, Period: time.Minute}))
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "anthropic", Budget: 1000, Period: time.Minute}))
		for _, bad := range []*limit.Config{{Name: "openai"}, {Name: "openai", Concurrency: -1}, {Name: "", Concurrency: 1}, {Name: "openai", Rate: 5}} {
			wantErr(t, s.SetLimiter(ctx(t), bad), store.ErrInvalid)
		}
		c, err := s.GetLimiter(ctx(t), "openai")
		must(t, err)
		if *c != (limit.Config{Name: "openai", Concurrency: 2, Rate: 60, Period: time.Minute}) {
			t.Fatalf("openai is %+v after refused changes", c)
		}
		all, err := s.ListLimiters(ctx(t))
		must(t, err)
		if len(all) != 2 || all[0].Name != "anthropic" || all[1].Name != "openai" {
			t.Fatalf("ListLimiters: %v", all)
		}
		_, err = s.AcquireSlot(ctx(t), &store.AcquireSlotParams{Limiter: "nope", Request: limit.Request{Holder: "h", Lease: time.Second}})
		wantErr(t, err, store.ErrNotFound)
		_, err = s.ReleaseSlot(ctx(t), &store.ReleaseSlotParams{Limiter: "nope", Holder: "h"})
		wantErr(t, err, store.ErrNotFound)
	})

	t.Run("Delete", func(t *testing.T) {
		t.Parallel()
		s := newLimits(t)
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "busy", Concurrency: 1}))
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "idle", Concurrency: 1}))
		// On the store's clock, which the delete reads: a hold and a place
		// in line last their leases.
		now := func(holder string) *limit.Decision {
			t.Helper()
			d, err := s.AcquireSlot(ctx(t), &store.AcquireSlotParams{Limiter: "busy", Request: limit.Request{Holder: holder, Key: holder[:1], Lease: time.Minute}})
			must(t, err)
			return d
		}
		if d := now("a1"); !d.Granted {
			t.Fatalf("a1: %+v", d)
		}
		if d := now("b1"); d.Granted {
			t.Fatalf("b1 granted past the limit: %+v", d)
		}
		// Someone waits in its line: in use.
		if err := s.DeleteLimiter(ctx(t), "busy"); !errors.Is(err, store.ErrLimiterInUse) {
			t.Fatalf("delete a limiter someone waits for: %v, want ErrLimiterInUse", err)
		}
		if _, err := s.GetLimiter(ctx(t), "busy"); err != nil {
			t.Fatalf("a refused delete took the limiter: %v", err)
		}
		must(t, s.DeleteLimiter(ctx(t), "idle"))
		if _, err := s.GetLimiter(ctx(t), "idle"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get a deleted limiter: %v", err)
		}
		if _, err := s.AcquireSlot(ctx(t), &store.AcquireSlotParams{Limiter: "idle", Request: limit.Request{Holder: "c1", Lease: time.Second}, Now: at(2)}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a slot of a deleted limiter: %v", err)
		}
		for _, name := range []string{"idle", "nope"} {
			if err := s.DeleteLimiter(ctx(t), name); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("delete %q: %v, want ErrNotFound", name, err)
			}
		}
		if err := s.DeleteLimiter(ctx(t), "a\x00b"); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("delete a name no limiter can have: %v", err)
		}
	})

	t.Run("Watchers", func(t *testing.T) {
		// A waiter joining the line wakes the line's watchers (grant
		// holders); a release wakes the line's head. (A watcher may also
		// be woken for nothing, when changes may have been missed — on
		// PostgreSQL, once its listener connects — so only wakes that
		// must come are asserted.)
		t.Parallel()
		s := newLimits(t)
		w, ok := s.(store.LimiterWatcher)
		if !ok {
			t.Skip("the store has no store.LimiterWatcher")
		}
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "w", Concurrency: 1}))
		closed := func(c <-chan struct{}) bool {
			select {
			case <-c:
				return true
			default:
				return false
			}
		}
		if !acq(t, s, "w", "a1", 0).Granted {
			t.Fatal("the free slot refused")
		}
		line, stopLine := w.WatchLimiterLine("w")
		defer stopLine()
		if d := acq(t, s, "w", "b1", 1); d.Granted || !d.Joined {
			t.Fatalf("b1 with the slot held: %+v", d)
		}
		if !closed(line) {
			t.Fatal("b1 joined the line: its watchers were not woken")
		}
		moved, stopMoved := w.WatchLimiter("w")
		defer stopMoved()
		handed, stopHanded := w.WatchSlot("w", "b1")
		defer stopHanded()
		_, err := s.ReleaseSlot(ctx(t), &store.ReleaseSlotParams{Limiter: "w", Holder: "a1", Now: at(3)})
		must(t, err)
		if !closed(moved) {
			t.Fatal("a release did not wake the line")
		}
		// The release handed the slot to b1, first in line (limit.HandOff),
		// and woke it: b1 holds it before it asks, and its ask finds it.
		if !closed(handed) {
			t.Fatal("b1 was handed the slot and not woken")
		}
		st, err := s.LimiterState(ctx(t), "w", at(3))
		must(t, err)
		if len(st.Holds) != 1 || st.Holds[0].Holder != "b1" || len(st.Waiters) != 0 {
			t.Fatalf("after a1's release: %+v", st)
		}
		if d := acq(t, s, "w", "c1", 4); d.Granted || !d.HandsOff {
			t.Fatalf("c1 took b1's slot: %+v", d)
		}
		if d := acq(t, s, "w", "b1", 5); !d.Granted {
			t.Fatalf("b1 asked for the slot it was handed: %+v", d)
		}
		// A raised bound hands the new slot to the line too.
		handed, stopHanded = w.WatchSlot("w", "c1")
		defer stopHanded()
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "w", Concurrency: 2}))
		if !closed(handed) {
			t.Fatal("c1 was handed the raised bound's slot and not woken")
		}
		if d := acq(t, s, "w", "c1", 6); !d.Granted {
			t.Fatalf("c1 after the bound was raised: %+v", d)
		}
		// Any change of the bounds wakes every waiter to ask again: one
		// that waits to be handed a slot would not be, once a rate makes
		// the limiter hand off no more (red team, round ten).
		if d := acq(t, s, "w", "d1", 7); d.Granted || !d.HandsOff {
			t.Fatalf("d1 with both slots held: %+v", d)
		}
		handed, stopHanded = w.WatchSlot("w", "d1")
		defer stopHanded()
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "w", Concurrency: 2, Rate: 100, Period: time.Second}))
		if !closed(handed) {
			t.Fatal("d1, waiting to be handed a slot, was not woken by a rate that hands off no more")
		}
		if d := acq(t, s, "w", "d1", 8); d.Granted || d.HandsOff {
			t.Fatalf("d1 asking again under the rate: %+v", d)
		}
	})

	t.Run("Slots", func(t *testing.T) {
		t.Parallel()
		s := newLimits(t)
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "l", Concurrency: 2}))
		if !acq(t, s, "l", "a1", 0).Granted || !acq(t, s, "l", "b1", 1).Granted {
			t.Fatal("free slots refused")
		}
		if d := acq(t, s, "l", "c1", 2); d.Granted || d.Reason != limit.Concurrency || d.Ahead != 0 || !d.RetryAt.Equal(at(10_000)) {
			t.Fatalf("a third: %+v", d)
		}
		if !acq(t, s, "l", "a1", 3).Granted {
			t.Fatal("asking again while holding was refused")
		}
		ok, err := s.ReleaseSlot(ctx(t), &store.ReleaseSlotParams{Limiter: "l", Holder: "b1", Now: at(4)})
		must(t, err)
		if !ok {
			t.Fatal("b1 released nothing")
		}
		// The release handed b1's slot to c1, first in line (limit.HandOff).
		if d := acq(t, s, "l", "d1", 5); d.Granted || d.Reason != limit.Concurrency || d.Ahead != 0 || !d.HandsOff {
			t.Fatalf("a newcomer took c1's slot: %+v", d)
		}
		if !acq(t, s, "l", "c1", 6).Granted {
			t.Fatal("c1 after the release")
		}
		// A change applies to the next request.
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "l", Concurrency: 3}))
		if !acq(t, s, "l", "d1", 7).Granted {
			t.Fatal("d1 after the limit was raised")
		}
		st, err := s.LimiterState(ctx(t), "l", at(7))
		must(t, err)
		if len(st.Holds) != 3 || len(st.Waiters) != 0 {
			t.Fatalf("state %+v", st)
		}
		renewed, err := s.RenewSlot(ctx(t), &store.RenewSlotParams{Limiter: "l", Holder: "a1", Lease: time.Minute, Now: at(8)})
		must(t, err)
		// The others' leases run out at 10 s; a1's was renewed.
		if !renewed || !acq(t, s, "l", "e1", 10_010).Granted || !acq(t, s, "l", "f1", 10_011).Granted {
			t.Fatal("slots did not come back with their leases")
		}
		if d := acq(t, s, "l", "g1", 10_012); d.Granted {
			t.Fatal("a renewed slot was given away")
		}
		ok, err = s.ReleaseSlot(ctx(t), &store.ReleaseSlotParams{Limiter: "l", Holder: "b1", Now: at(10_013)})
		must(t, err)
		if ok {
			t.Fatal("a second release of b1 released something")
		}
	})

	t.Run("SlotHeld", func(t *testing.T) {
		// A waiter handed a slot by a release reads that it holds it, and
		// until when, without asking: the engine starts its step on it.
		t.Parallel()
		s := newLimits(t)
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "h", Concurrency: 1}))
		held := func(holder string, ms int) (time.Time, bool) {
			t.Helper()
			until, ok, err := s.SlotHeld(ctx(t), &store.SlotHeldParams{Limiter: "h", Holder: holder, Now: at(ms)})
			must(t, err)
			return until, ok
		}
		if !acq(t, s, "h", "a1", 0).Granted || acq(t, s, "h", "b1", 1).Granted {
			t.Fatal("a1 first, b1 in line")
		}
		if until, ok := held("a1", 2); !ok || !until.Equal(at(10_000)) {
			t.Fatalf("a1 holds until %v, %v; want 10 s", until.Sub(t0), ok)
		}
		if _, ok := held("b1", 2); ok {
			t.Fatal("b1, in line, read as holding")
		}
		if _, err := s.ReleaseSlot(ctx(t), &store.ReleaseSlotParams{Limiter: "h", Holder: "a1", Now: at(100)}); err != nil {
			t.Fatal(err)
		}
		// Handed at the release: b1's lease counts from then.
		if until, ok := held("b1", 101); !ok || !until.Equal(at(10_100)) {
			t.Fatalf("b1 holds until %v, %v; want 10.1 s", until.Sub(t0), ok)
		}
		if _, ok := held("a1", 101); ok {
			t.Fatal("a1 read as holding what it gave back")
		}
		// A reader whose clock is behind the release's counts from its view.
		if until, ok := held("b1", 50); !ok || !until.Equal(at(10_050)) {
			t.Fatalf("read 50 ms behind: %v, %v; want 10.05 s", until.Sub(t0), ok)
		}
		if _, ok := held("b1", 10_100); ok {
			t.Fatal("b1 read as holding past its lease")
		}
		_, _, err := s.SlotHeld(ctx(t), &store.SlotHeldParams{Limiter: "nope", Holder: "b1"})
		wantErr(t, err, store.ErrNotFound)
		_, _, err = s.SlotHeld(ctx(t), &store.SlotHeldParams{Limiter: "h"})
		wantErr(t, err, store.ErrInvalid)
		_, _, err = s.SlotHeld(ctx(t), &store.SlotHeldParams{Limiter: "a\x00b", Holder: "b1"})
		wantErr(t, err, store.ErrInvalid)
	})

	t.Run("CreationsAtOnceKeepTheState", func(t *testing.T) {
		// Processes that start at once each set the same new limiter, and
		// each takes a slot once its own set returned. A creation that
		// waited for another's must not reset the slots granted since: at
		// most one holder of a one-slot limiter, in every round.
		t.Parallel()
		s := newLimits(t)
		for round := range 12 {
			name := fmt.Sprintf("new%d", round)
			var granted atomic.Int32
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := s.SetLimiter(ctx(t), &limit.Config{Name: name, Concurrency: 1}); err != nil {
						errs <- err
						return
					}
					d, err := s.AcquireSlot(ctx(t), &store.AcquireSlotParams{Limiter: name,
						Request: limit.Request{Holder: fmt.Sprintf("h%d", i), Key: "k", Lease: time.Minute}, Now: at(round)})
					if err != nil {
						errs <- err
						return
					}
					if d.Granted {
						granted.Add(1)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if n := granted.Load(); n != 1 {
				t.Fatalf("round %d: %d holders of a one-slot limiter set at once by 8 processes", round, n)
			}
		}
	})

	t.Run("Grants", func(t *testing.T) {
		t.Parallel()
		s := newLimits(t)
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "g", Concurrency: 4}))
		grant := func(holder string, n, ms int) *limit.Decision {
			t.Helper()
			d, err := s.AcquireSlot(ctx(t), &store.AcquireSlotParams{Limiter: "g", Request: limit.Request{Holder: holder, Key: "k", Lease: 10 * time.Second, Grant: n}, Now: at(ms)})
			must(t, err)
			return d
		}
		if d := grant("e1", 3, 0); !d.Granted || d.Count != 3 {
			t.Fatalf("a grant of 3: %+v", d)
		}
		if d := grant("e2", 3, 1); !d.Granted || d.Count != 1 {
			t.Fatalf("a second engine's grant of 3 with 1 free: %+v", d)
		}
		if d := acq(t, s, "g", "x1", 2); d.Granted {
			t.Fatalf("a slot beyond the grants: %+v", d)
		}
		if d := grant("e1", 3, 3); d.Count != 3 || d.Waiting != 1 {
			t.Fatalf("e1's renewal should say x1 waits: %+v", d)
		}
		if d := grant("e1", 1, 4); d.Count != 1 {
			t.Fatalf("e1 shrunk to 1: %+v", d)
		}
		if d := acq(t, s, "g", "x1", 5); !d.Granted {
			t.Fatalf("x1 after e1 gave back two: %+v", d)
		}
		st, err := s.LimiterState(ctx(t), "g", at(5))
		must(t, err)
		if limit.Held(*st) != 3 {
			t.Fatalf("held %d, want 3: %+v", limit.Held(*st), st.Holds)
		}
		// A limiter with a window takes no grants, and changes nothing.
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "w", Rate: 5, Period: time.Second}))
		d, err := s.AcquireSlot(ctx(t), &store.AcquireSlotParams{Limiter: "w", Request: limit.Request{Holder: "e1", Lease: time.Second, Grant: 2}, Now: at(6)})
		must(t, err)
		if d.Granted || d.Reason != limit.NoGrant {
			t.Fatalf("a grant of a rate limiter: %+v", d)
		}
		if _, err := s.AcquireSlot(ctx(t), &store.AcquireSlotParams{Limiter: "g", Request: limit.Request{Holder: "e1", Lease: time.Second, Grant: -1}}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("a negative grant: %v", err)
		}
	})
	t.Run("Budget", func(t *testing.T) {
		t.Parallel()
		s := newLimits(t)
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "tokens", Budget: 1000, Period: time.Minute}))
		if !acq(t, s, "tokens", "a", 0).Granted {
			t.Fatal("refused with nothing spent")
		}
		for range 2 { // a release sent again charges once
			_, err := s.ReleaseSlot(ctx(t), &store.ReleaseSlotParams{Limiter: "tokens", Holder: "a", Cost: 600, Now: at(10)})
			must(t, err)
		}
		if !acq(t, s, "tokens", "b", 20).Granted {
			t.Fatal("600 of 1000 spent, and refused")
		}
		_, err := s.ReleaseSlot(ctx(t), &store.ReleaseSlotParams{Limiter: "tokens", Holder: "b", Cost: 500, Now: at(30)})
		must(t, err)
		if d := acq(t, s, "tokens", "c", 40); d.Granted || d.Reason != limit.Budget || !d.RetryAt.Equal(at(60_000)) {
			t.Fatalf("1100 of 1000 spent: %+v", d)
		}
		_, err = s.ReleaseSlot(ctx(t), &store.ReleaseSlotParams{Limiter: "tokens", Holder: "c", Cost: -1})
		wantErr(t, err, store.ErrInvalid)
		if !acq(t, s, "tokens", "c", 60_001).Granted {
			t.Fatal("the window moved on, and refused")
		}
	})

	t.Run("Hostile", func(t *testing.T) {
		t.Parallel()
		s := newLimits(t)
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "l", Concurrency: 1}))
		bad := string([]byte{0xff, 0xfe})
		for _, p := range []*store.AcquireSlotParams{
			{Limiter: "l", Request: limit.Request{Holder: bad, Lease: time.Second}},
			{Limiter: "l", Request: limit.Request{Holder: "h", Key: bad, Lease: time.Second}},
			{Limiter: "l", Request: limit.Request{Holder: "h", Lease: 0}},
			{Limiter: bad, Request: limit.Request{Holder: "h", Lease: time.Second}},
			{Limiter: "", Request: limit.Request{Holder: "h", Lease: time.Second}},
		} {
			_, err := s.AcquireSlot(ctx(t), p)
			wantErr(t, err, store.ErrInvalid)
		}
		_, err := s.RenewSlot(ctx(t), &store.RenewSlotParams{Limiter: "l", Holder: "h"})
		wantErr(t, err, store.ErrInvalid)
		st, err := s.LimiterState(ctx(t), "l", time.Time{})
		must(t, err)
		if len(st.Holds)+len(st.Waiters) != 0 {
			t.Fatalf("refused requests changed the state: %+v", st)
		}
	})

	t.Run("NeverBeyondTheLimit", func(t *testing.T) {
		t.Parallel()
		s := newLimits(t)
		const limitN = 3
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "l", Concurrency: limitN}))
		var in, most atomic.Int64
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 6 {
					holder := fmt.Sprintf("w%d-%d", w, i)
					deadline := time.Now().Add(20 * time.Second)
					for {
						d, err := s.AcquireSlot(ctx(t), &store.AcquireSlotParams{Limiter: "l", Request: limit.Request{Holder: holder, Key: fmt.Sprint(w), Lease: time.Minute}})
						if err != nil {
							t.Error(err)
							return
						}
						if d.Granted {
							break
						}
						if time.Now().After(deadline) {
							t.Errorf("%s waited 20 s for a slot", holder)
							return
						}
						time.Sleep(time.Millisecond)
					}
					n := in.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(time.Millisecond)
					in.Add(-1)
					if _, err := s.ReleaseSlot(ctx(t), &store.ReleaseSlotParams{Limiter: "l", Holder: holder}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if m := most.Load(); m > limitN || m == 0 {
			t.Fatalf("%d slots held at once, limit %d", m, limitN)
		}
	})

	// A parked run says on its row what limiters it waits for
	// (AdvanceParams.Limiters): a change of one makes it claimable, a
	// delete is refused while it waits, and its next release or its end
	// clears it. A run parked in a line (Lined) is claimed before its wake
	// time by a claim with room (ClaimRunsParams.Lined), highest priority
	// first, then oldest, within the claim's limit.
	t.Run("ParkedRuns", func(t *testing.T) {
		t.Parallel()
		s, ok := h.Harness.New(t).(store.Full)
		if !ok {
			t.Skip("not a full store")
		}
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "llm", Concurrency: 1, Rate: 1, Period: time.Hour}))
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "other", Concurrency: 1, Budget: 5, Period: time.Hour}))
		far := time.Now().Add(time.Hour)
		park := func(id string, p store.AdvanceParams) {
			t.Helper()
			epoch := startRun(t, s, id)
			p.RunID, p.LeaseEpoch, p.Release = id, epoch, true
			must(t, s.Advance(ctx(t), &p))
		}
		claimable := func(at time.Time) []string {
			t.Helper()
			r, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: "peek", Limit: 10, LeaseTTL: time.Millisecond, Now: at})
			must(t, err)
			return runIDs(r)
		}
		park("window", store.AdvanceParams{WakeAt: far, Limiters: []string{"llm"}})
		park("both", store.AdvanceParams{WakeAt: far, Limiters: []string{"llm", "other"}})
		park("asleep", store.AdvanceParams{WakeAt: far})
		for _, name := range []string{"llm", "other"} {
			if err := s.DeleteLimiter(ctx(t), name); !errors.Is(err, store.ErrLimiterInUse) {
				t.Fatalf("delete %s, which parked runs wait for: %v, want ErrLimiterInUse", name, err)
			}
		}
		// The same bounds again, or tighter ones, wake nothing (red team,
		// round twelve: each PUT replayed every parked run).
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "llm", Concurrency: 1, Rate: 1, Period: time.Hour}))
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "other", Concurrency: 1, Budget: 4, Period: time.Hour}))
		if got := claimable(time.Now()); len(got) != 0 {
			t.Fatalf("claimable after changes that open no window: %v", got)
		}
		// A change of "other" that opens its window wakes the run that
		// waits for it too, and no other.
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "other", Concurrency: 2}))
		if got := claimable(time.Now()); len(got) != 1 || got[0] != "both" {
			t.Fatalf("claimable after other's change: %v, want [both]", got)
		}
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "llm", Concurrency: 1}))
		if got := claimable(time.Now().Add(2 * time.Millisecond)); len(got) != 2 || !slices.Contains(got, "window") || !slices.Contains(got, "both") {
			t.Fatalf("claimable after llm's change: %v, want [window both]", got)
		}
		// Released again without limiters, or ended, the runs wait for
		// nothing: the limiters go.
		for _, id := range []string{"window", "both"} {
			r, err := s.GetRun(ctx(t), id)
			must(t, err)
			if id == "window" {
				must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: id, LeaseEpoch: r.LeaseEpoch, Release: true, WakeAt: far}))
			} else {
				must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: id, LeaseEpoch: r.LeaseEpoch, Status: store.RunCompleted, Output: []byte("1")}))
			}
		}
		must(t, s.DeleteLimiter(ctx(t), "other"))
		must(t, s.DeleteLimiter(ctx(t), "llm"))

		// Lined runs: claimed before their wake time only by a claim with
		// room in its lines, best first, within the limit.
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "x", Concurrency: 1, Rate: 1, Period: time.Hour}))
		park("l-low", store.AdvanceParams{WakeAt: far, Limiters: []string{"x"}, Lined: true})
		park("l-high", store.AdvanceParams{WakeAt: far, Limiters: []string{"x"}, Lined: true, LinePriority: 5})
		park("l-low2", store.AdvanceParams{WakeAt: far, Limiters: []string{"x"}, Lined: true})
		// A lined run waits for a seat, not for the limiter: a change that
		// opens the window does not wake it.
		must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "x", Concurrency: 1}))
		createRun(t, s, "fresh")
		r, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 10, LeaseTTL: ttl})
		must(t, err)
		if got := runIDs(r); len(got) != 1 || got[0] != "fresh" {
			t.Fatalf("a claim without room in its lines: %v, want [fresh]", got)
		}
		r, err = s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 2, LeaseTTL: ttl, Lined: 5})
		must(t, err)
		if got := runIDs(r); len(got) != 2 || !slices.Contains(got, "l-high") || !slices.Contains(got, "l-low") {
			t.Fatalf("a claim of 2 with room for 5: %v, want l-high and l-low (best, then oldest)", got)
		}
		for _, run := range r {
			if !run.Lined || run.WakeAt.After(time.Now()) {
				t.Fatalf("%s claimed from the line: Lined %v, WakeAt %v (want true, now: runnable at its lease's end)", run.ID, run.Lined, run.WakeAt)
			}
		}
		createRun(t, s, "fresh2")
		r, err = s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 5, LeaseTTL: ttl, Lined: 1})
		must(t, err)
		if got := runIDs(r); len(got) != 2 || !slices.Contains(got, "l-low2") || !slices.Contains(got, "fresh2") {
			t.Fatalf("a claim of 5 with room for 1: %v, want l-low2 and fresh2", got)
		}
		for _, run := range r {
			if run.Lined != (run.ID == "l-low2") {
				t.Fatalf("%s: Lined %v", run.ID, run.Lined)
			}
		}
		// Claimed from the line, a run is lined no more: its worker gone,
		// it is runnable at its lease's end, like any other.
		r, err = s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: "next", Limit: 10, LeaseTTL: ttl, Lined: 10, Now: time.Now().Add(2 * ttl)})
		must(t, err)
		got := runIDs(r)
		for _, id := range []string{"fresh", "fresh2", "l-low", "l-high", "l-low2"} {
			if !slices.Contains(got, id) || slices.ContainsFunc(r, func(run *store.Run) bool { return run.Lined }) {
				t.Fatalf("after the leases ran out: %v, want %s among them, none lined", got, id)
			}
		}
		wantErr(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: r[0].ID, LeaseEpoch: r[0].LeaseEpoch, Limiters: []string{"x"}}), store.ErrInvalid)
		wantErr(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: r[0].ID, LeaseEpoch: r[0].LeaseEpoch, Release: true, Limiters: []string{"a\nb"}}), store.ErrInvalid)
	})

	if h.Harness.Reopen != nil {
		t.Run("Reopen", func(t *testing.T) {
			t.Parallel()
			s := newLimits(t)
			must(t, s.SetLimiter(ctx(t), &limit.Config{Name: "l", Concurrency: 1}))
			if !acq(t, s, "l", "a", 0).Granted {
				t.Fatal("refused")
			}
			r, ok := h.Harness.Reopen(t, s.(store.Store)).(store.Limits)
			if !ok {
				t.Fatal("the reopened store has no store.Limits")
			}
			if d := acq(t, r, "l", "b", 1); d.Granted {
				t.Fatal("a's slot was lost in the reopen")
			}
		})
	}
}
