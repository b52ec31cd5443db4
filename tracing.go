package weir

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The engine's spans and their attributes. A run's execution is a span
// (weir.run); each step attempt a child of it (weir.step), so that the
// attempts of a retried step, and steps run at once, are siblings; a span
// ends with its outcome, and an attempt's with what its stream writes did.
const (
	attrRunID       = attribute.Key("weir.run.id")
	attrWorkflow    = attribute.Key("weir.workflow")
	attrEpoch       = attribute.Key("weir.lease.epoch")
	attrReplayed    = attribute.Key("weir.run.events_replayed")
	attrRunOutcome  = attribute.Key("weir.run.outcome")
	attrStep        = attribute.Key("weir.step.name")
	attrOp          = attribute.Key("weir.step.op")
	attrAttempt     = attribute.Key("weir.step.attempt")
	attrStepOutcome = attribute.Key("weir.step.outcome")
	attrBackoff     = attribute.Key("weir.step.retry_backoff_ms")
	attrAppended    = attribute.Key("weir.stream.chunks_appended")
	attrAdopted     = attribute.Key("weir.stream.chunks_adopted")
	attrResent      = attribute.Key("weir.stream.chunks_retransmitted")
	attrAborts      = attribute.Key("weir.stream.aborts")
	attrStreamEnd   = attribute.Key("weir.stream.outcome")
	attrBytes       = attribute.Key("weir.stream.bytes_written")
	attrFirstChunk  = attribute.Key("weir.stream.first_chunk_ms")
)

// streamStats counts what one attempt's stream writes did, across its
// streams: the acknowledgements of its appends.
type streamStats struct {
	appended, adopted, resent, aborts atomic.Int64
	bytes                             atomic.Int64
	// firstChunk is when the attempt's first chunk was acknowledged, in ns
	// from its start: a token stream's time to first token.
	firstChunk atomic.Int64
}

// count adds an append's acknowledgements (res, one per chunk of chunks),
// made since after the attempt's start.
func (s *streamStats) count(res *store.AppendResult, chunks [][]byte, since time.Duration) {
	if len(res.Acks) > 0 {
		s.firstChunk.CompareAndSwap(0, max(1, int64(since)))
	}
	n := 0
	for i, a := range res.Acks {
		switch a.Outcome {
		case stream.Appended:
			s.appended.Add(1)
		case stream.Adopted:
			s.adopted.Add(1)
		case stream.Retransmit:
			s.resent.Add(1)
			continue // its bytes were counted when they landed
		}
		if i < len(chunks) {
			n += len(chunks[i])
		}
	}
	s.bytes.Add(int64(n))
	if res.Aborted {
		s.aborts.Add(1)
	}
}

// traceParentOf is the W3C traceparent a run started from ctx belongs to:
// ctx's span's (the caller's, an HTTP start's traceparent, a parent run's
// execution), or, without one, a trace minted for the run, so that its
// executions (in any process, across restarts) are spans of one trace.
func traceParentOf(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		c := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, c)
		if tp := c.Get("traceparent"); tp != "" {
			return tp
		}
	}
	var b [24]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("00-%x-%x-01", b[:16], b[16:])
}

// runTraceContext is ctx with the run's stored trace as its remote parent.
func runTraceContext(ctx context.Context, traceParent string) context.Context {
	if traceParent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceParent})
}

// startRunSpan starts the span of one execution of run r, a child of the
// run's trace (store.Run.TraceParent). Attributes and names are only made
// for a span that records: with no tracer installed a span costs its
// Start and End alone.
func (x *execution) startRunSpan(ctx context.Context, replayed int) context.Context {
	ctx, x.span = x.e.tracer.Start(runTraceContext(ctx, x.run.TraceParent), "weir.run")
	if x.span.IsRecording() {
		x.span.SetName("weir.run " + x.run.Workflow)
		x.span.SetAttributes(attrRunID.String(x.run.ID), attrWorkflow.String(x.run.Workflow),
			attrEpoch.Int64(x.epoch), attrReplayed.Int(replayed))
	}
	return ctx
}

// endRunSpan ends the execution's span with how it ended.
func (x *execution) endRunSpan(outcome string, err error) {
	if x.span == nil {
		return
	}
	if x.span.IsRecording() {
		x.span.SetAttributes(attrRunOutcome.String(outcome))
		if err != nil {
			x.span.RecordError(err)
			x.span.SetStatus(codes.Error, err.Error())
		}
	}
	x.span.End()
}

// startAttemptSpan starts the span of attempt start of a step, a child of
// the execution's: a retried step's attempts, and steps run at once, are
// siblings.
func (x *execution) startAttemptSpan(start *stepStart) {
	_, start.span = x.e.tracer.Start(x.ctx, "weir.step")
	if start.span.IsRecording() {
		start.span.SetName("weir.step " + start.name)
		start.span.SetAttributes(attrRunID.String(x.run.ID), attrStep.String(start.name), attrOp.Int64(start.op), attrAttempt.Int64(start.attempt))
	}
}

