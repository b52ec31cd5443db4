package sqlitestore

// lru is a map bounded by count that forgets the least recently used entry.
// Only the committer goroutine touches the caches, so it has no lock.
type lru[K comparable, V any] struct {
	max  int
	m    map[K]*lruEntry[K, V]
	root lruEntry[K, V] // sentinel: root.next is the most recently used
}

type lruEntry[K comparable, V any] struct {
	key        K
	val        V
	prev, next *lruEntry[K, V]
}

func newLRU[K comparable, V any](max int) *lru[K, V] {
	c := &lru[K, V]{max: max, m: make(map[K]*lruEntry[K, V])}
	c.root.prev, c.root.next = &c.root, &c.root
	return c
}

func (c *lru[K, V]) get(k K) (V, bool) {
	e, ok := c.m[k]
	if !ok {
		var zero V
		return zero, false
	}
	c.unlink(e)
	c.pushFront(e)
	return e.val, true
}

func (c *lru[K, V]) put(k K, v V) {
	if e, ok := c.m[k]; ok {
		e.val = v
		c.unlink(e)
		c.pushFront(e)
		return
	}
	e := &lruEntry[K, V]{key: k, val: v}
	c.m[k] = e
	c.pushFront(e)
	for len(c.m) > c.max {
		c.remove(c.root.prev.key)
	}
}

func (c *lru[K, V]) remove(k K) {
	if e, ok := c.m[k]; ok {
		c.unlink(e)
		delete(c.m, k)
	}
}

func (c *lru[K, V]) unlink(e *lruEntry[K, V]) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (c *lru[K, V]) pushFront(e *lruEntry[K, V]) {
	e.prev, e.next = &c.root, c.root.next
	c.root.next.prev = e
	c.root.next = e
}
