package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/delivery"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/world"
)

// weir's World API (docs/protocol.md, "The World API"): what the World
// package (js/world) calls for a Vercel Workflow app, under /v1/world/.
// The rules are package world's, run by the store in the event's
// transaction; this file parses, answers, and strips payloads when a reader
// asks for resolveData=none. Bodies are JSON; data fields are the runtime's
// JSON, given back as they came.

func (s *Server) worldRoutes() {
	m := worldMux{s}
	m.HandleFunc("POST /v1/world/runs/{run}/events", s.handleWorldEvent)
	m.HandleFunc("GET /v1/world/runs/{run}/events", s.handleWorldEvents)
	m.HandleFunc("GET /v1/world/runs/{run}/events/{event}", s.handleWorldEventGet)
	m.HandleFunc("GET /v1/world/events", s.handleWorldEventsByCorrelation)
	m.HandleFunc("GET /v1/world/runs", s.handleWorldRuns)
	m.HandleFunc("GET /v1/world/runs/{run}", s.handleWorldRun)
	m.HandleFunc("POST /v1/world/runs/{run}/cancel", s.handleWorldCancel)
	m.HandleFunc("GET /v1/world/runs/{run}/steps", s.handleWorldSteps)
	m.HandleFunc("GET /v1/world/runs/{run}/steps/{step}", s.handleWorldStep)
	m.HandleFunc("GET /v1/world/steps/{step}", s.handleWorldStep)
	m.HandleFunc("GET /v1/world/hooks", s.handleWorldHooks)
	m.HandleFunc("GET /v1/world/hooks/{hook}", s.handleWorldHook)
	m.HandleFunc("POST /v1/world/queue", s.handleWorldEnqueue)
	m.HandleFunc("GET /v1/world/queue", s.handleWorldMessages)
	m.HandleFunc("POST /v1/world/queue/{msg}/redeliver", s.handleWorldRedeliver)
	m.HandleFunc("GET /v1/world/runs/{run}/streams", s.handleWorldStreamNames)
	m.HandleFunc("POST /v1/world/runs/{run}/streams/{name}", s.handleWorldWrite)
	m.HandleFunc("POST /v1/world/runs/{run}/streams/{name}/close", s.handleWorldClose)
	m.HandleFunc("GET /v1/world/streams/{name}", s.handleWorldRead)
	m.HandleFunc("GET /v1/world/streams/{name}/info", s.handleWorldInfo)
	m.HandleFunc("GET /v1/world/streams/{name}/chunks", s.handleWorldChunks)
}

// worldMux registers World routes whose path ids are checked first: an
// id with a control byte or not UTF-8 is world.ErrInvalid before any
// store reads for it, the same on both (PostgreSQL answered a NUL with
// its driver's words: red team, round seven).
type worldMux struct{ s *Server }

// worldPathIDs are the path values of the World routes.
var worldPathIDs = []string{"run", "event", "step", "hook", "msg", "name"}

func (m worldMux) HandleFunc(pattern string, h http.HandlerFunc) {
	m.s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		for _, k := range worldPathIDs {
			v := r.PathValue(k)
			if v == "" {
				continue
			}
			if err := store.CheckText(k, v); err != nil || strings.ContainsFunc(v, unicode.IsControl) {
				m.s.worldError(w, fmt.Errorf("%w: a %s id that is not printable UTF-8", world.ErrInvalid, k))
				return
			}
		}
		h(w, r)
	})
}

// newRunID is the path segment of a run_created that lets weir mint the id.
const newRunID = "-"

// worldEventRequest is the body of POST /v1/world/runs/{run}/events.
type worldEventRequest struct {
	EventType     world.EventType `json:"eventType"`
	CorrelationID string          `json:"correlationId,omitempty"`
	EventData     json.RawMessage `json:"eventData,omitempty"`
	SpecVersion   int             `json:"specVersion,omitempty"`
}

