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
// record of when they ran (the committed output of each, written by the
// step itself, not by the limiter) never has more than two at once.
func TestLimiterAcrossProcesses(t *testing.T) {
	killTheHolder(t, killCase{
		limiters: map[string]string{"app.llm": `{"concurrency":2}`},
		watch:    "app.llm",
		start:    func(i int) string { return fmt.Sprintf(`{"workflow":"limited","input":300,"id":"lim-%d"}`, i) },
		what:     "steps",
	})
}

// Runs started in a queue keep to its global concurrency across three
// processes on PostgreSQL, checked by the runs' own committed spans, under
// a SIGKILL of the worker running them: its runs keep their queue slots
// (they are still in flight), are taken over when their leases run out,
// and all complete.
func TestQueueAcrossProcesses(t *testing.T) {
	killTheHolder(t, killCase{
		limiters: map[string]string{"app.llm": `{"concurrency":100}`, "app.runs": `{"concurrency":2}`},
		watch:    "app.runs",
		start: func(i int) string {
			return fmt.Sprintf(`{"workflow":"limited","input":300,"id":"q-%d","queue":"app.runs","queue_key":"t%d"}`, i, i%3)
		},
		what: "queued runs",
	})
}

// killCase is a limit that must hold across three processes through a
// SIGKILL of the one holding its slots.
type killCase struct {
	limiters map[string]string  // name -> PUT /v1/limiters body
	watch    string             // the limiter whose slots the killed worker holds (concurrency 2)
	start    func(i int) string // the POST /v1/runs body of run i of 12
	what     string             // what the limit bounds, for the log
}

// killTheHolder runs twelve runs of the "limited" workflow: worker 1 alone
// until it holds both of kc.watch's slots, then it is SIGKILLed and two
// more workers take over. Every run completes, and the spans each step
// committed (its own record of when it ran) never overlap more than two
// at once.
func killTheHolder(t *testing.T, kc killCase) {
	dsn := schemaDSN(t)

	bin := apptest.Build(t, "github.com/weirhq/weir/examples/workers")
	workerLine := regexp.MustCompile(`worker executing runs of`)
	api := apptest.Start(t, bin, "server", "--no-worker", "--addr", "127.0.0.1:0", "--store", dsn)
	base := api.URL(t)
	for name, body := range kc.limiters {
		if code := apptest.Do(t, "PUT", base+"/v1/limiters/"+name, body, nil); code != 200 {
			t.Fatalf("PUT /v1/limiters/%s: %d", name, code)
		}
	}
	w1 := apptest.Start(t, bin, "worker", "--store", dsn, "--lease-ttl", "1s")
	w1.WaitLine(t, workerLine, 20*time.Second)
	var ids []string
	for i := range 12 {
		var r apptest.Run
		if code := apptest.Do(t, "POST", base+"/v1/runs", kc.start(i), &r); code != 201 {
			t.Fatalf("POST /v1/runs: %d", code)
		}
		ids = append(ids, r.ID)
	}
	// Worker 1 is the only one: once the limiter has slots held, they are
	// its. Kill it then; two more take over.
	held := func() int {
		var l struct{ State struct{ Held int } }
		apptest.Do(t, "GET", base+"/v1/limiters/"+kc.watch, "", &l)
		return l.State.Held
	}
	waitFor(t, 20*time.Second, "worker 1 to hold "+kc.watch+"'s slots", func() bool { return held() == 2 })
	w1.Kill(t)
	// What the limiter holds now is the dead worker's: no other process
	// has run yet. Those slots come back only with their leases (a step's)
	// or their runs' ends (a queued run's).
	dead := held()
	if dead == 0 {
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
		t.Fatalf("%d %s ran at once; %s allows 2", most, kc.what, kc.watch)
	}
	t.Logf("12 %s, at most %d at once; worker 1 died holding %d of %s's slots", kc.what, most, dead, kc.watch)
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
