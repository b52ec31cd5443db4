package server

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The Durable Streams behaviours most likely to regress. The public
// conformance suite (docs/protocol.md) checks all of them against a running
// server; these keep `go test` honest without Node.

func TestDSCreateAppendRead(t *testing.T) {
	d := newDSServer(t, nil)
	r := d.create("a", "text/plain", "Stream-TTL", "3600")
	r.header(t, "Content-Type", "text/plain").header(t, "Stream-Next-Offset", formatOffset(0))
	if !strings.HasSuffix(r.h.Get("Location"), "/v1/stream/a") || r.h.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("PUT headers %v", r.h)
	}
	d.call("PUT", "a", nil, "Content-Type", "TEXT/plain", "Stream-TTL", "3600").must(t, 200)
	d.call("PUT", "a", nil, "Content-Type", "application/json", "Stream-TTL", "3600").must(t, 409)
	d.call("PUT", "a", nil, "Content-Type", "text/plain", "Stream-TTL", "7200").must(t, 409)
	d.call("PUT", "a", nil, "Content-Type", "text/plain").must(t, 409)
	var offsets []string
	for _, c := range []string{"one", "two", "three"} {
		offsets = append(offsets, d.call("POST", "a", []byte(c), "Content-Type", "text/plain").must(t, 204).h.Get("Stream-Next-Offset"))
	}
	for i := 1; i < len(offsets); i++ {
		if offsets[i] <= offsets[i-1] {
			t.Fatalf("offsets not increasing: %v", offsets)
		}
	}
	r = d.call("GET", "a", nil).must(t, 200).header(t, "Stream-Up-To-Date", "true").header(t, "Stream-Next-Offset", offsets[2])
	if r.String() != "onetwothree" || r.h.Get("ETag") == "" {
		t.Fatalf("read %q etag %q", r.body, r.h.Get("ETag"))
	}
	d.call("GET", "a", nil, "If-None-Match", r.h.Get("ETag")).must(t, 304)
	if got := d.call("GET", "a?offset="+offsets[0], nil).String(); got != "twothree" {
		t.Fatalf("from offset %q", got)
	}
	d.call("GET", "a?offset="+offsets[2], nil).must(t, 200).header(t, "Stream-Up-To-Date", "true")
	d.call("GET", "a?offset=now", nil).must(t, 200).header(t, "Stream-Next-Offset", offsets[2]).header(t, "Cache-Control", "no-store")
	h := d.call("HEAD", "a", nil).must(t, 200)
	h.header(t, "Stream-TTL", "3600").header(t, "Cache-Control", "no-store").header(t, "Stream-Next-Offset", offsets[2])
	if h.h.Get("Stream-Closed") != "" {
		t.Fatal("Stream-Closed on an open stream")
	}
	o := d.call("OPTIONS", "whatever", nil).must(t, 204)
	if !strings.Contains(o.h.Get("Access-Control-Allow-Headers"), "If-None-Match") {
		t.Fatalf("CORS %v", o.h)
	}
	d.call("DELETE", "a", nil).must(t, 204)
	d.call("GET", "a", nil).must(t, 404).header(t, "X-Content-Type-Options", "nosniff")
	d.call("PUT", "a", nil, "Content-Type", "application/json").must(t, 201).header(t, "Stream-Next-Offset", formatOffset(0))
}

func TestDSJSONMode(t *testing.T) {
	d := newDSServer(t, nil)
	d.call("PUT", "j", []byte(`[]`), "Content-Type", "application/json; charset=utf-8").must(t, 201)
	if got := d.call("GET", "j", nil).must(t, 200).String(); got != "[]" {
		t.Fatalf("empty %q", got)
	}
	d.call("POST", "j", []byte(`[]`), "Content-Type", "application/json").must(t, 400)
	d.call("POST", "j", []byte(`{ bad`), "Content-Type", "application/json").must(t, 400)
	d.call("POST", "j", []byte(`[[1,2], {"a" : 1}]`), "Content-Type", "application/json").must(t, 204)
	d.call("POST", "j", []byte(`"s"`), "Content-Type", "application/json").must(t, 204)
	if got := d.call("GET", "j", nil).String(); got != `[[1,2],{"a":1},"s"]` {
		t.Fatalf("values %q", got)
	}
	if got := d.call("GET", "j?offset=now", nil).String(); got != "[]" {
		t.Fatalf("offset=now %q", got)
	}
}

