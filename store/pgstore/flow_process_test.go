package pgstore_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
)

// Three worker processes of Concurrency 128 share a step limiter of 2 on
// one database, with a 1 s lease, saturated: every process holds runs
// whose steps wait in its line. Counted from the step bodies' own start and
// end lines (each process's clock, one machine), not from the store: never
// more than 2 bodies run at once, and no body runs twice (a lease renewed
// on its own connection, limiter slots fenced by their leases, and
// slots handed to the line's first at their release leave no worker merely
// slow enough to lose its run or its slot). WEIR_TEST_FLOW_RUNS sets the
// runs (default 360; thousands make it minutes).
//
// It is about a 1 s lease on processes running at speed: under the race
// detector (go test -race, five to ten times slower) it is skipped, and
// .ci/run runs it without. How busy the slots are is logged, not
// asserted: `weir bench flow` measures it (docs/benchmarks.md).
func TestProcessesSaturatedLimiter(t *testing.T) {
	if raceDetector {
		t.Skip("a 1 s lease under the race detector is not the 1 s lease this is about: .ci/run runs it without -race")
	}
	runs := 360
	if n, err := strconv.Atoi(os.Getenv("WEIR_TEST_FLOW_RUNS")); err == nil && n > 0 {
		runs = n
	}
	r := saturate(t, runs, 10*time.Millisecond, time.Second)
	t.Logf("%d runs, 3 processes of Concurrency 128, lease 1s: all ended in %v; the slots busy %.0f %% of the bodies' span (%v); handover p50 %v p99 %v; at most %d at once",
		runs, r.took.Round(time.Millisecond), 100*r.busy, r.span.Round(time.Millisecond), r.handP50, r.handP99, r.most)
}

// flowResult is what saturate measured.
type flowResult struct {
	took, span       time.Duration
	busy             float64 // of the two slots over the span
	handP50, handP99 time.Duration
	most             int // bodies at once, at most
}