// worldEventReply is an EventResult of the World interface.
type worldEventReply struct {
	Event   *world.Event  `json:"event,omitempty"`
	Run     *world.Run    `json:"run,omitempty"`
	Step    *world.Step   `json:"step,omitempty"`
	Hook    *world.Hook   `json:"hook,omitempty"`
	Wait    *world.Wait   `json:"wait,omitempty"`
	Events  []world.Event `json:"events,omitempty"`
	Cursor  *string       `json:"cursor,omitempty"`
	HasMore *bool         `json:"hasMore,omitempty"`
}

// worldPage is a page of a World list: {data, cursor, hasMore}.
type worldPage[T any] struct {
	Data    []T     `json:"data"`
	Cursor  *string `json:"cursor"`
	HasMore bool    `json:"hasMore"`
}

func pageOf[T any](p *store.WorldPage[T], each func(*T)) worldPage[T] {
	out := worldPage[T]{Data: p.Data}
	if out.Data == nil {
		out.Data = []T{}
	}
	for i := range out.Data {
		each(&out.Data[i])
	}
	if p.NextCursor != "" {
		c := p.NextCursor
		out.Cursor, out.HasMore = &c, true
	}
	return out
}

// resolveNone reports resolveData=none: payloads are left out.
func resolveNone(q map[string][]string) (bool, error) {
	switch v := first(q, "resolveData"); v {
	case "", "all":
		return false, nil
	case "none":
		return true, nil
	default:
		return false, fmt.Errorf("%w: resolveData %q: want all or none", api.ErrBadRequest, clip(v))
	}
}

func first(q map[string][]string, k string) string {
	if v := q[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Stripping payloads, for resolveData=none.
func stripRun(r *world.Run, none bool) {
	if none && r != nil {
		r.Input, r.Output = nil, nil
	}
}

func stripStep(s *world.Step, none bool) {
	if none && s != nil {
		s.Input, s.Output = nil, nil
	}
}

func stripHook(h *world.Hook, none bool) {
	if none && h != nil {
		h.Metadata = nil
	}
}

func stripEvent(e *world.Event, none bool) {
	if none && e != nil {
		e.EventData = world.StripData(e)
	}
}

// handleWorldEvent serves POST /v1/world/runs/{run}/events: events.create.
func (s *Server) handleWorldEvent(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "resolveData")
	if err != nil {
		httpError(w, err)
		return
	}
	none, err := resolveNone(q)
	if err != nil {
		httpError(w, err)
		return
	}
	if err := requireJSON(r); err != nil {
		httpError(w, err)
		return
	}
	body, err := readBody(w, r, store.MaxPayload+64<<10)
	if err != nil {
		httpError(w, err)
		return
	}
	var req worldEventRequest
	if err := decodeJSON(body, &req); err != nil {
		httpError(w, err)
		return
	}
	runID := r.PathValue("run")
	if runID == newRunID {
		if req.EventType != world.RunCreated {
			httpError(w, fmt.Errorf("%w: only run_created may name the run %q", api.ErrBadRequest, newRunID))
			return
		}
		runID = ""
	}
	ev := &store.WorldEventParams{Request: world.Request{
		RunID: runID, Type: req.EventType, CorrelationID: req.CorrelationID, Data: req.EventData, SpecVersion: req.SpecVersion,
	}}
	if err := ev.Check(); err != nil { // before any read for it, the size's included
		s.worldError(w, err)
		return
	}
	switch req.EventType {
	case world.RunStarted, world.RunCompleted, world.RunFailed, world.RunCancelled:
		// The store reads the run (its input may be 16 MiB) and the reply
		// carries it, a run_started's its log too, before any budget could
		// refuse them: the run's reads are held by its size first, and a
		// request the budget cannot take is refused having read and
		// written nothing (red team, rounds six and seven: 32 concurrent
		// run_started of a 15 MiB run took a server to 1.8 GB).
		pre, ok := s.holdWorldRunReads(w, r, runID, 6)
		if !ok {
			return
		}
		defer func() { _ = pre.to(0) }()
	}
	res, err := s.store.WorldEvent(r.Context(), ev)
	if err != nil {
		s.worldError(w, err)
		return
	}
	s.metrics.worldEvent(req.EventType)
	rep := worldEventReply{Run: res.Run, Step: res.Step, Hook: res.Hook, Wait: res.Wait}
	h := &replyHold{s: s}
	if n := len(res.Events); n > 0 {
		e := res.Events[n-1]
		rep.Event = &e
	}
	if req.EventType == world.RunStarted && res.Run != nil {
		// The whole log, so that the runtime can skip its first
		// events.list (world-local does for a first start; weir for every
		// one: each workflow delivery of a running run starts it again).
		// Held as any page is; one the budget cannot take is left out (the
		// runtime lists it).
		lp := &store.WorldListParams{RunID: res.Run.RunID, Limit: 1000}
		var page *store.WorldPage[world.Event]
		held, ok := s.reservePage(nil, lp)
		if ok {
			h = held
			page, err = s.store.WorldEvents(r.Context(), lp)
		}
		if !ok || err != nil {
			_ = h.to(0)
		} else {
			for i := range page.Data {
				stripEvent(&page.Data[i], none)
			}
			rep.Events = page.Data
			more := page.NextCursor != ""
			rep.HasMore = &more
			if more {
				rep.Cursor = &page.NextCursor
			}
		}
	}
	stripEvent(rep.Event, none)
	stripRun(rep.Run, none)
	stripStep(rep.Step, none)
	stripHook(rep.Hook, none)
	// A World event's reply carries what the store holds (a run's input, a
	// step's), which may be megabytes the request never sent: it is held
	// as a read is, and one the budget cannot take is 503 busy even after
	// the commit (red team, round six, F1: forced past the budget, 128
	// stalled run_started replies of a 15 MiB run took a server to 4 GB).
	// The World's client retries it, and a retried event is answered as
	// done (a run started again, a step ended twice: a conflict the
	// runtime takes as done). Only a hook's payload, which a retry would
	// deliver twice, is not retried: its reply is never refused, and
	// holds no more than what the request sent (its data) and the hook.
	if req.EventType == world.HookReceived {
		h.sendWritten(w, http.StatusOK, rep)
		return
	}
	h.send(w, http.StatusOK, rep)
}

// worldError answers a World error: a too-early step start says when to
// come back.
func (s *Server) worldError(w http.ResponseWriter, err error) {
	var te *world.TooEarlyError
	if errors.As(err, &te) {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(te.RetryAfter.Seconds()))))
	}
	httpError(w, err)
}

