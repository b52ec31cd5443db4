package world

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// seqIDs mints predictable ids.
type seqIDs struct{ n int }

func (s *seqIDs) New(prefix string) string { s.n++; return fmt.Sprintf("%s_%026d", prefix, s.n) }

// mem applies outcomes as a store would, for the tests: the model the
// property test checks the rules against.
type mem struct {
	runs   map[string]*Run
	steps  map[string]*Step // run/step
	hooks  map[string]*Hook // by hook id, live only
	waits  map[string]*Wait
	events map[string][]Event
	fences map[string]int64 // run/step -> fence
	state  map[string]string
	ids    seqIDs
}

func newMem() *mem {
	return &mem{runs: map[string]*Run{}, steps: map[string]*Step{}, hooks: map[string]*Hook{}, waits: map[string]*Wait{},
		events: map[string][]Event{}, fences: map[string]int64{}, state: map[string]string{}}
}

func (m *mem) load(r *Request) *State {
	st := &State{Run: m.runs[r.RunID]}
	switch {
	case strings.HasPrefix(string(r.Type), "step_"):
		st.Step = m.steps[r.RunID+"/"+r.CorrelationID]
	case strings.HasPrefix(string(r.Type), "hook_"):
		st.Hook = m.hooks[r.CorrelationID]
		var v struct{ Token string }
		_ = json.Unmarshal(r.Data, &v)
		for _, h := range m.hooks {
			if h.Token == v.Token {
				st.TokenHolder = h
			}
		}
	case strings.HasPrefix(string(r.Type), "wait_"):
		st.Wait = m.waits[WaitID(r.RunID, r.CorrelationID)]
	}
	return st
}

func (m *mem) create(t *testing.T, r *Request, now time.Time) (*Outcome, error) {
	t.Helper()
	st := m.load(r)
	before := fmt.Sprintf("%+v", *st)
	out, err := Decide(st, r, now, &m.ids)
	if after := fmt.Sprintf("%+v", *st); after != before {
		t.Fatalf("Decide changed its state:\n%s\n%s", before, after)
	}
	if err != nil {
		return nil, err
	}
	m.apply(out)
	return out, nil
}

func (m *mem) apply(out *Outcome) {
	runID := ""
	if out.Run != nil {
		runID = out.Run.RunID
		m.runs[runID] = out.Run
	}
	for i := range out.Events {
		e := out.Events[i]
		runID = e.RunID
		e.Slot = int64(len(m.events[e.RunID]) + 1)
		m.events[e.RunID] = append(m.events[e.RunID], e)
	}
	if out.Step != nil {
		m.steps[out.Step.RunID+"/"+out.Step.StepID] = out.Step
	}
	if out.Hook != nil {
		if out.DisposeHook {
			delete(m.hooks, out.Hook.HookID)
		} else {
			m.hooks[out.Hook.HookID] = out.Hook
		}
	}
	if out.Wait != nil {
		m.waits[out.Wait.WaitID] = out.Wait
	}
	if out.Ended {
		for id, h := range m.hooks {
			if h.RunID == runID {
				delete(m.hooks, id)
			}
		}
	}
	if out.Fence > 0 {
		m.fences[runID+"/"+out.StepID] = out.Fence
	}
	if out.Commit > 0 {
		m.state[runID+"/"+out.StepID] = fmt.Sprintf("committed@%d", out.Commit)
	}
	if out.Abort > 0 {
		m.state[runID+"/"+out.StepID] = fmt.Sprintf("aborted@%d", out.Abort)
	}
}

