package weircli

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir"
)

// myapp is a user's program as weircli sees it: its own workflow, its own
// name, none of weir's builtins. The workflow is the one a new user tries
// first: a step that streams 50 tokens and fails once midway, two parallel
// steps, and a hook a person answers with curl.
func myapp(thinkAttempts *atomic.Int64) *Config {
	type approval struct {
		OK bool `json:"ok"`
	}
	return &Config{Name: "myapp", Register: func(e *weir.Engine) error {
		weir.Register(e, "answer", func(ctx weir.Context, q string) (string, error) {
			n, err := weir.Step(ctx, "think", func(sc weir.StepContext) (int, error) {
				thinkAttempts.Add(1)
				w := sc.Stream("tokens")
				for i := range 50 {
					if _, err := fmt.Fprintf(w, "t%02d ", i); err != nil {
						return 0, err
					}
					if i == 24 && sc.Attempt() == 1 {
						return 0, errors.New("the model's connection dropped")
					}
				}
				return 50, nil
			})
			if err != nil {
				return "", err
			}
			a := weir.StepAsync(ctx, "search", func(weir.StepContext) (string, error) { return "found", nil })
			b := weir.StepAsync(ctx, "rank", func(weir.StepContext) (string, error) { return "ranked", nil })
			both, err := weir.All(ctx, a, b)
			if err != nil {
				return "", err
			}
			h, err := weir.NewHook[approval](ctx, "approve-"+ctx.RunID())
			if err != nil {
				return "", err
			}
			ok, err := h.Receive(ctx)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s: %d tokens, %s, approved=%v", q, n, strings.Join(both, "+"), ok.OK), nil
		})
		return nil
	}}
}