func TestDSProducerAndStreamSeq(t *testing.T) {
	d := newDSServer(t, nil)
	d.create("p", "text/plain")
	prod := func(epoch, seq, body string, hdr ...string) *dsReply {
		return d.call("POST", "p", []byte(body), append([]string{"Content-Type", "text/plain",
			"Producer-Id", "A", "Producer-Epoch", epoch, "Producer-Seq", seq}, hdr...)...)
	}
	prod("0", "0", "a").must(t, 200).header(t, "Producer-Epoch", "0").header(t, "Producer-Seq", "0")
	prod("0", "1", "b").must(t, 200)
	prod("0", "0", "a").must(t, 204).header(t, "Producer-Seq", "1")
	prod("0", "3", "x").must(t, 409).header(t, "Producer-Expected-Seq", "2").header(t, "Producer-Received-Seq", "3")
	prod("1", "0", "c").must(t, 200).header(t, "Producer-Epoch", "1")
	prod("0", "2", "z").must(t, 403).header(t, "Producer-Epoch", "1")
	prod("2", "5", "z").must(t, 400)
	if got := d.call("GET", "p", nil).String(); got != "abc" {
		t.Fatalf("data %q", got)
	}
	seq := func(s string) int {
		return d.call("POST", "p", []byte(s), "Content-Type", "text/plain", "Stream-Seq", s).status
	}
	if a, b, c, e := seq("2"), seq("10"), seq("3"), seq("3"); a != 204 || b != 409 || c != 204 || e != 409 {
		t.Fatalf("Stream-Seq statuses %d %d %d %d", a, b, c, e)
	}
}

func TestDSClose(t *testing.T) {
	d := newDSServer(t, nil)
	d.create("c", "text/plain")
	d.call("POST", "c", []byte("last"), "Content-Type", "text/plain", "Stream-Closed", "true").must(t, 204).header(t, "Stream-Closed", "true")
	closeOff := d.call("POST", "c", nil, "Stream-Closed", "true").must(t, 204).header(t, "Stream-Closed", "true").h.Get("Stream-Next-Offset")
	d.call("POST", "c", []byte("late"), "Content-Type", "text/plain").must(t, 409).
		header(t, "Stream-Closed", "true").header(t, "Stream-Next-Offset", closeOff)
	d.call("GET", "c?offset="+closeOff, nil).must(t, 200).header(t, "Stream-Closed", "true").header(t, "Stream-Up-To-Date", "true")
	start := time.Now()
	d.call("GET", "c?offset="+closeOff+"&live=long-poll", nil).must(t, 204).header(t, "Stream-Closed", "true")
	if time.Since(start) > 200*time.Millisecond {
		t.Fatal("long-poll on a closed stream waited")
	}
	// A producer's closing request, retried with other bytes: acknowledged.
	d.create("pc", "text/plain")
	hdr := []string{"Content-Type", "text/plain", "Producer-Id", "P", "Producer-Epoch", "0", "Producer-Seq", "0", "Stream-Closed", "true"}
	d.call("POST", "pc", []byte("body-A"), hdr...).must(t, 200).header(t, "Stream-Closed", "true")
	d.call("POST", "pc", []byte("body-B"), hdr...).must(t, 204).header(t, "Stream-Closed", "true").header(t, "Producer-Seq", "0")
	if got := d.call("GET", "pc", nil).String(); got != "body-A" {
		t.Fatalf("data %q", got)
	}
}

func TestDSLongPollTimesOutWithCursor(t *testing.T) {
	d := newDSServer(t, &Config{LongPollTimeout: 100 * time.Millisecond})
	d.create("l", "text/plain")
	r := d.call("GET", "l?offset=now&live=long-poll", nil).must(t, 204)
	r.header(t, "Stream-Up-To-Date", "true").header(t, "Stream-Next-Offset", formatOffset(0))
	c := r.h.Get("Stream-Cursor")
	if !regexp.MustCompile(`^\d+$`).MatchString(c) {
		t.Fatalf("cursor %q", c)
	}
	r = d.call("GET", "l?offset=now&live=long-poll&cursor="+c, nil).must(t, 204)
	if r.h.Get("Stream-Cursor") <= c && len(r.h.Get("Stream-Cursor")) <= len(c) {
		t.Fatalf("cursor %q after %q", r.h.Get("Stream-Cursor"), c)
	}
}