func data(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

var runData = data(map[string]any{"deploymentId": "dpl_1", "workflowName": "wf", "input": map[string]any{"__type": "Uint8Array", "data": "AQI="}})

func must(t *testing.T, m *mem, r Request, now time.Time) *Outcome {
	t.Helper()
	out, err := m.create(t, &r, now)
	if err != nil {
		t.Fatalf("%s: %v", r.Type, err)
	}
	return out
}

func wantErr(t *testing.T, m *mem, r Request, now time.Time, target error) {
	t.Helper()
	_, err := m.create(t, &r, now)
	if !errors.Is(err, target) {
		t.Fatalf("%s: err = %v, want %v", r.Type, err, target)
	}
}

func TestRunLifecycle(t *testing.T) {
	m := newMem()
	out := must(t, m, Request{Type: RunCreated, Data: runData}, t0)
	run := out.Run
	if !out.NewRun || run.Status != Pending || !strings.HasPrefix(run.RunID, "wrun_") || run.WorkflowName != "wf" ||
		string(run.Input) != `{"__type":"Uint8Array","data":"AQI="}` {
		t.Fatalf("created %+v", run)
	}
	id := run.RunID
	wantErr(t, m, Request{RunID: id, Type: RunCreated, Data: runData}, t0, ErrConflict)
	out = must(t, m, Request{RunID: id, Type: RunStarted}, t0.Add(time.Second))
	if out.Run.Status != Running || !out.Run.StartedAt.Equal(t0.Add(time.Second)) || len(out.Events) != 1 {
		t.Fatalf("started %+v", out)
	}
	// Again: idempotent, no second event.
	if out = must(t, m, Request{RunID: id, Type: RunStarted}, t0.Add(2*time.Second)); len(out.Events) != 0 || !out.Returns.Run {
		t.Fatalf("second run_started %+v", out)
	}
	out = must(t, m, Request{RunID: id, Type: RunCompleted, Data: data(map[string]any{"output": 3})}, t0.Add(3*time.Second))
	if out.Run.Status != Completed || string(out.Run.Output) != "3" || !out.Ended || out.Run.CompletedAt == nil {
		t.Fatalf("completed %+v", out.Run)
	}
	wantErr(t, m, Request{RunID: id, Type: RunStarted}, t0, ErrRunExpired)
	wantErr(t, m, Request{RunID: id, Type: RunCompleted, Data: data(map[string]any{})}, t0, ErrConflict)
	wantErr(t, m, Request{RunID: id, Type: RunCancelled}, t0, ErrConflict)
	wantErr(t, m, Request{RunID: id, Type: StepCreated, CorrelationID: "step_1", Data: data(map[string]any{"stepName": "s"})}, t0, ErrConflict)
	wantErr(t, m, Request{RunID: "wrun_none", Type: RunStarted}, t0, ErrRunNotFound)
	if n := len(m.events[id]); n != 3 {
		t.Fatalf("%d events, want 3", n)
	}
}

// A run id the client names takes no prefix weir mints other runs with:
// a World run cannot take a schedule tick's run, or an Idempotency-Key's,
// before weir makes it.
func TestRunIDsWeirMints(t *testing.T) {
	m := newMem()
	for _, id := range []string{"sched:tk:20261206T000005.000Z", "idem_0123456789abcdef0123456789abcdef", "a b", "a/b", "é"} {
		wantErr(t, m, Request{RunID: id, Type: RunCreated, Data: runData}, t0, ErrInvalid)
		wantErr(t, m, Request{RunID: id, Type: RunStarted, Data: runData}, t0, ErrInvalid)
	}
	for _, id := range []string{"wrun_01J0000000000000000000000", "my-run:1"} {
		if out := must(t, m, Request{RunID: id, Type: RunCreated, Data: runData}, t0); out.Run.RunID != id {
			t.Fatalf("created %q, want %q", out.Run.RunID, id)
		}
	}
}

func TestRunFailedAndCancelled(t *testing.T) {
	m := newMem()
	id := must(t, m, Request{RunID: "wrun_a", Type: RunCreated, Data: runData}, t0).Run.RunID
	out := must(t, m, Request{RunID: id, Type: RunFailed, Data: data(map[string]any{
		"error": map[string]any{"message": "boom", "stack": "at x"}, "errorCode": "USER_ERROR"})}, t0)
	if e := out.Run.Error; out.Run.Status != Failed || e.Message != "boom" || e.Stack != "at x" || e.Code != "USER_ERROR" {
		t.Fatalf("failed %+v %+v", out.Run, e)
	}
	m2 := newMem()
	must(t, m2, Request{RunID: "wrun_b", Type: RunCreated, Data: runData}, t0)
	must(t, m2, Request{RunID: "wrun_b", Type: RunCancelled}, t0)
	// Cancelling a cancelled run is idempotent: the run as it is, and no
	// event (an ended run takes none without bound).
	if out := must(t, m2, Request{RunID: "wrun_b", Type: RunCancelled}, t0); len(out.Events) != 0 || out.Run != nil || !out.Returns.Run {
		t.Fatalf("second cancel %+v", out)
	}
}

// A run that ended starts and retries no step; a step in flight may still
// end. (Before, ended runs took step_started and step_retrying without
// bound.)
func TestAnEndedRunStartsNoStep(t *testing.T) {
	for _, end := range []EventType{RunCompleted, RunFailed, RunCancelled} {
		m := newMem()
		id := must(t, m, Request{RunID: "wrun_e", Type: RunCreated, Data: runData}, t0).Run.RunID
		must(t, m, Request{RunID: id, Type: RunStarted}, t0)
		for _, s := range []string{"step_a", "step_b", "step_c"} {
			must(t, m, Request{RunID: id, Type: StepCreated, CorrelationID: s, Data: data(map[string]any{"stepName": "s"})}, t0)
			must(t, m, Request{RunID: id, Type: StepStarted, CorrelationID: s}, t0)
		}
		must(t, m, Request{RunID: id, Type: end, Data: data(map[string]any{"output": 1, "error": map[string]any{"message": "x"}})}, t0)
		for _, typ := range []EventType{StepStarted, StepRetrying} {
			wantErr(t, m, Request{RunID: id, Type: typ, CorrelationID: "step_a", Data: data(map[string]any{"error": map[string]any{"message": "x"}})}, t0, ErrRunExpired)
		}
		must(t, m, Request{RunID: id, Type: StepCompleted, CorrelationID: "step_b", Data: data(map[string]any{"result": 1})}, t0)
		must(t, m, Request{RunID: id, Type: StepFailed, CorrelationID: "step_c", Data: data(map[string]any{"error": map[string]any{"message": "x"}})}, t0)
	}
}

// A run_started that carries the run's input creates the run first.
func TestResilientStart(t *testing.T) {
	m := newMem()
	out := must(t, m, Request{RunID: "wrun_r", Type: RunStarted, Data: runData}, t0)
	if !out.NewRun || out.Run.Status != Running || len(out.Events) != 2 || out.Events[0].EventType != RunCreated ||
		out.Events[1].EventType != RunStarted || out.Events[1].EventData != nil {
		t.Fatalf("resilient start %+v", out)
	}
}

func TestStepLifecycleAndStreamEffects(t *testing.T) {
	m := newMem()
	must(t, m, Request{RunID: "wrun_s", Type: RunCreated, Data: runData}, t0)
	must(t, m, Request{RunID: "wrun_s", Type: RunStarted}, t0)
	step := Request{RunID: "wrun_s", Type: StepCreated, CorrelationID: "step_1", Data: data(map[string]any{"stepName": "add", "input": 1})}
	must(t, m, step, t0)
	wantErr(t, m, step, t0, ErrConflict)
	start := Request{RunID: "wrun_s", Type: StepStarted, CorrelationID: "step_1"}
	out := must(t, m, start, t0)
	if out.Step.Attempt != 1 || out.Step.Status != Running || out.Fence != 1 || out.StepID != "step_1" {
		t.Fatalf("started %+v", out)
	}
	retry := t0.Add(2 * time.Second)
	out = must(t, m, Request{RunID: "wrun_s", Type: StepRetrying, CorrelationID: "step_1",
		Data: data(map[string]any{"error": "flaky", "retryAfter": retry})}, t0)
	if out.Step.Status != Pending || !out.Step.RetryAfter.Equal(retry) || out.Step.Error.Message != "flaky" || out.Commit+out.Abort != 0 {
		t.Fatalf("retrying %+v", out.Step)
	}
	_, err := m.create(t, &start, t0.Add(500*time.Millisecond))
	var te *TooEarlyError
	if !errors.As(err, &te) || te.RetryAfter != 2*time.Second {
		t.Fatalf("early start: %v, want too early by 2s", err)
	}
	out = must(t, m, start, retry)
	if out.Step.Attempt != 2 || out.Fence != 2 || out.Step.RetryAfter != nil || !out.Step.StartedAt.Equal(t0) {
		t.Fatalf("second start %+v", out.Step)
	}
	out = must(t, m, Request{RunID: "wrun_s", Type: StepCompleted, CorrelationID: "step_1", Data: data(map[string]any{"result": 3})}, retry)
	if out.Step.Status != Completed || string(out.Step.Output) != "3" || out.Commit != 2 {
		t.Fatalf("completed %+v", out)
	}
	wantErr(t, m, Request{RunID: "wrun_s", Type: StepFailed, CorrelationID: "step_1", Data: data(map[string]any{"error": "x"})}, t0, ErrConflict)
	wantErr(t, m, Request{RunID: "wrun_s", Type: StepStarted, CorrelationID: "step_9"}, t0, ErrStepNotFound)
	// A step that fails for good aborts its attempt's output.
	must(t, m, Request{RunID: "wrun_s", Type: StepCreated, CorrelationID: "step_2", Data: data(map[string]any{"stepName": "f"})}, t0)
	must(t, m, Request{RunID: "wrun_s", Type: StepStarted, CorrelationID: "step_2"}, t0)
	out = must(t, m, Request{RunID: "wrun_s", Type: StepFailed, CorrelationID: "step_2", Data: data(map[string]any{"error": map[string]any{"message": "fatal"}, "stack": "s"})}, t0)
	if out.Abort != 1 || out.Step.Error.Message != "fatal" || out.Step.Error.Stack != "s" {
		t.Fatalf("failed %+v", out)
	}
}

// A close from a step attempt waits for that attempt's commit.
func TestCloseWaitsForTheCommit(t *testing.T) {
	step := &Step{StepID: "step_1", Status: Running, Attempt: 2}
	next, now := CloseAfterCommit(step, 2, "strm_a")
	if now || next == nil || len(next.Closes) != 1 {
		t.Fatalf("close of a running attempt: %+v %v", next, now)
	}
	if again, _ := CloseAfterCommit(next, 2, "strm_a"); again != nil {
		t.Fatal("the same close twice")
	}
	if _, now := CloseAfterCommit(&Step{Status: Completed, Attempt: 2}, 2, "s"); !now {
		t.Fatal("a close after the attempt committed must close now")
	}
	if n, now := CloseAfterCommit(&Step{Status: Pending, Attempt: 2}, 2, "s"); n != nil || now {
		t.Fatal("a close from a retrying attempt must do nothing")
	}
	if n, now := CloseAfterCommit(step, 1, "s"); n != nil || now {
		t.Fatal("a close from a zombie attempt must do nothing")
	}
	m := newMem()
	must(t, m, Request{RunID: "wrun_c", Type: RunCreated, Data: runData}, t0)
	must(t, m, Request{RunID: "wrun_c", Type: StepCreated, CorrelationID: "step_1", Data: data(map[string]any{"stepName": "s"})}, t0)
	must(t, m, Request{RunID: "wrun_c", Type: StepStarted, CorrelationID: "step_1"}, t0)
	m.steps["wrun_c/step_1"], _ = CloseAfterCommit(m.steps["wrun_c/step_1"], 1, "strm_x")
	out := must(t, m, Request{RunID: "wrun_c", Type: StepCompleted, CorrelationID: "step_1", Data: data(map[string]any{"result": 1})}, t0)
	if len(out.Closes) != 1 || out.Closes[0] != "strm_x" || len(out.Step.Closes) != 0 {
		t.Fatalf("commit closes %v, step %+v", out.Closes, out.Step)
	}
}

func TestHooks(t *testing.T) {
	m := newMem()
	for _, id := range []string{"wrun_1", "wrun_2"} {
		must(t, m, Request{RunID: id, Type: RunCreated, Data: runData}, t0)
	}
	created := Request{RunID: "wrun_1", Type: HookCreated, CorrelationID: "hook_1", Data: data(map[string]any{"token": "tok", "metadata": 7})}
	out := must(t, m, created, t0)
	if !out.NewHook || out.Hook.Token != "tok" || string(out.Hook.Metadata) != "7" || out.Hook.IsWebhook {
		t.Fatalf("hook %+v", out.Hook)
	}
	wantErr(t, m, created, t0, ErrConflict)
	// Another run's hook with the token: a hook_conflict event, no hook.
	out = must(t, m, Request{RunID: "wrun_2", Type: HookCreated, CorrelationID: "hook_2", Data: data(map[string]any{"token": "tok"})}, t0)
	if len(out.Events) != 1 || out.Events[0].EventType != HookConflict || out.Hook != nil ||
		!strings.Contains(string(out.Events[0].EventData), `"conflictingRunId":"wrun_1"`) {
		t.Fatalf("conflict %+v", out)
	}
	must(t, m, Request{RunID: "wrun_1", Type: HookReceived, CorrelationID: "hook_1", Data: data(map[string]any{"payload": 1})}, t0)
	wantErr(t, m, Request{RunID: "wrun_1", Type: HookReceived, CorrelationID: "hook_9"}, t0, ErrHookNotFound)
	must(t, m, Request{RunID: "wrun_1", Type: HookDisposed, CorrelationID: "hook_1"}, t0)
	wantErr(t, m, Request{RunID: "wrun_1", Type: HookDisposed, CorrelationID: "hook_1"}, t0, ErrHookNotFound)
	// The token is free again.
	if out = must(t, m, Request{RunID: "wrun_2", Type: HookCreated, CorrelationID: "hook_3", Data: data(map[string]any{"token": "tok"})}, t0); out.Hook == nil {
		t.Fatal("a disposed hook's token was not freed")
	}
	// A run's end disposes its hooks.
	must(t, m, Request{RunID: "wrun_2", Type: RunCancelled}, t0)
	if len(m.hooks) != 0 {
		t.Fatalf("hooks of an ended run: %v", m.hooks)
	}
	wantErr(t, m, Request{RunID: "wrun_1", Type: HookCreated, CorrelationID: "hook_4", Data: data(map[string]any{"token": "bad token"})}, t0, ErrInvalid)
}

func TestWaits(t *testing.T) {
	m := newMem()
	must(t, m, Request{RunID: "wrun_w", Type: RunCreated, Data: runData}, t0)
	w := Request{RunID: "wrun_w", Type: WaitCreated, CorrelationID: "wait_1", Data: data(map[string]any{"resumeAt": t0.Add(time.Hour)})}
	out := must(t, m, w, t0)
	if out.Wait.WaitID != "wrun_w-wait_1" || out.Wait.Status != "waiting" || !out.Wait.ResumeAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("wait %+v", out.Wait)
	}
	wantErr(t, m, w, t0, ErrConflict)
	done := Request{RunID: "wrun_w", Type: WaitCompleted, CorrelationID: "wait_1"}
	if out = must(t, m, done, t0); out.Wait.Status != "completed" {
		t.Fatalf("completed %+v", out.Wait)
	}
	wantErr(t, m, done, t0, ErrConflict)
	wantErr(t, m, Request{RunID: "wrun_w", Type: WaitCompleted, CorrelationID: "wait_9"}, t0, ErrWaitNotFound)
}

