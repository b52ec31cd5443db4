// Command attack is a bounded attack on a real `weir server`: it proves
// that the server's resource budgets (issue 13) hold against stalled
// readers, trickled and oversized uploads, and that cross-site and
// DNS-rebinding requests are refused.
//
// It starts `weir server --addr 127.0.0.1:0` on a fresh store (a SQLite
// file in a temporary directory, or a fresh PostgreSQL database that it
// drops afterwards), writes a 16 MiB stream, then runs these phases while
// it samples the server's VmRSS and VmHWM (/proc/PID/status) every 50 ms:
//
//  1. stalled SSE readers (GET ?offset=-1&live=sse) that read the reply's
//     headers and nothing more;
//  2. stalled catch-up readers (GET ?offset=-1), the same;
//  3. uploads: a burst of full-size bodies sent as fast as possible, then
//     bodies trickled at 1 byte/s, bodies announced and never sent, bodies
//     announced over the body limit, and a control trickling above the
//     minimum rate;
//  4. cross-site requests (Origin, Sec-Fetch-Site, non-JSON bodies) and
//     foreign Host headers;
//  5. everything closed: the server's connections must go, and it must
//     stop cleanly on SIGTERM.
//
// The budgets it checks bound what is live (R: a reader's, its page P of
// 256 KiB or the stream's record size if larger, plus the record it read to
// learn the page was full and its 32 KiB SSE write buffer; U:
// --max-upload-bytes; E: the store's encodings of the appends being
// committed, 3 × 16 MiB on SQLite, 2 committers × 3 × 24 MiB on
// PostgreSQL; C: the connections it opens; conn: -conn-kib, 64 KiB; slack:
// -slack-mib, 64 MiB), and RSS is at most -gc (2) times it: with GOGC=100
// the Go heap grows to twice what its last collection found live before it
// collects again. The kernel's TCP buffers are not in RSS (the table gives
// them apart).
//
//	peak RSS           ≤ baseline + gc × (max-readers × R + U + E) + C × conn + slack
//	phases 1–2 peak    ≤ baseline + gc × readers held × R + readers × conn + slack
//	the burst's rise   ≤ gc × (U + E) + slack
//	live heap, 1–2     ≤ readers held × R + slack; in the burst ≤ R × held + U + E + slack
//
// Once everything is closed, RSS must come back to baseline + slack within
// 15 s (weir server returns a burst's heap once quiet).
//
// It also checks the counts: readers beyond --max-readers get 503 with
// Retry-After and none below it; every 1 B/s trickle and every silent body
// is cut within 33 s, a body above --min-upload-rate is not, a body over
// the limit is answered at once; SSE readers stalled in a write are cut by
// the write timeout; every cross-site or foreign-Host request is refused;
// the server's connections go once the harness closes its own; and the
// server exits 0 on SIGTERM.
//
// It prints a table of the figures and exits 1, naming each failed check,
// if a budget did not hold (2 if it could not run). Every wait has a
// deadline, and the whole run is bounded by -duration. Loopback only. The
// server runs with GODEBUG=gctrace=1: the table's live heap is the heap
// after a GC, which tells what is held from what the GC has yet to free.
//
//	go run ./test/attack -weir /path/to/weir -store sqlite
//	go run ./test/attack -store 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//	go run ./test/attack -max-readers 256
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// The server's defaults this harness checks against (server.Config).
const (
	defaultMaxReaders = 1024
	readPageBytes     = 256 << 10 // server.Config.ReadPageBytes
	sseBuffer         = 32 << 10  // server: an SSE reader's write buffer
	maxAppendBytes    = 16 << 20  // store.MaxAppendBytes
	maxBodyBytes      = 16 << 20  // server.Config.MaxBodyBytes (store.MaxAppendBytes)
	defaultUploadCap  = 256 << 20 // server.Config.MaxUploadBytes
	bodyGrace         = 30 * time.Second
	streamWriteLimit  = 30 * time.Second // how long a write to a stalled reader may block
	mib               = 1 << 20
	kib               = 1 << 10
)

var (
	flagWeir        = flag.String("weir", "", "the weir binary (default: go build ./cmd/weir into a temporary directory)")
	flagStore       = flag.String("store", "sqlite", "sqlite, or a postgres:// URL (a fresh database is created there and dropped afterwards)")
	flagMaxReaders  = flag.Int("max-readers", 0, "passed to weir server --max-readers (0: the server's default, 1024)")
	flagUploadCap   = flag.Int64("max-upload-bytes", 0, "passed to weir server --max-upload-bytes (0: the server's default, 256 MiB)")
	flagReaders     = flag.Int("readers", 300, "stalled SSE readers (phase 1)")
	flagCatchup     = flag.Int("catchup", 100, "stalled catch-up readers (phase 2)")
	flagTrickle     = flag.Int("trickle", 60, "uploads of Content-Length 10 MiB trickled at 1 byte/s (phase 3)")
	flagSilent      = flag.Int("silent", 4, "uploads announcing Content-Length 16 MiB (the body limit) that send nothing (phase 3)")
	flagOversize    = flag.Int("oversize", 20, "uploads announcing Content-Length 200 MiB that send nothing (phase 3)")
	flagSteady      = flag.Int("steady", 2, "control uploads trickled at 4 KiB/s, above the minimum rate: must not be cut (phase 3)")
	flagBurst       = flag.Int("burst", 24, "uploads of 16 MiB sent at full speed at once (phase 3)")
	flagChunk       = flag.Int("chunk", 64*kib, "the stream's record size (u32be frames when smaller than -body)")
	flagBody        = flag.Int("body", mib, "the size of the appends that write the stream")
	flagStreamMiB   = flag.Int("stream-mib", 16, "the stream's size in MiB")
	flagRcvBuf      = flag.Int("rcvbuf", 0, "SO_RCVBUF of the stalled readers' sockets, set before connecting (0: the kernel's default)")
	flagHold        = flag.Duration("hold", 4*time.Second, "how long phases 1 and 2 hold their readers before the next phase begins")
	flagUploadPhase = flag.Duration("upload-phase", 37*time.Second, "the longest the trickle phase lasts (the server's grace is 30 s)")
	flagDuration    = flag.Duration("duration", 88*time.Second, "the bound on the whole run")
	flagSlackMiB    = flag.Int64("slack-mib", 64, "MiB allowed over the bound for the Go runtime and the store (stated in the bound)")
	flagConnKiB     = flag.Int64("conn-kib", 64, "KiB allowed per open connection (goroutine stack, bufio buffers)")
	flagGC          = flag.Int64("gc", 2, "the RSS the Go heap may take per live byte (GOGC=100: 2)")
	flagKeep        = flag.Bool("keep", false, "keep the temporary directory (server log, SQLite file)")
	flagRound       = flag.Int("round", 1, "1: the budgets of issue 13 (stalled readers, uploads, cross-site); 2: the cases of issue 21 (round2.go); 3: the cases of issue 37 (round3.go)")
)

func main() {
	flag.Parse()
	code := 2
	switch *flagRound {
	case 1:
		code = run()
	case 2:
		code = runRound2()
	case 3:
		code = runRound3()
	default:
		logf("-round: 1, 2 or 3, not %d", *flagRound)
	}
	os.Exit(code)
}

