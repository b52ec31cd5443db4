package server

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A web page the user visits can reach a loopback server; these are the
// requests such a page can make, and what the server does with them.

func TestCrossSiteChangesAreRefused(t *testing.T) {
	s := newTestServer(t, &Config{CORSOrigins: []string{"https://app.example"}})
	host := strings.TrimPrefix(s.ts.URL, "http://")
	// A page of another origin POSTs text/plain (no preflight needed): refused
	// before anything happens.
	r := s.do("POST", "/v1/runs", `{"workflow":"echo"}`, "Origin", "https://evil.example", "Content-Type", "text/plain").
		want(t, http.StatusForbidden)
	if r.header.Get("Weir-Error") != "forbidden" {
		t.Fatalf("code %q", r.header.Get("Weir-Error"))
	}
	s.do("POST", "/v1/runs", `{"workflow":"echo"}`, "Origin", "https://evil.example").want(t, http.StatusForbidden)
	s.do("POST", "/v1/runs/x/cancel", "", "Origin", "https://evil.example").want(t, http.StatusForbidden)
	s.do("PUT", "/v1/stream/s", "", "Origin", "https://evil.example", "Content-Type", "text/plain").want(t, http.StatusForbidden)
	s.do("POST", "/v1/world/queue", `{}`, "Origin", "null").want(t, http.StatusForbidden)
	// Without Origin, a browser's cross-site mark is enough.
	s.do("POST", "/v1/runs", `{"workflow":"echo"}`, "Sec-Fetch-Site", "cross-site").want(t, http.StatusForbidden)
	if runs := s.do("GET", "/v1/runs", ""); strings.Contains(runs.body, `"id"`) {
		t.Fatalf("a refused request started a run: %s", runs.body)
	}
	// The server's own pages, an allowed origin, and clients that are not
	// browsers (no Origin) go on.
	s.do("POST", "/v1/runs", `{"workflow":"echo"}`, "Origin", "http://"+host).want(t, http.StatusCreated)
	s.do("POST", "/v1/runs", `{"workflow":"echo"}`, "Origin", "https://app.example").want(t, http.StatusCreated)
	s.do("POST", "/v1/runs", `{"workflow":"echo"}`).want(t, http.StatusCreated)
	// The runs API takes JSON only.
	s.do("POST", "/v1/runs", `{"workflow":"echo"}`, "Content-Type", "text/plain").want(t, http.StatusUnsupportedMediaType)
	s.do("POST", "/v1/runs", `workflow=echo`, "Content-Type", "application/x-www-form-urlencoded").want(t, http.StatusUnsupportedMediaType)
	// Reads of another origin are served, but without CORS consent its
	// browser cannot read them.
	r = s.do("GET", "/v1/runs", "", "Origin", "https://evil.example").want(t, http.StatusOK)
	if got := r.header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Fatalf("Access-Control-Allow-Origin %q for another origin", got)
	}
	r = s.do("GET", "/v1/runs", "", "Origin", "https://app.example").want(t, http.StatusOK)
	if got := r.header.Get("Access-Control-Allow-Origin"); got != "https://app.example" {
		t.Fatalf("Access-Control-Allow-Origin %q for an allowed origin", got)
	}
}

func TestPreflightsAnswerOnlyAllowedOrigins(t *testing.T) {
	s := newTestServer(t, &Config{CORSOrigins: []string{"https://app.example"}})
	for _, path := range []string{"/v1/stream/s", "/v1/runs"} {
		r := s.do("OPTIONS", path, "", "Origin", "https://evil.example", "Access-Control-Request-Method", "POST")
		if r.status != http.StatusNoContent || r.header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("%s: preflight of another origin: %d %v", path, r.status, r.header)
		}
		r = s.do("OPTIONS", path, "", "Origin", "https://app.example", "Access-Control-Request-Method", "POST")
		if r.status != http.StatusNoContent || r.header.Get("Access-Control-Allow-Origin") != "https://app.example" {
			t.Fatalf("%s: preflight of an allowed origin: %d %v", path, r.status, r.header)
		}
	}
	// The Durable Streams protocol's headers, for its browser clients.
	r := s.do("OPTIONS", "/v1/stream/s", "", "Origin", "https://app.example", "Access-Control-Request-Method", "GET",
		"Access-Control-Request-Headers", "if-none-match")
	if !strings.Contains(strings.ToLower(r.header.Get("Access-Control-Allow-Headers")), "if-none-match") {
		t.Fatalf("allow headers %q", r.header.Get("Access-Control-Allow-Headers"))
	}
	// An allowed page reads a stream error's code and a busy server's
	// Retry-After, as it reads the runs API's.
	r = s.do("GET", "/v1/stream/nope?offset=-1", "", "Origin", "https://app.example")
	for _, h := range []string{"Weir-Error", "Retry-After", "Weir-Data-Encoding", "Stream-Next-Offset"} {
		if r.status != http.StatusNotFound || !strings.Contains(r.header.Get("Access-Control-Expose-Headers"), h) {
			t.Fatalf("a stream reply does not expose %s: %d %v", h, r.status, r.header)
		}
	}
	// With no origins configured, only the server's own pages.
	def := newTestServer(t, nil)
	r = def.do("GET", "/v1/stream/s", "", "Origin", "https://app.example")
	if r.header.Get("Access-Control-Allow-Origin") != "" || r.header.Get("Cross-Origin-Resource-Policy") != "same-origin" {
		t.Fatalf("default: %v", r.header)
	}
}

