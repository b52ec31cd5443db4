package weir

import (
	"slices"
	"sync"
	"time"

	"github.com/weirhq/weir/store"
)

// Seats: the runs an engine keeps while their steps wait in a limiter's
// line for a held slot. Such a run stands aside (it does not count against
// Config.Concurrency) up to Config.LineRuns of them, so that a flood of
// runs waiting for one limiter does not stop the engine from claiming
// others. Past LineRuns a run whose step waits inline parks instead, and
// so does a run whose steps wait on goroutines of their own once none of
// them runs and its workflow goroutine waits for them (execution.await),
// marked on its row as lined (store.AdvanceParams.Lined): it holds no
// worker and costs no lease renewal, and any engine with a free seat
// claims it again before anything else (store.ClaimRunsParams.Lined). So
// claims never stop at a flood, whatever its size: a late tenant's run, or
// an urgent one, is claimed, and a better waiter arriving takes the seat of
// the worst, which parks (eviction), so the engine's seats, and the
// limiter's line at the store, hold the best of its waiters.
//
// Better is the limiter's own order: a higher priority, then a key (a
// tenant) holding fewer of the limiter's seats. A waiter of a limiter that
// has no seat at all takes one from the limiter holding the most, so one
// limiter's flood does not starve another's.

// lineSeat is a run standing aside for a step of it waiting in a
// limiter's line.
type lineSeat struct {
	x       *execution
	limiter string
	key     string
	prio    int
	seq     uint64
	// evict is closed when a better waiter takes the seat: an inline step
	// parks its run, lined; a step on a goroutine of its own waits on,
	// lined.
	evict   chan struct{}
	evicted bool
}

// lineWant is what a step waits for: a slot of limiter, with key and prio.
// parks: its run parks when the step has no seat (an inline step); a step
// on a goroutine of its own waits on, lined (stepEnv.standLined), and the
// run parks once nothing of it runs (execution.await).
type lineWant struct {
	limiter, key string
	prio         int
	parks        bool
}

// linedRecheck is when a lined run is claimable even if no engine had a
// free seat meanwhile: seats come free as waiters are served, and any
// engine with one claims lined runs at once, so this only bounds the wait
// of a run whose limiter's waiters all went away with their engines while
// every other engine's seats stayed full.
const linedRecheck = 10 * time.Minute

// reachLine says x, if claimed lined, reached its limiter: it takes a seat
// now if it waits (lineEnter), not later.
func (x *execution) reachLine() {
	e := x.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if x.linedClaim {
		x.linedClaim = false
		e.linedPending--
	}
}

// lineEnter says a step of x waits in limiter w's line for a held slot. A
// step of x not standing aside yet stands x aside while the engine has a
// free seat, or takes the seat of a worse waiter, whose run then parks; it
// returns the seat, if x has one. park: the engine has no seat for x: an
// inline step parks x, lined; a step on a goroutine of its own waits on,
// lined (stepEnv.standLined).
func (x *execution) lineEnter(w lineWant) (seat *lineSeat, park bool) {
	if x.freeSlot == nil {
		return nil, false // Replay: no slot
	}
	e := x.e
	e.mu.Lock()
	x.lineWaits++
	if x.aside || x.slotGone || e.cfg.LineRuns < 0 {
		e.mu.Unlock()
		return nil, false
	}
	if e.aside >= e.cfg.LineRuns {
		worst := e.worstSeat(w)
		if worst == nil {
			e.mu.Unlock()
			return nil, true
		}
		// The better waiter takes the worst's seat; the worst's run leaves
		// (its lineLeave gives the seat back).
		worst.evicted = true
		close(worst.evict)
	}
	x.aside = true
	e.aside++
	e.inflight--
	e.seatSeq++
	seat = &lineSeat{x: x, limiter: w.limiter, key: w.key, prio: w.prio, seq: e.seatSeq, evict: make(chan struct{})}
	e.seats = append(e.seats, seat)
	x.seat = seat
	e.mu.Unlock()
	e.nudge() // a run may be claimed in its place
	return seat, false
}