// saturate runs runs one-step runs, each holding a slot of a limiter of 2
// for hold, on 3 worker processes of Concurrency 128 with lease, checks
// from the bodies' own lines that none ran twice and never more than 2 at
// once, and measures how busy the slots were.
func saturate(t testing.TB, runs int, hold, lease time.Duration) flowResult {
	t.Helper()
	h := newProcessHarness(t)
	if err := h.s.SetLimiter(t.Context(), &limit.Config{Name: "llm", Concurrency: 2}); err != nil {
		t.Fatal(err)
	}
	var ws []*worker
	for range 3 {
		w := startWorker(t, h.schema, 0, lease, envWorkerConc+"=128")
		w.waitFor(t, "ready", func(l []string) bool { return slices.Contains(l, "ready") })
		ws = append(ws, w)
	}
	var ids []string
	for i := range runs {
		id := fmt.Sprintf("lim-%04d", i)
		in, _ := json.Marshal(limitedInput{Hold: hold, Key: fmt.Sprint("tenant-", i%3)})
		if _, _, err := h.e.StartRun(t.Context(), "limited", in, &weir.StartOptions{ID: id}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	t0 := time.Now()
	h.waitAll(t, ids, 5*time.Minute)
	var r flowResult
	r.took = time.Since(t0)

	type body struct {
		run     string
		attempt int
		start   int64
		end     int64
		pid     int
	}
	bodies := map[string]*body{} // by run and attempt
	starts := map[string]int{}   // bodies started, by run
	for _, w := range ws {
		w.mu.Lock()
		lines := slices.Clone(w.lines)
		w.mu.Unlock()
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) != 4 || (f[0] != "body-start" && f[0] != "body-end") {
				continue
			}
			at, _ := strconv.ParseInt(f[3], 10, 64)
			k := f[1] + " " + f[2]
			b := bodies[k]
			if b == nil {
				b = &body{run: f[1], pid: w.cmd.Process.Pid}
				b.attempt, _ = strconv.Atoi(f[2])
				bodies[k] = b
			}
			if f[0] == "body-start" {
				if b.start != 0 {
					t.Errorf("run %s attempt %d: its body started twice (pid %d at %d, then pid %d at %d)", b.run, b.attempt, b.pid, b.start, w.cmd.Process.Pid, at)
				}
				b.start = at
				starts[b.run]++
			} else {
				b.end = at
			}
		}
	}
	for _, id := range ids {
		if n := starts[id]; n != 1 {
			// Why, from the log: a step_failed (a slot lost, say) or none
			// (a lease lost, the attempt run again).
			var why []string
			if evs, err := h.s.ListEvents(t.Context(), id, 0); err == nil {
				for _, ev := range evs {
					if ev.Type == store.EventStepFailed || ev.Type == store.EventStepStarted {
						why = append(why, fmt.Sprintf("%s attempt %d %s", ev.Type, ev.Attempt, ev.Error))
					}
				}
			}
			t.Errorf("run %s: its step's body ran %d times, want once; its log: %q", id, n, why)
		}
	}
	type ev struct {
		at    int64
		start bool
	}
	var evs []ev
	var busy int64
	for _, b := range bodies {
		if b.start == 0 || b.end == 0 {
			t.Errorf("run %s attempt %d: a body without its start or its end (%+v)", b.run, b.attempt, b)
			continue
		}
		evs = append(evs, ev{b.start, true}, ev{b.end, false})
		busy += b.end - b.start
	}
	slices.SortFunc(evs, func(a, b ev) int {
		if a.at != b.at {
			if a.at < b.at {
				return -1
			}
			return 1
		}
		if a.start == b.start {
			return 0
		}
		if !a.start {
			return -1
		}
		return 1
	})
	// A handover: a body ends with the other slot busy or the line full,
	// and the next body starts; from the end to that start. (Ends are
	// matched to starts in order: with 2 slots, the k-th start after the
	// first two follows the (k-2)-th end.)
	var ends, hands []int64
	in := 0
	for _, e := range evs {
		if e.start {
			in++
			r.most = max(r.most, in)
			if len(ends) > 0 {
				hands = append(hands, e.at-ends[0])
				ends = ends[1:]
			}
		} else {
			in--
			ends = append(ends, e.at)
		}
	}
	if r.most > 2 {
		t.Errorf("%d step bodies ran at once, the limit is 2", r.most)
	}
	if len(evs) > 0 {
		r.span = time.Duration(evs[len(evs)-1].at - evs[0].at)
		r.busy = float64(busy) / float64(2*r.span)
	}
	if len(hands) > 0 {
		slices.Sort(hands)
		r.handP50 = time.Duration(hands[len(hands)/2])
		r.handP99 = time.Duration(hands[len(hands)*99/100])
	}
	return r
}

// A late tenant's run and a priority run get their step's turn across
// processes with at most the limiter's bound of others ahead, whatever
// the workers' Concurrency: 3 worker processes of Concurrency 4 share a
// step limiter of 2; tenant a's 60 runs fill it (its first two hold both
// slots until the gate opens) and wait in its line, far past the workers'
// Concurrency; then tenant b starts a run, and tenant c one of priority
// 10. Counted from the bodies' own start lines: c's step starts first
// once the slots free, b's next, and no more than 2 of a's steps start
// between either joining the line and its own start. (The measure
// before: b after 28–36 of a's steps, c after 14–24, on one worker;
// claims went oldest first and b joined the line only once claimed.)
//
// Whatever the backlog: with LineRuns 32 a worker keeps 32 of a's runs
// aside; with the default (its Concurrency, 4) it keeps 4 and parks the
// others lined, claims going on past them, and b and c take the seats of
// the worst of a's (lineseats.go). Before runs parked lined, the default
// LineRuns (8 runs a worker, 24 in all, with a's first two holding) never
// claimed b or c.
func TestProcessesLateTenantAndPriority(t *testing.T) {
	for _, c := range []struct {
		lineRuns int
		async    bool
	}{{32, false}, {0, false}, {0, true}} {
		name := fmt.Sprint("LineRuns=", c.lineRuns)
		if c.async {
			name += "/StepAsync"
		}
		t.Run(name, func(t *testing.T) { testProcessesLateTenantAndPriority(t, c.lineRuns, c.async) })
	}
}

