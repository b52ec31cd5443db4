package server

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/schedule"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/sqlitestore"
)

// The schedules API: a schedule set over HTTP starts its ticks' runs on
// the server's engine, shows what it did, is paused, changed and deleted;
// bad input is a 4xx and changes nothing.
func TestSchedulesAPI(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		js := []string{"Content-Type", "application/json"}
		weir.Register(d.e, "ping", func(ctx weir.Context, in map[string]int) (int, error) {
			return in["n"], nil
		})
		if err := d.e.Work(ctx); err != nil {
			t.Fatal(err)
		}
		get := func(name string) api.Schedule {
			var sc api.Schedule
			if err := json.Unmarshal(d.runsCall("GET", "/v1/schedules/"+name).must(t, http.StatusOK).body, &sc); err != nil {
				t.Fatal(err)
			}
			return sc
		}
		var sc api.Schedule
		if err := json.Unmarshal(d.send("PUT", "/v1/schedules/ping", `{"workflow":"ping","input":{"n":3},"spec":"@every 100ms","overlap":"allow","backfill":"2s"}`, js...).must(t, http.StatusOK).body, &sc); err != nil {
			t.Fatal(err)
		}
		if sc.Name != "ping" || sc.Overlap != "allow" || sc.Backfill != "2s" || sc.NextDue == nil || string(sc.Input) != `{"n":3}` {
			t.Fatalf("PUT: %+v", sc)
		}
		eventually(t, "two ticks started", func() bool { return get("ping").Started >= 2 })
		sc = get("ping")
		_, tick, ok := schedule.ParseRunID(sc.LastRun)
		if !ok || sc.LastTick == nil || !tick.Equal(*sc.LastTick) {
			t.Fatalf("last run %q, last tick %v", sc.LastRun, sc.LastTick)
		}
		if _, err := d.e.Wait(ctx, sc.LastRun); err != nil {
			t.Fatal(err)
		}
		var run api.Run
		if err := json.Unmarshal(d.runsCall("GET", "/v1/runs/"+sc.LastRun).must(t, http.StatusOK).body, &run); err != nil {
			t.Fatal(err)
		}
		if run.Workflow != "ping" || string(run.Output) != "3" {
			t.Fatalf("a tick's run: %+v", run)
		}
		// Paused by name: no tick starts, and the rest is kept; resumed
		// by name, and paused again with the whole configuration.
		d.send("POST", "/v1/schedules/ping/pause", "").must(t, http.StatusOK)
		if p := get("ping"); !p.Paused || p.NextDue != nil || p.Overlap != "allow" || string(p.Input) != `{"n":3}` {
			t.Fatalf("paused by name: %+v", p)
		}
		d.send("POST", "/v1/schedules/ping/resume", "").must(t, http.StatusOK)
		if p := get("ping"); p.Paused || p.NextDue == nil || p.Overlap != "allow" {
			t.Fatalf("resumed by name: %+v", p)
		}
		d.send("POST", "/v1/schedules/nope/pause", "").must(t, http.StatusNotFound)
		d.send("PUT", "/v1/schedules/ping", `{"workflow":"ping","spec":"@every 100ms","paused":true}`, js...).must(t, http.StatusOK)
		paused := get("ping")
		if !paused.Paused || paused.NextDue != nil {
			t.Fatalf("paused: %+v", paused)
		}
		var list api.ScheduleList
		if err := json.Unmarshal(d.runsCall("GET", "/v1/schedules").must(t, http.StatusOK).body, &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Schedules) != 1 || list.Schedules[0].Name != "ping" || list.More {
			t.Fatalf("list: %+v", list)
		}
		// The list comes a page at a time.
		for _, n := range []string{"a", "b"} {
			d.send("PUT", "/v1/schedules/"+n, `{"workflow":"ping","spec":"@hourly","paused":true}`, js...).must(t, http.StatusOK)
		}
		var names []string
		for q := "?limit=2"; ; {
			list = api.ScheduleList{}
			if err := json.Unmarshal(d.runsCall("GET", "/v1/schedules"+q).must(t, http.StatusOK).body, &list); err != nil {
				t.Fatal(err)
			}
			for _, sc := range list.Schedules {
				names = append(names, sc.Name)
			}
			if !list.More {
				break
			}
			q = "?limit=2&after=" + list.NextAfter
		}
		if strings.Join(names, " ") != "a b ping" {
			t.Fatalf("paged by 2: %v", names)
		}
		for _, q := range []string{"?limit=0", "?limit=1001", "?limit=x", "?after=a%20b", "?after=sched:x", "?page=2"} {
			d.runsCall("GET", "/v1/schedules"+q).must(t, http.StatusBadRequest)
		}
		d.runsCall("DELETE", "/v1/schedules/a").must(t, http.StatusNoContent)
		d.runsCall("DELETE", "/v1/schedules/b").must(t, http.StatusNoContent)
		for _, bad := range []struct {
			path, body string
			code       int
		}{
			{"/v1/schedules/x", `{"workflow":"ping","spec":"61 * * * *"}`, http.StatusBadRequest},
			{"/v1/schedules/x", `{"workflow":"ping","spec":"@hourly","tz":"Atlantis/City"}`, http.StatusBadRequest},
			{"/v1/schedules/x", `{"workflow":"ping","spec":"@hourly","overlap":"sometimes"}`, http.StatusBadRequest},
			{"/v1/schedules/x", `{"workflow":"ping","spec":"@hourly","backfill":"soon"}`, http.StatusBadRequest},
			{"/v1/schedules/x", `{"workflow":"ping","spec":"@hourly","backfill":"-1h"}`, http.StatusBadRequest},
			{"/v1/schedules/x", `{"workflow":"","spec":"@hourly"}`, http.StatusBadRequest},
			{"/v1/schedules/x", `{"workflow":"ping","spec":"@hourly","every":"1m"}`, http.StatusBadRequest},
			{"/v1/schedules/x", `{"workflow":"ping","spec":"@hourly","input":{`, http.StatusBadRequest},
			{"/v1/schedules/x", `{"name":"y","workflow":"ping","spec":"@hourly"}`, http.StatusBadRequest},
			{"/v1/schedules/a%20b", `{"workflow":"ping","spec":"@hourly"}`, http.StatusBadRequest},
			{"/v1/schedules/" + strings.Repeat("s", 200), `{"workflow":"ping","spec":"@hourly"}`, http.StatusBadRequest},
		} {
			d.send("PUT", bad.path, bad.body, js...).must(t, bad.code)
		}
		d.send("PUT", "/v1/schedules/x", `{"workflow":"ping","spec":"@hourly"}`).must(t, http.StatusUnsupportedMediaType)
		d.runsCall("GET", "/v1/schedules/x").must(t, http.StatusNotFound)
		d.runsCall("DELETE", "/v1/schedules/ping").must(t, http.StatusNoContent)
		d.runsCall("DELETE", "/v1/schedules/ping").must(t, http.StatusNotFound)
		d.runsCall("GET", "/v1/schedules/ping").must(t, http.StatusNotFound)
	})
}

