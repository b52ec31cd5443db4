package weircli

import (
	"context"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/internal/otlptest"
)

// A program's server configured by the standard OTEL_* variables exports
// its runs' spans over OTLP/HTTP to a real receiver: the run, the retried
// step's two attempts (siblings, children of the run's span, the first
// with its error) and the parallel steps, under the program's service
// name. Without the variables it exports nothing.
func TestTracesOverOTLP(t *testing.T) {
	rcv := otlptest.Start()
	defer rcv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	var attempts atomic.Int64
	cfg := myapp(&attempts)

	ctx, cancel := context.WithCancel(context.Background())
	out, errOut, code := &syncBuffer{}, &syncBuffer{}, make(chan int, 1)
	go func() {
		code <- Run(ctx, cfg, []string{"server", "--addr", "127.0.0.1:0", "--store", "sqlite:" + filepath.Join(t.TempDir(), "t.db")}, out, errOut)
	}()
	var url string
	waitUntil(t, 10*time.Second, "the server to listen", func() bool {
		if m := listening.FindStringSubmatch(out.String()); m != nil {
			url = m[1]
			return true
		}
		return false
	})
	// The start carries the caller's trace (W3C traceparent); a malformed
	// one is ignored, and the run it starts gets a trace of its own.
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	start := func(body, traceparent string) string {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/runs", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("traceparent", traceparent)
		var r struct{ ID string }
		doJSON(t, req, &r)
		return r.ID
	}
	if id := start(`{"workflow":"answer","input":"x","id":"malformed-trace"}`, "00-not-a-trace"); id == "" {
		t.Fatal("a start with a malformed traceparent got no run")
	}
	var run struct{ ID string }
	run.ID = start(`{"workflow":"answer","input":"traced"}`, "00-"+traceID+"-b7ad6b7169203331-01")
	waitUntil(t, 15*time.Second, "the run to reach its hook", func() bool {
		var hooks struct{ Hooks []struct{ Token string } }
		getJSON(context.Background(), t, url+"/v1/runs/"+run.ID+"/hooks", &hooks)
		return len(hooks.Hooks) == 1
	})
	hreq, _ := http.NewRequest(http.MethodPost, url+"/v1/hooks/approve-"+run.ID, strings.NewReader(`{"ok":true}`))
	hreq.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(hreq); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	waitUntil(t, 15*time.Second, "the run to complete", func() bool {
		var r struct{ Status string }
		getJSON(context.Background(), t, url+"/v1/runs/"+run.ID, &r)
		return r.Status == "completed"
	})
	cancel() // SIGTERM: the server stops, and flushes its spans
	if c := <-code; c != 0 {
		t.Fatalf("server exited %d: %s", c, errOut)
	}
	spans := rcv.ByName()
	var think, runs []otlptest.Span
	for _, name := range []string{"weir.step think", "weir.run answer"} {
		for _, sp := range spans[name] {
			if runIDOf(sp) != run.ID {
				continue // the run started with a malformed traceparent
			}
			if name == "weir.run answer" {
				runs = append(runs, sp)
			} else {
				think = append(think, sp)
			}
		}
	}
	if len(think) != 2 || len(runs) == 0 || ofRun(spans["weir.step search"], run.ID) != 1 || ofRun(spans["weir.step rank"], run.ID) != 1 {
		t.Fatalf("spans received: %d think, %d run, of %d names: %v", len(think), len(runs), len(spans), keys(spans))
	}
	runSpans := map[string]bool{}
	for _, r := range runs {
		runSpans[string(r.SpanId)] = true
	}
	failed := 0
	for _, s := range think {
		if !runSpans[string(s.ParentSpanId)] {
			t.Fatalf("an attempt span of think is not a child of a run span")
		}
		if s.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d of think's attempt spans have an error status, want 1", failed)
	}
	for _, r := range runs {
		if got := hex.EncodeToString(r.TraceId); got != traceID {
			t.Fatalf("a run span is in trace %s, not the caller's %s", got, traceID)
		}
	}
	hookWait := false
	for _, sp := range spans["weir.wait hook"] {
		for _, kv := range sp.Attributes {
			if kv.Key == "weir.wait.hooks" {
				for _, v := range kv.Value.GetArrayValue().GetValues() {
					// The hook by its reference: the token, a capability,
					// is not exported.
					hookWait = hookWait || v.GetStringValue() == weir.HookRef("approve-"+run.ID)
					if strings.Contains(v.GetStringValue(), "approve-") {
						t.Fatalf("a span carries the hook's token: %q", v.GetStringValue())
					}
				}
			}
		}
	}
	if !hookWait {
		t.Fatalf("no weir.wait hook span names the run's hook approve-%s; spans: %v", run.ID, keys(spans))
	}
	for _, sp := range rcv.Spans() {
		if sp.Service != "myapp" || sp.Pid != int64(os.Getpid()) {
			t.Fatalf("a span of service %q, pid %d: want myapp, %d", sp.Service, sp.Pid, os.Getpid())
		}
	}
}

func ofRun(spans []otlptest.Span, id string) int {
	n := 0
	for _, s := range spans {
		if s.Attr("weir.run.id") == id {
			n++
		}
	}
	return n
}

func runIDOf(s otlptest.Span) string { return s.Attr("weir.run.id") }

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
