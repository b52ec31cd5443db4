package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/examples/app/apptest"
)

// A run that failed on v1's code is forked from its failed step onto v2's
// (fixed) code, across real processes on one PostgreSQL database; the v2
// worker running the fork is killed (SIGKILL) in the middle of the step,
// and a second v2 worker replays the fork. The fork's committed view is
// the kept part's output followed by the new step's, each chunk once, and
// the kept step never runs again (its outcome replays, its pid stays v1's).
func TestForkReplayedAfterSIGKILL(t *testing.T) {
	dsn := schemaDSN(t)
	bin := apptest.Build(t, "github.com/weirhq/weir/examples/workers")
	workerLine := regexp.MustCompile(`worker executing runs of`)
	v1, v2 := []string{"WEIR_APP_VERSION=v1"}, []string{"WEIR_APP_VERSION=v2"}
	api := apptest.StartEnv(t, bin, v1, "server", "--no-worker", "--addr", "127.0.0.1:0", "--store", dsn)
	base := api.URL(t)
	w1 := apptest.StartEnv(t, bin, v1, "worker", "--store", dsn, "--lease-ttl", "1s")
	w1.WaitLine(t, workerLine, 20*time.Second)
	if code := apptest.Do(t, "POST", base+"/v1/runs", `{"workflow":"pipeline","id":"p1"}`, nil); code != 201 {
		t.Fatalf("start: %d", code)
	}
	apptest.WaitRun(t, base, "p1", "failed", 30*time.Second)
	want := []string{"head", "one-a", "one-b", "mid", "|close"}
	if got := committedOut(t, base, "p1"); !slices.Equal(got, want) {
		t.Fatalf("the failed run's committed view %q, want %q", got, want)
	}

	var fork apptest.Run
	if code := apptest.Do(t, "POST", base+"/v1/runs/p1/fork", `{"id":"p1-fixed","step":"two","version":"v2"}`, &fork); code != 201 {
		t.Fatalf("fork: %d", code)
	}
	w2 := apptest.StartEnv(t, bin, v2, "worker", "--store", dsn, "--lease-ttl", "1s")
	w2.WaitLine(t, workerLine, 20*time.Second)
	waitFor(t, 30*time.Second, "the fork's step two to write", func() bool {
		return slices.Contains(live(t, base, "p1-fixed"), "two-3")
	})
	w2.Kill(t)
	w3 := apptest.StartEnv(t, bin, v2, "worker", "--store", dsn, "--lease-ttl", "1s")
	w3.WaitLine(t, workerLine, 20*time.Second)
	done := apptest.WaitRun(t, base, "p1-fixed", "completed", 30*time.Second)
	if !strings.Contains(string(done.Output), itoa(w3.Pid())) {
		t.Fatalf("the fork's output %s: want step two by the third worker (pid %d)", done.Output, w3.Pid())
	}
	want = []string{"head", "one-a", "one-b", "mid"}
	for i := range 10 {
		want = append(want, "two-"+itoa(i))
	}
	want = append(want, "tail", "|close")
	if got := committedOut(t, base, "p1-fixed"); !slices.Equal(got, want) {
		t.Fatalf("the fork's committed view\n got %q\nwant %q", got, want)
	}
	var evs struct {
		Events []struct {
			Type string
			Name string
		}
	}
	apptest.Do(t, "GET", base+"/v1/runs/p1-fixed/events", "", &evs)
	forked, oneAfter := false, false
	for _, e := range evs.Events {
		forked = forked || e.Type == "run_forked"
		oneAfter = oneAfter || forked && e.Type == "step_started" && e.Name == "one"
	}
	if !forked || oneAfter {
		t.Fatalf("the fork's log: run_forked %v, step one ran again %v", forked, oneAfter)
	}
	// The source is as it failed.
	if got := committedOut(t, base, "p1"); !slices.Equal(got, []string{"head", "one-a", "one-b", "mid", "|close"}) {
		t.Fatalf("the source after the fork: %q", got)
	}
}

// committedOut is a run stream's committed view, "|close" for its close.
func committedOut(t *testing.T, base, run string) []string { return records(t, base, run, "committed") }

// live is the data of a run stream's live view.
func live(t *testing.T, base, run string) []string { return records(t, base, run, "live") }

func records(t *testing.T, base, run, view string) []string {
	t.Helper()
	resp, err := http.Get(base + "/v1/stream/runs/" + run + "/out?offset=-1&format=ndjson&view=" + view)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var r struct {
			Kind string
			Data json.RawMessage
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", sc.Text(), err)
		}
		switch r.Kind {
		case "data":
			var s string
			if err := json.Unmarshal(r.Data, &s); err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
			if resp.Header.Get("Weir-Data-Encoding") != "text" {
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					t.Fatalf("%s: %v", sc.Text(), err)
				}
				s = string(b)
			}
			out = append(out, s)
		case "close", "reopen":
			out = append(out, "|"+r.Kind)
		}
	}
	return out
}