// listParams parses a World list's pagination: limit, cursor, sortOrder.
func listParams(q map[string][]string, desc bool) (*store.WorldListParams, error) {
	p := &store.WorldListParams{Cursor: first(q, "cursor"), Desc: desc}
	if v := first(q, "limit"); v != "" {
		n, err := queryCount("limit", v, 1, maxWorldPage)
		if err != nil {
			return nil, err
		}
		p.Limit = n
	}
	switch v := first(q, "sortOrder"); v {
	case "":
	case "asc":
		p.Desc = false
	case "desc":
		p.Desc = true
	default:
		return nil, fmt.Errorf("%w: sortOrder %q: want asc or desc", api.ErrBadRequest, clip(v))
	}
	return p, nil
}

var pageKeys = []string{"limit", "cursor", "sortOrder", "resolveData"}

// handleWorldEvents serves GET /v1/world/runs/{run}/events: events.list.
func (s *Server) handleWorldEvents(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, pageKeys...)
	if err != nil {
		httpError(w, err)
		return
	}
	s.listEvents(w, r, q, &store.WorldListParams{RunID: r.PathValue("run")})
}

// handleWorldEventsByCorrelation serves GET /v1/world/events?correlationId=:
// events.listByCorrelationId.
func (s *Server) handleWorldEventsByCorrelation(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, append([]string{"correlationId", "runId"}, pageKeys...)...)
	if err != nil {
		httpError(w, err)
		return
	}
	corr := first(q, "correlationId")
	if corr == "" {
		httpError(w, fmt.Errorf("%w: correlationId is required", api.ErrBadRequest))
		return
	}
	s.listEvents(w, r, q, &store.WorldListParams{CorrelationID: corr, RunID: first(q, "runId")})
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request, q map[string][]string, base *store.WorldListParams) {
	none, err := resolveNone(q)
	if err != nil {
		httpError(w, err)
		return
	}
	p, err := listParams(q, false)
	if err != nil {
		httpError(w, err)
		return
	}
	p.RunID, p.CorrelationID = base.RunID, base.CorrelationID
	h, ok := s.reservePage(w, p)
	if !ok {
		return
	}
	page, err := s.store.WorldEvents(r.Context(), p)
	if err != nil {
		_ = h.to(0)
		httpError(w, err)
		return
	}
	h.send(w, http.StatusOK, pageOf(page, func(e *world.Event) { stripEvent(e, none) }))
}

