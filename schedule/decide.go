package schedule

import (
	"fmt"
	"time"
)

// Overlap says what a tick does while the run of an earlier tick is still
// in flight (pending or running).
type Overlap string

// The overlap policies.
const (
	// Skip passes the tick over: at most one run of the schedule at once.
	Skip Overlap = "skip"
	// BufferOne keeps the first such tick until the run in flight ends,
	// then starts it; the ticks after it meanwhile are passed over.
	BufferOne Overlap = "buffer_one"
	// Allow starts every tick's run, whatever is in flight.
	Allow Overlap = "allow"
)

// Check refuses an unknown policy; "" is Skip.
func (o Overlap) Check() error {
	switch o {
	case "", Skip, BufferOne, Allow:
		return nil
	}
	return fmt.Errorf("%w: overlap %q: want skip, buffer_one or allow", ErrInvalid, o)
}

// Or is o, or Skip if o is "".
func (o Overlap) Or() Overlap {
	if o == "" {
		return Skip
	}
	return o
}

// DefaultBackfill is how late a tick may be and still start when a
// schedule's Backfill is 0: long enough for a restart, or a poll that came
// late, short enough that a schedule down for a day does not fire its day
// of ticks at once.
const DefaultBackfill = time.Minute

// MaxBackfill bounds a schedule's Backfill.
const MaxBackfill = 366 * 24 * time.Hour

// Policy is how a schedule's ticks start runs.
type Policy struct {
	Overlap Overlap
	// Backfill is how late a tick may be and still start: after every
	// process was down, the ticks missed within Backfill of now start,
	// each once, in order (and as Overlap says); older ones are passed
	// over. 0: DefaultBackfill.
	Backfill time.Duration
}

// Check refuses a bad policy.
func (p Policy) Check() error {
	if err := p.Overlap.Check(); err != nil {
		return err
	}
	if p.Backfill < 0 || p.Backfill > MaxBackfill {
		return fmt.Errorf("%w: a backfill of %v: 0 to %v", ErrInvalid, p.Backfill, MaxBackfill)
	}
	return nil
}

func (p Policy) backfill() time.Duration {
	if p.Backfill == 0 {
		return DefaultBackfill
	}
	return p.Backfill
}

// State is what a store keeps of a schedule between evaluations.
type State struct {
	// Cursor: every tick at or before it was handled (started, buffered or
	// passed over). A new schedule's is its creation; a resumed one's, the
	// time it was resumed (ticks while paused do not start).
	Cursor time.Time
	// Buffered is a tick waiting for the run in flight to end (BufferOne);
	// zero: none.
	Buffered time.Time `json:",omitzero"`
	// LastRun is the run of the last tick started.
	LastRun string `json:",omitempty"`
	// LastTick is the last tick started.
	LastTick time.Time `json:",omitzero"`
	// Started and Skipped count the ticks that started a run and those
	// passed over (missed beyond Backfill, or overlapping).
	Started, Skipped int64
}

// Decision is what Decide decided.
type Decision struct {
	// Start are the ticks to start, oldest first: each as RunID's run.
	Start []time.Time
	// State is the schedule's state once they are started.
	State State
	// Next is when the schedule wants deciding again: its next tick, or
	// now while a tick is buffered (the run in flight may end any time).
	Next time.Time
}

// MaxStarts bounds the ticks one Decide starts: the rest are due at once,
// for the next.
const MaxStarts = 64

// maxTicks bounds the ticks one Decide walks (a schedule of every second
// down for a year): past it the walk stops, the ticks it did not see are
// passed over uncounted, and the cursor moves to now.
const maxTicks = 100_000

// Last is what became of a schedule's last run, as its decider found it.
type Last uint8

// The states of a schedule's last run.
const (
	// LastEnded: there is none, it ended, or it was purged.
	LastEnded Last = iota
	// LastRunning: a worker executes it.
	LastRunning
	// LastPending: no worker has taken it yet.
	LastPending
)

// Decide walks schedule s's ticks after st.Cursor up to now and decides
// each: it starts (at most MaxStarts of them), waits (BufferOne), or is
// passed over. last says what became of st.LastRun. Under Allow a tick's
// run overlaps the runs in flight, but not a run no worker has taken yet:
// a schedule whose workflow no worker serves (or whose workers are all
// busy) holds its later ticks back, passed over, instead of making a
// pending run a tick without bound.
func Decide(s *Spec, p Policy, st State, now time.Time, last Last) Decision {
	inFlight := last != LastEnded
	out := Decision{State: st}
	ns := &out.State
	overlap := p.Overlap.Or()
	start := func(t time.Time) {
		out.Start = append(out.Start, t)
		ns.LastTick = t
		ns.Started++
		inFlight = true
	}
	if !ns.Buffered.IsZero() && !inFlight {
		start(ns.Buffered)
		ns.Buffered = time.Time{}
	}
	walked := 0
	for len(out.Start) < MaxStarts {
		t := s.Next(ns.Cursor)
		if t.IsZero() || t.After(now) {
			break
		}
		if walked++; walked > maxTicks {
			ns.Cursor = now
			break
		}
		ns.Cursor = t
		switch {
		case now.Sub(t) > p.backfill():
			ns.Skipped++ // missed
		case !inFlight || overlap == Allow && last != LastPending:
			start(t)
		case overlap == BufferOne && ns.Buffered.IsZero():
			ns.Buffered = t
		default:
			ns.Skipped++
		}
	}
	out.Next = s.Next(ns.Cursor)
	if !ns.Buffered.IsZero() || len(out.Start) == MaxStarts {
		out.Next = now
	}
	return out
}

// RunID is the run a schedule's tick starts: the same in every process, so
// that a tick decided twice (its decider died before it recorded it)
// starts one run. Its form is "sched:<schedule>:<tick, UTC, to the
// millisecond>".
func RunID(schedule string, tick time.Time) string {
	return "sched:" + schedule + ":" + tick.UTC().Format(tickFormat)
}

const tickFormat = "20060102T150405.000Z"

// ParseRunID returns the schedule and tick of a run RunID named; ok false
// for any other run.
func ParseRunID(id string) (schedule string, tick time.Time, ok bool) {
	rest, ok := cutPrefix(id, "sched:")
	if !ok || len(rest) < len(tickFormat)+2 {
		return "", time.Time{}, false
	}
	name, ts := rest[:len(rest)-len(tickFormat)-1], rest[len(rest)-len(tickFormat):]
	if rest[len(name)] != ':' || CheckName(name) != nil {
		return "", time.Time{}, false
	}
	t, err := time.Parse(tickFormat, ts)
	if err != nil {
		return "", time.Time{}, false
	}
	return name, t, true
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) < len(p) || s[:len(p)] != p {
		return s, false
	}
	return s[len(p):], true
}

// MaxNameLen bounds a schedule's name.
const MaxNameLen = 128

// CheckName refuses a name that could not stand in a run id: 1 to
// MaxNameLen letters, digits and - _ . only.
func CheckName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("%w: a schedule name of %d bytes: 1 to %d", ErrInvalid, len(name), MaxNameLen)
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%w: schedule name %q: use letters, digits and - _ . only", ErrInvalid, name)
		}
	}
	if name == "." || name == ".." {
		return fmt.Errorf("%w: schedule name %q", ErrInvalid, name)
	}
	return nil
}
