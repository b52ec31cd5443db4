package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/delivery"
	"github.com/weirhq/weir/internal/pgtest"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/pgstore"
	"github.com/weirhq/weir/store/sqlitestore"
	"github.com/weirhq/weir/stream"
	"github.com/weirhq/weir/world"
)

// Hardening, round two (issue 21): each case of the issue, as found from
// outside, with the bound it now holds.

// tinyValues is a JSON array of n zeros: [0,0,…].
func tinyValues(n int) []byte {
	b := make([]byte, 0, 2*n+1)
	b = append(b, '[')
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '0')
	}
	return append(b, ']')
}

// A JSON body is counted before it is split: a 16 MiB [0,0,…] (8 million
// values, 10,000 allowed) is refused having allocated next to nothing,
// where splitting it first allocated a slice header a value (the server
// grew 650-900 MB a request).
func TestAJSONBodyIsCountedBeforeItIsSplit(t *testing.T) {
	body := tinyValues(8 << 20)
	var err error
	n := allocated(func() { _, err = bodyChunks("application/json", &writeHeaders{}, body) })
	if !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("8M values: %v, want ErrTooLarge", err)
	}
	if n > 64<<10 {
		t.Errorf("refusing 8M values allocated %d KiB, want < 64 KiB", n>>10)
	}
	// At the limit, exactly the values are allocated: the slice once.
	body = tinyValues(store.MaxAppendChunks)
	var vals [][]byte
	n = allocated(func() { vals, err = bodyChunks("application/json", &writeHeaders{}, body) })
	if err != nil || len(vals) != store.MaxAppendChunks || cap(vals) != len(vals) {
		t.Fatalf("%d values: %d (cap %d), %v", store.MaxAppendChunks, len(vals), cap(vals), err)
	}
	if most := int64(store.MaxAppendChunks*24 + 16<<10); n > most {
		t.Errorf("splitting %d values allocated %d bytes, want at most %d", store.MaxAppendChunks, n, most)
	}

	s := newTestServer(t, nil)
	s.do("PUT", "/v1/stream/j", "", "Content-Type", "application/json").want(t, http.StatusCreated)
	big := string(tinyValues(store.MaxAppendChunks + 1))
	r := s.do("POST", "/v1/stream/j", big, "Content-Type", "application/json").want(t, http.StatusRequestEntityTooLarge)
	if !bytes.Contains([]byte(r.body), []byte("the limit is 10000")) {
		t.Errorf("reply %q does not say the limit", r.body)
	}
	s.do("PUT", "/v1/stream/k", big, "Content-Type", "application/json").want(t, http.StatusRequestEntityTooLarge)
	// Nothing was stored: the stream is empty, and k was not created.
	if r := s.do("GET", "/v1/stream/j?offset=-1", "").want(t, http.StatusOK); r.body != "[]" {
		t.Errorf("the stream holds %q after the refusals", r.body)
	}
	s.do("HEAD", "/v1/stream/k", "").want(t, http.StatusNotFound)
}

// The upload budget is charged when a handler reads a body, after the
// token was checked: requests that send no body hold none of it, whatever
// they declare, and a GET or HEAD with a body is refused. (Before, sixteen
// token-less GET …?live=sse declaring 16 MiB each made every authorized
// write answer 503 for a minute; and a reader whose body was never read
// could not be seen to hang up.)
func TestRequestsThatSendNoBodyHoldNoBudget(t *testing.T) {
	const token = "a-token-of-16-bytes-or-more"
	s := newTestServer(t, &Config{Token: token, MaxUploadBytes: 2 << 20, LongPollTimeout: 5 * time.Second})
	auth := "Bearer " + token
	s.do("PUT", "/v1/stream/b", "", "Content-Type", "application/octet-stream", "Authorization", auth).want(t, http.StatusCreated)
	// Readers need no token here; each declares 1 MiB and sends nothing.
	for _, m := range []string{"GET", "GET", "HEAD", "GET"} {
		conn := dialRaw(t, s, m+" /v1/stream/b?offset=-1&live=sse HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n")
		if status, took := readStatus(t, conn, 5*time.Second); status != http.StatusBadRequest || took > 2*time.Second {
			t.Fatalf("a %s with a body: %d after %v", m, status, took)
		}
	}
	// Writers without the token, the same: refused at once.
	for range 4 {
		conn := dialRaw(t, s, "POST /v1/stream/b HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: 1048576\r\n\r\n")
		if status, took := readStatus(t, conn, 5*time.Second); status != http.StatusUnauthorized || took > 2*time.Second {
			t.Fatalf("a token-less write: %d after %v", status, took)
		}
	}
	if n := s.srv.uploads.inUse(); n != 0 {
		t.Fatalf("%d bytes of the budget held by requests that sent nothing", n)
	}
	s.do("POST", "/v1/stream/b", strings.Repeat("x", 1<<20), "Content-Type", "application/octet-stream", "Authorization", auth).
		want(t, http.StatusNoContent)
}

// trickle sends body to conn n bytes every interval until it is all sent or
// stop is closed.
func trickle(conn net.Conn, body []byte, n int, interval time.Duration, stop <-chan struct{}) {
	tk := time.NewTicker(interval)
	defer tk.Stop()
	for len(body) > 0 {
		select {
		case <-stop:
			return
		case <-tk.C:
		}
		k := min(n, len(body))
		if _, err := conn.Write(body[:k]); err != nil {
			return
		}
		body = body[k:]
	}
}

// An upload still coming at the end of its grace gives back the budget it
// has not filled: a slow client holds what it sent, not what it announced,
// and the others' writes go on. (Before, uploads trickled at 2 KiB/s, above
// the minimum rate, held what they announced for as long as they trickled.)
func TestASlowUploadHoldsWhatItSent(t *testing.T) {
	old := bodyIdleTimeout
	bodyIdleTimeout = 300 * time.Millisecond
	t.Cleanup(func() { bodyIdleTimeout = old })
	s := newTestServer(t, &Config{MaxUploadBytes: 1 << 20, MinUploadRate: 100})
	s.do("PUT", "/v1/stream/u", "", "Content-Type", "application/octet-stream").want(t, http.StatusCreated)
	const size = 800 << 10
	conn := dialRaw(t, s, fmt.Sprintf("POST /v1/stream/u HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", size))
	stop := make(chan struct{})
	defer close(stop)
	go trickle(conn, bytes.Repeat([]byte("t"), size), 64, 20*time.Millisecond, stop) // 3.2 KiB/s
	eventually(t, "the trickled upload to be charged", func() bool { return s.srv.uploads.inUse() >= size })
	// Meanwhile another 800 KiB does not fit: refused at once, unread.
	c2 := dialRaw(t, s, fmt.Sprintf("POST /v1/stream/u HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", size))
	if status, took := readStatus(t, c2, 5*time.Second); status != http.StatusServiceUnavailable || took > 2*time.Second {
		t.Fatalf("an upload past the budget: %d after %v", status, took)
	}
	eventually(t, "the slow upload to give back what it did not send", func() bool { return s.srv.uploads.inUse() < 64<<10 })
	s.do("POST", "/v1/stream/u", strings.Repeat("x", size), "Content-Type", "application/octet-stream").want(t, http.StatusNoContent)
}

// A body that is still coming at the end of its grace, and then comes
// whole, is stored as it was sent.
func TestASlowBodyIsStoredWhole(t *testing.T) {
	old := bodyIdleTimeout
	bodyIdleTimeout = 200 * time.Millisecond
	t.Cleanup(func() { bodyIdleTimeout = old })
	s := newTestServer(t, &Config{MinUploadRate: 100})
	s.do("PUT", "/v1/stream/w", "", "Content-Type", "application/octet-stream").want(t, http.StatusCreated)
	body := make([]byte, 60<<10)
	for i := range body {
		body[i] = byte(i * 7)
	}
	conn := dialRaw(t, s, fmt.Sprintf("POST /v1/stream/w HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", len(body)))
	if _, err := conn.Write(body[:10<<10]); err != nil {
		t.Fatal(err)
	}
	trickle(conn, body[10<<10:], 1<<10, 10*time.Millisecond, nil) // 500 ms more: past the grace
	if status, _ := readStatus(t, conn, 5*time.Second); status != http.StatusNoContent {
		t.Fatalf("the slow body: %d", status)
	}
	if r := s.do("GET", "/v1/stream/w?offset=-1", "").want(t, http.StatusOK); r.body != string(body) {
		t.Fatalf("stored %d bytes, not the %d sent", len(r.body), len(body))
	}
	if n := s.srv.uploads.inUse(); n != 0 {
		t.Fatalf("%d bytes of the budget still held", n)
	}
}

