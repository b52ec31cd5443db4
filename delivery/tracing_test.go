package delivery_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/weirhq/weir/delivery"
	"github.com/weirhq/weir/store"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Each delivery is a client span in its run's trace, and carries that
// trace to the app as a W3C traceparent: every delivery of one run is in
// one trace (whatever deliverer sends it), a failed one has an error
// status, a message for no run has a trace of its own.
func TestDeliveriesCarryTheRunsTrace(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st store.Full) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		a := newApp(t, func(n int, d delivered) (int, string) {
			if d.id == "msg_step" && d.attempt == 1 {
				return 500, `{"error":"boom"}`
			}
			return 200, "{}"
		})
		o := start(t, st, delivery.Config{TracerProvider: tp})
		enqueue(t, st, "msg_flow", "__wkf_workflow_wf", a.srv.URL, 0)
		enqueue(t, st, "msg_step", "__wkf_step_add", a.srv.URL, 0)
		if _, _, err := st.Enqueue(t.Context(), &store.EnqueueParams{ID: "msg_norun", QueueName: "__wkf_step_add",
			Payload: json.RawMessage(`{}`), Target: a.srv.URL}); err != nil {
			t.Fatal(err)
		}
		parents := map[string][]string{} // message -> the traceparents it was sent with
		for range 4 {
			d := a.next(t)
			parents[d.id] = append(parents[d.id], d.traceparent)
		}
		for range 4 {
			o.next(t)
		}
		traceOf := func(tp string) string {
			parts := strings.Split(tp, "-")
			if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 {
				t.Fatalf("traceparent %q", tp)
			}
			return parts[1]
		}
		run := traceOf(parents["msg_flow"][0])
		if len(parents["msg_step"]) != 2 || traceOf(parents["msg_step"][0]) != run || traceOf(parents["msg_step"][1]) != run {
			t.Fatalf("the run's deliveries were sent in traces %v and %v", parents["msg_flow"], parents["msg_step"])
		}
		if traceOf(parents["msg_norun"][0]) == run {
			t.Fatal("a message for no run was sent in the run's trace")
		}
		spans := exp.GetSpans()
		failed := 0
		for _, sp := range spans {
			if !strings.HasPrefix(sp.Name, "weir.world.deliver __wkf_") {
				t.Fatalf("span %q", sp.Name)
			}
			if sp.Status.Code == codes.Error {
				failed++
			}
			attrs := map[string]string{}
			for _, kv := range sp.Attributes {
				attrs[string(kv.Key)] = kv.Value.String()
			}
			id := attrs["weir.world.message.id"]
			if id != "msg_norun" && (sp.SpanContext.TraceID().String() != run || attrs["weir.run.id"] != "wrun_1") {
				t.Fatalf("%s's span is in trace %s (run %q), want the run's %s", id, sp.SpanContext.TraceID(), attrs["weir.run.id"], run)
			}
		}
		if len(spans) != 4 || failed != 1 {
			t.Fatalf("%d spans, %d failed: want 4, 1", len(spans), failed)
		}
	})
}
