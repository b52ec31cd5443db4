package weircli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/weirhq/weir/delivery"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var listening = regexp.MustCompile(`listening on (http://\S+)`)

// startServer runs `weir server` on a free port and a fresh SQLite file
// until the test ends, and returns its URL.
func startServer(t *testing.T, args ...string) string {
	t.Helper()
	srv := launchServer(t, filepath.Join(t.TempDir(), "weir.db"), args...)
	t.Cleanup(func() { srv.stop(t) })
	return srv.url
}

// runningServer is a `weir server` started by launchServer.
type runningServer struct {
	url     string
	cancel  context.CancelFunc
	code    chan int
	out     *syncBuffer
	errOut  *syncBuffer
	stopped bool
}

// launchServer runs `weir server` on a free port and the SQLite file db.
func launchServer(t *testing.T, db string, args ...string) *runningServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &runningServer{cancel: cancel, code: make(chan int, 1), out: &syncBuffer{}, errOut: &syncBuffer{}}
	args = append([]string{"server", "--addr", "127.0.0.1:0", "--store", "sqlite:" + db}, args...)
	go func() { s.code <- run(ctx, args, s.out, s.errOut) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := listening.FindStringSubmatch(s.out.String()); m != nil {
			s.url = m[1]
			return s
		}
		select {
		case c := <-s.code:
			cancel()
			t.Fatalf("weir server exited %d: %s", c, s.errOut.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	t.Fatalf("weir server did not start: %s %s", s.out.String(), s.errOut.String())
	return nil
}

// stop stops the server as SIGTERM does and checks it exits cleanly.
func (s *runningServer) stop(t *testing.T) time.Duration {
	t.Helper()
	if s.stopped {
		return 0
	}
	s.stopped = true
	start := time.Now()
	s.cancel()
	select {
	case c := <-s.code:
		if c != 0 {
			t.Errorf("weir server exited %d: %s", c, s.errOut.String())
		}
		if !strings.Contains(s.out.String(), "weir server: stopped") {
			t.Errorf("weir server did not say it stopped: %s", s.out.String())
		}
	case <-time.After(20 * time.Second):
		t.Error("weir server did not stop")
	}
	return time.Since(start)
}

// runWeir runs the command with args and returns its exit code and output.
func runWeir(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func mustWeir(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runWeir(t, args...)
	if code != 0 {
		t.Fatalf("weir %s: exit %d: %s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func TestServerAndRunsCommands(t *testing.T) {
	url := startServer(t, "--long-poll-timeout", "1s")
	t.Setenv("WEIR_URL", url)

	out := mustWeir(t, "runs", "start", "demo.tokens", "--input", `{"text":"alpha beta gamma","fail_after":2}`, "--wait")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "run_") || lines[1] != `{"tokens":3,"attempts":2}` {
		t.Fatalf("runs start --wait printed %q", out)
	}
	id := lines[0]

	// --url as a flag works as well as $WEIR_URL.
	out = mustWeir(t, "runs", "ls", "--url", url)
	if !strings.Contains(out, id) || !strings.Contains(out, "completed") || !strings.HasPrefix(out, "ID") {
		t.Fatalf("runs ls:\n%s", out)
	}
	out = mustWeir(t, "runs", "ls", "--json", "--status", "completed")
	var page struct {
		Runs []struct{ ID string } `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Runs) != 1 || page.Runs[0].ID != id {
		t.Fatalf("runs ls --json: %v %q", err, out)
	}
	out = mustWeir(t, "runs", "show", id)
	for _, want := range []string{"status    completed", "step_failed", "run_completed", "tokens", "weir stream cat " + id + " tokens"} {
		if !strings.Contains(out, want) {
			t.Fatalf("runs show lacks %q:\n%s", want, out)
		}
	}
	out = mustWeir(t, "runs", "cancel", id)
	if !strings.Contains(out, "completed already") {
		t.Fatalf("runs cancel of a finished run: %q", out)
	}

	// The same Idempotency-Key starts one run.
	a := mustWeir(t, "runs", "start", "demo.tokens", "--idempotency-key", "k", "--input", `{"text":"x"}`)
	b := mustWeir(t, "runs", "start", "demo.tokens", "--idempotency-key", "k", "--input", `{"text":"x"}`)
	if a != b {
		t.Fatalf("one key, two runs: %q %q", a, b)
	}
	code, _, errOut := runWeir(t, "runs", "start", "demo.tokens", "--idempotency-key", "k", "--input", `{"text":"y"}`)
	if code != 1 || !strings.Contains(errOut, "422") {
		t.Fatalf("key reused with another input: exit %d %q", code, errOut)
	}

	// Errors are one line and exit 1.
	code, _, errOut = runWeir(t, "runs", "show", "nope")
	if code != 1 || !strings.Contains(errOut, "not found") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("runs show nope: exit %d %q", code, errOut)
	}
	code, _, errOut = runWeir(t, "runs", "start", "nope")
	if code != 1 || !strings.Contains(errOut, "unknown workflow") {
		t.Fatalf("runs start nope: exit %d %q", code, errOut)
	}
}

func TestServerWithToken(t *testing.T) {
	url := startServer(t, "--token", "s3cret-s3cret-s3cret")
	code, _, errOut := runWeir(t, "runs", "start", "demo.tokens", "--url", url)
	if code != 1 || !strings.Contains(errOut, "401") {
		t.Fatalf("start without the token: exit %d %q", code, errOut)
	}
	mustWeir(t, "runs", "ls", "--url", url) // reads are open on loopback
	t.Setenv("WEIR_TOKEN", "s3cret-s3cret-s3cret")
	mustWeir(t, "runs", "start", "demo.tokens", "--url", url, "--input", `{"text":"a"}`)
}

// A token can come from a file, out of the process's command line (and
// so out of ps and /proc/PID/cmdline); a read token reads and writes
// nothing.
func TestServerTokenFiles(t *testing.T) {
	dir := t.TempDir()
	tokenFile, readFile := filepath.Join(dir, "token"), filepath.Join(dir, "read-token")
	if err := os.WriteFile(tokenFile, []byte("write-write-write-write\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(readFile, []byte("read-read-read-read-read\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WEIR_TOKEN", "")
	url := startServer(t, "--token-file", tokenFile, "--read-token-file", readFile)
	t.Setenv("WEIR_TOKEN", "read-read-read-read-read")
	code, _, errOut := runWeir(t, "runs", "start", "demo.tokens", "--url", url, "--input", `{"text":"a"}`)
	if code != 1 || !strings.Contains(errOut, "reads only") {
		t.Fatalf("start with the read token: exit %d %q", code, errOut)
	}
	t.Setenv("WEIR_TOKEN", "write-write-write-write")
	mustWeir(t, "runs", "start", "demo.tokens", "--url", url, "--input", `{"text":"a"}`)
}

func TestServerRefusesWeakTokens(t *testing.T) {
	t.Setenv("WEIR_TOKEN", "")
	t.Setenv("WEIR_READ_TOKEN", "")
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	long := "0123456789abcdef"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--token", "s3cret"}, "at least 16"},
		{[]string{"--token", long, "--read-token", "short"}, "at least 16"},
		{[]string{"--read-token", long}, "needs a token"},
		{[]string{"--token", long, "--read-token", long}, "must differ"},
		{[]string{"--token", long, "--token-file", empty}, "not both"},
		{[]string{"--token-file", empty}, "is empty"},
		{[]string{"--token-file", filepath.Join(dir, "missing")}, "no such file"},
	} {
		args := append([]string{"server", "--addr", "127.0.0.1:0", "--store", "sqlite:" + filepath.Join(dir, "w.db")}, c.args...)
		code, _, errOut := runWeir(t, args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d %q, want an error saying %q", c.args, code, errOut, c.want)
		}
	}
	t.Setenv("WEIR_TOKEN", "short")
	if code, _, errOut := runWeir(t, "server", "--addr", "127.0.0.1:0", "--store", "sqlite:"+filepath.Join(dir, "w.db")); code == 0 || !strings.Contains(errOut, "at least 16") {
		t.Errorf("a short $WEIR_TOKEN: exit %d %q", code, errOut)
	}
}

func TestServerRefusesOpenBindWithoutToken(t *testing.T) {
	t.Setenv("WEIR_TOKEN", "")
	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		code, _, errOut := runWeir(t, "server", "--addr", addr, "--store", "sqlite:"+filepath.Join(t.TempDir(), "w.db"))
		if code != 1 || !strings.Contains(errOut, "refusing to listen") || !strings.Contains(errOut, "token") {
			t.Fatalf("--addr %s without a token: exit %d %q", addr, code, errOut)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"nope"},
		{"runs"},
		{"runs", "frob"},
		{"runs", "show"},
		{"runs", "ls", "--status", "done"},
		{"runs", "ls", "--bogus"},
		{"runs", "start", "demo.tokens", "--input", "{"},
		{"stream"},
		{"stream", "cat", "run"},
		{"stream", "tail", "r", "n", "--view", "sideways"},
		{"stream", "cat", "r", "n", "--from", "-1"},
		{"server", "--addr", "nope"},
		{"server", "extra"},
		{"runs", "ls", "--url", "ftp://x"},
	} {
		code, _, errOut := runWeir(t, args...)
		if code != 2 || errOut == "" {
			t.Errorf("weir %s: exit %d, want 2; stderr %q", strings.Join(args, " "), code, errOut)
		}
	}
	if code, _, _ := runWeir(t, "runs", "ls", "-h"); code != 0 {
		t.Errorf("-h: exit %d", code)
	}
}

func TestStoreSpecs(t *testing.T) {
	ctx := context.Background()
	for _, spec := range []string{"", "mysql://x", "sqlite:", "sqlite:?synchronous=OFF", "sqlite:x.db?bogus=1", "sqlite:x.db?synchronous=SOMETIMES", "sqlite:x.db?%zz"} {
		if s, err := openStore(ctx, spec); err == nil {
			s.Close()
			t.Errorf("--store %q opened", spec)
		}
	}
	dir := t.TempDir()
	for _, spec := range []string{"sqlite:" + filepath.Join(dir, "a.db"), "sqlite:" + filepath.Join(dir, "b.db") + "?synchronous=normal", filepath.Join(dir, "c.db")} {
		s, err := openStore(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:4437": true, "[::1]:1": true, "localhost:1": true, "127.1.2.3:1": true,
		"0.0.0.0:1": false, ":1": false, "[::]:1": false, "10.0.0.1:1": false,
	} {
		got, err := isLoopback(addr)
		if err != nil || got != want {
			t.Errorf("isLoopback(%q) = %v, %v; want %v", addr, got, err, want)
		}
	}
}

func TestStreamCommands(t *testing.T) {
	url := startServer(t, "--long-poll-timeout", "1s")
	t.Setenv("WEIR_URL", url)
	text := "tail follows the tokens as the step writes them"
	id := strings.TrimSpace(mustWeir(t, "runs", "start", "demo.tokens", "--input", `{"text":"`+text+`","fail_after":3,"delay":10000000}`))

	// tail starts before the stream exists and follows it to its close.
	for _, args := range [][]string{{}, {"--sse"}, {"--view", "committed"}} {
		code, out, errOut := runWeir(t, append([]string{"stream", "tail", id, "tokens"}, args...)...)
		if code != 0 || out != text {
			t.Fatalf("stream tail %v: exit %d, %q %s", args, code, out, errOut)
		}
	}
	code, out, errOut := runWeir(t, "stream", "cat", id, "tokens")
	if code != 0 || out != text || !strings.Contains(errOut, "[commit at") {
		t.Fatalf("stream cat: exit %d %q %q", code, out, errOut)
	}
	out = mustWeir(t, "stream", "cat", id, "tokens", "--records", "--from", "2")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "2\tdata\tstep/1\t") || !strings.HasPrefix(lines[len(lines)-1], strconv.Itoa(len(lines)+1)+"\tclose") {
		t.Fatalf("--records --from 2:\n%s", out)
	}
	out = mustWeir(t, "stream", "cat", id, "status", "--view", "committed")
	if out != fmt.Sprintf("generated %d tokens in 2 attempts", len(strings.Fields(text))) {
		t.Fatalf("status stream %q", out)
	}
	code, _, errOut = runWeir(t, "stream", "cat", "nope", "tokens")
	if code != 1 || !strings.Contains(errOut, "404") {
		t.Fatalf("stream cat of an unknown run: exit %d %q", code, errOut)
	}
	// A name the ended run has no stream by: an error naming the ones it
	// has, where it used to exit 0 having printed nothing.
	for _, sub := range []string{"tail", "cat"} {
		code, out, errOut = runWeir(t, "stream", sub, id, "wrong-name")
		if code != 1 || out != "" || !strings.Contains(errOut, `has no stream "wrong-name"; its streams: `) || !strings.Contains(errOut, "tokens") {
			t.Fatalf("stream %s RUN wrong-name: exit %d %q %q", sub, code, out, errOut)
		}
	}
}

// A client command against a server that is not there says what to do.
func TestRefusedConnectionHint(t *testing.T) {
	for _, args := range [][]string{{"runs", "ls"}, {"stream", "cat", "r", "s"}, {"runs", "watch", "r"}} {
		code, _, errOut := runWeir(t, append(args, "--url", "http://127.0.0.1:1")...)
		if code != 1 || !strings.Contains(errOut, "connection refused") || !strings.Contains(errOut, "start one (weir server), or point --url (or $WEIR_URL) at yours") {
			t.Fatalf("weir %v against nothing: exit %d %q", args, code, errOut)
		}
	}
}

// weir runs watch shows a run's progress live (its step's failed attempt,
// the retry, the end) and exits with the run's outcome.
func TestRunsWatch(t *testing.T) {
	url := startServer(t)
	t.Setenv("WEIR_URL", url)
	id := strings.TrimSpace(mustWeir(t, "runs", "start", "demo.tokens", "--input", `{"text":"watch the retry happen","fail_after":2,"delay":5000000}`))
	code, out, errOut := runWeir(t, "runs", "watch", id, "--interval", "20ms")
	if code != 0 {
		t.Fatalf("runs watch: exit %d %s %s", code, out, errOut)
	}
	for _, want := range []string{"step_started", "step_failed", `attempt 2`, "run_completed", "completed in "} {
		if !strings.Contains(out, want) {
			t.Fatalf("runs watch printed no %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^\s+\+\d+\.\d{3}s  step_started`).MatchString(out) {
		t.Fatalf("runs watch lines are not stamped from the run's start:\n%s", out)
	}
	// A run waiting on a hook says so, with the command that delivers to it.
	hook := strings.TrimSpace(mustWeir(t, "runs", "start", "demo.approval", "--input", `{"token":"order-watch-9"}`))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var buf syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"runs", "watch", hook, "--interval", "20ms"}, &buf, io.Discard) }()
	waitUntil(t, 10*time.Second, "watch saying the run waits on its hook", func() bool {
		return strings.Contains(buf.String(), "waiting") && strings.Contains(buf.String(), "weir runs hook ")
	})
	m := regexp.MustCompile(`hook "([^"]+)"`).FindStringSubmatch(buf.String())
	if m == nil {
		t.Fatalf("no hook token in %q", buf.String())
	}
	mustWeir(t, "runs", "hook", m[1], "--data", `{"approved":true}`)
	if c := <-done; c != 0 {
		t.Fatalf("runs watch of the approval run: exit %d:\n%s", c, buf.String())
	}
}

// weir stream ls lists the standalone streams, all pages, with their size;
// --max-stream-bytes and --max-streams refuse what is past them.
func TestStreamList(t *testing.T) {
	url := startServer(t, "--max-streams", "3", "--max-stream-bytes", "5")
	t.Setenv("WEIR_URL", url)
	put := func(path, body string) int {
		t.Helper()
		method := http.MethodPut
		if body != "" {
			method = http.MethodPost
		}
		req, _ := http.NewRequest(method, url+"/v1/stream/"+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "text/plain")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, p := range []string{"logs/b", "logs/a", "other"} {
		if code := put(p, ""); code != http.StatusCreated {
			t.Fatalf("PUT %s: %d", p, code)
		}
	}
	if code := put("logs/a", "hello"); code != http.StatusNoContent {
		t.Fatalf("append: %d", code)
	}
	if code := put("logs/a", "!"); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("append past --max-stream-bytes: %d, want 413", code)
	}
	if code := put("more", ""); code != http.StatusInsufficientStorage {
		t.Fatalf("create past --max-streams: %d, want 507", code)
	}
	out := mustWeir(t, "stream", "ls", "--prefix", "logs/")
	if want := "logs/a\t1\t5\topen\ttext/plain\nlogs/b\t0\t0\topen\ttext/plain\n"; out != want {
		t.Fatalf("stream ls --prefix logs/:\n%q, want\n%q", out, want)
	}
	if out := mustWeir(t, "stream", "ls", "--limit", "1"); !strings.HasPrefix(out, "logs/a\t") || strings.Count(out, "\n") != 1 {
		t.Fatalf("stream ls --limit 1: %q", out)
	}
}

// SIGTERM drains: a long-poll in progress ends at once rather than at its
// timeout, the server exits promptly, and what it acknowledged is there
// when it starts again on the same file.
func TestServerShutdownDrainsAndLosesNothing(t *testing.T) {
	db := filepath.Join(t.TempDir(), "weir.db")
	srv := launchServer(t, db, "--long-poll-timeout", "30s")
	defer srv.stop(t)
	do := func(method, url, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "text/plain")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	stream := srv.url + "/v1/stream/drain-test"
	if resp, body := do("PUT", stream, ""); resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT: %d %s", resp.StatusCode, body)
	}
	for _, chunk := range []string{"acknowledged ", "before ", "the stop"} {
		if resp, body := do("POST", stream, chunk); resp.StatusCode/100 != 2 {
			t.Fatalf("POST: %d %s", resp.StatusCode, body)
		}
	}
	resp, _ := do("GET", stream+"?offset=-1", "")
	tail := resp.Header.Get("Stream-Next-Offset")

	// A long-poll at the tail waits for data that never comes.
	polled := make(chan int, 1)
	go func() {
		resp, err := http.Get(stream + "?offset=" + tail + "&live=long-poll")
		if err != nil {
			polled <- -1
			return
		}
		resp.Body.Close()
		polled <- resp.StatusCode
	}()
	// Stop only once the long-poll waits at the tail (/metrics says so).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, metrics := do("GET", srv.url+"/metrics", "")
		if strings.Contains(metrics, `weir_stream_open_readers{mode="long-poll"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the long-poll never opened:\n%s", metrics)
		}
	}
	if d := srv.stop(t); d > 10*time.Second {
		t.Fatalf("the stop took %v with a long-poll open", d)
	}
	select {
	case <-polled: // answered (204) or cut: either way, not held for 30 s
	case <-time.After(5 * time.Second):
		t.Fatal("the long-poll was still open after the server stopped")
	}

	again := launchServer(t, db)
	defer again.stop(t)
	req, _ := http.NewRequest("GET", again.url+"/v1/stream/drain-test?offset=-1", nil)
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Body.Close()
	b, _ := io.ReadAll(r2.Body)
	if string(b) != "acknowledged before the stop" {
		t.Fatalf("after a restart the stream holds %q", b)
	}
}

// A World run (a Vercel Workflow run on weir's World) lists with the Go
// runs, marked, and shows its World event log.
func TestRunsCommandsShowWorldRuns(t *testing.T) {
	url := startServer(t, "--world-secret", "cli-test-secret-0123456789")
	t.Setenv("WEIR_URL", url)
	post := func(path, body string) map[string]any {
		t.Helper()
		res, err := http.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != 200 {
			t.Fatalf("POST %s: %d %v", path, res.StatusCode, err)
		}
		return out
	}
	created := post("/v1/world/runs/-/events", `{"eventType":"run_created","eventData":{"deploymentId":"d","workflowName":"wf//agent","input":[]}}`)
	id := created["run"].(map[string]any)["runId"].(string)
	post("/v1/world/runs/"+id+"/events", `{"eventType":"run_started"}`)
	post("/v1/world/runs/"+id+"/events", `{"eventType":"step_created","correlationId":"step_1","eventData":{"stepName":"s"}}`)
	out := mustWeir(t, "runs", "ls")
	if !strings.Contains(out, id) || !strings.Contains(out, "world") || !strings.Contains(out, "KIND") {
		t.Fatalf("runs ls:\n%s", out)
	}
	out = mustWeir(t, "runs", "show", id)
	for _, want := range []string{"Vercel Workflow run", "run_created", "run_started", "step_created", "step_1"} {
		if !strings.Contains(out, want) {
			t.Fatalf("runs show lacks %q:\n%s", want, out)
		}
	}
	mustWeir(t, "runs", "cancel", id)
	if out := mustWeir(t, "runs", "show", id); !strings.Contains(out, "run_cancelled") {
		t.Fatalf("after cancel:\n%s", out)
	}
}

func TestServerNoDemo(t *testing.T) {
	url := startServer(t, "--no-demo")
	code, _, errOut := runWeir(t, "runs", "start", "demo.tokens", "--url", url)
	if code != 1 || !strings.Contains(errOut, "unknown workflow") {
		t.Fatalf("the demo on a --no-demo server: exit %d %q", code, errOut)
	}
}

// weir runs hook delivers a payload to a waiting run's hook (the demo's
// approval), once: sent again with its key it adds nothing; runs show
// lists the hook.
func TestRunsSignal(t *testing.T) {
	url := startServer(t)
	t.Setenv("WEIR_URL", url)
	id := strings.TrimSpace(mustWeir(t, "runs", "start", "demo.approval", "--input", `{"token":"order-7"}`))
	deadline := time.Now().Add(10 * time.Second)
	var out string
	for {
		code, o, errOut := runWeir(t, "runs", "hook", "order-7", "--data", `{"ok":true}`, "--key", "k1")
		if code == 0 {
			out = o
			break
		}
		if !strings.Contains(errOut, "404") || time.Now().After(deadline) {
			t.Fatalf("runs hook: exit %d %q", code, errOut)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(out, "run "+id+": payload 1 of hook order-7") {
		t.Fatalf("runs hook: %q", out)
	}
	if again := mustWeir(t, "runs", "hook", "order-7", "--data", `{"ok":true}`, "--key", "k1"); !strings.Contains(again, "nothing added") {
		t.Fatalf("runs hook again: %q", again)
	}
	mustWeir(t, "runs", "start", "demo.approval", "--wait", "--id", "unused-"+id[:8], "--input", `{"timeout":1000000}`)
	show := mustWeir(t, "runs", "show", id)
	if !strings.Contains(show, "hooks (1):") || !strings.Contains(show, "order-7") || !strings.Contains(show, "hook_received") {
		t.Fatalf("runs show:\n%s", show)
	}
	if code, _, errOut := runWeir(t, "runs", "hook", "order-7", "--data", "{bad"); code != 2 || !strings.Contains(errOut, "not JSON") {
		t.Fatalf("runs hook --data {bad: exit %d %q", code, errOut)
	}
}

// weir runs send delivers messages to a run (the demo's chat), once with
// its key; weir runs event reads the run's status and waits for the next;
// runs show lists the topic and the run event.
func TestRunsSendAndEvent(t *testing.T) {
	url := startServer(t)
	t.Setenv("WEIR_URL", url)
	id := strings.TrimSpace(mustWeir(t, "runs", "start", "demo.chat"))
	if out := mustWeir(t, "runs", "event", id, "status", "--wait", "10s"); !strings.Contains(out, `"waiting"`) {
		t.Fatalf("runs event: %q", out)
	}
	out := mustWeir(t, "runs", "send", id, "user", "--data", `{"text":"hello"}`, "--key", "m1")
	if !strings.Contains(out, "run "+id+": message on \"user\"") {
		t.Fatalf("runs send: %q", out)
	}
	if again := mustWeir(t, "runs", "send", id, "user", "--data", `{"text":"hello"}`, "--key", "m1"); !strings.Contains(again, "nothing added") {
		t.Fatalf("runs send again: %q", again)
	}
	if code, _, errOut := runWeir(t, "runs", "send", id, "user", "--data", `{"text":"other"}`, "--key", "m1"); code != 1 || !strings.Contains(errOut, "422") {
		t.Fatalf("a key reused: exit %d %q", code, errOut)
	}
	mustWeir(t, "runs", "send", id, "user", "--data", `{"text":"bye"}`)
	mustWeir(t, "runs", "start", "demo.tokens", "--wait", "--input", `{"text":"x"}`) // any run's end: the chat's follows
	deadline := time.Now().Add(10 * time.Second)
	for {
		ev := mustWeir(t, "runs", "event", id, "status", "--json")
		if strings.Contains(ev, `"done"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the chat never said done: %q", ev)
		}
		time.Sleep(20 * time.Millisecond)
	}
	show := mustWeir(t, "runs", "show", id)
	if !strings.Contains(show, "messages (1 topics):") || !strings.Contains(show, "2 received") || !strings.Contains(show, "run events (1):") {
		t.Fatalf("runs show:\n%s", show)
	}
	if code, _, errOut := runWeir(t, "runs", "send", id, "user", "--data", "{bad"); code != 2 || !strings.Contains(errOut, "not JSON") {
		t.Fatalf("runs send --data {bad: exit %d %q", code, errOut)
	}
	if code, _, errOut := runWeir(t, "runs", "send", "nope", "user"); code != 1 || !strings.Contains(errOut, "404") {
		t.Fatalf("runs send to an unknown run: exit %d %q", code, errOut)
	}
}

