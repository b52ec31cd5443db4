package runstream_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/runstream"
	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/store/sqlitestore"
)

// app is an engine on a real SQLite file, its weir server (never mounted
// where the browser reaches it), and an app that mounts a run's stream at
// its own route behind its own check: a request needs the cookie
// "user=ada".
type app struct {
	e      *weir.Engine
	weir   *server.Server
	site   *httptest.Server
	speak  *weir.Workflow[string, string]
	remote *httptest.Server // the weir server over HTTP, for Remote
	gate   chan struct{}    // the step's second attempt waits for it
	seen   chan http.Header // headers of the requests the weir server got
}

func newApp(t *testing.T, token string) *app {
	t.Helper()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "weir.db"), &sqlitestore.Config{Synchronous: "OFF"})
	if err != nil {
		t.Fatal(err)
	}
	e, err := weir.New(st, &weir.Config{PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a := &app{e: e, gate: make(chan struct{}), seen: make(chan http.Header, 64)}
	// The first attempt says "Hel", "lo" and fails; the second says other
	// words once the test lets it.
	a.speak = weir.Register(e, "speak", func(ctx weir.Context, in string) (string, error) {
		return weir.Step(ctx, "model", func(sc weir.StepContext) (string, error) {
			w := sc.Stream(runstream.DefaultStream)
			if sc.Attempt() == 1 {
				for _, s := range []string{"Hel", "lo"} {
					if _, err := w.WriteString(s); err != nil {
						return "", err
					}
				}
				if err := w.Flush(); err != nil {
					return "", err
				}
				return "", errors.New("the model's connection dropped")
			}
			select {
			case <-a.gate:
			case <-sc.Done():
				return "", sc.Err()
			}
			for _, s := range []string{"Hi", " there"} {
				if _, err := w.WriteString(s); err != nil {
					return "", err
				}
			}
			return "Hi there", nil
		}, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 2, InitialInterval: weir.NoWait}))
	})
	if err := e.Work(ctx); err != nil {
		t.Fatal(err)
	}
	a.weir = server.New(e, &server.Config{Token: token, RequireTokenForReads: token != ""})
	spy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case a.seen <- r.Header.Clone():
		default:
		}
		a.weir.ServeHTTP(w, r)
	})
	a.remote = httptest.NewServer(spy)
	mux := http.NewServeMux()
	mux.Handle("GET /chat/{run}/stream", requireUser(runstream.Handler(&runstream.Config{Backend: spy, Token: token})))
	u, _ := url.Parse(a.remote.URL)
	mux.Handle("GET /remote/{run}/stream", requireUser(runstream.Handler(&runstream.Config{Backend: runstream.Remote(u, nil), Token: token})))
	mux.Handle("GET /picked/{n}", runstream.Handler(&runstream.Config{Backend: spy, Token: token,
		Stream: func(r *http.Request) (string, string, error) {
			switch n := r.PathValue("n"); n {
			case "missing":
				return "", "", fmt.Errorf("%w: no chat %s", runstream.ErrNotFound, n)
			case "theirs":
				return "", "", fmt.Errorf("%w: not your chat", runstream.ErrForbidden)
			case "dots":
				return "x", "a/../../b", nil
			case "slash":
				return "x/y", "default", nil
			}
			return "", "", errors.New("bad chat")
		}}))
	a.site = httptest.NewServer(mux)
	t.Cleanup(func() {
		a.site.Close()
		a.remote.Close()
		_ = e.Close(context.Background())
		_ = st.Close()
	})
	return a
}

func requireUser(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie("user"); err != nil || c.Value != "ada" {
			http.Error(w, "sign in", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// record is one ndjson record, as a browser's reader decodes it.
type record struct {
	Offset  int64  `json:"offset"`
	Kind    string `json:"kind"`
	Writer  string `json:"writer"`
	Attempt int64  `json:"attempt"`
	Seq     int64  `json:"seq"`
	From    int64  `json:"from"`
	Data    string `json:"data"`
}

func (r record) String() string {
	if r.Kind != "data" {
		return fmt.Sprintf("%s@%d", r.Kind, r.Attempt)
	}
	b, _ := base64.StdEncoding.DecodeString(r.Data)
	return fmt.Sprintf("%s@%d", b, r.Attempt)
}

func get(t *testing.T, u string, hdr ...string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// A browser that the app let through reads the run's records whole (the
// failed attempt's words, the abort that voids them, the retry's words,
// the commit and the close), at the app's route, with no weir token and
// none of its cookies reaching weir; the same through Remote.
func TestHandlerServesTheRunsRecords(t *testing.T) {
	for _, token := range []string{"", "s3cret"} {
		a := newApp(t, token)
		run, err := a.speak.Start(context.Background(), "hi", nil)
		if err != nil {
			t.Fatal(err)
		}
		close(a.gate)
		if _, err := a.e.Wait(context.Background(), run.ID); err != nil {
			t.Fatal(err)
		}
		want := "Hel@1 lo@1 abort@2 Hi@2  there@2 commit@2 close@0"
		for _, route := range []string{"/chat/", "/remote/"} {
			u := a.site.URL + route + run.ID + "/stream?offset=-1"
			if resp := get(t, u); resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("%s without the app's cookie: %d", route, resp.StatusCode)
			}
			resp := get(t, u, "Cookie", "user=ada; session=topsecret", "Authorization", "Bearer the-browsers")
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("%s (token %q): %d %s", route, token, resp.StatusCode, b)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
				t.Fatalf("%s: Content-Type %q", route, ct)
			}
			if resp.Header.Get("Stream-Next-Offset") == "" || resp.Header.Get("Set-Cookie") != "" {
				t.Fatalf("%s: headers %v", route, resp.Header)
			}
			var got []string
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				var r record
				if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
					t.Fatalf("%s: %q: %v", route, sc.Text(), err)
				}
				got = append(got, r.String())
			}
			if g := strings.Join(got, " "); g != want {
				t.Fatalf("%s (token %q):\n got %s\nwant %s", route, token, g, want)
			}
			h := <-a.seen
			if h.Get("Cookie") != "" || h.Get("Origin") != "" {
				t.Fatalf("the browser's cookies reached weir: %v", h)
			}
			if wantAuth := map[bool]string{true: "", false: "Bearer " + token}[token == ""]; h.Get("Authorization") != wantAuth {
				t.Fatalf("weir got Authorization %q, want %q", h.Get("Authorization"), wantAuth)
			}
		}
	}
}

