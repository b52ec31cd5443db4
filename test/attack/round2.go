package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirhq/weir/delivery"
)

// Round two (-round 2): the cases of issue 21, each against a real weir
// server on a fresh store, each with the bound it must now hold. A server
// with a token, a World secret and --max-readers 200 serves them; RSS is
// sampled as in round one, and each case that measures memory reports its
// rise per request or reader beside its bound:
//
//  1. JSON bodies of 8 million values ([0,0,…], 16 MiB) to a JSON stream:
//     413, and a rise per request ≤ gc × 16 MiB (the body) + slack / 8;
//  2. committed-view SSE readers behind a writer that appended 64 MiB and
//     never commits: a rise per reader ≤ gc × R + conn (R: a page, the SSE
//     buffer and the committed filter's hold, a page);
//  3. token-less reads declaring bodies they never send: refused at once
//     (400), an authorized write goes through at once; uploads trickled at
//     2 KiB/s (above the minimum rate) give back what they announced
//     within the grace, and a write past the budget goes through then;
//  4. stalled SSE and catch-up readers of 4 MiB records: a rise per reader
//     ≤ gc × R + conn, the record never held whole;
//  5. the World's /info and /chunks once the readers fill --max-readers:
//     503 with Retry-After;
//  6. queued messages whose target is not signed with the World secret:
//     403, nothing queued, nothing sent;
//  7. queue names and message ids with CR, LF or NUL: 400, nothing queued;
//  8. World events naming a Go run's id: 409;
//  9. an ended World run: no step starts or retries (410), a cancel of a
//     cancelled run is 200 and adds no event;
//  10. World stream names "..", and not UTF-8: 400;
//  11. World followers that hang up: no 500, no ERROR in the log;
//  12. a delivery target that hangs: the other target's messages are
//     delivered meanwhile.

const (
	round2Token   = "attack-round-two-token-0123456789"
	round2Secret  = "attack-round-two-world-secret-0123456789"
	round2Readers = 200
)

// r2 is one round-two run.
type r2 struct {
	ctx  context.Context
	rep  *report
	srv  *server
	samp *sampler
	rows []r2row
}

// r2row is one case's line of the table.
type r2row struct {
	name, measured, bound string
	ok                    bool
}

func (a *r2) row(ok bool, name, measured, bound string) {
	a.rows = append(a.rows, r2row{name, measured, bound, ok})
	a.rep.check(ok, "%s: %s (bound %s)", name, measured, bound)
}

// call sends a request with the token (unless hdr says otherwise) and
// returns the status, headers and the first 4 KiB of the reply.
func (a *r2) call(method, path string, body []byte, hdr ...string) (int, http.Header, string) {
	h := map[string]string{"Authorization": "Bearer " + round2Token}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			delete(h, hdr[i])
			continue
		}
		h[hdr[i]] = hdr[i+1]
	}
	code, rh, msg, err := do(method, a.srv.url+path, h, body)
	if err != nil {
		return 0, nil, err.Error()
	}
	return code, rh, msg
}

// roundCase is one case of a round: a name, and what runs it.
type roundCase struct {
	name string
	f    func() error
}

func runRound2() int {
	return runRound("two (issue 21)", func(a *r2) []roundCase {
		return []roundCase{
			{"1 JSON split", a.jsonSplit},
			{"2 committed readers", a.committedReaders},
			{"3 upload budget", a.uploadBudget},
			{"4 large records", a.largeRecords},
			{"6-7 queue", a.queue},
			{"8-10 World events and names", a.worldEvents},
			{"11 World hang-ups", a.hangUps},
			{"12 hung target", a.hungTarget},
		}
	})
}

