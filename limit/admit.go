package limit

import (
	"maps"
	"slices"
	"time"
)

// Queues: a limiter that runs wait in before they start. A queued run is
// not a Waiter (it waits durably, in its store, without a lease, for as
// long as it takes): the store passes the runs that can start as
// Candidates, and Admit lets them in, in line order, while the limiter's
// bounds allow. An admitted run holds its slot until it ends (a Hold with
// Run set), through parks and crashes and claims by other workers; the
// store says which held runs are still in flight, and the others' slots
// come back.

// RunHolder is how a store names run id in a limiter.
func RunHolder(id string) string { return runHolderPrefix + id }

// runHolderPrefix starts a run's holder (RunHolder).
const runHolderPrefix = "run:"

// Candidate is a queued run that can start now.
type Candidate struct {
	// Holder is RunHolder of the run.
	Holder string
	// Key is the run's fair-share group (a tenant), bounded by PerKey.
	Key string
	// Priority: higher goes first.
	Priority int
	// Since is when the run began to wait (its start, or the end of its
	// debounce).
	Since time.Time
}

// Admitted is what Admit decided.
type Admitted struct {
	// Runs are the candidates let in, in the order they were.
	Runs []Candidate
	// Reason is why no more were let in ("" if every candidate was);
	// RetryAt, when that bound can let one go, if it says (a rate window).
	Reason  Reason
	RetryAt time.Time
}

// Admit lets up to max of cands in at now, in line order: by priority
// (higher first), then the slots their key holds (fewer first), then when
// their key was last served (longest ago first), then time waiting. A
// candidate whose key holds its PerKey slots is passed over, not waited
// for. inFlight reports whether a run hold's run has not ended: the slots
// of those that ended come back first.
func Admit(c *Config, st State, cands []Candidate, inFlight func(holder string) bool, now time.Time, max int) (Admitted, State) {
	now = Latest(st, now)
	st.Holds = slices.DeleteFunc(slices.Clone(st.Holds), func(h Hold) bool { return h.Run && !inFlight(h.Holder) })
	inLine := map[string]bool{}
	for _, x := range cands {
		inLine[x.Key] = true
	}
	st = prune(c, st, now, inLine)
	held := map[string]int{}
	for _, h := range st.Holds {
		held[h.Key] += h.Slots()
	}
	line := slices.Clone(cands)
	var out Admitted
	for len(line) > 0 && len(out.Runs) < max {
		free, reason, retry := capacity(c, st, now)
		if free == 0 {
			out.Reason, out.RetryAt = reason, retry
			break
		}
		best := -1
		for i, x := range line {
			if c.PerKey > 0 && held[x.Key] >= c.PerKey {
				continue
			}
			if best < 0 || before(x, line[best], held, st.Served) {
				best = i
			}
		}
		if best < 0 {
			if len(line) > 0 {
				out.Reason = Key
			}
			break
		}
		x := line[best]
		line = slices.Delete(line, best, best+1)
		out.Runs = append(out.Runs, x)
		if st.Served == nil {
			st.Served = map[string]time.Time{}
		}
		st.Served[x.Key] = now
		held[x.Key]++
		// A slot is kept where something counts it: a run's holds only
		// matter to a concurrency bound, its use only to a window.
		if c.Concurrency > 0 || c.PerKey > 0 {
			st.Holds = append(st.Holds, Hold{Holder: x.Holder, Key: x.Key, At: now, Run: true})
		}
		if c.Rate > 0 || c.Budget > 0 {
			st.Uses = append(st.Uses, Use{Holder: x.Holder, At: now})
		}
	}
	if len(out.Runs) == max && len(line) > 0 && out.Reason == "" {
		out.Reason = Queue // the caller takes no more now
	}
	return out, st
}

// before reports whether a goes before b in a queue's line.
func before(a, b Candidate, held map[string]int, served map[string]time.Time) bool {
	switch {
	case a.Priority != b.Priority:
		return a.Priority > b.Priority
	case held[a.Key] != held[b.Key]:
		return held[a.Key] < held[b.Key]
	}
	if c := served[a.Key].Compare(served[b.Key]); c != 0 {
		return c < 0
	}
	return a.Since.Before(b.Since)
}

// RunHolds are the holders of st's run holds: the runs a store must say
// are in flight or not for Admit.
func RunHolds(st State) []string {
	var out []string
	for _, h := range st.Holds {
		if h.Run {
			out = append(out, h.Holder)
		}
	}
	return out
}

// Line is the order Admit would let cands in if its bounds let them all
// in now: what a queued run's place is ("3 ahead").
func Line(st State, cands []Candidate) []Candidate {
	held := map[string]int{}
	for _, h := range st.Holds {
		held[h.Key] += h.Slots()
	}
	served := maps.Clone(st.Served)
	if served == nil {
		served = map[string]time.Time{}
	}
	line := slices.Clone(cands)
	out := make([]Candidate, 0, len(line))
	// Each pick is served after the one before it: a tick apart.
	tick := time.Unix(1<<40, 0)
	for len(line) > 0 {
		best := 0
		for i := range line {
			if before(line[i], line[best], held, served) {
				best = i
			}
		}
		x := line[best]
		line = slices.Delete(line, best, best+1)
		out = append(out, x)
		held[x.Key]++
		tick = tick.Add(time.Nanosecond)
		served[x.Key] = tick
	}
	return out
}
