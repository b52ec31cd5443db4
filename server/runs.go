package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/weirhq/weir/names"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// errUnknownPath marks a path nothing is served at (404).
var errUnknownPath = fmt.Errorf("unknown path: %w", store.ErrNotFound)

// Page sizes of GET /v1/runs.
const (
	defaultRunsLimit = 50
	maxRunsLimit     = 1000
)

// maxDebounceMS bounds a start's debounce: a day.
const maxDebounceMS = 24 * 60 * 60 * 1000

// handleStartRun serves POST /v1/runs.
func (s *Server) handleStartRun(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	if err := requireJSON(r); err != nil {
		httpError(w, err)
		return
	}
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		httpError(w, err)
		return
	}
	req, err := parseStartRequest(body)
	if err != nil {
		httpError(w, err)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(r.Header.Values("Idempotency-Key")) > 1 {
		httpError(w, fmt.Errorf("%w: more than one Idempotency-Key header", api.ErrBadRequest))
		return
	}
	id := req.ID
	if key != "" {
		if id != "" {
			httpError(w, fmt.Errorf("%w: give a run id or an Idempotency-Key header, not both", api.ErrBadRequest))
			return
		}
		if len(key) > 255 {
			httpError(w, fmt.Errorf("%w: Idempotency-Key of %d bytes, the limit is 255", api.ErrBadRequest, len(key)))
			return
		}
		id = idempotentRunID(key)
	}
	run, created, err := s.e.StartRun(s.traceContext(r), req.Workflow, req.Input, &weir.StartOptions{
		ID: id, Queue: req.Queue, QueueKey: req.QueueKey, Priority: req.Priority, Dedupe: req.Dedupe,
		Debounce: time.Duration(req.DebounceMS) * time.Millisecond, DebounceMax: time.Duration(req.DebounceMaxMS) * time.Millisecond,
		Version: req.Version,
		// A run found is read as its reply has it (writtenRunJSON), and
		// a key's input compared by the store: a start naming a run of
		// 15 MiB read it whole (red team, round nineteen). The input is
		// compact (parseStartRequest), as a key's first start kept it.
		ElideFound: true, SameInput: key != "",
	})
	if key != "" {
		switch {
		case errors.Is(err, store.ErrRunConflict) && req.Dedupe == "":
			err = fmt.Errorf("%w: this Idempotency-Key started a run of another workflow", store.ErrKeyReused)
		case errors.Is(err, store.ErrKeyReused):
			err = fmt.Errorf("%w: this Idempotency-Key started run %s with another input", store.ErrKeyReused, id)
		}
	}
	if err != nil {
		httpError(w, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/v1/runs/"+url.PathEscape(run.ID))
		if !s.metrics.runsStore {
			s.metrics.runs.started.Add(1)
		}
	}
	s.writeWritten(w, status, writtenRunJSON(run))
}

// parseStartRequest decodes and checks a POST /v1/runs body.
func parseStartRequest(body []byte) (*api.StartRequest, error) {
	var req api.StartRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if req.Workflow == "" {
		return nil, fmt.Errorf("%w: \"workflow\" is required", api.ErrBadRequest)
	}
	if req.ID != "" {
		if err := checkRunID(req.ID); err != nil {
			return nil, err
		}
	}
	if req.DebounceMS < 0 || req.DebounceMS > maxDebounceMS {
		return nil, fmt.Errorf("%w: \"debounce_ms\" %d, want 0 to %d", api.ErrBadRequest, req.DebounceMS, int64(maxDebounceMS))
	}
	if req.DebounceMaxMS < 0 || req.DebounceMaxMS > maxDebounceMS {
		return nil, fmt.Errorf("%w: \"debounce_max_ms\" %d, want 0 to %d", api.ErrBadRequest, req.DebounceMaxMS, int64(maxDebounceMS))
	}
	if len(req.Input) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, req.Input); err != nil {
			return nil, fmt.Errorf("%w: \"input\": %v", api.ErrBadRequest, err)
		}
		req.Input = buf.Bytes()
	}
	return &req, nil
}

