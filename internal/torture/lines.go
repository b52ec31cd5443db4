package torture

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
)

// Lined parking and limiter changes under faults. A limiter's line past
// an engine's seats (Config.LineRuns) parks runs lined, claims them again
// lined, and lets better waiters evict worse ones (lineseats.go); and a
// limiter is changed while its line waits (SetLimiter wakes every waiter,
// toggles between slots handed off and slots counted in a window). The
// trials draw both from a random source of their own, so that a seed's
// other items stay what they were without them; the checker holds the
// limited attempts to Trial.Limiter as before, which no change lowers.

// LimiterChange is one PUT of a trial's limiter while its runs run: the
// concurrency it has (Trial.Limiter), with a rate and a budget far above
// what the trial takes, or with none (the bounds as they were).
type LimiterChange struct {
	// After is how many limited attempts the workers have reported, in
	// all, before the change is made.
	After int
	// Rate is slots per period; Budget cost per period (an attempt costs
	// its number); 0: none.
	Rate         int   `json:",omitempty"`
	Budget       int64 `json:",omitempty"`
	PeriodMillis int   `json:",omitempty"`
}

// Config is the limiter c puts for trial t: t's limiter with t's
// concurrency, never less, so the checker's bound holds whatever is in
// force.
func (c *LimiterChange) Config(t *Trial) *limit.Config {
	return &limit.Config{Name: t.LimiterName(), Concurrency: t.Limiter, Rate: c.Rate, Budget: c.Budget,
		Period: time.Duration(c.PeriodMillis) * time.Millisecond}
}

// Kind names what c puts: "same", "rate", "budget" or "rate+budget".
func (c *LimiterChange) Kind() string {
	switch {
	case c.Rate > 0 && c.Budget > 0:
		return "rate+budget"
	case c.Rate > 0:
		return "rate"
	case c.Budget > 0:
		return "budget"
	}
	return "same"
}

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
// goroutines of their own, than the engines have seats; and in half of
// them, changes of the limiter while the runs run.
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
	if r.IntN(2) == 0 {
		n, after := 2+r.IntN(3), 0
		for k := range n {
			after += 1 + r.IntN(4)
			c := LimiterChange{After: after}
			// The last takes what the others added off again.
			if k < n-1 {
				switch r.IntN(4) {
				case 1:
					c.Rate = 100_000
				case 2:
					c.Budget = 1 << 40
				case 3:
					c.Rate, c.Budget = 100_000, 1<<40
				}
				if c.Rate > 0 || c.Budget > 0 {
					c.PeriodMillis = pick(r, 1000, 60_000)
				}
			}
			t.LimiterChanges = append(t.LimiterChanges, c)
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

// linedCounts is what the workers reported of lined parking and of the
// limiter changes they made.
type linedCounts struct {
	parks      int             // parks lined (store.AdvanceParams.Lined)
	asyncParks int             // of them, while the workflow waited for a group of StepAsync steps
	parked     map[string]bool // the runs parked lined
	claims     int             // runs claimed lined (store.Run.Lined)
	changes    int             // limiter changes made (Trial.LimiterChanges)
}

// note counts a worker's "N park <run> <async>" or "N claim <run>".
func (c *linedCounts) note(line string) bool {
	var what, run string
	var async int
	n, _ := fmt.Sscanf(line, "%s %s %d", &what, &run, &async)
	switch {
	case n >= 2 && what == "claim":
		c.claims++
	case n == 3 && what == "park":
		c.parks++
		c.asyncParks += async
		if c.parked == nil {
			c.parked = map[string]bool{}
		}
		c.parked[run] = true
	default:
		return false
	}
	return true
}

// linedWatch reports, from inside a worker process, the lined parks and
// claims its engines' store calls carry (gatedStore), each with whether
// the run's workflow waited then for steps on goroutines of their own.
type linedWatch struct {
	out    *output
	mu     sync.Mutex
	groups map[string]int // run -> groups of StepAsync steps its workflow waits for
}

func newLinedWatch(out *output) *linedWatch {
	return &linedWatch{out: out, groups: map[string]int{}}
}

// inGroup says run's workflow waits for a group of steps on goroutines
// of their own until the returned function is called (deferred: a park
// unwinds the workflow goroutine).
func (w *linedWatch) inGroup(run string) func() {
	w.mu.Lock()
	w.groups[run]++
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		if w.groups[run]--; w.groups[run] <= 0 {
			delete(w.groups, run)
		}
		w.mu.Unlock()
	}
}

// advanced notes a park lined that the store took.
func (w *linedWatch) advanced(p *store.AdvanceParams) {
	if w == nil || !p.Lined {
		return
	}
	w.mu.Lock()
	async := 0
	if w.groups[p.RunID] > 0 {
		async = 1
	}
	w.mu.Unlock()
	w.out.line("N park %s %d", p.RunID, async)
}

// claimed notes the runs a claim took from a limiter's line.
func (w *linedWatch) claimed(runs []*store.Run) {
	if w == nil {
		return
	}
	for _, r := range runs {
		if r.Lined {
			w.out.line("N claim %s", r.ID)
		}
	}
}

// changeLimiter makes the limiter changes the harness asks for on in, a
// line "<index>" each (run.go sends each once the workers reported its
// After limited attempts, and again to another worker if this one exits
// first), and says so on out ("C <index> <kind>"), until in ends.
func changeLimiter(ctx context.Context, s store.Full, t *Trial, in io.Reader, out *output) {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		i, err := strconv.Atoi(sc.Text())
		if err != nil || i < 0 || i >= len(t.LimiterChanges) {
			out.line("V a limiter change the trial does not have: %q", sc.Text())
			continue
		}
		c := &t.LimiterChanges[i]
		for {
			err = s.SetLimiter(ctx, c.Config(t))
			if err == nil || errors.Is(err, store.ErrInvalid) {
				break
			}
			if ctx.Err() != nil {
				return
			}
			time.Sleep(50 * time.Millisecond) // a restarting database
		}
		if err != nil {
			out.line("V limiter change %d (%s): %v", i, c.Kind(), err)
			continue
		}
		out.line("C %d %s", i, c.Kind())
	}
}
