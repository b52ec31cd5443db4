package weir

import "testing"

// The local line sends at most lineReps attempts to the store's line, and
// the others in the limiter's order: a late key, or a higher priority,
// goes at once (up to twice lineReps); when a place frees, the highest
// priority goes, then the key with fewer places, then the oldest; an
// attempt that stops waiting gives up its turn, or passes on a place it
// was given meanwhile.
func TestLocalLine(t *testing.T) {
	l := newLocalLine()
	for range lineReps {
		if w := l.enter("a", 0); w != nil {
			t.Fatal("one of the first places waited")
		}
	}
	a1, a2 := l.enter("a", 0), l.enter("a", 0)
	if a1 == nil || a2 == nil {
		t.Fatal("a's ninth and tenth took a place past lineReps")
	}
	if w := l.enter("b", 0); w != nil {
		t.Fatal("b, a key with no place, waited behind a's")
	}
	if w := l.enter("a", 5); w != nil {
		t.Fatal("a priority above the places' waited")
	}
	c := l.enter("c", 0) // a key with no place: goes too
	if c != nil {
		t.Fatal("c waited")
	}
	a3, b2 := l.enter("a", 0), l.enter("b", 0) // keys with places: wait
	if a3 == nil || b2 == nil {
		t.Fatal("a and b with places of their own took more")
	}
	ready := func(w *localWaiter) bool {
		select {
		case <-w.ready:
			return true
		default:
			return false
		}
	}
	// 11 places: the frees go to the waiting only below lineReps.
	for range 3 {
		l.leave("a", 0)
	}
	if ready(a1) || ready(b2) {
		t.Fatal("a place given while over lineReps")
	}
	l.leave("a", 0) // 7 places: b2 (b holds 1, a 4) goes first
	if !ready(b2) || ready(a1) {
		t.Fatalf("after a leave: b2 %v a1 %v, want b2 first (its key has fewer places)", ready(b2), ready(a1))
	}
	l.cancel(a1) // gives up its turn
	l.leave("b", 0)
	if !ready(a2) || ready(a3) {
		t.Fatal("a2 (older) did not go before a3 after a1 left the line")
	}
	l.cancel(a2) // given a place meanwhile: passes it on
	if !ready(a3) {
		t.Fatal("a2's place did not pass to a3")
	}
}
