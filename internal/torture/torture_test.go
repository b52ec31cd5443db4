package torture

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(WorkerEnv) == "1" {
		if err := WorkerMain(context.Background(), os.Args[1:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "torture worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A few trials with faults on SQLite, in real processes.
func TestTrialsSQLite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	n := 4
	rep, err := RunTrials(context.Background(), Options{
		Trials: n, Seed: 1, Store: "sqlite:" + t.TempDir(), Log: testLog{t}, TrialTimeout: 60 * time.Second, HTTP: true, Agents: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Failures {
		for _, v := range f.Violations {
			t.Errorf("seed %d: %v", f.Seed, v)
		}
	}
	if rep.Trials != n || rep.Stats.Runs == 0 {
		t.Fatalf("ran %d trials, %d runs", rep.Trials, rep.Stats.Runs)
	}
	t.Logf("%+v injected %v", rep.Stats, rep.Injected)
}

// The plan draws lined parking and limiter changes in some limiter
// trials, as a pure function of the seed: small LineRuns (and sometimes
// Concurrency), more runs of limited steps than the engines keep, inline
// and on goroutines of their own, with several keys and priorities; and
// changes that keep the concurrency and take what they add off again.
func TestPlanDrawsLines(t *testing.T) {
	var lined, small, changed, ratesAdded int
	for seed := uint64(1); seed <= 300; seed++ {
		o := GenOptions{Faults: DefaultFaults(""), HTTP: true, Agents: true, Postgres: seed%2 == 0}
		tr := Generate(seed, "", o)
		again, _ := json.Marshal(Generate(seed, "", o))
		if b, _ := json.Marshal(tr); !bytes.Equal(b, again) {
			t.Fatalf("seed %d: two plans differ", seed)
		}
		if tr.Limiter == 0 {
			if tr.LineRuns != 0 || tr.Concurrency != 0 || len(tr.LimiterChanges) > 0 {
				t.Fatalf("seed %d: lined parking or limiter changes without a limiter: %+v", seed, tr)
			}
			continue
		}
		if tr.LineRuns > 0 {
			lined++
			if tr.LineRuns > 2 || tr.Concurrency > 2 {
				t.Fatalf("seed %d: LineRuns %d, Concurrency %d: want small ones", seed, tr.LineRuns, tr.Concurrency)
			}
			if tr.Concurrency > 0 {
				small++
			}
			limitedRuns, inline, async := 0, 0, 0
			keys, prios := map[string]bool{}, map[int]bool{}
			for _, rs := range tr.Runs {
				has := false
				for _, it := range rs.Items {
					if !it.Limited {
						continue
					}
					has = true
					keys[it.LimitKey], prios[it.LimitPriority] = true, true
					if it.Group != 0 {
						async++
					} else {
						inline++
					}
				}
				if has {
					limitedRuns++
				}
			}
			// What the engines keep: Concurrency runs each (if set), and
			// LineRuns standing aside; and the slots held.
			kept := tr.Workers*tr.Engines*(tr.Concurrency+tr.LineRuns) + tr.Limiter
			if limitedRuns <= min(kept, maxLinedRuns) || inline == 0 || async == 0 || len(keys) < 2 || len(prios) < 2 {
				t.Fatalf("seed %d: %d runs of limited steps for %d kept (%d inline, %d async), keys %v, priorities %v",
					seed, limitedRuns, kept, inline, async, keys, prios)
			}
		}
		if n := len(tr.LimiterChanges); n > 0 {
			changed++
			for i, c := range tr.LimiterChanges {
				cfg := c.Config(tr)
				if err := cfg.Check(); err != nil || cfg.Concurrency != tr.Limiter {
					t.Fatalf("seed %d: change %d puts %+v (%v): want the trial's concurrency %d", seed, i, cfg, err, tr.Limiter)
				}
				if i > 0 && c.After <= tr.LimiterChanges[i-1].After {
					t.Fatalf("seed %d: change %d after %d attempts, the one before after %d", seed, i, c.After, tr.LimiterChanges[i-1].After)
				}
				if c.Kind() != "same" {
					ratesAdded++
				}
			}
			if last := tr.LimiterChanges[n-1]; last.Kind() != "same" {
				t.Fatalf("seed %d: the last change leaves %s on", seed, last.Kind())
			}
		}
	}
	t.Logf("of 300 seeds: %d with lined parking (%d with a small Concurrency), %d with limiter changes (%d adding a rate or a budget)", lined, small, changed, ratesAdded)
	if lined == 0 || small == 0 || small == lined || changed == 0 || ratesAdded == 0 {
		t.Fatal("the plans do not draw every shape")
	}
}

// lineSeeds are seeds whose plans draw lined parking with a small
// Concurrency and limiter changes, on SQLite and on PostgreSQL (checked
// by the test, so a change of the plan cannot make it pass vacuously).
var lineSeeds = map[string]uint64{"sqlite": 18, "postgres": 58}

// A trial of each store with lined parking and limiter changes, in real
// processes: no violation, and the report shows the lined parks, the
// lined claims and the changes happened.
func TestLinedTrials(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			seed := lineSeeds[kind]
			var dsn string
			switch kind {
			case "sqlite":
				dsn = "sqlite:" + t.TempDir()
			default:
				if !pgtest.Available() {
					t.Skipf("%s is set", pgtest.SQLiteOnlyEnv)
				}
				dsn = withSchema(pgtest.URL(), pgtest.NewSchema(t))
			}
			plan := Generate(seed, "", GenOptions{Faults: DefaultFaults(dsn), Postgres: kind == "postgres", HTTP: true, Agents: true})
			if plan.LineRuns == 0 || plan.Concurrency == 0 || len(plan.LimiterChanges) == 0 {
				t.Fatalf("seed %d no longer draws lined parking and limiter changes (LineRuns %d, Concurrency %d, changes %d): pick another",
					seed, plan.LineRuns, plan.Concurrency, len(plan.LimiterChanges))
			}
			rep, err := RunTrials(context.Background(), Options{
				Trials: 1, Seed: seed, Store: dsn, Log: testLog{t}, TrialTimeout: 60 * time.Second, HTTP: true, Agents: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range rep.Failures {
				for _, v := range f.Violations {
					t.Errorf("seed %d: %v", f.Seed, v)
				}
			}
			st := rep.Stats
			t.Logf("lined parks %d (runs %d, async %d), lined claims %d, limiter changes %d of %d, limited attempts %d",
				st.LinedParks, st.LinedRuns, st.LinedAsyncParks, st.LinedClaims, st.LimiterChanges, len(plan.LimiterChanges), st.Limited)
			// The plan outnumbers the engines' seats many times over, and
			// its limited attempts pass every change's After.
			if st.LinedParks == 0 || st.LinedClaims == 0 || st.LimiterChanges == 0 {
				t.Errorf("the trial did not park runs lined (%d), claim them lined (%d) or change its limiter (%d)", st.LinedParks, st.LinedClaims, st.LimiterChanges)
			}
		})
	}
}

// withSchema adds a schema parameter to a postgres:// URL.
func withSchema(url, schema string) string {
	if strings.Contains(url, "?") {
		return url + "&schema=" + schema
	}
	return url + "?schema=" + schema
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) { l.t.Log(string(p)); return len(p), nil }