// runRound runs a round's cases against one server and prints its table.
func runRound(title string, cases func(a *r2) []roundCase) int {
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), *flagDuration+60*time.Second)
	defer cancel()
	if _, err := raiseNoFile(); err != nil {
		logf("RLIMIT_NOFILE: %v", err)
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
	storeName, storeURL, drop, err := attackStore(ctx, dir)
	if err != nil {
		logf("%v", err)
		return 2
	}
	defer drop()
	a := &r2{ctx: ctx, rep: &report{}}
	a.srv, err = startServer(ctx, bin, storeURL, dir, []string{"--token", round2Token, "--world-secret", round2Secret,
		"--max-readers", strconv.Itoa(round2Readers), "--long-poll-timeout", "20s"})
	if err != nil {
		logf("%v", err)
		return 2
	}
	defer func() {
		if a.srv.alive() {
			a.srv.kill()
		}
	}()
	logf("round %s: weir server pid %d at %s (store %s)", title, a.srv.pid, a.srv.url, storeName)
	a.samp = newSampler(a.srv.pid, a.srv.port, t0)
	gc := a.samp.gc
	gcSink.Store(&gc)

	for _, c := range cases(a) {
		if ctx.Err() != nil {
			a.rep.check(false, "%s: the run's deadline passed first", c.name)
			break
		}
		a.samp.phase(c.name)
		if err := c.f(); err != nil {
			a.rep.check(false, "%s: %v", c.name, err)
		}
		client.CloseIdleConnections()
	}
	a.samp.close()
	msg, ok := a.srv.stop(20 * time.Second)
	a.rep.check(ok, "%s", msg)

	fmt.Printf("\n## Round %s: %s, %s\n\n", title, storeName, secs(time.Since(t0)))
	fmt.Println("| case | measured | bound | |")
	fmt.Println("|---|---|---|---|")
	for _, r := range a.rows {
		mark := "ok"
		if !r.ok {
			mark = "**FAILED**"
		}
		fmt.Printf("| %s | %s | %s | %s |\n", r.name, r.measured, r.bound, mark)
	}
	fmt.Println()
	failed := a.rep.failed()
	for _, c := range a.rep.checks {
		mark := "ok  "
		if !c.ok {
			mark = "FAIL"
		}
		fmt.Printf("%s %s\n", mark, c.what)
	}
	if len(failed) > 0 {
		fmt.Printf("\n%d check(s) failed\n", len(failed))
		return 1
	}
	return 0
}

// attackStore is the store a run uses: a SQLite file in dir, or a fresh
// PostgreSQL database dropped by the returned func.
func attackStore(ctx context.Context, dir string) (name, url string, drop func(), err error) {
	switch {
	case strings.HasPrefix(*flagStore, "postgres://") || strings.HasPrefix(*flagStore, "postgresql://"):
		u, d, err := freshDatabase(ctx, *flagStore)
		if err != nil {
			return "", "", nil, err
		}
		return "postgres", u, func() {
			if err := d(); err != nil {
				logf("dropping the database: %v", err)
			}
		}, nil
	case *flagStore == "sqlite":
		return "sqlite", "sqlite:" + filepath.Join(dir, "attack.db"), func() {}, nil
	}
	return "", "", nil, fmt.Errorf("-store: sqlite or a postgres:// URL, not %q", *flagStore)
}

// settled is the server's RSS once it has been quiet a moment.
func (a *r2) settled() int64 {
	sleepCtx(a.ctx, 500*time.Millisecond)
	rss, _, _ := a.samp.now()
	return rss
}

// rise runs f and returns how far the server's RSS rose over what it was
// before, at its peak while f ran.
func (a *r2) rise(f func()) int64 {
	base := a.settled()
	var peak atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if rss, _, _ := a.samp.now(); rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(stop)
	<-done
	return max(peak.Load()-base, 0)
}

var (
	slack = func() int64 { return *flagSlackMiB * mib }
	conn  = func() int64 { return *flagConnKiB * kib }
)

// reader is R: what a stalled reader may hold live (round one's, with the
// committed view's hold of a page).
const reader = 2*readPageBytes + sseBuffer

