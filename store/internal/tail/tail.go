// Package tail keeps the newest records of the streams that live readers
// follow, so that the readers a commit wakes copy a slice instead of each
// running a read of the database: both backends fill it after their
// commits and serve reads from it where it holds them.
package tail

import (
	"bytes"
	"cmp"
	"fmt"
	"sync"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// Cache keeps the newest records of streams that live readers follow.
// Without it, a thousand readers woken by one append each run a read for
// the same record (fanout p99 ~200 ms at 1,000 readers on SQLite); with it,
// each copies a slice header.
//
// An entry is a contiguous run of committed records: a backend applies a
// transaction's records after the commit and before it wakes waiters or
// replies, and an op that changed a stream without records the cache saw
// (delete, purge) evicts the stream's entry in the same place. Records
// applied out of order (two transactions' replies overtaking each other)
// leave a gap, which drops the entry. Whether an entry reaches its stream's
// committed head is the backend's to know: SQLite's one committer sees every
// commit; on PostgreSQL other processes commit too (pgstore compares the
// entry's end with the newest head it has heard of).
type Cache struct {
	mu      sync.RWMutex
	m       map[int64]*entry
	clock   uint64 // for least-recently-used eviction
	streams int    // most entries
}

// entry holds records [base, next) of one stream.
type entry struct {
	base, next int64
	recs       []stream.Record
	bytes      int
	closed     bool
	used       uint64
}

// Bounds of one entry: older records are trimmed and read from SQLite.
const (
	maxRecords = 4096
	maxBytes   = 4 << 20
)

// Add is the records one op appended to a stream, copied out of the
// caller's memory (CopyRecords).
type Add struct {
	ID   int64
	Recs []stream.Record
}

// New returns a cache of at most streams entries.
func New(streams int) *Cache {
	return &Cache{m: make(map[int64]*entry), streams: streams}
}

// arena bounds the buffers CopyRecords copies data into. A page the
// cache serves shares them, and keeps each it touches alive: with arenas of
// an append's size (up to 16 MiB), a reader holding a 256 KiB page could
// hold the whole append. With these, a page holds at most an arena more at
// each end, or one larger record alone.
const arena = 32 << 10

// CopyRecords copies recs and their data into memory the cache owns: runs
// of records share an arena of at most 32 KiB (a larger record has its
// own), each of exactly their size.
func CopyRecords(recs []stream.Record) []stream.Record {
	out := make([]stream.Record, len(recs))
	copy(out, recs)
	for i := 0; i < len(out); {
		// Records [i, j) share one arena.
		j, n := i, 0
		for j < len(out) && (j == i || n+len(out[j].Data) <= arena) {
			n += len(out[j].Data)
			j++
		}
		buf := make([]byte, 0, n)
		for k := i; k < j; k++ {
			if d := out[k].Data; d != nil {
				m := len(buf)
				buf = append(buf, d...)
				out[k].Data = buf[m:len(buf):len(buf)]
			}
		}
		i = j
	}
	return out
}

// Has reports whether stream id has an entry.
func (t *Cache) Has(id int64) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	_, ok := t.m[id]
	return ok
}

