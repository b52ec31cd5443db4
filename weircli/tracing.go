package weircli

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// tracingConfigured reports whether the standard OTEL_* variables ask for
// traces: an OTLP endpoint, or OTEL_TRACES_EXPORTER=otlp; never with
// OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true.
func tracingConfigured() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch strings.ToLower(os.Getenv("OTEL_TRACES_EXPORTER")) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// setupTracing installs an OpenTelemetry tracer provider that exports
// over OTLP/HTTP as the OTEL_* variables say (endpoint, headers, timeout,
// the batch processor's delays; OTEL_SERVICE_NAME, default the program's
// name), when they ask for traces; otherwise it does nothing and tracing
// stays off. The returned function flushes and stops it.
func setupTracing(ctx context.Context, service string, log *slog.Logger) (func(context.Context), error) {
	if !tracingConfigured() {
		return func(context.Context) {}, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, err
	}
	if s := os.Getenv("OTEL_SERVICE_NAME"); s != "" {
		service = s
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", service), attribute.Int("process.pid", os.Getpid())))
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	log.Info(service+": exporting traces over OTLP/HTTP (OTEL_* variables)", "endpoint", firstNonEmpty(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "http://localhost:4318"))
	return func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn(service+": flushing traces", "err", err)
		}
	}, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
