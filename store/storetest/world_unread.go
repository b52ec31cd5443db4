package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/world"
)

// LeavesWorldRunDataUnread checks that what asks a World run's state, not
// what it holds, reads none of its input: the list of its events (a
// token-less GET a UI polls every 500 ms), the open of one of its streams
// (red team, round nineteen audit). A run may carry a 15 MiB input.
//
// It measures the bytes the process allocates, as LeavesRunDataUnread
// does: call it from a top-level test that is not parallel, on a store of
// its own.
func LeavesWorldRunDataUnread(t *testing.T, st store.Store) {
	s := store.Capable(st)
	const big = 8 << 20
	input := `"` + strings.Repeat("i", big-2) + `"`
	res, err := wevErr(t, s, "wrun_big", world.RunCreated, "", jmap{"deploymentId": "dpl_1", "workflowName": "wf//big", "input": json.RawMessage(input)})
	must(t, err)
	if len(res.Run.Input) != big {
		t.Fatalf("run_created: an input of %d bytes, want %d", len(res.Run.Input), big)
	}
	wev(t, s, "wrun_big", world.RunStarted, "", nil)
	allocated := func(what string, f func()) {
		t.Helper()
		if n := allocatedBy(tries, f); n >= big {
			t.Errorf("%d × %s allocated %d bytes: the run's input (%d bytes) was read", tries, what, n, big)
		}
	}

	// A page past the run_created event, whose data is the input.
	allocated("a page of the run's events", func() {
		page, err := s.WorldEvents(ctx(t), &store.WorldListParams{RunID: "wrun_big", Cursor: "1"})
		must(t, err)
		if len(page.Data) != 1 || page.Data[0].EventType != world.RunStarted {
			t.Fatalf("events past the first: %+v, want run_started", page.Data)
		}
	})
	_, err = s.WorldEvents(ctx(t), &store.WorldListParams{RunID: "wrun_none"})
	wantErr(t, err, world.ErrRunNotFound)

	allocated("an open of the run's stream", func() {
		if _, err := s.WorldOpenStream(ctx(t), "wrun_big", "strm_1"); err != nil {
			t.Fatal(err)
		}
	})
	n := 0
	allocated("an open of a new stream of the run", func() {
		n++
		if _, err := s.WorldOpenStream(ctx(t), "wrun_big", "strm_new"+strings.Repeat("x", n)); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := s.WorldOpenStream(ctx(t), "wrun_none", "strm_2"); !errors.Is(err, world.ErrRunNotFound) {
		t.Fatalf("open of a stream of no run: %v, want ErrRunNotFound", err)
	}

	// Events that decide on the run's state and reply without the run:
	// a step's, a hook's, a wait's.
	i := 0
	allocated("a step's, a hook's and a wait's events", func() {
		i++
		step, hook, wait := fmt.Sprintf("step_%d", i), fmt.Sprintf("hook_%d", i), fmt.Sprintf("wait_%d", i)
		for _, e := range []struct {
			typ        world.EventType
			corr       string
			data       any
			step, hook bool
		}{
			{world.StepCreated, step, jmap{"stepName": "step//s", "input": []any{1}}, true, false},
			{world.StepStarted, step, nil, true, false},
			{world.StepCompleted, step, jmap{"result": 2}, true, false},
			{world.HookCreated, hook, jmap{"token": "tok-" + hook}, false, true},
			{world.HookDisposed, hook, nil, false, false},
			{world.WaitCreated, wait, jmap{"resumeAt": "2000-01-01T00:00:00Z"}, false, false},
			{world.WaitCompleted, wait, nil, false, false},
		} {
			res := wev(t, s, "wrun_big", e.typ, e.corr, e.data)
			if res.Run != nil || e.step && res.Step == nil || e.hook && res.Hook == nil {
				t.Fatalf("%s: %+v", e.typ, res)
			}
		}
	})
	// A reply that carries the run carries its data, read after the
	// event.
	res = wev(t, s, "wrun_big", world.RunStarted, "", nil)
	if res.Run == nil || res.Run.Status != world.Running || string(res.Run.Input) != input || res.Run.Output != nil || res.Run.Head {
		t.Fatalf("run_started: the reply's run lacks its input: %+v", res.Run)
	}
	wev(t, s, "wrun_big", world.StepCreated, "step_fly", jmap{"stepName": "step//s", "input": []any{1}})
	wev(t, s, "wrun_big", world.StepStarted, "step_fly", nil)
	output := `"` + strings.Repeat("o", big-2) + `"`
	res = wev(t, s, "wrun_big", world.RunCompleted, "", jmap{"output": json.RawMessage(output)})
	if res.Run == nil || res.Run.Status != world.Completed || string(res.Run.Input) != input || string(res.Run.Output) != output || res.Run.Head {
		t.Fatalf("run_completed: the reply's run lacks its data: %d bytes of input, %d of output", len(res.Run.Input), len(res.Run.Output))
	}
	// A refusal on an ended run reads none of it either.
	allocated("a step_created refused on an ended run", func() {
		_, err := wevErr(t, s, "wrun_big", world.StepCreated, "step_late", jmap{"stepName": "step//s", "input": []any{1}})
		wantErr(t, err, world.ErrConflict)
	})
	// An event saving the ended run (a step in flight ends) keeps the
	// output it did not read.
	wev(t, s, "wrun_big", world.StepCompleted, "step_fly", jmap{"result": 1})
	r, err := s.WorldRun(ctx(t), "wrun_big")
	must(t, err)
	if r.Status != world.Completed || string(r.Input) != input || string(r.Output) != output {
		t.Fatalf("after the events: %s, %d bytes of input, %d of output", r.Status, len(r.Input), len(r.Output))
	}

	// The run's head (a GET of the run with resolveData=none) is the run
	// without its input and output, and reads neither (red team, round
	// twenty: they were read, then stripped).
	allocated("a read of the run's head", func() {
		head, err := s.WorldRunHead(ctx(t), "wrun_big")
		must(t, err)
		if !head.Head || head.Input != nil || head.Output != nil {
			t.Fatalf("head: Head %v, %d bytes of input, %d of output", head.Head, len(head.Input), len(head.Output))
		}
		want := *r
		want.Input, want.Output, want.Head = nil, nil, true
		if !reflect.DeepEqual(*head, want) {
			t.Fatalf("head:\n%+v\nwant the run without its data:\n%+v", *head, want)
		}
	})
	_, err = s.WorldRunHead(ctx(t), "wrun_none")
	wantErr(t, err, world.ErrRunNotFound)

	// Lists without data (resolveData=none) read none: a run's input and
	// output, a step's.
	worldRun(t, s, "wrun_steps")
	wev(t, s, "wrun_steps", world.StepCreated, "step_big", jmap{"stepName": "step//s", "input": json.RawMessage(input)})
	allocated("a list of steps without data", func() {
		page, err := s.WorldSteps(ctx(t), &store.WorldListParams{RunID: "wrun_steps", NoData: true})
		must(t, err)
		if len(page.Data) != 1 || page.Data[0].StepID != "step_big" || page.Data[0].Input != nil {
			t.Fatalf("steps without data: %d steps", len(page.Data))
		}
	})
	allocated("a list of runs without data", func() {
		page, err := s.WorldRuns(ctx(t), &store.WorldListParams{WorkflowName: "wf//big", NoData: true})
		must(t, err)
		if len(page.Data) != 1 || page.Data[0].RunID != "wrun_big" || page.Data[0].Input != nil || page.Data[0].Output != nil {
			t.Fatalf("runs without data: %d runs", len(page.Data))
		}
	})
	page, err := s.WorldRuns(ctx(t), &store.WorldListParams{WorkflowName: "wf//big"})
	must(t, err)
	if len(page.Data) != 1 || string(page.Data[0].Input) != input {
		t.Fatalf("runs with their data: %d runs", len(page.Data))
	}
}
