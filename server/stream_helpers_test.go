package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/sqlitestore"
)

// dsServer is a Server on a real store (a SQLite file unless a test picks
// another), for the streams tests.
type dsServer struct {
	t   testing.TB
	st  store.Full
	e   *weir.Engine
	srv *Server
	ts  *httptest.Server
}

// newDSServer starts a server; register workflows on e before starting runs.
func newDSServer(t testing.TB, cfg *Config) *dsServer {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "weir.db"), &sqlitestore.Config{Synchronous: "OFF"})
	if err != nil {
		t.Fatal(err)
	}
	return newDSServerOn(t, cfg, st)
}

// newDSServerOn starts a server on st, which it closes when t ends.
func newDSServerOn(t testing.TB, cfg *Config, st store.Full) *dsServer {
	t.Helper()
	return newDSServerWith(t, cfg, st, nil)
}

// newDSServerWith is newDSServerOn, with set (if not nil) called on the
// Server before it serves: a test's clock, say.
func newDSServerWith(t testing.TB, cfg *Config, st store.Full, set func(*Server)) *dsServer {
	t.Helper()
	e, err := weir.New(st, &weir.Config{PollInterval: 10 * time.Millisecond, LeaseTTL: 500 * time.Millisecond,
		Retry:  weir.RetryPolicy{InitialInterval: 5 * time.Millisecond, MaxInterval: 20 * time.Millisecond},
		Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = discardLogger()
	}
	if c.LongPollTimeout == 0 {
		c.LongPollTimeout = 500 * time.Millisecond
	}
	srv := New(e, &c)
	if set != nil {
		set(srv)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		_ = e.Close(context.Background())
		_ = st.Close()
	})
	return &dsServer{t: t, st: st, e: e, srv: srv, ts: ts}
}

// dsReply is a response read whole.
type dsReply struct {
	status int
	h      http.Header
	body   []byte
}

func (r *dsReply) String() string { return string(r.body) }

// call sends method to /v1/stream/<path> (path may carry a query) with
// headers given as name, value pairs.
func (d *dsServer) call(method, path string, body []byte, hdr ...string) *dsReply {
	d.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	// Every call has a deadline: a request that hangs fails the test.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, d.ts.URL+streamPrefix+path, rd)
	if err != nil {
		d.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := d.ts.Client().Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatal(err)
	}
	return &dsReply{status: resp.StatusCode, h: resp.Header, body: b}
}

// must checks the status (and that an error reply is one line).
func (r *dsReply) must(t testing.TB, status int) *dsReply {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %.300q", r.status, status, r.body)
	}
	if status >= 400 && len(r.body) > 0 {
		if !bytes.HasSuffix(r.body, []byte("\n")) || bytes.Count(r.body, []byte("\n")) != 1 {
			t.Fatalf("error body %q is not one line", r.body)
		}
	}
	return r
}

func (r *dsReply) header(t testing.TB, name, want string) *dsReply {
	t.Helper()
	if got := r.h.Get(name); got != want {
		t.Fatalf("%s = %q, want %q (body %q)", name, got, want, r.body)
	}
	return r
}

// create PUTs a stream.
func (d *dsServer) create(path, contentType string, hdr ...string) *dsReply {
	d.t.Helper()
	return d.call("PUT", path, nil, append([]string{"Content-Type", contentType}, hdr...)...).must(d.t, http.StatusCreated)
}

// weirAppend appends chunks as writer/attempt from seq (framed when more
// than one) and returns the acks.
func (d *dsServer) weirAppend(path, writer string, attempt, seq int64, chunks ...string) ([]ackJSON, *dsReply) {
	d.t.Helper()
	hdr := []string{"Content-Type", "text/plain", "Weir-Writer", writer, "Weir-Attempt", itoa(attempt), "Weir-Seq", itoa(seq)}
	var body []byte
	if len(chunks) == 1 {
		body = []byte(chunks[0])
	} else {
		hdr = append(hdr, "Weir-Framing", "u32be")
		for _, c := range chunks {
			body = appendFrame(body, []byte(c))
		}
	}
	r := d.call("POST", path, body, hdr...)
	if r.status != http.StatusOK {
		return nil, r
	}
	var rep appendReply
	if err := json.Unmarshal(r.body, &rep); err != nil {
		d.t.Fatalf("append reply %q: %v", r.body, err)
	}
	if rep.NextOffset != r.h.Get("Stream-Next-Offset") {
		d.t.Fatalf("next_offset %q, Stream-Next-Offset %q", rep.NextOffset, r.h.Get("Stream-Next-Offset"))
	}
	return rep.Acks, r
}

func (d *dsServer) finish(path, writer string, attempt int64, what string) *dsReply {
	d.t.Helper()
	return d.call("POST", path, nil, "Weir-Writer", writer, "Weir-Attempt", itoa(attempt), what, "true")
}

// ndjson reads the whole stream in ndjson form.
func (d *dsServer) ndjson(path, query string) []ndRec {
	d.t.Helper()
	r := d.call("GET", path+"?format=ndjson"+query, nil).must(d.t, http.StatusOK)
	r.header(d.t, "Content-Type", "application/x-ndjson")
	var out []ndRec
	dec := json.NewDecoder(bytes.NewReader(r.body))
	for dec.More() {
		var rec ndRec
		if err := dec.Decode(&rec); err != nil {
			d.t.Fatalf("ndjson %q: %v", r.body, err)
		}
		out = append(out, rec)
	}
	return out
}

// ndRec is one line of format=ndjson.
type ndRec struct {
	Offset     int64           `json:"offset"`
	NextOffset string          `json:"next_offset"`
	Kind       string          `json:"kind"`
	Writer     string          `json:"writer"`
	Attempt    int64           `json:"attempt"`
	Seq        int64           `json:"seq"`
	From       int64           `json:"from"`
	Count      int64           `json:"count"`
	Data       json.RawMessage `json:"data"`
	Encoding   string          `json:"encoding"`
}

func (r ndRec) String() string {
	if r.Kind == "data" {
		return r.Kind + ":" + r.Writer + "/" + itoa(r.Attempt) + "/" + itoa(r.Seq) + "=" + string(r.Data)
	}
	return r.Kind + ":" + r.Writer
}

func itoa(n int64) string { return formatInt(n) }

func formatInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func outcomes(acks []ackJSON) string {
	var s []string
	for _, a := range acks {
		s = append(s, itoa(a.Offset)+":"+a.Outcome)
	}
	return strings.Join(s, " ")
}

func streamParams(path string) *store.OpenStreamParams { return &store.OpenStreamParams{Path: path} }

// eventually waits up to 10 s for cond, looking every millisecond, and
// fails the test with what it waited for.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