// ---- the report -----------------------------------------------------------

type check struct {
	ok   bool
	what string
}

type report struct {
	mu     sync.Mutex
	checks []check
	notes  []string
}

func (r *report) check(ok bool, format string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks = append(r.checks, check{ok, fmt.Sprintf(format, a...)})
}

func (r *report) note(format string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, a...))
}

func (r *report) failed() []string {
	var out []string
	for _, c := range r.checks {
		if !c.ok {
			out = append(out, c.what)
		}
	}
	return out
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "attack: "+format+"\n", a...)
}

// ---- /proc sampling -------------------------------------------------------

// procStatus reads VmRSS, VmHWM (bytes) and Threads of a process.
func procStatus(pid int) (rss, hwm int64, threads int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			rss = n * kib
		case "VmHWM":
			hwm = n * kib
		case "Threads":
			threads = int(n)
		}
	}
	return rss, hwm, threads, nil
}

// serverConns counts the server's established connections: IPv4 sockets
// on its port (/proc/net/tcp, state 01). Its connections to PostgreSQL do
// not count.
func serverConns(port int) int {
	n := 0
	for _, st := range tcpStates(port) {
		if st == "01" {
			n++
		}
	}
	return n
}

// tcpKernelBytes is the kernel's memory for TCP buffers (/proc/net/sockstat,
// "TCP: ... mem N" in pages), all sockets: what stalled readers cost outside
// the server's RSS.
func tcpKernelBytes() int64 {
	b, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.HasPrefix(line, "TCP:") {
			continue
		}
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "mem" {
				n, _ := strconv.ParseInt(f[i+1], 10, 64)
				return n * int64(os.Getpagesize())
			}
		}
	}
	return -1
}

type phaseStat struct {
	name              string
	start, end        time.Duration // since the attack began
	peakRSS, lastRSS  int64
	peakConns         int
	peakThreads       int
	peakTCP           int64
	peakLive          int64 // the largest live heap after a GC (GODEBUG=gctrace=1)
	gcs               int
	samples           int
	accepted, refused int
	other             int
	detail            string
}

type sampler struct {
	pid   int
	port  int // the server's: its connections are counted
	t0    time.Time
	mu    sync.Mutex
	cur   *phaseStat
	order []*phaseStat
	hwm   int64
	rss   int64
	fds   int
	stop  chan struct{}
	done  chan struct{}
}

func newSampler(pid, port int, t0 time.Time) *sampler {
	s := &sampler{pid: pid, port: port, t0: t0, stop: make(chan struct{}), done: make(chan struct{})}
	s.phase("setup")
	go s.loop()
	return s
}

func (s *sampler) phase(name string) *phaseStat {
	s.mu.Lock()
	now := time.Since(s.t0)
	if s.cur != nil {
		s.cur.end = now
	}
	p := &phaseStat{name: name, start: now}
	s.cur = p
	s.order = append(s.order, p)
	s.mu.Unlock()
	s.sample() // every phase gets a sample, however short
	return p
}

// gc notes a GC's live heap (gctrace's third figure).
func (s *sampler) gc(live int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil {
		s.cur.peakLive = max(s.cur.peakLive, live)
		s.cur.gcs++
	}
}

func (s *sampler) sample() {
	rss, hwm, threads, err := procStatus(s.pid)
	if err != nil {
		return
	}
	fds := -1
	if s.port > 0 {
		fds = serverConns(s.port)
	}
	tcp := tcpKernelBytes()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.cur
	p.samples++
	p.lastRSS = rss
	p.peakRSS = max(p.peakRSS, rss)
	p.peakConns = max(p.peakConns, fds)
	p.peakThreads = max(p.peakThreads, threads)
	p.peakTCP = max(p.peakTCP, tcp)
	s.hwm, s.rss, s.fds = hwm, rss, fds
}

func (s *sampler) loop() {
	defer close(s.done)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}

func (s *sampler) close() {
	s.sample()
	s.mu.Lock()
	if s.cur != nil {
		s.cur.end = time.Since(s.t0)
	}
	s.mu.Unlock()
	close(s.stop)
	<-s.done
}

func (s *sampler) now() (rss, hwm int64, fds int) {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rss, s.hwm, s.fds
}

// ---- TCP states of the harness's own connections ---------------------------

// tcpStates maps the remote ports of the server's own IPv4 sockets (local
// port serverPort) to their state (/proc/net/tcp: 01 ESTABLISHED; once the
// server closes a connection its socket is FIN_WAIT1 or gone, even while
// the data it queued still waits for a client that never reads, so the
// client's end would still look ESTABLISHED).
func tcpStates(serverPort int) map[int]string {
	out := map[int]string{}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return out
	}
	want := fmt.Sprintf(":%04X", serverPort)
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasSuffix(f[1], want) {
			continue
		}
		_, rp, ok := strings.Cut(f[2], ":")
		if !ok {
			continue
		}
		port, err := strconv.ParseInt(rp, 16, 32)
		if err != nil {
			continue
		}
		if out[int(port)] != "01" { // a reused port: the live connection wins
			out[int(port)] = f[3]
		}
	}
	return out
}

// heldConn is a stalled reader the harness keeps open.
type heldConn struct {
	c      net.Conn
	port   int
	opened time.Time
	cutAt  time.Time // first seen no longer ESTABLISHED (the server closed it)
	missed time.Time // seen not ESTABLISHED once: a cut if the next scan agrees
}

// watcher notes when the server cuts held connections.
type watcher struct {
	port  int
	mu    sync.Mutex
	conns []*heldConn
}

func (w *watcher) add(h *heldConn) {
	w.mu.Lock()
	w.conns = append(w.conns, h)
	w.mu.Unlock()
}

func (w *watcher) scan() {
	st := tcpStates(w.port)
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range w.conns {
		// /proc/net/tcp is not read atomically: a socket can be missing from
		// one read while the table changes. A cut is two scans that agree.
		switch {
		case !h.cutAt.IsZero():
		case st[h.port] == "01":
			h.missed = time.Time{}
		case h.missed.IsZero():
			h.missed = now
		default:
			h.cutAt = h.missed
		}
	}
}

func (w *watcher) loop(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.scan()
		}
	}
}

