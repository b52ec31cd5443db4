package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/weirhq/weir/server"
)

// runHTTP: one client, sequential single-chunk POSTs to a Durable Streams
// stream created (PUT) under Config.URL, or under an in-process weir server
// on loopback. The baseline is the same client against a no-op net/http
// server on loopback: the floor of the HTTP stack and the network.
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

	v.prog.phase("requests (baseline: no-op server)")
	baseLat, baseDur, err := postLoop(ctx, v, nop+"/v1/stream/")
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	v.prog.phase("requests")
	lat, dur, err := postLoop(ctx, v, base)
	if err != nil {
		return nil, err
	}
	r := &Result{Unit: "requests", Ops: int64(len(lat)), Seconds: dur.Seconds(), OpsPerSec: float64(len(lat)) / dur.Seconds(),
		Baseline:          "the same client against a no-op net/http server on loopback",
		BaselineOpsPerSec: float64(len(baseLat)) / baseDur.Seconds(),
		BaselineP50Ms:     pct(baseLat, 0.5), BaselineP99Ms: pct(baseLat, 0.99),
		RatioOf: "req/s ÷ baseline req/s",
	}
	r.latencies(lat)
	r.Ratio = r.OpsPerSec / r.BaselineOpsPerSec
	r.Notes = append(r.Notes, "target: "+target)
	return r, nil
}

// postLoop creates a stream under base and POSTs Requests chunks (or for
// Duration) one at a time.
func postLoop(ctx context.Context, v *env, base string) ([]time.Duration, time.Duration, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	u := strings.TrimSuffix(base, "/") + fmt.Sprintf("/bench-%d", time.Now().UnixNano())
	do := func(method string, body []byte) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return nil, fmt.Errorf("%s %s: %s", method, u, resp.Status)
		}
		return resp, nil
	}
	if _, err := do(http.MethodPut, nil); err != nil {
		return nil, 0, err
	}
	buf := make([]byte, v.cfg.ChunkSize)
	post := func(i int) (time.Duration, error) {
		fillChunk(buf, 'h', i)
		t0 := time.Now()
		resp, err := do(http.MethodPost, buf)
		if err != nil {
			return 0, err
		}
		d := time.Since(t0)
		if resp.Header.Get("Stream-Next-Offset") == "" {
			return 0, fmt.Errorf("POST %s: no Stream-Next-Offset in the answer", u)
		}
		return d, nil
	}
	for i := range 50 { // warm the connection and both ends up
		if _, err := post(i); err != nil {
			return nil, 0, err
		}
	}
	var deadline time.Time
	if v.cfg.Duration > 0 {
		deadline = time.Now().Add(v.cfg.Duration)
	}
	lat := make([]time.Duration, 0, v.cfg.Requests)
	t0 := time.Now()
	for i := 0; (deadline.IsZero() && i < v.cfg.Requests) || (!deadline.IsZero() && time.Now().Before(deadline)); i++ {
		d, err := post(i)
		if err != nil {
			return nil, 0, err
		}
		lat = append(lat, d)
		v.prog.add(1)
	}
	return lat, time.Since(t0), nil
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
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}
