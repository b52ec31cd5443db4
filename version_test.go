package weir_test

import (
	"errors"
	"testing"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
)

// A start may name the version its run is for (StartOptions.Version): an
// engine of another version neither runs it at once nor claims it, and
// an engine of that version does. A version that is not printable text is
// refused before any store.
func TestStartOptionsVersion(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg1 := fastConfig()
		cfg1.Version = "v1"
		e1 := newEngine(t, s, cfg1)
		job1 := weir.Register(e1, "job", func(ctx weir.Context, _ int) (string, error) { return "v1", nil })
		must(t, e1.Work(testCtx(t)))

		h, err := job1.Start(testCtx(t), 0, &weir.StartOptions{Version: "v2"})
		must(t, err)
		// A run of e1's own version, started after it, ends: e1 claimed and
		// ran what it could in between.
		mine, err := job1.Start(testCtx(t), 0, nil)
		must(t, err)
		if out, err := mine.Result(testCtx(t)); err != nil || out != "v1" {
			t.Fatalf("v1's run: %q, %v", out, err)
		}
		r, err := e1.GetRun(testCtx(t), h.ID)
		must(t, err)
		if r.Status != store.RunPending || r.Version != "v2" {
			t.Fatalf("the v2 run on a v1 engine is %s of version %q, want pending of v2", r.Status, r.Version)
		}

		// Moved to v1 through the engine, a v1 run is the v1 engine's.
		moved, err := job1.Start(testCtx(t), 0, &weir.StartOptions{Version: "v3"})
		must(t, err)
		ids, err := e1.MigrateRuns(testCtx(t), "v3", "v1", moved.ID)
		must(t, err)
		if len(ids) != 1 || ids[0] != moved.ID {
			t.Fatalf("migrated %v, want [%s]", ids, moved.ID)
		}
		if out, err := moved.Result(testCtx(t)); err != nil || out != "v1" {
			t.Fatalf("the migrated run: %q, %v", out, err)
		}

		cfg2 := fastConfig()
		cfg2.Version = "v2"
		e2 := newEngine(t, s, cfg2)
		job2 := weir.Register(e2, "job", func(ctx weir.Context, _ int) (string, error) { return "v2", nil })
		must(t, e2.Work(testCtx(t)))
		if out, err := job2.Handle(h.ID).Result(testCtx(t)); err != nil || out != "v2" {
			t.Fatalf("the v2 run: %q, %v", out, err)
		}

		if _, err := job1.Start(testCtx(t), 0, &weir.StartOptions{Version: "v\n3"}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("a version with a newline: %v, want ErrInvalid", err)
		}
	})
}
