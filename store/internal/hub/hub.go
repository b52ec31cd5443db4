// Package hub wakes the Wait calls of one process when the streams they wait
// on change: each backend tells it what it committed (and, on PostgreSQL,
// what other processes committed). Only streams with waiters have an entry:
// a wake closes the channel and forgets it, the woken re-check, and the last
// waiter to leave without a wake forgets it too.
package hub

import "sync"

// Hub holds the waiters of streams, by stream id. The zero value is ready
// to use. T is what a wake tells them (a stream's new head, say).
type Hub[T any] struct {
	mu sync.Mutex
	m  map[int64]*Waiters[T]
}

// Waiters are the Wait calls of one stream until its next wake.
type Waiters[T any] struct {
	// C is closed by the wake.
	C chan struct{}
	// Value is what the wake said; set before C is closed.
	Value T
	n     int
}

// Subscribe returns the waiters of stream id, which the next wake of id
// closes; the caller must Unsubscribe it. Subscribe before looking at the
// stream, so that a change between the look and the wait still wakes.
func (h *Hub[T]) Subscribe(id int64) *Waiters[T] {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[int64]*Waiters[T])
	}
	w, ok := h.m[id]
	if !ok {
		w = &Waiters[T]{C: make(chan struct{})}
		h.m[id] = w
	}
	w.n++
	return w
}

// Unsubscribe leaves w, which Subscribe(id) returned.
func (h *Hub[T]) Unsubscribe(id int64, w *Waiters[T]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.n--
	if w.n == 0 && h.m[id] == w {
		delete(h.m, id)
	}
}

// Waiting returns how many waiters stream id has.
func (h *Hub[T]) Waiting(id int64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w, ok := h.m[id]; ok {
		return w.n
	}
	return 0
}

// Has reports whether stream id has waiters.
func (h *Hub[T]) Has(id int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.m[id]
	return ok
}

// Wake wakes the waiters of stream id, telling them v.
func (h *Hub[T]) Wake(id int64, v T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wake(id, v)
}

// WakeEach wakes the waiters of each stream of ids, telling each what
// value returns for it.
func (h *Hub[T]) WakeEach(ids []int64, value func(i int) T) {
	if len(ids) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, id := range ids {
		h.wake(id, value(i))
	}
}

func (h *Hub[T]) wake(id int64, v T) {
	if w, ok := h.m[id]; ok {
		w.Value = v
		close(w.C)
		delete(h.m, id)
	}
}

// WakeAll wakes every waiter, with T's zero value: changes may have been
// missed, and each must look again.
func (h *Hub[T]) WakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, w := range h.m {
		close(w.C)
		delete(h.m, id)
	}
}