func TestDNSRebindingIsRefused(t *testing.T) {
	s := newTestServer(t, &Config{AllowedHosts: append([]string{"weir.internal"}, LoopbackHosts...)})
	port := s.ts.URL[strings.LastIndex(s.ts.URL, ":"):]
	for host, want := range map[string]int{
		"attacker.example" + port: http.StatusForbidden,
		"attacker.example":        http.StatusForbidden,
		"localhost" + port:        http.StatusOK,
		"LOCALHOST.":              http.StatusOK,
		"127.0.0.1" + port:        http.StatusOK,
		"[::1]" + port:            http.StatusOK,
		"weir.internal":           http.StatusOK,
	} {
		req, _ := http.NewRequest("GET", s.ts.URL+"/v1/runs", nil)
		req.Host = host
		resp, err := s.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %q: %d, want %d", host, resp.StatusCode, want)
		}
	}
}

func TestActiveStreamsAreServedInert(t *testing.T) {
	s := newTestServer(t, nil)
	for _, ct := range []string{"text/html", "image/svg+xml", "application/xml", "text/plain"} {
		path := "/v1/stream/page-" + strings.ReplaceAll(ct, "/", "-")
		s.do("PUT", path, "<script>alert(localStorage.getItem('weir.token'))</script>", "Content-Type", ct).want(t, http.StatusCreated)
		for _, m := range []string{"GET", "HEAD"} {
			r := s.do(m, path+"?offset=-1", "").want(t, http.StatusOK)
			if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "sandbox") || !strings.Contains(csp, "default-src 'none'") {
				t.Fatalf("%s %s: CSP %q", m, ct, csp)
			}
			if r.header.Get("X-Content-Type-Options") != "nosniff" {
				t.Fatalf("%s %s: no nosniff", m, ct)
			}
			attach := r.header.Get("Content-Disposition") == "attachment"
			if attach != (ct != "text/plain") {
				t.Fatalf("%s %s: Content-Disposition %q", m, ct, r.header.Get("Content-Disposition"))
			}
		}
	}
}

func TestTheUICannotBeFramed(t *testing.T) {
	s := newTestServer(t, nil)
	r := s.do("GET", "/ui/", "").want(t, http.StatusOK)
	if !strings.Contains(r.header.Get("Content-Security-Policy"), "frame-ancestors 'none'") || r.header.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("UI headers %v", r.header)
	}
	js := s.do("GET", "/ui/app.js", "").want(t, http.StatusOK)
	if strings.Contains(js.body, "localStorage") {
		t.Fatal("the UI keeps its token in localStorage")
	}
}

// The demo workflow's input is the client's: one that would hold a run slot
// for ages fails at once, with the limit.
func TestDemoInputIsBounded(t *testing.T) {
	s := newTestServer(t, nil)
	run := s.start(`{"workflow":"demo.tokens","input":{"text":"a b c","delay":9000000000000000000}}`)
	got := s.wait(run.ID)
	if got.Status != "failed" || !strings.Contains(got.Error, "delay") {
		t.Fatalf("run %s: %s %q", run.ID, got.Status, got.Error)
	}
	run = s.start(`{"workflow":"demo.tokens","input":{"text":"` + strings.Repeat("a ", 10000) + `"}}`)
	if got := s.wait(run.ID); got.Status != "failed" || !strings.Contains(got.Error, "limit") {
		t.Fatalf("a long text: %s %q", got.Status, got.Error)
	}
}

// Expiries that a store's nanosecond times cannot hold are refused, not
// stored wrapped around.
func TestUnrepresentableExpiriesAreRefused(t *testing.T) {
	s := newTestServer(t, nil)
	for _, at := range []string{"2300-01-01T00:00:00Z", "1600-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "0001-01-01T00:00:00Z"} {
		r := s.do("PUT", "/v1/stream/exp-"+at[:4], "", "Content-Type", "text/plain", "Stream-Expires-At", at).want(t, http.StatusBadRequest)
		if !strings.Contains(r.body, "between") {
			t.Fatalf("%s: %q", at, r.body)
		}
	}
	s.do("PUT", "/v1/stream/exp-ok", "", "Content-Type", "text/plain", "Stream-Expires-At", "2200-01-01T00:00:00Z").want(t, http.StatusCreated)
	if r := s.do("GET", "/v1/stream/exp-ok?offset=-1", ""); r.status != http.StatusOK {
		t.Fatalf("a stream expiring in 2200 is gone: %d", r.status)
	}
}

// Errors quote their input clipped, and a 500's cause is logged.
func TestErrorRepliesAreShort(t *testing.T) {
	s := newTestServer(t, nil)
	name := strings.Repeat("w", 1<<20)
	r := s.do("POST", "/v1/runs", `{"workflow":"`+name+`"}`)
	if r.status < 400 || len(r.body) > 600 {
		t.Fatalf("a 1 MiB workflow name: %d, a %d-byte reply", r.status, len(r.body))
	}
	r = s.do("GET", "/v1/runs/"+strings.Repeat("r", 100000), "")
	if len(r.body) > 600 {
		t.Fatalf("a long run id: a %d-byte reply", len(r.body))
	}
}

func TestInternalErrorsAreLoggedWithTheirCause(t *testing.T) {
	var logs strings.Builder
	s := newTestServer(t, &Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	req := httptest.NewRequest("GET", "/v1/whatever", nil)
	rw := httptest.NewRecorder()
	w, r, done := s.srv.instrument(rw, req)
	httpError(w, errors.New("the disk caught fire"))
	done()
	_ = r
	if rw.Code != http.StatusInternalServerError || strings.Contains(rw.Body.String(), "fire") {
		t.Fatalf("reply %d %q: want 500 without the cause", rw.Code, rw.Body.String())
	}
	if !strings.Contains(logs.String(), "the disk caught fire") {
		t.Fatalf("the cause was not logged: %q", logs.String())
	}
}
