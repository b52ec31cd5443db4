package schedule

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func mustParse(t testing.TB, expr, tz string) *Spec {
	t.Helper()
	s, err := Parse(expr, tz)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct{ expr, tz string }{
		{"", ""},
		{"* * * *", ""},
		{"* * * * * *", ""},
		{"60 * * * *", ""},
		{"* 24 * * *", ""},
		{"* * 0 * *", ""},
		{"* * 32 * *", ""},
		{"* * * 13 *", ""},
		{"* * * * 8", ""},
		{"5-1 * * * *", ""},
		{"*/0 * * * *", ""},
		{"*/x * * * *", ""},
		{"1,,2 * * * *", ""},
		{"* * * FOO *", ""},
		{"@often", ""},
		{"@every", ""},
		{"@every 50ms", ""},
		{"@every 1.5ms", ""},
		{"@every -1s", ""},
		{"@every 1500us", ""},
		{"* * * * *", "Mars/Olympus"},
		{"* * * * *", "Local"},
		{"* * * * *", strings.Repeat("x", 100)},
	} {
		if _, err := Parse(c.expr, c.tz); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q, %q): %v, want ErrInvalid", c.expr, c.tz, err)
		}
	}
}

func TestNext(t *testing.T) {
	for _, c := range []struct {
		expr, tz, after string
		want            []string
	}{
		{"*/15 * * * *", "", "2026-12-04T10:07:30Z", []string{"2026-12-04T10:15:00Z", "2026-12-04T10:30:00Z", "2026-12-04T10:45:00Z", "2026-12-04T11:00:00Z"}},
		{"0 9 * * MON-FRI", "", "2026-12-04T09:00:00Z", []string{"2026-12-07T09:00:00Z", "2026-12-08T09:00:00Z"}}, // Friday → Monday
		{"30 2 * * *", "", "2026-12-04T02:30:00Z", []string{"2026-12-05T02:30:00Z"}},
		{"@hourly", "", "2026-12-31T23:59:59Z", []string{"2027-01-01T00:00:00Z", "2027-01-01T01:00:00Z"}},
		{"@yearly", "", "2026-06-01T00:00:00Z", []string{"2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"}},
		{"0 0 29 2 *", "", "2026-03-01T00:00:00Z", []string{"2028-02-29T00:00:00Z"}},
		// Both day fields restricted: either matches (the 1st, and Mondays).
		{"0 0 1 * 1", "", "2026-12-01T00:00:00Z", []string{"2026-12-07T00:00:00Z", "2026-12-14T00:00:00Z", "2026-12-21T00:00:00Z", "2026-12-28T00:00:00Z", "2027-01-01T00:00:00Z"}},
		{"0 0 * * 7", "", "2026-12-04T00:00:00Z", []string{"2026-12-06T00:00:00Z"}}, // 7 is Sunday
		{"0 12 * JAN,jul *", "", "2026-12-04T00:00:00Z", []string{"2027-01-01T12:00:00Z"}},
		{"5/20 3 * * *", "", "2026-12-04T00:00:00Z", []string{"2026-12-04T03:05:00Z", "2026-12-04T03:25:00Z", "2026-12-04T03:45:00Z", "2026-12-05T03:05:00Z"}},
		// In a time zone: 09:00 in Paris is 08:00 UTC in winter.
		{"0 9 * * *", "Europe/Paris", "2026-12-04T12:00:00Z", []string{"2026-12-05T08:00:00Z"}},
		// Spring forward in New York (2027-03-14: 02:00 → 03:00): 02:30
		// does not happen that day.
		{"30 2 * * *", "America/New_York", "2027-03-13T12:00:00Z", []string{"2027-03-15T06:30:00Z"}},
		// Fall back (2026-11-01: 02:00 → 01:00): 01:30 happens once, the
		// first time (05:30 UTC, not 06:30 too).
		{"30 1 * * *", "America/New_York", "2026-11-01T04:00:00Z", []string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"*/30 * * * *", "America/New_York", "2026-11-01T05:10:00Z", []string{"2026-11-01T05:30:00Z", "2026-11-01T07:00:00Z"}},
		// Intervals: multiples of the period since the epoch.
		{"@every 15m", "", "2026-12-04T10:07:30Z", []string{"2026-12-04T10:15:00Z", "2026-12-04T10:30:00Z"}},
		{"@every 90s", "Asia/Tokyo", "2026-12-04T10:00:00Z", []string{"2026-12-04T10:01:30Z", "2026-12-04T10:03:00Z"}},
		{"0 0 30 2 *", "", "2026-01-01T00:00:00Z", []string{"0001-01-01T00:00:00Z"}}, // never
	} {
		s := mustParse(t, c.expr, c.tz)
		at := utc(c.after)
		for i, w := range c.want {
			got := s.Next(at)
			if !got.Equal(utc(w)) && !(w == "0001-01-01T00:00:00Z" && got.IsZero()) {
				t.Errorf("%q in %q: tick %d after %s: %s, want %s", c.expr, c.tz, i+1, c.after, got.UTC().Format(time.RFC3339), w)
				break
			}
			at = got
		}
	}
}

