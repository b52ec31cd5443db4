// Package inbox holds the taking rule of a run's inboxes, once: which
// delivery each take of the workflow gets, for a hook's payloads and for
// the messages of one topic of a run. The engine keeps a Box per hook and
// per topic; what comes in (a payload, a message, a hook's close) is added
// in the order of the run's log, and the workflow's takes (Receive, Recv,
// a Future's Get, a Select that chooses it) ask the Box.
//
// # The rule
//
//   - The n-th take of a box gets its n-th delivery, in log order. A take
//     is the workflow taking a value: Receive, Recv, Get of a Future, or
//     a Select choosing one. A Future is bound when it is taken, not when
//     it is made: Futures made and never taken (a Select that chose
//     another case, say) take nothing, and the next take gets what they
//     would have.
//   - A take that finds nothing waits until a delivery comes; a box can
//     serve k takers at once (Await of k Futures) once k deliveries are
//     untaken.
//   - Closing a box (Hook.Close) ends its deliveries: the store refuses
//     any after the close, and every delivery before it stays in the box.
//     Takes get those first, then Closed.
//   - Replay gives every take the same delivery: takes happen in the
//     workflow's order, which replay repeats, and the log's order of
//     deliveries is fixed; only how long a take waited differs.
//
// Everything here is a pure function of what was added and taken, with
// table and property tests (a live interleaving of deliveries and takes
// against its replay).
package inbox

// Box is one inbox as an execution knows it: the deliveries it has read
// from the run's log, in log order, how many the workflow took, and
// whether it is closed.
type Box struct {
	items  [][]byte
	taken  int
	closed bool
}

// State is what a take finds.
type State uint8

// What a take finds.
const (
	// Empty: nothing untaken and the box is open: the take waits.
	Empty State = iota
	// Taken: the take got the next delivery.
	Taken
	// Closed: the box is closed and every delivery before its close is
	// taken: the take fails (ErrHookDisposed).
	Closed
)

func (s State) String() string {
	switch s {
	case Taken:
		return "taken"
	case Closed:
		return "closed"
	}
	return "empty"
}

// Deliver adds a delivery, in log order. A delivery after Close is a
// store's bug (it refuses them); it panics.
func (b *Box) Deliver(payload []byte) {
	if b.closed {
		panic("inbox: a delivery after the box was closed")
	}
	b.items = append(b.items, payload)
}

// Close closes the box: the deliveries before it (all added already, the
// log being read past the close) stay to be taken. Closing twice is
// harmless.
func (b *Box) Close() { b.closed = true }

// IsClosed reports whether the box is closed.
func (b *Box) IsClosed() bool { return b.closed }

// Ready reports whether k takes made now would all end without waiting:
// k deliveries are untaken, or the box is closed (the takes beyond its
// deliveries get Closed).
func (b *Box) Ready(k int) bool { return b.closed || len(b.items)-b.taken >= k }

// Take is the workflow's next take: the oldest delivery not taken, its
// index (from 0, in log order) and Taken; or Empty (wait for a delivery)
// or Closed.
func (b *Box) Take() (payload []byte, index int, s State) {
	if b.taken < len(b.items) {
		i := b.taken
		b.taken++
		return b.items[i], i, Taken
	}
	if b.closed {
		return nil, -1, Closed
	}
	return nil, -1, Empty
}

// Delivered is how many deliveries the box has.
func (b *Box) Delivered() int { return len(b.items) }

// TakenCount is how many deliveries the workflow took.
func (b *Box) TakenCount() int { return b.taken }

// Left is how many deliveries are not taken: when a run ends, these are
// the ones it left.
func (b *Box) Left() int { return len(b.items) - b.taken }