// cutSummary describes how many of conns the server closed, and after how
// long (from each connection's request).
func cutSummary(conns []*heldConn) (cut int, s string) {
	var ds []time.Duration
	for _, h := range conns {
		if !h.cutAt.IsZero() {
			ds = append(ds, h.cutAt.Sub(h.opened))
		}
	}
	if len(ds) == 0 {
		return 0, fmt.Sprintf("0 of %d", len(conns))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return len(ds), fmt.Sprintf("%d of %d after %s–%s", len(ds), len(conns), secs(ds[0]), secs(ds[len(ds)-1]))
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

// ---- the server ----------------------------------------------------------

type server struct {
	cmd     *exec.Cmd
	pid     int
	addr    string // host:port
	port    int
	url     string
	logPath string
	exited  chan struct{}
	exitErr error
	exitAt  time.Time
}

var listening = regexp.MustCompile(`listening on http://(\S+)`)

// gcLine is a line of GODEBUG=gctrace=1: "gc 7 @1.2s 3%: ..., 40->41->20 MB, 42 MB goal, ...";
// the third figure is the heap live after the GC.
var gcLine = regexp.MustCompile(`^gc \d+ @.* \d+->\d+->(\d+) MB`)

// gcSink receives the GC lines' live heaps.
var gcSink atomic.Pointer[func(int64)]

func startServer(ctx context.Context, bin, store, dir string, extra []string) (*server, error) {
	args := append([]string{"server", "--addr", "127.0.0.1:0", "--store", store}, extra...)
	cmd := exec.Command(bin, args...)
	logPath := filepath.Join(dir, "server.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	cmd.Stdout = io.MultiWriter(logFile, pw)
	er, ew := io.Pipe()
	cmd.Stderr = ew
	cmd.Env = append(os.Environ(), "GODEBUG=gctrace=1")
	go func() { // the server's stderr: to the log, GC lines to the sampler
		sc := bufio.NewScanner(er)
		for sc.Scan() {
			line := sc.Text()
			if m := gcLine.FindStringSubmatch(line); m != nil {
				live, _ := strconv.ParseInt(m[1], 10, 64)
				if f := gcSink.Load(); f != nil {
					(*f)(live * mib)
				}
				continue // not in the log: one line a GC
			}
			fmt.Fprintln(logFile, line)
		}
		_, _ = io.Copy(io.Discard, er)
	}()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, pid: cmd.Process.Pid, logPath: logPath, exited: make(chan struct{})}
	go func() {
		s.exitErr = cmd.Wait()
		s.exitAt = time.Now()
		pw.Close()
		ew.Close()
		close(s.exited)
	}()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case s.addr = <-found:
	case <-s.exited:
		b, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("weir server exited at start (%v):\n%s", s.exitErr, b)
	case <-time.After(20 * time.Second):
		s.kill()
		return nil, errors.New("weir server did not say where it listens within 20 s")
	case <-ctx.Done():
		s.kill()
		return nil, ctx.Err()
	}
	_, p, _ := net.SplitHostPort(s.addr)
	s.port, _ = strconv.Atoi(p)
	s.url = "http://" + s.addr
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(s.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("weir server at %s not healthy within 15 s: %v", s.url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *server) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

func (s *server) kill() {
	_ = s.cmd.Process.Kill()
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
	}
}

// stop sends SIGTERM and waits (bounded) for the exit.
func (s *server) stop(timeout time.Duration) (string, bool) {
	if !s.alive() {
		return fmt.Sprintf("had already exited: %v", s.exitErr), false
	}
	t := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		if s.exitErr != nil {
			return fmt.Sprintf("SIGTERM: exited after %s: %v", secs(s.exitAt.Sub(t)), s.exitErr), false
		}
		return fmt.Sprintf("SIGTERM: exit status 0 after %s", secs(s.exitAt.Sub(t))), true
	case <-time.After(timeout):
		s.kill()
		return fmt.Sprintf("SIGTERM: still running after %s: killed", secs(timeout)), false
	}
}

// ---- HTTP helpers ---------------------------------------------------------

var client = &http.Client{Timeout: 30 * time.Second}

func do(method, u string, hdr map[string]string, body []byte) (int, http.Header, string, error) {
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		return 0, nil, "", err
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, resp.Header, strings.TrimSpace(string(b)), nil
}

// writeStream creates a text/plain stream of total bytes appended in
// bodies of body bytes: u32be frames of chunk bytes when chunk < body (the
// framing adds 4 bytes a frame), else one record a body.
func writeStream(base, path string, total, body, chunk int) error {
	code, _, msg, err := do("PUT", base+"/v1/stream/"+path, map[string]string{"Content-Type": "text/plain"}, nil)
	if err != nil || code != 201 {
		return fmt.Errorf("PUT %s: %d %s %v", path, code, msg, err)
	}
	pattern := []byte("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_") // no newline: one SSE data line
	data := bytes.Repeat(pattern, max(chunk, body)/len(pattern)+1)
	var b []byte
	hdr := map[string]string{"Content-Type": "text/plain"}
	payload := body
	if chunk < body {
		hdr["Weir-Framing"] = "u32be"
		for len(b)+4+chunk <= body {
			b = binary.BigEndian.AppendUint32(b, uint32(chunk))
			b = append(b, data[:chunk]...)
		}
		payload = len(b) / (4 + chunk) * chunk
	} else {
		b, payload = data[:chunk], chunk
	}
	for written := 0; written < total; written += payload {
		code, _, msg, err := do("POST", base+"/v1/stream/"+path, hdr, b)
		if err != nil || code != 204 {
			return fmt.Errorf("POST %s: %d %s %v", path, code, msg, err)
		}
	}
	return nil
}

// openReader sends a GET and reads the reply's status line and headers,
// nothing more (a 4 KiB buffer: the rest stays in the kernel). A 200 is
// kept open, never read again.
func openReader(addr, target string, timeout time.Duration) (c net.Conn, status int, retryAfter string, err error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	if *flagRcvBuf > 0 {
		// Before connect, so that the window the server sees is small: its
		// writes then block in its handler rather than in the kernel.
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, *flagRcvBuf)
			})
			return errors.Join(err, serr)
		}
	}
	c, err = d.Dial("tcp", addr)
	if err != nil {
		return nil, 0, "", err
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err = fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: weir-attack\r\n\r\n", target, addr); err != nil {
		c.Close()
		return nil, 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 4096), nil)
	if err != nil {
		c.Close()
		return nil, 0, "", err
	}
	_ = c.SetDeadline(time.Time{})
	if resp.StatusCode != 200 {
		c.Close()
		return nil, resp.StatusCode, resp.Header.Get("Retry-After"), nil
	}
	return c, 200, "", nil
}

type readerGroup struct {
	held                  []*heldConn
	ok, busy, other, errs int
	retryAfterMissing     int
	otherCodes            map[int]int
	firstErr              error
	openTime              time.Duration
}

// openReaders opens n stalled readers of target, 32 at a time.
func openReaders(ctx context.Context, addr, target string, n int, w *watcher) *readerGroup {
	g := &readerGroup{otherCodes: map[int]int{}}
	var mu sync.Mutex
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	t := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			opened := time.Now()
			c, code, ra, err := openReader(addr, target, 10*time.Second)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				g.errs++
				if g.firstErr == nil {
					g.firstErr = err
				}
			case code == 200:
				g.ok++
				h := &heldConn{c: c, port: c.LocalAddr().(*net.TCPAddr).Port, opened: opened}
				g.held = append(g.held, h)
				w.add(h)
			case code == 503:
				g.busy++
				if ra == "" {
					g.retryAfterMissing++
				}
			default:
				g.other++
				g.otherCodes[code]++
			}
		}()
	}
	wg.Wait()
	g.openTime = time.Since(t)
	return g
}

// ---- uploads --------------------------------------------------------------