func TestDSSSE(t *testing.T) {
	d := newDSServer(t, nil)
	d.create("b", "application/octet-stream")
	d.call("POST", "b", []byte{0, 1, 2}, "Content-Type", "application/octet-stream").must(t, 204)
	d.call("POST", "b", []byte("\r\nevent: control\r\n"), "Content-Type", "application/octet-stream").must(t, 204)
	d.call("POST", "b", nil, "Stream-Closed", "true").must(t, 204)
	resp, err := http.Get(d.ts.URL + streamPrefix + "b?offset=-1&live=sse")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("Stream-SSE-Data-Encoding") != "base64" ||
		resp.ContentLength != -1 {
		t.Fatalf("SSE headers %v", resp.Header)
	}
	body, _ := io.ReadAll(resp.Body)
	events := regexp.MustCompile(`event: (\w+)\ndata:([^\n]*)\n\n`).FindAllStringSubmatch(string(body), -1)
	if len(events) != 2 || events[0][1] != "data" || events[1][1] != "control" {
		t.Fatalf("events %q", body)
	}
	raw, err := base64.StdEncoding.DecodeString(events[0][2])
	if err != nil || string(raw) != "\x00\x01\x02\r\nevent: control\r\n" {
		t.Fatalf("data %q %v", raw, err)
	}
	var c sseControl
	if err := json.Unmarshal([]byte(events[1][2]), &c); err != nil || !c.StreamClosed || !c.UpToDate || c.StreamCursor != "" {
		t.Fatalf("control %q", events[1][2])
	}

	// Text: lines split on CR, LF and CRLF, so nothing can forge an event.
	d.create("t", "text/plain")
	d.call("POST", "t", []byte("a\rb\nc\r\nevent: control"), "Content-Type", "text/plain").must(t, 204)
	var buf bytes.Buffer
	writeSSEEvent(&buf, "data", []byte("a\rb\nc\r\nevent: control"))
	if buf.String() != "event: data\ndata:a\ndata:b\ndata:c\ndata:event: control\n\n" {
		t.Fatalf("event %q", buf.String())
	}
}

func TestDSFork(t *testing.T) {
	d := newDSServer(t, nil)
	d.call("PUT", "src", []byte("hello"), "Content-Type", "text/plain", "Stream-TTL", "3600").must(t, 201)
	mid := d.call("POST", "src", []byte(" world"), "Content-Type", "text/plain").must(t, 204).h.Get("Stream-Next-Offset")
	fork := func(name string, hdr ...string) *dsReply {
		return d.call("PUT", name, nil, append([]string{"Stream-Forked-From", "/v1/stream/src"}, hdr...)...)
	}
	r := fork("f1").must(t, 201).header(t, "Content-Type", "text/plain").header(t, "Stream-Next-Offset", mid)
	if r.h.Get("Stream-Forked-From") != "" {
		t.Fatal("Stream-Forked-From echoed")
	}
	fork("f1").must(t, 200)
	d.call("HEAD", "f1", nil).must(t, 200).header(t, "Stream-TTL", "3600")
	fork("f2", "Stream-Fork-Offset", formatOffset(0), "Stream-Fork-Sub-Offset", "3").must(t, 201)
	fork("f2", "Stream-Fork-Offset", formatOffset(0), "Stream-Fork-Sub-Offset", "4").must(t, 409)
	d.call("POST", "f2", []byte("LO"), "Content-Type", "text/plain").must(t, 204)
	if got := d.call("GET", "f2", nil).String(); got != "helLO" {
		t.Fatalf("sub-offset fork %q", got)
	}
	fork("f3", "Stream-Fork-Offset", formatOffset(0), "Stream-Fork-Sub-Offset", "6").must(t, 400)
	fork("f3", "Stream-Fork-Offset", "9999999999999999_9999999999999999").must(t, 400)
	fork("f3", "Content-Type", "application/json").must(t, 409)
	d.call("PUT", "f3", nil, "Stream-Forked-From", "/v1/stream/nope").must(t, 404)
	// Delete the source: soft (forks live on), then gone with its last fork.
	d.call("DELETE", "src", nil).must(t, 204)
	d.call("GET", "src", nil).must(t, 410)
	d.call("PUT", "src", nil, "Content-Type", "text/plain").must(t, 409)
	fork("f4").must(t, 409)
	if got := d.call("GET", "f1", nil).String(); got != "hello world" {
		t.Fatalf("fork after source delete %q", got)
	}
	d.call("DELETE", "f1", nil).must(t, 204)
	d.call("HEAD", "src", nil).must(t, 410)
	d.call("DELETE", "f2", nil).must(t, 204)
	d.call("HEAD", "src", nil).must(t, 404)
}

