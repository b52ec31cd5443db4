package world

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// FuzzDecide feeds the rules malformed and hostile events on each kind of
// state: Decide never panics, refuses with one of the package's errors, and
// an accepted event has a slot-less, well-typed event list.
func FuzzDecide(f *testing.F) {
	f.Add("run_created", "", []byte(`{"deploymentId":"d","workflowName":"w","input":[1]}`), uint8(0))
	f.Add("step_created", "step_1", []byte(`{"stepName":"s","input":null}`), uint8(1))
	f.Add("step_started", "step_1", []byte(`null`), uint8(2))
	f.Add("hook_created", "hook_1", []byte(`{"token":"t","metadata":{"__type":"Uint8Array","data":"AA=="}}`), uint8(1))
	f.Add("wait_created", "w", []byte(`{"resumeAt":"2026-12-01T00:00:00Z"}`), uint8(1))
	f.Add("step_retrying", "step_1", []byte(`{"retryAfter":"not a time"}`), uint8(2))
	f.Add("run_failed", "", []byte(`{"error":{"message":7}}`), uint8(3))
	f.Fuzz(func(t *testing.T, typ, corr string, data []byte, state uint8) {
		now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		run := &Run{RunID: "wrun_1", Status: Running, WorkflowName: "w", DeploymentID: "d", SpecVersion: Spec, CreatedAt: now}
		st := &State{}
		switch state % 4 {
		case 1:
			st.Run = run
		case 2:
			st.Run = run
			st.Step = &Step{RunID: "wrun_1", StepID: corr, Status: Running, Attempt: 1, CreatedAt: now}
		case 3:
			r := *run
			r.Status = Completed
			st.Run = &r
		}
		req := &Request{RunID: "wrun_1", Type: EventType(typ), CorrelationID: corr, Data: json.RawMessage(data)}
		out, err := Decide(st, req, now, &seqIDs{})
		if err != nil {
			for _, e := range []error{ErrConflict, ErrRunExpired, ErrTooEarly, ErrRunNotFound, ErrHookNotFound,
				ErrStepNotFound, ErrWaitNotFound, ErrNotSupported, ErrInvalid} {
				if errors.Is(err, e) {
					return
				}
			}
			t.Fatalf("Decide(%q, %q, %q) = %v: not one of the package's errors", typ, corr, data, err)
		}
		for _, e := range out.Events {
			if !e.EventType.Valid() && e.EventType != HookConflict {
				t.Fatalf("an event of type %q", e.EventType)
			}
		}
	})
}
