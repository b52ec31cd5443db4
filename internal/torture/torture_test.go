package torture

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
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

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) { l.t.Log(string(p)); return len(p), nil }