func testProcessesLateTenantAndPriority(t *testing.T, lineRuns int, async bool) {
	h := newProcessHarness(t)
	if err := h.s.SetLimiter(t.Context(), &limit.Config{Name: "llm", Concurrency: 2}); err != nil {
		t.Fatal(err)
	}
	// Each of a's runs has a gate of its own: the test opens one holder's
	// first, so that the one slot it frees goes to the line's first (c),
	// and then the others.
	gates := t.TempDir()
	var ws []*worker
	for range 3 {
		w := startWorker(t, h.schema, 0, 5*time.Second, envWorkerConc+"=4", fmt.Sprint("WEIR_TEST_PG_WORKER_LINE_RUNS=", lineRuns))
		w.waitFor(t, "ready", func(l []string) bool { return slices.Contains(l, "ready") })
		ws = append(ws, w)
	}
	start := func(id string, in limitedInput) string {
		t.Helper()
		b, _ := json.Marshal(in)
		if _, _, err := h.e.StartRun(t.Context(), "limited", b, &weir.StartOptions{ID: id}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	var ids []string
	for i := range 60 {
		id := fmt.Sprintf("a-%02d", i)
		ids = append(ids, start(id, limitedInput{Hold: 5 * time.Millisecond, Key: "a", Gate: filepath.Join(gates, id), Async: async}))
	}
	// When a run's step joined the limiter's line (its limit_waiting).
	joined := func(id string) time.Time {
		evs, err := h.s.ListEvents(t.Context(), id, 0)
		if err == nil {
			for _, ev := range evs {
				if ev.Type == store.EventLimitWaiting {
					return ev.At
				}
			}
		}
		return time.Time{}
	}
	waitUntil(t, time.Minute, "a's steps in line on every worker, past their Concurrency", func() bool {
		n := 0
		for _, id := range ids {
			if !joined(id).IsZero() {
				n++
			}
		}
		return n >= 20
	})
	b := start("b", limitedInput{Hold: 5 * time.Millisecond, Key: "b", Async: async})
	c := start("c", limitedInput{Hold: 5 * time.Millisecond, Key: "c", Priority: 10, Async: async})
	waitUntil(t, time.Minute, "b's and c's steps in line", func() bool { return !joined(b).IsZero() && !joined(c).IsZero() })
	type started struct {
		run string
		at  time.Time
	}
	bodies := func() []started {
		var order []started
		for _, w := range ws {
			w.mu.Lock()
			for _, l := range w.lines {
				if f := strings.Fields(l); len(f) == 4 && f[0] == "body-start" {
					ns, _ := strconv.ParseInt(f[3], 10, 64)
					order = append(order, started{f[1], time.Unix(0, ns)})
				}
			}
			w.mu.Unlock()
		}
		slices.SortFunc(order, func(x, y started) int { return x.at.Compare(y.at) })
		return order
	}
	open := func(id string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(gates, id), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	holders := bodies()
	if len(holders) != 2 {
		t.Fatalf("%d bodies started before any gate opened, want the limiter's 2: %v", len(holders), holders)
	}
	open(holders[0].run)
	waitUntil(t, time.Minute, "c's body started in the slot freed", func() bool {
		return slices.ContainsFunc(bodies(), func(s started) bool { return s.run == c })
	})
	for _, id := range ids {
		open(id)
	}
	h.waitAll(t, append(ids, b, c), 2*time.Minute)
	order := bodies()
	at := func(id string) int { return slices.IndexFunc(order, func(s started) bool { return s.run == id }) }
	for _, id := range []string{b, c} {
		in, i := joined(id), at(id)
		if i < 0 {
			t.Fatalf("%s's body never started", id)
		}
		ahead := 0
		for _, s := range order[:i] {
			if strings.HasPrefix(s.run, "a-") && s.at.After(in) {
				ahead++
			}
		}
		t.Logf("%s: %d of a's steps started after it joined the line, %v before its own", id, ahead, order[i].at.Sub(in).Round(time.Millisecond))
		if ahead > 2 {
			t.Errorf("%s's step started after %d of a's steps that started once it was in line; the limiter's bound is 2", id, ahead)
		}
	}
	if at(c) > at(b) {
		t.Errorf("c (priority 10) started after b")
	}
}

// waitUntil waits until ok, looking every 10 ms, and fails the test with
// what it waited for past timeout.
func waitUntil(t testing.TB, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
