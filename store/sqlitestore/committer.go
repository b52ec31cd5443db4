package sqlitestore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/stream"
)

// An op is one write operation waiting for the committer. run executes inside
// the group transaction; it must write every change it makes to the caches to
// SQL before it returns, so that a later op of the same transaction that
// misses the cache reloads the same state.
type op struct {
	state atomic.Int32
	run   func(tx *wtx) error
	err   error
	done  chan struct{}
}

const (
	opQueued int32 = iota
	opRunning
	opCancelled
)

// write queues fn for the committer and waits for its transaction to commit.
// If ctx ends before the committer took the op, the op is dropped; after
// that, the caller waits for the outcome, so that an error always means
// nothing was written.
func (s *Store) write(ctx context.Context, fn func(tx *wtx) error) error {
	o := &op{run: fn, done: make(chan struct{})}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return store.ErrClosedStore
	}
	select {
	case s.ops <- o:
		s.mu.RUnlock()
	case <-ctx.Done():
		s.mu.RUnlock()
		return ctx.Err()
	}
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		if o.state.CompareAndSwap(opQueued, opCancelled) {
			return ctx.Err()
		}
		<-o.done
		return o.err
	}
}

// committer owns the write connection and the caches. Only its goroutine
// touches them, so neither needs a lock.
type committer struct {
	s       *Store
	w       *wstmts
	streams *lru[int64, *apply.Stream]
	writers *lru[writerKey, *stream.Writer]
	fences  *lru[fenceKey, int64]
	tx      wtx
	batch   []*op
	dirty   []cacheKey // cache entries handed to the ops of this transaction
	notify  []int64    // streams that got records in this transaction
	tails   []tailAdd  // their records, for the tail cache
	// keysSaved counts idempotency keys saved, to purge expired ones now
	// and then.
	keysSaved int
}

type writerKey struct {
	stream int64
	writer string
}

type fenceKey struct {
	run, writer string
}

// cacheKey names one cache entry an op was handed, so that it can be
// dropped (and reloaded from SQL) when the op or its transaction rolls back
// after changing it.
type cacheKey struct {
	stream int64
	writer string
	run    string
	kind   uint8
}

const (
	keyStream uint8 = iota
	keyWriter
	keyFence
)

func newCommitter(s *Store) *committer {
	c := &committer{
		s:       s,
		w:       s.w,
		streams: newLRU[int64, *apply.Stream](s.cfg.CacheStreams),
		writers: newLRU[writerKey, *stream.Writer](s.cfg.CacheWriters),
		fences:  newLRU[fenceKey, int64](s.cfg.CacheStreams),
	}
	c.tx.c = c
	c.tx.w = s.w
	return c
}

func (c *committer) loop() {
	defer close(c.s.committed)
	max := c.s.cfg.MaxBatch
	for {
		o, ok := <-c.s.ops
		if !ok {
			return
		}
		c.batch = append(c.batch[:0], o)
	fill:
		for len(c.batch) < max {
			select {
			case o, ok := <-c.s.ops:
				if !ok {
					break fill
				}
				c.batch = append(c.batch, o)
			default:
				break fill
			}
		}
		c.commit()
	}
}

