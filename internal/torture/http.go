package torture

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Start modes of a run.
const (
	StartDirect  = ""         // the worker calls Engine.StartRun
	StartHTTPID  = "http-id"  // POST /v1/runs with the run id in the body
	StartHTTPKey = "http-key" // POST /v1/runs with an Idempotency-Key header
)

// cutProxy is a loopback TCP proxy in front of the workers' HTTP servers.
// It cuts the connections cutConn picks (by their number, from 1) after the
// server has replied: the server committed, the client never heard. The
// backend's address is asked anew for every connection (a killed server
// comes back elsewhere).
type cutProxy struct {
	ln      net.Listener
	backend func() string
	cutConn func(n int64) bool
	conns   atomic.Int64
	cut     atomic.Int64 // connections cut after a reply
	wg      sync.WaitGroup
}

func newCutProxy(backend func() string, cutConn func(n int64) bool) (*cutProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &cutProxy{ln: ln, backend: backend, cutConn: cutConn}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) close() {
	p.ln.Close()
	p.wg.Wait()
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer c.Close()
			s, err := net.DialTimeout("tcp", p.backend(), 2*time.Second)
			if err != nil {
				return
			}
			defer s.Close()
			cut := p.cutConn(p.conns.Add(1))
			go func() { _, _ = io.Copy(s, c) }()
			if !cut {
				_, _ = io.Copy(c, s)
				return
			}
			// Wait for the reply to begin, then drop it and both sides.
			buf := make([]byte, 1)
			_ = s.SetReadDeadline(time.Now().Add(30 * time.Second))
			if n, _ := s.Read(buf); n > 0 {
				p.cut.Add(1)
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // a reset, not a clean close
			}
		}()
	}
}

// startOverHTTP starts the trial's HTTP runs through a cutting proxy,
// retrying each request until it gets an answer. It returns the run ids the
// server named, and violations: a retried request that named another run.
func startOverHTTP(ctx context.Context, t *Trial, addrFile string, cuts int) (map[string]string, int64, []Violation, error) {
	backend := func() string {
		b, _ := os.ReadFile(addrFile)
		return strings.TrimSpace(string(b))
	}
	p, err := newCutProxy(backend, func(n int64) bool { return n <= int64(cuts) })
	if err != nil {
		return nil, 0, nil, err
	}
	defer p.close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	ids := map[string]string{}
	var viols []Violation
	for i := range t.Runs {
		rs := &t.Runs[i]
		if rs.Start == StartDirect {
			continue
		}
		in, _ := json.Marshal(rs)
		req := map[string]any{"workflow": WorkflowName, "input": json.RawMessage(in)}
		if rs.Start == StartHTTPID {
			req["id"] = rs.ID
		}
		body, _ := json.Marshal(req)
		var got []string
		deadline := time.Now().Add(60 * time.Second)
		for {
			if ctx.Err() != nil {
				return nil, 0, nil, ctx.Err()
			}
			if backend() == "" {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			hr, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.addr()+"/v1/runs", bytes.NewReader(body))
			hr.Header.Set("Content-Type", "application/json")
			if rs.Start == StartHTTPKey {
				hr.Header.Set("Idempotency-Key", "torture-"+rs.ID)
			}
			resp, err := client.Do(hr)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated {
					var run struct {
						ID string `json:"id"`
					}
					if err := json.Unmarshal(b, &run); err != nil || run.ID == "" {
						return nil, 0, nil, fmt.Errorf("POST /v1/runs: %d %s", resp.StatusCode, b)
					}
					got = append(got, run.ID)
					break
				}
				if resp.StatusCode < 500 && resp.StatusCode != http.StatusServiceUnavailable {
					return nil, 0, nil, fmt.Errorf("POST /v1/runs: %d %s", resp.StatusCode, b)
				}
			}
			if time.Now().After(deadline) {
				return nil, 0, nil, fmt.Errorf("POST /v1/runs for %s: no answer within a minute: %v", rs.ID, err)
			}
			time.Sleep(30 * time.Millisecond)
		}
		if rs.Start == StartHTTPID && got[0] != rs.ID {
			viols = append(viols, Violation{"state", "run " + rs.ID, fmt.Sprintf("POST /v1/runs with id %s started run %s", rs.ID, got[0])})
		}
		ids[rs.ID] = got[0]
	}
	b, _ := json.Marshal(ids)
	tmp := filepath.Join(filepath.Dir(addrFile), "ids.json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return nil, 0, nil, err
	}
	if err := os.Rename(tmp, filepath.Join(filepath.Dir(addrFile), "ids.json")); err != nil {
		return nil, 0, nil, err
	}
	return ids, p.cut.Load(), viols, nil
}