// Committed readers hold about a page of the data of records that wait for
// their writers, whatever those wrote: a reader that read past a writer
// still open keeps their places, not their data, and reads them again once
// they commit. (Before, a writer that appended 64 MiB under an open attempt
// and never committed cost each plain reader of the stream 90 MB; a
// long-poll or SSE reader waiting for the commit held it all along.)
func TestCommittedReadersHoldAPageOfOthersUncommittedData(t *testing.T) {
	const (
		readers = 4
		total   = 8 << 20 // under the open attempt
		chunk   = 64 << 10
	)
	onEachStoreInTurn(t, &Config{LongPollTimeout: 30 * time.Second}, func(t *testing.T, d *dsServer) {
		page := d.srv.cfg.ReadPageBytes
		d.create("s", "text/plain")
		run := d.newWorldRun(t)
		d.ev(run, world.StepCreated, "step_a", map[string]any{"stepName": "a"}).must(t, http.StatusOK)
		d.ev(run, world.StepStarted, "step_a", nil).must(t, http.StatusOK)
		data := func(i int) string { return strings.Repeat(string(rune('a'+i%26)), chunk) }
		// A first chunk committed at once, then the open writer's 8 MiB
		// with another's committed chunk between.
		d.call("POST", "s", []byte("first"), "Content-Type", "text/plain").must(t, http.StatusNoContent)
		d.wcall("POST", "runs/"+run+"/streams/strm_c", appendFrame(nil, []byte("first")),
			"Content-Type", "application/octet-stream", "Weir-Framing", "u32be").must(t, http.StatusOK)
		for i, seq := 0, int64(0); i < total/chunk; i += 16 {
			var frames []string
			for k := range 16 {
				frames = append(frames, data(i+k))
			}
			d.weirAppendT(t, "s", "w", 1, seq, frames...)
			d.wwrite(run, "strm_c", "step_a", 1, seq, frames...).must(t, http.StatusOK)
			seq += 16
			if i == 0 {
				d.call("POST", "s", []byte("between"), "Content-Type", "text/plain").must(t, http.StatusNoContent)
			}
		}
		// Warm the store's connections first, as many as the readers and
		// the plain reads below use at once: what a pool connection keeps
		// (its statement cache, pgx's buffer of the last large row it
		// read) is the pool's, bounded by its size, not a reader's.
		var warm sync.WaitGroup
		for range readers + 1 {
			warm.Go(func() {
				d.call("GET", "s?offset=-1", nil)
				d.wread("strm_c", "view=committed")
			})
		}
		warm.Wait()
		before := liveHeap()
		var wg sync.WaitGroup
		got := make([]string, readers)
		for i := range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Long-poll from offset 0: "first" at once; then from
				// there, waiting behind the open writer until it commits.
				r := d.call("GET", "s?offset="+formatOffset(0)+"&live=long-poll", nil)
				if r.status != http.StatusOK {
					t.Errorf("first long-poll: %d %q", r.status, r.body)
					return
				}
				got[i] = r.String()
				next := r.h.Get("Stream-Next-Offset")
				r = d.call("GET", "s?offset="+next+"&live=long-poll", nil)
				if r.status != http.StatusOK {
					t.Errorf("second long-poll: %d", r.status)
					return
				}
				if len(r.body) > page+chunk {
					t.Errorf("a page of %d bytes, the page is %d", len(r.body), page)
				}
				got[i] += r.String()
			}()
		}
		eventually(t, "the readers waiting behind the open writer", func() bool {
			return d.srv.metrics.gauge(readerLongPoll).Load() == readers
		})
		// Plain committed reads of the World stream, meanwhile: empty but
		// for "first", each holding a page at most while it reads.
		for range 4 {
			if fs, _ := d.wread("strm_c", "view=committed"); len(fs) != 1 {
				t.Fatalf("the World's committed view: %d chunks before the commit", len(fs))
			}
		}
		held := liveHeap() - before
		t.Logf("%d readers waiting behind %d MiB uncommitted: %d KiB held, %d KiB a reader", readers, total>>20, held>>10, held/readers>>10)
		if most := int64(readers * (page + 256<<10)); held > most {
			t.Errorf("%d readers behind an open writer hold %d KiB, want at most %d KiB", readers, held>>10, most>>10)
		}
		d.finish("s", "w", 1, "Weir-Commit").must(t, http.StatusNoContent)
		wg.Wait()
		// Once committed, the view is all of it, in order, page by page.
		var want strings.Builder
		want.WriteString("first")
		for i := range total / chunk {
			want.WriteString(data(i))
			if i == 15 {
				want.WriteString("between")
			}
		}
		for i := range readers {
			if !strings.HasPrefix(want.String(), got[i]) || len(got[i]) < len("first")+chunk {
				t.Fatalf("reader %d got %d bytes, not the view's first %d", i, len(got[i]), len(got[i]))
			}
		}
		if r := d.call("GET", "s?offset=-1", nil).must(t, http.StatusOK); r.String() != want.String()[:len(r.body)] || len(r.body) == 0 {
			t.Fatalf("a catch-up read after the commit: %d bytes", len(r.body))
		}
		var all strings.Builder
		for next := "-1"; ; {
			r := d.call("GET", "s?offset="+next, nil).must(t, http.StatusOK)
			all.Write(r.body)
			next = r.h.Get("Stream-Next-Offset")
			if r.h.Get("Stream-Up-To-Date") == "true" {
				break
			}
		}
		if all.String() != want.String() {
			t.Fatalf("the committed view read page by page: %d bytes, want %d", all.Len(), want.Len())
		}
		d.ev(run, world.StepCompleted, "step_a", map[string]any{"result": 1}).must(t, http.StatusOK)
		if fs, _ := d.wread("strm_c", "view=committed"); len(fs) != 1+total/chunk {
			t.Fatalf("the World's committed view after the step: %d chunks", len(fs))
		}
	})
}