// worstSeat is the seat w may take, if any: the worst seat of w's limiter
// (the lowest priority, then the key holding the most seats, then the
// newest) if w is better than it, or, if w's limiter has no seat, the
// newest of the limiter holding the most. e.mu held.
func (e *Engine) worstSeat(w lineWant) *lineSeat {
	byKey, byLimiter := map[string]int{}, map[string]int{}
	for _, s := range e.seats {
		if !s.evicted {
			byLimiter[s.limiter]++
			if s.limiter == w.limiter {
				byKey[s.key]++
			}
		}
	}
	var worst *lineSeat
	if byLimiter[w.limiter] == 0 {
		most := ""
		for l, n := range byLimiter {
			if n > byLimiter[most] || n == byLimiter[most] && l < most {
				most = l
			}
		}
		if byLimiter[most] < 2 {
			return nil // no limiter holds more than the one seat it keeps
		}
		for _, s := range e.seats {
			if !s.evicted && s.limiter == most && (worst == nil || s.seq > worst.seq) {
				worst = s
			}
		}
		return worst
	}
	for _, s := range e.seats {
		if s.evicted || s.limiter != w.limiter {
			continue
		}
		if worst == nil || s.prio < worst.prio || s.prio == worst.prio &&
			(byKey[s.key] > byKey[worst.key] || byKey[s.key] == byKey[worst.key] && s.seq > worst.seq) {
			worst = s
		}
	}
	if worst == nil {
		return nil
	}
	if w.prio > worst.prio || w.prio == worst.prio && byKey[w.key]+1 < byKey[worst.key] {
		return worst
	}
	return nil
}

// lineLeave ends lineEnter's wait (granted, or left): x counts against
// Concurrency again at once, past it if need be (its slot is held).
func (x *execution) lineLeave() {
	if x.freeSlot == nil {
		return
	}
	e := x.e
	e.mu.Lock()
	defer e.mu.Unlock()
	// Any step's wait ending ends the run's standing aside, even if
	// another still waits: a run never stands aside while a step of it
	// runs.
	x.lineWaits--
	x.unseat()
}

// unseat ends x's standing aside, if it does: its step's wait ended, or a
// better waiter took its seat. e.mu held.
func (x *execution) unseat() {
	if e := x.e; x.aside {
		x.aside = false
		e.aside--
		e.inflight++
		e.dropSeat(x)
	}
}

// leaveSeat is unseat for a step on a goroutine of its own whose seat a
// better waiter took: it waits on, lined, and its seat is the taker's now.
func (x *execution) leaveSeat() {
	if x.freeSlot == nil {
		return
	}
	x.e.mu.Lock()
	defer x.e.mu.Unlock()
	x.unseat()
}

// dropSeat takes x's seat out of the engine's. e.mu held.
func (e *Engine) dropSeat(x *execution) {
	if x.seat != nil {
		e.seats = slices.DeleteFunc(e.seats, func(s *lineSeat) bool { return s == x.seat })
		x.seat = nil
	}
}

// either returns a channel closed when a or b is (nil: never), and what
// stops watching them.
func either(a, b <-chan struct{}) (<-chan struct{}, func()) {
	switch {
	case b == nil:
		return a, func() {}
	case a == nil:
		return b, func() {}
	}
	out, done := make(chan struct{}), make(chan struct{})
	go func() {
		select {
		case <-a:
		case <-b:
		case <-done:
			return
		}
		close(out)
	}()
	return out, sync.OnceFunc(func() { close(done) })
}

// parkLined parks x until a seat of an engine comes free for its step
// waiting for limiter at prio (lineSeat), or linedRecheck at the latest.
// events go with the park's record.
func (x *execution) parkLined(limiter string, prio int, events ...store.Event) {
	x.parkWith(time.Now().Add(linedRecheck), true, &store.Awaits{}, &store.AdvanceParams{Events: events, Limiters: []string{limiter}, Lined: true, LinePriority: prio})
}
