package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/examples/app/apptest"
)

// A limiter holds across processes, and through a kill: three worker
// processes on one PostgreSQL database run twelve steps of the limiter
// "app.llm" (concurrency 2); the first worker is SIGKILLed while it holds a
// slot. Every run completes (the dead worker's slots came back with their
// leases, or the last runs could never have had one), and the steps' own
// record of when they ran
// (the committed output of each, written by the step itself, not by the
// limiter) never has more than two at once.
func TestLimiterAcrossProcesses(t *testing.T) {
	dsn := schemaDSN(t)

	bin := apptest.Build(t, "github.com/weirhq/weir/examples/workers")
	workerLine := regexp.MustCompile(`worker executing runs of`)
	api := apptest.Start(t, bin, "server", "--no-worker", "--addr", "127.0.0.1:0", "--store", dsn)
	base := api.URL(t)
	if code := apptest.Do(t, "PUT", base+"/v1/limiters/app.llm", `{"concurrency":2}`, nil); code != 200 {
		t.Fatalf("PUT /v1/limiters/app.llm: %d", code)
	}
	w1 := apptest.Start(t, bin, "worker", "--store", dsn, "--lease-ttl", "1s")
	w1.WaitLine(t, workerLine, 20*time.Second)
	var ids []string
	for i := range 12 {
		var r apptest.Run
		if code := apptest.Do(t, "POST", base+"/v1/runs", fmt.Sprintf(`{"workflow":"limited","input":300,"id":"lim-%d"}`, i), &r); code != 201 {
			t.Fatalf("POST /v1/runs: %d", code)
		}
		ids = append(ids, r.ID)
	}
	// Worker 1 is the only one: once the limiter has slots held, they are
	// its. Kill it then; two more take over.
	waitFor(t, 20*time.Second, "worker 1 to hold the limiter's slots", func() bool {
		var l struct{ State struct{ Held int } }
		apptest.Do(t, "GET", base+"/v1/limiters/app.llm", "", &l)
		return l.State.Held == 2
	})
	w1.Kill(t)
	// What the limiter holds now is the dead worker's: no other process
	// has run yet. Those slots come back only with their leases.
	var dead struct{ State struct{ Held int } }
	apptest.Do(t, "GET", base+"/v1/limiters/app.llm", "", &dead)
	if dead.State.Held == 0 {
		t.Fatal("worker 1 gave its slots back before it was killed: the kill tests nothing")
	}
	w2 := apptest.Start(t, bin, "worker", "--store", dsn, "--lease-ttl", "1s")
	w3 := apptest.Start(t, bin, "worker", "--store", dsn, "--lease-ttl", "1s")
	w2.WaitLine(t, workerLine, 20*time.Second)
	w3.WaitLine(t, workerLine, 20*time.Second)

	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for _, id := range ids {
		done := apptest.WaitRun(t, base, id, "completed", 60*time.Second)
		if !strings.Contains(string(done.Output), "by pid") {
			t.Fatalf("%s: output %s", id, done.Output)
		}
		lines := strings.Fields(committed(t, base, id, "spans"))
		if len(lines) != 4 || lines[0] != "start" || lines[2] != "end" {
			t.Fatalf("%s's committed spans: %q", id, lines)
		}
		from, _ := strconv.ParseInt(lines[1], 10, 64)
		to, _ := strconv.ParseInt(lines[3], 10, 64)
		edges = append(edges, edge{from, +1}, edge{to, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.delta - b.delta // an end before a start at the same instant
	})
	in, most := 0, 0
	for _, e := range edges {
		in += e.delta
		most = max(most, in)
	}
	if most > 2 {
		t.Fatalf("%d steps ran at once; the limiter allows 2", most)
	}
	t.Logf("12 steps, at most %d at once; worker 1 died holding %d slots", most, dead.State.Held)
	api.Stop(t)
	w2.Stop(t)
	w3.Stop(t)
}

// Runs started in a queue keep to its global concurrency across three
// processes on PostgreSQL, checked by the runs' own committed spans, under
// a SIGKILL of the worker running them: its runs keep their queue slots
// (they are still in flight), are taken over when their leases run out,
// and all complete.
func TestQueueAcrossProcesses(t *testing.T) {
	dsn := schemaDSN(t)

	bin := apptest.Build(t, "github.com/weirhq/weir/examples/workers")
	workerLine := regexp.MustCompile(`worker executing runs of`)
	api := apptest.Start(t, bin, "server", "--no-worker", "--addr", "127.0.0.1:0", "--store", dsn)
	base := api.URL(t)
	if code := apptest.Do(t, "PUT", base+"/v1/limiters/app.llm", `{"concurrency":100}`, nil); code != 200 {
		t.Fatalf("PUT /v1/limiters/app.llm: %d", code)
	}
	if code := apptest.Do(t, "PUT", base+"/v1/limiters/app.runs", `{"concurrency":2}`, nil); code != 200 {
		t.Fatalf("PUT /v1/limiters/app.runs: %d", code)
	}
	w1 := apptest.Start(t, bin, "worker", "--store", dsn, "--lease-ttl", "1s")
	w1.WaitLine(t, workerLine, 20*time.Second)
	var ids []string
	for i := range 12 {
		var r apptest.Run
		if code := apptest.Do(t, "POST", base+"/v1/runs", fmt.Sprintf(`{"workflow":"limited","input":300,"id":"q-%d","queue":"app.runs","queue_key":"t%d"}`, i, i%3), &r); code != 201 {
			t.Fatalf("POST /v1/runs: %d", code)
		}
		ids = append(ids, r.ID)
	}
	// Worker 1 is the only one: once the limiter has slots held, they are
	// its. Kill it then; two more take over.
	waitFor(t, 20*time.Second, "worker 1 to hold the queue's slots", func() bool {
		var l struct{ State struct{ Held int } }
		apptest.Do(t, "GET", base+"/v1/limiters/app.runs", "", &l)
		return l.State.Held == 2
	})
	w1.Kill(t)
	// What the limiter holds now is the dead worker's: no other process
	// has run yet. Those slots come back only with their leases.
	var dead struct{ State struct{ Held int } }
	apptest.Do(t, "GET", base+"/v1/limiters/app.runs", "", &dead)
	if dead.State.Held == 0 {
		t.Fatal("worker 1 gave its slots back before it was killed: the kill tests nothing")
	}
	w2 := apptest.Start(t, bin, "worker", "--store", dsn, "--lease-ttl", "1s")
	w3 := apptest.Start(t, bin, "worker", "--store", dsn, "--lease-ttl", "1s")
	w2.WaitLine(t, workerLine, 20*time.Second)
	w3.WaitLine(t, workerLine, 20*time.Second)

	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for _, id := range ids {
		done := apptest.WaitRun(t, base, id, "completed", 60*time.Second)
		if !strings.Contains(string(done.Output), "by pid") {
			t.Fatalf("%s: output %s", id, done.Output)
		}
		lines := strings.Fields(committed(t, base, id, "spans"))
		if len(lines) != 4 || lines[0] != "start" || lines[2] != "end" {
			t.Fatalf("%s's committed spans: %q", id, lines)
		}
		from, _ := strconv.ParseInt(lines[1], 10, 64)
		to, _ := strconv.ParseInt(lines[3], 10, 64)
		edges = append(edges, edge{from, +1}, edge{to, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.delta - b.delta // an end before a start at the same instant
	})
	in, most := 0, 0
	for _, e := range edges {
		in += e.delta
		most = max(most, in)
	}
	if most > 2 {
		t.Fatalf("%d runs ran at once; the queue allows 2", most)
	}
	t.Logf("12 queued runs, at most %d at once; worker 1 died holding %d of the queue's slots", most, dead.State.Held)
	api.Stop(t)
	w2.Stop(t)
	w3.Stop(t)
}

// committed is a run's stream as a committed reader gets it.
func committed(t *testing.T, base, run, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/stream/runs/"+run+"/"+name+"?offset=-1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("read %s/%s: %d %s", run, name, resp.StatusCode, b)
	}
	return string(b)
}