// matches is the naive reading of a cron Spec: does the wall-clock minute
// of instant t match its fields.
func (s *Spec) matches(t time.Time) bool {
	l := t.In(s.loc)
	return s.month&(1<<uint(l.Month())) != 0 && s.dayMatches(l) && s.hour&(1<<uint(l.Hour())) != 0 && s.minute&(1<<uint(l.Minute())) != 0
}

// Next agrees with a walk of every minute: the tick it returns matches,
// and no minute between matches, except a wall time's second happening.
func TestNextAgreesWithAWalk(t *testing.T) {
	fields := [][]string{
		{"*", "0", "*/7", "5-10", "0,30", "15/20"},
		{"*", "0", "*/5", "9-17", "1,2,3"},
		{"*", "1", "15", "*/10", "28-31"},
		{"*", "2", "JAN-MAR", "*/4", "11,12"},
		{"*", "0", "1-5", "SAT,SUN", "*/3"},
	}
	zones := []string{"", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"}
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 3))
		var parts []string
		for _, f := range fields {
			parts = append(parts, f[r.IntN(len(f))])
		}
		expr, tz := strings.Join(parts, " "), zones[r.IntN(len(zones))]
		s := mustParse(t, expr, tz)
		at := time.Date(2026, time.Month(1+r.IntN(12)), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60), 0, time.UTC)
		got := s.Next(at)
		if got.IsZero() {
			continue
		}
		if !got.After(at) || !s.matches(got) || got.Second() != 0 {
			t.Fatalf("seed %d: %q in %q: Next(%v) = %v does not match", seed, expr, tz, at, got)
		}
		// No earlier matching minute (a walk bounded to 40 days).
		for c := at.Truncate(time.Minute).Add(time.Minute); c.Before(got) && c.Sub(at) < 40*24*time.Hour; c = c.Add(time.Minute) {
			if s.matches(c) && !sameWall(c.Add(-time.Hour).In(s.loc), c.In(s.loc)) {
				t.Fatalf("seed %d: %q in %q: Next(%v) = %v skips %v", seed, expr, tz, at, got, c)
			}
		}
	}
}

func TestDecide(t *testing.T) {
	every := mustParse(t, "@every 1m", "")
	t0 := utc("2026-12-04T10:00:00Z")
	min := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	for _, c := range []struct {
		name  string
		p     Policy
		st    State
		now   time.Time
		last  Last
		start []time.Time
		want  State
	}{
		{"nothing due", Policy{}, State{Cursor: t0}, t0.Add(30 * time.Second), LastEnded, nil, State{Cursor: t0}},
		{"one due", Policy{}, State{Cursor: t0}, min(1), LastEnded, []time.Time{min(1)}, State{Cursor: min(1), LastTick: min(1), Started: 1}},
		{"skip: the run in flight passes the ticks over", Policy{Overlap: Skip}, State{Cursor: t0}, min(2), LastRunning, nil,
			State{Cursor: min(2), Skipped: 2}},
		{"skip: one of two due starts", Policy{Backfill: time.Hour}, State{Cursor: t0}, min(2), LastEnded, []time.Time{min(1)},
			State{Cursor: min(2), LastTick: min(1), Started: 1, Skipped: 1}},
		{"allow: both start", Policy{Overlap: Allow, Backfill: time.Hour}, State{Cursor: t0}, min(2), LastRunning, []time.Time{min(1), min(2)},
			State{Cursor: min(2), LastTick: min(2), Started: 2}},
		{"buffer one: the first waits, the next is passed over", Policy{Overlap: BufferOne}, State{Cursor: t0}, min(2), LastRunning, nil,
			State{Cursor: min(2), Buffered: min(1), Skipped: 1}},
		{"buffer one: it starts when the run ended", Policy{Overlap: BufferOne}, State{Cursor: min(2), Buffered: min(1)}, min(2).Add(time.Second), LastEnded,
			[]time.Time{min(1)}, State{Cursor: min(2), LastTick: min(1), Started: 1}},
		{"backfill: ticks older than it are missed", Policy{Overlap: Allow, Backfill: 3 * time.Minute}, State{Cursor: t0}, min(10), LastEnded,
			[]time.Time{min(7), min(8), min(9), min(10)}, State{Cursor: min(10), LastTick: min(10), Started: 4, Skipped: 6}},
		{"default backfill: a minute", Policy{Overlap: Allow}, State{Cursor: t0}, min(10), LastEnded,
			[]time.Time{min(9), min(10)}, State{Cursor: min(10), LastTick: min(10), Started: 2, Skipped: 8}},
		// A run no worker took holds an allowing schedule's ticks back: a
		// workflow no worker serves makes one pending run, not one a tick.
		{"allow: a pending run holds the ticks back", Policy{Overlap: Allow, Backfill: time.Hour}, State{Cursor: t0}, min(3), LastPending, nil,
			State{Cursor: min(3), Skipped: 3}},
	} {
		d := Decide(every, c.p, c.st, c.now, c.last)
		if fmt.Sprint(d.Start) != fmt.Sprint(c.start) || !sameState(d.State, c.want) {
			t.Errorf("%s:\n start %v\n state %+v\nwant %v\n      %+v", c.name, d.Start, d.State, c.start, c.want)
		}
	}
	// A long outage walks a bounded number of ticks, and wants deciding
	// again at once past MaxStarts.
	d := Decide(mustParse(t, "@every 100ms", ""), Policy{Overlap: Allow, Backfill: time.Hour}, State{Cursor: t0}, min(30), LastEnded)
	if len(d.Start) != MaxStarts || !d.Next.Equal(min(30)) {
		t.Fatalf("a backlog: %d started, next %v", len(d.Start), d.Next)
	}
}

