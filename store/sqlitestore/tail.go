package sqlitestore

import (
	"sync"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// tailCache keeps the newest records of streams that live readers follow.
// Without it, a thousand readers woken by one append each run a SQLite read
// for the same record (fanout p99 ~200 ms at 1,000 readers); with it, each
// copies a slice header.
//
// Lock rules: the committer is the only writer. It updates an entry after the
// transaction that appended the records committed and before it wakes waiters
// or replies, so an entry always ends exactly at its stream's committed head
// and a read served from it is as fresh as one served by SQLite. An op that
// changed a stream without records the cache saw (delete, purge) evicts the
// stream's entry in the same place.
type tailCache struct {
	mu      sync.RWMutex
	m       map[int64]*tailEntry
	clock   uint64 // for least-recently-used eviction
	streams int    // most entries
}

// tailEntry holds records [base, next) of one stream.
type tailEntry struct {
	base, next int64
	recs       []stream.Record
	bytes      int
	closed     bool
	used       uint64
}

// Bounds of one entry: older records are trimmed and read from SQLite.
const (
	tailMaxRecords = 4096
	tailMaxBytes   = 4 << 20
)

// tailAdd is the records one op appended to a stream, copied out of the
// caller's memory.
type tailAdd struct {
	id   int64
	recs []stream.Record
}

func newTailCache(streams int) *tailCache {
	return &tailCache{m: make(map[int64]*tailEntry), streams: streams}
}

// tailArena bounds the buffers copyRecords copies data into. A page the
// cache serves shares them, and keeps each it touches alive: with arenas of
// an append's size (up to 16 MiB), a reader holding a 256 KiB page could
// hold the whole append. With these, a page holds at most an arena more at
// each end, or one larger record alone.
const tailArena = 32 << 10

// copyRecords copies recs and their data into memory the cache owns: runs
// of records share an arena of at most tailArena bytes (a larger record has
// its own), each of exactly their size.
func copyRecords(recs []stream.Record) []stream.Record {
	out := make([]stream.Record, len(recs))
	copy(out, recs)
	for i := 0; i < len(out); {
		// Records [i, j) share one arena.
		j, n := i, 0
		for j < len(out) && (j == i || n+len(out[j].Data) <= tailArena) {
			n += len(out[j].Data)
			j++
		}
		arena := make([]byte, 0, n)
		for k := i; k < j; k++ {
			if d := out[k].Data; d != nil {
				m := len(arena)
				arena = append(arena, d...)
				out[k].Data = arena[m:len(arena):len(arena)]
			}
		}
		i = j
	}
	return out
}

// has reports whether stream id has an entry.
func (t *tailCache) has(id int64) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	_, ok := t.m[id]
	return ok
}

// apply extends entries with a committed transaction's records (creating an
// entry for a followed stream) and evicts the entries of streams changed in
// other ways. Committer only.
func (t *tailCache) apply(adds []tailAdd, changed []int64, followed func(int64) bool) {
	if len(adds) == 0 && len(changed) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	got := make(map[int64]bool, len(adds))
	for _, a := range adds {
		got[a.id] = true
		e := t.m[a.id]
		if e != nil && e.next != a.recs[0].Offset {
			delete(t.m, a.id) // a gap the cache did not see: start over
			e = nil
		}
		if e == nil {
			if !followed(a.id) {
				continue
			}
			t.evictOne()
			e = &tailEntry{base: a.recs[0].Offset, next: a.recs[0].Offset}
			t.m[a.id] = e
		}
		for _, r := range a.recs {
			e.recs = append(e.recs, r)
			e.bytes += len(r.Data)
			if r.Kind == stream.KindClose {
				e.closed = true
			}
		}
		e.next = a.recs[len(a.recs)-1].Offset + 1
		t.clock++
		e.used = t.clock
		// Trim the oldest records past the bounds.
		drop := 0
		for len(e.recs)-drop > tailMaxRecords || (e.bytes > tailMaxBytes && len(e.recs)-drop > 1) {
			e.bytes -= len(e.recs[drop].Data)
			drop++
		}
		if drop > 0 {
			e.recs = append(e.recs[:0:0], e.recs[drop:]...)
			e.base += int64(drop)
		}
	}
	for _, id := range changed {
		if !got[id] {
			delete(t.m, id)
		}
	}
}

// evictOne makes room for a new entry. Lock held.
func (t *tailCache) evictOne() {
	if len(t.m) < t.streams {
		return
	}
	var oldest int64
	var used uint64 = ^uint64(0)
	for id, e := range t.m {
		if e.used < used {
			oldest, used = id, e.used
		}
	}
	delete(t.m, oldest)
}

// head returns stream id's committed head, if it has an entry.
func (t *tailCache) head(id int64) (next int64, closed, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	e := t.m[id]
	if e == nil {
		return 0, false, false
	}
	return e.next, e.closed, true
}

// read serves a read from stream id's entry if it holds the records from
// `from` on. The records share the cache's data, which is never modified.
func (t *tailCache) read(id, from int64, p *store.ReadParams) (recs []stream.Record, next int64, closed, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	e := t.m[id]
	if e == nil || from < e.base || from > e.next {
		return nil, 0, false, false
	}
	src := e.recs[from-e.base:]
	n, bytes := 0, 0
	for n < len(src) && p.Fits(n, bytes, &src[n]) {
		bytes += len(src[n].Data)
		n++
	}
	if n > 0 {
		recs = make([]stream.Record, n)
		copy(recs, src[:n])
	}
	return recs, e.next, e.closed, true
}
