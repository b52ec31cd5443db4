package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/examples/app/apptest"
	"github.com/weirhq/weir/internal/otlptest"
)

// One trace for a run that outlives the worker executing it: three real
// processes (an API server, two workers) export over OTLP/HTTP to a
// receiver. A caller starts "research" with its traceparent; worker 1 runs
// the draft step's first attempt (it fails) and its second, and is killed
// during it; worker 2 takes the run over when the lease runs out, runs the
// draft again, a child run and the hook wait. Every span of the run and of
// its child is in the caller's trace, the failed attempt's span carries its
// error, the spans worker 2 sent hang together under the caller's span,
// and the two workers' spans are told apart by their process.
func TestOneTraceAcrossAKilledWorker(t *testing.T) {
	dsn := schemaDSN(t)

	rcv := otlptest.Start()
	defer rcv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL) // the processes below inherit it
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")

	bin := apptest.Build(t, "github.com/weirhq/weir/examples/workers")
	workerLine := regexp.MustCompile(`worker executing runs of`)
	api := apptest.Start(t, bin, "server", "--no-worker", "--addr", "127.0.0.1:0", "--store", dsn)
	base := api.URL(t)
	w1 := apptest.Start(t, bin, "worker", "--store", dsn, "--lease-ttl", "1s")
	w1.WaitLine(t, workerLine, 20*time.Second)

	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/runs", strings.NewReader(`{"workflow":"research","input":"tide"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	var run apptest.Run
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&run)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("start: %d %v", resp.StatusCode, err)
	}

	// Worker 1 dies during the draft's second attempt.
	waitFor(t, 30*time.Second, "attempt 2 of draft to start on worker 1", func() bool {
		var evs struct {
			Events []struct {
				Type    string
				Attempt int
			}
		}
		apptest.Do(t, "GET", base+"/v1/runs/"+run.ID+"/events", "", &evs)
		for _, e := range evs.Events {
			if e.Type == "step_started" && e.Attempt == 2 {
				return true
			}
		}
		return false
	})
	w1.Kill(t)
	w2 := apptest.Start(t, bin, "worker", "--store", dsn, "--lease-ttl", "1s")
	w2.WaitLine(t, workerLine, 20*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for apptest.Do(t, "POST", base+"/v1/hooks/approve-"+run.ID, `{"ok":true}`, nil)/100 != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the run's hook was not there within 30 s:\n%s", w2.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	done := apptest.WaitRun(t, base, run.ID, "completed", 30*time.Second)
	if !strings.Contains(string(done.Output), "20 tokens") || !strings.Contains(string(done.Output), "approved=true") {
		t.Fatalf("research's output %s", done.Output)
	}
	w2.Stop(t) // flushes its spans
	api.Stop(t)

	child := run.ID + "-2" // the child is the run's second operation
	var mine []otlptest.Span
	for _, s := range rcv.Spans() {
		if id := s.Attr("weir.run.id"); id == run.ID || id == child {
			mine = append(mine, s)
		}
	}
	byName := map[string][]otlptest.Span{}
	ids := map[string]bool{callerSpan: true}
	for _, s := range mine {
		if got := hex.EncodeToString(s.TraceId); got != traceID {
			t.Errorf("span %s (run %s) is in trace %s, not the caller's %s", s.Name, s.Attr("weir.run.id"), got, traceID)
		}
		byName[s.Name] = append(byName[s.Name], s)
		ids[hex.EncodeToString(s.SpanId)] = true
	}
	if t.Failed() {
		t.FailNow()
	}
	attempt := func(n int64) *otlptest.Span {
		for _, s := range byName["weir.step draft"] {
			if s.IntAttr("weir.step.attempt") == n {
				return &s
			}
		}
		return nil
	}
	a1, a3 := attempt(1), attempt(3)
	switch {
	case a1 == nil || a3 == nil:
		t.Fatalf("draft's attempt spans: %d received, want attempts 1 and 3 (2 died with its worker); spans: %v", len(byName["weir.step draft"]), names(byName))
	case a1.Pid != int64(w1.Pid()) || a3.Pid != int64(w2.Pid()):
		t.Fatalf("attempt 1 from pid %d, 3 from %d: want worker 1 (%d), worker 2 (%d)", a1.Pid, a3.Pid, w1.Pid(), w2.Pid())
	case a1.Status.GetMessage() == "" || !strings.Contains(a1.Status.GetMessage(), "connection dropped"):
		t.Fatalf("attempt 1's span has status %v, want its error", a1.Status)
	case len(byName["weir.run summarize"]) != 1 || byName["weir.run summarize"][0].Attr("weir.run.id") != child:
		t.Fatalf("the child's run span: %v", byName["weir.run summarize"])
	case len(byName["weir.wait hook"]) == 0 || len(byName["weir.wait child"]) == 0:
		t.Fatalf("no wait spans for the hook or the child: %v", names(byName))
	}
	// What worker 2 sent hangs together: each span's parent is a span
	// received, or the caller's.
	epochs := map[int64]bool{}
	for _, s := range mine {
		if s.Pid != int64(w2.Pid()) {
			continue
		}
		if s.Name == "weir.run research" {
			epochs[s.IntAttr("weir.lease.epoch")] = true
		}
		if p := hex.EncodeToString(s.ParentSpanId); !ids[p] {
			t.Errorf("worker 2's span %s has parent %s, which is neither a span received nor the caller's", s.Name, p)
		}
	}
	t.Logf("spans of the run and its child: %v", names(byName))
	if len(epochs) == 0 || epochs[1] {
		t.Errorf("worker 2's run spans have lease epochs %v: want a later claim than worker 1's", epochs)
	}
}

func names(m map[string][]otlptest.Span) []string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s×%d", k, len(v)))
	}
	return out
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
