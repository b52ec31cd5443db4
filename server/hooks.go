package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
)

// handleDeliverHook serves POST /v1/hooks/{token}: the body (JSON) is a
// payload for the hook holding token. With Idempotency-Key, a delivery
// sent again is answered as the first (duplicate: true) and adds nothing.
// With ?close=true the delivery closes the hook after its payload (an
// empty body closes it alone): the run's takes get its payloads, then
// learn it is closed.
func (s *Server) handleDeliverHook(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "close")
	if err != nil {
		httpError(w, err)
		return
	}
	closing, err := parseBool(q, "close")
	if err != nil {
		httpError(w, err)
		return
	}
	if err := requireJSON(r); err != nil && !(closing && r.ContentLength == 0) {
		httpError(w, err)
		return
	}
	if len(r.Header.Values("Idempotency-Key")) > 1 {
		httpError(w, fmt.Errorf("%w: more than one Idempotency-Key header", api.ErrBadRequest))
		return
	}
	body, err := readBody(w, r, min(s.cfg.MaxBodyBytes, store.MaxHookPayload))
	if err != nil {
		httpError(w, err)
		return
	}
	res, err := s.e.DeliverHook(r.Context(), r.PathValue("token"), json.RawMessage(body),
		&weir.DeliverOptions{IdempotencyKey: r.Header.Get("Idempotency-Key"), Close: closing})
	if err != nil {
		httpError(w, err)
		return
	}
	s.writeWritten(w, http.StatusOK, res)
}

// handleHooks serves GET /v1/runs/{id}/hooks: the run's hooks, by op.
func (s *Server) handleHooks(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	run, err := s.runHead(r)
	if err != nil {
		httpError(w, err)
		return
	}
	hs, err := s.store.ListHooks(r.Context(), run.ID)
	if err != nil {
		httpError(w, err)
		return
	}
	out := api.HookList{Hooks: make([]api.Hook, len(hs))}
	for i, h := range hs {
		out.Hooks[i] = api.Hook{Token: h.Token, Op: h.Op, Received: h.Received,
			Disposed: h.Disposed || run.Status.Terminal(), CreatedAt: h.CreatedAt.UTC().Truncate(time.Millisecond)}
	}
	s.writeJSON(w, http.StatusOK, out)
}

// parseBool reads an optional boolean query parameter: true or false (1 or
// 0); absent is false.
func parseBool(q url.Values, name string) (bool, error) {
	switch q.Get(name) {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	}
	return false, fmt.Errorf("%w: %s=%q: want true or false", api.ErrBadRequest, name, clip(q.Get(name)))
}