// launchApp runs cfg's `server` on a free port and the SQLite file db until
// the test ends, and returns its URL.
func launchApp(t *testing.T, cfg *Config, db string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut, code := &syncBuffer{}, &syncBuffer{}, make(chan int, 1)
	go func() {
		code <- Run(ctx, cfg, []string{"server", "--addr", "127.0.0.1:0", "--store", "sqlite:" + db}, out, errOut)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case c := <-code:
			if c != 0 {
				t.Errorf("%s server exited %d: %s", cfg.Name, c, errOut)
			}
			if !strings.Contains(out.String(), cfg.Name+" server: stopped") {
				t.Errorf("%s server did not say it stopped: %s", cfg.Name, out)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("%s server did not stop within 20s", cfg.Name)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := listening.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		select {
		case c := <-code:
			code <- c
			t.Fatalf("%s server exited %d: %s", cfg.Name, c, errOut)
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Fatalf("%s server did not start within 10s: %s %s", cfg.Name, out, errOut)
	return ""
}

// TestYourBinaryIsWeir: a program that registered its own workflow serves
// it through weircli's server: started over HTTP, its stream read over the
// Durable Streams protocol with each token once though the step was
// retried, its hook delivered over HTTP and with the program's own `runs
// hook`, its result read back; weir's demo is not there.
func TestYourBinaryIsWeir(t *testing.T) {
	var attempts atomic.Int64
	cfg := myapp(&attempts)
	url := launchApp(t, cfg, filepath.Join(t.TempDir(), "myapp.db"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var wfs struct{ Workflows []string }
	getJSON(ctx, t, url+"/v1/workflows", &wfs)
	if strings.Join(wfs.Workflows, ",") != "answer" {
		t.Fatalf("workflows %v, want only the program's: answer", wfs.Workflows)
	}

	// Start over HTTP.
	var run struct{ ID, Status string }
	postJSON(ctx, t, url+"/v1/runs", `{"workflow":"answer","input":"why"}`, &run)
	if run.ID == "" {
		t.Fatalf("POST /v1/runs: no run id")
	}

	// Follow the stream over HTTP from before its first token: the retry
	// adopted the failed attempt's 25 tokens, so a live reader sees each
	// of the 50 once, with no abort.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/stream/runs/"+run.ID+"/tokens?offset=-1&live=sse", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("SSE read: %s", resp.Status)
	}
	var got strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && got.Len() < 50*4 {
		// A run's stream is bytes: its SSE data events are base64.
		if data, ok := strings.CutPrefix(sc.Text(), "data:"); ok && !strings.HasPrefix(strings.TrimSpace(data), "{") {
			b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(data))
			if err != nil {
				t.Fatalf("SSE data %q: %v", data, err)
			}
			got.Write(b)
		}
	}
	var want strings.Builder
	for i := range 50 {
		fmt.Fprintf(&want, "t%02d ", i)
	}
	if got.String() != want.String() {
		t.Fatalf("the live stream over HTTP:\n%q\nwant each token once:\n%q", got.String(), want.String())
	}
	if n := attempts.Load(); n != 2 {
		t.Fatalf("think ran %d attempts, want 2 (one failed midway)", n)
	}

	// The run waits on its hook; deliver it with the program's own
	// command line, as a person would.
	token := "approve-" + run.ID
	waitUntil(t, 10*time.Second, "the run's hook "+token, func() bool {
		var hooks struct{ Hooks []struct{ Token string } }
		getJSON(ctx, t, url+"/v1/runs/"+run.ID+"/hooks", &hooks)
		return len(hooks.Hooks) == 1 && hooks.Hooks[0].Token == token
	})
	var out, errOut strings.Builder
	if code := Run(ctx, cfg, []string{"runs", "hook", token, "--data", `{"ok":true}`, "--url", url}, &out, &errOut); code != 0 {
		t.Fatalf("myapp runs hook: exit %d: %s%s", code, out.String(), errOut.String())
	}

	var done struct {
		Status string
		Output json.RawMessage
	}
	waitUntil(t, 10*time.Second, "the run to complete", func() bool {
		getJSON(ctx, t, url+"/v1/runs/"+run.ID, &done)
		return done.Status == "completed"
	})
	if want := `"why: 50 tokens, found+ranked, approved=true"`; string(done.Output) != want {
		t.Fatalf("output %s, want %s", done.Output, want)
	}

	// A hook over HTTP, as curl sends it: the run has ended, so the
	// delivery is refused, and says so.
	hreq, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/hooks/"+token, strings.NewReader(`{"ok":false}`))
	hreq.Header.Set("Content-Type", "application/json")
	hresp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	hresp.Body.Close()
	if hresp.StatusCode != http.StatusGone {
		t.Fatalf("a hook of an ended run: %s, want 410 Gone", hresp.Status)
	}
}

// TestYourBinaryIsWeirHookOverHTTP delivers the hook with a plain POST
// (curl's way) instead of the command line.
func TestYourBinaryIsWeirHookOverHTTP(t *testing.T) {
	var attempts atomic.Int64
	url := launchApp(t, myapp(&attempts), filepath.Join(t.TempDir(), "myapp.db"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var run struct{ ID string }
	postJSON(ctx, t, url+"/v1/runs", `{"workflow":"answer","input":"how"}`, &run)
	token := "approve-" + run.ID
	waitUntil(t, 15*time.Second, "the hook's delivery", func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/hooks/"+token, strings.NewReader(`{"ok":true}`))
		// curl -H 'Content-Type: application/json': a page of another
		// site cannot send that without asking first.
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode/100 != 2 {
			t.Fatalf("POST /v1/hooks/%s: %s %s", token, resp.Status, b)
		}
		return resp.StatusCode/100 == 2 // 404 until the run reaches its hook
	})
	var done struct {
		Status string
		Output json.RawMessage
	}
	waitUntil(t, 10*time.Second, "the run to complete", func() bool {
		getJSON(ctx, t, url+"/v1/runs/"+run.ID, &done)
		return done.Status == "completed"
	})
	if want := `"how: 50 tokens, found+ranked, approved=true"`; string(done.Output) != want {
		t.Fatalf("output %s, want %s", done.Output, want)
	}
}

// TestYourBinaryBadInput: the mistakes a new user makes get an error that
// names the fix.
func TestYourBinaryBadInput(t *testing.T) {
	db := filepath.Join(t.TempDir(), "myapp.db")
	var attempts atomic.Int64
	launchApp(t, myapp(&attempts), db)

	// A second process (here: a second server) on the SQLite file the
	// first one holds.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errOut strings.Builder
	code := Run(ctx, myapp(&attempts), []string{"server", "--addr", "127.0.0.1:0", "--store", "sqlite:" + db}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "in use") || !strings.Contains(errOut.String(), "PostgreSQL") ||
		!strings.Contains(errOut.String(), "Deployment shapes") {
		t.Fatalf("a second server on a held SQLite file: exit %d %q; want the error and the way out", code, errOut.String())
	}

	// A workflow registered twice.
	twice := &Config{Name: "twice", Register: func(e *weir.Engine) error {
		for range 2 {
			weir.Register(e, "w", func(weir.Context, int) (int, error) { return 0, nil })
		}
		return nil
	}}
	errOut.Reset()
	code = Run(ctx, twice, []string{"server", "--addr", "127.0.0.1:0", "--store", "sqlite:" + filepath.Join(t.TempDir(), "t.db")}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), `"w" registered twice`) || !strings.Contains(errOut.String(), "WorkflowOf") {
		t.Fatalf("a workflow registered twice: exit %d %q", code, errOut.String())
	}

	// A worker with no workflows.
	none := &Config{Name: "none", Register: func(*weir.Engine) error { return nil }}
	errOut.Reset()
	code = Run(ctx, none, []string{"worker", "--store", "sqlite:" + filepath.Join(t.TempDir(), "n.db")}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "no workflow is registered") || !strings.Contains(errOut.String(), "Config.Register") {
		t.Fatalf("a worker with no workflows: exit %d %q", code, errOut.String())
	}
}

func getJSON(ctx context.Context, t *testing.T, url string, v any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	doJSON(t, req, v)
}

func postJSON(ctx context.Context, t *testing.T, url, body string, v any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	doJSON(t, req, v)
}

func doJSON(t *testing.T, req *http.Request, v any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s %s", req.Method, req.URL, resp.Status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s %s: %v: %s", req.Method, req.URL, err, b)
	}
}

// waitUntil polls cond until it holds, or fails the test naming what did
// not happen within d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
