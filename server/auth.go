package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
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
	s.log.Warn("weir server: failed authentication", "remote", r.RemoteAddr, "method", r.Method, "path", clip(loggedPath(r.URL.Path)),
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

// loggedPath is path as a log may carry it: a hook's token in it (POST
// /v1/hooks/{token}) is a capability, named by its reference instead.
func loggedPath(path string) string {
	if tok, ok := strings.CutPrefix(path, "/v1/hooks/"); ok && tok != "" {
		return "/v1/hooks/" + store.HookRef(tok)
	}
	return path
}
