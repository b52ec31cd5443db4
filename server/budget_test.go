package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Resource budgets: what a client that never reads, or sends a byte at a
// time, can hold.

// dialRaw opens a TCP connection to s and sends head; the caller goes on.
func dialRaw(t *testing.T, s *testServer, head string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	return conn
}

func readStatus(t *testing.T, conn net.Conn, within time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(within))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer within %v: %v", within, err)
	}
	resp.Body.Close()
	return resp.StatusCode, time.Since(start)
}

func TestReadersAreCapped(t *testing.T) {
	s := newTestServer(t, &Config{MaxReaders: 2, LongPollTimeout: 5 * time.Second})
	s.do("PUT", "/v1/stream/s", "", "Content-Type", "text/plain").want(t, http.StatusCreated)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{}, 2)
	for range 2 {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", s.ts.URL+"/v1/stream/s?offset=now&live=long-poll", nil)
			started <- struct{}{}
			if resp, err := s.ts.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	<-started
	<-started
	// Both long-polls hold a slot: the next read is told to come back. (A
	// read sent before both hold theirs could take the second slot and
	// leave a long-poll refused: wait for the slots, not with reads.)
	deadline := time.Now().Add(10 * time.Second)
	for len(s.srv.readers) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for the long-polls to hold the reader slots (%d held)", len(s.srv.readers))
		}
		time.Sleep(time.Millisecond)
	}
	r := s.do("GET", "/v1/stream/s?offset=-1", "")
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || r.header.Get("Weir-Error") != "busy" {
		t.Fatalf("a read past the cap: %d %v, want 503 with Retry-After and code busy", r.status, r.header)
	}
	cancel()
	deadline = time.Now().Add(10 * time.Second)
	for s.do("GET", "/v1/stream/s?offset=-1", "").status != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("the slots were not freed within 10s of the readers leaving")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAReadHoldsOnePageAtMost(t *testing.T) {
	s := newTestServer(t, &Config{ReadPageBytes: 64 << 10})
	s.do("PUT", "/v1/stream/big", "", "Content-Type", "application/octet-stream").want(t, http.StatusCreated)
	chunk := strings.Repeat("x", 16<<10)
	for range 40 {
		s.do("POST", "/v1/stream/big", chunk, "Content-Type", "application/octet-stream").want(t, http.StatusNoContent)
	}
	r := s.do("GET", "/v1/stream/big?offset=-1", "").want(t, http.StatusOK)
	if len(r.body) > 64<<10 {
		t.Fatalf("one read page holds %d bytes, the page is 64 KiB", len(r.body))
	}
	if r.header.Get("Stream-Up-To-Date") == "true" {
		t.Fatal("a 640 KiB stream in one page")
	}
	// One larger chunk is served whole, alone.
	s.do("POST", "/v1/stream/big", strings.Repeat("y", 100<<10), "Content-Type", "application/octet-stream").want(t, http.StatusNoContent)
	r = s.do("GET", "/v1/stream/big?offset="+fmt.Sprintf("%016d_%016d", 0, 40), "")
	if r.status != http.StatusOK || len(r.body) != 100<<10 {
		t.Fatalf("the large chunk: %d, %d bytes", r.status, len(r.body))
	}
}

func TestATrickledBodyIsCut(t *testing.T) {
	old := bodyIdleTimeout
	bodyIdleTimeout = 300 * time.Millisecond
	t.Cleanup(func() { bodyIdleTimeout = old })
	s := newTestServer(t, &Config{MinUploadRate: 1000})
	s.do("PUT", "/v1/stream/t", "", "Content-Type", "text/plain").want(t, http.StatusCreated)
	conn := dialRaw(t, s, "POST /v1/stream/t HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\n")
	// A byte every 100 ms: never idle for the guard's 300 ms, but 10 B/s.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if _, err := conn.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	}()
	status, took := readStatus(t, conn, 5*time.Second)
	if status != http.StatusBadRequest {
		t.Fatalf("status %d", status)
	}
	if took < 250*time.Millisecond || took > 3*time.Second {
		t.Fatalf("a 10 B/s body was held %v", took)
	}
}

func TestUploadBytesInFlightAreCapped(t *testing.T) {
	s := newTestServer(t, &Config{MaxUploadBytes: 1 << 20})
	s.do("PUT", "/v1/stream/u", "", "Content-Type", "text/plain").want(t, http.StatusCreated)
	// One upload of 800 KiB holds its bytes while it trickles in...
	dialRaw(t, s, "POST /v1/stream/u HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 819200\r\n\r\nabc")
	deadline := time.Now().Add(10 * time.Second)
	for s.srv.uploads.inUse() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("waited 10s for the first upload to begin")
		}
		time.Sleep(time.Millisecond)
	}
	// ...so a second one of 800 KiB is told to come back, at once.
	conn := dialRaw(t, s, "POST /v1/stream/u HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 819200\r\n\r\n")
	status, took := readStatus(t, conn, 5*time.Second)
	if status != http.StatusServiceUnavailable || took > 2*time.Second {
		t.Fatalf("second upload: %d after %v", status, took)
	}
	// A small one still fits.
	s.do("POST", "/v1/stream/u", "small", "Content-Type", "text/plain").want(t, http.StatusNoContent)
}

func TestRefusedUploadsAreAnsweredAtOnce(t *testing.T) {
	s := newTestServer(t, &Config{Token: "a-token-of-16-bytes-or-more"})
	// A client that sends the headers of a 1 MiB body and then nothing:
	// the 401 comes at once, not after the body guard's 30 s.
	conn := dialRaw(t, s, "POST /v1/stream/x HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 1048576\r\n\r\n")
	if status, took := readStatus(t, conn, 5*time.Second); status != http.StatusUnauthorized || took > 2*time.Second {
		t.Fatalf("401: %d after %v", status, took)
	}
	// With Expect: 100-continue the body is never asked for.
	conn = dialRaw(t, s, "POST /v1/stream/x HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nExpect: 100-continue\r\nContent-Length: 1048576\r\n\r\n")
	if status, _ := readStatus(t, conn, 5*time.Second); status != http.StatusUnauthorized {
		t.Fatalf("with Expect: 100-continue: %d", status)
	}
	// Too large, without the body.
	open := newTestServer(t, nil)
	conn = dialRaw(t, open, "POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 104857600\r\n\r\n")
	if status, took := readStatus(t, conn, 5*time.Second); status != http.StatusRequestEntityTooLarge || took > 2*time.Second {
		t.Fatalf("413: %d after %v", status, took)
	}
}
