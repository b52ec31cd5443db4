// Package runstream serves one run's stream at an app's own route, so that a
// browser reads it with its records intact (data, abort, commit, close: what
// a reader needs to apply rewinds) under the app's own authorization, and
// with no weir token in the page.
//
// Mount a Handler behind the app's middleware, which decides who may read
// which run:
//
//	mux.Handle("GET /chat/{run}/stream", requireUser(runstream.Handler(&runstream.Config{
//		Backend: weirServer, // the engine's *server.Server, or runstream.Remote(url, nil)
//		Token:   os.Getenv("WEIR_TOKEN"),
//	})))
//
// The browser then follows /chat/<run>/stream with @weirhq/client's follow
// (or any reader of weir's ndjson records). The Handler forwards a read
// only: GET, the stream the Config's Stream picks (never a path the browser
// names), the query parameters a reader sends (offset, live, view, cursor),
// format=ndjson always, and none of the browser's cookies or credentials.
package runstream

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
)

// Config configures a Handler.
type Config struct {
	// Backend serves weir's stream reads at /v1/stream/: the *server.Server
	// of an engine in this process (never mounted where browsers reach it,
	// if it should not be), or Remote for a weir server elsewhere. Required.
	Backend http.Handler
	// Token is sent to the Backend as "Authorization: Bearer <Token>", for
	// a server whose reads need one. The browser never sees it. Defaults to
	// none.
	Token string
	// Stream picks the run stream a request reads: the run's id and the
	// stream's name. An error answers the request: one that wraps
	// ErrNotFound is a 404, ErrForbidden a 403, any other a 400. Defaults to
	// the route's path values: r.PathValue("run"), and r.PathValue("name")
	// or "default" when the pattern has no {name}.
	Stream func(r *http.Request) (run, name string, err error)
}

// Errors a Config's Stream may wrap to choose the status of its refusal.
var (
	// ErrNotFound answers 404: no such run, or none the user may know of.
	ErrNotFound = errors.New("runstream: not found")
	// ErrForbidden answers 403.
	ErrForbidden = errors.New("runstream: forbidden")
)

// DefaultStream is the name of a run's stream a Config reads when its
// route has no {name}: the stream a Go step's ctx.Stream("default") and a
// Vercel Workflow run's getWritable() write.
const DefaultStream = "default"

// readParams are the query parameters a reader may send: the rest are
// refused, so that a page cannot make the route anything but a read of
// records.
var readParams = map[string]bool{"offset": true, "live": true, "view": true, "cursor": true, "format": true}

// Handler returns an http.Handler that serves the stream cfg.Stream picks,
// read from cfg.Backend. It panics if cfg.Backend is nil.
func Handler(cfg *Config) http.Handler {
	if cfg == nil || cfg.Backend == nil {
		panic("runstream: Config.Backend is required")
	}
	c := *cfg
	if c.Stream == nil {
		c.Stream = pathValues
	}
	return &handler{cfg: c}
}

type handler struct{ cfg Config }