// worldRunExists is nil if World run id exists, world.ErrRunNotFound if
// not: read without its values (store.RunsWithin), so that a run of
// megabytes costs a list of its steps or events nothing to find.
func (s *Server) worldRunExists(ctx context.Context, id string) error {
	run, _, err := s.store.GetRunWithin(ctx, id, 0)
	switch {
	case errors.Is(err, store.ErrNotFound) || err == nil && run.Kind != store.KindWorld:
		return fmt.Errorf("world run: %w: %q", world.ErrRunNotFound, id)
	case err != nil:
		return err
	}
	return nil
}

// holdWorldRunReads charges k reads of World run id's values (as the
// store holds them, and as a reply encodes them) before any is made, by
// the run's size (store.WorldSizer); false if the budget cannot take them
// (answered 503 busy on w, nothing read). An unknown run holds nothing:
// the read that follows says so.
func (s *Server) holdWorldRunReads(w http.ResponseWriter, r *http.Request, id string, k int64) (*replyHold, bool) {
	if err := store.CheckRunID(id); err != nil {
		s.worldError(w, fmt.Errorf("world run: %w", err))
		return nil, false
	}
	sz, ok := store.WorldSizerOf(s.store)
	if !ok {
		return &replyHold{s: s}, true
	}
	n, err := sz.WorldItemSize(r.Context(), store.WorldItemRef{Kind: "run", ID: id})
	if err != nil {
		s.worldError(w, err)
		return nil, false
	}
	if n == 0 {
		return &replyHold{s: s}, true
	}
	return s.hold(w, k*n+64<<10)
}

// holdWorldItem charges the reply of one World item to the replies'
// budget before it is read, by its size (store.WorldSizer): three times its
// payloads (read, encoded, and the encoding) and room for its other
// fields; false if the budget cannot take it (answered 503 busy, nothing
// read).
func (s *Server) holdWorldItem(w http.ResponseWriter, r *http.Request, ref store.WorldItemRef) (*replyHold, bool) {
	sz, ok := store.WorldSizerOf(s.store)
	if !ok {
		return &replyHold{s: s}, true
	}
	n, err := sz.WorldItemSize(r.Context(), ref)
	if err != nil {
		httpError(w, err)
		return nil, false
	}
	return s.hold(w, 3*n+64<<10)
}

// reservePage holds a World list page's reply as the store reads it
// (WorldListParams.Reserve): three times its payloads (read, encoded, and
// the encoding) and room for the items' other fields, so that clients
// that stall on their pages hold at most the replies' budget, and a
// request refused at it stops reading.
//
// The fixed part is taken before the read: a request that finds the budget
// spent is refused (503 busy, answered on w) having read nothing. nil w:
// nothing is answered, and false says the page is to be left out.
func (s *Server) reservePage(w http.ResponseWriter, p *store.WorldListParams) (*replyHold, bool) {
	h := &replyHold{s: s}
	if err := h.to(1 << 20); err != nil {
		if w != nil {
			httpError(w, err)
		}
		return nil, false
	}
	p.Reserve = func(n int) error { return h.to(3*int64(n) + 1<<20) }
	return h, true
}