// startWaitSpan starts the span of a wait of the workflow on fs: what it
// waits on (hooks, topics, children, a timer) in its name and attributes.
// HookRef is how telemetry names a hook: "hook:" and 16 hex digits of
// its token's SHA-256. A token is a capability (whoever holds it delivers
// to the hook), and traces are read more widely than the API: the
// reference tells a wait's hook apart and matches it to the token its
// owner holds, without giving it away.
func HookRef(token string) string { return store.HookRef(token) }

func (x *execution) startWaitSpan(fs []*future, children []string, timer time.Time) trace.Span {
	_, sp := x.e.tracer.Start(x.ctx, "weir.wait")
	if !sp.IsRecording() {
		return sp
	}
	var hooks []string
	for _, f := range fs {
		if f.resolved() {
			continue
		}
		switch {
		case f.kind == opHook && f.hook != nil:
			hooks = append(hooks, HookRef(f.hook.token))
		case f.box != nil:
			hooks = append(hooks, "message")
		}
	}
	var on []string
	if len(hooks) > 0 {
		on = append(on, "hook")
		sp.SetAttributes(attribute.StringSlice("weir.wait.hooks", hooks))
	}
	if len(children) > 0 {
		on = append(on, "child")
		sp.SetAttributes(attribute.StringSlice("weir.wait.children", children))
	}
	if !timer.IsZero() {
		on = append(on, "timer")
		sp.SetAttributes(attribute.String("weir.wait.until", timer.UTC().Format(time.RFC3339Nano)))
	}
	if len(on) > 0 {
		sp.SetName("weir.wait " + strings.Join(on, "+"))
	}
	sp.SetAttributes(attrRunID.String(x.run.ID))
	return sp
}

// endAttemptSpan ends an attempt's span: its outcome (completed, retrying,
// failed, interrupted), its error and the backoff before the next attempt,
// and its stream writes, with whether they were committed or aborted.
func endAttemptSpan(start *stepStart, outcome string, err error, backoff time.Duration) {
	sp := start.span
	if sp == nil {
		return
	}
	if !sp.IsRecording() {
		sp.End()
		return
	}
	st := &start.stats
	streamEnd := "aborted"
	switch outcome {
	case "completed":
		streamEnd = "committed"
	case "retrying":
		streamEnd = "left for the retry to adopt or abort"
	case "interrupted":
		streamEnd = "left for the next owner"
	}
	sp.SetAttributes(attrStepOutcome.String(outcome),
		attrAppended.Int64(st.appended.Load()), attrAdopted.Int64(st.adopted.Load()),
		attrResent.Int64(st.resent.Load()), attrAborts.Int64(st.aborts.Load()))
	if st.appended.Load()+st.adopted.Load() > 0 {
		sp.SetAttributes(attrStreamEnd.String(streamEnd), attrBytes.Int64(st.bytes.Load()),
			attrFirstChunk.Float64(float64(st.firstChunk.Load())/1e6))
	}
	if backoff > 0 {
		sp.SetAttributes(attrBackoff.Int64(backoff.Milliseconds()))
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// GenAI describes a step's call to a generative model in the terms of
// OpenTelemetry's semantic conventions for generative AI (gen_ai.*), for
// RecordGenAI. Zero fields are left out.
type GenAI struct {
	// Provider is gen_ai.provider.name: "openai", "anthropic", "aws.bedrock".
	Provider string
	// Operation is gen_ai.operation.name; "" is "chat".
	Operation string
	// RequestModel and ResponseModel are gen_ai.request.model and
	// gen_ai.response.model: the model asked for, the one that answered.
	RequestModel, ResponseModel string
	// InputTokens and OutputTokens are gen_ai.usage.input_tokens and
	// gen_ai.usage.output_tokens.
	InputTokens, OutputTokens int64
	// FinishReasons is gen_ai.response.finish_reasons: "stop", "length".
	FinishReasons []string
	// ResponseID is gen_ai.response.id.
	ResponseID string
}

// RecordGenAI sets g's attributes on the span of sc's attempt, so that a
// trace says which model each attempt of a step called and what it used:
// a retried LLM step's attempts each carry their own usage. Call it when
// the usage is known (again to update it); it does nothing when tracing is
// off. The attempt's span already summarizes its stream (chunks, bytes,
// the time to its first chunk).
func RecordGenAI(sc StepContext, g GenAI) {
	sp := trace.SpanFromContext(sc)
	if !sp.IsRecording() {
		return
	}
	op := g.Operation
	if op == "" {
		op = "chat"
	}
	attrs := []attribute.KeyValue{attribute.String("gen_ai.operation.name", op)}
	str := func(k, v string) {
		if v != "" {
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	str("gen_ai.provider.name", g.Provider)
	str("gen_ai.request.model", g.RequestModel)
	str("gen_ai.response.model", g.ResponseModel)
	str("gen_ai.response.id", g.ResponseID)
	if g.InputTokens > 0 {
		attrs = append(attrs, attribute.Int64("gen_ai.usage.input_tokens", g.InputTokens))
	}
	if g.OutputTokens > 0 {
		attrs = append(attrs, attribute.Int64("gen_ai.usage.output_tokens", g.OutputTokens))
	}
	if len(g.FinishReasons) > 0 {
		attrs = append(attrs, attribute.StringSlice("gen_ai.response.finish_reasons", g.FinishReasons))
	}
	sp.SetAttributes(attrs...)
}