// 1: a JSON body is counted before it is split.
func (a *r2) jsonSplit() error {
	if code, _, msg := a.call("PUT", "/v1/stream/r2/json", nil, "Content-Type", "application/json"); code != 201 {
		return fmt.Errorf("PUT: %d %s", code, msg)
	}
	body := make([]byte, 0, maxBodyBytes)
	body = append(body, '[')
	for len(body)+2 < maxBodyBytes {
		if len(body) > 1 {
			body = append(body, ',')
		}
		body = append(body, '0')
	}
	body = append(body, ']')
	const n = 8
	codes := make([]int, n)
	rise := a.rise(func() {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				codes[i], _, _ = a.call("POST", "/v1/stream/r2/json", body, "Content-Type", "application/json")
			})
		}
		wg.Wait()
	})
	refused := 0
	for _, c := range codes {
		if c == 413 {
			refused++
		}
	}
	per := rise / n
	bound := *flagGC*int64(len(body)) + slack()/n
	a.row(refused == n && per <= bound, fmt.Sprintf("1. %d JSON bodies of %d values", n, len(body)/2),
		fmt.Sprintf("%d/%d answered 413; RSS +%s, %s a request", refused, n, mb(rise), mb(per)), "413; "+mb(bound)+" a request")
	return nil
}

// writer appends total bytes to path under writer w's attempt 1, in
// bodies of 1 MiB of 64 KiB frames, and never commits.
func (a *r2) writer(path, w string, total int) error {
	const chunk = 64 * kib
	var body []byte
	for len(body)+4+chunk <= mib {
		body = binary.BigEndian.AppendUint32(body, chunk)
		body = append(body, bytes.Repeat([]byte("u"), chunk)...)
	}
	per := len(body) / (4 + chunk)
	for seq := 0; seq*chunk < total; seq += per {
		code, _, msg := a.call("POST", "/v1/stream/"+path, body, "Content-Type", "text/plain", "Weir-Framing", "u32be",
			"Weir-Writer", w, "Weir-Attempt", "1", "Weir-Seq", strconv.Itoa(seq))
		if code != 200 {
			return fmt.Errorf("append: %d %s", code, msg)
		}
	}
	return nil
}

// held opens n stalled readers of target and returns them (and how many
// were refused).
func (a *r2) held(target string, n int) *readerGroup {
	return openReaders(a.ctx, a.srv.addr, target, n, &watcher{port: a.srv.port})
}

func closeAll(g *readerGroup) {
	for _, h := range g.held {
		h.c.Close()
	}
}

// 2: committed readers hold a page of others' uncommitted data.
func (a *r2) committedReaders() error {
	if code, _, msg := a.call("PUT", "/v1/stream/r2/open", nil, "Content-Type", "text/plain"); code != 201 {
		return fmt.Errorf("PUT: %d %s", code, msg)
	}
	if code, _, msg := a.call("POST", "/v1/stream/r2/open", []byte("first"), "Content-Type", "text/plain"); code != 204 {
		return fmt.Errorf("POST: %d %s", code, msg)
	}
	if err := a.writer("r2/open", "open-writer", 64*mib); err != nil {
		return err
	}
	const n = 64
	var g *readerGroup
	rise := a.rise(func() {
		// SSE of the committed view (the default): "first", then each
		// waits behind the open writer, having read past its 64 MiB.
		g = a.held("/v1/stream/r2/open?offset=-1&live=sse", n)
		sleepCtx(a.ctx, 3*time.Second)
		// Plain catch-up reads meanwhile.
		for range 4 {
			if code, _, _ := a.call("GET", "/v1/stream/r2/open?offset=-1", nil); code != 200 {
				a.rep.check(false, "2: a catch-up read of the committed view: %d", code)
			}
		}
	})
	defer closeAll(g)
	a.readersRow(fmt.Sprintf("2. %d committed readers behind 64 MiB uncommitted", n), n, g.ok, rise, "")
	return nil
}

func kb(n int64) string { return fmt.Sprintf("%d KiB", n/kib) }