func (d *dsServer) weirAppendT(t *testing.T, path, writer string, attempt, seq int64, chunks ...string) {
	t.Helper()
	if _, r := d.weirAppend(path, writer, attempt, seq, chunks...); r.status != http.StatusOK {
		t.Fatalf("append: %d %q", r.status, r.body)
	}
}

// onEachStoreInTurn is onEveryStoreWith one store after the other: for
// tests that measure the heap.
func onEachStoreInTurn(t *testing.T, cfg *Config, f func(t *testing.T, d *dsServer)) {
	t.Run("sqlite", func(t *testing.T) {
		st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "weir.db"), &sqlitestore.Config{Synchronous: "OFF"})
		if err != nil {
			t.Fatal(err)
		}
		f(t, newDSServerOn(t, cfg, st))
	})
	t.Run("postgres", func(t *testing.T) {
		st, err := pgstore.Open(context.Background(), pgtest.URL(), &pgstore.Config{Schema: pgtest.NewSchema(t), MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		f(t, newDSServerOn(t, cfg, st))
	})
}

// readCounter counts a store's Read calls.
type readCounter struct {
	store.Full
	reads atomic.Int64
}

func (c *readCounter) Read(ctx context.Context, p *store.ReadParams) (*store.ReadResult, error) {
	c.reads.Add(1)
	return c.Full.Read(ctx, p)
}

// A World read from a chunk index walks from the nearest mark at or
// before it (chunkMarks: one every markEvery chunks a walk passed), not
// from the stream's start: after one count of a 20,000-chunk stream, a
// read of its last chunks, by index or from the tail, reads a few pages of
// the store. (Red-team round eight: with one mark at the tail, every read
// below it walked the whole stream; a million-chunk stream cost 1.6 s on
// SQLite and 6.4 s on PostgreSQL a read.)
func TestWorldSeeksFromTheNearestMark(t *testing.T) {
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "weir.db"), &sqlitestore.Config{Synchronous: "OFF"})
	if err != nil {
		t.Fatal(err)
	}
	rc := &readCounter{Full: st}
	d := newDSServerOn(t, nil, rc)
	run := d.newWorldRun(t)
	const n = 20_000
	for i := 0; i < n; i += 1000 {
		var cs []string
		for k := range 1000 {
			cs = append(cs, strconv.Itoa(i+k))
		}
		d.wwrite(run, "strm_s", "", 0, 0, cs...).must(t, http.StatusOK)
	}
	for _, view := range []string{"live", "committed"} {
		info := decode[map[string]any](t, d.wcall("GET", "streams/strm_s/info?view="+view, nil).must(t, http.StatusOK))
		if info["tailIndex"] != float64(n-1) {
			t.Fatalf("%s: info %v", view, info)
		}
		// What reading the whole stream costs: its pages.
		before := rc.reads.Load()
		if fs, _ := d.wread("strm_s", "view="+view+"&index=0"); len(fs) != n {
			t.Fatalf("%s: %d chunks from index 0", view, len(fs))
		}
		whole := rc.reads.Load() - before
		for _, c := range []struct {
			index string
			first int
		}{{"19990", 19990}, {"-10", 19990}, {"16500", 16500}, {"8200", 8200}} {
			before := rc.reads.Load()
			fs, _ := d.wread("strm_s", "view="+view+"&index="+c.index)
			if len(fs) != n-c.first || fs[0] != strconv.Itoa(c.first) {
				t.Fatalf("%s: from index %s: %d chunks, %q first", view, c.index, len(fs), fs[:min(len(fs), 1)])
			}
			// Its share of the whole stream's pages, and at most
			// markEvery chunks walked to reach it (seeks read pages of
			// up to 1,000 chunks).
			want := whole*int64(n-c.first)/n + markEvery/1000 + 3
			if reads := rc.reads.Load() - before; reads > want {
				t.Errorf("%s: a read from index %s read the store %d times, want at most %d (the whole stream: %d)", view, c.index, reads, want, whole)
			}
		}
	}
}

