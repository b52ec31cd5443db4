package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/internal/demo"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/sqlitestore"
)

// testServer is a Server on a real SQLite file, served by httptest.
type testServer struct {
	t   *testing.T
	e   *weir.Engine
	srv *Server
	ts  *httptest.Server
}

// newTestServer starts a server with the demo workflow and two of the
// tests' own: "echo" returns its input, "block" waits until cancelled.
func newTestServer(t *testing.T, cfg *Config) *testServer {
	t.Helper()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "weir.db"), &sqlitestore.Config{Synchronous: "OFF"})
	if err != nil {
		t.Fatal(err)
	}
	ist := InstrumentStore(st)
	e, err := weir.New(ist, &weir.Config{PollInterval: 10 * time.Millisecond, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	demo.Register(e)
	weir.Register(e, "echo", func(_ weir.Context, in json.RawMessage) (json.RawMessage, error) { return in, nil })
	weir.Register(e, "block", func(ctx weir.Context, _ struct{}) (int, error) {
		return weir.Step(ctx, "wait", func(sc weir.StepContext) (int, error) {
			<-sc.Done()
			return 0, weir.NonRetryable(sc.Err())
		})
	})
	if err := e.Work(ctx); err != nil {
		t.Fatal(err)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = discardLogger()
	}
	srv := New(e, &c)
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		_ = e.Close(context.Background())
		_ = st.Close()
	})
	return &testServer{t: t, e: e, srv: srv, ts: ts}
}

// reply is a response, read whole.
type reply struct {
	method string
	status int
	header http.Header
	body   string
}

func (r *reply) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.body), v); err != nil {
		t.Fatalf("decode %q: %v", r.body, err)
	}
}

// do sends a request; body "" sends none.
func (s *testServer) do(method, path, body string, header ...string) *reply {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.ts.URL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	if body != "" && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json") // as every client of the runs API sends
	}
	resp, err := s.ts.Client().Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return &reply{method: method, status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// want checks a reply's status, and that an error reply is one line.
func (r *reply) want(t *testing.T, status int) *reply {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %q", r.status, status, r.body)
	}
	if status >= 400 && r.method != "HEAD" {
		checkOneLine(t, r)
	}
	return r
}

func checkOneLine(t *testing.T, r *reply) {
	t.Helper()
	if !strings.HasSuffix(r.body, "\n") || strings.Count(r.body, "\n") != 1 || len(strings.TrimSpace(r.body)) == 0 {
		t.Fatalf("error body %q is not one line", r.body)
	}
	if len(r.body) > 400 {
		t.Fatalf("error body of %d bytes: %q", len(r.body), r.body)
	}
}

// start starts a run and returns it.
func (s *testServer) start(body string, header ...string) api.Run {
	s.t.Helper()
	r := s.do("POST", "/v1/runs", body, header...)
	if r.status != http.StatusCreated && r.status != http.StatusOK {
		s.t.Fatalf("start %s: %d %q", body, r.status, r.body)
	}
	var run api.Run
	r.decode(s.t, &run)
	return run
}

// wait waits for a run to end.
func (s *testServer) wait(id string) *store.Run {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run, err := s.e.Wait(ctx, id)
	if err != nil {
		s.t.Fatalf("wait %s: %v", id, err)
	}
	return run
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