// decodeJSON decodes one JSON object into v, refusing unknown fields and
// trailing data, with a one-line reason.
func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return fmt.Errorf("%w: empty body, want a JSON object", api.ErrBadRequest)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			if te.Field != "" {
				return fmt.Errorf("%w: field %q: want a %s, got a JSON %s", api.ErrBadRequest, te.Field, jsonKind(te.Type.Kind().String()), te.Value)
			}
			return fmt.Errorf("%w: want a JSON object, got a JSON %s", api.ErrBadRequest, te.Value)
		case errors.As(err, &se):
			return fmt.Errorf("%w: malformed JSON at byte %d: %v", api.ErrBadRequest, se.Offset, se)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return fmt.Errorf("%w: malformed JSON: unexpected end", api.ErrBadRequest)
		}
		return fmt.Errorf("%w: %v", api.ErrBadRequest, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: data after the JSON object", api.ErrBadRequest)
	}
	return nil
}

func jsonKind(k string) string {
	switch k {
	case "slice":
		return "JSON value"
	case "int64":
		return "number"
	}
	return k
}

// checkRunID refuses a run id the client chose (names.RunID: an id that
// sits in a URL as it is, and none weir mints).
func checkRunID(id string) error {
	if err := names.RunID(id); err != nil {
		return fmt.Errorf("%w: %w", api.ErrBadRequest, err)
	}
	return nil
}

// idempotentRunID is the run id an Idempotency-Key stands for.
func idempotentRunID(key string) string {
	h := sha256.Sum256([]byte("weir idempotency key\x00" + key))
	return "idem_" + hex.EncodeToString(h[:16])
}

// handleListRuns serves GET /v1/runs.
func (s *Server) handleListRuns(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "workflow", "status", "before", "limit", "id_prefix", "created_since", "created_before", "queue", "queued")
	if err != nil {
		httpError(w, err)
		return
	}
	p := &store.ListRunsParams{Workflow: q.Get("workflow"), Status: store.RunStatus(q.Get("status")), Before: q.Get("before"), IDPrefix: q.Get("id_prefix"),
		Queue: q.Get("queue")}
	switch v := q.Get("queued"); v {
	case "", "false":
	case "true":
		p.Queued = true
	default:
		httpError(w, fmt.Errorf("%w: queued=%q: want true or false", api.ErrBadRequest, v))
		return
	}
	for name, t := range map[string]*time.Time{"created_since": &p.CreatedSince, "created_before": &p.CreatedBefore} {
		if v := q.Get(name); v != "" {
			if *t, err = time.Parse(time.RFC3339Nano, v); err != nil {
				httpError(w, fmt.Errorf("%w: %s=%q: want a time in RFC 3339 (2026-12-02T15:04:05Z)", api.ErrBadRequest, name, v))
				return
			}
		}
	}
	if !p.CreatedSince.IsZero() && !p.CreatedBefore.IsZero() && !p.CreatedSince.Before(p.CreatedBefore) {
		httpError(w, fmt.Errorf("%w: created_since must be before created_before", api.ErrBadRequest))
		return
	}
	if p.Status != "" && !p.Status.Valid() {
		httpError(w, fmt.Errorf("%w: status=%q: want pending, running, completed, failed or cancelled", api.ErrBadRequest, p.Status))
		return
	}
	limit := defaultRunsLimit
	if v, ok := q["limit"]; ok {
		n, err := queryCount("limit", v[0], 1, maxRunsLimit)
		if err != nil {
			httpError(w, err)
			return
		}
		limit = n
	}
	// One more than asked tells whether there is a next page.
	p.Limit = limit + 1
	// The page is charged before it is read: its rows (a listed run
	// carries no value over store.MaxListedValue) and its reply, which
	// ends before maxRunsPageBytes as encoded. A request refused at the
	// budget has read nothing.
	reply := min(maxRunsPageBytes+maxListedRunJSON, int64(p.Limit)*maxListedRunJSON)
	h, ok := s.hold(w, int64(p.Limit)*listedRunBytes+2*reply)
	if !ok {
		return
	}
	runs, err := s.store.ListRuns(r.Context(), p)
	if errors.Is(err, store.ErrNotFound) && p.Before != "" {
		err = fmt.Errorf("%w: before=%q names no run", api.ErrBadRequest, p.Before)
	}
	if err != nil {
		_ = h.to(0)
		httpError(w, err)
		return
	}
	out := api.RunList{Runs: make([]api.Run, 0, min(len(runs), limit))}
	size := 0
	for i, run := range runs {
		if i == limit {
			out.NextCursor = runs[limit-1].ID
			break
		}
		// An error of control bytes is six times its size in JSON: the
		// page is bounded as sent, and a full one names the next.
		n := listedRunJSON(run)
		if i > 0 && size+n > maxRunsPageBytes {
			out.NextCursor = runs[i-1].ID
			break
		}
		size += n
		out.Runs = append(out.Runs, runJSON(run))
	}
	h.send(w, http.StatusOK, out)
}

