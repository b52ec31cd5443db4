package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/examples/app/apptest"
	"github.com/weirhq/weir/schedule"
)

// A schedule shared by three worker processes on one PostgreSQL database
// fires each tick once: through a SIGKILL of one worker, then of every
// worker (the ticks while none ran start, each once, when two new workers
// come up: the backfill), every tick from the first to the last started
// one run, none before its tick on the clock, and every run completed.
func TestScheduleAcrossProcesses(t *testing.T) {
	dsn := schemaDSN(t)
	bin := apptest.Build(t, "github.com/weirhq/weir/examples/workers")
	workerLine := regexp.MustCompile(`worker executing runs of`)
	api := apptest.Start(t, bin, "server", "--no-worker", "--addr", "127.0.0.1:0", "--store", dsn)
	base := api.URL(t)
	startWorker := func() *apptest.Proc {
		w := apptest.Start(t, bin, "worker", "--store", dsn, "--lease-ttl", "1s")
		w.WaitLine(t, workerLine, 20*time.Second)
		return w
	}
	w1, w2, w3 := startWorker(), startWorker(), startWorker()
	const every = 300 * time.Millisecond
	body := `{"workflow":"summarize","input":"tick","spec":"@every 300ms","overlap":"allow","backfill":"1m"}`
	if code := apptest.Do(t, "PUT", base+"/v1/schedules/beat", body, nil); code != 200 {
		t.Fatalf("PUT /v1/schedules/beat: %d", code)
	}
	started := func() int64 {
		var s struct{ Started int64 }
		apptest.Do(t, "GET", base+"/v1/schedules/beat", "", &s)
		return s.Started
	}
	waitFor(t, 30*time.Second, "5 ticks", func() bool { return started() >= 5 })
	w1.Kill(t)
	waitFor(t, 30*time.Second, "12 ticks", func() bool { return started() >= 12 })
	// Every worker down: the ticks go by with no one to start them.
	w2.Kill(t)
	w3.Kill(t)
	down := time.Now()
	before := started()
	waitFor(t, 30*time.Second, "two seconds with no worker", func() bool { return time.Since(down) > 2*time.Second })
	if n := started(); n != before {
		t.Fatalf("%d ticks started with every worker dead", n-before)
	}
	w4, w5 := startWorker(), startWorker()
	up := time.Now()
	waitFor(t, 30*time.Second, "the missed ticks and 3 more", func() bool { return started() >= before+int64(time.Since(down)/every)-1 && started() >= before+10 })
	if code := apptest.Do(t, "PUT", base+"/v1/schedules/beat", strings.Replace(body, `"backfill"`, `"paused":true,"backfill"`, 1), nil); code != 200 {
		t.Fatalf("pause: %d", code)
	}

	var page struct {
		Runs []struct {
			ID        string    `json:"id"`
			Status    string    `json:"status"`
			CreatedAt time.Time `json:"created_at"`
		} `json:"runs"`
	}
	apptest.Do(t, "GET", base+"/v1/runs?id_prefix=sched:beat:&limit=1000", "", &page)
	var ticks []time.Time
	created := map[time.Time]time.Time{}
	for _, r := range page.Runs {
		_, tick, ok := schedule.ParseRunID(r.ID)
		if !ok {
			t.Fatalf("run %q is not a tick's", r.ID)
		}
		ticks = append(ticks, tick)
		created[tick] = r.CreatedAt
	}
	slices.SortFunc(ticks, func(a, b time.Time) int { return a.Compare(b) })
	if len(ticks) < 20 {
		t.Fatalf("%d ticks' runs", len(ticks))
	}
	missedWhileDown := 0
	for i, tk := range ticks {
		if tk.UnixNano()%int64(every) != 0 {
			t.Fatalf("tick %v is not on the schedule", tk)
		}
		if i > 0 && tk.Sub(ticks[i-1]) != every {
			t.Fatalf("no run for the ticks between %v and %v", ticks[i-1], tk)
		}
		if c := created[tk]; c.Before(tk) {
			t.Fatalf("tick %v's run was created at %v, before its tick", tk, c)
		}
		if tk.After(down) && tk.Before(up) {
			missedWhileDown++
		}
	}
	if missedWhileDown < 5 {
		t.Fatalf("%d ticks fell while every worker was down: the backfill tests nothing", missedWhileDown)
	}
	for _, tk := range ticks {
		apptest.WaitRun(t, base, schedule.RunID("beat", tk), "completed", 60*time.Second)
	}
	t.Logf("%d ticks, each one run, %d of them backfilled after every worker was down for %v", len(ticks), missedWhileDown, up.Sub(down).Round(time.Millisecond))
	api.Stop(t)
	w4.Stop(t)
	w5.Stop(t)
}
