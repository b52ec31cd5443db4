package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
)

// maxEventWait bounds GET /v1/runs/{id}/events/{key}?wait=.
const maxEventWait = 60 * time.Second

// handleSendMessage serves POST /v1/runs/{id}/messages/{topic}: the body
// (JSON) is a message to the run on topic, kept in its log until the run
// takes it (weir.Recv). With Idempotency-Key, a message sent again is
// answered as the first (duplicate: true) and adds nothing.
func (s *Server) handleSendMessage(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	if err := requireJSON(r); err != nil {
		httpError(w, err)
		return
	}
	if len(r.Header.Values("Idempotency-Key")) > 1 {
		httpError(w, fmt.Errorf("%w: more than one Idempotency-Key header", api.ErrBadRequest))
		return
	}
	id, topic := r.PathValue("id"), r.PathValue("topic")
	if err := store.CheckRunID(id); err != nil {
		httpError(w, err)
		return
	}
	if err := store.CheckTopic("topic", topic); err != nil {
		httpError(w, err)
		return
	}
	body, err := readBody(w, r, min(s.cfg.MaxBodyBytes, store.MaxMessagePayload))
	if err != nil {
		httpError(w, err)
		return
	}
	res, err := s.e.Send(r.Context(), id, topic, json.RawMessage(body), &weir.SendOptions{IdempotencyKey: r.Header.Get("Idempotency-Key")})
	if err != nil {
		httpError(w, err)
		return
	}
	s.writeWritten(w, http.StatusOK, api.MessageSent{RunID: res.RunID, Topic: res.Topic, Seq: res.Seq, Duplicate: res.Duplicate})
}

// handleRunEvent serves GET /v1/runs/{id}/events/{key}: the run event's
// latest value. With ?wait=D (at most 60s) it waits that long for a value
// newer than ?after=SEQ (0: any): 204 if none came; 404 if the run ended
// without one.
func (s *Server) handleRunEvent(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "wait", "after")
	if err != nil {
		httpError(w, err)
		return
	}
	opts := &weir.GetEventOptions{}
	var wait time.Duration
	if v, ok := q["wait"]; ok {
		if wait, err = time.ParseDuration(v[0]); err != nil || wait < 0 || wait > maxEventWait {
			httpError(w, fmt.Errorf("%w: wait=%q: want a duration from 0s to %v", api.ErrBadRequest, clip(v[0]), maxEventWait))
			return
		}
		opts.Wait = true
	}
	if v, ok := q["after"]; ok {
		if opts.After, err = queryInt("after", v[0], 0, math.MaxInt64); err != nil {
			httpError(w, err) // an event's seq
			return
		}
		if !opts.Wait {
			httpError(w, fmt.Errorf("%w: after= goes with wait=", api.ErrBadRequest))
			return
		}
	}
	id, key := r.PathValue("id"), r.PathValue("key")
	if err := store.CheckTopic("run event key", key); err != nil {
		httpError(w, err)
		return
	}
	ctx := r.Context()
	if opts.Wait {
		// A wait holds a reader's slot (Config.MaxReaders), as a live
		// stream read does: waiters are bounded, past them 503 busy.
		release, err := s.reader()
		if err != nil {
			httpError(w, err)
			return
		}
		defer release()
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	ev, err := s.e.GetEvent(ctx, id, key, opts)
	if opts.Wait && errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil {
		// The wait is over (a wait of 0s was over at once): one last look
		// decides, with the request's own context.
		ev, err = s.e.GetEvent(r.Context(), id, key, nil)
		switch {
		case err == nil && ev.Seq > opts.After:
		case err == nil || errors.Is(err, store.ErrNotFound) && s.running(r.Context(), id):
			w.WriteHeader(http.StatusNoContent) // nothing newer within the wait
			return
		}
	}
	if err != nil {
		httpError(w, err)
		return
	}
	s.writeJSON(w, http.StatusOK, runEventJSON(ev))
}