// handleWorldEventGet serves GET /v1/world/runs/{run}/events/{event}.
func (s *Server) handleWorldEventGet(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "resolveData")
	if err != nil {
		httpError(w, err)
		return
	}
	none, err := resolveNone(q)
	if err != nil {
		httpError(w, err)
		return
	}
	h, ok := s.holdWorldItem(w, r, store.WorldItemRef{Kind: "event", RunID: r.PathValue("run"), ID: r.PathValue("event")})
	if !ok {
		return
	}
	e, err := s.store.WorldEventByID(r.Context(), r.PathValue("run"), r.PathValue("event"))
	if err != nil {
		_ = h.to(0)
		httpError(w, err)
		return
	}
	stripEvent(e, none)
	h.send(w, http.StatusOK, e)
}

// handleWorldRuns serves GET /v1/world/runs: runs.list, newest first.
func (s *Server) handleWorldRuns(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, append([]string{"workflowName", "status"}, pageKeys...)...)
	if err != nil {
		httpError(w, err)
		return
	}
	none, err := resolveNone(q)
	if err != nil {
		httpError(w, err)
		return
	}
	p, err := listParams(q, true)
	if err != nil {
		httpError(w, err)
		return
	}
	p.WorkflowName, p.Status, p.NoData = first(q, "workflowName"), world.Status(first(q, "status")), none
	h, ok := s.reservePage(w, p)
	if !ok {
		return
	}
	page, err := s.store.WorldRuns(r.Context(), p)
	if err != nil {
		_ = h.to(0)
		httpError(w, err)
		return
	}
	h.send(w, http.StatusOK, pageOf(page, func(run *world.Run) { stripRun(run, none) }))
}

// handleWorldRun serves GET /v1/world/runs/{run}: runs.get.
func (s *Server) handleWorldRun(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "resolveData")
	if err != nil {
		httpError(w, err)
		return
	}
	none, err := resolveNone(q)
	if err != nil {
		httpError(w, err)
		return
	}
	// Without data, the run's head alone is read and held: not its input
	// and output, up to 30 MiB, read to be stripped (red team, round
	// twenty: 6 token-less loops of it, other clients' writes p50 3.1 ->
	// 107 ms on SQLite).
	read, kind := s.store.WorldRun, "run"
	if none {
		read, kind = s.store.WorldRunHead, "run-head"
	}
	h, ok := s.holdWorldItem(w, r, store.WorldItemRef{Kind: kind, ID: r.PathValue("run")})
	if !ok {
		return
	}
	run, err := read(r.Context(), r.PathValue("run"))
	if err != nil {
		_ = h.to(0)
		httpError(w, err)
		return
	}
	stripRun(run, none)
	h.send(w, http.StatusOK, run)
}

// handleWorldCancel serves POST /v1/world/runs/{run}/cancel: a cancel from
// weir (the CLI, the UI). It writes run_cancelled, which disposes the run's
// hooks, and sends the app the run's workflow message, so that its runtime
// sees the cancellation.
func (s *Server) handleWorldCancel(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	// The cancel reads the run before and after (cancelWorldRun): held
	// by its size first, as a World event's reads are.
	pre, ok := s.holdWorldRunReads(w, r, r.PathValue("run"), 4)
	if !ok {
		return
	}
	defer func() { _ = pre.to(0) }()
	run, status, err := s.cancelWorldRun(r, r.PathValue("run"))
	if err != nil {
		s.worldError(w, err)
		return
	}
	s.writeWritten(w, status, writtenWorldRun(run))
}

