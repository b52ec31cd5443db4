package weir_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/schedule"
	"github.com/weirhq/weir/store"
)

// ticksSeen records the ticks whose runs executed, by the runs themselves.
type ticksSeen struct {
	mu    sync.Mutex
	ticks map[time.Time]int // tick -> executions of its step
	names map[string]bool
}

func newTicksSeen() *ticksSeen {
	return &ticksSeen{ticks: map[time.Time]int{}, names: map[string]bool{}}
}

// register registers workflow "tick" on e: its step notes its run's tick;
// hold, if not nil, is waited for before it returns.
func (ts *ticksSeen) register(e *weir.Engine, hold <-chan struct{}) *weir.Workflow[int, int] {
	return weir.Register(e, "tick", func(ctx weir.Context, in int) (int, error) {
		name, tick, ok := weir.ScheduledTick(ctx)
		return weir.Step(ctx, "note", func(sc weir.StepContext) (int, error) {
			ts.mu.Lock()
			if ok {
				ts.ticks[tick]++
				ts.names[name] = true
			}
			ts.mu.Unlock()
			if hold != nil {
				select {
				case <-hold:
				case <-sc.Done():
					return 0, sc.Err()
				}
			}
			return in, nil
		})
	})
}

func (ts *ticksSeen) sorted() []time.Time {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var out []time.Time
	for t := range ts.ticks {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// Two engines on one store share a schedule: each tick from the first to
// the last starts one run, executed once, with no tick missed.
func TestScheduleStartsEachTickOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		ts := newTicksSeen()
		var wf *weir.Workflow[int, int]
		for range 2 {
			e := newEngine(t, s, fastConfig())
			wf = ts.register(e, nil)
			must(t, e.Work(testCtx(t)))
		}
		const every = 100 * time.Millisecond
		sc, err := wf.Schedule(testCtx(t), "beat", "@every 100ms", 7, &weir.ScheduleOptions{Overlap: schedule.Allow})
		must(t, err)
		if sc.Name != "beat" || sc.Workflow != "tick" || string(sc.Input) != "7" {
			t.Fatalf("schedule %+v", sc)
		}
		waitFor(t, 20*time.Second, "8 ticks run", func() bool { return len(ts.sorted()) >= 8 })
		_, err = wf.Schedule(testCtx(t), "beat", "@every 100ms", 7, &weir.ScheduleOptions{Overlap: schedule.Allow, Paused: true})
		must(t, err)
		ticks := ts.sorted()
		for i, tk := range ticks {
			if tk.UnixNano()%int64(every) != 0 {
				t.Fatalf("tick %v is not a multiple of %v", tk, every)
			}
			if i > 0 && tk.Sub(ticks[i-1]) != every {
				t.Fatalf("ticks %v then %v: one missed", ticks[i-1], tk)
			}
		}
		ts.mu.Lock()
		for tk, n := range ts.ticks {
			if n != 1 {
				t.Fatalf("tick %v ran %d times", tk, n)
			}
		}
		ts.mu.Unlock()
		// Every run a tick started is the tick's own.
		r, err := s.GetRun(testCtx(t), schedule.RunID("beat", ticks[0]))
		must(t, err)
		if r.Workflow != "tick" || string(r.Input) != "7" {
			t.Fatalf("the first tick's run %+v", r)
		}
	})
}

// With overlap skip, ticks while a run is in flight start nothing and are
// counted as passed over; with buffer_one, the first of them starts once
// the run ends.
func TestScheduleOverlap(t *testing.T) {
	for _, policy := range []schedule.Overlap{schedule.Skip, schedule.BufferOne} {
		t.Run(string(policy), func(t *testing.T) {
			eachStore(t, func(t *testing.T, s store.Full) {
				ts := newTicksSeen()
				hold := make(chan struct{})
				e := newEngine(t, s, fastConfig())
				wf := ts.register(e, hold)
				must(t, e.Work(testCtx(t)))
				_, err := wf.Schedule(testCtx(t), "slow", "@every 100ms", 0, &weir.ScheduleOptions{Overlap: policy})
				must(t, err)
				waitFor(t, 20*time.Second, "the first tick to run", func() bool { return len(ts.sorted()) == 1 })
				waitFor(t, 20*time.Second, "ticks passed over", func() bool {
					sc, err := s.GetSchedule(testCtx(t), "slow")
					return err == nil && sc.State.Skipped >= 3
				})
				if n := len(ts.sorted()); n != 1 {
					t.Fatalf("%d runs while the first was in flight", n)
				}
				sc, err := s.GetSchedule(testCtx(t), "slow")
				must(t, err)
				if policy == schedule.BufferOne && sc.State.Buffered.IsZero() {
					t.Fatalf("no tick buffered: %+v", sc.State)
				}
				buffered := sc.State.Buffered
				close(hold)
				waitFor(t, 20*time.Second, "a second run", func() bool { return len(ts.sorted()) >= 2 })
				if policy == schedule.BufferOne {
					if second := ts.sorted()[1]; !second.Equal(buffered) {
						t.Fatalf("the second run's tick %v, want the buffered %v", second, buffered)
					}
				}
			})
		})
	}
}