// running reports whether run id exists and has not ended.
func (s *Server) running(ctx context.Context, id string) bool {
	r, _, err := s.store.GetRunWithin(ctx, id, 0)
	return err == nil && !r.Status.Terminal()
}

func runEventJSON(ev *weir.RunEvent) api.RunEvent {
	return api.RunEvent{Key: ev.Key, Value: json.RawMessage(ev.Value), Seq: ev.Seq, At: ev.At.UTC().Truncate(time.Millisecond),
		Size: ev.Size, Elided: ev.Elided}
}

const (
	// stateEventRow bounds a run event of a /state page in memory: its
	// value (at most store.MaxInlineEventValue; a larger one is not read),
	// its key and the rest.
	stateEventRow = store.MaxInlineEventValue + store.MaxTopicLen + 512
	// stateEventJSON bounds its JSON: the value as stored (raw JSON), the
	// key escaped (store.JSONStringBytes: 6 bytes a byte at most) and the
	// rest.
	stateEventJSON = store.MaxInlineEventValue + 6*store.MaxTopicLen + 256
	// stateEventBytes is what a /state page is charged a key before the
	// store is read: its row, and its JSON twice (the encoder's buffer
	// grows by doubling), about 16 KiB; 16 MiB for a page of
	// store.MaxRunEventPage.
	stateEventBytes = stateEventRow + 2*stateEventJSON
	// stateTopicJSON is a topic's counts in JSON, its name aside.
	stateTopicJSON = 128
)

// handleRunState serves GET /v1/runs/{id}/state[?after=KEY&limit=N]: a
// page of the run events the run published (by key, their latest values,
// a value over store.MaxInlineEventValue elided: GET .../events/{key} has
// it) and the messages sent to it, by topic. The page is charged to the
// replies' budget before the store is read (its rows and its JSON, for
// its most keys), with the messages' counts: neither depends on what the
// run set (a run may set any number of keys of 1 MiB).
func (s *Server) handleRunState(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "after", "limit")
	if err != nil {
		httpError(w, err)
		return
	}
	p := &store.ListRunEventsParams{RunID: r.PathValue("id"), After: q.Get("after"), Limit: store.MaxRunEventPage}
	if v, ok := q["limit"]; ok {
		if p.Limit, err = queryCount("limit", v[0], 1, store.MaxRunEventPage); err != nil {
			httpError(w, err)
			return
		}
	}
	if err := p.Check(); err != nil {
		httpError(w, err)
		return
	}
	// The messages first, counted by the store without their payloads
	// (store.CountMessages), so that the page's hold is not kept while a
	// long log is counted. A topic has a message at least: at most
	// store.MaxRunMessages topics.
	ms, err := s.e.Messages(r.Context(), p.RunID)
	if err != nil {
		httpError(w, err)
		return
	}
	var topics int64
	for _, m := range ms {
		topics += 2 * int64(store.JSONStringBytes(m.Topic)+stateTopicJSON)
	}
	// The store reads a row past the page to tell whether more follow.
	h, ok := s.hold(w, int64(p.Limit+1)*stateEventBytes+topics)
	if !ok {
		return
	}
	defer func() { _ = h.to(0) }()
	page, err := s.store.ListRunEventsPage(r.Context(), p)
	if err != nil {
		httpError(w, err)
		return
	}
	if err := h.to(int64(len(page.Events))*stateEventBytes + topics); err != nil {
		httpError(w, err) // it only shrinks
		return
	}
	out := api.RunState{Events: make([]api.RunEvent, len(page.Events)), Messages: ms, More: page.More}
	for i, ev := range page.Events {
		out.Events[i] = runEventJSON(ev)
	}
	if page.More && len(page.Events) > 0 {
		out.NextAfter = page.Events[len(page.Events)-1].Key
	}
	h.send(w, http.StatusOK, out)
}
