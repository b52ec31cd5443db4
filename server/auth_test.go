package server

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
)

func TestAuthWritesNeedTheToken(t *testing.T) {
	s := newTestServer(t, &Config{Token: "s3cret", CORSOrigins: []string{"http://app.example"}})
	body := `{"workflow":"echo"}`
	r := s.do("POST", "/v1/runs", body).want(t, http.StatusUnauthorized)
	if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("WWW-Authenticate %q", r.header.Get("WWW-Authenticate"))
	}
	s.do("POST", "/v1/runs", body, "Authorization", "Bearer nope").want(t, http.StatusUnauthorized)
	s.do("POST", "/v1/runs", body, "Authorization", "Basic s3cret").want(t, http.StatusUnauthorized)
	s.do("POST", "/v1/runs", body, "Authorization", "s3cret").want(t, http.StatusUnauthorized)
	s.do("POST", "/v1/runs", body, "Authorization", "Bearer s3cret").want(t, http.StatusCreated)
	s.do("POST", "/v1/runs", body, "Authorization", "bearer s3cret").want(t, http.StatusCreated)
	s.do("POST", "/v1/runs/x/cancel", "", "Authorization", "Bearer nope").want(t, http.StatusUnauthorized)
	// Reads stay open on a loopback configuration.
	s.do("GET", "/v1/runs", "").want(t, http.StatusOK)
	s.do("GET", "/metrics", "").want(t, http.StatusOK)
	// The stream endpoints are covered too: writes need the token, reads
	// and preflights do not.
	for _, m := range []string{"PUT", "POST", "DELETE"} {
		// An allowed origin's browser client can read the 401.
		r := s.do(m, "/v1/stream/some/stream", "x", "Content-Type", "text/plain", "Origin", "http://app.example").want(t, http.StatusUnauthorized)
		if r.header.Get("Access-Control-Allow-Origin") != "http://app.example" {
			t.Fatalf("%s: a stream 401 without CORS headers: %v", m, r.header)
		}
	}
	// With the token, the write goes through to the streams handler.
	s.do("PUT", "/v1/stream/some/stream", "", "Content-Type", "text/plain", "Authorization", "Bearer s3cret").want(t, http.StatusCreated)
	if r := s.do("GET", "/v1/stream/some/stream", ""); r.status == http.StatusUnauthorized {
		t.Fatal("a stream read needed the token")
	}
	for _, path := range []string{"/v1/stream/some/stream", "/v1/runs"} {
		r := s.do("OPTIONS", path, "", "Origin", "http://example.com", "Access-Control-Request-Method", "POST")
		if r.status == http.StatusUnauthorized {
			t.Fatalf("OPTIONS %s needed the token", path)
		}
	}
}

func TestAuthReadsNeedTheTokenWhenConfigured(t *testing.T) {
	s := newTestServer(t, &Config{Token: "s3cret", RequireTokenForReads: true})
	s.do("GET", "/v1/runs", "").want(t, http.StatusUnauthorized)
	s.do("HEAD", "/v1/runs", "").want(t, http.StatusUnauthorized)
	s.do("GET", "/v1/runs", "", "Authorization", "Bearer s3cret").want(t, http.StatusOK)
	s.do("GET", "/metrics", "").want(t, http.StatusUnauthorized)
	s.do("GET", "/v1/stream/runs/x/tokens?offset=-1", "").want(t, http.StatusUnauthorized)
	s.do("GET", "/healthz", "").want(t, http.StatusOK)
	if r := s.do("OPTIONS", "/v1/stream/x", ""); r.status == http.StatusUnauthorized {
		t.Fatal("OPTIONS needed the token")
	}
}

func TestNoTokenNoAuth(t *testing.T) {
	s := newTestServer(t, nil)
	s.do("POST", "/v1/runs", `{"workflow":"echo"}`).want(t, http.StatusCreated)
}

func TestHealthz(t *testing.T) {
	s := newTestServer(t, nil)
	if r := s.do("GET", "/healthz", "").want(t, http.StatusOK); r.body != "ok\n" {
		t.Fatalf("body %q", r.body)
	}
}