func TestBadInput(t *testing.T) {
	m := newMem()
	must(t, m, Request{RunID: "wrun_x", Type: RunCreated, Data: runData}, t0)
	for _, r := range []Request{
		{RunID: "wrun_x", Type: "nope"},
		{RunID: "wrun_x", Type: HookConflict, CorrelationID: "h"},
		{Type: StepCreated, CorrelationID: "s"},
		{RunID: "wrun_x", Type: StepCreated, Data: data(map[string]any{"stepName": "s"})},
		{RunID: "wrun_x", Type: StepCreated, CorrelationID: "../etc", Data: data(map[string]any{"stepName": "s"})},
		{RunID: "wrun_x", Type: StepCreated, CorrelationID: "s", Data: json.RawMessage(`{"stepName":`)},
		{RunID: "wrun_x", Type: StepCreated, CorrelationID: "s", Data: data(map[string]any{"stepName": 1})},
		{RunID: "wrun_y", Type: RunCreated, Data: data(map[string]any{"workflowName": "wf", "input": 1})},
		{RunID: "bad id", Type: RunCreated, Data: runData},
		// A name that shows as another (red team, round five, L3).
		{RunID: "wrun_z", Type: RunCreated, Data: data(map[string]any{"deploymentId": "d", "workflowName": "wf\nfake", "input": 1})},
		{RunID: "wrun_z", Type: RunCreated, Data: data(map[string]any{"deploymentId": "d", "workflowName": "wf\u202eexe", "input": 1})},
		{RunID: "wrun_z", Type: RunStarted, Data: data(map[string]any{"deploymentId": "d\x00", "workflowName": "wf", "input": 1})},
		{RunID: "wrun_x", Type: StepCreated, CorrelationID: "step_n", Data: data(map[string]any{"stepName": "s\x00"})},
		{RunID: "wrun_x", Type: HookCreated, CorrelationID: "hook_d", Data: data(map[string]any{"token": "."})},
		{RunID: "wrun_x", Type: HookCreated, CorrelationID: "hook_d", Data: data(map[string]any{"token": ".."})},
		{RunID: "wrun_x", Type: HookCreated, CorrelationID: "hook_d", Data: data(map[string]any{"token": "t\x00"})},
	} {
		if _, err := m.create(t, &r, t0); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: err = %v, want ErrInvalid", r, err)
		}
	}
	if n := len(m.events["wrun_x"]); n != 1 {
		t.Fatalf("refused events wrote: %d events", n)
	}
}

