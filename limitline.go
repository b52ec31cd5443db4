package weir

import (
	"sync"
	"time"
)

// The local line: how many of an engine's attempts wait in a limiter's
// line at the store at once. A limiter is one row at the store, decided
// whole on every ask, so a saturated limiter with a thousand waiters would
// have every ask read and write a thousand places, and their asks would
// crowd out the holders' renewals (which must reach the row within a
// lease, or the slot is lost: slotLease). An engine sends at most
// lineReps of its attempts to a limiter's store line; the others wait
// here, in the limiter's own order — priority first, then the key (the
// tenant) with fewer of this engine's attempts at the store, then age — and
// take a place there as one leaves it (granted, or gone). One arriving with
// a higher priority than an attempt already there, or with a key none of
// them has, goes at once, up to twice lineReps: a late tenant or an urgent
// step is not held behind a backlog of others here, and the store's line
// orders them.

// lineReps bounds an engine's attempts in a limiter's line at the store
// (twice it for late keys and higher priorities).
const lineReps = 8

// localLine is one limiter's local line in an engine.
type localLine struct {
	mu     sync.Mutex
	reps   int            // this engine's attempts in the store's line
	byKey  map[string]int // of them, by key
	byPrio map[int]int    // of them, by priority
	queue  []*localWaiter // the others, in arrival order
	seq    uint64
}

// localWaiter is an attempt waiting in a local line.
type localWaiter struct {
	key   string
	prio  int
	seq   uint64
	ready chan struct{} // closed when it takes a place at the store
}

func newLocalLine() *localLine {
	return &localLine{byKey: map[string]int{}, byPrio: map[int]int{}}
}

// enter puts an attempt of key and prio in the line: nil if it takes a
// place at the store at once, else the waiter whose ready it waits for.
func (l *localLine) enter(key string, prio int) *localWaiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reps < lineReps || l.reps < 2*lineReps && (l.byKey[key] == 0 || prio > l.lowestPrio()) {
		l.admit(key, prio)
		return nil
	}
	l.seq++
	w := &localWaiter{key: key, prio: prio, seq: l.seq, ready: make(chan struct{})}
	l.queue = append(l.queue, w)
	return w
}

// lowestPrio is the lowest priority of the attempts at the store (l.mu
// held, l.reps > 0).
func (l *localLine) lowestPrio() int {
	first, low := true, 0
	for p := range l.byPrio {
		if first || p < low {
			first, low = false, p
		}
	}
	return low
}

func (l *localLine) admit(key string, prio int) {
	l.reps++
	l.byKey[key]++
	l.byPrio[prio]++
}

// leave ends an attempt's place at the store (granted, or given up), and
// gives it to the next in the local line.
func (l *localLine) leave(key string, prio int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reps--
	if l.byKey[key]--; l.byKey[key] <= 0 {
		delete(l.byKey, key)
	}
	if l.byPrio[prio]--; l.byPrio[prio] <= 0 {
		delete(l.byPrio, prio)
	}
	for l.reps < lineReps && len(l.queue) > 0 {
		best := 0
		for i, w := range l.queue[1:] {
			b := l.queue[best]
			if w.prio > b.prio || w.prio == b.prio && l.byKey[w.key] < l.byKey[b.key] {
				best = i + 1
			}
		}
		w := l.queue[best]
		l.queue = append(l.queue[:best], l.queue[best+1:]...)
		l.admit(w.key, w.prio)
		close(w.ready)
	}
}

// cancel takes w out of the line: its attempt stopped waiting. If it had
// been given a place at the store meanwhile, the place goes on.
func (l *localLine) cancel(w *localWaiter) {
	l.mu.Lock()
	for i, q := range l.queue {
		if q == w {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			l.mu.Unlock()
			return
		}
	}
	l.mu.Unlock()
	l.leave(w.key, w.prio) // admitted as it stopped
}

// line returns limiter's local line in this engine.
func (g *grants) line(limiter string) *localLine {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lines == nil {
		g.lines = map[string]*localLine{}
	}
	l := g.lines[limiter]
	if l == nil {
		l = newLocalLine()
		g.lines[limiter] = l
	}
	return l
}

// waitLocal waits in line l until w takes a place at the store, and
// reports true; false if a better waiter took seat meanwhile (lineseats.go;
// nil: none). Not parked: the place comes when another attempt of this
// engine leaves the store's line, which a parked run would not hear.
func (env *stepEnv) waitLocal(w *localWaiter, seat *lineSeat) bool {
	var evict <-chan struct{}
	if seat != nil {
		evict = seat.evict
	}
	wake, unwatch := either(w.ready, evict)
	defer unwatch()
	for {
		switch {
		case closed(w.ready):
			return true
		case closed(evict):
			return false
		}
		env.wait(time.Now().Add(time.Hour), wake, false)
	}
}
