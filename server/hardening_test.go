package server

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
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

// waitFor polls cond until it holds, failing the test after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(time.Millisecond)
	}
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
	waitFor(t, 5*time.Second, "the trickled upload to be charged", func() bool { return s.srv.uploads.inUse() >= size })
	// Meanwhile another 800 KiB does not fit: refused at once, unread.
	c2 := dialRaw(t, s, fmt.Sprintf("POST /v1/stream/u HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", size))
	if status, took := readStatus(t, c2, 5*time.Second); status != http.StatusServiceUnavailable || took > 2*time.Second {
		t.Fatalf("an upload past the budget: %d after %v", status, took)
	}
	waitFor(t, 5*time.Second, "the slow upload to give back what it did not send", func() bool { return s.srv.uploads.inUse() < 64<<10 })
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
