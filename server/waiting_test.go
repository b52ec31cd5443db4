package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/api"
	limits "github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/runwait"
	"github.com/weirhq/weir/store"
)

// GET /v1/runs/{id}/waiting says what a run waits on as it goes, on both
// stores: its running step, then its hook with the timeout, then its child;
// nothing once it has ended; 404 for no such run.
func TestWaitingOverHTTP(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		release := make(chan struct{})
		child := weir.Register(d.e, "child", func(ctx weir.Context, _ int) (int, error) {
			h, err := weir.NewHook[int](ctx, "child-go")
			if err != nil {
				return 0, err
			}
			return h.Receive(ctx)
		})
		wf := weir.Register(d.e, "waits", func(ctx weir.Context, _ int) (int, error) {
			if _, err := weir.Step(ctx, "slow", func(sc weir.StepContext) (int, error) {
				select {
				case <-release:
				case <-sc.Done():
				}
				return 1, nil
			}); err != nil {
				return 0, err
			}
			h, err := weir.NewHook[int](ctx, "wait-approve")
			if err != nil {
				return 0, err
			}
			if _, _, err := h.ReceiveWithin(ctx, time.Hour); err != nil {
				return 0, err
			}
			return weir.StartChild(ctx, child, 0, &weir.ChildOptions{ID: "wait-child"}).Get(ctx)
		})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := d.e.Work(ctx); err != nil {
			t.Fatal(err)
		}
		run, err := wf.Start(ctx, 0, &weir.StartOptions{ID: "wait-run"})
		if err != nil {
			t.Fatal(err)
		}
		waiting := func() api.Waiting {
			var w api.Waiting
			if err := json.Unmarshal(d.runsCall("GET", "/v1/runs/"+run.ID+"/waiting").must(t, http.StatusOK).body, &w); err != nil {
				t.Fatal(err)
			}
			return w
		}
		waitFor := func(what string, ok func(api.Waiting) bool) api.Waiting {
			t.Helper()
			var last api.Waiting
			eventually(t, what, func() bool {
				last = waiting()
				if !ok(last) {
					t.Logf("%s: waits on %+v", what, last.Waits)
					return false
				}
				return true
			})
			return last
		}
		w := waitFor("the step running", func(w api.Waiting) bool { return len(w.Waits) == 1 && w.Waits[0].Kind == runwait.Step })
		if w.Waits[0].Name != "slow" || w.Waits[0].Attempt != 1 || w.Summary != `step "slow", attempt 1, running` {
			t.Fatalf("step wait %+v", w)
		}
		close(release)
		w = waitFor("the hook and its timeout", func(w api.Waiting) bool {
			return len(w.Waits) == 1 && w.Waits[0].Kind == runwait.Hook && w.Waits[0].Until != nil
		})
		if h := w.Waits[0]; h.Name != "wait-approve" || h.Until == nil || h.Until.Sub(h.Since) < 59*time.Minute || h.Since.IsZero() {
			t.Fatalf("hook wait %+v", h)
		}
		d.post("/v1/hooks/wait-approve", []byte(`1`), "Content-Type", "application/json").must(t, http.StatusOK)
		w = waitFor("the child", func(w api.Waiting) bool { return len(w.Waits) == 1 && w.Waits[0].Kind == runwait.Child })
		if w.Waits[0].Name != "wait-child" {
			t.Fatalf("child wait %+v", w)
		}
		eventually(t, "the child's hook", func() bool {
			_, err := d.st.GetHook(ctx, "child-go")
			return err == nil
		})
		d.post("/v1/hooks/child-go", []byte(`7`), "Content-Type", "application/json").must(t, http.StatusOK)
		if out, err := run.Result(ctx); err != nil || out != 7 {
			t.Fatalf("result %d %v", out, err)
		}
		if w := waiting(); len(w.Waits) != 0 || w.Summary != "" {
			t.Fatalf("an ended run waits on %+v", w)
		}
		d.runsCall("GET", "/v1/runs/nope/waiting").must(t, http.StatusNotFound)
		d.runsCall("GET", "/v1/runs/"+run.ID+"/waiting?x=1").must(t, http.StatusBadRequest)
	})
}

// A step waiting for its limiter: /waiting names the limiter and the
// step's place in its line, on both stores.
func TestWaitingForALimiter(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := d.st.SetLimiter(ctx, &limits.Config{Name: "slow-llm", Concurrency: 1}); err != nil {
			t.Fatal(err)
		}
		// Someone else holds the only slot.
		if g, err := d.st.AcquireSlot(ctx, &store.AcquireSlotParams{Limiter: "slow-llm", Request: limits.Request{Holder: "other", Lease: time.Minute}}); err != nil || !g.Granted {
			t.Fatalf("%+v %v", g, err)
		}
		wf := weir.Register(d.e, "limited", func(ctx weir.Context, _ int) (int, error) {
			return weir.Step(ctx, "call", func(weir.StepContext) (int, error) { return 1, nil }, weir.WithLimiter("slow-llm", nil))
		})
		if err := d.e.Work(ctx); err != nil {
			t.Fatal(err)
		}
		var runs []string
		for _, id := range []string{"lim-a", "lim-b"} {
			r, err := wf.Start(ctx, 0, &weir.StartOptions{ID: id})
			if err != nil {
				t.Fatal(err)
			}
			runs = append(runs, r.ID)
			var w api.Waiting
			eventually(t, id+" waiting for the limiter", func() bool {
				if err := json.Unmarshal(d.runsCall("GET", "/v1/runs/"+r.ID+"/waiting").must(t, http.StatusOK).body, &w); err != nil {
					t.Fatal(err)
				}
				return len(w.Waits) == 1 && w.Waits[0].Kind == runwait.Limiter && w.Waits[0].Ahead != nil && *w.Waits[0].Ahead == len(runs)-1
			})
			if w.Waits[0].Limiter != "slow-llm" || !strings.Contains(w.Summary, `waiting for the limiter "slow-llm"`) {
				t.Fatalf("%s waits on %+v", id, w)
			}
		}
		if _, err := d.st.ReleaseSlot(ctx, &store.ReleaseSlotParams{Limiter: "slow-llm", Holder: "other"}); err != nil {
			t.Fatal(err)
		}
		for _, id := range runs {
			if _, err := d.e.Wait(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	})
}
