package server

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/pgtest"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/pgstore"
	"github.com/weirhq/weir/store/sqlitestore"
)

// testClock is a server clock a test moves on: expiry without sleeping.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock { return &testClock{t: time.Now()} }

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// lookupCounter is a store that counts the path lookups (OpenStream) made
// through it.
type lookupCounter struct {
	store.Full
	n atomic.Int64
}

func (s *lookupCounter) OpenStream(ctx context.Context, p *store.OpenStreamParams) (*store.StreamInfo, error) {
	s.n.Add(1)
	return s.Full.OpenStream(ctx, p)
}

// serverPair is two servers, each with its own path cache, on one database:
// two pgstore.Full opens of one schema (as two `weir server` processes
// are), or one SQLite store (one process). The servers share a clock.
type serverPair struct {
	a, b  *dsServer
	clock *testClock
	// lookups counts A's path lookups.
	lookups *lookupCounter
}

func onEveryStorePair(t *testing.T, f func(t *testing.T, p *serverPair)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "weir.db"), &sqlitestore.Config{Synchronous: "OFF"})
		if err != nil {
			t.Fatal(err)
		}
		f(t, newServerPair(t, st, st))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		schema := pgtest.NewSchema(t)
		open := func() store.Full {
			st, err := pgstore.Open(context.Background(), pgtest.URL(), &pgstore.Config{Schema: schema, MaxConns: 4})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
		f(t, newServerPair(t, open(), open()))
	})
}

func newServerPair(t *testing.T, stA, stB store.Full) *serverPair {
	p := &serverPair{clock: newTestClock(), lookups: &lookupCounter{Full: stA}}
	set := func(s *Server) { s.now = p.clock.now }
	p.a = newDSServerWith(t, nil, p.lookups, set)
	p.b = newDSServerWith(t, nil, stB, set)
	return p
}

func (p *serverPair) read(t *testing.T, path string) string {
	t.Helper()
	ra := p.a.call("GET", path, nil).must(t, http.StatusOK).String()
	if rb := p.b.call("GET", path, nil).must(t, http.StatusOK).String(); rb != ra {
		t.Fatalf("%s reads %q through A, %q through B", path, ra, rb)
	}
	return ra
}

// cachedID returns the stream id A's cache holds for path, 0 if none.
func (p *serverPair) cachedID(path string) int64 {
	ref, _ := p.a.srv.paths.get(path)
	return ref.id
}

func text(d *dsServer, path, body string, hdr ...string) *dsReply {
	return d.call("POST", path, []byte(body), append([]string{"Content-Type", "text/plain"}, hdr...)...)
}

// TestAppendCacheHitNoLookup: once a path is cached, its appends make no
// path lookup (no OpenStream) before the store's append.
func TestAppendCacheHitNoLookup(t *testing.T) {
	onEveryStorePair(t, func(t *testing.T, p *serverPair) {
		p.a.create("s", "text/plain")
		text(p.a, "s", "0").must(t, http.StatusNoContent)
		before := p.lookups.n.Load()
		for range 20 {
			text(p.a, "s", "x").must(t, http.StatusNoContent)
		}
		if n := p.lookups.n.Load() - before; n != 0 {
			t.Fatalf("%d path lookups for 20 appends to a cached path, want 0", n)
		}
		if got := len(p.read(t, "s")); got != 21 {
			t.Fatalf("stream holds %d bytes, want 21", got)
		}
	})
}

// TestAppendCacheDeleteRecreate: a stream appended to through A, deleted
// and re-created through B; A's next append lands in the new stream, never
// the old.
func TestAppendCacheDeleteRecreate(t *testing.T) {
	onEveryStorePair(t, func(t *testing.T, p *serverPair) {
		p.b.create("s", "text/plain")
		text(p.a, "s", "old1").must(t, http.StatusNoContent)
		text(p.a, "s", "old2").must(t, http.StatusNoContent)
		oldID := p.cachedID("s")
		if oldID == 0 {
			t.Fatal("A did not cache s")
		}
		p.b.call("DELETE", "s", nil).must(t, http.StatusNoContent)
		p.b.create("s", "text/plain")
		text(p.a, "s", "new1").must(t, http.StatusNoContent)
		if got := p.read(t, "s"); got != "new1" {
			t.Fatalf("the new stream holds %q, want new1", got)
		}
		if id := p.cachedID("s"); id == oldID || id == 0 {
			t.Fatalf("A caches stream %d for s, the old one was %d", id, oldID)
		}
		// With an Idempotency-Key: the new stream has no keys.
		text(p.a, "s", "k", "Idempotency-Key", "k1").must(t, http.StatusNoContent)
		p.b.call("DELETE", "s", nil).must(t, http.StatusNoContent)
		p.b.create("s", "text/plain")
		r := text(p.a, "s", "k", "Idempotency-Key", "k1").must(t, http.StatusNoContent)
		if r.h.Get("Weir-Idempotent-Replay") != "" {
			t.Fatal("an append to the new stream was answered from the old stream's key")
		}
		if got := p.read(t, "s"); got != "k" {
			t.Fatalf("stream holds %q, want k", got)
		}

		// Deleted and not re-created: 404 through A, nothing anywhere.
		p.b.call("DELETE", "s", nil).must(t, http.StatusNoContent)
		text(p.a, "s", "lost").must(t, http.StatusNotFound)
		p.b.call("GET", "s", nil).must(t, http.StatusNotFound)
		if id := p.cachedID("s"); id != 0 {
			t.Fatalf("A still caches stream %d for a deleted path", id)
		}
	})
}