// commit runs c.batch in one transaction and replies to every op.
func (c *committer) commit() {
	ops := c.batch[:0]
	for _, o := range c.batch {
		if o.state.CompareAndSwap(opQueued, opRunning) {
			ops = append(ops, o)
		}
	}
	if len(ops) == 0 {
		return
	}
	c.dirty, c.notify, c.tails = c.dirty[:0], c.notify[:0], c.tails[:0]
	ctx := context.Background() // one caller's context must not cut the others' transaction
	if _, err := c.w.begin.ExecContext(ctx); err != nil {
		c.fail(ops, fmt.Errorf("begin: %w", translate(err)))
		return
	}
	// A lone op needs no savepoint: if it fails, the transaction rolls back.
	alone := len(ops) == 1
	ok := 0
	for _, o := range ops {
		if !alone {
			if _, err := c.w.savepoint.ExecContext(ctx); err != nil {
				c.abandon(ops, fmt.Errorf("savepoint: %w", translate(err)))
				return
			}
		}
		c.tx.reset()
		o.err = c.run(o)
		if o.err != nil {
			// A request the rules refused changed nothing (package
			// apply); one that failed while saving may have changed
			// what it was handed.
			if c.tx.changed {
				c.evict(c.tx.loaded)
			}
			if !alone {
				_, err1 := c.w.rollbackTo.ExecContext(ctx)
				_, err2 := c.w.release.ExecContext(ctx)
				if err1 != nil || err2 != nil {
					c.abandon(ops, fmt.Errorf("rollback to savepoint: %w", translate(firstErr(err1, err2))))
					return
				}
			}
			continue
		}
		if !alone {
			if _, err := c.w.release.ExecContext(ctx); err != nil {
				c.evict(c.tx.loaded)
				c.abandon(ops, fmt.Errorf("release savepoint: %w", translate(err)))
				return
			}
		}
		c.dirty = append(c.dirty, c.tx.loaded...)
		c.notify = append(c.notify, c.tx.notify...)
		c.tails = append(c.tails, c.tx.tails...)
		ok++
	}
	if ok == 0 {
		if _, err := c.w.rollback.ExecContext(ctx); err != nil {
			c.abandon(ops, fmt.Errorf("rollback: %w", translate(err)))
			return
		}
		c.reply(ops)
		return
	}
	if _, err := c.w.commit.ExecContext(ctx); err != nil {
		c.abandon(ops, fmt.Errorf("commit: %w", translate(err)))
		return
	}
	// The tail cache first: a woken reader or a replied writer reads it.
	c.s.tail.apply(c.tails, c.notify, c.s.notify.has)
	clear(c.tails)
	c.s.notify.wake(c.notify)
	c.reply(ops)
	if cap(c.tx.buf) > 4<<20 {
		c.tx.buf = nil // do not pin one huge append's buffer forever
	}
}

// run runs one op. A panic in an op (a bug, or a database the rules cannot
// make sense of) fails that op alone instead of killing the committer, which
// would hang every writer.
func (c *committer) run(o *op) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("sqlitestore: internal error: %v", p)
			// The op may have changed cache entries it did not get to
			// mark: forget them all (they reload from the transaction).
			c.streams = newLRU[int64, *apply.Stream](c.s.cfg.CacheStreams)
			c.writers = newLRU[writerKey, *stream.Writer](c.s.cfg.CacheWriters)
			c.fences = newLRU[fenceKey, int64](c.s.cfg.CacheStreams)
		}
	}()
	return o.run(&c.tx)
}

// abandon rolls the whole transaction back after a failure of the transaction
// itself: every op fails with err (ops that failed on their own keep their
// error) and every cache entry the transaction changed is dropped.
func (c *committer) abandon(ops []*op, err error) {
	_, _ = c.w.rollback.ExecContext(context.Background())
	c.evict(c.dirty)
	c.evict(c.tx.loaded)
	for _, o := range ops {
		if o.err == nil {
			o.err = err
		}
	}
	c.reply(ops)
}

func (c *committer) fail(ops []*op, err error) {
	for _, o := range ops {
		o.err = err
	}
	c.reply(ops)
}

func (c *committer) reply(ops []*op) {
	for _, o := range ops {
		close(o.done)
	}
}

func (c *committer) evict(keys []cacheKey) {
	for _, k := range keys {
		switch k.kind {
		case keyStream:
			c.streams.remove(k.stream)
		case keyWriter:
			c.writers.remove(writerKey{k.stream, k.writer})
		case keyFence:
			c.fences.remove(fenceKey{k.run, k.writer})
		}
	}
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// notifier wakes Wait calls after a commit. Only streams with waiters have an
// entry: a wake closes the channel and forgets it, waiters re-check, and the
// last waiter to leave without a wake forgets it too.
type notifier struct {
	mu sync.Mutex
	m  map[int64]*waiters
}

type waiters struct {
	ch chan struct{}
	n  int
}

// subscribe returns the channel the next commit on stream id closes; the
// caller must call unsubscribe with it.
func (n *notifier) subscribe(id int64) *waiters {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.m == nil {
		n.m = make(map[int64]*waiters)
	}
	w, ok := n.m[id]
	if !ok {
		w = &waiters{ch: make(chan struct{})}
		n.m[id] = w
	}
	w.n++
	return w
}

// has reports whether stream id has waiters.
func (n *notifier) has(id int64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.m[id]
	return ok
}

func (n *notifier) unsubscribe(id int64, w *waiters) {
	n.mu.Lock()
	defer n.mu.Unlock()
	w.n--
	if w.n == 0 && n.m[id] == w {
		delete(n.m, id)
	}
}

func (n *notifier) wake(ids []int64) {
	if len(ids) == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, id := range ids {
		if w, ok := n.m[id]; ok {
			close(w.ch)
			delete(n.m, id)
		}
	}
}