func TestDSExpiry(t *testing.T) {
	d := newDSServer(t, nil)
	d.create("zero", "text/plain", "Stream-TTL", "0")
	d.call("GET", "zero", nil).must(t, 404)
	d.call("PUT", "zero", nil, "Content-Type", "application/json").must(t, 201)
	past := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	d.create("past", "text/plain", "Stream-Expires-At", past)
	d.call("POST", "past", []byte("x"), "Content-Type", "text/plain").must(t, 404)
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	d.create("future", "text/plain", "Stream-Expires-At", at.Format("2006-01-02T15:04:05.000-07:00"))
	d.call("HEAD", "future", nil).must(t, 200).header(t, "Stream-Expires-At", at.Format(time.RFC3339Nano))
	d.call("PUT", "future", nil, "Content-Type", "text/plain", "Stream-Expires-At", at.Format(time.RFC3339Nano)).must(t, 200)
}

func TestDSBadInput(t *testing.T) {
	d := newDSServer(t, &Config{MaxBodyBytes: 1024})
	d.create("s", "text/plain")
	d.create("j", "application/json")
	type hdrs = []string
	ct := "text/plain"
	for _, c := range []struct {
		method, path string
		body         string
		hdr          hdrs
		status       int
	}{
		{"PUT", "n", "", hdrs{"Stream-TTL", "60", "Stream-Expires-At", "2030-01-01T00:00:00Z"}, 400},
		{"PUT", "n", "", hdrs{"Stream-TTL", "00060"}, 400},
		{"PUT", "n", "", hdrs{"Stream-TTL", "1e3"}, 400},
		{"PUT", "n", "", hdrs{"Stream-TTL", "99999999999999999999"}, 400},
		{"PUT", "n", "", hdrs{"Stream-TTL", "60", "Stream-TTL", "60"}, 400},
		{"PUT", "n", "", hdrs{"Stream-Expires-At", "tomorrow"}, 400},
		{"PUT", "n", "", hdrs{"Stream-Forked-From", "/v1/stream/s", "Stream-Fork-Offset", "1"}, 400},
		{"PUT", "n", "", hdrs{"Stream-Fork-Sub-Offset", "0"}, 400},
		{"PUT", "n", "", hdrs{"Stream-Forked-From", "/v1/stream/s", "Stream-Fork-Sub-Offset", "05"}, 400},
		{"PUT", "n", "", hdrs{"Stream-Fork-Offset", formatOffset(0)}, 400},
		{"PUT", "n", "", hdrs{"Stream-Forked-From", "/v1/stream/../x"}, 400},
		{"PUT", "n", strings.Repeat("x", 1025), hdrs{"Content-Type", ct}, 413},
		{"PUT", "jn", "{", hdrs{"Content-Type", "application/json"}, 400},
		{"POST", "s", "", hdrs{"Content-Type", ct}, 400},
		{"POST", "s", "x", nil, 400},
		{"POST", "s", "x", hdrs{"Content-Type", "application/json"}, 409},
		{"POST", "s", strings.Repeat("x", 1025), hdrs{"Content-Type", ct}, 413},
		{"POST", "s", "x", hdrs{"Content-Type", ct, "Producer-Id", "p"}, 400},
		{"POST", "s", "x", hdrs{"Content-Type", ct, "Producer-Id", "", "Producer-Epoch", "0", "Producer-Seq", "0"}, 400},
		{"POST", "s", "x", hdrs{"Content-Type", ct, "Producer-Id", "p", "Producer-Epoch", "1e3", "Producer-Seq", "0"}, 400},
		{"POST", "s", "x", hdrs{"Content-Type", ct, "Producer-Id", "p", "Producer-Epoch", "0", "Producer-Seq", "-1"}, 400},
		{"POST", "s", "x", hdrs{"Content-Type", ct, "Producer-Id", "p", "Producer-Epoch", "0", "Producer-Seq", "9007199254740992"}, 400},
		{"POST", "s", "x", hdrs{"Content-Type", ct, "Producer-Id", "p", "Producer-Epoch", "0", "Producer-Seq", "0", "Producer-Seq", "1"}, 400},
		{"POST", "s", "x", hdrs{"Content-Type", ct, "Weir-Writer", "w"}, 400},
		{"POST", "s", "x", hdrs{"Content-Type", ct, "Weir-Seq", "0"}, 400},
		{"POST", "s", "x", hdrs{"Content-Type", ct, "Weir-Writer", "w", "Weir-Seq", "zero"}, 400},
		{"POST", "s", "x", hdrs{"Content-Type", ct, "Weir-Writer", "w", "Weir-Seq", "0", "Weir-Attempt", "-1"}, 400},
		{"POST", "s", "x", hdrs{"Content-Type", ct, "Weir-Writer", "w", "Weir-Seq", "0", "Producer-Id", "p", "Producer-Epoch", "0", "Producer-Seq", "0"}, 400},
		{"POST", "s", "x", hdrs{"Content-Type", ct, "Weir-Writer", "w", "Weir-Seq", "0", "Weir-Framing", "u16le"}, 400},
		{"POST", "s", "\x00\x00\x00\x05abc", hdrs{"Content-Type", ct, "Weir-Writer", "w", "Weir-Seq", "0", "Weir-Framing", "u32be"}, 400},
		{"POST", "s", "\x00\x00\x00\x00", hdrs{"Content-Type", ct, "Weir-Writer", "w", "Weir-Seq", "0", "Weir-Framing", "u32be"}, 400},
		{"POST", "s", "x", hdrs{"Weir-Writer", "w", "Weir-Attempt", "1", "Weir-Commit", "true"}, 400},
		{"POST", "s", "", hdrs{"Weir-Writer", "w", "Weir-Commit", "true"}, 400},
		{"POST", "s", "", hdrs{"Weir-Writer", "w", "Weir-Attempt", "1", "Weir-Commit", "yes"}, 400},
		{"POST", "s", "", hdrs{"Weir-Writer", "w", "Weir-Attempt", "1", "Weir-Commit", "true", "Weir-Abort", "true"}, 400},
		{"POST", "s", "x", hdrs{"Content-Type", ct, "Stream-Seq", strings.Repeat("9", 1025)}, 400},
		{"POST", "s", "x", hdrs{"Content-Type", ct, "Idempotency-Key", strings.Repeat("k", 1025)}, 400},
		{"POST", "nope", "x", hdrs{"Content-Type", ct}, 404},
		{"POST", "j", "[" + strings.Repeat("1,", 10) + "1]", hdrs{"Content-Type", "application/json"}, 204},
		{"GET", "s?offset=abc", "", nil, 400},
		{"GET", "s?offset=0%201", "", nil, 400},
		{"GET", "s?offset=0,1", "", nil, 400},
		{"GET", "s?offset=", "", nil, 400},
		{"GET", "s?offset=-1&offset=now", "", nil, 400},
		{"GET", "s?offset=" + formatOffset(99), "", nil, 400},
		{"GET", "s?offset=0000000000000001_0000000000000000", "", nil, 400},
		{"GET", "s?offset=%zz", "", nil, 400},
		{"GET", "s?live=long-poll", "", nil, 400},
		{"GET", "s?offset=-1&live=forever", "", nil, 400},
		{"GET", "s?view=both", "", nil, 400},
		{"GET", "s?format=xml", "", nil, 400},
		{"GET", "s?offset=-1&foo=bar", "", nil, 200},
		{"GET", "s/../s", "", nil, 400},
		{"GET", "a//b", "", nil, 400},
		{"GET", "", "", nil, 404},
		{"PATCH", "s", "", nil, 405},
	} {
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		r := d.call(c.method, c.path, body, c.hdr...)
		if r.status != c.status {
			t.Errorf("%s %s %v: status %d, want %d (%q)", c.method, c.path, c.hdr, r.status, c.status, r.body)
			continue
		}
		if c.status >= 400 {
			r.must(t, c.status)
			if r.h.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("%s %s: no nosniff on an error", c.method, c.path)
			}
		}
	}
	// Nothing above changed the streams.
	if got := d.call("GET", "s", nil).String(); got != "" {
		t.Fatalf("s = %q", got)
	}
	d.call("GET", "n", nil).must(t, 404)
}