// TestAppendCacheRecreateOtherType: re-created with another content type,
// the path's appends are decided on the new stream's type, not the cached
// one.
func TestAppendCacheRecreateOtherType(t *testing.T) {
	onEveryStorePair(t, func(t *testing.T, p *serverPair) {
		p.b.create("j", "text/plain")
		text(p.a, "j", "t").must(t, http.StatusNoContent)
		p.b.call("DELETE", "j", nil).must(t, http.StatusNoContent)
		p.b.create("j", "application/json")
		p.a.call("POST", "j", []byte(`[1,2]`), "Content-Type", "application/json").must(t, http.StatusNoContent)
		text(p.a, "j", "t").must(t, http.StatusConflict).header(t, "Weir-Error", "conflict")
		if got := p.read(t, "j"); got != "[1,2]" {
			t.Fatalf("stream holds %q, want [1,2]", got)
		}
		// And back: a JSON body the cached type would split is a byte
		// append to the new byte stream.
		p.b.call("DELETE", "j", nil).must(t, http.StatusNoContent)
		p.b.create("j", "text/plain")
		text(p.a, "j", "[3]").must(t, http.StatusNoContent)
		if got := p.read(t, "j"); got != "[3]" {
			t.Fatalf("stream holds %q, want [3]", got)
		}
	})
}

// TestAppendCacheExpiry: a cached stream that expired (sliding TTL or
// Stream-Expires-At) answers 404 through A and is not written; its TTL,
// renewed by appends, is the store's, not the cache's.
func TestAppendCacheExpiry(t *testing.T) {
	onEveryStorePair(t, func(t *testing.T, p *serverPair) {
		// TTL: each append renews it (the store keeps the last access).
		p.b.create("ttl", "text/plain", "Stream-TTL", "60")
		text(p.a, "ttl", "a").must(t, http.StatusNoContent)
		p.clock.advance(50 * time.Second)
		text(p.a, "ttl", "b").must(t, http.StatusNoContent)
		p.clock.advance(50 * time.Second) // 100 s after the create, 50 after the last append
		text(p.a, "ttl", "c").must(t, http.StatusNoContent)
		p.clock.advance(61 * time.Second)
		text(p.a, "ttl", "late").must(t, http.StatusNotFound)
		p.b.call("GET", "ttl", nil).must(t, http.StatusNotFound)
		p.b.call("HEAD", "ttl", nil).must(t, http.StatusNotFound)
		// The path is free again; a new stream there is the one written.
		p.b.create("ttl", "text/plain", "Stream-TTL", "60")
		text(p.a, "ttl", "new").must(t, http.StatusNoContent)
		if got := p.read(t, "ttl"); got != "new" {
			t.Fatalf("stream holds %q, want new", got)
		}

		// Expires-At: a deadline that appends do not move.
		at := p.clock.now().Add(time.Minute).UTC().Format(time.RFC3339Nano)
		p.b.create("exp", "text/plain", "Stream-Expires-At", at)
		text(p.a, "exp", "a").must(t, http.StatusNoContent)
		p.clock.advance(2 * time.Minute)
		text(p.a, "exp", "late").must(t, http.StatusNotFound)
		p.b.call("GET", "exp", nil).must(t, http.StatusNotFound)
		// A reader's lazy expiry through B deleted nothing A must know of:
		// the same answer after B looked first.
		p.b.create("exp2", "text/plain", "Stream-Expires-At", p.clock.now().Add(time.Minute).UTC().Format(time.RFC3339Nano))
		text(p.a, "exp2", "a").must(t, http.StatusNoContent)
		p.clock.advance(2 * time.Minute)
		p.b.call("GET", "exp2", nil).must(t, http.StatusNotFound)
		text(p.a, "exp2", "late").must(t, http.StatusNotFound)
	})
}

