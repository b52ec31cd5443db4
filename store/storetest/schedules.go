package storetest

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/schedule"
	"github.com/weirhq/weir/store"
)

// testSchedules: schedules (store.Schedules) kept by the store: set, read,
// changed with their state kept, paused and resumed (the ticks while
// paused start nothing), deleted; leased to one engine at a time to
// decide, the lease taken back when it runs out; an advance saved only
// under the claim it answers; bad input refused with nothing changed.
func testSchedules(t *testing.T, h harness) {
	newSchedules := func(t *testing.T) store.Schedules {
		s, ok := h.Harness.New(t).(store.Schedules)
		if !ok {
			t.Skip("the store has no store.Schedules")
		}
		return s
	}
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	set := func(t *testing.T, s store.Schedules, p store.SetScheduleParams) *store.Schedule {
		t.Helper()
		if p.Workflow == "" {
			p.Workflow = "wf"
		}
		sc, err := s.SetSchedule(ctx(t), &p)
		must(t, err)
		return sc
	}
	claim := func(t *testing.T, s store.Schedules, owner string, ms int) []*store.Schedule {
		t.Helper()
		out, err := s.ClaimSchedules(ctx(t), &store.ClaimSchedulesParams{Owner: owner, Lease: time.Second, Limit: 10, Now: at(ms)})
		must(t, err)
		return out
	}

	t.Run("Config", func(t *testing.T) {
		t.Parallel()
		s := newSchedules(t)
		sc := set(t, s, store.SetScheduleParams{Name: "nightly", Spec: "0 3 * * *", TZ: "Europe/Paris", Input: []byte(`{"n":1}`),
			Policy: schedule.Policy{Overlap: schedule.BufferOne, Backfill: time.Hour}, Now: at(0)})
		// 03:00 in Paris is 02:00 UTC in winter: the next day's.
		if !sc.NextDue.Equal(time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)) || !sc.State.Cursor.Equal(at(0)) || sc.Version != 1 {
			t.Fatalf("set: %+v", sc)
		}
		got, err := s.GetSchedule(ctx(t), "nightly")
		must(t, err)
		if got.Workflow != "wf" || string(got.Input) != `{"n":1}` || got.Spec != "0 3 * * *" || got.TZ != "Europe/Paris" ||
			got.Overlap != schedule.BufferOne || got.Backfill != time.Hour || !got.NextDue.Equal(sc.NextDue) || !got.CreatedAt.Equal(at(0)) {
			t.Fatalf("get: %+v", got)
		}
		// A new spec starts from the change, not from the creation (its
		// ticks before it were not the schedule's: backfilled, they
		// would start at once); the overlap defaults to skip.
		sc = set(t, s, store.SetScheduleParams{Name: "nightly", Spec: "@every 1m", Now: at(5000)})
		if !sc.State.Cursor.Equal(at(5000)) || !sc.NextDue.Equal(at(60_000)) || sc.Overlap != schedule.Skip || sc.Version != 2 || !sc.CreatedAt.Equal(at(0)) {
			t.Fatalf("changed: %+v", sc)
		}
		// A change of anything else keeps the state.
		sc = set(t, s, store.SetScheduleParams{Name: "nightly", Spec: "@every 1m", Input: []byte(`{"n":2}`), Now: at(9000)})
		if !sc.State.Cursor.Equal(at(5000)) || !sc.NextDue.Equal(at(60_000)) || sc.Version != 3 {
			t.Fatalf("input changed: %+v", sc)
		}
		set(t, s, store.SetScheduleParams{Name: "a-first", Spec: "@hourly", Now: at(0)})
		all, err := s.ListSchedules(ctx(t), &store.ListSchedulesParams{})
		must(t, err)
		if len(all.Schedules) != 2 || all.Schedules[0].Name != "a-first" || all.Schedules[1].Name != "nightly" || all.More {
			t.Fatalf("list: %+v", all)
		}
		for _, bad := range []store.SetScheduleParams{
			{Name: "", Workflow: "wf", Spec: "@hourly"},
			{Name: "a b", Workflow: "wf", Spec: "@hourly"},
			{Name: "sched:x", Workflow: "wf", Spec: "@hourly"},
			{Name: "x", Spec: "@hourly"},
			{Name: "x", Workflow: "wf", Spec: "* * *"},
			{Name: "x", Workflow: "wf", Spec: "@every 1ms"},
			{Name: "x", Workflow: "wf", Spec: "@hourly", TZ: "Nowhere/Land"},
			{Name: "x", Workflow: "wf", Spec: "@hourly", Policy: schedule.Policy{Overlap: "sometimes"}},
			{Name: "x", Workflow: "wf", Spec: "@hourly", Policy: schedule.Policy{Backfill: -time.Second}},
			{Name: "x", Workflow: "wf", Spec: "@hourly", Input: []byte(`{`)},
		} {
			_, err := s.SetSchedule(ctx(t), &bad)
			wantErr(t, err, store.ErrInvalid)
		}
		_, err = s.GetSchedule(ctx(t), "x")
		wantErr(t, err, store.ErrNotFound)
		_, err = s.GetSchedule(ctx(t), "a b")
		wantErr(t, err, store.ErrInvalid)
		must(t, s.DeleteSchedule(ctx(t), "a-first"))
		wantErr(t, s.DeleteSchedule(ctx(t), "a-first"), store.ErrNotFound)
	})

	t.Run("SetAtOnce", func(t *testing.T) {
		// Requests that make the same new schedule at once all succeed:
		// one creates it, the others change it (on PostgreSQL the losers of
		// the insert's race run again and find it). Before: 12 of 16 got
		// the driver's unique violation, a 500.
		t.Parallel()
		s := newSchedules(t)
		for round := range 4 {
			name := "race" + strings.Repeat("x", round)
			errs := make(chan error, 16)
			var wg sync.WaitGroup
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := s.SetSchedule(ctx(t), &store.SetScheduleParams{Name: name, Workflow: "wf", Spec: "@every 1m", Now: at(round)})
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			}
		}
		all, err := s.ListSchedules(ctx(t), &store.ListSchedulesParams{})
		must(t, err)
		if len(all.Schedules) != 4 {
			t.Fatalf("%d schedules after 4 rounds of 16 sets at once", len(all.Schedules))
		}
	})

	t.Run("Pages", func(t *testing.T) {
		t.Parallel()
		s := newSchedules(t)
		// Names in byte order, upper case before lower (not a locale's
		// order), each input 40 KiB but one.
		names := []string{"B", "Z9", "a", "a-1", "a.b", "a_z", "b"}
		big := []byte(`"` + strings.Repeat("x", 40<<10) + `"`)
		for i := len(names) - 1; i >= 0; i-- {
			in := big
			if names[i] == "a" {
				in = []byte(`1`)
			}
			set(t, s, store.SetScheduleParams{Name: names[i], Spec: "@hourly", Input: in, Now: at(0)})
		}
		page := func(after string, limit, maxBytes int) *store.SchedulePage {
			t.Helper()
			p, err := s.ListSchedules(ctx(t), &store.ListSchedulesParams{After: after, Limit: limit, MaxBytes: maxBytes})
			must(t, err)
			return p
		}
		var got []string
		for after := ""; ; {
			p := page(after, 3, 0)
			for _, sc := range p.Schedules {
				got = append(got, sc.Name)
			}
			if !p.More {
				break
			}
			after = p.Schedules[len(p.Schedules)-1].Name
		}
		if strings.Join(got, " ") != strings.Join(names, " ") {
			t.Fatalf("paged by 3: %v, want %v", got, names)
		}
		// 60 KiB holds the schedules that begin within it: B (40 KiB)
		// and Z9; then Z9, a (tiny) and a-1.
		if p := page("", 100, 60<<10); len(p.Schedules) != 2 || !p.More || p.Schedules[1].Name != "Z9" || string(p.Schedules[0].Input) != string(big) {
			t.Fatalf("60 KiB: %+v", p)
		}
		if p := page("B", 100, 60<<10); len(p.Schedules) != 3 || p.Schedules[2].Name != "a-1" || !p.More {
			t.Fatalf("60 KiB after B: %d schedules", len(p.Schedules))
		}
		// A schedule larger than the page comes alone; the last page
		// says there is no more.
		if p := page("a_z", 100, 1); len(p.Schedules) != 1 || p.Schedules[0].Name != "b" || p.More {
			t.Fatalf("the last: %+v", p)
		}
		if p := page("b", 100, 0); len(p.Schedules) != 0 || p.More {
			t.Fatalf("past the last: %+v", p)
		}
		for _, bad := range []store.ListSchedulesParams{
			{Limit: -1}, {Limit: store.MaxSchedulePage + 1}, {MaxBytes: store.MaxSchedulePageBytes + 1}, {After: "a b"}, {After: "sched:x"},
		} {
			_, err := s.ListSchedules(ctx(t), &bad)
			wantErr(t, err, store.ErrInvalid)
		}
	})

	t.Run("ClaimAndAdvance", func(t *testing.T) {
		t.Parallel()
		s := newSchedules(t)
		set(t, s, store.SetScheduleParams{Name: "tick", Spec: "@every 1s", Now: at(0)})
		if got := claim(t, s, "a", 500); len(got) != 0 {
			t.Fatalf("claimed before it was due: %+v", got)
		}
		got := claim(t, s, "a", 1500)
		if len(got) != 1 || got[0].LeaseOwner != "a" || !got[0].LeaseExpires.Equal(at(2500)) {
			t.Fatalf("claim: %+v", got)
		}
		if other := claim(t, s, "b", 1600); len(other) != 0 {
			t.Fatalf("b claimed a leased schedule: %+v", other)
		}
		// A claim sent again by its owner finds it.
		again := claim(t, s, "a", 1700)
		if len(again) != 1 {
			t.Fatalf("a's claim sent again: %+v", again)
		}
		st := schedule.State{Cursor: at(1000), LastRun: "sched:tick:x", LastTick: at(1000), Started: 1}
		adv := func(owner string, version int64, ms int) bool {
			t.Helper()
			ok, err := s.AdvanceSchedule(ctx(t), &store.AdvanceScheduleParams{Name: "tick", Owner: owner, Version: version, State: st, NextDue: at(2000), Now: at(ms)})
			must(t, err)
			return ok
		}
		if adv("a", got[0].Version, 1800) || adv("b", again[0].Version, 1800) {
			t.Fatal("an advance under a stale version, or by another owner, was saved")
		}
		if !adv("a", again[0].Version, 1800) {
			t.Fatal("the owner's advance was refused")
		}
		sc, err := s.GetSchedule(ctx(t), "tick")
		must(t, err)
		if sc.LeaseOwner != "" || !sc.NextDue.Equal(at(2000)) || sc.State.LastRun != "sched:tick:x" || sc.State.Started != 1 || !sc.State.Cursor.Equal(at(1000)) {
			t.Fatalf("after the advance: %+v", sc)
		}
		// A lease that ran out is another's to take, and the late owner's
		// advance is refused.
		got = claim(t, s, "a", 2100)
		taken := claim(t, s, "b", 3200)
		if len(got) != 1 || len(taken) != 1 || taken[0].LeaseOwner != "b" {
			t.Fatalf("a's lease ran out: a %+v, b %+v", got, taken)
		}
		if adv("a", got[0].Version, 3300) {
			t.Fatal("a's advance after its lease was taken was saved")
		}
	})

	t.Run("PauseResumeDelete", func(t *testing.T) {
		t.Parallel()
		s := newSchedules(t)
		set(t, s, store.SetScheduleParams{Name: "p", Spec: "@every 1s", Now: at(0)})
		sc := set(t, s, store.SetScheduleParams{Name: "p", Spec: "@every 1s", Paused: true, Now: at(100)})
		if !sc.Paused || !sc.NextDue.IsZero() {
			t.Fatalf("paused: %+v", sc)
		}
		if got := claim(t, s, "a", 60_000); len(got) != 0 {
			t.Fatalf("a paused schedule was claimed: %+v", got)
		}
		// Resumed a minute later: its ticks start after that.
		sc = set(t, s, store.SetScheduleParams{Name: "p", Spec: "@every 1s", Now: at(60_500)})
		if sc.Paused || !sc.State.Cursor.Equal(at(60_500)) || !sc.NextDue.Equal(at(61_000)) {
			t.Fatalf("resumed: %+v", sc)
		}
		got := claim(t, s, "a", 61_000)
		if len(got) != 1 {
			t.Fatalf("claim after the resume: %+v", got)
		}
		// A pause by name alone keeps the rest as stored, and a resume
		// by name brings it back; a schedule that does not exist is not
		// made by either.
		set(t, s, store.SetScheduleParams{Name: "q", Workflow: "wf2", Input: []byte(`{"k":1}`), Spec: "@every 2s", TZ: "Europe/Paris", Now: at(61_000)})
		sc = set(t, s, store.SetScheduleParams{Name: "q", PauseOnly: true, Paused: true, Now: at(61_100)})
		if !sc.Paused || sc.Workflow != "wf2" || string(sc.Input) != `{"k":1}` || sc.Spec != "@every 2s" || sc.TZ != "Europe/Paris" {
			t.Fatalf("paused by name: %+v", sc)
		}
		sc = set(t, s, store.SetScheduleParams{Name: "q", PauseOnly: true, Now: at(70_000)})
		if sc.Paused || sc.Spec != "@every 2s" || !sc.NextDue.Equal(at(72_000)) {
			t.Fatalf("resumed by name: %+v", sc)
		}
		_, err := s.SetSchedule(ctx(t), &store.SetScheduleParams{Name: "none", PauseOnly: true, Paused: true})
		wantErr(t, err, store.ErrNotFound)
		must(t, s.DeleteSchedule(ctx(t), "p"))
		ok, err := s.AdvanceSchedule(ctx(t), &store.AdvanceScheduleParams{Name: "p", Owner: "a", Version: got[0].Version, NextDue: at(62_000)})
		must(t, err)
		if ok {
			t.Fatal("an advance of a deleted schedule was saved")
		}
	})
}
