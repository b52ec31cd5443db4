package torture

import (
	"fmt"
	"math/rand/v2"
)

// Lined parking under faults. A limiter's line past an engine's seats
// (Config.LineRuns) parks runs lined, claims them again lined, and lets
// better waiters evict worse ones (lineseats.go). The trials draw it from
// a random source of their own, so that a seed's other items stay what
// they were without it; the checker holds the limited attempts to
// Trial.Limiter as before.

// maxLinedRuns bounds the runs addLines adds: enough to outnumber the
// seats of four engines, few enough for a trial of seconds.
const maxLinedRuns = 20

// linedTenants are the keys of the limited steps: shared by several
// runs, so that keys hold different numbers of an engine's seats, and a
// key holding fewer takes the seat of one holding more.
var linedTenants = []string{"ta", "tb", "tc"}

// addLines, in a trial with a limiter: gives its limited steps a tenant
// (LimitKey, one per run) and a priority; in two thirds of them, small
// Config.LineRuns for the workers' engines (and in half of those a small
// Concurrency too) and more runs of limited steps, inline and on
// goroutines of their own, than the engines have seats.
func addLines(t *Trial, seed uint64) {
	if t.Limiter == 0 {
		return
	}
	r := rand.New(rand.NewPCG(seed, 0x11_5ea75))
	for i := range t.Runs {
		rs := &t.Runs[i]
		tenant := linedTenants[r.IntN(len(linedTenants))]
		for j := range rs.Items {
			if it := &rs.Items[j]; it.Limited {
				it.LimitKey, it.LimitPriority = tenant, linePriority(r)
			}
		}
	}
	switch r.IntN(3) {
	case 1:
		t.LineRuns = 1 + r.IntN(2)
	case 2:
		t.LineRuns, t.Concurrency = 1+r.IntN(2), 1+r.IntN(2)
	}
	if t.LineRuns > 0 {
		// Past what the engines keep (Concurrency runs, if set, and
		// LineRuns standing aside each) and the slots held, the rest
		// must park lined.
		n := t.Workers*t.Engines*(t.Concurrency+t.LineRuns) + t.Limiter + 2 + r.IntN(4)
		for i := range min(n, maxLinedRuns) {
			t.Runs = append(t.Runs, genLinedRun(r, fmt.Sprintf("%s-l%d", t.Prefix, i)))
		}
	}
}

// linePriority is a limited step's priority: mostly 0, so that keys
// decide among equals, sometimes above.
func linePriority(r *rand.Rand) int { return pick(r, 0, 0, 1, 2) }

// genLinedRun is a run of limited steps that hold their slot some
// milliseconds each: inline ones (Step), a group on goroutines of their
// own (StepAsync, then Get), or one then the other.
func genLinedRun(r *rand.Rand, id string) RunSpec {
	rs := RunSpec{ID: id, Seed: r.Uint64(), ContinueOnFail: r.IntN(2) == 0}
	tenant := linedTenants[r.IntN(len(linedTenants))]
	inline, async := 0, 0
	switch r.IntN(3) {
	case 0:
		inline = 1 + r.IntN(2)
	case 1:
		async = 2 + r.IntN(2)
	default:
		inline, async = 1, 2
	}
	var op int64
	add := func(group int) {
		op++
		it := Item{Kind: ItemStep, Op: op, Name: fmt.Sprintf("lstep%d", op), Group: group,
			Limited: true, LimitKey: tenant, LimitPriority: linePriority(r),
			SleepMicros: 4000 + r.IntN(8000), FlushEvery: 1 + r.IntN(4),
			Outputs: []Output{{Stream: "s0", Count: 2 + r.IntN(7), MinLen: 1, MaxLen: 64}}}
		if r.IntN(4) == 0 {
			it.FailUpTo, it.FailAfter = 1, r.IntN(3)
		}
		it.MaxAttempts = it.FailUpTo + 1 + 8
		rs.Items = append(rs.Items, it)
	}
	for range inline {
		add(0)
	}
	for range async {
		add(1)
	}
	return rs
}
