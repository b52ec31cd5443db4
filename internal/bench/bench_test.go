package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// tiny runs every embedded workload at a size that takes a fraction of a
// second each: it checks they work and what they report, not speed.
func tiny() Config {
	return Config{
		Chunks: 4000, Writers: 4, AdoptChunks: 3000, Samples: 20, Interval: time.Millisecond,
		Steps: 30, Runs: 10, Replays: 2, Readers: 20, Messages: 3,
		DBOSRuns: 10, DBOSChunks: 5, DBOSConcurrency: 4, CostsRuns: 10,
	}
}

func TestWorkloadsJSON(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names := Default(Config{})
	rs, err := Run(ctx, tiny(), names)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(names) {
		t.Fatalf("%d results for %d workloads", len(rs), len(names))
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rs); err != nil {
		t.Fatal(err)
	}
	// The fields each workload must report.
	want := map[string][]string{
		"append":    {"ops_per_sec", "baseline", "baseline_ops_per_sec", "ratio", "target_met"},
		"adopt":     {"ops_per_sec", "baseline", "baseline_ops_per_sec", "ratio", "target_met"},
		"diverge":   {"ops_per_sec", "baseline", "baseline_ops_per_sec", "ratio", "extra"},
		"tail":      {"baseline", "ratio", "p50_ms", "p99_ms", "p999_ms", "target_met"},
		"steps":     {"ops_per_sec", "baseline", "baseline_ops_per_sec", "ratio", "p50_ms", "p99_ms", "p999_ms", "target_met"},
		"replay":    {"ops_per_sec", "baseline", "ratio", "p50_ms", "p99_ms", "p999_ms", "target_met"},
		"fanout":    {"baseline", "ratio", "p50_ms", "p99_ms", "p999_ms", "target_met", "extra"},
		"dbos-like": {"ops_per_sec", "baseline", "baseline_ops_per_sec", "ratio"},
		"costs":     {"ops_per_sec", "baseline", "baseline_ops_per_sec", "ratio", "extra"},
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(names) {
		t.Fatalf("%d JSON lines for %d workloads:\n%s", len(lines), len(names), buf.String())
	}
	for i, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, line)
		}
		w, _ := m["workload"].(string)
		if w != names[i] {
			t.Errorf("line %d: workload %q, want %q", i, w, names[i])
		}
		for _, f := range want[w] {
			v, ok := m[f]
			if !ok {
				t.Errorf("%s: no %q in %s", w, f, line)
				continue
			}
			if x, isNum := v.(float64); isNum && x <= 0 {
				t.Errorf("%s: %s = %v", w, f, x)
			}
		}
	}
	for _, r := range rs {
		switch r.Workload {
		case "adopt", "diverge":
			if r.Extra["committed_chunks"] != 0 && r.Extra["committed_chunks"] != 3000 {
				t.Errorf("%s: committed %v chunks", r.Workload, r.Extra["committed_chunks"])
			}
		case "costs":
			// A run, alone, is two commits: its creation; its end, with
			// its step's outcome, which carries the chunks the step wrote
			// (the step returned before its writer sent them) and the
			// creation of their stream. A step that took longer than
			// FirstLinger (a loaded machine, -race) sent its batch with its
			// start: three.
			for _, k := range []string{"inproc_commits_per_run", "http_commits_per_run"} {
				if v := r.Extra[k]; v < 2 || v > 3 {
					t.Errorf("costs: %s = %v, want 2 (3 for steps slower than 1 ms)", k, v)
				}
			}
		case "fanout":
			if r.Ops != 20*3 {
				t.Errorf("fanout: %d deliveries, want 60", r.Ops)
			}
		}
	}
	var table bytes.Buffer
	if err := WriteTable(&table, rs); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.Contains(table.String(), n) {
			t.Errorf("table has no %s:\n%s", n, table.String())
		}
	}
}

func TestUnknownWorkload(t *testing.T) {
	if _, err := Run(context.Background(), Config{}, []string{"nope"}); err == nil || !strings.Contains(err.Error(), "unknown workload") {
		t.Fatalf("err = %v", err)
	}
}

func TestPct(t *testing.T) {
	d := []time.Duration{5 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}
	if got := pct(d, 0.5); got != 3 {
		t.Errorf("p50 = %v", got)
	}
	if got := pct(d, 0.99); got != 5 {
		t.Errorf("p99 = %v", got)
	}
	if got := pct(nil, 0.5); got != 0 {
		t.Errorf("p50 of none = %v", got)
	}
}

func TestNum(t *testing.T) {
	for v, want := range map[float64]string{0: "-", 1234567: "1,234,567", 0.12345: "0.1235", 42: "42"} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
	}
}

// The tracing workload (named only) reports each variant's rate and
// overhead, and its OTLP variant really exports.
func TestTracingWorkload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := tiny()
	c.TracingRounds = 1
	rs, err := Run(ctx, c, []string{"tracing"})
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	for _, k := range []string{"steps_runs_per_sec_off", "steps_runs_per_sec_noop-exporter", "steps_runs_per_sec_otlp",
		"dbos_chunks_per_sec_otlp", "steps_overhead_pct_otlp", "dbos_overhead_pct_noop-exporter"} {
		if _, ok := r.Extra[k]; !ok {
			t.Errorf("no %s in %v", k, r.Extra)
		}
	}
	if r.Extra["otlp_exports"] < 1 || r.Extra["otlp_export_bytes"] < 100 {
		t.Errorf("the OTLP variant exported %v times, %v bytes", r.Extra["otlp_exports"], r.Extra["otlp_export_bytes"])
	}
	if r.TargetMet == nil || r.Ratio <= 0 {
		t.Errorf("no target or ratio: %+v", r)
	}
}