// A client that stalls mid-body holds no lock: other writers go on.
func TestDSStalledBodyHoldsNothing(t *testing.T) {
	d := newDSServer(t, nil)
	d.create("s", "text/plain")
	conn, err := net.Dial("tcp", d.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	reading := make(chan struct{}, 1)
	testHookReadingBody = func() {
		select {
		case reading <- struct{}{}:
		default:
		}
	}
	t.Cleanup(func() { testHookReadingBody = nil })
	fmt.Fprintf(conn, "POST /v1/stream/s HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\nonly ten b")
	select {
	case <-reading: // the stalled request's handler is in its body
	case <-time.After(10 * time.Second):
		t.Fatal("the stalled request never reached its handler")
	}
	testHookReadingBody = nil
	// Each append would hang here (and fail at its client's timeout) if it
	// waited on the stalled request.
	for range 5 {
		d.call("POST", "s", []byte("x"), "Content-Type", "text/plain").must(t, 204)
	}
	conn.Close()
	if got := d.call("GET", "s", nil).String(); got != "xxxxx" {
		t.Fatalf("data %q", got)
	}
}

// An SSE client that never reads is cut after the write timeout: its
// handler does not live on.
func TestDSSSEClientThatNeverReads(t *testing.T) {
	old := streamWriteTimeout
	streamWriteTimeout = 200 * time.Millisecond
	t.Cleanup(func() { streamWriteTimeout = old })
	d := newDSServer(t, nil)
	d.create("big", "application/octet-stream")
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	for range 6 {
		d.call("POST", "big", chunk, "Content-Type", "application/octet-stream").must(t, 204)
	}
	conn, err := net.Dial("tcp", d.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	fmt.Fprintf(conn, "GET /v1/stream/big?offset=-1&live=sse HTTP/1.1\r\nHost: x\r\n\r\n")
	// Read the status line only, then never again.
	if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("status line %q %v", line, err)
	}
	eventually(t, "the end of the SSE handler of a client that never reads", func() bool {
		return d.srv.metrics.gauge(readerSSE).Load() == 0
	})
}

// Drain ends live reads at once: a long-poll answers 204 (the client polls
// again elsewhere), an SSE response ends.
func TestDSDrainEndsLiveReads(t *testing.T) {
	d := newDSServer(t, &Config{LongPollTimeout: time.Minute})
	d.create("s", "text/plain")
	done := make(chan *dsReply, 1)
	go func() { done <- d.call("GET", "s?offset=now&live=long-poll", nil) }()
	sse := make(chan error, 1)
	go func() {
		resp, err := http.Get(d.ts.URL + streamPrefix + "s?offset=now&live=sse")
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		sse <- err
	}()
	eventually(t, "a long-poll and an SSE reader waiting", func() bool {
		return d.srv.metrics.gauge(readerLongPoll).Load() == 1 && d.srv.metrics.gauge(readerSSE).Load() == 1
	})
	d.srv.Drain()
	select {
	case r := <-done:
		r.must(t, 204).header(t, "Stream-Next-Offset", formatOffset(0))
	case <-time.After(5 * time.Second):
		t.Fatal("a long-poll outlived Drain")
	}
	select {
	case err := <-sse:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an SSE read outlived Drain")
	}
}
