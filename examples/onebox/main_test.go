package main

import (
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/examples/app/apptest"
)

// TestOnebox runs the example as its README does: built, started as
// `onebox server` on a SQLite file, a run started over HTTP, its stream
// read over HTTP (each of the 50 tokens once, though the step failed
// midway), its hook delivered with `onebox runs hook`, its result read,
// and SIGTERM stopping it cleanly.
func TestOnebox(t *testing.T) {
	bin := apptest.Build(t, "github.com/weirhq/weir/examples/onebox")
	srv := apptest.Start(t, bin, "server", "--addr", "127.0.0.1:0", "--store", "sqlite:"+filepath.Join(t.TempDir(), "onebox.db"))
	url := srv.URL(t)

	var run apptest.Run
	if code := apptest.Do(t, "POST", url+"/v1/runs", `{"workflow":"answer","input":"why"}`, &run); code != 201 {
		t.Fatalf("POST /v1/runs: %d", code)
	}
	var hooks struct{ Hooks []struct{ Token string } }
	deadline := time.Now().Add(15 * time.Second)
	for len(hooks.Hooks) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the run reached no hook within 15 s:\n%s", srv.Output())
		}
		apptest.Do(t, "GET", url+"/v1/runs/"+run.ID+"/hooks", "", &hooks)
		time.Sleep(20 * time.Millisecond)
	}
	// The committed view, raw: the bytes of the steps that succeeded.
	resp, err := http.Get(url + "/v1/stream/runs/" + run.ID + "/tokens?offset=-1&view=committed")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got strings.Builder
	got.Write(b)
	if n := strings.Count(got.String(), " "); n != 50 || !strings.HasPrefix(got.String(), "t00 t01 ") || !strings.HasSuffix(got.String(), "t49 ") {
		t.Fatalf("the committed stream over HTTP has %d tokens, want each of 50 once: %q", n, got.String())
	}

	out, err := exec.Command(bin, "runs", "hook", hooks.Hooks[0].Token, "--data", `{"ok":true}`, "--url", url).CombinedOutput()
	if err != nil {
		t.Fatalf("onebox runs hook: %v: %s", err, out)
	}
	done := apptest.WaitRun(t, url, run.ID, "completed", 15*time.Second)
	if want := `"why: 50 tokens, found+ranked, approved=true"`; string(done.Output) != want {
		t.Fatalf("output %s, want %s", done.Output, want)
	}
	srv.Stop(t)
}