// The World's getStreamInfo and getStreamChunks are stream reads like the
// others: they take a slot of MaxReaders (503 beyond it), a page of chunks
// holds about a page of data, and a count goes on from where the last one
// of the view ended instead of walking the whole view each time. (Before,
// /info and /chunks ignored --max-readers, and each /info walked the view.)
func TestWorldInfoAndChunksAreReads(t *testing.T) {
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "weir.db"), &sqlitestore.Config{Synchronous: "OFF"})
	if err != nil {
		t.Fatal(err)
	}
	rc := &readCounter{Full: st}
	d := newDSServerOn(t, &Config{MaxReaders: 1, SSEMaxDuration: 30 * time.Second}, rc)
	run := d.newWorldRun(t)
	const n = 3000
	for i := 0; i < n; i += 500 {
		var cs []string
		for k := range 500 {
			cs = append(cs, strconv.Itoa(i+k))
		}
		d.wwrite(run, "strm_i", "", 0, 0, cs...).must(t, http.StatusOK)
	}
	tail := n - 1
	for _, view := range []string{"live", "committed"} {
		info := decode[map[string]any](t, d.wcall("GET", "streams/strm_i/info?view="+view, nil).must(t, http.StatusOK))
		if info["tailIndex"] != float64(tail) {
			t.Fatalf("%s: info %v", view, info)
		}
		before := rc.reads.Load()
		d.wwrite(run, "strm_i", "", 0, 0, "one more").must(t, http.StatusOK)
		tail++
		info = decode[map[string]any](t, d.wcall("GET", "streams/strm_i/info?view="+view, nil).must(t, http.StatusOK))
		if info["tailIndex"] != float64(tail) {
			t.Fatalf("%s: info %v after one more", view, info)
		}
		if reads := rc.reads.Load() - before; reads > 2 {
			t.Errorf("%s: a second getStreamInfo read the store %d times, want at most 2 (from the last count on)", view, reads)
		}
		if fs, _ := d.wread("strm_i", "view="+view+"&index=-2"); len(fs) != 2 || fs[1] != "one more" {
			t.Fatalf("%s: the last two chunks: %q", view, fs)
		}
	}
	// A page of chunks holds about a page of data.
	big := strings.Repeat("b", 100<<10)
	d.wwrite(run, "strm_b", "", 0, 0, big, big, big, big, big).must(t, http.StatusOK)
	page := decode[struct {
		Data    []json.RawMessage `json:"data"`
		HasMore bool              `json:"hasMore"`
	}](t, d.wcall("GET", "streams/strm_b/chunks?limit=1000", nil).must(t, http.StatusOK))
	if most := d.srv.cfg.ReadPageBytes/(100<<10) + 1; len(page.Data) > most || !page.HasMore {
		t.Fatalf("a page of %d chunks of 100 KiB (has more: %v), want at most %d", len(page.Data), page.HasMore, most)
	}
	// One reader holds the only slot: the others are told to come back.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", d.ts.URL+"/v1/world/streams/strm_i?index=-1&follow=true", nil)
	resp, err := d.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	for _, path := range []string{"streams/strm_i/info", "streams/strm_i/chunks", "streams/strm_i"} {
		d.wcall("GET", path, nil).must(t, http.StatusServiceUnavailable).header(t, "Retry-After", "1")
	}
}

// weir delivers World messages only to targets signed with the World
// secret, or to origins its operator allows: a holder of the token alone
// cannot make it POST anywhere. Queue names and message ids that no HTTP
// client can send as a header are refused, not stored to fail every
// delivery. (Before, any target URL was taken, and GET /v1/world/queue
// listed the connection errors: a port scanner.)
func TestWorldTargetsAreSignedOrAllowed(t *testing.T) {
	enqueue := func(target, sig string) string {
		b, _ := json.Marshal(map[string]any{"queueName": "__wkf_step_s", "payload": map[string]any{}, "target": target, "targetSignature": sig})
		return string(b)
	}
	onEveryStoreWith(t, &Config{WorldDelivery: true, WorldSecret: testWorldSecret, WorldTargets: []string{"http://allowed.internal:8080"}},
		func(t *testing.T, d *dsServer) {
			for _, c := range []struct {
				body   string
				status int
				code   string
			}{
				{enqueue("http://127.0.0.1:6379", ""), http.StatusForbidden, "forbidden"},
				{enqueue("http://169.254.169.254", "v1=00"), http.StatusForbidden, "forbidden"},
				{enqueue("http://127.0.0.1:3000", delivery.SignTarget(testWorldSecret, "http://127.0.0.1:3001")), http.StatusForbidden, "forbidden"},
				{enqueue("http://127.0.0.1:3000", delivery.SignTarget([]byte("another-secret-entirely"), "http://127.0.0.1:3000")), http.StatusForbidden, "forbidden"},
				{`{"queueName":"__wkf_step_s\r\nX-Evil: 1","payload":{},"target":"http://allowed.internal:8080"}`, http.StatusBadRequest, "invalid"},
				{`{"queueName":"__wkf_step_s","payload":{},"target":"http://allowed.internal:8080","messageId":"msg_\u0000\n"}`, http.StatusBadRequest, "invalid_name"},
				{enqueue("http://127.0.0.1:3000", delivery.SignTarget(testWorldSecret, "http://127.0.0.1:3000")), http.StatusOK, ""},
				{enqueue("http://allowed.internal:8080/app", ""), http.StatusOK, ""},
				{enqueue("HTTP://Allowed.Internal:8080", ""), http.StatusOK, ""},
			} {
				r := d.wcall("POST", "queue", []byte(c.body)).must(t, c.status)
				if c.code != "" {
					r.header(t, "Weir-Error", c.code)
				}
			}
			ms := decode[struct {
				Messages []messageJSON `json:"messages"`
			}](t, d.wcall("GET", "queue?state=pending", nil).must(t, http.StatusOK))
			if len(ms.Messages) != 3 {
				t.Fatalf("%d messages queued, want the 3 allowed", len(ms.Messages))
			}
		})
	// Without a secret, only the operator's origins.
	d := newDSServer(t, &Config{WorldDelivery: true, WorldTargets: []string{"*"}})
	d.wcall("POST", "queue", []byte(enqueue("http://anywhere.example", ""))).must(t, http.StatusOK)
	d = newDSServer(t, &Config{WorldDelivery: true})
	d.wcall("POST", "queue", []byte(enqueue("http://127.0.0.1:3000", "v1=x"))).must(t, http.StatusForbidden)
}

