package apply_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/stream"
)

// evs numbers events by their order.
func evs(es ...store.Event) []store.Event {
	for i := range es {
		es[i].Seq = int64(i + 1)
	}
	return es
}

func started(op int64, name string) store.Event {
	return store.Event{Type: store.EventStepStarted, Op: op, Name: name, Attempt: 1}
}
func completed(op int64, name string) store.Event {
	return store.Event{Type: store.EventStepCompleted, Op: op, Name: name, Attempt: 1}
}
func failedFinal(op int64, name string) store.Event {
	return store.Event{Type: store.EventStepFailed, Op: op, Name: name, Attempt: 1, Final: true}
}

func TestPlanFork(t *testing.T) {
	run := &store.Run{ID: "src", Status: store.RunFailed}
	seq := evs(
		store.Event{Type: store.EventRunStarted},
		store.Event{Type: store.EventStreamMark, Op: 1, Data: []byte(`{"out":1}`)},
		started(1, "a"), completed(1, "a"),
		store.Event{Type: store.EventMessageReceived, Name: "t"},
		store.Event{Type: store.EventHookCreated, Op: 2, Name: "tok"},
		store.Event{Type: store.EventHookReceived, Op: 2, Name: "tok"},
		store.Event{Type: store.EventStreamMark, Op: 3, Data: []byte(`{"out":2}`)},
		started(3, "b"), failedFinal(3, "b"),
		store.Event{Type: store.EventRunFailed},
	)
	par := evs(started(1, "a"), started(2, "b"), completed(2, "b"), completed(1, "a"), started(3, "c"), completed(3, "c"))
	child := evs(store.Event{Type: store.EventChildStarted, Op: 1, Name: "kid"}, started(2, "a"), completed(2, "a"))
	for _, tc := range []struct {
		name   string
		events []store.Event
		p      store.ForkRunParams
		err    string // a substring of the ErrInvalid error; "" for none
		op     int64
		types  []store.EventType
		wf     int64
		hooks  int
	}{
		{name: "by name", events: seq, p: store.ForkRunParams{Step: "b"}, op: 3, wf: 2, hooks: 1,
			types: []store.EventType{store.EventRunStarted, store.EventStreamMark, store.EventStepStarted, store.EventStepCompleted,
				store.EventMessageReceived, store.EventHookCreated, store.EventHookReceived, store.EventRunForked}},
		{name: "from the first op keeps only the start", events: seq, p: store.ForkRunParams{Op: 1}, op: 1, wf: 1,
			types: []store.EventType{store.EventRunStarted, store.EventRunForked}},
		{name: "after the last op replays the end", events: seq, p: store.ForkRunParams{Op: 4}, op: 4, wf: 2, hooks: 1,
			types: []store.EventType{store.EventRunStarted, store.EventStreamMark, store.EventStepStarted, store.EventStepCompleted,
				store.EventMessageReceived, store.EventHookCreated, store.EventHookReceived, store.EventStreamMark,
				store.EventStepStarted, store.EventStepFailed, store.EventRunForked}},
		{name: "past the end", events: seq, p: store.ForkRunParams{Op: 5}, err: "past the end"},
		{name: "unknown step", events: seq, p: store.ForkRunParams{Step: "z"}, err: "no step named"},
		{name: "inside a parallel group", events: par, p: store.ForkRunParams{Op: 2}, err: "inside a parallel group"},
		{name: "a parallel group's first step", events: par, p: store.ForkRunParams{Op: 1}, op: 1, types: []store.EventType{store.EventRunForked}},
		{name: "after a parallel group", events: par, p: store.ForkRunParams{Op: 3}, op: 3,
			types: []store.EventType{store.EventStepStarted, store.EventStepStarted, store.EventStepCompleted, store.EventStepCompleted, store.EventRunForked}},
		{name: "a child that had not ended", events: child, p: store.ForkRunParams{Op: 2}, err: "had not ended"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := apply.PlanFork(run, tc.events, &tc.p)
			if tc.err != "" {
				if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want ErrInvalid with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var types []store.EventType
			for _, ev := range plan.Events {
				types = append(types, ev.Type)
				if ev.Seq != 0 {
					t.Fatalf("a kept event keeps seq %d", ev.Seq)
				}
			}
			if plan.Op != tc.op || !slices.Equal(types, tc.types) || plan.Workflow["out"] != tc.wf || len(plan.Hooks) != tc.hooks {
				t.Fatalf("plan op %d events %v wf %d hooks %v; want op %d events %v wf %d hooks %d",
					plan.Op, types, plan.Workflow["out"], plan.Hooks, tc.op, tc.types, tc.wf, tc.hooks)
			}
		})
	}
	if _, err := apply.PlanFork(&store.Run{ID: "w", Kind: store.KindWorld}, seq, &store.ForkRunParams{Op: 1}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("a World run: %v", err)
	}
}

