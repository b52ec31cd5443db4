// Package otlptest is a small OTLP/HTTP trace receiver for end-to-end
// tests: it decodes each export (protobuf, as the OTLP/HTTP exporter sends
// it) and keeps its spans with the resource they came from.
package otlptest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is a received span and the resource attributes of the process that
// sent it.
type Span struct {
	*tracepb.Span
	Service string // service.name
	Pid     int64  // process.pid; 0 if not sent
}

// Attr is the span's attribute key as a string ("" if absent or not one).
func (s Span) Attr(key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// IntAttr is the span's attribute key as an integer (0 if absent).
func (s Span) IntAttr(key string) int64 {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.GetIntValue()
		}
	}
	return 0
}

// Receiver is an OTLP/HTTP receiver at URL + "/v1/traces".
type Receiver struct {
	URL string
	srv *httptest.Server

	mu    sync.Mutex
	spans []Span
}

// Start starts a receiver; Close stops it.
func Start() *Receiver {
	r := &Receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	r.URL = r.srv.URL
	return r
}

// Close stops the receiver.
func (r *Receiver) Close() { r.srv.Close() }

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// ByName returns the spans received so far by name.
func (r *Receiver) ByName() map[string][]Span {
	m := map[string][]Span{}
	for _, s := range r.Spans() {
		m[s.Name] = append(m[s.Name], s)
	}
	return m
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces, application/x-protobuf", http.StatusBadRequest)
		return
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	var ex coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &ex); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range ex.ResourceSpans {
		var service string
		var pid int64
		for _, kv := range rs.GetResource().GetAttributes() {
			switch kv.Key {
			case "service.name":
				service = kv.Value.GetStringValue()
			case "process.pid":
				pid = kv.Value.GetIntValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				r.spans = append(r.spans, Span{Span: sp, Service: service, Pid: pid})
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}