func (s *Server) cancelWorldRun(r *http.Request, id string) (*world.Run, int, error) {
	ctx := r.Context()
	before, err := s.store.WorldRun(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	if before.Status.Terminal() {
		return before, http.StatusOK, nil // a cancel of a cancelled run included: nothing is added
	}
	res, err := s.store.WorldEvent(ctx, &store.WorldEventParams{Request: world.Request{RunID: id, Type: world.RunCancelled}})
	if err != nil {
		return nil, 0, err
	}
	if before.Target != "" {
		payload, _ := json.Marshal(map[string]string{"runId": id})
		_, _, err := s.store.Enqueue(ctx, &store.EnqueueParams{ID: s.worldIDs.New("msg"),
			QueueName: "__wkf_workflow_" + before.WorkflowName, Payload: payload, Target: before.Target,
			DeploymentID: before.DeploymentID, RunID: id})
		if err != nil {
			s.log.Warn("world: cancel: the workflow message was not queued", "run", id, "err", err)
		}
	}
	return res.Run, http.StatusAccepted, nil
}

// handleWorldSteps serves GET /v1/world/runs/{run}/steps: steps.list.
func (s *Server) handleWorldSteps(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, pageKeys...)
	if err != nil {
		httpError(w, err)
		return
	}
	none, err := resolveNone(q)
	if err != nil {
		httpError(w, err)
		return
	}
	p, err := listParams(q, false)
	if err != nil {
		httpError(w, err)
		return
	}
	p.RunID, p.NoData = r.PathValue("run"), none
	if err := s.worldRunExists(r.Context(), p.RunID); err != nil {
		httpError(w, err)
		return
	}
	h, ok := s.reservePage(w, p)
	if !ok {
		return
	}
	page, err := s.store.WorldSteps(r.Context(), p)
	if err != nil {
		_ = h.to(0)
		httpError(w, err)
		return
	}
	h.send(w, http.StatusOK, pageOf(page, func(st *world.Step) { stripStep(st, none) }))
}

// handleWorldStep serves GET /v1/world/runs/{run}/steps/{step} and
// /v1/world/steps/{step}: steps.get.
func (s *Server) handleWorldStep(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "resolveData")
	if err != nil {
		httpError(w, err)
		return
	}
	none, err := resolveNone(q)
	if err != nil {
		httpError(w, err)
		return
	}
	h, ok := s.holdWorldItem(w, r, store.WorldItemRef{Kind: "step", RunID: r.PathValue("run"), ID: r.PathValue("step")})
	if !ok {
		return
	}
	st, err := s.store.WorldStep(r.Context(), r.PathValue("run"), r.PathValue("step"))
	if err != nil {
		_ = h.to(0)
		httpError(w, err)
		return
	}
	stripStep(st, none)
	h.send(w, http.StatusOK, st)
}

// handleWorldHooks serves GET /v1/world/hooks: hooks.getByToken with
// ?token=, else hooks.list (?runId=).
func (s *Server) handleWorldHooks(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, append([]string{"token", "runId"}, pageKeys...)...)
	if err != nil {
		httpError(w, err)
		return
	}
	none, err := resolveNone(q)
	if err != nil {
		httpError(w, err)
		return
	}
	if tok, ok := q["token"]; ok {
		if err := world.Token(tok[0]); err != nil {
			httpError(w, err)
			return
		}
		held, ok := s.holdWorldItem(w, r, store.WorldItemRef{Kind: "hook-token", ID: tok[0]})
		if !ok {
			return
		}
		h, err := s.store.WorldHookByToken(r.Context(), tok[0])
		if err != nil {
			_ = held.to(0)
			httpError(w, err)
			return
		}
		stripHook(h, none)
		held.send(w, http.StatusOK, h)
		return
	}
	p, err := listParams(q, false)
	if err != nil {
		httpError(w, err)
		return
	}
	p.RunID = first(q, "runId")
	h, ok := s.reservePage(w, p)
	if !ok {
		return
	}
	page, err := s.store.WorldHooks(r.Context(), p)
	if err != nil {
		_ = h.to(0)
		httpError(w, err)
		return
	}
	h.send(w, http.StatusOK, pageOf(page, func(h *world.Hook) { stripHook(h, none) }))
}

// handleWorldHook serves GET /v1/world/hooks/{hook}: hooks.get.
func (s *Server) handleWorldHook(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "resolveData")
	if err != nil {
		httpError(w, err)
		return
	}
	none, err := resolveNone(q)
	if err != nil {
		httpError(w, err)
		return
	}
	held, ok := s.holdWorldItem(w, r, store.WorldItemRef{Kind: "hook", ID: r.PathValue("hook")})
	if !ok {
		return
	}
	h, err := s.store.WorldHook(r.Context(), r.PathValue("hook"))
	if err != nil {
		_ = held.to(0)
		httpError(w, err)
		return
	}
	stripHook(h, none)
	held.send(w, http.StatusOK, h)
}