// readersRow checks that held readers of want raised RSS by rise at most
// held × (gc × R + conn) + slack (the store's own memory: SQLite reads a
// blob whole into its page cache for each window, on each of its read
// connections), and reports the rise a reader and the phase's live heap.
func (a *r2) readersRow(name string, want, held int, rise int64, was string) {
	per := *flagGC*reader + conn()
	bound := int64(held)*per + slack()
	a.samp.mu.Lock()
	live := a.samp.cur.peakLive
	a.samp.mu.Unlock()
	a.row(held == want && rise <= bound, name,
		fmt.Sprintf("%d held; RSS +%s, %s a reader; live heap %s", held, mb(rise), kb(rise/int64(max(held, 1))), mb(live)),
		fmt.Sprintf("%s a reader + %s%s", kb(per), mb(slack()), was))
}

// 3: requests that send no body hold no budget; slow uploads give it back.
func (a *r2) uploadBudget() error {
	if code, _, msg := a.call("PUT", "/v1/stream/r2/up", nil, "Content-Type", "text/plain"); code != 201 {
		return fmt.Errorf("PUT: %d %s", code, msg)
	}
	// 16 token-less SSE reads declaring 16 MiB bodies they never send.
	refused := 0
	var conns []net.Conn
	for range 16 {
		c, err := net.DialTimeout("tcp", a.srv.addr, 5*time.Second)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /v1/stream/r2/up?offset=-1&live=sse HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", a.srv.addr, maxBodyBytes)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && resp.StatusCode == 400 {
			refused++
		}
	}
	start := time.Now()
	code, _, _ := a.call("POST", "/v1/stream/r2/up", bytes.Repeat([]byte("w"), mib), "Content-Type", "text/plain")
	took := time.Since(start)
	for _, c := range conns {
		c.Close()
	}
	a.row(refused == 16 && code == 204 && took < 5*time.Second, "3a. 16 token-less reads declaring 16 MiB",
		fmt.Sprintf("%d/16 refused at once; an authorized 1 MiB write: %d in %s", refused, code, secs(took)), "400; the write 204 at once")

	// Sixteen authorized uploads announcing 16 MiB, trickled at 2 KiB/s:
	// they fill the budget (256 MiB) until the grace ends, then hold only
	// what they sent.
	var ups []*upload
	for range 16 {
		u, err := startUploadAuth(a.srv.addr, "/v1/stream/r2/up", maxBodyBytes, 100*time.Millisecond, 205)
		if err != nil {
			return err
		}
		ups = append(ups, u)
	}
	defer func() {
		for _, u := range ups {
			u.close()
		}
	}()
	sleepCtx(a.ctx, 2*time.Second)
	early, _, _ := a.call("POST", "/v1/stream/r2/up", bytes.Repeat([]byte("w"), maxBodyBytes), "Content-Type", "text/plain")
	deadline := time.Now().Add(bodyGrace + 10*time.Second)
	late := 0
	var after time.Duration
	for time.Now().Before(deadline) && a.ctx.Err() == nil {
		sleepCtx(a.ctx, time.Second)
		if late, _, _ = a.call("POST", "/v1/stream/r2/up", bytes.Repeat([]byte("w"), maxBodyBytes), "Content-Type", "text/plain"); late == 204 {
			after = time.Since(ups[0].started)
			break
		}
	}
	a.row(late == 204 && after <= bodyGrace+8*time.Second, "3b. 16 uploads of 16 MiB trickled at 2 KiB/s",
		fmt.Sprintf("a 16 MiB write meanwhile: %d at 2 s, %d at %s", early, late, secs(after)),
		fmt.Sprintf("204 within %s (the grace)", secs(bodyGrace+8*time.Second)))
	return nil
}

