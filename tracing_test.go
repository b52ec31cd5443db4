package weir_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/sqlitestore"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// A run's execution is a span; each step attempt a child of it, a retried
// step's attempts siblings with the failed one's error and backoff, and
// each attempt says what its stream writes did: the retry adopted the
// first attempt's chunks. A step sets its own attributes (the GenAI
// conventions') on its attempt's span.
func TestTracingSpans(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		cfg := fastConfig()
		cfg.TracerProvider = tp
		e := newEngine(t, s, cfg)
		wf := weir.Register(e, "traced", func(ctx weir.Context, _ int) (int, error) {
			n, err := weir.Step(ctx, "think", func(sc weir.StepContext) (int, error) {
				weir.RecordGenAI(sc, weir.GenAI{Provider: "scripted", RequestModel: "scripted-1", InputTokens: 12, OutputTokens: 4, FinishReasons: []string{"stop"}})
				w := sc.Stream("tokens")
				for i := range 4 {
					fmt.Fprintf(w, "t%d ", i)
					if i == 1 && sc.Attempt() == 1 {
						if err := w.Flush(); err != nil {
							return 0, err
						}
						return 0, errors.New("the model's connection dropped")
					}
				}
				return 4, nil
			})
			if err != nil {
				return 0, err
			}
			a := weir.StepAsync(ctx, "a", func(weir.StepContext) (int, error) { return 1, nil })
			b := weir.StepAsync(ctx, "b", func(weir.StepContext) (int, error) { return 2, nil })
			ab, err := weir.All(ctx, a, b)
			return n + ab[0] + ab[1], err
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := h.Result(testCtx(t)); err != nil || n != 7 {
			t.Fatalf("result %d, %v", n, err)
		}
		waitFor(t, 5*time.Second, "the run's span to end", func() bool {
			for _, s := range exp.GetSpans() {
				if s.Name == "weir.run traced" {
					return true
				}
			}
			return false
		})
		var run tracetest.SpanStub
		var think, async []tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			switch s.Name {
			case "weir.run traced":
				run = s
			case "weir.step think":
				think = append(think, s)
			case "weir.step a", "weir.step b":
				async = append(async, s)
			}
		}
		if got := attrs(run)["weir.run.outcome"].AsString(); got != "completed" || attrs(run)["weir.run.id"].AsString() != h.ID {
			t.Fatalf("run span: outcome %q, attributes %v", got, run.Attributes)
		}
		if len(think) != 2 || len(async) != 2 {
			t.Fatalf("%d attempt spans of think (want 2) and %d of the parallel steps (want 2)", len(think), len(async))
		}
		for _, s := range append(think, async...) {
			if s.Parent.SpanID() != run.SpanContext.SpanID() || s.SpanContext.TraceID() != run.SpanContext.TraceID() {
				t.Fatalf("span %s is not a child of the run's span", s.Name)
			}
		}
		first, second := think[0], think[1]
		if attrs(first)["weir.step.attempt"].AsInt64() != 1 {
			first, second = second, first
		}
		fa, sa := attrs(first), attrs(second)
		if fa["weir.step.outcome"].AsString() != "retrying" || first.Status.Code != codes.Error || fa["weir.step.retry_backoff_ms"].Type() != attribute.INT64 {
			t.Fatalf("the failed attempt's span: %v, status %v", first.Attributes, first.Status)
		}
		if fa["weir.stream.chunks_appended"].AsInt64() != 2 {
			t.Fatalf("the failed attempt appended %d chunks, want 2", fa["weir.stream.chunks_appended"].AsInt64())
		}
		if sa["weir.step.outcome"].AsString() != "completed" || sa["weir.stream.chunks_adopted"].AsInt64() != 2 ||
			sa["weir.stream.chunks_appended"].AsInt64() != 2 || sa["weir.stream.outcome"].AsString() != "committed" {
			t.Fatalf("the retry's span: %v", second.Attributes)
		}
		if sa["weir.stream.bytes_written"].AsInt64() != int64(len("t0 t1 t2 t3 ")) || sa["weir.stream.first_chunk_ms"].AsFloat64() <= 0 {
			t.Fatalf("the retry's stream summary: %d bytes written, first chunk at %v ms", sa["weir.stream.bytes_written"].AsInt64(), sa["weir.stream.first_chunk_ms"].AsFloat64())
		}
		if sa["gen_ai.request.model"].AsString() != "scripted-1" || sa["gen_ai.usage.output_tokens"].AsInt64() != 4 ||
			sa["gen_ai.usage.input_tokens"].AsInt64() != 12 || sa["gen_ai.provider.name"].AsString() != "scripted" || sa["gen_ai.operation.name"].AsString() != "chat" {
			t.Fatalf("the step's own attributes are not on its attempt's span: %v", second.Attributes)
		}
	})
}

