// Package queue hands a store's writes to its committers, with the contract
// both backends keep:
//
//   - a write whose context ends before a committer took it is dropped, and
//     its caller gets the context's error: nothing was written;
//   - once a committer took it, the caller waits for its outcome, however
//     long, so an error always says what happened;
//   - after Close nothing is taken in, and what was queued is still
//     committed.
//
// The committer groups what is waiting (Next) into one transaction.
package queue

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/weirhq/weir/store"
)

// Item is one write in a queue: Op is the backend's.
type Item[T any] struct {
	Op    T
	state atomic.Int32
	done  chan struct{}
}

const (
	queued int32 = iota
	taken
	dropped
)

// Queue is a bounded queue of writes.
type Queue[T any] struct {
	mu     sync.RWMutex // guards closed against sends on ch
	closed bool
	ch     chan *Item[T]
}

// New returns a queue that holds up to n writes before Submit waits.
func New[T any](n int) *Queue[T] { return &Queue[T]{ch: make(chan *Item[T], n)} }

// Submit queues op and waits until a committer marks it Done; it returns
// store.ErrClosedStore after Close, or ctx's error if ctx ended before a
// committer took it (it is then dropped). An item is submitted once: a
// dropped one may still be in the queue.
func (q *Queue[T]) Submit(ctx context.Context, it *Item[T]) error {
	it.done = make(chan struct{})
	q.mu.RLock()
	if q.closed {
		q.mu.RUnlock()
		return store.ErrClosedStore
	}
	select {
	case q.ch <- it:
		q.mu.RUnlock()
	case <-ctx.Done():
		q.mu.RUnlock()
		return ctx.Err()
	}
	select {
	case <-it.done:
		return nil
	case <-ctx.Done():
		if it.state.CompareAndSwap(queued, dropped) {
			return ctx.Err()
		}
		<-it.done
		return nil
	}
}

// Done hands the outcome of a taken write to its caller.
func (it *Item[T]) Done() { close(it.done) }

// Next waits for a write, then takes the ones waiting behind it while more
// fits (each write's size, up to max in all), into batch[:0]. It leaves out
// the writes their callers dropped, and returns false once the queue is
// closed and empty.
func (q *Queue[T]) Next(batch []*Item[T], n int, size func(T) int, max int) ([]*Item[T], bool) {
	batch = batch[:0]
	for len(batch) == 0 {
		it, ok := <-q.ch
		if !ok {
			return nil, false
		}
		total := size(it.Op)
		all := append(batch, it)
	fill:
		for len(all) < n && total < max {
			select {
			case it, ok := <-q.ch:
				if !ok {
					break fill
				}
				all = append(all, it)
				total += size(it.Op)
			default:
				break fill
			}
		}
		batch = all[:0]
		for _, it := range all {
			if it.state.CompareAndSwap(queued, taken) {
				batch = append(batch, it)
			}
		}
		clear(all[len(batch):])
	}
	return batch, true
}

// More adds to batch the writes waiting now, without waiting for any,
// while more fits (up to n writes and max of size in all, counting
// batch's), leaving out the ones their callers dropped: a committer that
// took a batch and then waited for its turn takes what queued meanwhile.
func (q *Queue[T]) More(batch []*Item[T], n int, size func(T) int, max int) []*Item[T] {
	total := 0
	for _, it := range batch {
		total += size(it.Op)
	}
	for len(batch) < n && total < max {
		select {
		case it, ok := <-q.ch:
			if !ok {
				return batch
			}
			if it.state.CompareAndSwap(queued, taken) {
				batch = append(batch, it)
				total += size(it.Op)
			}
		default:
			return batch
		}
	}
	return batch
}

// Close stops taking writes in; Next still returns those queued.
func (q *Queue[T]) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.ch)
	}
}