// TestAppendCacheForks: a cached source deleted (or expired) while a fork
// references it is gone (410) through A; the fork lives on; a fork path
// deleted and re-created as a plain stream is written as the new stream.
func TestAppendCacheForks(t *testing.T) {
	onEveryStorePair(t, func(t *testing.T, p *serverPair) {
		p.b.create("src", "text/plain")
		text(p.a, "src", "a").must(t, http.StatusNoContent)
		p.b.call("PUT", "f", nil, "Stream-Forked-From", "/v1/stream/src").must(t, http.StatusCreated)
		text(p.a, "f", "b").must(t, http.StatusNoContent)
		text(p.a, "src", "c").must(t, http.StatusNoContent)
		p.b.call("DELETE", "src", nil).must(t, http.StatusNoContent) // soft: f references it
		text(p.a, "src", "x").must(t, http.StatusGone)
		text(p.a, "f", "d").must(t, http.StatusNoContent)
		if got := p.read(t, "f"); got != "abd" {
			t.Fatalf("fork holds %q, want abd", got)
		}
		// Deleting the fork releases the source: both paths are free.
		p.b.call("DELETE", "f", nil).must(t, http.StatusNoContent)
		text(p.a, "f", "x").must(t, http.StatusNotFound)
		text(p.a, "src", "x").must(t, http.StatusNotFound)
		p.b.create("f", "text/plain")
		text(p.a, "f", "n").must(t, http.StatusNoContent)
		if got := p.read(t, "f"); got != "n" {
			t.Fatalf("re-created f holds %q, want n", got)
		}

		// A source with a TTL that expires while its fork lives: 410.
		p.b.create("tsrc", "text/plain", "Stream-TTL", "60")
		text(p.a, "tsrc", "a").must(t, http.StatusNoContent)
		p.b.call("PUT", "tf", nil, "Stream-Forked-From", "/v1/stream/tsrc", "Stream-TTL", "3600").must(t, http.StatusCreated)
		p.clock.advance(2 * time.Minute)
		text(p.a, "tsrc", "late").must(t, http.StatusGone)
		text(p.a, "tf", "b").must(t, http.StatusNoContent)
		if got := p.read(t, "tf"); got != "ab" {
			t.Fatalf("fork holds %q, want ab", got)
		}
	})
}

// TestAppendCacheClosed: a stream closed through B refuses A's appends
// with the protocol's closed answer, whatever A cached; a retried close is
// still answered.
func TestAppendCacheClosed(t *testing.T) {
	onEveryStorePair(t, func(t *testing.T, p *serverPair) {
		p.b.create("c", "text/plain")
		text(p.a, "c", "a").must(t, http.StatusNoContent)
		p.b.call("POST", "c", nil, "Stream-Closed", "true").must(t, http.StatusNoContent)
		r := text(p.a, "c", "b").must(t, http.StatusConflict).header(t, "Stream-Closed", "true").header(t, "Weir-Error", "closed")
		if r.h.Get("Stream-Next-Offset") == "" {
			t.Fatal("no Stream-Next-Offset on the closed answer")
		}
		// Another content type: the closed answer too, not a type conflict
		// decided on the cache.
		p.a.call("POST", "c", []byte(`[1]`), "Content-Type", "application/json").must(t, http.StatusConflict).
			header(t, "Stream-Closed", "true").header(t, "Weir-Error", "closed")
		p.a.call("POST", "c", nil, "Stream-Closed", "true").must(t, http.StatusNoContent).header(t, "Stream-Closed", "true")
		if got := p.read(t, "c"); got != "a" {
			t.Fatalf("closed stream holds %q, want a", got)
		}
		// Closed through A, then refused through B's cache as well.
		p.b.create("c2", "text/plain")
		text(p.b, "c2", "a").must(t, http.StatusNoContent)
		text(p.a, "c2", "b", "Stream-Closed", "true").must(t, http.StatusNoContent)
		text(p.b, "c2", "c").must(t, http.StatusConflict).header(t, "Stream-Closed", "true")
	})
}

// TestPathCacheBounded: the cache keeps at most its size, drops the least
// recently used, and drop forgets only the stream it names.
func TestPathCacheBounded(t *testing.T) {
	c := newPathCache(2)
	c.put("a", &store.StreamInfo{ID: 1, ContentType: "text/plain"})
	c.put("b", &store.StreamInfo{ID: 2})
	c.get("a") // b is now the least recently used
	c.put("c", &store.StreamInfo{ID: 3})
	if _, ok := c.get("b"); ok {
		t.Fatal("b was not evicted")
	}
	if r, ok := c.get("a"); !ok || r.id != 1 || r.contentType != "text/plain" || !r.cached {
		t.Fatalf("a: %+v %v", r, ok)
	}
	if c.len() != 2 {
		t.Fatalf("len %d, want 2", c.len())
	}
	c.drop("a", 9) // another stream's: kept
	if _, ok := c.get("a"); !ok {
		t.Fatal("drop of another id dropped a")
	}
	c.drop("a", 1)
	if _, ok := c.get("a"); ok || c.len() != 1 {
		t.Fatal("a not dropped")
	}
	c.put("d", &store.StreamInfo{ID: 4, Deleted: true})
	if _, ok := c.get("d"); ok {
		t.Fatal("a soft-deleted stream was cached")
	}
	var none *pathCache = newPathCache(-1)
	none.put("a", &store.StreamInfo{ID: 1})
	if _, ok := none.get("a"); ok || none.len() != 0 {
		t.Fatal("a disabled cache cached")
	}
}
