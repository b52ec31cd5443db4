package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/examples/app/apptest"
)

// Two builds on one PostgreSQL database, each with its own workers and API
// server (WEIR_APP_VERSION v1 and v2): each worker claims only its
// version's runs; a v1 run left without a v1 worker waits, saying so,
// until it is migrated to v2 knowingly; v2's code takes the patched path
// in its own runs and, replaying the migrated v1 run that had passed the
// patch point, the old path.
func TestTwoVersionsShareADatabase(t *testing.T) {
	dsn := schemaDSN(t)
	bin := apptest.Build(t, "github.com/weirhq/weir/examples/workers")
	workerLine := regexp.MustCompile(`worker executing runs of`)
	v1, v2 := []string{"WEIR_APP_VERSION=v1"}, []string{"WEIR_APP_VERSION=v2"}
	api1 := apptest.StartEnv(t, bin, v1, "server", "--no-worker", "--addr", "127.0.0.1:0", "--store", dsn)
	api2 := apptest.StartEnv(t, bin, v2, "server", "--no-worker", "--addr", "127.0.0.1:0", "--store", dsn)
	base1, base2 := api1.URL(t), api2.URL(t)
	w1 := apptest.StartEnv(t, bin, v1, "worker", "--store", dsn, "--lease-ttl", "1s")
	w2 := apptest.StartEnv(t, bin, v2, "worker", "--store", dsn, "--lease-ttl", "1s")
	w1.WaitLine(t, workerLine, 20*time.Second)
	w2.WaitLine(t, workerLine, 20*time.Second)

	start := func(base, id string) {
		t.Helper()
		if code := apptest.Do(t, "POST", base+"/v1/runs", `{"workflow":"greet","input":"ann","id":"`+id+`"}`, nil); code != 201 {
			t.Fatalf("POST /v1/runs %s: %d", id, code)
		}
	}
	approve := func(base, id string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for apptest.Do(t, "POST", base+"/v1/hooks/approve-"+id, `true`, nil)/100 != 2 {
			if time.Now().After(deadline) {
				t.Fatalf("the hook of %s was not there within 30s", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var run struct {
		Version string `json:"version"`
	}
	// Each version's runs go to its own worker.
	for i, c := range []struct{ base, id, version, want string }{
		{base1, "g1", "v1", "plain by pid"}, {base2, "g2", "v2", "polite by pid"},
	} {
		start(c.base, c.id)
		approve(c.base, c.id)
		done := apptest.WaitRun(t, c.base, c.id, "completed", 30*time.Second)
		pid := []int{w1.Pid(), w2.Pid()}[i]
		if !strings.Contains(string(done.Output), c.want) || !strings.Contains(string(done.Output), itoa(pid)) {
			t.Fatalf("%s: output %s, want %q by the %s worker (pid %d)", c.id, done.Output, c.want, c.version, pid)
		}
		apptest.Do(t, "GET", c.base+"/v1/runs/"+c.id, "", &run)
		if run.Version != c.version {
			t.Fatalf("%s records version %q, want %q", c.id, run.Version, c.version)
		}
	}

	// A v1 run passes the patch point on v1's worker, which dies; a second
	// v1 run starts with no v1 worker at all.
	start(base1, "g3")
	waitFor(t, 30*time.Second, "g3 to wait on its hook", func() bool {
		var h struct{ Hooks []any }
		apptest.Do(t, "GET", base1+"/v1/runs/g3/hooks", "", &h)
		return len(h.Hooks) == 1
	})
	w1.Kill(t)
	start(base1, "g4")
	var w struct{ Summary string }
	waitFor(t, 30*time.Second, "g4 to say which worker it waits for", func() bool {
		apptest.Do(t, "GET", base1+"/v1/runs/g4/waiting", "", &w)
		return strings.Contains(w.Summary, `a worker of version "v1"`)
	})
	var moved struct{ Migrated []string }
	if code := apptest.Do(t, "POST", base2+"/v1/runs/migrate", `{"from":"v1","to":"v2"}`, &moved); code != 200 || strings.Join(moved.Migrated, ",") != "g3,g4" {
		t.Fatalf("migrate: %d %+v", code, moved)
	}
	approve(base2, "g3")
	approve(base2, "g4")
	g3 := apptest.WaitRun(t, base2, "g3", "completed", 30*time.Second)
	g4 := apptest.WaitRun(t, base2, "g4", "completed", 30*time.Second)
	// g3 had passed the patch point under v1: the old path, replayed by
	// v2's code. g4 reached it under v2: the patched path.
	if !strings.Contains(string(g3.Output), "plain by pid") || !strings.Contains(string(g4.Output), "polite by pid "+itoa(w2.Pid())) {
		t.Fatalf("g3 %s, g4 %s", g3.Output, g4.Output)
	}
	api1.Stop(t)
	api2.Stop(t)
	w2.Stop(t)
}

func itoa(n int) string { return strconv.Itoa(n) }
