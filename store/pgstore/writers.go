package pgstore

import (
	"sync"

	"github.com/weirhq/weir/stream"
)

// writerKey names one writer on one stream.
type writerKey struct {
	stream int64
	writer string
}

// writerCache keeps writers' dedupe states, each with the version of the
// writers row it matches. An operation takes an entry out while it uses it
// (take) and puts it back, with the row's new version, only after its commit
// (put): so no two operations share a Writer, an operation that fails leaves
// nothing half-changed behind, and another process's change, which bumps the
// row's version, is never mistaken for this one's state.
type writerCache struct {
	mu  sync.Mutex
	max int
	m   map[writerKey]*cachedWriter
	// An intrusive LRU list; root.next is the most recently used.
	root cachedWriter
}

type cachedWriter struct {
	key        writerKey
	w          stream.Writer
	version    int64
	prev, next *cachedWriter
}

func newWriterCache(max int) *writerCache {
	c := &writerCache{max: max, m: make(map[writerKey]*cachedWriter)}
	c.root.prev, c.root.next = &c.root, &c.root
	return c
}

// take removes and returns k's entry if it is at version.
func (c *writerCache) take(k writerKey, version int64) (*stream.Writer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return nil, false
	}
	c.unlink(e)
	delete(c.m, k)
	if e.version != version {
		return nil, false
	}
	return &e.w, true
}

// has reports whether k has an entry: its row exists (writers rows go
// only with their streams).
func (c *writerCache) has(k writerKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.m[k]
	return ok
}

// put stores w as k's state at version.
func (c *writerCache) put(k writerKey, w *stream.Writer, version int64) {
	if c.max == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		c.unlink(e)
		delete(c.m, k)
	}
	e := &cachedWriter{key: k, w: *w, version: version}
	c.m[k] = e
	e.prev, e.next = &c.root, c.root.next
	c.root.next.prev = e
	c.root.next = e
	for len(c.m) > c.max {
		old := c.root.prev
		c.unlink(old)
		delete(c.m, old.key)
	}
}

// forget drops every entry of the given streams.
func (c *writerCache) forget(streams map[int64]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		if streams[k.stream] {
			c.unlink(e)
			delete(c.m, k)
		}
	}
}

func (c *writerCache) unlink(e *cachedWriter) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

// writerRow is the persisted part of a writer, as a group reads it.
type writerRow struct {
	attempt, next int64
	diverged      bool
	status        int16
	version       int64
	token         int64
}