func TestQueueKind(t *testing.T) {
	for name, want := range map[string]string{
		"__wkf_workflow_addition": "workflow", "__wkf_step_add": "step", "__ns1_wkf_step_add": "step",
		"__wkf_step_": "", "wkf_step_x": "", "__NS_wkf_step_x": "", "__wkf_other_x": "",
	} {
		got, ok := QueueKind(name)
		if got != want || ok != (want != "") {
			t.Errorf("QueueKind(%q) = %q %v, want %q", name, got, ok, want)
		}
	}
}

func TestULIDs(t *testing.T) {
	var u ULIDs
	u.Time = func() time.Time { return t0 }
	a, b := u.New("evnt"), u.New("evnt")
	if !(a < b) || len(a) != len("evnt_")+26 {
		t.Fatalf("%s then %s: not increasing", a, b)
	}
	if tm, ok := ULIDTime(a); !ok || !tm.Equal(t0.Truncate(time.Millisecond)) {
		t.Fatalf("ULIDTime(%s) = %v %v", a, tm, ok)
	}
	for _, bad := range []string{"evnt_8ZZZZZZZZZZZZZZZZZZZZZZZZZ", "evnt_0000000000000000000000000U", "evnt_123"} {
		if _, ok := ULIDTime(bad); ok {
			t.Errorf("ULIDTime(%q): taken for a ULID", bad)
		}
	}
}

