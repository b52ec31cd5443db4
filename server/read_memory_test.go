package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/weirhq/weir/store"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// stalledWriter is a client that takes the first limit bytes of a reply and
// then reads nothing: a Write past them blocks until release is closed, and
// then fails, as on a connection the server's write deadline cut.
type stalledWriter struct {
	h        http.Header
	n, limit int
	once     sync.Once
	blocked  chan struct{}
	release  chan struct{}
}

func newStalledWriter(limit int, release chan struct{}) *stalledWriter {
	return &stalledWriter{h: http.Header{}, limit: limit, blocked: make(chan struct{}), release: release}
}

func (w *stalledWriter) Header() http.Header { return w.h }
func (w *stalledWriter) WriteHeader(int)     {}
func (w *stalledWriter) Flush()              {}

func (w *stalledWriter) Write(p []byte) (int, error) {
	if w.n+len(p) > w.limit {
		w.once.Do(func() { close(w.blocked) })
		<-w.release
		runtime.KeepAlive(p) // as a connection's write keeps it until done
		return 0, errors.New("cut")
	}
	w.n += len(p)
	return len(p), nil
}

func liveHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// A reader whose client stops reading holds its page (256 KiB, as the
// store read it) and little else while its write blocks: no second copy of
// the page for the reply's body, the SSE event or its base64, whatever the
// size of the appends (1 MiB here, of 64 KiB chunks). An SSE reader of the
// committed view (the default of raw reads) also holds the record it read
// to learn that the page was full, which the next page begins with, and its
// write buffer. (Before: 1.2 MiB for SSE, 512 KiB for catch-up.)
func TestAStalledReaderHoldsAPage(t *testing.T) {
	s := newTestServer(t, nil)
	page := s.srv.cfg.ReadPageBytes
	chunk := strings.Repeat("x", 64<<10)
	var body []byte
	for range 16 {
		body = appendFrame(body, []byte(chunk))
	}
	for _, ct := range []string{"application/octet-stream", "text/plain", "application/json"} {
		name := strings.ReplaceAll(ct, "/", "-")
		s.do("PUT", "/v1/stream/"+name, "", "Content-Type", ct).want(t, http.StatusCreated)
		b, hdr := string(body), []string{"Content-Type", ct, "Weir-Framing", "u32be"}
		if ct == "application/json" {
			b, hdr = `["`+strings.Repeat("j", 64<<10-2)+`"`+strings.Repeat(`,"`+strings.Repeat("j", 64<<10-2)+`"`, 15)+"]", []string{"Content-Type", ct}
		}
		for range 4 {
			s.do("POST", "/v1/stream/"+name, b, hdr...).want(t, http.StatusNoContent)
		}
	}
	const readers = 4
	for _, c := range []struct {
		name, query string
		types       []string
		max         int // bytes a reader may hold
	}{
		{"catch-up", "offset=-1", []string{"application/octet-stream", "application/json"}, page + 64<<10},
		{"SSE", "offset=-1&live=sse", []string{"application/octet-stream", "text/plain", "application/json"}, page + sseBufferSize + 64<<10 + 32<<10},
		{"SSE, live view", "offset=-1&live=sse&view=live", []string{"application/octet-stream"}, page + sseBufferSize + 32<<10},
		{"long-poll", "offset=-1&live=long-poll", []string{"text/plain"}, page + 64<<10},
	} {
		for _, ct := range c.types {
			path := "/v1/stream/" + strings.ReplaceAll(ct, "/", "-") + "?" + c.query
			release := make(chan struct{})
			ctx, cancel := context.WithCancel(context.Background())
			base := liveHeap()
			var wg sync.WaitGroup
			ws := make([]*stalledWriter, readers)
			for i := range ws {
				ws[i] = newStalledWriter(64<<10, release)
				req := httptest.NewRequestWithContext(ctx, "GET", path, nil)
				wg.Go(func() { s.srv.ServeHTTP(ws[i], req) })
			}
			for _, w := range ws {
				<-w.blocked
			}
			held := (liveHeap() - base) / readers
			close(release)
			cancel()
			wg.Wait()
			t.Logf("%s %s: a stalled reader holds %d KiB (page %d KiB)", c.name, ct, held>>10, page>>10)
			if held > int64(c.max) {
				t.Errorf("%s %s: a stalled reader holds %d KiB, more than %d KiB: its page is %d KiB", c.name, ct, held>>10, c.max>>10, page>>10)
			}
		}
	}
}

