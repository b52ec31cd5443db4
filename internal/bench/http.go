package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/store"
)

// runHTTP: one client, sequential single-chunk POSTs to a Durable Streams
// stream created (PUT) under Config.URL, or under an in-process weir server
// on loopback. The baseline is the same client against a no-op net/http
// server on loopback: the floor of the HTTP stack and the network.
//
// In the same run it measures what bounds the figures (Result.Extra):
//
//   - the bound of one sequential client, one durable commit per request:
//     1 / (one fsync on the store's disk + one no-op-server request), and
//     the client's req/s over it (ratio_to_bound);
//   - Config.Clients clients at once, each on its own stream, for as long
//     as the sequential client ran: their total req/s over one client's
//     (concurrent_ratio), which is what the store's group commit buys;
//   - what else bounds them: the store's own append of one chunk, without
//     HTTP (store_append_ms, in process only), and the process's CPU per
//     request with the clients at once (cpu_bound_req_per_s: the cores over
//     it; the clients run in this process too).
//
// The phases are interleaved in httpRounds rounds, so that a change in the
// machine's load during the run moves every figure alike, not one of them.
func runHTTP(ctx context.Context, v *env) (*Result, error) {
	base := v.cfg.URL
	target := base
	if base == "" {
		u, stop, err := weirServer(ctx, v)
		if err != nil {
			return nil, err
		}
		defer stop()
		base, target = u, "in-process weir server"
	}

	nop, stopNop, err := listen(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Stream-Next-Offset", "0")
		if r.Method == http.MethodPut {
			w.WriteHeader(http.StatusCreated)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	if err != nil {
		return nil, err
	}
	defer stopNop()

	v.prog.phase("requests")
	nopP, err := newPoster(ctx, v, nop+"/v1/stream/", 0)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	defer nopP.close()
	one, err := newPoster(ctx, v, base, 0)
	if err != nil {
		return nil, err
	}
	defer one.close()
	many, nopMany := make([]*poster, v.cfg.Clients), make([]*poster, v.cfg.Clients)
	defer func() {
		for _, p := range append(many, nopMany...) {
			if p != nil {
				p.close()
			}
		}
	}()
	for i := range many {
		if many[i], err = newPoster(ctx, v, base, i+1); err != nil {
			return nil, fmt.Errorf("%d clients: %w", v.cfg.Clients, err)
		}
		if nopMany[i], err = newPoster(ctx, v, nop+"/v1/stream/", i+1); err != nil {
			return nil, fmt.Errorf("baseline, %d clients: %w", v.cfg.Clients, err)
		}
	}
	dir := fsyncDir(v.cfg.Store)
	f, err := os.CreateTemp(dir, "weir-bench-fsync-")
	if err != nil {
		return nil, fmt.Errorf("fsync: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	var bareStream int64
	if v.cfg.URL == "" {
		si, err := v.store.OpenStream(ctx, &store.OpenStreamParams{Path: fmt.Sprintf("bench-store-%d", time.Now().UnixNano()), Create: true})
		if err != nil {
			return nil, err
		}
		bareStream = si.ID
	}

	// Each round: a share of the requests (or of Duration) to the no-op
	// server and to weir, as many fsyncs and store appends as requests in
	// the share (Requests / httpRounds: a mean over as many), and the
	// clients at once for as long as that round's sequential requests took,
	// on weir and on the no-op server.
	var (
		baseLat, lat, cLat       []time.Duration
		baseDur, dur, cDur, cCPU time.Duration
		nopN                     int
		nopDur                   time.Duration
		fsyncSum, bareSum        time.Duration
		fsyncN, bareN            int
		share                    = max(v.cfg.Requests/httpRounds, 1)
		perRound                 = v.cfg.Duration / httpRounds
	)
	for range httpRounds {
		l, d, err := postLoop(v, nopP, share, perRound)
		if err != nil {
			return nil, fmt.Errorf("baseline: %w", err)
		}
		baseLat, baseDur = append(baseLat, l...), baseDur+d
		t, err := measureFsync(f, v.cfg.ChunkSize, share)
		if err != nil {
			return nil, fmt.Errorf("fsync in %s: %w", dir, err)
		}
		fsyncSum, fsyncN = fsyncSum+t, fsyncN+share
		if bareStream != 0 {
			t, err := storeAppends(ctx, v, bareStream, share)
			if err != nil {
				return nil, fmt.Errorf("store appends: %w", err)
			}
			bareSum, bareN = bareSum+t, bareN+share
		}
		l, d, err = postLoop(v, one, share, perRound)
		if err != nil {
			return nil, err
		}
		lat, dur = append(lat, l...), dur+d
		window := max(d, 250*time.Millisecond)
		l, d, cpu, err := concurrentPosts(v, many, window)
		if err != nil {
			return nil, fmt.Errorf("%d clients: %w", v.cfg.Clients, err)
		}
		cLat, cDur, cCPU = append(cLat, l...), cDur+d, cCPU+cpu
		l, d, _, err = concurrentPosts(v, nopMany, window)
		if err != nil {
			return nil, fmt.Errorf("baseline, %d clients: %w", v.cfg.Clients, err)
		}
		nopN, nopDur = nopN+len(l), nopDur+d
	}

	r := &Result{Unit: "requests", Ops: int64(len(lat)), Seconds: dur.Seconds(), OpsPerSec: float64(len(lat)) / dur.Seconds(),
		Baseline:          "the same client against a no-op net/http server on loopback",
		BaselineOpsPerSec: float64(len(baseLat)) / baseDur.Seconds(),
		BaselineP50Ms:     pct(baseLat, 0.5), BaselineP99Ms: pct(baseLat, 0.99),
		RatioOf: "req/s ÷ baseline req/s",
	}
	r.latencies(lat)
	r.Ratio = r.OpsPerSec / r.BaselineOpsPerSec

	// The bound: a request that commits durably waits for one fsync, and
	// costs at least what the same request to a no-op server costs.
	fsync := fsyncSum / time.Duration(fsyncN)
	nopReq := baseDur / time.Duration(len(baseLat))
	bound := 1 / (fsync + nopReq).Seconds()
	r.extra("fsync_ms", ms(fsync))
	r.extra("noop_request_ms", ms(nopReq))
	r.extra("bound_req_per_s", bound)
	r.extra("ratio_to_bound", r.OpsPerSec/bound)
	concurrent := float64(len(cLat)) / cDur.Seconds()
	r.extra("clients", float64(v.cfg.Clients))
	r.extra("concurrent_req_per_s", concurrent)
	r.extra("concurrent_ratio", concurrent/r.OpsPerSec)
	r.extra("concurrent_p50_ms", pct(cLat, 0.5))
	r.extra("concurrent_p99_ms", pct(cLat, 0.99))
	// The same clients against the no-op server: what the HTTP stack alone
	// allows on this machine, the clients' share included.
	r.extra("concurrent_noop_req_per_s", float64(nopN)/nopDur.Seconds())
	if bareN > 0 {
		bare := bareSum / time.Duration(bareN)
		r.extra("store_append_ms", ms(bare))
		r.extra("store_bound_req_per_s", 1/(bare+nopReq).Seconds())
	}
	if cCPU > 0 {
		perReq := cCPU / time.Duration(len(cLat))
		r.extra("concurrent_cpu_ms_per_req", ms(perReq))
		r.extra("cpu_bound_req_per_s", float64(runtime.NumCPU())/perReq.Seconds())
	}
	if v.cfg.URL == "" {
		// Only the in-process server's store commits on the disk measured.
		r.target(fmt.Sprintf("one client ≥ 0.85 × 1/(fsync + no-op request); %d clients ≥ 10× one", v.cfg.Clients),
			r.OpsPerSec >= 0.85*bound && concurrent >= 10*r.OpsPerSec)
	}
	r.Notes = append(r.Notes, "target: "+target,
		fmt.Sprintf("fsync: %d × (write %d B + fsync) in %s, mean", fsyncN, v.cfg.ChunkSize, dir),
		fmt.Sprintf("%d clients: each its own connection and stream, for %.1f s", v.cfg.Clients, cDur.Seconds()),
		fmt.Sprintf("phases interleaved in %d rounds", httpRounds))
	return r, nil
}

// httpRounds is how many rounds runHTTP interleaves its phases in.
const httpRounds = 4

// fsyncDir is where the fsync of the bound is measured: the SQLite store's
// folder, else the temporary folder (where a fresh SQLite store goes; a
// PostgreSQL server on this machine is assumed to share its disk).
func fsyncDir(dsn string) string {
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok && path != "" {
		return filepath.Dir(path)
	}
	return os.TempDir()
}

// measureFsync returns the time of writing size bytes to the end of f and
// fsyncing it, n times: what n durable commits wait for at least.
func measureFsync(f *os.File, size, n int) (time.Duration, error) {
	buf := make([]byte, size)
	t0 := time.Now()
	for i := range n {
		fillChunk(buf, 'f', i)
		if _, err := f.Write(buf); err != nil {
			return 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, err
		}
	}
	return time.Since(t0), nil
}

// storeAppends returns the time of n sequential one-chunk appends to stream
// id of the bench's store, without HTTP: the store's share of n requests (a
// durable commit each, with all that it writes beside the fsync).
func storeAppends(ctx context.Context, v *env, id int64, n int) (time.Duration, error) {
	buf := make([]byte, v.cfg.ChunkSize)
	t0 := time.Now()
	for i := range n {
		fillChunk(buf, 's', i)
		if _, err := v.store.Append(ctx, &store.AppendParams{StreamID: id, Chunks: [][]byte{buf}}); err != nil {
			return 0, err
		}
	}
	return time.Since(t0), nil
}

// poster is one client POSTing single chunks to a stream of its own, over
// one kept-alive connection.
type poster struct {
	ctx    context.Context
	client *http.Client
	u      string
	buf    []byte
	next   int // the number of the next chunk
}

// newPoster creates a stream under base (PUT) and warms the connection and
// both ends up.
func newPoster(ctx context.Context, v *env, base string, n int) (*poster, error) {
	p := &poster{
		ctx:    ctx,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}, Timeout: 30 * time.Second},
		u:      strings.TrimSuffix(base, "/") + fmt.Sprintf("/bench-%d-%d", time.Now().UnixNano(), n),
		buf:    make([]byte, v.cfg.ChunkSize),
	}
	if _, err := p.do(http.MethodPut, nil); err != nil {
		p.close()
		return nil, err
	}
	for range 50 {
		if _, err := p.post(); err != nil {
			p.close()
			return nil, err
		}
	}
	return p, nil
}

func (p *poster) close() { p.client.CloseIdleConnections() }

func (p *poster) do(method string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(p.ctx, method, p.u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s %s: %s", method, p.u, resp.Status)
	}
	return resp, nil
}

// post POSTs the next chunk and returns how long the request took.
func (p *poster) post() (time.Duration, error) {
	fillChunk(p.buf, 'h', p.next)
	p.next++
	t0 := time.Now()
	resp, err := p.do(http.MethodPost, p.buf)
	if err != nil {
		return 0, err
	}
	d := time.Since(t0)
	if resp.Header.Get("Stream-Next-Offset") == "" {
		return 0, fmt.Errorf("POST %s: no Stream-Next-Offset in the answer", p.u)
	}
	return d, nil
}

// postLoop POSTs through p, one request at a time, n chunks, or for d if it
// is set; it returns their latencies and the time they took.
func postLoop(v *env, p *poster, n int, d time.Duration) ([]time.Duration, time.Duration, error) {
	var deadline time.Time
	if d > 0 {
		deadline = time.Now().Add(d)
	}
	lat := make([]time.Duration, 0, n)
	t0 := time.Now()
	for i := 0; (deadline.IsZero() && i < n) || (!deadline.IsZero() && time.Now().Before(deadline)); i++ {
		d, err := p.post()
		if err != nil {
			return nil, 0, err
		}
		lat = append(lat, d)
		v.prog.add(1)
	}
	return lat, time.Since(t0), nil
}

// concurrentPosts has every poster of ps POST at once, one request at a
// time each, for window, and returns every request's latency, the time they
// took, and the CPU time the process used meanwhile (0 if unknown).
func concurrentPosts(v *env, ps []*poster, window time.Duration) ([]time.Duration, time.Duration, time.Duration, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		all   []time.Duration
		first error
	)
	start := make(chan struct{})
	for _, p := range ps {
		wg.Go(func() {
			<-start
			lat := make([]time.Duration, 0, 1024)
			deadline := time.Now().Add(window)
			var err error
			for time.Now().Before(deadline) {
				var d time.Duration
				if d, err = p.post(); err != nil {
					break
				}
				lat = append(lat, d)
				v.prog.add(1)
			}
			mu.Lock()
			defer mu.Unlock()
			all = append(all, lat...)
			if err != nil && first == nil {
				first = err
			}
		})
	}
	cpu0, ok := processCPU()
	t0 := time.Now()
	close(start)
	wg.Wait()
	d := time.Since(t0)
	cpu1, _ := processCPU()
	if first != nil {
		return nil, 0, 0, first
	}
	if !ok {
		return all, d, 0, nil
	}
	return all, d, cpu1 - cpu0, nil
}

// weirServer serves weir's HTTP API on loopback, on the bench's store, and
// returns its streams' base URL.
func weirServer(ctx context.Context, v *env) (string, func(), error) {
	e, closeE, err := v.engine(ctx, 1)
	if err != nil {
		return "", nil, err
	}
	u, stop, err := listen(server.New(e, &server.Config{Logger: v.cfg.Logger}))
	if err != nil {
		closeE()
		return "", nil, err
	}
	return u + "/v1/stream/bench", func() { stop(); closeE() }, nil
}

func listen(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	// The clients of one phase stay idle while another runs: their
	// connections must outlive it.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 10 * time.Minute}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}