func pathValues(r *http.Request) (string, string, error) {
	name := r.PathValue("name")
	if name == "" {
		name = DefaultStream
	}
	return r.PathValue("run"), name, nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		refuse(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s: a run's stream is read here, with GET", r.Method))
		return
	}
	run, name, err := h.cfg.Stream(r)
	switch {
	case errors.Is(err, ErrNotFound):
		refuse(w, http.StatusNotFound, err.Error())
		return
	case errors.Is(err, ErrForbidden):
		refuse(w, http.StatusForbidden, err.Error())
		return
	case err != nil:
		refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	path, err := Path(run, name)
	if err != nil {
		refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	q, err := readQuery(r.URL.Query())
	if err != nil {
		refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	// A new request, not the browser's: its cookies, credentials and
	// Origin stay here; the Backend sees a reader on loopback.
	u := &url.URL{Scheme: "http", Host: "localhost", Path: "/v1/stream/" + path,
		RawPath: "/v1/stream/" + escapePath(path), RawQuery: q.Encode()}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), nil)
	if err != nil {
		refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	for _, k := range []string{"Accept", "If-None-Match"} {
		if v := r.Header.Get(k); v != "" {
			out.Header.Set(k, v)
		}
	}
	if h.cfg.Token != "" {
		out.Header.Set("Authorization", "Bearer "+h.cfg.Token)
	}
	// Whatever the Backend answers, the page may not be framed or sniffed,
	// and its records are not cached by anyone between (a run's stream is
	// the user's).
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "private, no-store")
	h.cfg.Backend.ServeHTTP(w, out)
}

// readQuery checks a reader's query and returns the one forwarded: format
// is ndjson whatever the reader asked (raw bytes would lose the records a
// reader needs to apply rewinds).
func readQuery(in url.Values) (url.Values, error) {
	out := url.Values{}
	for k, vs := range in {
		if !readParams[k] {
			return nil, fmt.Errorf("query parameter %q: a run's stream takes offset, live, view, cursor and format=ndjson", clip(k))
		}
		if len(vs) != 1 {
			return nil, fmt.Errorf("query parameter %q given %d times", k, len(vs))
		}
		v := vs[0]
		switch k {
		case "format":
			if v != "ndjson" {
				return nil, fmt.Errorf("format=%q: this route serves format=ndjson only (the records a reader needs to apply rewinds)", clip(v))
			}
		case "view":
			if v != "live" && v != "committed" {
				return nil, fmt.Errorf("view=%q: live or committed", clip(v))
			}
		case "live":
			if v != "sse" && v != "long-poll" {
				return nil, fmt.Errorf("live=%q: sse or long-poll", clip(v))
			}
		}
		out.Set(k, v)
	}
	out.Set("format", "ndjson")
	return out, nil
}

// Path returns the stream path of a run's stream, the one weir serves at
// /v1/stream/<path>: runs/<run>/<name>. A run id is one path segment; a
// name may have several, none empty, "." or "..". It is how a Config's
// Stream choice is checked, so that no value reaches another stream.
func Path(run, name string) (string, error) {
	if run == "" || strings.Contains(run, "/") || run == "." || run == ".." {
		return "", fmt.Errorf("run id %q: one path segment, not empty, \".\" or \"..\"", clip(run))
	}
	if name == "" {
		return "", errors.New("empty stream name")
	}
	for seg := range strings.SplitSeq(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", fmt.Errorf("stream name %q has an empty, . or .. segment", clip(name))
		}
	}
	for _, s := range []string{run, name} {
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] == 0x7f {
				return "", errors.New("control character in a run id or stream name")
			}
		}
	}
	return "runs/" + run + "/" + name, nil
}

// escapePath escapes each segment of a stream path.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// Remote returns a Backend that forwards reads to the weir server at base
// (its root URL, as `weir server` prints it), streaming each reply as it
// comes (an SSE read is flushed event by event). client defaults to
// http.DefaultClient's transport. Only what a reader needs of the reply
// goes back: its status, the stream's headers and the body; never a
// cookie.
func Remote(base *url.URL, transport http.RoundTripper) http.Handler {
	b := *base
	b.Path = strings.TrimSuffix(b.Path, "/")
	b.RawPath = ""
	return &httputil.ReverseProxy{
		Transport:     transport,
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&b)
			pr.Out.Host = b.Host
		},
		ModifyResponse: func(resp *http.Response) error {
			for k := range resp.Header {
				if !keepHeader(k) {
					resp.Header.Del(k)
				}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the reader left
			}
			refuse(w, http.StatusBadGateway, "weir server unreachable: "+err.Error())
		},
	}
}

// keepHeader reports a reply header a reader of a stream uses.
func keepHeader(k string) bool {
	switch k = http.CanonicalHeaderKey(k); {
	case strings.HasPrefix(k, "Stream-"), strings.HasPrefix(k, "Weir-"):
		return true
	}
	switch k {
	case "Content-Type", "Content-Length", "Cache-Control", "Etag", "Retry-After", "Allow",
		"X-Content-Type-Options", "Content-Security-Policy", "Cross-Origin-Resource-Policy":
		return true
	}
	return false
}

// refuse writes a one-line plain-text refusal.
func refuse(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(strings.ReplaceAll(msg, "\n", " ") + "\n"))
}

// clip shortens a value quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
