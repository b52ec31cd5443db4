package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/queue"
	"github.com/weirhq/weir/store/internal/tail"
	"github.com/weirhq/weir/stream"
)

// An op is one write operation waiting for the committer (in the store's
// queue). run executes inside the group transaction; it must write every
// change it makes to the caches to SQL before it returns, so that a later
// op of the same transaction that misses the cache reloads the same state.
type op struct {
	run func(tx *wtx) error
	err error
}

// write queues fn for the committer and waits for its transaction to
// commit, as package queue's contract says: an error always means nothing
// was written.
func (s *Store) write(ctx context.Context, fn func(tx *wtx) error) error {
	it := &queue.Item[*op]{Op: &op{run: fn}}
	if err := s.ops.Submit(ctx, it); err != nil {
		return err
	}
	return it.Op.err
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
	batch   []*queue.Item[*op]
	dirty   []cacheKey // cache entries handed to the ops of this transaction
	notify  []int64    // streams that got records in this transaction
	runs    []string   // runs whose watchers wake after it
	begins  []int64    // streams created while readers wait
	watched []*store.StreamInfo
	tails   []tail.Add // their records, for the tail cache
	// keysSaved counts idempotency keys saved, to purge expired ones now
	// and then.
	keysSaved int
	// stmts are the World's statements (world.go), prepared on first use.
	stmts map[string]*sql.Stmt
	// dataRead counts the bytes of runs' data and events' payloads the
	// writer read (wtx.scanRun, wtx.events): a write that refuses or
	// finds reads none (red team, round nineteen), and a test holds it.
	dataRead atomic.Int64
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
	one := func(*op) int { return 1 }
	for {
		var ok bool
		if c.batch, ok = c.s.ops.Next(c.batch, c.s.cfg.MaxBatch, one, c.s.cfg.MaxBatch); !ok {
			return
		}
		ops := make([]*op, len(c.batch))
		for i, it := range c.batch {
			ops[i] = it.Op
		}
		c.commit(ops)
		for _, it := range c.batch {
			it.Done()
		}
		clear(c.batch)
	}
}

// commit runs ops in one transaction and sets each op's outcome.
func (c *committer) commit(ops []*op) {
	c.dirty, c.notify, c.tails, c.runs, c.begins = c.dirty[:0], c.notify[:0], c.tails[:0], c.runs[:0], c.begins[:0]
	c.watched = c.watched[:0]
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
		c.runs = append(c.runs, c.tx.runs...)
		c.begins = append(c.begins, c.tx.begins...)
		c.watched = append(c.watched, c.tx.watched...)
		ok++
	}
	if ok == 0 {
		if _, err := c.w.rollback.ExecContext(ctx); err != nil {
			c.abandon(ops, fmt.Errorf("rollback: %w", translate(err)))
		}
		return
	}
	if _, err := c.w.commit.ExecContext(ctx); err != nil {
		c.abandon(ops, fmt.Errorf("commit: %w", translate(err)))
		return
	}
	c.s.counts.commits.Add(1)
	c.s.counts.ops.Add(int64(ok))
	// The tail cache first: a woken reader or a replied writer reads it.
	for _, id := range c.begins {
		c.s.tail.Begin(id, 0)
	}
	for _, si := range c.watched {
		c.s.created.Put(si)
	}
	c.s.tail.Apply(c.tails, c.notify, c.s.notify.Has)
	clear(c.tails)
	c.s.notify.WakeEach(c.notify, func(int) struct{} { return struct{}{} })
	for _, r := range c.runs {
		c.s.runs.Wake(store.RunKey(r), struct{}{})
	}
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
}

func (c *committer) fail(ops []*op, err error) {
	for _, o := range ops {
		o.err = err
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