// An SSE read through the route is live: the retry's words reach the
// browser while the step still runs, event by event, in process and
// through Remote.
func TestHandlerStreamsLive(t *testing.T) {
	a := newApp(t, "")
	run, err := a.speak.Start(context.Background(), "hi", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, route := range []string{"/chat/", "/remote/"} {
		resp := get(t, a.site.URL+route+run.ID+"/stream?offset=-1&live=sse", "Cookie", "user=ada")
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("%s: %d %q", route, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		// The failed attempt's records, and then the abort once the second
		// attempt writes... which it does only after the gate: until then
		// the reader must have "Hel" and "lo" live.
		lines := make(chan string)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if d, ok := strings.CutPrefix(sc.Text(), "data:"); ok && strings.Contains(d, `"kind"`) {
					lines <- d
				}
			}
		}()
		var got []string
		deadline := time.After(20 * time.Second)
		for len(got) < 2 {
			select {
			case l := <-lines:
				var r record
				if err := json.Unmarshal([]byte(l), &r); err != nil {
					t.Fatalf("%q: %v", l, err)
				}
				got = append(got, r.String())
			case <-deadline:
				t.Fatalf("%s: the first attempt's words never came live; got %v", route, got)
			}
		}
		if strings.Join(got, " ") != "Hel@1 lo@1" {
			t.Fatalf("%s: %v", route, got)
		}
		resp.Body.Close()
	}
	close(a.gate)
	if _, err := a.e.Wait(context.Background(), run.ID); err != nil {
		t.Fatal(err)
	}
}

// What a page sends that is not a read of records is refused before weir
// sees it, with a one-line reason; a Stream choice that would reach another
// stream too.
func TestHandlerRefuses(t *testing.T) {
	a := newApp(t, "")
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"POST", "/picked/x", http.StatusMethodNotAllowed},
		{"GET", "/picked/missing", http.StatusNotFound},
		{"GET", "/picked/theirs", http.StatusForbidden},
		{"GET", "/picked/other", http.StatusBadRequest},
		{"GET", "/picked/dots", http.StatusBadRequest},
		{"GET", "/picked/slash", http.StatusBadRequest},
		{"GET", "/chat/r1/stream?format=raw", http.StatusBadRequest},
		{"GET", "/chat/r1/stream?view=everything", http.StatusBadRequest},
		{"GET", "/chat/r1/stream?live=forever", http.StatusBadRequest},
		{"GET", "/chat/r1/stream?path=../x", http.StatusBadRequest},
		{"GET", "/chat/r1/stream?offset=-1&offset=0", http.StatusBadRequest},
		{"GET", "/chat/nosuchrun/stream?offset=-1", http.StatusNotFound},
	} {
		req, _ := http.NewRequest(c.method, a.site.URL+c.path, nil)
		req.Header.Set("Cookie", "user=ada")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || strings.Count(string(body), "\n") != 1 {
			t.Errorf("%s %s: %d %q, want %d and one line", c.method, c.path, resp.StatusCode, body, c.status)
		}
	}
	select {
	case h := <-a.seen:
		if h != nil {
			// Only the unknown run's read reached weir.
			select {
			case h2 := <-a.seen:
				t.Fatalf("weir saw two requests: %v %v", h, h2)
			default:
			}
		}
	default:
		t.Fatal("the unknown run's read never reached weir")
	}
}

func TestPath(t *testing.T) {
	for _, c := range []struct {
		run, name, want string
	}{
		{"r1", "default", "runs/r1/default"},
		{"r1", "a/b", "runs/r1/a/b"},
		{"", "default", ""},
		{"r/1", "default", ""},
		{"..", "default", ""},
		{"r1", "", ""},
		{"r1", "a//b", ""},
		{"r1", "../x", ""},
		{"r1", "a\x00", ""},
	} {
		got, err := runstream.Path(c.run, c.name)
		if got != c.want || (err == nil) != (c.want != "") {
			t.Errorf("Path(%q, %q) = %q, %v", c.run, c.name, got, err)
		}
	}
}