func sameState(a, b State) bool {
	return a.Cursor.Equal(b.Cursor) && a.Buffered.Equal(b.Buffered) && a.LastTick.Equal(b.LastTick) &&
		a.Started == b.Started && a.Skipped == b.Skipped
}

// Every tick after the cursor up to now is decided once, whatever the
// policy and however the evaluations are spread: started, buffered then
// started, or passed over.
func TestDecideAccountsForEveryTick(t *testing.T) {
	s := mustParse(t, "@every 1s", "")
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 5))
		p := Policy{Overlap: []Overlap{Skip, BufferOne, Allow}[r.IntN(3)], Backfill: time.Duration(1+r.IntN(20)) * time.Second}
		t0 := time.Unix(1_800_000_000, 0).UTC()
		st := State{Cursor: t0}
		now := t0
		started := map[time.Time]bool{}
		inFlight, pending := false, false
		for range 200 {
			now = now.Add(time.Duration(r.IntN(4000)) * time.Millisecond)
			if r.IntN(3) == 0 {
				inFlight, pending = false, false // the run ended
			} else if r.IntN(2) == 0 {
				pending = false // a worker took it
			}
			last := LastEnded
			if inFlight {
				last = LastRunning
				if pending {
					last = LastPending
				}
			}
			d := Decide(s, p, st, now, last)
			for _, tk := range d.Start {
				if started[tk] {
					t.Fatalf("seed %d: tick %v started twice", seed, tk)
				}
				if p.Overlap != Allow && last != LastEnded {
					t.Fatalf("seed %d: tick %v started over a run in flight (%s)", seed, tk, p.Overlap)
				}
				if last == LastPending {
					t.Fatalf("seed %d: tick %v started while the last run was pending", seed, tk)
				}
				started[tk] = true
				inFlight, pending = true, true
			}
			st = d.State
		}
		ticks := int64(st.Cursor.Sub(t0) / time.Second)
		if st.Started+st.Skipped+bool2(!st.Buffered.IsZero()) != ticks {
			t.Fatalf("seed %d: %d ticks, %d started, %d skipped, buffered %v", seed, ticks, st.Started, st.Skipped, st.Buffered)
		}
	}
}

func bool2(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func TestRunID(t *testing.T) {
	tk := utc("2026-12-04T10:15:00Z").Add(250 * time.Millisecond)
	id := RunID("nightly-report", tk)
	if id != "sched:nightly-report:20261204T101500.250Z" {
		t.Fatalf("RunID: %s", id)
	}
	name, got, ok := ParseRunID(id)
	if !ok || name != "nightly-report" || !got.Equal(tk) {
		t.Fatalf("ParseRunID(%q): %q %v %v", id, name, got, ok)
	}
	for _, bad := range []string{"run_1", "sched:", "sched:x", "sched:a:b:20261204T101500.250Z", "sched::20261204T101500.250Z", "sched:a:2026"} {
		if _, _, ok := ParseRunID(bad); ok {
			t.Errorf("ParseRunID(%q) ok", bad)
		}
	}
	for _, bad := range []string{"", "a b", "a:b", "..", strings.Repeat("a", MaxNameLen+1), "é"} {
		if err := CheckName(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckName(%q): %v", bad, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"* * * * *", "*/5 1-3 1,15 JAN-MAR MON-FRI", "@every 90s", "@daily", "5/20 3 * * 7", "0 0 29 2 *"} {
		f.Add(s, "")
		f.Add(s, "Europe/Paris")
	}
	f.Fuzz(func(t *testing.T, expr, tz string) {
		s, err := Parse(expr, tz)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q, %q): %v is not ErrInvalid", expr, tz, err)
			}
			return
		}
		at := time.Date(2026, 12, 4, 10, 7, 30, 0, time.UTC)
		n := s.Next(at)
		if !n.IsZero() && !n.After(at) {
			t.Fatalf("Parse(%q, %q).Next(%v) = %v", expr, tz, at, n)
		}
	})
}