// A run is one trace across its executions: a run started under a span
// belongs to that span's trace, a park and a resume make a second
// execution span in the same trace, and its child run's executions are in
// it too, under the parent's execution.
func TestTracingOneTraceAcrossExecutions(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		cfg := fastConfig()
		cfg.TracerProvider = tp
		cfg.ParkAfter = weir.NoWait // every wait parks: the resume is a second execution
		e := newEngine(t, s, cfg)
		child := weir.Register(e, "child", func(ctx weir.Context, n int) (int, error) { return n + 1, nil })
		// It parks waiting for a message the test sends once it parked (a
		// short sleep did not park when its own record outlasted it: CI,
		// under load).
		wf := weir.Register(e, "parent", func(ctx weir.Context, _ int) (int, error) {
			if _, err := weir.Recv[int](ctx, "go"); err != nil {
				return 0, err
			}
			return weir.StartChild(ctx, child, 41, nil).Get(ctx)
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		caller, span := tp.Tracer("test").Start(testCtx(t), "caller")
		h, err := wf.Start(caller, 0, nil)
		span.End()
		if err != nil {
			t.Fatal(err)
		}
		waitParked(t, s, h.ID)
		sendMsg(t, e, h.ID, "go", `1`, nil)
		if n, err := h.Result(testCtx(t)); err != nil || n != 42 {
			t.Fatalf("result %d, %v", n, err)
		}
		want := span.SpanContext().TraceID()
		waitFor(t, 5*time.Second, "the message wait's and the child wait's spans", func() bool {
			var message, wait bool
			for _, s := range exp.GetSpans() {
				message = message || s.Name == "weir.wait hook" && slices.Equal(attrs(s)["weir.wait.hooks"].AsStringSlice(), []string{"message"})
				wait = wait || s.Name == "weir.wait child" && len(attrs(s)["weir.wait.children"].AsStringSlice()) == 1
			}
			return message && wait
		})
		var parents, children int
		waitFor(t, 5*time.Second, "the child's and the parent's last execution spans", func() bool {
			parents, children = 0, 0
			for _, s := range exp.GetSpans() {
				switch s.Name {
				case "weir.run parent":
					parents++
				case "weir.run child":
					children++
				}
			}
			return parents >= 2 && children >= 1
		})
		for _, s := range exp.GetSpans() {
			if s.Name != "caller" && s.SpanContext.TraceID() != want {
				t.Fatalf("span %s is in trace %s, not the caller's %s", s.Name, s.SpanContext.TraceID(), want)
			}
			if s.Name == "weir.run parent" && s.Parent.SpanID() != span.SpanContext().SpanID() {
				t.Fatalf("an execution of the run is not a child of the span that started it")
			}
		}
	})
}

// discard is an exporter that drops what it is given: the cost of making
// and recording the spans, without exporting them.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkTracing measures a run of three short steps, each writing a
// chunk to its stream, on SQLite, with tracing off (the default: the
// global no-op provider) and on (the SDK, every span sampled and
// recorded, handed to a batcher whose exporter drops them). Compare the
// two sub-benchmarks of one run: benchstat -col /tracing.
func BenchmarkTracing(b *testing.B) {
	for _, mode := range []string{"off", "on"} {
		b.Run("tracing="+mode, func(b *testing.B) {
			// Commits not synced: the spans' cost, not the disk's, is what
			// differs between the two.
			st, err := sqlitestore.Open(context.Background(), filepath.Join(b.TempDir(), "weir.db"), &sqlitestore.Config{Synchronous: "OFF"})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			var s store.Full = st
			cfg := fastConfig()
			cfg.Logger = testLogger()
			if mode == "on" {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				cfg.TracerProvider = tp
			}
			e := newEngine(b, s, cfg)
			wf := weir.Register(e, "three", func(ctx weir.Context, _ int) (int, error) {
				sum := 0
				for i := range 3 {
					v, err := weir.Step(ctx, "s", func(sc weir.StepContext) (int, error) {
						_, err := sc.Stream("out").Write([]byte("chunk"))
						return i, err
					})
					if err != nil {
						return 0, err
					}
					sum += v
				}
				return sum, nil
			})
			if err := e.Work(testCtx(b)); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				h, err := wf.Start(testCtx(b), 0, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := h.Result(testCtx(b)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
