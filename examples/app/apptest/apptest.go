// Package apptest runs the deployment-shape examples as their users do:
// each built with go build and started as real processes.
package apptest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build builds the package pkg (an import path) into t's temporary
// directory and returns the binary's path.
func Build(t *testing.T, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// Proc is a started process of an example.
type Proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    strings.Builder
	log    logWriter
	lines  chan string
	exited chan error
}

// Start starts bin with args, stopped (SIGKILL) when t ends if it still runs.
func Start(t *testing.T, bin string, args ...string) *Proc {
	t.Helper()
	return StartEnv(t, bin, nil, args...)
}

// StartEnv is Start with env (KEY=value) added to the process's
// environment.
func StartEnv(t *testing.T, bin string, env []string, args ...string) *Proc {
	t.Helper()
	p := &Proc{cmd: exec.Command(bin, args...), lines: make(chan string, 1024), exited: make(chan error, 1)}
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	stdout, _ := p.cmd.StdoutPipe()
	p.cmd.Stderr = &p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		p.exited <- p.cmd.Wait()
	}()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	return p
}

// logWriter keeps a process's stderr (its log) for failure messages.
type logWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *logWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

func (w *logWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// Output is what the process printed so far, stdout then its log.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String() + p.log.String()
}

var listening = regexp.MustCompile(`listening on (http://\S+)`)

// WaitLine waits up to d for a line of stdout that re matches, and returns
// its first group (or the line).
func (p *Proc) WaitLine(t *testing.T, re *regexp.Regexp, d time.Duration) string {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case l := <-p.lines:
			if m := re.FindStringSubmatch(l); m != nil {
				if len(m) > 1 {
					return m[1]
				}
				return m[0]
			}
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("%s exited (%v) before printing %q:\n%s", p.cmd.Path, err, re, p.Output())
		case <-deadline:
			t.Fatalf("%s printed no %q within %v:\n%s", p.cmd.Path, re, d, p.Output())
		}
	}
}

// URL waits for a server's "listening on URL" line and returns the URL.
func (p *Proc) URL(t *testing.T) string { return p.WaitLine(t, listening, 20*time.Second) }

// Stop sends SIGTERM and checks that the process exits 0 within 20 s.
func (p *Proc) Stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("%s after SIGTERM: %v\n%s", p.cmd.Path, err, p.Output())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not stop within 20 s of SIGTERM:\n%s", p.cmd.Path, p.Output())
	}
}

// Kill kills the process (SIGKILL) and waits for it.
func (p *Proc) Kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not die of SIGKILL within 10 s", p.cmd.Path)
	}
}

// Do sends a request with a JSON body (none if body is "") and decodes the
// JSON reply into v (if not nil); it returns the status code.
func Do(t *testing.T, method, url, body string, v any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, b)
		}
	}
	return resp.StatusCode
}

// Run is a run as GET /v1/runs/{id} gives it.
type Run struct {
	ID     string          `json:"id"`
	Status string          `json:"status"`
	Output json.RawMessage `json:"output"`
}

// WaitRun polls GET /v1/runs/{id} until the run's status is status, for
// up to d.
func WaitRun(t *testing.T, base, id, status string, d time.Duration) Run {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		var r Run
		Do(t, "GET", base+"/v1/runs/"+id, "", &r)
		if r.Status == status {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %q, not %s, after %v", id, r.Status, status, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pid is the process's id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }
