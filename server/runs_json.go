package server

import (
	"encoding/json"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/world"
)

// runJSON converts a store run.
func runJSON(r *store.Run) api.Run {
	out := api.Run{
		ID:              r.ID,
		Workflow:        r.Workflow,
		Status:          r.Status,
		Input:           rawJSON(r.Input),
		Output:          rawJSON(r.Output),
		Error:           r.Error,
		CreatedAt:       r.CreatedAt.UTC(),
		UpdatedAt:       r.UpdatedAt.UTC(),
		CancelRequested: r.CancelRequested,
		Elided:          r.Elided,
		Kind:            r.Kind,
		Parent:          r.Parent,
		Queue:           r.Queue,
		QueueKey:        r.QueueKey,
		Priority:        r.Priority,
		Dedupe:          r.Dedupe,
		Queued:          r.Queued,
		Version:         r.Version,
	}
	if !r.WakeAt.IsZero() && !r.Status.Terminal() && r.WakeAt.After(r.UpdatedAt) {
		t := r.WakeAt.UTC()
		out.WakeAt = &t
	}
	return out
}

// writtenRunJSON is r as the reply of a write (a start, a cancel, a fork,
// a retry, a resume): without its input and output if either is over
// store.MaxListedValue (Elided), its error cut to it, as a list has it. A write reads the run
// as it changes it, before any room is made for its reply, and a client
// that asked for nothing of the run's values may read its reply slowly;
// GET /v1/runs/{id}, which makes room first, has them.
func writtenRunJSON(r *store.Run) api.Run {
	if len(r.Input) > store.MaxListedValue || len(r.Output) > store.MaxListedValue || len(r.Error) > store.MaxListedValue {
		c := *r
		if len(r.Input) > store.MaxListedValue || len(r.Output) > store.MaxListedValue {
			c.Input, c.Output, c.Elided = nil, nil, true
		}
		c.Error = world.CutText(c.Error, store.MaxListedValue) // as a list has it
		r = &c
	}
	return runJSON(r)
}

// writtenWorldRun is a World run as the reply of a write weir makes (a
// cancel from the CLI or the UI): without an input or output over
// store.MaxListedValue, for the reason of writtenRunJSON. The app's World
// API reads runs with GET, which makes room first.
func writtenWorldRun(r *world.Run) *world.Run {
	if r == nil || len(r.Input) <= store.MaxListedValue && len(r.Output) <= store.MaxListedValue {
		return r
	}
	c := *r
	c.Input, c.Output = nil, nil
	return &c
}

func eventJSON(ev *store.Event) api.Event {
	out := api.Event{
		Seq: ev.Seq, Type: ev.Type, Op: ev.Op, Name: ev.Name, Attempt: ev.Attempt,
		Data: rawJSON(ev.Data), Error: ev.Error, Final: ev.Final, At: ev.At.UTC(),
	}
	if !ev.WakeAt.IsZero() {
		t := ev.WakeAt.UTC()
		out.WakeAt = &t
	}
	return out
}

// rawJSON passes JSON through as it is, and anything else (bytes a program
// stored without the SDK's encoding) as a JSON string.
func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	if json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b))
	return s
}