const (
	// streamListBytes is what a run's stream list is charged before it
	// is read: its rows, its value and its JSON, for as many streams as a
	// client may make in a run (store.MaxRunWorldStreams) with the
	// longest names, paths and content types.
	streamListBytes = 3 * store.MaxRunWorldStreams * 2 << 10
	// maxRunsPageBytes bounds a page of GET /v1/runs as encoded: past it
	// the page ends early, with a next_cursor.
	maxRunsPageBytes = 4 << 20
	// listedRunBytes bounds a listed run's row in memory: its input,
	// output and error (store.MaxListedValue each; an error's characters
	// may be 4 bytes) and the rest.
	listedRunBytes = 6*store.MaxListedValue + 2<<10
	// maxListedRunJSON bounds one listed run's JSON: an error of 4 KiB
	// control bytes is 24 KiB, and so is a value that is not JSON (sent
	// as a string: rawJSON).
	maxListedRunJSON = 3*6*store.MaxListedValue + 8<<10
)

// listedRunJSON bounds r's JSON in a list: its values as they are (raw
// JSON) or as escaped strings (rawJSON), its texts as escaped
// (store.JSONStringBytes), and the rest.
func listedRunJSON(r *store.Run) int {
	value := func(b []byte) int {
		if len(b) == 0 || json.Valid(b) {
			return len(b)
		}
		return 6*len(b) + 2
	}
	return value(r.Input) + value(r.Output) + store.JSONStringBytes(r.Error) + store.JSONStringBytes(r.ID) +
		store.JSONStringBytes(r.Workflow) + store.JSONStringBytes(r.Queue) + store.JSONStringBytes(r.QueueKey) +
		store.JSONStringBytes(r.Version) + store.JSONStringBytes(r.Parent) + store.JSONStringBytes(r.Dedupe) + store.JSONStringBytes(r.Kind) + 1<<10
}

// handleGetRun serves GET /v1/runs/{id}.
func (s *Server) handleGetRun(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	// The run's size first: a run whose input and output are large is
	// read only once the budget has room for it (read, encoded, and its
	// encoding: three times its size while the reply is built).
	id := r.PathValue("id")
	run, size, err := s.store.GetRunWithin(r.Context(), id, inlineRun)
	if err != nil {
		httpError(w, err)
		return
	}
	h := &replyHold{s: s}
	if run.Elided {
		var ok bool
		if h, ok = s.hold(w, 3*size+64<<10); !ok {
			return
		}
		if run, err = s.store.GetRun(r.Context(), id); err != nil {
			_ = h.to(0)
			httpError(w, err)
			return
		}
	}
	h.send(w, http.StatusOK, runJSON(run))
}

// inlineRun is the largest input and output GET /v1/runs/{id} reads with
// the run's size: a larger run is read again once its reply is held.
const inlineRun = 64 << 10

// runHead reads the run of the request's path without its input and
// output, its error cut (store.RunsWithin with no room for values): what a
// route that needs its existence or status reads, so that a run of
// megabytes costs it nothing.
func (s *Server) runHead(r *http.Request) (*store.Run, error) {
	run, _, err := s.store.GetRunWithin(r.Context(), r.PathValue("id"), 0)
	return run, err
}