// startUploadAuth is startUpload with the token: a POST of length bytes,
// step bytes every interval.
func startUploadAuth(addr, path string, length int64, interval time.Duration, step int) (*upload, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	u := &upload{kind: "trickle", started: time.Now(), c: c, done: make(chan struct{})}
	hdr := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n",
		path, addr, round2Token, length)
	if _, err := io.WriteString(c, hdr); err != nil {
		c.Close()
		return nil, err
	}
	go func() {
		defer close(u.done)
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			u.status = resp.StatusCode
			resp.Body.Close()
		}
	}()
	go func() {
		blob := bytes.Repeat([]byte("t"), step)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-u.done:
				return
			case <-t.C:
				if _, err := c.Write(blob); err != nil {
					return
				}
			}
		}
	}()
	return u, nil
}

// 4 and 5: stalled readers of 4 MiB records; then the World's reads at
// the readers' cap.
func (a *r2) largeRecords() error {
	if code, _, msg := a.call("PUT", "/v1/stream/r2/large", nil, "Content-Type", "application/octet-stream"); code != 201 {
		return fmt.Errorf("PUT: %d %s", code, msg)
	}
	for i := range 8 {
		if code, _, msg := a.call("POST", "/v1/stream/r2/large", bytes.Repeat([]byte{byte('A' + i)}, 4*mib),
			"Content-Type", "application/octet-stream"); code != 204 {
			return fmt.Errorf("POST: %d %s", code, msg)
		}
	}
	const n = 64
	var sse, catchup *readerGroup
	rise := a.rise(func() {
		sse = a.held("/v1/stream/r2/large?offset=-1&live=sse", n)
		catchup = a.held("/v1/stream/r2/large?offset=-1", n)
		sleepCtx(a.ctx, 3*time.Second)
	})
	defer closeAll(sse)
	defer closeAll(catchup)
	held := sse.ok + catchup.ok
	a.readersRow(fmt.Sprintf("4. %d stalled SSE and catch-up readers of 4 MiB records", 2*n), 2*n, held, rise, " (was about 11 MB a reader)")

	// Fill the readers' cap, then the World's reads are refused too.
	run, err := a.worldRun()
	if err != nil {
		return err
	}
	if code, _, msg := a.call("POST", "/v1/world/runs/"+run+"/streams/strm_r2", frame([]byte("x")),
		"Content-Type", "application/octet-stream", "Weir-Framing", "u32be"); code != 200 {
		return fmt.Errorf("a World write: %d %s", code, msg)
	}
	more := a.held("/v1/stream/r2/large?offset=-1&live=sse", round2Readers-held)
	defer closeAll(more)
	busy := 0
	for _, p := range []string{"/v1/world/streams/strm_r2/info", "/v1/world/streams/strm_r2/chunks", "/v1/world/streams/strm_r2"} {
		if code, h, _ := a.call("GET", p, nil); code == 503 && h.Get("Retry-After") != "" {
			busy++
		}
	}
	a.row(busy == 3, fmt.Sprintf("5. World /info, /chunks, read at --max-readers %d", round2Readers),
		fmt.Sprintf("%d/3 answered 503 with Retry-After", busy), "503 each")
	return nil
}

func frame(b []byte) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...) }

// worldRun creates and starts a World run.
func (a *r2) worldRun() (string, error) {
	code, _, msg := a.call("POST", "/v1/world/runs/-/events",
		[]byte(`{"eventType":"run_created","eventData":{"deploymentId":"d","workflowName":"workflow//w.ts//w","input":[]}}`),
		"Content-Type", "application/json")
	if code != 200 {
		return "", fmt.Errorf("run_created: %d %s", code, msg)
	}
	var rep struct {
		Run struct {
			RunID string `json:"runId"`
		} `json:"run"`
	}
	if err := json.Unmarshal([]byte(msg), &rep); err != nil || rep.Run.RunID == "" {
		return "", fmt.Errorf("run_created reply %q", msg)
	}
	if code, _, msg := a.event(rep.Run.RunID, "run_started", "", ""); code != 200 {
		return "", fmt.Errorf("run_started: %d %s", code, msg)
	}
	return rep.Run.RunID, nil
}

