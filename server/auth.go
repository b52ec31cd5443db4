package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/weirhq/weir/api"
)

// authorize checks the bearer token, when one is configured: writes (every
// method but GET, HEAD and OPTIONS) need it, and reads too with
// Config.RequireTokenForReads. CORS preflights (OPTIONS), /healthz and the
// UI's static files stay open. It answers 401 itself and returns false when the request may not go
// on.
//
// Config.ReadToken is a token for reads only (a dashboard's): it reads
// whatever the token reads, and changes nothing.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) bool {
	if (s.cfg.Token == "" && s.cfg.ReadToken == "") || r.URL.Path == "/healthz" {
		return true
	}
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && (r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/")) {
		// The UI's static files hold no data; the API calls it makes carry
		// the token the user typed into it.
		return true
	}
	read := false
	switch r.Method {
	case http.MethodOptions:
		return true
	case http.MethodGet, http.MethodHead:
		if !s.cfg.RequireTokenForReads {
			return true
		}
		read = true
	}
	got, ok := bearerToken(r)
	if ok && s.cfg.Token != "" && tokensEqual(got, s.cfg.Token) {
		return true
	}
	if ok && read && s.cfg.ReadToken != "" && tokensEqual(got, s.cfg.ReadToken) {
		return true
	}
	s.authFailed(r)
	h := w.Header()
	h.Set("WWW-Authenticate", `Bearer realm="weir"`)
	switch {
	case !ok:
		refuse(w, r, fmt.Errorf("%w: this request needs the server's token: send Authorization: Bearer <token>", api.ErrUnauthorized))
	case !read && s.cfg.ReadToken != "" && tokensEqual(got, s.cfg.ReadToken):
		refuse(w, r, fmt.Errorf("%w: this token reads only; a %s needs the server's token", api.ErrUnauthorized, r.Method))
	default:
		refuse(w, r, fmt.Errorf("%w: wrong bearer token", api.ErrUnauthorized))
	}
	return false
}

// authFailed logs a failed authentication: at most one line a second,
// saying how many failed since the last line.
func (s *Server) authFailed(r *http.Request) {
	s.auth.mu.Lock()
	defer s.auth.mu.Unlock()
	s.auth.failed++
	now := time.Now()
	if now.Sub(s.auth.last) < time.Second {
		return
	}
	s.log.Warn("weir server: failed authentication", "remote", r.RemoteAddr, "method", r.Method, "path", clip(r.URL.Path),
		"failures_since_last_log", s.auth.failed)
	s.auth.last, s.auth.failed = now, 0
}

// bearerToken returns the token of an Authorization: Bearer header.
func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// tokensEqual compares in constant time, whatever the lengths.
func tokensEqual(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// bodyIdleTimeout is how long a request body may stall between two reads
// before the connection's read fails: a client that stops sending mid-body
// holds its goroutine (and anything its handler holds) no longer than this.
var bodyIdleTimeout = 30 * time.Second

// guardBody holds r's body to a budget and a pace. Its bytes (its
// Content-Length, or MaxBodyBytes when unknown) are reserved from
// MaxUploadBytes, released when the request ends (the returned func): a
// request that would pass the budget gets api.ErrBusy. Reads fail once the
// client sends nothing for bodyIdleTimeout, or, after that much grace, once
// the body averages less than MinUploadRate: a body trickled a byte every
// few seconds holds nothing for long. Once the body is read through, the
// deadline is lifted, so long SSE and long-poll reads are not cut.
func (s *Server) guardBody(w http.ResponseWriter, r *http.Request) (release func(), err error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return func() {}, nil
	}
	n := r.ContentLength
	if n < 0 || n > s.cfg.MaxBodyBytes {
		n = s.cfg.MaxBodyBytes
	}
	if s.uploads.Add(n) > s.cfg.MaxUploadBytes {
		s.uploads.Add(-n)
		return nil, fmt.Errorf("%w: %d bytes of request bodies are being received, the budget is %d: send it again shortly",
			api.ErrBusy, s.uploads.Load(), s.cfg.MaxUploadBytes)
	}
	rc := http.NewResponseController(w)
	start := time.Now()
	// Armed now, so that a body the handler never reads (a refused
	// request) cannot hold the server's drain of it either.
	_ = rc.SetReadDeadline(start.Add(bodyIdleTimeout))
	r.Body = &idleBody{ReadCloser: r.Body, rc: rc, start: start, minRate: s.cfg.MinUploadRate}
	return func() { s.uploads.Add(-n) }, nil
}

type idleBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	done    bool
	start   time.Time
	read    int64
	minRate int64
}

// deadline is the next read's: bodyIdleTimeout from now, and no later than
// the grace plus the time the bytes read so far earn at the minimum rate.
func (b *idleBody) deadline() time.Time {
	d := time.Now().Add(bodyIdleTimeout)
	if earned := b.start.Add(bodyIdleTimeout + time.Duration(b.read*int64(time.Second)/max(b.minRate, 1))); earned.Before(d) {
		d = earned
	}
	return d
}

func (b *idleBody) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	_ = b.rc.SetReadDeadline(b.deadline())
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	switch {
	case err == io.EOF:
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case err != nil:
		// A stalled or broken body: leave the deadline passed, so that
		// the server's own attempt to drain the rest fails at once and it
		// closes the connection after the reply.
		b.done = true
		_ = b.rc.SetReadDeadline(time.Now())
	}
	return n, err
}