// enqueueRequest is the body of POST /v1/world/queue.
type enqueueRequest struct {
	QueueName      string          `json:"queueName"`
	Payload        json.RawMessage `json:"payload"`
	Target         string          `json:"target"`
	TargetSig      string          `json:"targetSignature,omitempty"` // delivery.SignTarget of Target
	MessageID      string          `json:"messageId,omitempty"`       // a retry sends the id the first try minted
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	DelaySeconds   float64         `json:"delaySeconds,omitempty"`
	DeploymentID   string          `json:"deploymentId,omitempty"`
}

// maxDelay bounds a message's delay: a durable sleep of a year is fine, a
// delay that overflows a time is not.
const maxDelay = 10 * 365 * 24 * time.Hour

// handleWorldEnqueue serves POST /v1/world/queue: queue().
func (s *Server) handleWorldEnqueue(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	if !s.cfg.WorldDelivery {
		httpError(w, fmt.Errorf("%w: start weir server with a World secret (--world-secret or WEIR_WORLD_SECRET) to deliver World messages", api.ErrNoDelivery))
		return
	}
	if err := requireJSON(r); err != nil {
		httpError(w, err)
		return
	}
	body, err := readBody(w, r, store.MaxPayload+64<<10)
	if err != nil {
		httpError(w, err)
		return
	}
	var req enqueueRequest
	if err := decodeJSON(body, &req); err != nil {
		httpError(w, err)
		return
	}
	if err := checkTarget(req.Target); err != nil {
		httpError(w, err)
		return
	}
	delay := time.Duration(req.DelaySeconds * float64(time.Second))
	if req.DelaySeconds < 0 || delay > maxDelay {
		httpError(w, fmt.Errorf("%w: delaySeconds %v: 0 to 10 years", api.ErrBadRequest, req.DelaySeconds))
		return
	}
	id := req.MessageID
	if id == "" {
		id = s.worldIDs.New("msg")
	} else if !strings.HasPrefix(id, "msg_") {
		httpError(w, fmt.Errorf("%w: messageId %q: want msg_<ULID>", api.ErrBadRequest, clip(id)))
		return
	}
	p := &store.EnqueueParams{ID: id, QueueName: req.QueueName, Payload: req.Payload,
		Target: req.Target, IdempotencyKey: req.IdempotencyKey, DeploymentID: req.DeploymentID,
		RunID: payloadRun(req.Payload), Delay: delay}
	// The request's shape first (400), then whether weir may deliver
	// there (403).
	if err := p.Check(); err != nil {
		httpError(w, err)
		return
	}
	if err := s.allowTarget(req.Target, req.TargetSig); err != nil {
		httpError(w, err)
		return
	}
	m, _, err := s.store.Enqueue(r.Context(), p)
	if err != nil {
		httpError(w, err)
		return
	}
	s.writeWritten(w, http.StatusOK, map[string]string{"messageId": m.ID})
}

// payloadRun is the run a queue payload names: a workflow message's runId,
// a step message's workflowRunId.
func payloadRun(p json.RawMessage) string {
	var v struct {
		RunID         string `json:"runId"`
		WorkflowRunID string `json:"workflowRunId"`
	}
	_ = json.Unmarshal(p, &v)
	if v.RunID != "" {
		return v.RunID
	}
	return v.WorkflowRunID
}

// checkTarget accepts an http or https base URL without credentials, query
// or fragment: weir POSTs to {target}/.well-known/workflow/v1/….
func checkTarget(t string) error {
	if t == "" {
		return fmt.Errorf("%w: target (the app's base URL) is required", api.ErrBadRequest)
	}
	u, err := parseURL(t)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" || len(t) > 2048 {
		return fmt.Errorf("%w: target %q: want an http(s) base URL without credentials, query or fragment", api.ErrBadRequest, clip(t))
	}
	return nil
}