func (a *r2) event(run, typ, corr, data string) (int, http.Header, string) {
	b := `{"eventType":"` + typ + `"`
	if corr != "" {
		b += `,"correlationId":"` + corr + `"`
	}
	if data != "" {
		b += `,"eventData":` + data
	}
	return a.call("POST", "/v1/world/runs/"+run+"/events", []byte(b+"}"), "Content-Type", "application/json")
}

func (a *r2) enqueue(queue, id, target, sig string) int {
	m := map[string]any{"queueName": queue, "payload": map[string]any{}, "target": target}
	if id != "" {
		m["messageId"] = id
	}
	if sig != "" {
		m["targetSignature"] = sig
	}
	b, _ := json.Marshal(m)
	code, _, _ := a.call("POST", "/v1/world/queue", b, "Content-Type", "application/json")
	return code
}

func (a *r2) pending() int {
	_, _, msg := a.call("GET", "/v1/world/queue?state=pending", nil)
	var v struct {
		Messages []json.RawMessage `json:"messages"`
	}
	_ = json.Unmarshal([]byte(msg), &v)
	return len(v.Messages)
}

// 6 and 7: targets must be signed; names that cannot be headers are not
// stored.
func (a *r2) queue() error {
	before := a.pending()
	// A port scan of the server's own host, and a cloud's metadata.
	var codes []int
	for _, t := range []string{"http://127.0.0.1:6379", "http://127.0.0.1:22", "http://169.254.169.254/latest"} {
		codes = append(codes, a.enqueue("__wkf_step_s", "", t, ""))
		codes = append(codes, a.enqueue("__wkf_step_s", "", t, delivery.SignTarget([]byte("not-the-world-secret"), t)))
	}
	forbidden := 0
	for _, c := range codes {
		if c == 403 {
			forbidden++
		}
	}
	a.row(forbidden == len(codes) && a.pending() == before, "6. unsigned or wrongly signed targets",
		fmt.Sprintf("%d/%d answered 403; %d queued", forbidden, len(codes), a.pending()-before), "403, nothing queued")
	target := "http://127.0.0.1:1"
	sig := delivery.SignTarget([]byte(round2Secret), target)
	bad := 0
	for _, c := range [][2]string{{"__wkf_step_s\r\nX-Evil: 1", ""}, {"__wkf_step_s\x00", ""}, {"__wkf_step_s", "msg_\r\n"}, {"__wkf_step_s", "msg_\x7f"}} {
		if a.enqueue(c[0], c[1], target, sig) == 400 {
			bad++
		}
	}
	a.row(bad == 4 && a.pending() == before, "7. queue names and message ids with CR, LF, NUL, DEL",
		fmt.Sprintf("%d/4 answered 400; %d queued", bad, a.pending()-before), "400, nothing queued")
	return nil
}

