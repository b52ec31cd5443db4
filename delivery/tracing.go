package delivery

import (
	"context"
	"crypto/sha256"
	"strconv"

	"github.com/weirhq/weir/store"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// runTrace is the trace a World run's deliveries belong to: its ids are
// derived from the run's id, so that every delivery of one run, by any
// deliverer in any process, is a span of one trace, with nothing stored.
// A delivery that names no run gets a trace of its own.
func runTrace(ctx context.Context, runID string) context.Context {
	if runID == "" {
		return ctx
	}
	sum := sha256.Sum256([]byte("weir world run " + runID))
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], sum[:16])
	copy(sid[:], sum[16:24])
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// startSpan starts a delivery's client span (weir.world.deliver <queue>)
// in its run's trace and returns the context whose traceparent the request
// carries to the app, so that the app's own spans (its Workflow runtime's,
// its HTTP server's) continue the run's trace.
func (d *Deliverer) startSpan(ctx context.Context, m *store.Message) (context.Context, trace.Span) {
	ctx, sp := d.tracer.Start(runTrace(ctx, m.RunID), "weir.world.deliver "+m.QueueName, trace.WithSpanKind(trace.SpanKindClient))
	if sp.IsRecording() {
		sp.SetAttributes(attribute.String("weir.world.queue", m.QueueName), attribute.String("weir.world.message.id", m.ID),
			attribute.Int64("weir.world.attempt", m.Attempt), attribute.String("weir.world.target", m.Target))
		if m.RunID != "" {
			sp.SetAttributes(attribute.String("weir.run.id", m.RunID))
		}
	}
	return ctx, sp
}

// endSpan ends a delivery's span with its outcome.
func endSpan(sp trace.Span, status int, err error) {
	if sp.IsRecording() {
		if status != 0 {
			sp.SetAttributes(attribute.Int("http.response.status_code", status))
		}
		switch {
		case err != nil:
			sp.RecordError(err)
			sp.SetStatus(codes.Error, err.Error())
		case status/100 != 2:
			sp.SetStatus(codes.Error, "HTTP "+strconv.Itoa(status))
		}
	}
	sp.End()
}

// inject writes ctx's trace into h as W3C traceparent (and tracestate).
func inject(ctx context.Context, h propagation.HeaderCarrier) {
	propagation.TraceContext{}.Inject(ctx, h)
}