func TestStripData(t *testing.T) {
	e := &Event{EventType: StepCreated, EventData: data(map[string]any{"stepName": "s", "input": "big"})}
	if got := string(StripData(e)); got != `{"stepName":"s"}` {
		t.Fatalf("stripped %s", got)
	}
	e = &Event{EventType: HookReceived, EventData: data(map[string]any{"payload": 1})}
	if got := string(StripData(e)); got != "{}" {
		t.Fatalf("nothing left: %s, want {} (EventSchema wants an object)", got)
	}
}

// TestProperties runs random event sequences against the model and checks
// what a World must keep: dense slots, one live hook per token, step
// attempts that only grow and fence as they do, every refused event
// writes nothing, and terminal runs never change status.
func TestProperties(t *testing.T) {
	for seed := range 200 {
		rng := rand.New(rand.NewPCG(uint64(seed), 3))
		m := newMem()
		now := t0
		runs := []string{"wrun_a", "wrun_b"}
		types := []EventType{RunCreated, RunStarted, RunCompleted, RunFailed, RunCancelled, StepCreated, StepStarted,
			StepCompleted, StepFailed, StepRetrying, HookCreated, HookReceived, HookDisposed, WaitCreated, WaitCompleted}
		for i := range 300 {
			now = now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
			r := Request{RunID: runs[rng.IntN(2)], Type: types[rng.IntN(len(types))], CorrelationID: fmt.Sprint("x_", rng.IntN(3))}
			switch r.Type {
			case RunCreated, RunStarted:
				r.Data = runData
				if rng.IntN(2) == 0 {
					r.Data = nil
				}
			case StepCreated:
				r.Data = data(map[string]any{"stepName": "s"})
			case StepRetrying:
				r.Data = data(map[string]any{"error": "e", "retryAfter": now.Add(time.Duration(rng.IntN(2)) * time.Second)})
			case HookCreated:
				r.Data = data(map[string]any{"token": fmt.Sprint("t", rng.IntN(2))})
			case WaitCreated:
				r.Data = data(map[string]any{"resumeAt": now})
			case StepCompleted:
				r.Data = data(map[string]any{"result": i})
			}
			beforeRun := m.runs[r.RunID]
			var beforeStatus Status
			if beforeRun != nil {
				beforeStatus = beforeRun.Status
			}
			beforeStep := m.steps[r.RunID+"/"+r.CorrelationID]
			nEvents := len(m.events[r.RunID])
			out, err := m.create(t, &r, now)
			if err != nil {
				if len(m.events[r.RunID]) != nEvents {
					t.Fatalf("seed %d op %d: refused %s wrote events", seed, i, r.Type)
				}
				continue
			}
			if beforeStatus.Terminal() && m.runs[r.RunID].Status != beforeStatus {
				t.Fatalf("seed %d op %d: terminal run went %s -> %s", seed, i, beforeStatus, m.runs[r.RunID].Status)
			}
			if s := m.steps[r.RunID+"/"+r.CorrelationID]; s != nil && beforeStep != nil && s.Attempt < beforeStep.Attempt {
				t.Fatalf("seed %d op %d: step attempt went down", seed, i)
			}
			if out.Fence > 0 && (beforeStep == nil || out.Fence != beforeStep.Attempt+1) {
				t.Fatalf("seed %d op %d: fence %d after attempt %v", seed, i, out.Fence, beforeStep)
			}
			tokens := map[string]bool{}
			for _, h := range m.hooks {
				if tokens[h.Token] {
					t.Fatalf("seed %d op %d: token %q held twice", seed, i, h.Token)
				}
				tokens[h.Token] = true
			}
			for id, evs := range m.events {
				for j, e := range evs {
					if e.Slot != int64(j+1) || e.RunID != id {
						t.Fatalf("seed %d: run %s event %d has slot %d", seed, id, j, e.Slot)
					}
				}
			}
		}
	}
}

