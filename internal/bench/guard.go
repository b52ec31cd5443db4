package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"text/tabwriter"
)

// The performance guard: a short run of some workloads whose ratios (each
// against its baseline measured in the same run: machine speed cancels out)
// must stay within a band of committed values, so that a change that halves
// throughput fails CI visibly. Each workload runs Rounds times and its best
// ratio counts: load on a shared machine makes some rounds worse, seldom
// all; a regression makes all of them worse.

// GuardFile is a committed guard (bench/guard.json).
type GuardFile struct {
	// Config holds the workloads' sizes: small, so the guard is quick.
	Config Config `json:"config"`
	// Rounds is how many times each workload runs; the best ratio counts.
	Rounds int     `json:"rounds"`
	Guards []Guard `json:"guards"`
}

// Guard is one workload's band.
type Guard struct {
	Workload string `json:"workload"`
	// Metric, if set, names the figure held instead of the ratio: one of
	// the result's Extra, a count per run (statements, round trips,
	// commits: the costs workload), which the machine's speed does not
	// move.
	Metric string `json:"metric,omitempty"`
	// Store, if "postgres", runs the workload on PostgreSQL (Config's
	// GuardPostgres); otherwise on the guard's store.
	Store string `json:"store,omitempty"`
	// Ratio is the committed ratio (Result.Ratio), or Metric's value, of a
	// healthy build.
	Ratio float64 `json:"ratio"`
	// Higher says a higher ratio is better (a throughput over its
	// baseline's); otherwise lower is (a time over its baseline's).
	Higher bool `json:"higher"`
	// Factor is how much worse than Ratio still passes: 1.6 fails a ratio
	// below Ratio/1.6 (Higher) or above Ratio×1.6.
	Factor float64 `json:"factor"`
	// Why says what the ratio measures, for the report.
	Why string `json:"why,omitempty"`
}

// Verdict is one guard's outcome.
type Verdict struct {
	Guard
	Best   float64   // the best ratio of the rounds
	Rounds []float64 // every round's ratio
	Limit  float64   // the worst that passes
	OK     bool
}

// ReadGuardFile reads a guard file.
func ReadGuardFile(path string) (*GuardFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var g GuardFile
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&g); err != nil {
		return nil, fmt.Errorf("guard file %s: %w", path, err)
	}
	if g.Rounds < 1 || len(g.Guards) == 0 {
		return nil, fmt.Errorf("guard file %s: want rounds >= 1 and at least one guard", path)
	}
	for _, gd := range g.Guards {
		if gd.Ratio <= 0 || gd.Factor < 1 {
			return nil, fmt.Errorf("guard file %s: workload %q: want a ratio > 0 and a factor >= 1", path, gd.Workload)
		}
		if gd.Store != "" && gd.Store != "postgres" {
			return nil, fmt.Errorf("guard file %s: workload %q: store %q: want empty (the guard's) or postgres", path, gd.Workload, gd.Store)
		}
	}
	return &g, nil
}

// RunGuard runs the guard's workloads and judges their ratios.
func RunGuard(ctx context.Context, g *GuardFile, base Config) ([]Verdict, error) {
	c := g.Config
	c.Progress, c.ReaderCommand, c.Logger = base.Progress, base.ReaderCommand, base.Logger
	if c.Store == "" {
		c.Store = base.Store
	}
	// A workload some guards share runs once a round for all of them.
	type key struct{ workload, store string }
	results := map[key][]*Result{}
	out := make([]Verdict, len(g.Guards))
	for i, gd := range g.Guards {
		k := key{gd.Workload, gd.Store}
		if results[k] == nil {
			wc := c
			if gd.Store == "postgres" {
				wc.Store = base.GuardPostgres
				if wc.Store == "" {
					wc.Store = DefaultPostgres
				}
			}
			for range g.Rounds {
				rs, err := Run(ctx, wc, []string{gd.Workload})
				if err != nil {
					return nil, fmt.Errorf("guard %s (%s): %w", gd.Workload, storeLabel(wc.Store), err)
				}
				results[k] = append(results[k], rs[0])
			}
		}
		var rounds []float64
		for _, r := range results[k] {
			if gd.Metric == "" {
				rounds = append(rounds, r.Ratio)
				continue
			}
			v, ok := r.Extra[gd.Metric]
			if !ok {
				return nil, fmt.Errorf("guard %s: the workload reports no %q", gd.Workload, gd.Metric)
			}
			rounds = append(rounds, v)
		}
		out[i] = Judge(gd, rounds)
	}
	return out, nil
}

// DefaultPostgres is the database the guard's PostgreSQL workloads use
// unless Config.GuardPostgres names one: the tests' (README, Testing).
const DefaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Judge is gd's verdict on the ratios of its rounds: the best counts.
func Judge(gd Guard, rounds []float64) Verdict {
	v := Verdict{Guard: gd, Rounds: rounds}
	if gd.Higher {
		v.Limit, v.Best = gd.Ratio/gd.Factor, math.Inf(-1)
	} else {
		v.Limit, v.Best = gd.Ratio*gd.Factor, math.Inf(1)
	}
	for _, r := range rounds {
		if gd.Higher {
			v.Best = max(v.Best, r)
		} else {
			v.Best = min(v.Best, r)
		}
	}
	v.OK = gd.Higher && v.Best >= v.Limit || !gd.Higher && v.Best <= v.Limit
	return v
}

// WriteVerdicts prints the guard's table; it reports whether all passed.
func WriteVerdicts(w io.Writer, vs []Verdict) (bool, error) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "workload\tcommitted\tbest\trounds\tpasses if\t")
	all := true
	for _, v := range vs {
		cmp := ">="
		if !v.Higher {
			cmp = "<="
		}
		verdict := "ok"
		if !v.OK {
			verdict, all = "FAIL: "+v.Why, false
		}
		rounds := make([]string, len(v.Rounds))
		for i, r := range v.Rounds {
			rounds[i] = fmt.Sprintf("%.3g", r)
		}
		name := v.Workload
		if v.Metric != "" {
			name += " " + v.Metric
		}
		if v.Store != "" {
			name += " (" + v.Store + ")"
		}
		fmt.Fprintf(tw, "%s\t%.3g\t%.3g\t%s\t%s %.3g\t%s\n", name, v.Ratio, v.Best, strings.Join(rounds, " "), cmp, v.Limit, verdict)
	}
	return all, tw.Flush()
}
