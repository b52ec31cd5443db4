package main

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/examples/app/apptest"
	"github.com/weirhq/weir/internal/pgtest"
)

// TestWorkers runs the second deployment shape on the tests' PostgreSQL
// server: two `workers worker` processes and one `workers server
// --no-worker`, one binary, one fresh schema. Runs started through the
// server are executed by the workers, never by the server; a hook is
// delivered through the server; with one worker SIGKILLed the other
// executes what comes next.
func TestWorkers(t *testing.T) {
	dsn := schemaDSN(t)

	bin := apptest.Build(t, "github.com/weirhq/weir/examples/workers")
	workerLine := regexp.MustCompile(`worker executing runs of answer, greet, limited, pipeline, research, summarize`)
	w1 := apptest.Start(t, bin, "worker", "--store", dsn)
	w1.WaitLine(t, workerLine, 20*time.Second)
	w2 := apptest.Start(t, bin, "worker", "--store", dsn)
	w2.WaitLine(t, workerLine, 20*time.Second)
	api := apptest.Start(t, bin, "server", "--no-worker", "--addr", "127.0.0.1:0", "--store", dsn)
	base := api.URL(t)

	byPid := regexp.MustCompile(`by pid (\d+)`)
	start := func(n int, tag string) map[int]int {
		t.Helper()
		ids := make([]string, n)
		for i := range ids {
			var r apptest.Run
			body := fmt.Sprintf(`{"workflow":"summarize","input":"doc %s %d has five words","id":"%s-%d"}`, tag, i, tag, i)
			if code := apptest.Do(t, "POST", base+"/v1/runs", body, &r); code != 201 {
				t.Fatalf("POST /v1/runs: %d", code)
			}
			ids[i] = r.ID
		}
		ran := map[int]int{}
		for _, id := range ids {
			r := apptest.WaitRun(t, base, id, "completed", 30*time.Second)
			m := byPid.FindStringSubmatch(string(r.Output))
			if m == nil {
				t.Fatalf("run %s output %s names no process", id, r.Output)
			}
			pid, _ := strconv.Atoi(m[1])
			ran[pid]++
		}
		return ran
	}
	ran := start(8, "first")
	for pid := range ran {
		if pid != w1.Pid() && pid != w2.Pid() {
			t.Fatalf("a run was executed by pid %d, not by a worker (%d, %d; the API server is %d)", pid, w1.Pid(), w2.Pid(), api.Pid())
		}
	}

	// A hook, through the API server, to a run a worker executes.
	var r apptest.Run
	apptest.Do(t, "POST", base+"/v1/runs", `{"workflow":"answer","input":"why"}`, &r)
	deadline := time.Now().Add(30 * time.Second)
	for apptest.Do(t, "POST", base+"/v1/hooks/approve-"+r.ID, `{"ok":true}`, nil)/100 != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the run's hook was not there within 30 s:\n%s\n%s", w1.Output(), w2.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	done := apptest.WaitRun(t, base, r.ID, "completed", 30*time.Second)
	if !strings.Contains(string(done.Output), "50 tokens, found+ranked, approved=true") {
		t.Fatalf("answer's output %s", done.Output)
	}

	w1.Kill(t)
	ran = start(4, "after-kill")
	if ran[w2.Pid()] != 4 {
		t.Fatalf("with worker %d killed, runs ran by %v, want all 4 by %d", w1.Pid(), ran, w2.Pid())
	}
	api.Stop(t)
	w2.Stop(t)
}

// schemaDSN is the test database's URL with a fresh schema of this test's
// (dropped when it ends).
func schemaDSN(t *testing.T) string {
	u, err := url.Parse(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("schema", pgtest.NewSchema(t))
	u.RawQuery = q.Encode()
	return u.String()
}