// 8, 9 and 10.
func (a *r2) worldEvents() error {
	code, _, msg := a.call("POST", "/v1/runs", []byte(`{"workflow":"demo.tokens","id":"r2-go-run","input":{"text":"a b"}}`),
		"Content-Type", "application/json")
	if code != 200 && code != 201 {
		return fmt.Errorf("a Go run: %d %s", code, msg)
	}
	c1, _, _ := a.event("r2-go-run", "run_started", "", `{"deploymentId":"d","workflowName":"w","input":[]}`)
	c2, _, _ := a.event("r2-go-run", "run_created", "", `{"deploymentId":"d","workflowName":"w","input":[]}`)
	a.row(c1 == 409 && c2 == 409, "8. World events naming a Go run's id", fmt.Sprintf("run_started %d, run_created %d", c1, c2), "409")

	run, err := a.worldRun()
	if err != nil {
		return err
	}
	a.event(run, "step_created", "step_1", `{"stepName":"s"}`)
	a.event(run, "step_started", "step_1", "")
	cancel1, _, _ := a.call("POST", "/v1/world/runs/"+run+"/cancel", nil)
	cancel2, _, _ := a.call("POST", "/v1/world/runs/"+run+"/cancel", nil)
	var codes []int
	for range 3 {
		c, _, _ := a.event(run, "step_started", "step_1", "")
		codes = append(codes, c)
		c, _, _ = a.event(run, "step_retrying", "step_1", `{"error":{"message":"x"}}`)
		codes = append(codes, c)
		c, _, _ = a.event(run, "run_cancelled", "", "")
		codes = append(codes, c)
	}
	_, _, evs := a.call("GET", "/v1/world/runs/"+run+"/events?limit=1000", nil)
	cancels := strings.Count(evs, `"eventType":"run_cancelled"`)
	refused := 0
	for i, c := range codes {
		if i%3 < 2 && c == 410 || i%3 == 2 && c == 200 {
			refused++
		}
	}
	a.row(cancel1 == 202 && cancel2 == 200 && refused == len(codes) && cancels == 1, "9. an ended World run",
		fmt.Sprintf("cancel %d then %d; step_started/step_retrying %v; %d run_cancelled in the log", cancel1, cancel2, codes, cancels),
		"202, 200; 410; one run_cancelled")

	names := 0
	for _, n := range []string{"..", "%2E%2E", "strm_%FF", "."} {
		if c, _, _ := a.call("POST", "/v1/world/runs/"+run+"/streams/"+n, frame([]byte("x")), "Content-Type", "application/octet-stream",
			"Weir-Framing", "u32be"); c == 400 || c == 404 {
			names++
		}
	}
	a.row(names == 4, "10. World stream names .., ., not UTF-8", fmt.Sprintf("%d/4 refused", names), "400 (a path the router cleans: 404)")
	return nil
}

// 11: World followers that hang up are not errors.
func (a *r2) hangUps() error {
	fives := func() int {
		resp, err := client.Get(a.srv.url + "/metrics")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		n := 0
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			l := sc.Text()
			if strings.HasPrefix(l, "weir_http_requests_total") && strings.Contains(l, `code="500"`) {
				f := strings.Fields(l)
				v, _ := strconv.Atoi(f[len(f)-1])
				n += v
			}
		}
		return n
	}
	before := fives()
	logBefore, _ := os.ReadFile(a.srv.logPath)
	for range 20 {
		ctx, cancel := context.WithTimeout(a.ctx, 300*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, "GET", a.srv.url+"/v1/world/streams/strm_never_written?follow=true", nil)
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		cancel()
	}
	sleepCtx(a.ctx, 500*time.Millisecond)
	after := fives()
	logAfter, _ := os.ReadFile(a.srv.logPath)
	errs := strings.Count(string(logAfter[len(logBefore):]), "level=ERROR")
	a.row(after == before && errs == 0, "11. 20 World followers that hang up", fmt.Sprintf("%d more 500s, %d ERROR lines", after-before, errs), "none")
	return nil
}

// 12: a target that hangs does not stall the others.
func (a *r2) hungTarget() error {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(release)
	var got atomic.Int64
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.WriteHeader(200)
		_, _ = io.WriteString(w, "{}")
	}))
	defer ok.Close()
	for range 120 {
		a.enqueue("__wkf_step_s", "", hung.URL, delivery.SignTarget([]byte(round2Secret), hung.URL))
	}
	for range 10 {
		a.enqueue("__wkf_step_s", "", ok.URL, delivery.SignTarget([]byte(round2Secret), ok.URL))
	}
	start := time.Now()
	for got.Load() < 10 && time.Since(start) < 20*time.Second {
		sleepCtx(a.ctx, 50*time.Millisecond)
	}
	a.row(got.Load() == 10, "12. 120 messages to a target that hangs, then 10 to another",
		fmt.Sprintf("%d/10 delivered to the other in %s", got.Load(), secs(time.Since(start))), "all, within seconds (was: after 15 min)")
	return nil
}
