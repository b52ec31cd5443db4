package server

import (
	"sync"

	"github.com/weirhq/weir/store"
)

// pathCache remembers, for the appends' hot path, the stream at a path: its
// id and content type, the only facts of a stream that never change for its
// id (ids are never reused; a stream's content type is set when it is
// created). Nothing that can change is kept: closed, expiry, TTL access,
// Stream-Seq and producers are the store's to check, on the row it locks
// for the append, in the same transaction as the write.
//
// Why a cached id is safe across processes (several servers on one
// PostgreSQL database): a path names one stream from its creation until its
// delete, so while the cached id's stream lives it is the stream at the
// path; once it is deleted (here, by another process, or by the lazy expiry
// of a read) or expired, store.Append refuses that id with store.ErrNotFound
// or store.ErrGone before it writes anything (apply.Append, step 1), and the
// handler drops the entry, looks the path up again (a stream re-created
// there has a new id) and tries once more. A refusal the handler itself
// decides from a cached fact is re-decided on a fresh lookup too, so a
// client never gets an answer that only a stale entry explains.
//
// The cache is bounded: past max entries the least recently used goes.
type pathCache struct {
	mu   sync.Mutex
	max  int
	m    map[string]*pathEntry
	root pathEntry // the LRU ring's sentinel: root.next is the most recent
}

// pathEntry is one path's stream, and its place in the LRU ring.
type pathEntry struct {
	path        string
	id          int64
	contentType string
	prev, next  *pathEntry
}

// streamRef is what an append knows of its stream: the facts fixed for the
// id, whether they came from the cache (unchecked since), and, for a fresh
// lookup, whether the stream was closed then (a closed stream's tail is
// final, so the store answers its appends whatever their content type).
type streamRef struct {
	id          int64
	contentType string
	cached      bool
	closed      bool
}

func refOf(info *store.StreamInfo) streamRef {
	return streamRef{id: info.ID, contentType: info.ContentType, closed: info.Closed}
}

// newPathCache returns a cache of at most max paths; nil (no cache) if max
// is not positive.
func newPathCache(max int) *pathCache {
	if max <= 0 {
		return nil
	}
	c := &pathCache{max: max, m: make(map[string]*pathEntry)}
	c.root.next, c.root.prev = &c.root, &c.root
	return c
}

// get returns the stream cached at path.
func (c *pathCache) get(path string) (streamRef, bool) {
	if c == nil {
		return streamRef{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[path]
	if e == nil {
		return streamRef{}, false
	}
	c.unlink(e)
	c.pushFront(e)
	return streamRef{id: e.id, contentType: e.contentType, cached: true}, true
}

// put caches info, a stream just looked up at path. A soft-deleted stream
// is not cached: its path answers 410 until its forks go, and the lookup
// says so.
func (c *pathCache) put(path string, info *store.StreamInfo) {
	if c == nil || info.Deleted {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[path]; e != nil {
		e.id, e.contentType = info.ID, info.ContentType
		c.unlink(e)
		c.pushFront(e)
		return
	}
	if len(c.m) >= c.max {
		old := c.root.prev
		c.unlink(old)
		delete(c.m, old.path)
	}
	e := &pathEntry{path: path, id: info.ID, contentType: info.ContentType}
	c.m[path] = e
	c.pushFront(e)
}

// drop forgets path's entry if it still names stream id (a concurrent
// request may have cached a newer stream there already).
func (c *pathCache) drop(path string, id int64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[path]; e != nil && e.id == id {
		c.unlink(e)
		delete(c.m, path)
	}
}

// len returns the number of paths cached.
func (c *pathCache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

func (c *pathCache) unlink(e *pathEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (c *pathCache) pushFront(e *pathEntry) {
	e.prev, e.next = &c.root, c.root.next
	c.root.next.prev = e
	c.root.next = e
}
