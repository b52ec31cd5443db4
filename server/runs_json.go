package server

import (
	"encoding/json"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
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