// handleEvents serves GET /v1/runs/{id}/events[?after=SEQ].
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "after", "limit")
	if err != nil {
		httpError(w, err)
		return
	}
	p := &store.ListEventsParams{RunID: r.PathValue("id"), Limit: store.MaxEventPage}
	if v, ok := q["after"]; ok {
		if p.After, err = queryInt("after", v[0], 0, math.MaxInt64); err != nil {
			httpError(w, err) // an event's seq
			return
		}
	}
	if v, ok := q["limit"]; ok {
		if p.Limit, err = queryCount("limit", v[0], 1, store.MaxEventPage); err != nil {
			httpError(w, err)
			return
		}
	}
	// A page is charged to the replies' budget before it is read: its rows
	// and its JSON are both in memory until the client took it, and a
	// page refused after it was built would have cost as much.
	h, ok := s.hold(w, int64(2*(store.MaxEventPageBytes+store.MaxMessagePayload))+1<<20)
	if !ok {
		return
	}
	page, err := s.store.ListEventsPage(r.Context(), p)
	if err != nil {
		_ = h.to(0)
		httpError(w, err)
		return
	}
	out := api.EventList{Events: make([]api.Event, len(page.Events)), More: page.More}
	for i := range page.Events {
		out.Events[i] = eventJSON(&page.Events[i])
	}
	if page.More && len(page.Events) > 0 {
		out.NextAfter = page.Events[len(page.Events)-1].Seq
	}
	h.send(w, http.StatusOK, out)
}

// handleCancel serves POST /v1/runs/{id}/cancel: 202 and the run, whose
// status turns cancelled once the engine has stopped it. Cancelling a
// finished run changes nothing (200).
func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	// 200 for a run that had already ended, 202 for one this request asked
	// to cancel: decided before the cancel, since the run may end as
	// cancelled before the reply is written.
	before, err := s.runHead(r)
	if err != nil {
		httpError(w, err)
		return
	}
	if before.Kind == store.KindWorld {
		pre, ok := s.holdWorldRunReads(w, r, before.ID, 4) // its reads, as a World cancel's
		if !ok {
			return
		}
		defer func() { _ = pre.to(0) }()
		if _, _, err := s.cancelWorldRun(r, before.ID); err != nil {
			s.worldError(w, err)
			return
		}
	} else if err := s.e.Cancel(r.Context(), before.ID); err != nil {
		httpError(w, err)
		return
	}
	// The reply carries no value over store.MaxListedValue
	// (writtenRunJSON): a run whose values are larger is read without
	// them (red team, round six: 64 concurrent cancels of an ended run of
	// 15 MiB read it whole each, +680 MB).
	run, _, err := s.store.GetRunWithin(r.Context(), before.ID, store.MaxListedValue)
	if err != nil {
		httpError(w, err)
		return
	}
	status := http.StatusAccepted
	if before.Status.Terminal() {
		status = http.StatusOK
	}
	s.writeWritten(w, status, writtenRunJSON(run))
}

// handleStreams serves GET /v1/runs/{id}/streams.
func (s *Server) handleStreams(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	run, err := s.runHead(r)
	if err != nil {
		httpError(w, err)
		return
	}
	// Charged before it is read, for a run's streams as a client may make
	// them (store.MaxRunWorldStreams, a name of up to 512 bytes each): a
	// request refused at the budget reads nothing.
	h, ok := s.hold(w, streamListBytes)
	if !ok {
		return
	}
	infos, err := s.store.ListStreams(r.Context(), run.ID)
	if err != nil {
		_ = h.to(0)
		httpError(w, err)
		return
	}
	out := api.StreamList{Streams: make([]api.StreamInfo, len(infos))}
	for i, in := range infos {
		out.Streams[i] = streamJSON(in)
	}
	h.send(w, http.StatusOK, out)
}

func streamJSON(in *store.StreamInfo) api.StreamInfo {
	return api.StreamInfo{
		Name: in.Name, Path: in.Path, ContentType: in.ContentType,
		NextOffset: in.NextOffset, Closed: in.Closed, CreatedAt: in.CreatedAt.UTC(), Bytes: in.DataBytes,
	}
}

// handleListStandalone serves GET /v1/streams: the standalone streams, by
// path, a page at a time (prefix=, after=, limit=).
func (s *Server) handleListStandalone(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "prefix", "after", "limit")
	if err != nil {
		httpError(w, err)
		return
	}
	p := &store.ListStandaloneParams{Prefix: q.Get("prefix"), After: q.Get("after"), Limit: store.DefaultListLimit}
	if v, ok := q["limit"]; ok {
		if p.Limit, err = queryCount("limit", v[0], 1, store.MaxListLimit); err != nil {
			httpError(w, err)
			return
		}
	}
	l, err := s.store.ListStandaloneStreams(r.Context(), p)
	if err != nil {
		httpError(w, err)
		return
	}
	out := api.StreamList{Streams: make([]api.StreamInfo, len(l.Streams)), NextCursor: l.Next}
	for i, in := range l.Streams {
		out.Streams[i] = streamJSON(in)
	}
	s.writeJSON(w, http.StatusOK, out)
}

