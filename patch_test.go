package weir_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
)

// A deploy that changes a workflow with runs in flight: Patched takes the
// new path in runs that reach it under the new code, and the old path in
// a run that passed it before; every replay takes the same path (a run
// with the marker, replayed by other code again, and under
// DeprecatePatch).
func TestPatchedAcrossDeploys(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.ParkAfter = 20 * time.Millisecond
		// version is one deploy's workflow "order": step a, then the
		// patched part, then a hook the run waits on, then step tail.
		version := func(patched func(ctx weir.Context) (string, error)) (*weir.Engine, *weir.Workflow[string, string]) {
			e := newEngine(t, s, cfg)
			wf := weir.Register(e, "order", func(ctx weir.Context, id string) (string, error) {
				if _, err := weir.Step(ctx, "a", func(weir.StepContext) (int, error) { return 1, nil }); err != nil {
					return "", err
				}
				path, err := patched(ctx)
				if err != nil {
					return "", err
				}
				h, err := weir.NewHook[int](ctx, "go-"+id)
				if err != nil {
					return "", err
				}
				if _, err := h.Receive(ctx); err != nil {
					return "", err
				}
				_, err = weir.Step(ctx, "tail", func(weir.StepContext) (int, error) { return 2, nil })
				return path, err
			})
			must(t, e.Work(testCtx(t)))
			return e, wf
		}
		step := func(ctx weir.Context, name string) (string, error) {
			return weir.Step(ctx, name, func(weir.StepContext) (string, error) { return name, nil })
		}
		old := func(ctx weir.Context) (string, error) { return step(ctx, "old") }
		patched := func(ctx weir.Context) (string, error) {
			if weir.Patched(ctx, "new-path") {
				return step(ctx, "new")
			}
			return step(ctx, "old")
		}
		deprecated := func(ctx weir.Context) (string, error) {
			weir.DeprecatePatch(ctx, "new-path")
			return step(ctx, "new")
		}
		closeEngine := func(e *weir.Engine) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			must(t, e.Close(ctx))
		}

		// Deploy 1 (old code): r1 passes the patch point, then waits.
		e1, wf1 := version(old)
		r1, err := wf1.Start(testCtx(t), "1", nil)
		must(t, err)
		waitParked(t, s, r1.ID)
		closeEngine(e1)

		// Deploy 2 (the patch): r2 starts under it, and waits.
		e2, wf2 := version(patched)
		r2, err := wf2.Start(testCtx(t), "2", nil)
		must(t, err)
		waitParked(t, s, r2.ID)
		// r1 replays under the patch: the old path, as it went.
		deliverWhenReady(t, e2, "go-1", `1`, nil)
		if out, err := wf2.Handle(r1.ID).Result(testCtx(t)); err != nil || out != "old" {
			t.Fatalf("r1 under the patch: %q, %v", out, err)
		}
		closeEngine(e2)

		// Deploy 3 (the patch, other engine: a replay of r2 from its log),
		// then deploy 4 (DeprecatePatch): r2 still takes the new path, and
		// a new run r3 too, with no marker.
		e3, wf3 := version(patched)
		r3a, err := wf3.Start(testCtx(t), "3a", nil)
		must(t, err)
		waitParked(t, s, r3a.ID)
		closeEngine(e3)
		e4, wf4 := version(deprecated)
		r4, err := wf4.Start(testCtx(t), "4", nil)
		must(t, err)
		waitParked(t, s, r4.ID)
		for _, id := range []string{"2", "3a", "4"} {
			deliverWhenReady(t, e4, "go-"+id, `1`, nil)
		}
		for _, h := range []*weir.Handle[string]{wf4.Handle(r2.ID), wf4.Handle(r3a.ID), wf4.Handle(r4.ID)} {
			if out, err := h.Result(testCtx(t)); err != nil || out != "new" {
				t.Fatalf("run %s: %q, %v", h.ID, out, err)
			}
		}
		// The markers: in the runs that took the patch, never in the others.
		marked := func(id string) bool {
			evs, err := s.ListEvents(testCtx(t), id, 0)
			must(t, err)
			return slices.ContainsFunc(evs, func(e store.Event) bool {
				return e.Type == store.EventPatched && e.Name == "new-path"
			})
		}
		for id, want := range map[string]bool{r1.ID: false, r2.ID: true, r3a.ID: true, r4.ID: false} {
			if got := marked(id); got != want {
				t.Errorf("run %s: marker %v, want %v", id, got, want)
			}
		}
	})
}