func TestPlanResume(t *testing.T) {
	failed := &store.Run{ID: "r", Status: store.RunFailed}
	for _, tc := range []struct {
		name   string
		run    *store.Run
		events []store.Event
		ops    []int64
		err    bool
	}{
		{name: "the failed step", run: failed, events: evs(started(1, "a"), completed(1, "a"), started(2, "b"), failedFinal(2, "b"),
			store.Event{Type: store.EventMessagesTaken}, store.Event{Type: store.EventRunFailed}), ops: []int64{2}},
		{name: "a caught failure is kept", run: failed, events: evs(started(1, "a"), failedFinal(1, "a"), started(2, "b"), completed(2, "b"),
			store.Event{Type: store.EventRunFailed}), ops: nil},
		{name: "a parallel group's failures", run: failed, events: evs(started(1, "a"), started(2, "b"), failedFinal(2, "b"), failedFinal(1, "a"),
			store.Event{Type: store.EventRunFailed}), ops: []int64{1, 2}},
		{name: "cancelled", run: &store.Run{ID: "r", Status: store.RunCancelled}, events: evs(started(1, "a"), failedFinal(1, "a"),
			store.Event{Type: store.EventRunCancelled}), ops: []int64{1}},
		{name: "running", run: &store.Run{ID: "r", Status: store.RunRunning}, err: true},
		{name: "completed", run: &store.Run{ID: "r", Status: store.RunCompleted}, err: true},
		{name: "world", run: &store.Run{ID: "r", Status: store.RunFailed, Kind: store.KindWorld}, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops, err := apply.PlanResume(tc.run, tc.events)
			if tc.err {
				if !errors.Is(err, store.ErrNotResumable) {
					t.Fatalf("err %v, want ErrNotResumable", err)
				}
				return
			}
			if err != nil || !slices.Equal(ops, tc.ops) {
				t.Fatalf("ops %v %v, want %v", ops, err, tc.ops)
			}
		})
	}
}

// The fork's copy of a stream: committed chunks of kept steps, the
// workflow's below its count, other writers' until the first drop.
func TestCut(t *testing.T) {
	d := func(w string, seq int64, s string) stream.Record {
		return stream.Record{Kind: stream.KindData, Writer: w, Seq: seq, Attempt: 1, Data: []byte(s)}
	}
	recs := []stream.Record{
		d("workflow", 0, "w0"), d("step/1", 0, "a"), d("", 0, "anon1"), d("workflow", 1, "w1"),
		{Kind: stream.KindCommit, Writer: "step/1"}, d("step/2", 0, "b"), d("", 0, "anon2"), d("workflow", 2, "w2"),
		{Kind: stream.KindClose},
	}
	c := &apply.Cut{Op: 2, Workflow: 2}
	var got []string
	for i, r := range c.Keep(recs) {
		if r.Offset != int64(i) || r.Attempt != 0 {
			t.Fatalf("kept record %d: offset %d attempt %d", i, r.Offset, r.Attempt)
		}
		got = append(got, string(r.Data))
	}
	if want := []string{"w0", "a", "anon1", "w1"}; !slices.Equal(got, want) || c.Next() != 4 {
		t.Fatalf("kept %q next %d, want %q", got, c.Next(), want)
	}
}