// Apply extends entries with a committed transaction's records (creating an
// entry for a followed stream) and evicts the entries of streams changed in
// other ways.
func (t *Cache) Apply(adds []Add, changed []int64, followed func(int64) bool) {
	if len(adds) == 0 && len(changed) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	got := make(map[int64]bool, len(adds))
	for _, a := range adds {
		got[a.ID] = true
		e := t.m[a.ID]
		if e != nil && e.next != a.Recs[0].Offset {
			delete(t.m, a.ID) // a gap the cache did not see: start over
			e = nil
		}
		if e == nil {
			if !followed(a.ID) {
				continue
			}
			t.evictOne()
			e = &entry{base: a.Recs[0].Offset, next: a.Recs[0].Offset}
			t.m[a.ID] = e
		}
		for _, r := range a.Recs {
			e.recs = append(e.recs, r)
			e.bytes += len(r.Data)
			switch r.Kind {
			case stream.KindClose:
				e.closed = true
			case stream.KindReopen:
				e.closed = false // a resumed run's stream goes on
			}
		}
		e.next = a.Recs[len(a.Recs)-1].Offset + 1
		t.clock++
		e.used = t.clock
		// Trim the oldest records past the bounds.
		drop := 0
		for len(e.recs)-drop > maxRecords || (e.bytes > maxBytes && len(e.recs)-drop > 1) {
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

// Begin gives stream id an empty entry at offset next, unless it has one:
// a stream just created for readers already waiting (for a run's stream to
// appear) keeps its first records in memory, as a followed stream does.
func (t *Cache) Begin(id, next int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.m[id]; ok {
		return
	}
	t.evictOne()
	t.clock++
	t.m[id] = &entry{base: next, next: next, used: t.clock}
}

// evictOne makes room for a new entry: the least recently used of a few
// entries taken at random (map iteration starts anywhere), as Redis
// approximates LRU; scanning every entry made each new followed stream cost
// a pass over the cache. Lock held.
func (t *Cache) evictOne() {
	if len(t.m) < t.streams {
		return
	}
	var oldest int64
	var used uint64 = ^uint64(0)
	n := 0
	for id, e := range t.m {
		if e.used < used {
			oldest, used = id, e.used
		}
		if n++; n == 8 {
			break
		}
	}
	delete(t.m, oldest)
}

// Head returns where stream id's entry ends, if it has one.
func (t *Cache) Head(id int64) (next int64, closed, ok bool) {
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
func (t *Cache) read(id, from int64, p *store.ReadParams, at int64) (recs []stream.Record, next int64, closed, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	e := t.m[id]
	if e == nil || from < e.base || from > e.next || at >= 0 && e.next != at {
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

// Read serves p from stream p.StreamID's entry if it holds the records from
// p.From on and, unless at is negative, ends at offset at (the stream's
// committed head as the caller knows it); ok is false otherwise. A record
// the page takes a piece of is copied, so that the reader keeps no more of
// the cache than the piece.
func (t *Cache) Read(p *store.ReadParams, at int64) (res *store.ReadResult, ok bool, err error) {
	recs, next, closed, ok := t.read(p.StreamID, p.From, p, at)
	if !ok {
		return nil, false, nil
	}
	res = &store.ReadResult{Records: recs, NextOffset: next, Closed: closed}
	if len(recs) > 0 && p.Piece(recs[0].Offset, len(recs[0].Data)) {
		piece, n, err := p.PieceOf(len(recs[0].Data))
		if err != nil || recs[0].Kind != stream.KindData {
			return nil, true, fmt.Errorf("read: %w", cmp.Or(err, store.ErrInvalid))
		}
		recs[0].Data = bytes.Clone(recs[0].Data[piece.From : piece.From+int64(n)])
		res.Records, res.Piece = recs[:1], piece
	}
	return res, true, nil
}

// Created remembers the run streams this process created while readers
// waited for them to appear (store.RunWatcher.CreatedStream): a woken
// reader takes the stream from here instead of looking it up again. A
// stream's id, path, run and content type never change; its head is the
// caller's to refresh.
type Created struct {
	mu sync.Mutex
	m  map[string]store.StreamInfo
}

// maxCreated bounds Created; past it, it starts over (a miss costs a
// lookup).
const maxCreated = 4096

// Put remembers si.
func (c *Created) Put(si *store.StreamInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCreated {
		c.m = make(map[string]store.StreamInfo)
	}
	c.m[si.Path] = *si
}

// Get returns a copy of the stream created at path, if remembered.
func (c *Created) Get(path string) (*store.StreamInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	si, ok := c.m[path]
	if !ok {
		return nil, false
	}
	return &si, true
}