// allowTarget refuses a target weir may not deliver to: one not signed
// with the World secret (delivery.SignTarget), unless its origin is one of
// Config.WorldTargets.
func (s *Server) allowTarget(target, sig string) error {
	if len(s.cfg.WorldSecret) > 0 && delivery.VerifyTarget(s.cfg.WorldSecret, target, sig) == nil {
		return nil
	}
	if u, err := parseURL(target); err == nil {
		origin := strings.ToLower(u.Scheme + "://" + u.Host)
		for _, o := range s.cfg.WorldTargets {
			if o == "*" || strings.EqualFold(strings.TrimSuffix(o, "/"), origin) {
				return nil
			}
		}
	}
	why := "it is not signed"
	if sig != "" {
		why = "its signature does not match weir's World secret"
	}
	s.targetRefused(target, why)
	return fmt.Errorf("%w: target %q: %s, and its origin is not one of --world-target: weir delivers only to apps that hold the World secret (@weirhq/world signs its target with WEIR_WORLD_SECRET) or to the origins its operator allows",
		api.ErrForbidden, clip(target), why)
}

// targetRefused logs a queued message refused for its target: at WARN, at
// most once a minute, with what the app's operator must set. (The app's
// queue() fails with the reason too, in the app's log.)
func (s *Server) targetRefused(target, why string) {
	s.refusedTargets.mu.Lock()
	defer s.refusedTargets.mu.Unlock()
	now := time.Now()
	if now.Sub(s.refusedTargets.last) < time.Minute {
		s.refusedTargets.left++
		return
	}
	hint := "set WEIR_WORLD_SECRET in the app to weir's --world-secret (or $WEIR_WORLD_SECRET): @weirhq/world signs its target with it"
	if len(s.cfg.WorldSecret) == 0 {
		hint = "weir server has no World secret to check the signature with: start it with --world-secret, or allow the app's origin with --world-target"
	}
	s.log.Warn("world: a queued message was refused: weir does not deliver to its target", "target", clip(target), "why", why,
		"hint", hint, "refused_since_last_log", s.refusedTargets.left)
	s.refusedTargets.last, s.refusedTargets.left = now, 0
}

// messageJSON is a queue message as the API lists it.
type messageJSON = api.WorldMessage

// handleWorldMessages serves GET /v1/world/queue?state=pending|dead&runId=:
// the pending messages, or the dead letters (of one run).
func (s *Server) handleWorldMessages(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "state", "limit", "runId")
	if err != nil {
		httpError(w, err)
		return
	}
	p := &store.MessagesParams{State: first(q, "state"), RunID: first(q, "runId")}
	if p.State == "" {
		p.State = "dead"
	}
	if v := first(q, "limit"); v != "" {
		if p.Limit, err = queryCount("limit", v, 1, maxWorldPage); err != nil {
			httpError(w, err)
			return
		}
	}
	// Held as the store reads it, three times its payloads and errors, as
	// a World page is (reservePage).
	h, ok := s.hold(w, 1<<20) // refused before the read if the budget is spent
	if !ok {
		return
	}
	p.Reserve = func(n int) error { return h.to(3*int64(n) + 1<<20) }
	ms, err := s.store.Messages(r.Context(), p)
	if err != nil {
		_ = h.to(0)
		httpError(w, err)
		return
	}
	out := struct {
		Messages []messageJSON `json:"messages"`
	}{Messages: make([]messageJSON, len(ms))}
	for i, m := range ms {
		mj := messageJSON{ID: m.ID, QueueName: m.QueueName, RunID: m.RunID, Target: m.Target, State: m.State,
			Attempt: m.Attempt, Failures: m.Failures, DeliverAt: m.DeliverAt.UTC(), LastError: m.LastError, Hint: delivery.Hint(m.LastError),
			CreatedAt: m.CreatedAt.UTC(), IdempotencyKey: m.IdempotencyKey, Payload: m.Payload}
		if !m.FirstFailure.IsZero() {
			t := m.FirstFailure.UTC()
			mj.FirstFailure = &t
		}
		out.Messages[i] = mj
	}
	h.send(w, http.StatusOK, out)
}

// handleWorldRedeliver serves POST /v1/world/queue/{msg}/redeliver: a dead
// letter is delivered again, now.
func (s *Server) handleWorldRedeliver(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	if err := s.store.RedeliverMessage(r.Context(), r.PathValue("msg")); err != nil {
		httpError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