// A client that sends half a body and stalls is answered and let go once
// the body guard's idle time passes; the server holds nothing for it.
func TestStalledBodyIsCut(t *testing.T) {
	old := bodyIdleTimeout
	bodyIdleTimeout = 200 * time.Millisecond
	t.Cleanup(func() { bodyIdleTimeout = old })
	s := newTestServer(t, nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"workflow\":")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestTokensEqual(t *testing.T) {
	if !tokensEqual("abc", "abc") || tokensEqual("abc", "abd") || tokensEqual("abc", "abcd") || tokensEqual("", "x") {
		t.Fatal("tokensEqual")
	}
}

// A refused request's body is drained under the same guard.
func TestStalledBodyOfRefusedRequestIsCut(t *testing.T) {
	old := bodyIdleTimeout
	bodyIdleTimeout = 200 * time.Millisecond
	t.Cleanup(func() { bodyIdleTimeout = old })
	s := newTestServer(t, &Config{Token: "t"})
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// A read token reads what the token reads and changes nothing; a write
// with it says why it was refused.
func TestReadTokenReadsOnly(t *testing.T) {
	s := newTestServer(t, &Config{Token: "write-write-write-write", ReadToken: "read-read-read-read", RequireTokenForReads: true})
	read := []string{"Authorization", "Bearer read-read-read-read"}
	s.do("GET", "/v1/runs", "", read...).want(t, http.StatusOK)
	s.do("GET", "/metrics", "", read...).want(t, http.StatusOK)
	s.do("PUT", "/v1/stream/dash/s", "", "Content-Type", "text/plain", "Authorization", "Bearer write-write-write-write").want(t, http.StatusCreated)
	s.do("GET", "/v1/stream/dash/s?offset=-1", "", read...).want(t, http.StatusOK)
	for _, m := range []string{"POST", "PUT", "DELETE"} {
		r := s.do(m, "/v1/stream/dash/s", "x", append([]string{"Content-Type", "text/plain"}, read...)...).want(t, http.StatusUnauthorized)
		if !strings.Contains(r.body, "reads only") {
			t.Fatalf("%s with the read token: %q", m, r.body)
		}
	}
	if r := s.do("POST", "/v1/runs", `{"workflow":"echo"}`, append([]string{"Content-Type", "application/json"}, read...)...); r.status != http.StatusUnauthorized {
		t.Fatalf("a run started with the read token: %d", r.status)
	}
	s.do("GET", "/v1/runs", "", "Authorization", "Bearer write-write-write-write").want(t, http.StatusOK)
	s.do("GET", "/v1/runs", "", "Authorization", "Bearer read-read-read-reaX").want(t, http.StatusUnauthorized)
}

// lockedBuffer is a log sink handlers write to while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Failed authentications are logged, but a guesser hammering the server
// cannot flood the log: one line a second at most, with a count.
func TestFailedAuthIsLoggedAtALimitedRate(t *testing.T) {
	var logs lockedBuffer
	s := newTestServer(t, &Config{Token: "write-write-write-write", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	start := time.Now()
	for i := range 200 {
		s.do("POST", "/v1/runs", `{"workflow":"echo"}`, "Content-Type", "application/json", "Authorization", fmt.Sprintf("Bearer guess-%d", i)).want(t, http.StatusUnauthorized)
	}
	lines := strings.Count(logs.String(), "failed authentication")
	if most := int(time.Since(start)/time.Second) + 1; lines < 1 || lines > most {
		t.Fatalf("200 failed authentications logged in %d lines: %s", lines, logs.String())
	}
	if strings.Contains(logs.String(), "guess-") {
		t.Fatal("the log holds a guessed token")
	}
}

// A failed authentication's log line names a hook by its reference, never
// its token (a capability): red team, round four, F7.
func TestLoggedPathHidesHookTokens(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/hooks/secret-token": "/v1/hooks/" + store.HookRef("secret-token"),
		"/v1/hooks/":             "/v1/hooks/",
		"/v1/runs/r1":            "/v1/runs/r1",
	} {
		if got := loggedPath(path); got != want || strings.Contains(got, "secret-token") {
			t.Errorf("loggedPath(%q) = %q, want %q", path, got, want)
		}
	}
}