type upload struct {
	kind      string
	started   time.Time
	answered  time.Time // a reply or the connection's end
	status    int       // 0: the connection ended without a reply
	sent      int64
	c         net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func (u *upload) close() { u.closeOnce.Do(func() { u.c.Close() }) }

func (u *upload) ended() bool {
	select {
	case <-u.done:
		return true
	default:
		return false
	}
}

// startUpload dials and sends a POST announcing length bytes, then sends
// body bytes as pace says: every interval, step bytes (interval 0: all at
// once; step 0: nothing). It reads the reply concurrently.
func startUpload(addr, path, kind string, length int64, interval time.Duration, step int, blob []byte) (*upload, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	u := &upload{kind: kind, started: time.Now(), c: c, done: make(chan struct{})}
	hdr := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: weir-attack\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n", path, addr, length)
	if _, err := io.WriteString(c, hdr); err != nil {
		c.Close()
		return nil, err
	}
	go func() { // the reply
		defer close(u.done)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		u.answered = time.Now()
		if err == nil {
			u.status = resp.StatusCode
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
		}
	}()
	go func() { // the body
		switch {
		case step == 0:
			return
		case interval == 0:
			for sent := int64(0); sent < length; {
				n := min(int64(len(blob)), length-sent)
				if _, err := c.Write(blob[:n]); err != nil {
					return
				}
				sent += n
				atomic.AddInt64(&u.sent, n)
			}
			return
		}
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-u.done:
				return
			case <-t.C:
				if _, err := c.Write(blob[:step]); err != nil {
					return
				}
				atomic.AddInt64(&u.sent, int64(step))
			}
		}
	}()
	return u, nil
}

type uploadSummary struct {
	n, answered int
	codes       map[int]int
	first, last time.Duration
}

func summarize(us []*upload) uploadSummary {
	s := uploadSummary{n: len(us), codes: map[int]int{}}
	first := true
	for _, u := range us {
		if !u.ended() {
			continue
		}
		s.answered++
		s.codes[u.status]++
		d := u.answered.Sub(u.started)
		if first || d < s.first {
			s.first = d
		}
		if first || d > s.last {
			s.last = d
		}
		first = false
	}
	return s
}