// A run of a version no worker runs shows in /metrics once it has waited
// past unclaimedAfter (the store's clock set back for its creation).
func TestUnclaimedRunsByVersion(t *testing.T) {
	var back atomic.Bool
	back.Store(true)
	clock := func() time.Time {
		if back.Load() {
			return time.Now().Add(-time.Minute)
		}
		return time.Now()
	}
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "weir.db"), &sqlitestore.Config{Synchronous: "OFF", Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	d := newDSServerOn(t, nil, st)
	for _, v := range []string{"v9", "v9", ""} {
		if _, _, err := st.CreateRun(context.Background(), &store.CreateRunParams{ID: "r-" + v + "-" + time.Now().Format("150405.000000000"), Workflow: "nobody", Version: v}); err != nil {
			t.Fatal(err)
		}
	}
	back.Store(false)
	if _, _, err := st.CreateRun(context.Background(), &store.CreateRunParams{ID: "fresh", Workflow: "nobody", Version: "v9"}); err != nil {
		t.Fatal(err)
	}
	m := string(d.runsCall("GET", "/metrics").must(t, http.StatusOK).body)
	for _, want := range []string{`weir_runs_unclaimed{version="v9"} 2`, `weir_runs_unclaimed{version=""} 1`} {
		if !strings.Contains(m, want) {
			t.Fatalf("/metrics has no %s", want)
		}
	}
}