// worldLookups counts a store's lookups of World streams by name.
type worldLookups struct {
	store.Full
	n atomic.Int64
}

func (c *worldLookups) WorldStream(ctx context.Context, name string) (*store.StreamInfo, error) {
	c.n.Add(1)
	return c.Full.WorldStream(ctx, name)
}

// A follower of a World stream not written yet looks for it less and less
// often (50 ms, then twice as long each time, up to a second), and is woken
// when this server opens a World stream for a write: it gets the first
// chunk of a stream written later. (Red-team round eight: 64 followers of a
// name never written looked it up 640 times a second for a minute.)
func TestWorldFollowerOfAStreamNotWrittenYet(t *testing.T) {
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "weir.db"), &sqlitestore.Config{Synchronous: "OFF"})
	if err != nil {
		t.Fatal(err)
	}
	wl := &worldLookups{Full: st}
	d := newDSServerOn(t, &Config{SSEMaxDuration: 30 * time.Second}, wl)
	run := d.newWorldRun(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan []string, 1)
	t0 := time.Now()
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", d.ts.URL+"/v1/world/streams/strm_later?follow=true", nil)
		resp, err := d.ts.Client().Do(req)
		if err != nil {
			got <- nil
			return
		}
		defer resp.Body.Close()
		var b [4 + 5]byte
		if _, err := io.ReadFull(resp.Body, b[:]); err != nil {
			got <- nil
			return
		}
		got <- []string{string(b[4:])}
	}()
	eventually(t, "the follower's fifth look", func() bool { return wl.n.Load() >= 5 })
	// Four waits of 50, 100, 200 and 400 ms at the least.
	if took := time.Since(t0); took < 700*time.Millisecond {
		t.Fatalf("5 looks for a stream not written yet in %v: no backing off", took)
	}
	d.wwrite(run, "strm_later", "", 0, 0, "first").must(t, http.StatusOK)
	select {
	case fs := <-got:
		if len(fs) != 1 || fs[0] != "first" {
			t.Fatalf("the follower read %q", fs)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the follower did not get the first chunk of the stream written after it began, within 20s")
	}
}