// World stream names: no dot segments, nothing that is not UTF-8 (SQLite
// kept it, PostgreSQL refused it), no spaces, controls or slashes.
func TestStreamNames(t *testing.T) {
	for _, n := range []string{"strm_1", "strm_é", "a.b", "..a"} {
		if err := StreamName(n); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
	for _, n := range []string{"", ".", "..", "strm_\xff", "a b", "a/b", "a\x7f", strings.Repeat("x", 513)} {
		if err := StreamName(n); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", n, err)
		}
	}
}

// A failed run's or step's error is kept to MaxErrorText a field, cut on a
// rune boundary with a note of what was cut: a client's run_failed of
// megabytes would otherwise ride in every page that lists the run.
func TestErrorsCut(t *testing.T) {
	long := strings.Repeat("é", MaxErrorText) // two bytes each
	e := structuredError([]byte(`{"message":"`+long+`","stack":"s"}`), "")
	if len(e.Message) > MaxErrorText || !utf8.ValidString(e.Message) || !strings.HasSuffix(e.Message, "bytes cut)") || e.Stack != "s" {
		t.Fatalf("message of %d bytes kept as %d bytes (valid %v), ending %q", len(long), len(e.Message), utf8.ValidString(e.Message), e.Message[len(e.Message)-20:])
	}
	if got := CutText("short", 10); got != "short" {
		t.Fatalf("CutText of a short text: %q", got)
	}
	// A NUL is kept as U+FFFD, the same on both stores (PostgreSQL's
	// text refused it with the driver's words: red team, round five, L2).
	if e := structuredError([]byte(`{"message":"a\u0000b","stack":"s\u0000"}`), ""); e.Message != "a\uFFFDb" || e.Stack != "s\uFFFD" {
		t.Fatalf("an error with NULs kept as %q, %q", e.Message, e.Stack)
	}
}