// handleWorkflows serves GET /v1/workflows.
func (s *Server) handleWorkflows(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	s.writeJSON(w, http.StatusOK, api.WorkflowList{Workflows: s.e.Workflows()})
}

// handleUnknown answers every path nothing else serves.
// (404), or a known path with a method it does not take (405).
func (s *Server) handleUnknown(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		probe := &http.Request{Method: m, URL: r.URL, Host: r.Host, Header: http.Header{}}
		if _, pattern := s.mux.Handler(probe); pattern != "/" && pattern != "" {
			allow = append(allow, m)
			if m == http.MethodGet {
				allow = append(allow, http.MethodHead)
			}
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		httpError(w, fmt.Errorf("%w: %s %s: this path takes %s", api.ErrMethod, r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	httpError(w, fmt.Errorf("%w: %s", errUnknownPath, r.URL.Path))
}

// parseQuery parses r's query, refusing malformed ones, unknown and
// repeated parameters.
func parseQuery(r *http.Request, known ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("%w: malformed query: %v", api.ErrBadRequest, err)
	}
	for k, v := range q {
		ok := false
		for _, n := range known {
			ok = ok || k == n
		}
		if !ok {
			if len(known) == 0 {
				return nil, fmt.Errorf("%w: unknown query parameter %q: this endpoint takes none", api.ErrBadRequest, k)
			}
			return nil, fmt.Errorf("%w: unknown query parameter %q: want %s", api.ErrBadRequest, k, strings.Join(known, ", "))
		}
		if len(v) > 1 {
			return nil, fmt.Errorf("%w: query parameter %q given %d times", api.ErrBadRequest, k, len(v))
		}
	}
	return q, nil
}

// checkQuery refuses any query parameter.
func checkQuery(r *http.Request) error {
	if r.URL.RawQuery == "" {
		return nil
	}
	_, err := parseQuery(r)
	return err
}

// writeJSON writes v as a JSON reply, charged to MaxReplyBytes while the
// client takes it: a reply that does not fit is 503 busy.
func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	h := replyHold{s: s}
	h.send(w, status, v)
}

// replyHold is a reply's share of the replies' budget (MaxReplyBytes).
// A reply that may be large is charged before it is built (hold), so a
// request refused at the budget has read and encoded nothing; once built,
// it holds twice its encoding (the value it came from is live beside the
// bytes) until the client took it or the write timed out.
type replyHold struct {
	s *Server
	n int64
}

// busy is the refusal of a reply the budget cannot take.
func (h *replyHold) busy() error {
	return fmt.Errorf("%w: %d bytes of replies are held for clients reading them, the limit is %d: ask again shortly",
		api.ErrBusy, h.s.replies.inUse(), h.s.replies.max)
}

// to makes the hold n bytes: a hold that cannot grow is refused (busy),
// and keeps what it had.
func (h *replyHold) to(n int64) error {
	switch {
	case n > h.n:
		if !h.s.replies.take(n - h.n) {
			return h.busy()
		}
	case n < h.n:
		h.s.replies.give(h.n - n)
	}
	h.n = n
	return nil
}

// hold charges n bytes before a reply is built; false if the budget
// cannot take them, the request then answered 503 busy.
func (s *Server) hold(w http.ResponseWriter, n int64) (*replyHold, bool) {
	h := &replyHold{s: s}
	if err := h.to(n); err != nil {
		httpError(w, err)
		return nil, false
	}
	return h, true
}

// send writes v as a JSON reply and lets the hold go once it is sent.
// A small reply (4 KiB or less, what the server's buffer takes at once)
// holds nothing.
func (h *replyHold) send(w http.ResponseWriter, status int, v any) {
	defer func() { _ = h.to(0) }()
	b, err := encodeReply(v)
	if err != nil {
		httpError(w, err)
		return
	}
	need := int64(0)
	if len(b) > 4096 {
		need = 2 * int64(len(b))
	}
	if err := h.to(need); err != nil {
		httpError(w, err)
		return
	}
	sendJSON(w, status, b)
}

// sendWritten is send for the reply of a write that has committed: it is
// never refused at the budget, since a client told 503 busy would write
// again (and a start without an id would make a second run). It is
// charged all the same, past the limit if it must be: such a reply is
// small (a written run carries no input, output or error over 4 KiB:
// writtenRunJSON), so what writes take past the limit is bounded by the
// writes in flight.
func (h *replyHold) sendWritten(w http.ResponseWriter, status int, v any) {
	defer func() { _ = h.to(0) }()
	b, err := encodeReply(v)
	if err != nil {
		httpError(w, err)
		return
	}
	if need := 2 * int64(len(b)); len(b) > 4096 && need > h.n {
		h.s.replies.force(need - h.n)
		h.n = need
	}
	sendJSON(w, status, b)
}

// writeWritten writes v, the reply of a committed write (sendWritten).
func (s *Server) writeWritten(w http.ResponseWriter, status int, v any) {
	h := replyHold{s: s}
	h.sendWritten(w, status, v)
}

// encodeReply is v's JSON and a newline, with <, > and & as they are: a
// reply is served as application/json with nosniff, never into HTML, and
// json.Marshal's \u003c for each would make a stored value of those bytes
// six times its size in the reply, past what its hold was charged for.
func encodeReply(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// sendJSON writes b, a JSON reply, within writeTimeout.
func sendJSON(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	if len(b) <= 4096 {
		_, _ = w.Write(b) // fits the server's buffer: no waiting on the client here
		return
	}
	// The deadline stays on the connection for its next requests unless
	// lifted, and those may be long SSE reads.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, _ = w.Write(b)
	_ = rc.Flush()
	_ = rc.SetWriteDeadline(time.Time{})
}

// writeTimeout bounds writing one runs API reply.
var writeTimeout = 30 * time.Second

// traceContext is r's context with the trace its traceparent header names
// (W3C Trace Context), so that a run started by r is a span of the
// caller's trace. A malformed header is ignored, with a debug log: the
// run gets a trace of its own.
func (s *Server) traceContext(r *http.Request) context.Context {
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	if h := r.Header.Get("traceparent"); h != "" && !trace.SpanContextFromContext(ctx).IsValid() {
		s.log.Debug("weir server: a malformed traceparent is ignored", "traceparent", h)
	}
	return ctx
}

// handleMigrate serves POST /v1/runs/migrate: the runs in flight of one
// application version move to another, knowingly (store.MigrateRuns). The
// reply says how many moved and lists at most api.MaxMigratedListed.
func (s *Server) handleMigrate(w http.ResponseWriter, r *http.Request) {
	var in api.MigrateRequest
	if err := readJSON(w, r, 1<<20, &in); err != nil {
		httpError(w, err)
		return
	}
	p := &store.MigrateRunsParams{From: in.From, To: in.To, RunIDs: in.Runs}
	ids, err := s.store.MigrateRuns(r.Context(), p)
	if err != nil {
		httpError(w, err)
		return
	}
	s.writeWritten(w, http.StatusOK, migrateReply(ids))
}

// migrateReply is the reply of a migration that moved ids (sorted): their
// count and the first api.MaxMigratedListed of them.
func migrateReply(ids []string) api.MigrateReply {
	out := api.MigrateReply{Count: len(ids), Migrated: ids[:min(len(ids), api.MaxMigratedListed)]}
	out.More = len(out.Migrated) < len(ids)
	if out.Migrated == nil {
		out.Migrated = []string{} // "migrated": [], not null
	}
	return out
}

// A fork (or a retry, a fork from a step) reads its source's whole log
// with its payloads, plans from it and writes the events it keeps, which a
// driver encodes again: about nine times the log's bytes at its height on
// PostgreSQL (red-team round ten: 16 concurrent forks of a run with a full
// 16 MiB inbox took a server past 2 GB). A resume reads the log once.
const (
	forkLogReads   = 10
	resumeLogReads = 2
)

// holdLog charges k reads of the logs of runs (their events' data, by
// store.LogSizer) to the replies' budget before a fork, a retry or a
// resume reads them; false if the budget cannot take them (answered 503
// busy on w, nothing read). Logs whose reads pass the whole budget hold
// all of it: they are served alone.
func (s *Server) holdLog(w http.ResponseWriter, r *http.Request, k int64, runs ...string) (*replyHold, bool) {
	for _, run := range runs {
		if err := store.CheckRunID(run); err != nil {
			httpError(w, err)
			return nil, false
		}
	}
	ls, ok := store.LogSizerOf(s.store)
	if !ok {
		return &replyHold{s: s}, true
	}
	var n int64
	for _, run := range runs {
		b, err := ls.LogBytes(r.Context(), run)
		if err != nil {
			httpError(w, err)
			return nil, false
		}
		n += b
	}
	if n == 0 {
		return &replyHold{s: s}, true
	}
	return s.hold(w, min(k*n+64<<10, s.replies.max))
}

// handleFork serves POST /v1/runs/{id}/fork: 201 with the fork, pending
// (or, for a fork made before with the same id and point, as it is now).
func (s *Server) handleFork(w http.ResponseWriter, r *http.Request) {
	var in api.ForkRequest
	if err := readJSON(w, r, 2<<20, &in); err != nil {
		httpError(w, err)
		return
	}
	if in.ID != "" {
		if err := checkRunID(in.ID); err != nil {
			httpError(w, err)
			return
		}
	}
	// A fork named with an id that is a fork already is compared with it,
	// whose log is read too (red-team round eleven: a "same fork" of a
	// fork with a full inbox went past the hold of its small source).
	// What the fork would refuse is refused before the hold, from the
	// run's head and its log's outline (red team, round twenty).
	opts := weir.ForkOptions{ID: in.ID, Op: in.Op, Step: in.Step, Input: in.Input, Version: in.Version}
	if err := s.e.CheckFork(r.Context(), r.PathValue("id"), opts); err != nil {
		httpError(w, err)
		return
	}
	logs := []string{r.PathValue("id")}
	if in.ID != "" {
		logs = append(logs, in.ID)
	}
	h, ok := s.holdLog(w, r, forkLogReads, logs...)
	if !ok {
		return
	}
	defer func() { _ = h.to(0) }()
	run, err := s.e.Fork(r.Context(), r.PathValue("id"), opts)
	if err != nil {
		httpError(w, err)
		return
	}
	s.writeWritten(w, http.StatusCreated, writtenRunJSON(run))
}

// handleRetry serves POST /v1/runs/{id}/retry: a fork from a step (by
// default the one whose failure ended the run), 201 with the fork.
func (s *Server) handleRetry(w http.ResponseWriter, r *http.Request) {
	var in api.RetryRequest
	if err := readJSON(w, r, 1<<10, &in); err != nil {
		httpError(w, err)
		return
	}
	if err := s.e.CheckRetry(r.Context(), r.PathValue("id"), in.Step); err != nil {
		httpError(w, err)
		return
	}
	h, ok := s.holdLog(w, r, forkLogReads, r.PathValue("id"))
	if !ok {
		return
	}
	defer func() { _ = h.to(0) }()
	run, err := s.e.RetryFrom(r.Context(), r.PathValue("id"), in.Step)
	if err != nil {
		httpError(w, err)
		return
	}
	s.writeWritten(w, http.StatusCreated, writtenRunJSON(run))
}

// handleResume serves POST /v1/runs/{id}/resume: 202 with the run, pending
// again; 409 for a run that did not fail and was not cancelled.
func (s *Server) handleResume(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	// A resume takes no options: a body is empty or {}, so that a client
	// that meant a fork's (an id, a step) is told, not resumed.
	body, err := readBody(w, r, 1<<10)
	if err != nil {
		httpError(w, err)
		return
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := decodeJSON(body, &struct{}{}); err != nil {
			httpError(w, fmt.Errorf("%w (a resume takes no options)", err))
			return
		}
	}
	if err := s.e.CheckResume(r.Context(), r.PathValue("id")); err != nil {
		httpError(w, err)
		return
	}
	h, ok := s.holdLog(w, r, resumeLogReads, r.PathValue("id"))
	if !ok {
		return
	}
	defer func() { _ = h.to(0) }()
	run, err := s.e.Resume(r.Context(), r.PathValue("id"))
	if err != nil {
		httpError(w, err)
		return
	}
	s.writeWritten(w, http.StatusAccepted, writtenRunJSON(run))
}