// A World follower that hangs up while it waits is the client's doing: it
// is counted 499, not 500, and logs nothing. (Before: a 500 and an ERROR
// line for each, unthrottled.)
func TestAWorldFollowerThatHangsUpIsNotAnError(t *testing.T) {
	var logs lockedBuffer
	d := newDSServer(t, &Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), SSEMaxDuration: 30 * time.Second})
	run := d.newWorldRun(t)
	d.wwrite(run, "strm_w", "", 0, 0, "one").must(t, http.StatusOK)
	for _, path := range []string{"streams/strm_never?follow=true", "streams/strm_w?index=1&follow=true"} {
		for range 5 {
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "GET", d.ts.URL+"/v1/world/"+path, nil)
			done := make(chan struct{})
			go func() {
				defer close(done)
				if resp, err := d.ts.Client().Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
			eventually(t, "the follower waiting", func() bool { return len(d.srv.readers) == 1 })
			cancel()
			<-done
			eventually(t, "the follower's end", func() bool { return len(d.srv.readers) == 0 })
		}
	}
	r := d.runsCall("GET", "/metrics")
	if strings.Contains(r.String(), `code="500"`) || !strings.Contains(r.String(), `code="499"`) {
		t.Errorf("metrics after 10 followers hung up:\n%s", grepLines(r.String(), "weir_http_requests_total"))
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("followers that hung up logged errors:\n%s", logs.String())
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A path with a dot segment is refused (400), not redirected to its clean
// form, which names another resource.
func TestADotSegmentNamesNothing(t *testing.T) {
	d := newDSServer(t, &Config{WorldDelivery: true, WorldSecret: testWorldSecret})
	run := d.newWorldRun(t)
	for _, p := range []string{"runs/" + run + "/streams/..", "runs/" + run + "/streams/.", "runs/../runs", "runs/" + run + "/./events"} {
		r := d.wcall("POST", p, appendFrame(nil, []byte("x")), "Content-Type", "application/octet-stream", "Weir-Framing", "u32be")
		r.must(t, http.StatusBadRequest)
	}
	if names := decode[map[string][]string](t, d.wcall("GET", "runs/"+run+"/streams", nil).must(t, http.StatusOK)); len(names["streams"]) != 0 {
		t.Fatalf("streams %v", names)
	}
}

// A World run cannot be created under a Go run's id: 409, where it was an
// internal error (the runs row was taken).
func TestAWorldRunCannotTakeAGoRunsID(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		if _, _, err := d.srv.store.CreateRun(context.Background(), &store.CreateRunParams{ID: "go-run-1", Workflow: "w"}); err != nil {
			t.Fatal(err)
		}
		data := map[string]any{"deploymentId": "d", "workflowName": "w", "input": []any{}}
		for _, typ := range []world.EventType{world.RunStarted, world.RunCreated} {
			d.ev("go-run-1", typ, "", data).must(t, http.StatusConflict).header(t, "Weir-Error", "world_conflict")
		}
		if r, err := d.srv.store.GetRun(context.Background(), "go-run-1"); err != nil || r.Workflow != "w" {
			t.Fatalf("the Go run after: %+v %v", r, err)
		}
	})
}

// A getStreamChunks cursor no stream reaches is forged: 400, not an index
// wrapped around (red team, round eight: i = 2^63-1 came back as -2^63).
func TestWorldChunksCursorBounded(t *testing.T) {
	d := newDSServer(t, nil)
	run := d.newWorldRun(t)
	d.wwrite(run, "strm_c", "", 0, 0, "a", "b").must(t, http.StatusOK)
	for _, c := range []string{`{"i":9223372036854775807,"o":0}`, `{"i":0,"o":9223372036854775807}`} {
		cur := base64.RawURLEncoding.EncodeToString([]byte(c))
		d.wcall("GET", "streams/strm_c/chunks?cursor="+cur, nil).must(t, http.StatusBadRequest)
	}
}

// readCounting counts a store's reads (of records and of writers'
// statuses), and unwraps to it for its other capabilities.
type readCounting struct {
	store.Full
	reads atomic.Int64
}

func (c *readCounting) Read(ctx context.Context, p *store.ReadParams) (*store.ReadResult, error) {
	c.reads.Add(1)
	return c.Full.Read(ctx, p)
}

func (c *readCounting) Unwrap() store.Store { return c.Full }

func (c *readCounting) WriterStatus(ctx context.Context, id int64, writer string) (stream.Status, int64, bool, bool, error) {
	c.reads.Add(1)
	ws, _ := store.WriterStatusesOf(c.Full)
	return ws.WriterStatus(ctx, id, writer)
}