// A reader of records larger than its page holds its page too, whatever
// they are: each is read and written a piece of a page at a time (in raw
// and ndjson replies, SSE events and the World's frames and chunks), never
// held whole. (Before: the record whole, and the next one read past it,
// about 11 MB a stalled reader of 4 MiB records.)
func TestAStalledReaderOfLargeRecordsHoldsAPage(t *testing.T) {
	d := newDSServer(t, nil)
	page := d.srv.cfg.ReadPageBytes
	const big = store.MaxChunkSize // 4 MiB: one record each
	value := func(i int, json bool) []byte {
		b := bytes.Repeat([]byte{byte('a' + i)}, big)
		if json {
			b[0], b[len(b)-1] = '"', '"'
		}
		return b
	}
	for _, ct := range []string{"application/octet-stream", "text/plain", "application/json"} {
		name := strings.ReplaceAll(ct, "/", "-")
		d.create(name, ct)
		for i := range 3 {
			d.call("POST", name, value(i, ct == "application/json"), "Content-Type", ct).must(t, http.StatusNoContent)
		}
	}
	run := d.newWorldRun(t)
	for i := range 3 {
		d.wwrite(run, "strm_big", "", 0, 0, string(value(i, false))).must(t, http.StatusOK)
	}
	// Whole and in order, first: each reply is the records' bytes.
	r := d.call("GET", "application-octet-stream?offset=-1", nil).must(t, http.StatusOK)
	if len(r.body) != big || r.body[0] != 'a' {
		t.Fatalf("a catch-up read of 4 MiB records: %d bytes", len(r.body))
	}
	// ndjson: a text record larger than a page is a string still, and a
	// JSON one its value.
	for _, ct := range []string{"text-plain", "application-json"} {
		r := d.call("GET", ct+"?offset=-1&format=ndjson", nil).must(t, http.StatusOK)
		var rec struct {
			Data     any    `json:"data"`
			Encoding string `json:"encoding"`
		}
		line, _, _ := bytes.Cut(r.body, []byte("\n"))
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("%s: the ndjson line of a 4 MiB record: %v", ct, err)
		}
		want := string(value(0, ct == "application-json"))
		if ct == "application-json" {
			want = want[1 : len(want)-1]
		}
		if s, ok := rec.Data.(string); !ok || s != want || rec.Encoding != "" {
			t.Fatalf("%s: the ndjson data of a 4 MiB record is not the record (encoding %q)", ct, rec.Encoding)
		}
	}
	fs, _ := d.wread("strm_big", "index=0")
	if len(fs) != 3 || len(fs[2]) != big || fs[2][0] != 'c' {
		t.Fatalf("the World read: %d chunks", len(fs))
	}
	const readers = 4
	for _, c := range []struct{ name, path string }{
		{"catch-up", "/v1/stream/application-octet-stream?offset=-1"},
		{"catch-up, JSON", "/v1/stream/application-json?offset=-1"},
		{"ndjson", "/v1/stream/text-plain?offset=-1&format=ndjson"},
		{"SSE", "/v1/stream/application-octet-stream?offset=-1&live=sse"},
		{"SSE, text", "/v1/stream/text-plain?offset=-1&live=sse&view=live"},
		{"SSE, ndjson", "/v1/stream/application-json?offset=-1&live=sse&format=ndjson"},
		{"long-poll", "/v1/stream/text-plain?offset=-1&live=long-poll"},
		{"World read", "/v1/world/streams/strm_big?index=0"},
		{"World read, committed", "/v1/world/streams/strm_big?index=1&view=committed"},
		{"World chunks", "/v1/world/streams/strm_big/chunks"},
	} {
		release := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		base := liveHeap()
		var wg sync.WaitGroup
		ws := make([]*stalledWriter, readers)
		for i := range ws {
			ws[i] = newStalledWriter(64<<10, release)
			req := httptest.NewRequestWithContext(ctx, "GET", c.path, nil)
			wg.Go(func() {
				defer func() { _ = recover() }() // a reply aborted when its writer is cut
				d.srv.ServeHTTP(ws[i], req)
			})
		}
		for _, w := range ws {
			<-w.blocked
		}
		held := (liveHeap() - base) / readers
		close(release)
		cancel()
		wg.Wait()
		most := int64(page + sseBufferSize + 128<<10)
		t.Logf("%s: a stalled reader of 4 MiB records holds %d KiB (page %d KiB)", c.name, held>>10, page>>10)
		if held > most {
			t.Errorf("%s: a stalled reader of 4 MiB records holds %d KiB, more than %d KiB: its page is %d KiB", c.name, held>>10, most>>10, page>>10)
		}
	}
}

// The JSON string of text written in pieces split anywhere is json.Marshal's
// of the text whole.
func TestJSONStringWriterSplitsAnywhere(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "é", "€", "𝄞", "<", "&", "\n", "\"", "\\", "\u2028", "\x01", " "}
	for range 500 {
		var b strings.Builder
		for range rng.IntN(60) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		text := []byte(b.String())
		var out bytes.Buffer
		j := &jsonStringWriter{w: &out}
		for rest := text; len(rest) > 0; {
			k := min(len(rest), rng.IntN(7))
			if _, err := j.Write(rest[:k]); err != nil {
				t.Fatal(err)
			}
			rest = rest[k:]
		}
		want, _ := json.Marshal(string(text))
		if got := `"` + out.String() + `"`; got != string(want) || len(j.carry) != 0 {
			t.Fatalf("%q in pieces: %s, want %s", text, got, want)
		}
	}
}
