package server

import (
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")(,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*\})? (\S+)$`)
	metaLine   = regexp.MustCompile(`^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+)$`)
)

// checkExposition checks the Prometheus text format line by line: every
// sample belongs to a family declared by a TYPE line, values parse, and
// histogram buckets are cumulative.
func checkExposition(t *testing.T, body string) {
	t.Helper()
	types := map[string]string{}
	lastBucket := map[string]float64{}
	for i, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		if m := metaLine.FindStringSubmatch(line); m != nil {
			if m[1] == "TYPE" {
				types[m[2]] = m[3]
			}
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("line %d is not a sample: %q", i+1, line)
		}
		name := m[1]
		family := name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if f := strings.TrimSuffix(name, suf); f != name && types[f] == "histogram" {
				family = f
			}
		}
		if types[family] == "" {
			t.Fatalf("line %d: %s has no TYPE", i+1, name)
		}
		v, err := strconv.ParseFloat(m[len(m)-1], 64)
		if err != nil {
			t.Fatalf("line %d: value %q", i+1, m[len(m)-1])
		}
		if strings.HasSuffix(name, "_bucket") {
			series := regexp.MustCompile(`,le="[^"]*"`).ReplaceAllString(line[:strings.LastIndexByte(line, ' ')], "")
			if v < lastBucket[series] {
				t.Fatalf("line %d: bucket not cumulative", i+1)
			}
			lastBucket[series] = v
		}
	}
}

func TestHistogramBuckets(t *testing.T) {
	m := newMetrics()
	m.request(routeRuns, 200, 300*time.Microsecond)
	m.request(routeRuns, 200, 3*time.Millisecond)
	m.request(routeRuns, 500, 2*time.Minute)
	var b strings.Builder
	m.write(&b)
	out := b.String()
	for _, want := range []string{
		`weir_http_request_duration_seconds_bucket{route="runs",le="0.0005"} 1`,
		`weir_http_request_duration_seconds_bucket{route="runs",le="0.005"} 2`,
		`weir_http_request_duration_seconds_bucket{route="runs",le="60"} 2`,
		`weir_http_request_duration_seconds_bucket{route="runs",le="+Inf"} 3`,
		`weir_http_request_duration_seconds_count{route="runs"} 3`,
		`weir_http_requests_total{route="runs",code="500"} 1`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("lacks %q", want)
		}
	}
	checkExposition(t, out)
}

func TestLabelValuesAreEscaped(t *testing.T) {
	m := newMetrics()
	m.streamRejected("a\"b\\c\nd")
	var b strings.Builder
	m.write(&b)
	if !strings.Contains(b.String(), `weir_stream_rejected_total{reason="a\"b\\c\nd"} 1`) {
		t.Fatalf("not escaped:\n%s", b.String())
	}
	checkExposition(t, b.String())
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		method, target string
		want           routeClass
	}{
		{"POST", "/v1/runs", routeRuns},
		{"GET", "/v1/runs/x/events", routeRuns},
		{"GET", "/v1/workflows", routeRuns},
		{"GET", "/v1/runsx", routeOther},
		{"POST", "/v1/stream/a", routeStreamWrite},
		{"PUT", "/v1/stream/a", routeStreamWrite},
		{"DELETE", "/v1/stream/a", routeStreamWrite},
		{"GET", "/v1/stream/a?offset=-1", routeStreamRead},
		{"HEAD", "/v1/stream/a", routeStreamRead},
		{"GET", "/v1/stream/a?offset=-1&live=long-poll", routeStreamLive},
		{"GET", "/v1/stream/runs/r/tokens?live=sse", routeStreamLive},
		{"OPTIONS", "/v1/stream/a", routeOther},
		{"GET", "/healthz", routeHealth},
		{"GET", "/metrics", routeMetrics},
		{"GET", "/ui/", routeOther},
	} {
		if got := classify(httptest.NewRequest(c.method, c.target, nil)); got != c.want {
			t.Errorf("%s %s: %s, want %s", c.method, c.target, routeClassNames[got], routeClassNames[c.want])
		}
	}
}

func BenchmarkRequestMetrics(b *testing.B) {
	m := newMetrics()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.request(routeStreamWrite, 204, 200*time.Microsecond)
		}
	})
}