// A committed read held at a writer still open reads no further: the
// writer's finish is what it waits for, and the store says the writer is
// open. One writer's 30,000 records never committed, or 3,000 writers'
// one each, cost a committed read a page, not a walk of the stream (red
// team, round eight: a million such records cost every read 0.8 s on
// SQLite, 9.3 s on PostgreSQL, and 31-86 MiB a stalled reader). Once the
// writers commit, the view is all of it.
func TestCommittedReadsStopAtAnOpenWriter(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "weir.db"), &sqlitestore.Config{Synchronous: "OFF"})
		if err != nil {
			t.Fatal(err)
		}
		committedReadsStopAtAnOpenWriter(t, st)
	})
	t.Run("postgres", func(t *testing.T) {
		st, err := pgstore.Open(context.Background(), pgtest.URL(), &pgstore.Config{Schema: pgtest.NewSchema(t), MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		committedReadsStopAtAnOpenWriter(t, st)
	})
}

func committedReadsStopAtAnOpenWriter(t *testing.T, st store.Full) {
	rc := &readCounting{Full: st}
	d := newDSServerOn(t, &Config{LongPollTimeout: 500 * time.Millisecond}, rc)
	for _, p := range []string{"one", "many", "adopted"} {
		d.create(p, "text/plain")
		d.call("POST", p, []byte("first"), "Content-Type", "text/plain").must(t, http.StatusNoContent)
	}
	const n = 30_000
	for seq := int64(0); seq < n; seq += 1000 {
		d.weirAppendT(t, "one", "w", 1, seq, slices.Repeat([]string{"x"}, 1000)...)
	}
	const writers = 3000
	for i := range writers {
		d.weirAppendT(t, "many", fmt.Sprint("w", i), 1, 0, "y")
	}
	// A retry that adopted its first attempt's chunk, then wrote on: the
	// record that holds the view is attempt 1's (red team, round nine).
	d.weirAppendT(t, "adopted", "w", 1, 0, "a")
	d.weirAppendT(t, "adopted", "w", 2, 0, "a")
	for seq := int64(1); seq < n; seq += 1000 {
		d.weirAppendT(t, "adopted", "w", 2, seq, slices.Repeat([]string{"x"}, 1000)...)
	}
	// A long-poll held there waits for the stream to grow, not spinning
	// on the records it chose not to read (round nine: a core spun until
	// the timeout, and on PostgreSQL the long-poll never answered).
	for _, path := range []string{"one", "adopted"} {
		before := rc.reads.Load()
		r := d.call("GET", path+"?offset="+formatOffset(1)+"&live=long-poll", nil)
		if r.status != http.StatusNoContent {
			t.Fatalf("%s: a long-poll held at an open writer: %d %q", path, r.status, r.body)
		}
		if reads := rc.reads.Load() - before; reads > 12 {
			t.Errorf("%s: a 500 ms long-poll held at an open writer read the store %d times, want at most 12", path, reads)
		}
	}
	for _, path := range []string{"one", "many", "adopted"} {
		for range 3 {
			before := rc.reads.Load()
			r := d.call("GET", path+"?offset=-1", nil).must(t, http.StatusOK)
			if string(r.body) != "first" {
				t.Fatalf("%s: the committed view before any commit: %q", path, r.body)
			}
			if reads := rc.reads.Load() - before; reads > 5 {
				t.Errorf("%s: a committed read held at an open writer read the store %d times, want at most 5", path, reads)
			}
		}
	}
	d.finish("one", "w", 1, "Weir-Commit").must(t, http.StatusNoContent)
	var all strings.Builder
	for off := formatOffset(0); ; {
		r := d.call("GET", "one?offset="+off, nil).must(t, http.StatusOK)
		all.Write(r.body)
		if r.h.Get("Stream-Up-To-Date") == "true" {
			break
		}
		off = r.h.Get("Stream-Next-Offset")
	}
	if want := "first" + strings.Repeat("x", n); all.String() != want {
		t.Fatalf("after the commit: %d bytes, want %d", all.Len(), len(want))
	}
}

// A World read from an index past the stream's end gets the chunks from
// that index as they come, not the ones written meanwhile before it (red
// team, round nine: a follower from 150 of a 100-chunk stream got chunks
// 100 to 299, labelled from 150). Both views.
func TestWorldReadFromPastTheEnd(t *testing.T) {
	d := newDSServer(t, &Config{SSEMaxDuration: 30 * time.Second})
	run := d.newWorldRun(t)
	chunks := func(from, to int) []string {
		var cs []string
		for i := from; i < to; i++ {
			cs = append(cs, strconv.Itoa(i))
		}
		return cs
	}
	d.wwrite(run, "strm_p", "", 0, 0, chunks(0, 100)...).must(t, http.StatusOK)
	for _, view := range []string{"live", "committed"} {
		if fs, eof := d.wread("strm_p", "view="+view+"&index=150"); len(fs) != 0 || eof {
			t.Fatalf("%s: from past the end of an open stream: %q (eof %v)", view, fs, eof)
		}
	}
	type got struct {
		view string
		fs   []string
		eof  bool
	}
	out := make(chan got, 2)
	for _, view := range []string{"live", "committed"} {
		go func() {
			resp, err := d.ts.Client().Get(d.ts.URL + "/v1/world/streams/strm_p?view=" + view + "&index=150&follow=true")
			if err != nil {
				out <- got{view: view}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			fs, eof := frames(t, b)
			out <- got{view, fs, eof}
		}()
	}
	eventually(t, "both followers waiting", func() bool { return len(d.srv.readers) == 2 })
	d.wwrite(run, "strm_p", "", 0, 0, chunks(100, 300)...).must(t, http.StatusOK)
	d.wcall("POST", "runs/"+run+"/streams/strm_p/close", nil).must(t, http.StatusOK)
	for range 2 {
		select {
		case g := <-out:
			if !g.eof || len(g.fs) != 150 || g.fs[0] != "150" || g.fs[149] != "299" {
				t.Errorf("%s: a follower from 150: %d chunks (eof %v), first %q", g.view, len(g.fs), g.eof, g.fs[:min(1, len(g.fs))])
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a follower did not end within 30s of the close")
		}
	}
}