func (s uploadSummary) String() string {
	var codes []string
	keys := make([]int, 0, len(s.codes))
	for k := range s.codes {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, k := range keys {
		name := strconv.Itoa(k)
		if k == 0 {
			name = "closed without reply"
		}
		codes = append(codes, fmt.Sprintf("%s ×%d", name, s.codes[k]))
	}
	if s.answered == 0 {
		return fmt.Sprintf("%d sent, none ended", s.n)
	}
	return fmt.Sprintf("%d sent, %d ended (%s) after %s–%s", s.n, s.answered, strings.Join(codes, ", "), secs(s.first), secs(s.last))
}

func waitAll(us []*upload, deadline time.Time) {
	for _, u := range us {
		select {
		case <-u.done:
		case <-time.After(time.Until(deadline)):
			return
		}
	}
}

// ---- PostgreSQL -----------------------------------------------------------

// freshDatabase creates a database for this run beside the one base names
// and returns its URL and a func that drops it.
func freshDatabase(ctx context.Context, base string) (string, func() error, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, base)
	if err != nil {
		return "", nil, fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(context.Background())
	name := fmt.Sprintf("weir_attack_%d_%d", time.Now().Unix(), os.Getpid())
	if _, err := conn.Exec(cctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("postgres: create database: %w", err)
	}
	// Dropped with retries: a PostgreSQL restarting under another test
	// must not leave the database behind.
	drop := func() error {
		var err error
		for try := 0; try < 15; try++ {
			if try > 0 {
				time.Sleep(2 * time.Second)
			}
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var c *pgx.Conn
			if c, err = pgx.Connect(dctx, base); err == nil {
				_, err = c.Exec(dctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
				c.Close(context.Background())
			}
			cancel()
			if err == nil {
				return nil
			}
		}
		return fmt.Errorf("database %s: %w", name, err)
	}
	u.Path = "/" + name
	return u.String(), drop, nil
}

// ---- the run --------------------------------------------------------------

func weirBinary(dir string) (string, error) {
	if *flagWeir != "" {
		return filepath.Abs(*flagWeir)
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == os.DevNull {
		return "", fmt.Errorf("no -weir and no Go module here to build it from (go env GOMOD: %v)", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(dir, "weir")
	logf("building weir from %s", root)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/weir")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/weir: %w (pass -weir)", err)
	}
	return bin, nil
}

func raiseNoFile() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	rl.Cur = rl.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	return rl.Cur, nil
}

func mb(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/mib) }

// attack is one run: the server, the samplers, and the figures.
type attack struct {
	ctx        context.Context
	t0         time.Time
	rep        *report
	srv        *server
	samp       *sampler
	w          *watcher
	storeName  string
	maxReaders int
	uploadCap  int64
	record     int // the stream's records' size
	body       int // the stream's appends' size

	startRSS, baseRSS     int64
	startConns, baseConns int

	sse, catchup                     *readerGroup
	pSSE, pCatchup, pBurst, pUploads *phaseStat
	sseCut, catchupCut               string

	burst, trickle, silent, oversize, steady uploadSummary
	steadySent                               int64

	crossLines []string

	afterRSS, hwm int64
	afterConns    int
	returnedRSS   int64         // RSS once it came back (or at the deadline)
	returnedIn    time.Duration // after the last close
	drained       time.Duration
	exitMsg       string
}

func run() int {
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), *flagDuration)
	defer cancel()
	a := &attack{ctx: ctx, t0: t0, rep: &report{}, record: *flagChunk, body: max(*flagBody, *flagChunk)}

	nofile, err := raiseNoFile()
	if err != nil {
		logf("RLIMIT_NOFILE: %v", err)
		return 2
	}
	if need := uint64(2*a.conns() + 200); nofile < need {
		logf("RLIMIT_NOFILE is %d, this run needs about %d (harness and server): lower the counts", nofile, need)
		return 2
	}
	dir, err := os.MkdirTemp("", "weir-attack-")
	if err != nil {
		logf("%v", err)
		return 2
	}
	if *flagKeep {
		logf("keeping %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	bin, err := weirBinary(dir)
	if err != nil {
		logf("%v", err)
		return 2
	}

	a.storeName = "sqlite"
	storeURL := "sqlite:" + filepath.Join(dir, "attack.db")
	switch {
	case strings.HasPrefix(*flagStore, "postgres://") || strings.HasPrefix(*flagStore, "postgresql://"):
		a.storeName = "postgres"
		var drop func() error
		storeURL, drop, err = freshDatabase(ctx, *flagStore)
		if err != nil {
			logf("%v", err)
			return 2
		}
		defer func() {
			if err := drop(); err != nil {
				logf("dropping the database: %v", err)
			}
		}()
	case *flagStore != "sqlite":
		logf("-store: sqlite or a postgres:// URL, not %q", *flagStore)
		return 2
	}

	var extra []string
	a.maxReaders, a.uploadCap = defaultMaxReaders, defaultUploadCap
	if *flagMaxReaders > 0 {
		a.maxReaders = *flagMaxReaders
		extra = append(extra, "--max-readers", strconv.Itoa(a.maxReaders))
	}
	if *flagUploadCap > 0 {
		a.uploadCap = *flagUploadCap
		extra = append(extra, "--max-upload-bytes", strconv.FormatInt(a.uploadCap, 10))
	}
	a.srv, err = startServer(ctx, bin, storeURL, dir, extra)
	if err != nil {
		logf("%v", err)
		return 2
	}
	defer func() {
		if a.srv.alive() {
			a.srv.kill()
		}
	}()
	logf("weir server pid %d at %s (store %s, %s), RLIMIT_NOFILE %d", a.srv.pid, a.srv.url, a.storeName, strings.Join(extra, " "), nofile)

	a.samp = newSampler(a.srv.pid, a.srv.port, t0)
	gc := a.samp.gc
	gcSink.Store(&gc)
	a.w = &watcher{port: a.srv.port}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go a.w.loop(wctx)
	a.startRSS, _, a.startConns = a.samp.now()

	// Setup: the stream the readers read, the streams the uploads target.
	if err := writeStream(a.srv.url, "attack/big", *flagStreamMiB*mib, a.body, a.record); err != nil {
		logf("setup: %v", err)
		return 2
	}
	for _, p := range []string{"attack/upload", "attack/burst"} {
		if code, _, msg, err := do("PUT", a.srv.url+"/v1/stream/"+p, map[string]string{"Content-Type": "text/plain"}, nil); err != nil || code != 201 {
			logf("setup: PUT %s: %d %s %v", p, code, msg, err)
			return 2
		}
	}
	client.CloseIdleConnections()
	a.samp.phase("baseline")
	// Idle long enough for the server to return what writing the stream
	// grew (it does once quiet, every 5 s): up to 12 s, until RSS is within
	// 16 MiB of the RSS at start.
	for idle := time.Now(); ; {
		sleepCtx(ctx, 250*time.Millisecond)
		a.baseRSS, _, a.baseConns = a.samp.now()
		if time.Since(idle) >= time.Second && (a.baseRSS <= a.startRSS+16*mib || time.Since(idle) >= 12*time.Second) {
			break
		}
	}
	logf("baseline RSS %s, %d connections", mb(a.baseRSS), a.baseConns)

	a.readers()
	logf("readers: SSE %d held / %d refused, catch-up %d held / %d refused", a.sse.ok, a.sse.busy, a.catchup.ok, a.catchup.busy)
	a.uploadBurst()
	logf("burst: %s", a.burst)
	a.slowUploads()
	logf("slow uploads done")
	a.crossSite()
	a.after()
	return a.print()
}

// conns is how many connections the attack opens at most.
func (a *attack) conns() int {
	return *flagReaders + *flagCatchup + *flagTrickle + *flagSilent + *flagOversize + *flagSteady + *flagBurst
}

// Phases 1 and 2: stalled readers, SSE then catch-up, all held.
func (a *attack) readers() {
	a.pSSE = a.samp.phase("1 SSE readers")
	a.sse = openReaders(a.ctx, a.srv.addr, "/v1/stream/attack/big?offset=-1&live=sse", *flagReaders, a.w)
	sleepCtx(a.ctx, *flagHold)
	a.pSSE.accepted, a.pSSE.refused, a.pSSE.other = a.sse.ok, a.sse.busy, a.sse.other+a.sse.errs

	a.pCatchup = a.samp.phase("2 catch-up readers")
	a.catchup = openReaders(a.ctx, a.srv.addr, "/v1/stream/attack/big?offset=-1", *flagCatchup, a.w)
	sleepCtx(a.ctx, *flagHold)
	a.pCatchup.accepted, a.pCatchup.refused, a.pCatchup.other = a.catchup.ok, a.catchup.busy, a.catchup.other+a.catchup.errs

	rep := a.rep
	for i, g := range []*readerGroup{a.sse, a.catchup} {
		name := []string{"SSE", "catch-up"}[i]
		if g.errs > 0 {
			rep.check(false, "%s readers: %d requests failed without a reply (first: %v)", name, g.errs, g.firstErr)
		}
		if g.other > 0 {
			rep.check(false, "%s readers: unexpected statuses %v", name, g.otherCodes)
		}
		rep.check(g.retryAfterMissing == 0, "%s readers: every 503 has Retry-After (%d of %d lack it)", name, g.retryAfterMissing, g.busy)
	}
	held := a.sse.ok + a.catchup.ok
	asked := *flagReaders + *flagCatchup
	want := min(asked, a.maxReaders)
	rep.check(held <= a.maxReaders, "readers: held at once %d ≤ --max-readers %d", held, a.maxReaders)
	rep.check(held == want, "readers: admitted %d = min(readers + catchup, max-readers) = %d (none refused below the cap)", held, want)
	rep.check(a.sse.busy+a.catchup.busy == asked-held-a.sse.other-a.catchup.other-a.sse.errs-a.catchup.errs,
		"readers: every one beyond the cap got 503 (%d)", a.sse.busy+a.catchup.busy)
}

// Phase 3a: full-size uploads at full speed, at once.
func (a *attack) uploadBurst() {
	a.pBurst = a.samp.phase("3a upload burst")
	if *flagBurst == 0 {
		return
	}
	blob := bytes.Repeat([]byte("a"), mib)
	var us []*upload
	for i := 0; i < *flagBurst; i++ {
		u, err := startUpload(a.srv.addr, "/v1/stream/attack/burst", "burst", maxBodyBytes, 0, 1, blob)
		if err != nil {
			a.rep.check(false, "burst upload %d: %v", i, err)
			continue
		}
		us = append(us, u)
	}
	waitAll(us, time.Now().Add(min(25*time.Second, time.Until(deadlineOf(a.ctx).Add(-45*time.Second)))))
	a.burst = summarize(us)
	for _, u := range us {
		u.close()
	}
	b := a.burst
	a.pBurst.accepted, a.pBurst.refused = b.codes[204], b.codes[503]
	a.pBurst.other = b.n - a.pBurst.accepted - a.pBurst.refused
	a.rep.check(b.answered == b.n, "burst: every full-speed upload answered within 25 s (%d of %d)", b.answered, b.n)
	a.rep.check(b.codes[204]+b.codes[503] == b.n, "burst: each appended (204) or refused at once (503): %s", b)
	if b.codes[503] == 0 && int64(b.n)*maxBodyBytes > a.uploadCap {
		a.rep.note("burst: no 503 although %d × 16 MiB > the upload cap: the uploads did not overlap", b.n)
	}
}

// Phase 3b: uploads trickled at 1 B/s, announced and never sent, announced
// over the body limit; and a control above the minimum rate.
func (a *attack) slowUploads() {
	a.pUploads = a.samp.phase("3b slow uploads")
	blob := bytes.Repeat([]byte("a"), 4096)
	var steady, oversize, silent, trickle []*upload
	start := func(kind string, n int, length int64, interval time.Duration, step int, into *[]*upload) {
		for i := 0; i < n; i++ {
			u, err := startUpload(a.srv.addr, "/v1/stream/attack/upload", kind, length, interval, step, blob)
			if err != nil {
				a.rep.check(false, "%s upload %d: %v", kind, i, err)
				continue
			}
			*into = append(*into, u)
		}
	}
	// The steady ones first, so that the budget admits them.
	start("steady", *flagSteady, 10*mib, 250*time.Millisecond, 1024, &steady) // 4 KiB/s
	start("oversize", *flagOversize, 200*mib, 0, 0, &oversize)
	waitAll(oversize, time.Now().Add(5*time.Second))
	a.oversize = summarize(oversize)
	start("silent", *flagSilent, maxBodyBytes, 0, 0, &silent)
	start("trickle", *flagTrickle, 10*mib, time.Second, 1, &trickle)
	end := time.Now().Add(*flagUploadPhase)
	if d := deadlineOf(a.ctx).Add(-22 * time.Second); d.Before(end) {
		end = d
	}
	// Until the server has cut every trickle and silent one (or the
	// phase's end); then the steady ones must still be open.
	waitAll(append(append([]*upload{}, silent...), trickle...), end)
	sleepCtx(a.ctx, time.Second)
	a.silent, a.trickle, a.steady = summarize(silent), summarize(trickle), summarize(steady)
	a.steadySent = sentOf(steady)

	rep := a.rep
	admitted := func(us []*upload) (n, cut, late int) {
		for _, u := range us {
			if u.ended() && (u.status == 503 || u.status == 413) {
				continue
			}
			n++
			if u.ended() {
				cut++
				if u.answered.Sub(u.started) > bodyGrace+3*time.Second {
					late++
				}
			}
		}
		return n, cut, late
	}
	tn, tcut, tlate := admitted(trickle)
	sn, scut, slate := admitted(silent)
	stn, stcut, _ := admitted(steady)
	a.pUploads.accepted = tn + sn + stn
	a.pUploads.refused = a.trickle.codes[503] + a.silent.codes[503] + a.oversize.codes[503] + a.oversize.codes[413] + a.steady.codes[503]

	for _, us := range [][]*upload{steady, oversize, silent, trickle} {
		for _, u := range us {
			u.close()
		}
	}

	o := a.oversize
	rep.check(o.answered == o.n && o.last < 2*time.Second, "200 MiB announced, nothing sent: each answered at once, within 2 s: %s", o)
	rep.check(o.codes[413]+o.codes[503] == o.n, "200 MiB announced: each 413 (or 503 with the budget full): %v", o.codes)
	rep.check(tcut == tn, "trickle 1 B/s: every admitted one cut by the server (%d of %d): %s", tcut, tn, a.trickle)
	rep.check(tlate == 0, "trickle 1 B/s: none held past the 30 s grace + 3 s (%d were)", tlate)
	slots := max(int((a.uploadCap-int64(stn)*10*mib)/(10*mib)), 0)
	rep.check(tn <= slots, "trickle: admitted %d ≤ what the upload cap holds beside %d steady ones (%d × 10 MiB)", tn, stn, slots)
	rep.check(scut == sn && slate == 0, "silent 16 MiB: every admitted one cut within 33 s (%d of %d): %s", scut, sn, a.silent)
	rep.check(stcut == 0 && stn == len(steady), "steady 4 KiB/s (above --min-upload-rate): admitted and not cut (%s)", a.steady)
}

// Phase 4: cross-site requests and foreign Host headers.
func (a *attack) crossSite() {
	p := a.samp.phase("4 cross-site")
	own := a.srv.url
	port := strconv.Itoa(a.srv.port)
	type probe struct {
		name, method, path string
		hdr                map[string]string
		body               string
		refuse             bool // must not succeed (2xx)
		want               []int
	}
	runBody := `{"workflow":"demo.tokens","input":{"text":"attack"}}`
	evil := "https://evil.example"
	probes := []probe{
		{"POST /v1/runs, Origin: " + evil + ", text/plain", "POST", "/v1/runs", map[string]string{"Origin": evil, "Content-Type": "text/plain"}, runBody, true, []int{403}},
		{"POST /v1/runs, Origin: " + evil + ", application/json", "POST", "/v1/runs", map[string]string{"Origin": evil, "Content-Type": "application/json"}, runBody, true, []int{403}},
		{"POST /v1/runs, Origin: null, text/plain", "POST", "/v1/runs", map[string]string{"Origin": "null", "Content-Type": "text/plain"}, runBody, true, []int{403}},
		{"POST /v1/runs, Sec-Fetch-Site: cross-site, no Origin", "POST", "/v1/runs", map[string]string{"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}, runBody, true, []int{403}},
		{"POST /v1/runs, no Origin, text/plain", "POST", "/v1/runs", map[string]string{"Content-Type": "text/plain"}, runBody, true, []int{415}},
		{"POST /v1/runs, no Origin, form", "POST", "/v1/runs", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, runBody, true, []int{415}},
		{"POST /v1/runs/run_x/cancel, Origin: " + evil, "POST", "/v1/runs/run_x/cancel", map[string]string{"Origin": evil, "Content-Type": "text/plain"}, "", true, []int{403}},
		{"POST /v1/stream/attack/big (append), Origin: " + evil, "POST", "/v1/stream/attack/big", map[string]string{"Origin": evil, "Content-Type": "text/plain"}, "evil", true, []int{403}},
		{"PUT /v1/stream/attack/evil (text/html), Origin: " + evil, "PUT", "/v1/stream/attack/evil", map[string]string{"Origin": evil, "Content-Type": "text/html"}, "<script>", true, []int{403}},
		{"DELETE /v1/stream/attack/big, Origin: " + evil, "DELETE", "/v1/stream/attack/big", map[string]string{"Origin": evil}, "", true, []int{403}},
		{"GET /healthz, Host: attacker.example", "GET", "/healthz", map[string]string{"Host": "attacker.example"}, "", true, []int{403, 421}},
		{"GET /v1/runs, Host: attacker.example", "GET", "/v1/runs", map[string]string{"Host": "attacker.example"}, "", true, []int{403, 421}},
		{"GET /v1/stream/attack/big?offset=-1, Host: attacker.example:PORT", "GET", "/v1/stream/attack/big?offset=-1", map[string]string{"Host": "attacker.example:" + port}, "", true, []int{403, 421}},
		{"POST /v1/runs, Host and Origin attacker.example, JSON", "POST", "/v1/runs", map[string]string{"Host": "attacker.example", "Origin": "http://attacker.example", "Content-Type": "application/json"}, runBody, true, []int{403, 421}},
		{"control: POST /v1/runs, Origin: own, application/json", "POST", "/v1/runs", map[string]string{"Origin": own, "Content-Type": "application/json"}, runBody, false, []int{201}},
		{"control: GET /healthz, Host: localhost:PORT", "GET", "/healthz", map[string]string{"Host": "localhost:" + port}, "", false, []int{200}},
	}
	for _, pr := range probes {
		code, hdr, msg, err := do(pr.method, own+pr.path, pr.hdr, []byte(pr.body))
		line := fmt.Sprintf("%-66s → %d", pr.name, code)
		if err != nil {
			line += fmt.Sprintf(" (%v)", err)
		}
		if hdr != nil && hdr.Get("Weir-Error") != "" {
			line += " " + hdr.Get("Weir-Error")
		}
		a.crossLines = append(a.crossLines, line)
		if pr.refuse {
			refused := err == nil && (code < 200 || code > 299)
			if refused {
				p.refused++
			} else {
				p.accepted++
			}
			a.rep.check(refused, "cross-site: %s refused (%d %s)", pr.name, code, clipStr(msg, 90))
		} else {
			a.rep.check(err == nil && code == pr.want[0], "cross-site %s: %d as it should (%d)", pr.name, pr.want[0], code)
		}
		if err == nil && !contains(pr.want, code) && pr.refuse {
			a.rep.note("%s: %d, expected %v: %s", pr.name, code, pr.want, clipStr(msg, 160))
		}
	}
	// A preflight from another origin gets no Access-Control-Allow-Origin.
	code, hdr, _, err := do("OPTIONS", own+"/v1/runs", map[string]string{"Origin": evil, "Access-Control-Request-Method": "POST"}, nil)
	acao := ""
	if hdr != nil {
		acao = hdr.Get("Access-Control-Allow-Origin")
	}
	a.crossLines = append(a.crossLines, fmt.Sprintf("%-66s → %d, Access-Control-Allow-Origin %q", "OPTIONS /v1/runs preflight, Origin: "+evil, code, acao))
	a.rep.check(err == nil && acao == "", "cross-site: a preflight from %s gets no Access-Control-Allow-Origin (%q)", evil, acao)
	client.CloseIdleConnections()
}

// Phase 5: every connection closed; the server must let go of them, and
// stop cleanly.
func (a *attack) after() {
	p := a.samp.phase("5 after")
	a.w.scan()
	_, a.sseCut = cutSummary(a.sse.held)
	_, a.catchupCut = cutSummary(a.catchup.held)
	// A stalled SSE reader of a stream larger than the kernel's buffers
	// blocks in a write: it must be cut by the write timeout.
	if *flagStreamMiB >= 12 {
		stale, uncut := 0, 0
		for _, h := range a.sse.held {
			if time.Since(h.opened) > streamWriteLimit+6*time.Second {
				stale++
				if h.cutAt.IsZero() {
					uncut++
				}
			}
		}
		if stale > 0 {
			a.rep.check(uncut == 0, "SSE readers stalled over 36 s: all cut by the server's write timeout (%d of %d still open)", uncut, stale)
		}
	}
	for _, g := range []*readerGroup{a.sse, a.catchup} {
		for _, h := range g.held {
			h.c.Close()
		}
	}
	deadline := time.Now().Add(min(15*time.Second, time.Until(deadlineOf(a.ctx).Add(-4*time.Second))))
	for {
		_, _, a.afterConns = a.samp.now()
		if a.afterConns <= a.baseConns+2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.drained = time.Since(a.t0) - p.start
	a.rep.check(a.afterConns <= a.baseConns+2, "after: the server's connections back to %d (baseline %d, + 2) within 15 s (%s)", a.afterConns, a.baseConns, secs(a.drained))
	sleepCtx(a.ctx, 2*time.Second)
	a.afterRSS, a.hwm, _ = a.samp.now()
	// The server returns a burst's heap once quiet (every 5 s): wait for
	// RSS to come back, at most 15 s more.
	closed := time.Now()
	rdeadline := closed.Add(min(15*time.Second, time.Until(deadlineOf(a.ctx).Add(-4*time.Second))))
	for {
		a.returnedRSS, _, _ = a.samp.now()
		if a.returnedRSS <= a.baseRSS+*flagSlackMiB*mib || time.Now().After(rdeadline) {
			break
		}
		sleepCtx(a.ctx, 100*time.Millisecond)
	}
	a.returnedIn = time.Since(closed) + 2*time.Second
	a.rep.check(a.returnedRSS <= a.baseRSS+*flagSlackMiB*mib, "after: RSS back to %s ≤ baseline + %d MiB within %s of the last close (at +2 s: %s)",
		mb(a.returnedRSS), *flagSlackMiB, secs(a.returnedIn), mb(a.afterRSS))
	p.detail = fmt.Sprintf("connections %d → %d in %s", p.peakConns, a.afterConns, secs(a.drained))

	a.rep.check(a.srv.alive(), "the server survived the attack")
	a.samp.close()
	var ok bool
	a.exitMsg, ok = a.srv.stop(20 * time.Second)
	a.rep.check(ok, "the server stopped cleanly on SIGTERM (%s)", a.exitMsg)
	logBytes, _ := os.ReadFile(a.srv.logPath)
	a.rep.check(!bytes.Contains(logBytes, []byte("panic")), "no panic in the server's log")
	if n := bytes.Count(logBytes, []byte("internal error")) + bytes.Count(logBytes, []byte(" 500")); n > 0 {
		a.rep.note("the server's log has %d lines about a 500 / internal error", n)
	}
}

// encodings is E: what the store holds of the appends it is committing,
// beside their bodies. SQLite commits one op at a time: its encoded batch,
// the tail cache's copy, the driver's bound copy. PostgreSQL commits in
// groups of at most 8 MiB and one append more, on 2 connections: each
// group's encoded batches, the driver's encoding of them as parameters and
// its send buffer.
func (a *attack) encodings() int64 {
	if a.storeName == "postgres" {
		return 2 * 3 * (8<<20 + maxAppendBytes)
	}
	return 3 * maxAppendBytes
}

// print writes the report and returns the exit code.
func (a *attack) print() int {
	rep := a.rep
	var peak int64
	peakPhase := ""
	for _, p := range a.samp.order[2:] {
		if p.peakRSS > peak {
			peak, peakPhase = p.peakRSS, p.name
		}
	}
	page := int64(max(readPageBytes, a.record))
	rSize := page + int64(a.record) + sseBuffer // R
	enc := a.encodings()                        // E
	gc := *flagGC
	conns := int64(a.conns())
	connKiB, slack := *flagConnKiB, *flagSlackMiB*mib
	bound := a.baseRSS + gc*(int64(a.maxReaders)*rSize+a.uploadCap+enc) + conns*connKiB*kib + slack
	rep.check(peak <= bound, "budget: peak RSS %s (phase %s) ≤ bound %s", mb(peak), peakPhase, mb(bound))
	held := a.sse.ok + a.catchup.ok
	readersPeak := max(a.pSSE.peakRSS, a.pCatchup.peakRSS)
	readersBound := a.baseRSS + gc*int64(held)*rSize + int64(*flagReaders+*flagCatchup)*connKiB*kib + slack
	rep.check(readersPeak <= readersBound, "budget: phases 1–2 (readers only) peak RSS %s ≤ %s", mb(readersPeak), mb(readersBound))
	readersLive := max(a.pSSE.peakLive, a.pCatchup.peakLive)
	rep.check(readersLive <= int64(held)*rSize+slack, "budget: phases 1–2 live heap %s ≤ held %d × %s + %d MiB = %s",
		mb(readersLive), held, humanBytes(rSize), *flagSlackMiB, mb(int64(held)*rSize+slack))
	// The uploads' own: what the burst adds over the phases before it.
	before := max(a.baseRSS, readersPeak)
	burstRise := a.pBurst.peakRSS - before
	if *flagBurst > 0 {
		rep.check(burstRise <= gc*(a.uploadCap+enc)+slack, "budget: the upload burst's RSS rise %s ≤ %d × (upload cap + encodings %s) + %d MiB = %s",
			mb(burstRise), gc, mb(enc), *flagSlackMiB, mb(gc*(a.uploadCap+enc)+slack))
		liveBound := int64(held)*rSize + a.uploadCap + enc + slack
		rep.check(a.pBurst.peakLive <= liveBound, "budget: the burst's live heap %s ≤ readers held × %s + upload cap + encodings + %d MiB = %s",
			mb(a.pBurst.peakLive), humanBytes(rSize), *flagSlackMiB, mb(liveBound))
	}
	runtime := time.Since(a.t0)
	rep.check(runtime <= *flagDuration, "the run within -duration %s (%s)", *flagDuration, secs(runtime))

	out := os.Stdout
	readersNote := " (server default)"
	if *flagMaxReaders > 0 {
		readersNote = ""
	}
	fmt.Fprintf(out, "\n## weir attack: %s, --max-readers %d%s, upload cap %s; stream %d MiB in %s appends of %s records\n\n",
		a.storeName, a.maxReaders, readersNote, humanBytes(a.uploadCap), *flagStreamMiB, humanBytes(int64(a.body)), humanBytes(int64(a.record)))
	fmt.Fprintf(out, "| phase | from | to | accepted | refused | other | peak VmRSS | Δ baseline | peak live heap (GCs) | peak conns | peak kernel TCP mem |\n")
	fmt.Fprintf(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range a.samp.order {
		acc, ref, oth := "", "", ""
		if c := p.name[0]; c >= '1' && c <= '4' {
			acc, ref, oth = strconv.Itoa(p.accepted), strconv.Itoa(p.refused), strconv.Itoa(p.other)
		}
		live := "-"
		if p.gcs > 0 {
			live = fmt.Sprintf("%s (%d)", mb(p.peakLive), p.gcs)
		}
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s | %s | %+.1f MiB | %s | %d | %s |\n", p.name, secs(p.start), secs(p.end), acc, ref, oth,
			mb(p.peakRSS), float64(p.peakRSS-a.baseRSS)/mib, live, p.peakConns, mb(p.peakTCP))
	}
	fmt.Fprintf(out, "\n")
	fmt.Fprintf(out, "- VmRSS at start %s; baseline (stream written, idle 1–12 s) %s; peak %s (%s); VmHWM %s; after (all closed, +2 s) %s; +%s %s\n",
		mb(a.startRSS), mb(a.baseRSS), mb(peak), peakPhase, mb(a.hwm), mb(a.afterRSS), secs(a.returnedIn), mb(a.returnedRSS))
	fmt.Fprintf(out, "- per held reader: SSE (phase 1 peak − baseline) / %d = %s; catch-up (phase 2 peak − phase 1 peak) / %d = %s\n",
		a.sse.ok, perReader(a.pSSE.peakRSS-a.baseRSS, a.sse.ok), a.catchup.ok, perReader(a.pCatchup.peakRSS-a.pSSE.peakRSS, a.catchup.ok))
	fmt.Fprintf(out, "- 1 SSE: %d × GET ?offset=-1&live=sse, headers read, never more: %d × 200 held, %d × 503 (Retry-After), %d other; cut by the server: %s\n",
		*flagReaders, a.sse.ok, a.sse.busy, a.sse.other+a.sse.errs, a.sseCut)
	fmt.Fprintf(out, "- 2 catch-up: %d × GET ?offset=-1, the same: %d × 200 held, %d × 503, %d other; cut by the server: %s\n",
		*flagCatchup, a.catchup.ok, a.catchup.busy, a.catchup.other+a.catchup.errs, a.catchupCut)
	fmt.Fprintf(out, "- 3a burst: %d × 16 MiB at full speed: %s; RSS rise over the phases before: %+.1f MiB\n", *flagBurst, a.burst, float64(burstRise)/mib)
	fmt.Fprintf(out, "- 3b trickle (10 MiB announced, 1 B/s): %s\n", a.trickle)
	fmt.Fprintf(out, "- 3b silent (16 MiB announced, nothing sent): %s\n", a.silent)
	fmt.Fprintf(out, "- 3b oversize (200 MiB announced, nothing sent): %s\n", a.oversize)
	fmt.Fprintf(out, "- 3b steady control (10 MiB announced, 4 KiB/s): %s; %s sent each\n", a.steady, humanBytes(a.steadySent))
	fmt.Fprintf(out, "- 4 cross-site / foreign Host:\n")
	for _, l := range a.crossLines {
		fmt.Fprintf(out, "    %s\n", l)
	}
	fmt.Fprintf(out, "- 5 after: %s; server: %s\n", a.samp.order[len(a.samp.order)-1].detail, a.exitMsg)
	fmt.Fprintf(out, "- R (a reader) = page %s + record %s + SSE buffer %s = %s; E (the store's encodings) = %s; gc = %d\n",
		humanBytes(page), humanBytes(int64(a.record)), humanBytes(sseBuffer), humanBytes(rSize), mb(enc), gc)
	fmt.Fprintf(out, "- bound = baseline + gc × (max-readers × R + upload cap + E) + conns × %d KiB + %d MiB\n", connKiB, *flagSlackMiB)
	fmt.Fprintf(out, "        = %s + %d × (%d × %s + %s + %s) + %d × %d KiB + %d MiB = %s; peak %s\n",
		mb(a.baseRSS), gc, a.maxReaders, humanBytes(rSize), humanBytes(a.uploadCap), mb(enc), conns, connKiB, *flagSlackMiB, mb(bound), mb(peak))
	fmt.Fprintf(out, "- readers-only bound = baseline + gc × held %d × R + %d conns × %d KiB + %d MiB = %s; phases 1–2 peak %s (live heap %s)\n",
		held, *flagReaders+*flagCatchup, connKiB, *flagSlackMiB, mb(readersBound), mb(readersPeak), mb(readersLive))
	fmt.Fprintf(out, "- after: RSS %s at +2 s, %s at +%s\n", mb(a.afterRSS), mb(a.returnedRSS), secs(a.returnedIn))
	fmt.Fprintf(out, "- runtime %s\n", secs(runtime))
	for _, n := range rep.notes {
		fmt.Fprintf(out, "- note: %s\n", n)
	}
	fmt.Fprintf(out, "\n")
	for _, c := range rep.checks {
		mark := "ok  "
		if !c.ok {
			mark = "FAIL"
		}
		fmt.Fprintf(out, "%s %s\n", mark, c.what)
	}
	if f := rep.failed(); len(f) > 0 {
		fmt.Fprintf(out, "\nFAIL: %d check(s) did not hold:\n", len(f))
		for _, s := range f {
			fmt.Fprintf(out, "  - %s\n", s)
		}
		if *flagKeep {
			fmt.Fprintf(out, "(server log: %s)\n", a.srv.logPath)
		} else {
			fmt.Fprintf(out, "(-keep keeps the server's log)\n")
		}
		return 1
	}
	fmt.Fprintf(out, "\nPASS: every budget held\n")
	return 0
}

func perReader(delta int64, n int) string {
	if n == 0 {
		return "-"
	}
	if delta <= 0 {
		return "≤ 0 KiB (the heap freed by earlier garbage was reused)"
	}
	return fmt.Sprintf("%.0f KiB", float64(delta)/float64(n)/kib)
}

func sentOf(us []*upload) int64 {
	if len(us) == 0 {
		return 0
	}
	return atomic.LoadInt64(&us[0].sent)
}

func humanBytes(n int64) string {
	switch {
	case n >= mib && n%mib == 0:
		return fmt.Sprintf("%d MiB", n/mib)
	case n >= kib && n%kib == 0:
		return fmt.Sprintf("%d KiB", n/kib)
	}
	return fmt.Sprintf("%d B", n)
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func clipStr(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func deadlineOf(ctx context.Context) time.Time {
	d, ok := ctx.Deadline()
	if !ok {
		return time.Now().Add(time.Hour)
	}
	return d
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