// Ticks missed while no engine worked start once one does, each once, in
// order, within the backfill; older ones are passed over.
func TestScheduleBackfill(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		ts := newTicksSeen()
		e := newEngine(t, s, fastConfig())
		wf := ts.register(e, nil)
		// No engine works yet: the ticks go by.
		sc, err := wf.Schedule(testCtx(t), "late", "@every 100ms", 0, &weir.ScheduleOptions{Overlap: schedule.Allow, Backfill: 400 * time.Millisecond})
		must(t, err)
		created := sc.CreatedAt
		waitFor(t, 20*time.Second, "a second to pass", func() bool { return time.Since(created) > time.Second })
		must(t, e.Work(testCtx(t)))
		waitFor(t, 20*time.Second, "the backfill", func() bool {
			sc, err := s.GetSchedule(testCtx(t), "late")
			return err == nil && sc.State.Started >= 4
		})
		sc, err = s.GetSchedule(testCtx(t), "late")
		must(t, err)
		ticks := ts.sorted()
		if len(ticks) == 0 || ticks[0].Sub(created) < 500*time.Millisecond {
			t.Fatalf("the first tick run %v, %v after the schedule: older than the backfill", ticks, ticks[0].Sub(created))
		}
		if sc.State.Skipped < 3 {
			t.Fatalf("%d ticks passed over, want the ones older than the backfill", sc.State.Skipped)
		}
	})
}

// A schedule of a bad expression, time zone or policy is refused, and
// nothing is made.
func TestScheduleBadInput(t *testing.T) {
	s, _ := openStore(t)
	e := newEngine(t, s, fastConfig())
	wf := newTicksSeen().register(e, nil)
	for _, c := range []struct {
		name, spec string
		o          *weir.ScheduleOptions
	}{
		{"x", "99 * * * *", nil},
		{"x", "@hourly", &weir.ScheduleOptions{TZ: "Mars/Base"}},
		{"x", "@hourly", &weir.ScheduleOptions{Overlap: "maybe"}},
		{"x y", "@hourly", nil},
	} {
		if _, err := wf.Schedule(context.Background(), c.name, c.spec, 0, c.o); err == nil {
			t.Errorf("%q %q %+v: set", c.name, c.spec, c.o)
		}
	}
	all, err := s.ListSchedules(testCtx(t), &store.ListSchedulesParams{})
	must(t, err)
	if len(all.Schedules) != 0 {
		t.Fatalf("refused schedules made %+v", all)
	}
}

// A schedule whose workflow no worker serves, allowing overlaps, makes the
// pending runs of one decision (one when its decider keeps up), not one a
// tick: the run no worker took holds its later ticks back.
func TestScheduleOfAnUnservedWorkflow(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, fastConfig())
		newTicksSeen().register(e, nil) // the engine works, but not "nobody"
		must(t, e.Work(testCtx(t)))
		_, err := s.SetSchedule(testCtx(t), &store.SetScheduleParams{Name: "orphan", Workflow: "nobody", Spec: "@every 100ms",
			Policy: schedule.Policy{Overlap: schedule.Allow}})
		must(t, err)
		skipped := func() int64 {
			sc, err := s.GetSchedule(testCtx(t), "orphan")
			must(t, err)
			return sc.State.Skipped
		}
		waitFor(t, 20*time.Second, "ticks passed over", func() bool { return skipped() >= 3 })
		pending := func() []*store.Run {
			runs, err := s.ListRuns(testCtx(t), &store.ListRunsParams{Workflow: "nobody", Limit: 100})
			must(t, err)
			for _, r := range runs {
				if r.Status != store.RunPending {
					t.Fatalf("a run of the unserved workflow is %s", r.Status)
				}
			}
			return runs
		}
		// The first decision starts the ticks due since the schedule was
		// made (one, if the decider kept up with @every 100ms; a few on a
		// loaded machine); after that, none.
		first := len(pending())
		if first < 1 || first > schedule.MaxStarts {
			t.Fatalf("%d runs of the unserved workflow after the first ticks", first)
		}
		from := skipped()
		waitFor(t, 20*time.Second, "ten more ticks passed over", func() bool { return skipped() >= from+10 })
		if n := len(pending()); n != first {
			t.Fatalf("%d runs of the unserved workflow, then %d: its ticks pile up", first, n)
		}
	})
}

// Engine.PauseSchedule and ResumeSchedule change a schedule by name alone,
// keeping its workflow, input, spec and policy; a schedule that does not
// exist is ErrNotFound and is not made.
func TestPauseScheduleByName(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, fastConfig())
		wf := weir.Register(e, "nightly", func(ctx weir.Context, in int) (int, error) { return in, nil })
		_, err := wf.Schedule(testCtx(t), "n", "0 3 * * *", 7, &weir.ScheduleOptions{TZ: "Europe/Paris", Overlap: schedule.Allow})
		must(t, err)
		sc, err := e.PauseSchedule(testCtx(t), "n")
		must(t, err)
		if !sc.Paused || sc.Spec != "0 3 * * *" || sc.TZ != "Europe/Paris" || sc.Overlap != schedule.Allow || string(sc.Input) != "7" || sc.Workflow != "nightly" {
			t.Fatalf("paused: %+v", sc)
		}
		sc, err = e.ResumeSchedule(testCtx(t), "n")
		must(t, err)
		if sc.Paused || sc.NextDue.IsZero() || sc.Spec != "0 3 * * *" {
			t.Fatalf("resumed: %+v", sc)
		}
		if _, err := e.PauseSchedule(testCtx(t), "none"); !errors.Is(err, weir.ErrNotFound) {
			t.Fatalf("pause of no schedule: %v", err)
		}
		if _, err := s.GetSchedule(testCtx(t), "none"); !errors.Is(err, weir.ErrNotFound) {
			t.Fatalf("a pause made a schedule: %v", err)
		}
	})
}
