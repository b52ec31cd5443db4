package bench

import (
	"os"
	"path/filepath"
	"testing"
)

// A halved throughput fails its guard however the rounds fall; noise that
// spoils some rounds but not all passes.
func TestJudge(t *testing.T) {
	thr := Guard{Workload: "append", Ratio: 0.8, Higher: true, Factor: 1.6}
	tm := Guard{Workload: "adopt", Ratio: 0.4, Higher: false, Factor: 2}
	for _, tc := range []struct {
		g      Guard
		rounds []float64
		ok     bool
	}{
		{thr, []float64{0.8, 0.79, 0.81}, true},
		{thr, []float64{0.3, 0.35, 0.62}, true},  // two rounds spoilt by load
		{thr, []float64{0.4, 0.38, 0.41}, false}, // halved
		{tm, []float64{0.45, 0.9, 1.2}, true},
		{tm, []float64{0.85, 0.9, 0.95}, false}, // doubled
	} {
		if v := Judge(tc.g, tc.rounds); v.OK != tc.ok {
			t.Errorf("%s %v: ok %v (best %v, limit %v), want %v", tc.g.Workload, tc.rounds, v.OK, v.Best, v.Limit, tc.ok)
		}
	}
}

// The committed guard file parses, and names only known workloads.
func TestGuardFile(t *testing.T) {
	g, err := ReadGuardFile(filepath.Join("..", "..", "bench", "guard.json"))
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, w := range Workloads() {
		known[w[0]] = true
	}
	for _, gd := range g.Guards {
		if !known[gd.Workload] || gd.Why == "" {
			t.Errorf("guard %+v: unknown workload or no reason", gd)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"rounds": 1, "guards": [{"workload": "append", "ratio": 0, "factor": 2}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadGuardFile(bad); err == nil {
		t.Fatal("a guard with ratio 0 was taken")
	}
}
