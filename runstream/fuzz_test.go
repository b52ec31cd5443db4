package runstream_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/weirhq/weir/runstream"
)

// FuzzHandler sends the route any run, name and query: the Backend is
// reached only with a GET of one run's stream, under /v1/stream/runs/,
// format=ndjson and the reader's parameters, and whatever is refused gets a
// one-line 4xx. Never a panic, never another path.
func FuzzHandler(f *testing.F) {
	f.Add("r1", "default", "offset=-1&live=sse")
	f.Add("../x", "a/../../b", "format=raw")
	f.Add("r%2F1", "a//b", "view=live&view=committed")
	f.Add("r1", "a/b", "offset=0000000000000000_0000000000000003&cursor=x&live=long-poll&view=committed&format=ndjson")
	f.Add("r\x00", "n\n", "%zz")
	f.Fuzz(func(t *testing.T, run, name, query string) {
		var got *http.Request
		backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got = r
			w.WriteHeader(http.StatusOK)
		})
		h := runstream.Handler(&runstream.Config{Backend: backend, Stream: func(*http.Request) (string, string, error) { return run, name, nil }})
		req := httptest.NewRequest("GET", "/x", nil)
		req.URL.RawQuery = query
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if got == nil {
			if rec.Code < 400 || rec.Code >= 500 || strings.Count(rec.Body.String(), "\n") != 1 {
				t.Fatalf("refused with %d %q", rec.Code, rec.Body.String())
			}
			return
		}
		want, err := runstream.Path(run, name)
		if err != nil {
			t.Fatalf("reached the backend with a bad run %q or name %q", run, name)
		}
		if got.Method != "GET" || got.URL.Path != "/v1/stream/"+want {
			t.Fatalf("backend got %s %s, want /v1/stream/%s", got.Method, got.URL.Path, want)
		}
		seg := strings.Split(strings.TrimPrefix(got.URL.EscapedPath(), "/v1/stream/"), "/")
		if len(seg) < 3 || seg[0] != "runs" {
			t.Fatalf("escaped path %q", got.URL.EscapedPath())
		}
		q, err := url.ParseQuery(got.URL.RawQuery)
		if err != nil || q.Get("format") != "ndjson" {
			t.Fatalf("backend query %q", got.URL.RawQuery)
		}
		for k := range q {
			switch k {
			case "offset", "live", "view", "cursor", "format":
			default:
				t.Fatalf("backend got parameter %q", k)
			}
		}
	})
}