// A World run whose app weir cannot reach says so in `weir runs show`, with
// what to check; weir's log warns of it at once, with the same hint.
func TestRunsShowSaysWhyAWorldRunWaits(t *testing.T) {
	const secret = "cli-test-secret-0123456789"
	srv := launchServer(t, filepath.Join(t.TempDir(), "weir.db"), "--world-secret", secret)
	t.Cleanup(func() { srv.stop(t) })
	t.Setenv("WEIR_URL", srv.url)
	post := func(path, body string) map[string]any {
		t.Helper()
		res, err := http.Post(srv.url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != 200 {
			t.Fatalf("POST %s: %d %v", path, res.StatusCode, err)
		}
		return out
	}
	created := post("/v1/world/runs/-/events", `{"eventType":"run_created","eventData":{"deploymentId":"d","workflowName":"wf//agent","input":[]}}`)
	id := created["run"].(map[string]any)["runId"].(string)
	if out := mustWeir(t, "runs", "show", id); !strings.Contains(out, "no delivery is queued for it") {
		t.Fatalf("runs show of a run nothing was queued for:\n%s", out)
	}
	// The app is not there: nothing listens on port 1.
	const target = "http://127.0.0.1:1"
	post("/v1/world/queue", `{"queueName":"__wkf_workflow_wf//agent","payload":{"runId":"`+id+`"},"target":"`+target+
		`","targetSignature":"`+delivery.SignTarget([]byte(secret), target)+`"}`)
	deadline := time.Now().Add(15 * time.Second)
	for {
		out := mustWeir(t, "runs", "show", id)
		if strings.Contains(out, "weir cannot deliver to the app at "+target) {

			for _, want := range []string{"connection refused", "is the app running", "deliveries to the app (1 pending, 0 dead)"} {
				if !strings.Contains(out, want) {
					t.Fatalf("runs show lacks %q:\n%s", want, out)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs show never said why the run waits:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if log := srv.errOut.String(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "the app did not take a delivery") ||
		!strings.Contains(log, "is the app running") {
		t.Fatalf("weir's log has no warning of it:\n%s", log)
	}
}

// run is weir's own command line (cmd/weir's).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return Run(ctx, &Config{Name: "weir", Builtin: true}, args, stdout, stderr)
}

// weir limiters set, ls and show against a server; bad bounds are refused
// with the server's reason and exit 1; no subcommand is a usage error.
func TestLimitersCommands(t *testing.T) {
	url := startServer(t, "--long-poll-timeout", "1s")
	t.Setenv("WEIR_URL", url)
	out := mustWeir(t, "limiters", "set", "openai", "--concurrency", "4", "--rate", "60", "--period", "1m")
	if !regexp.MustCompile(`(?m)^openai\s+4\s+-\s+60\s+-\s+1m0s\s+0\s+0\s+0\s+0\s+0$`).MatchString(out) {
		t.Fatalf("limiters set printed:\n%s", out)
	}
	mustWeir(t, "limiters", "set", "tokens", "--budget", "100000", "--period", "1m")
	out = mustWeir(t, "limiters", "ls")
	if !strings.Contains(out, "openai") || !strings.Contains(out, "100000") || strings.Count(out, "\n") != 3 {
		t.Fatalf("limiters ls printed:\n%s", out)
	}
	if out := mustWeir(t, "limiters", "show", "tokens"); !strings.Contains(out, "tokens") {
		t.Fatalf("limiters show printed:\n%s", out)
	}
	code, _, errOut := runWeir(t, "limiters", "set", "openai", "--rate", "5")
	if code != 1 || !strings.Contains(errOut, "period") {
		t.Fatalf("a rate without a period: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runWeir(t, "limiters", "show", "nope"); code != 1 || !strings.Contains(errOut, "nope") {
		t.Fatalf("show of no limiter: exit %d, %s", code, errOut)
	}
	if code, _, _ := runWeir(t, "limiters"); code != 2 {
		t.Fatalf("limiters with no subcommand: exit %d", code)
	}

	// A queue: runs start in it, a dedupe key folds a second start.
	mustWeir(t, "limiters", "set", "q", "--concurrency", "1", "--per-key", "1")
	code, first, errOut := runWeir(t, "runs", "start", "demo.tokens", "--queue", "q", "--queue-key", "acme", "--dedupe", "doc-1", "--debounce", "1h")
	if code != 0 || !strings.Contains(errOut, `waits in queue "q"`) {
		t.Fatalf("runs start --queue: exit %d, %s %s", code, first, errOut)
	}
	code, second, errOut := runWeir(t, "runs", "start", "demo.tokens", "--queue", "q", "--dedupe", "doc-1", "--debounce", "1h")
	if code != 0 || second != first || !strings.Contains(errOut, "folded into run") {
		t.Fatalf("a deduped start: exit %d, %q (first %q), %s", code, second, first, errOut)
	}
	if out := mustWeir(t, "runs", "show", strings.TrimSpace(first)); !strings.Contains(out, "queue     q (key acme, dedupe doc-1): queued, not yet admitted") ||
		!strings.Contains(out, `its turn in the queue "q": 0 ahead (debounced`) {
		t.Fatalf("runs show of a queued run printed:\n%s", out)
	}
	if out := mustWeir(t, "limiters", "show", "q"); !regexp.MustCompile(`(?m)^q\s+1\s+1\s+.*\s1\s+0\s+0$`).MatchString(out) {
		t.Fatalf("limiters show q printed:\n%s", out)
	}
	if code, _, _ := runWeir(t, "runs", "start", "demo.tokens", "--priority", "2"); code != 2 {
		t.Fatalf("--priority without --queue: exit %d", code)
	}
	if code, _, errOut := runWeir(t, "runs", "start", "demo.tokens", "--queue", "nope"); code != 1 || !strings.Contains(errOut, "nope") {
		t.Fatalf("an unknown queue: exit %d, %s", code, errOut)
	}
}

// weir schedules: set, a tick's run on the server, ls, show, pause,
// resume, rm; bad input a usage error (2) or the server's (1).
func TestSchedulesCommands(t *testing.T) {
	url := startServer(t, "--long-poll-timeout", "1s")
	t.Setenv("WEIR_URL", url)
	out := mustWeir(t, "schedules", "set", "tok", "--workflow", "demo.tokens", "--spec", "@every 200ms", "--input", `{"text":"a b"}`, "--overlap", "allow", "--backfill", "2s")
	if !regexp.MustCompile(`(?m)^tok\s+demo\.tokens\s+@every 200ms\s+UTC\s+allow\s+active\s+\S+\s+-\s+0\s+0$`).MatchString(out) {
		t.Fatalf("schedules set printed:\n%s", out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !regexp.MustCompile(`sched:tok:\S+\s+[1-9]`).MatchString(out) {
		if time.Now().After(deadline) {
			t.Fatalf("no tick started within 20s:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
		out = mustWeir(t, "schedules", "show", "tok")
	}
	mustWeir(t, "schedules", "set", "nightly", "--workflow", "demo.tokens", "--spec", "0 3 * * *", "--tz", "Europe/Paris", "--paused")
	out = mustWeir(t, "schedules", "ls")
	if !regexp.MustCompile(`(?m)^nightly\s+demo\.tokens\s+0 3 \* \* \*\s+Europe/Paris\s+skip\s+paused\s+-`).MatchString(out) || !strings.Contains(out, "tok") {
		t.Fatalf("schedules ls printed:\n%s", out)
	}
	if out := mustWeir(t, "schedules", "pause", "tok"); !strings.Contains(out, "paused") {
		t.Fatalf("schedules pause printed:\n%s", out)
	}
	if out := mustWeir(t, "schedules", "resume", "nightly"); !regexp.MustCompile(`nightly\s+demo\.tokens.*active\s+\d{4}-`).MatchString(out) {
		t.Fatalf("schedules resume printed:\n%s", out)
	}
	if out := mustWeir(t, "schedules", "rm", "tok"); !strings.Contains(out, "deleted schedule tok") {
		t.Fatalf("schedules rm printed:\n%s", out)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"schedules"}, 2, "subcommand"},
		{[]string{"schedules", "set", "x", "--spec", "@daily"}, 2, "--workflow"},
		{[]string{"schedules", "set", "x", "--workflow", "w", "--spec", "@daily", "--input", "{"}, 2, "JSON"},
		{[]string{"schedules", "set", "x", "--workflow", "w", "--spec", "61 * * * *"}, 1, "minute"},
		{[]string{"schedules", "set", "x", "--workflow", "w", "--spec", "@daily", "--tz", "Nowhere/Land"}, 1, "Nowhere/Land"},
		{[]string{"schedules", "show", "tok"}, 1, "tok"},
		{[]string{"schedules", "rm", "tok"}, 1, "tok"},
	} {
		code, _, errOut := runWeir(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %s", c.args, code, errOut)
		}
	}
}

// weir runs fork, retry and resume: a cancelled run resumes with its id;
// a fork from its first operation is a new run of its workflow; usage
// errors exit 2.
func TestRunsForkResume(t *testing.T) {
	url := startServer(t)
	t.Setenv("WEIR_URL", url)
	id := strings.TrimSpace(mustWeir(t, "runs", "start", "demo.approval", "--input", `{"token":"fork-7"}`))
	mustWeir(t, "runs", "cancel", id)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(mustWeir(t, "runs", "show", id), "run_cancelled") {
		if time.Now().After(deadline) {
			t.Fatal("the run was not cancelled within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out := mustWeir(t, "runs", "resume", id); !strings.Contains(out, "run "+id+" resumed") {
		t.Fatalf("runs resume: %q", out)
	}
	if out := mustWeir(t, "runs", "show", id); !strings.Contains(out, "run_resumed") {
		t.Fatalf("runs show after the resume lacks run_resumed:\n%s", out)
	}
	mustWeir(t, "runs", "cancel", id)
	fork := strings.TrimSpace(mustWeir(t, "runs", "fork", id, "--op", "1", "--id", "fork-of-7"))
	if fork != "fork-of-7" {
		t.Fatalf("runs fork printed %q", fork)
	}
	if out := mustWeir(t, "runs", "show", fork); !strings.Contains(out, "run_forked") || !strings.Contains(out, "demo.approval") {
		t.Fatalf("runs show of the fork:\n%s", out)
	}
	if code, _, errOut := runWeir(t, "runs", "fork", id, "--op", "1", "--step", "x"); code != 2 {
		t.Fatalf("fork with --op and --step: exit %d %q", code, errOut)
	}
	if code, _, errOut := runWeir(t, "runs", "fork", id, "--op", "9"); code != 1 || !strings.Contains(errOut, "past the end") {
		t.Fatalf("fork past the end: exit %d %q", code, errOut)
	}
	mustWeir(t, "runs", "cancel", fork)
}
