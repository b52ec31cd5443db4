package server

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/runwait"
)

// POST /v1/runs with a queue: the run waits in it, /waiting gives its
// place, a dedupe key folds a second start into the first (200, the
// first's id), and bad queue options are 4xx with nothing started, on both
// stores.
func TestStartInAQueue(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		js := []string{"Content-Type", "application/json"}
		d.send("PUT", "/v1/limiters/q", `{"concurrency":1,"per_key":1}`, js...).must(t, http.StatusOK)
		release := make(chan struct{})
		weir.Register(d.e, "hold", func(ctx weir.Context, _ int) (int, error) {
			return weir.Step(ctx, "hold", func(sc weir.StepContext) (int, error) {
				select {
				case <-release:
				case <-sc.Done():
				}
				return 1, nil
			})
		})
		if err := d.e.Work(ctx); err != nil {
			t.Fatal(err)
		}
		start := func(body string, code int) api.Run {
			var r api.Run
			if err := json.Unmarshal(d.send("POST", "/v1/runs", body, js...).must(t, code).body, &r); err != nil {
				t.Fatal(err)
			}
			return r
		}
		first := start(`{"workflow":"hold","id":"q1","queue":"q","queue_key":"acme","priority":3}`, http.StatusCreated)
		if first.Queue != "q" || first.QueueKey != "acme" || first.Priority != 3 {
			t.Fatalf("started %+v", first)
		}
		eventually(t, "q1 admitted", func() bool {
			var r api.Run
			_ = json.Unmarshal(d.runsCall("GET", "/v1/runs/q1").must(t, http.StatusOK).body, &r)
			return !r.Queued && r.Status == "running"
		})
		second := start(`{"workflow":"hold","id":"q2","queue":"q","dedupe":"order-1"}`, http.StatusCreated)
		if !second.Queued {
			t.Fatalf("q2 with the queue full: %+v", second)
		}
		var w api.Waiting
		if err := json.Unmarshal(d.runsCall("GET", "/v1/runs/q2/waiting").must(t, http.StatusOK).body, &w); err != nil {
			t.Fatal(err)
		}
		if len(w.Waits) != 1 || w.Waits[0].Kind != runwait.Queue || w.Waits[0].Limiter != "q" || w.Waits[0].Ahead == nil || *w.Waits[0].Ahead != 0 ||
			!strings.Contains(w.Summary, `queue "q": 0 ahead`) {
			t.Fatalf("q2 waits on %+v", w)
		}
		folded := start(`{"workflow":"hold","id":"q3","queue":"q","dedupe":"order-1","input":7}`, http.StatusOK)
		if folded.ID != "q2" {
			t.Fatalf("a deduped start answered run %s, want q2", folded.ID)
		}
		var l api.Limiter
		if err := json.Unmarshal(d.runsCall("GET", "/v1/limiters/q").must(t, http.StatusOK).body, &l); err != nil {
			t.Fatal(err)
		}
		if l.PerKey != 1 || l.State == nil || l.State.Held != 1 || l.State.Queued != 1 {
			t.Fatalf("the queue: %+v %+v", l, l.State)
		}
		// The runs of a queue, and those still waiting in it.
		list := func(query string) []string {
			var page api.RunList
			if err := json.Unmarshal(d.runsCall("GET", "/v1/runs?"+query).must(t, http.StatusOK).body, &page); err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range page.Runs {
				ids = append(ids, r.ID)
			}
			return ids
		}
		if got := list("queue=q"); !slices.Equal(got, []string{"q2", "q1"}) {
			t.Fatalf("?queue=q: %v", got)
		}
		if got := list("queue=q&queued=true"); !slices.Equal(got, []string{"q2"}) {
			t.Fatalf("?queue=q&queued=true: %v", got)
		}
		// The queue kept one start waiting (q2; q1 was admitted at once).
		if m := string(d.runsCall("GET", "/metrics").must(t, http.StatusOK).body); !strings.Contains(m, `weir_limiter_refusals_total{limiter="q"} 1`) {
			t.Fatalf("/metrics: no refusal of q2 counted")
		}
		if got := list("queue=nope"); len(got) != 0 {
			t.Fatalf("?queue=nope: %v", got)
		}
		d.runsCall("GET", "/v1/runs?queued=yes").must(t, http.StatusBadRequest)
		for _, bad := range []struct {
			body string
			code int
		}{
			{`{"workflow":"hold","id":"x","queue":"nope"}`, http.StatusNotFound},
			{`{"workflow":"hold","id":"x","queue":"q","debounce_ms":-1}`, http.StatusBadRequest},
			{`{"workflow":"hold","id":"x","queue":"q","debounce_ms":5}`, http.StatusBadRequest},
			{`{"workflow":"hold","id":"x","queue":"q","dedupe":"d","debounce_ms":50,"debounce_max_ms":10}`, http.StatusBadRequest},
			{`{"workflow":"hold","id":"x","queue":"q","dedupe":"d","debounce_ms":50,"debounce_max_ms":-1}`, http.StatusBadRequest},
			{`{"workflow":"hold","id":"x","queue":"q","dedupe":"d","debounce_max_ms":100}`, http.StatusBadRequest},
			{`{"workflow":"hold","id":"x","queue_key":"acme"}`, http.StatusBadRequest},
			{`{"workflow":"hold","id":"x","queue":"q","queue_key":"` + strings.Repeat("k", 300) + `"}`, http.StatusBadRequest},
			{`{"workflow":"hold","id":"x","queue":"q","priority":"high"}`, http.StatusBadRequest},
			{`{"workflow":"hold","id":"x","queue":"` + strings.Repeat("q", 300) + `"}`, http.StatusBadRequest},
		} {
			d.send("POST", "/v1/runs", bad.body, js...).must(t, bad.code)
		}
		d.runsCall("GET", "/v1/runs/x").must(t, http.StatusNotFound)
		close(release)
		for _, id := range []string{"q1", "q2"} {
			if _, err := d.e.Wait(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	})
}
