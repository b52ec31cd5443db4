package pgstore

import "sync"

// What a reader needs of PostgreSQL, and what it can take from memory.
//
// A stream's records never change once committed, so the newest records of
// a followed stream that this process committed itself are kept in memory
// (package tail) and a woken reader copies them instead of reading them
// back. What memory cannot know alone is whether another process committed
// since: knownHeads is the newest head this process has heard of for each
// stream, from its own commits, the other processes' notifications and its
// own reads. A read is served from memory only when the cache's records end
// exactly at that head, and a Wait returns at once when the head it knows is
// past the caller's offset.
//
// So a reader is as fresh as the newest head its process has heard of. The
// server looks each stream up in PostgreSQL at the start of every request
// (raising the head it knows), so a request sees every commit acknowledged
// before it began, whichever process made it; after that, a long-poll's
// wake comes from a commit (its own process's, with the records in the
// cache) or from a notification (with the head, whose records it reads).
// An entry only ever grows; one dropped (the map full, a listener that lost
// its connection, a notification without a head) makes the next reader ask
// PostgreSQL again, which is what a missing entry means.
type knownHeads struct {
	mu sync.Mutex
	m  map[int64]head
}

// maxKnownHeads bounds the map; past it, it starts over.
const maxKnownHeads = 1 << 16

// see records that stream h.id's head is at least h (if known): heads only
// grow, so the one with the larger next offset wins. A head not known makes
// the stream's entry go.
func (k *knownHeads) see(hs ...head) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = make(map[int64]head)
	}
	for _, h := range hs {
		if !h.known {
			delete(k.m, h.id)
			continue
		}
		if old, ok := k.m[h.id]; ok && old.next >= h.next {
			continue
		}
		if len(k.m) >= maxKnownHeads {
			clear(k.m)
		}
		k.m[h.id] = h
	}
}

// get returns the newest head heard of for stream id.
func (k *knownHeads) get(id int64) (head, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	h, ok := k.m[id]
	return h, ok
}

// forgetAll drops every entry: notifications may have been lost.
func (k *knownHeads) forgetAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	clear(k.m)
}
