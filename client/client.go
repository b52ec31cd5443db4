// Package client is a Go client of a weir server (`weir server`, or any
// program that mounts api.Server): the runs API (start, get, list, event
// log, cancel, streams, workflows) and a stream reader that resumes from an
// offset and follows live by long-poll or SSE, over the Durable Streams
// protocol with weir's extensions.
//
//	c, err := client.New("http://127.0.0.1:4437", &client.Options{Token: os.Getenv("WEIR_TOKEN")})
//	run, _, err := c.Start(ctx, "demo.tokens", map[string]any{"text": "hello there"}, nil)
//	for rec, err := range c.Read(ctx, run.ID, "tokens", &client.ReadOptions{Follow: true}) {
//		...
//	}
//
// Errors are *Error; errors.Is matches them to the sentinel the server named
// (package api's table: store.ErrNotFound, stream.ErrFenced, …, which
// package weir re-exports), and errors.As to the typed errors that carry
// what a writer needs to go on (*stream.FencedError, *stream.GapError, …).
//
// The client imports only the leaf packages api, store and stream: a
// program that only talks to a weir server links neither the engine nor a
// store backend.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
)

// The runs API's types, shared with the api.
type (
	Run        = api.Run
	RunList    = api.RunList
	Event      = api.Event
	StreamInfo = api.StreamInfo
)

// DefaultURL is where `weir server` listens by default.
const DefaultURL = "http://127.0.0.1:4437"

// Options configures a Client. nil means the zero value.
type Options struct {
	// Token is the server's bearer token, sent with every request if set.
	Token string
	// HTTPClient sends the requests. Defaults to a client with no overall
	// timeout (live reads are long) on http.DefaultTransport.
	HTTPClient *http.Client
	// UserAgent is sent with every request. Defaults to "weir-go-client".
	UserAgent string
}

// Client talks to one weir api. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	token string
	ua    string
	hc    *http.Client
}

// New returns a client of the server at baseURL (e.g.
// "http://127.0.0.1:4437").
func New(baseURL string, opts *Options) (*Client, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: server URL %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("client: server URL %q: want http(s)://host[:port]", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("client: server URL %q: no query or fragment, please", baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	if o.UserAgent == "" {
		o.UserAgent = "weir-go-client"
	}
	return &Client{base: u, token: o.Token, ua: o.UserAgent, hc: o.HTTPClient}, nil
}

// URL returns the server's base URL.
func (c *Client) URL() string { return c.base.String() }

// StartOptions are optional settings of Start.
type StartOptions struct {
	// ID is the run's id: starting with an id that exists returns that run.
	ID string
	// IdempotencyKey makes retries of this start safe: the same key returns
	// the same run; the same key with another workflow or input is refused
	// (store.ErrKeyReused). Exclusive with ID.
	IdempotencyKey string
	// Queue, QueueKey, Priority, Dedupe and Debounce start the run in a
	// queue (weir.StartOptions): a start Dedupe folds returns the run it
	// folded into (created false, its own id).
	Queue, QueueKey string
	Priority        int
	Dedupe          string
	Debounce        time.Duration
	// DebounceMax caps how long a burst of starts postpones the run.
	DebounceMax time.Duration
	// Version is the application version the run is for (weir.StartOptions).
	Version string
}

// Start starts a run of workflow with input (encoded as JSON; a
// json.RawMessage passes as it is). created is false if the run existed
// (same ID or IdempotencyKey). An unknown workflow matches
// api.ErrUnknownWorkflow (weir.ErrUnknownWorkflow).
func (c *Client) Start(ctx context.Context, workflow string, input any, opts *StartOptions) (run *Run, created bool, err error) {
	var o StartOptions
	if opts != nil {
		o = *opts
	}
	req := api.StartRequest{Workflow: workflow, ID: o.ID, Queue: o.Queue, QueueKey: o.QueueKey, Priority: o.Priority,
		Dedupe: o.Dedupe, DebounceMS: o.Debounce.Milliseconds(), DebounceMaxMS: o.DebounceMax.Milliseconds(), Version: o.Version}
	if input != nil {
		b, err := json.Marshal(input)
		if err != nil {
			return nil, false, fmt.Errorf("client: encode input: %w", err)
		}
		req.Input = b
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, false, err
	}
	h := http.Header{"Content-Type": {"application/json"}}
	if o.IdempotencyKey != "" {
		h.Set("Idempotency-Key", o.IdempotencyKey)
	}
	var out Run
	status, err := c.doJSON(ctx, http.MethodPost, "/v1/runs", nil, h, body, &out)
	if err != nil {
		return nil, false, err
	}
	return &out, status == http.StatusCreated, nil
}

// GetRun returns a run. An unknown run matches store.ErrNotFound
// (weir.ErrNotFound).
func (c *Client) GetRun(ctx context.Context, id string) (*Run, error) {
	var out Run
	if _, err := c.doJSON(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListOptions filter ListRuns.
type ListOptions struct {
	Workflow string          // empty: any
	Status   store.RunStatus // empty: any
	Before   string          // a page's NextCursor: the runs after it
	Limit    int             // 0: the server's default (50); at most 1000
	IDPrefix string          // only runs whose id begins with it; empty: any
	// CreatedSince and CreatedBefore bound the runs' creation time (at or
	// after, before). Zero: no bound.
	CreatedSince, CreatedBefore time.Time
	// Queue: only runs started in this queue; empty: any.
	Queue string
	// Queued: only runs still waiting in their queue.
	Queued bool
}

// ListRuns returns one page of runs, newest first; its NextCursor, if set,
// is the next page's ListOptions.Before.
func (c *Client) ListRuns(ctx context.Context, opts *ListOptions) (*RunList, error) {
	q := url.Values{}
	if opts != nil {
		if opts.Workflow != "" {
			q.Set("workflow", opts.Workflow)
		}
		if opts.Status != "" {
			q.Set("status", string(opts.Status))
		}
		if opts.Before != "" {
			q.Set("before", opts.Before)
		}
		if opts.Limit != 0 {
			q.Set("limit", strconv.Itoa(opts.Limit))
		}
		if opts.IDPrefix != "" {
			q.Set("id_prefix", opts.IDPrefix)
		}
		if !opts.CreatedSince.IsZero() {
			q.Set("created_since", opts.CreatedSince.UTC().Format(time.RFC3339Nano))
		}
		if !opts.CreatedBefore.IsZero() {
			q.Set("created_before", opts.CreatedBefore.UTC().Format(time.RFC3339Nano))
		}
		if opts.Queue != "" {
			q.Set("queue", opts.Queue)
		}
		if opts.Queued {
			q.Set("queued", "true")
		}
	}
	var out RunList
	if _, err := c.doJSON(ctx, http.MethodGet, "/v1/runs", q, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Runs iterates over every run matching opts, newest first, page by page.
func (c *Client) Runs(ctx context.Context, opts *ListOptions) iter.Seq2[Run, error] {
	return func(yield func(Run, error) bool) {
		var o ListOptions
		if opts != nil {
			o = *opts
		}
		for {
			page, err := c.ListRuns(ctx, &o)
			if err != nil {
				yield(Run{}, err)
				return
			}
			for _, r := range page.Runs {
				if !yield(r, nil) {
					return
				}
			}
			if page.NextCursor == "" {
				return
			}
			o.Before = page.NextCursor
		}
	}
}

// Events returns a run's event log after seq after (0: all of it).
func (c *Client) Events(ctx context.Context, id string, after int64) ([]Event, error) {
	var all []Event
	for {
		var q url.Values
		if after > 0 {
			q = url.Values{"after": {strconv.FormatInt(after, 10)}}
		}
		var out api.EventList
		if _, err := c.doJSON(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/events", q, nil, nil, &out); err != nil {
			return nil, err
		}
		all = append(all, out.Events...)
		// The server answers a page at a time (EventList.More).
		if !out.More || out.NextAfter <= after {
			return all, nil
		}
		after = out.NextAfter
	}
}

// WorldEvents returns the whole event log of a World run (a Vercel
// Workflow run on weir's World), oldest first.
func (c *Client) WorldEvents(ctx context.Context, id string) ([]api.WorldEvent, error) {
	var out []api.WorldEvent
	q := url.Values{"limit": {"1000"}}
	for {
		var page api.WorldEventPage
		if _, err := c.doJSON(ctx, http.MethodGet, "/v1/world/runs/"+url.PathEscape(id)+"/events", q, nil, nil, &page); err != nil {
			return nil, err
		}
		out = append(out, page.Data...)
		if !page.HasMore || page.Cursor == nil {
			return out, nil
		}
		q.Set("cursor", *page.Cursor)
	}
}

// WorldMessages lists the World queue's messages in state "pending" or
// "dead" (the dead letters), of one run if runID is not empty: what weir
// has yet to deliver to an app, and why it could not so far.
func (c *Client) WorldMessages(ctx context.Context, state, runID string) ([]api.WorldMessage, error) {
	q := url.Values{"state": {state}, "limit": {"1000"}}
	if runID != "" {
		q.Set("runId", runID)
	}
	var out api.WorldMessageList
	if _, err := c.doJSON(ctx, http.MethodGet, "/v1/world/queue", q, nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Messages, nil
}

// Cancel asks for a run to be cancelled and returns it as it is now (its
// status turns cancelled once the engine has stopped it; see Wait).
// Cancelling a finished run changes nothing.
func (c *Client) Cancel(ctx context.Context, id string) (*Run, error) {
	var out Run
	if _, err := c.doJSON(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(id)+"/cancel", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Streams returns the streams of a run, by name.
func (c *Client) Streams(ctx context.Context, id string) ([]StreamInfo, error) {
	var out api.StreamList
	if _, err := c.doJSON(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/streams", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Streams, nil
}

// DeliverOptions are optional settings of DeliverHook.
type DeliverOptions struct {
	// IdempotencyKey makes the delivery idempotent: sent again with the
	// same key and payload it is answered as the first time (Duplicate).
	IdempotencyKey string
	// Close closes the hook with the delivery (its last payload; a nil
	// payload closes it alone).
	Close bool
}

// HookDelivery is the reply to a delivery.
type HookDelivery = store.HookDelivery

// DeliverHook delivers payload (JSON, at most 1 MiB) to the hook holding
// token (POST /v1/hooks/{token}). Errors match weir.ErrNotFound (no such
// hook), store.ErrGone (disposed, or its run ended), store.ErrKeyReused,
// store.ErrTooLarge.
func (c *Client) DeliverHook(ctx context.Context, token string, payload json.RawMessage, opts *DeliverOptions) (*HookDelivery, error) {
	h := http.Header{"Content-Type": {"application/json"}}
	var q url.Values
	if opts != nil && opts.IdempotencyKey != "" {
		h.Set("Idempotency-Key", opts.IdempotencyKey)
	}
	if opts != nil && opts.Close {
		q = url.Values{"close": {"true"}}
	}
	var out HookDelivery
	if _, err := c.doJSON(ctx, http.MethodPost, "/v1/hooks/"+url.PathEscape(token), q, h, payload, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Hooks returns the hooks of a run, by op.
func (c *Client) Hooks(ctx context.Context, id string) ([]api.Hook, error) {
	var out api.HookList
	if _, err := c.doJSON(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/hooks", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Hooks, nil
}

// StandaloneOptions filters StandaloneStreams.
type StandaloneOptions struct {
	Prefix string // only paths that start with it
	After  string // a cursor: StandaloneList.NextCursor of the page before
	Limit  int    // 0: the server's default (100); at most 1000
}

// StandaloneStreams returns a page of the server's standalone streams (the
// Durable Streams protocol's), by path.
func (c *Client) StandaloneStreams(ctx context.Context, opts *StandaloneOptions) (*api.StreamList, error) {
	q := url.Values{}
	if opts != nil {
		if opts.Prefix != "" {
			q.Set("prefix", opts.Prefix)
		}
		if opts.After != "" {
			q.Set("after", opts.After)
		}
		if opts.Limit > 0 {
			q.Set("limit", strconv.Itoa(opts.Limit))
		}
	}
	var out api.StreamList
	if _, err := c.doJSON(ctx, http.MethodGet, "/v1/streams", q, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SendOptions are optional settings of SendMessage.
type SendOptions struct {
	// IdempotencyKey makes the message idempotent: sent again with the
	// same key, topic and payload it is answered as the first time
	// (Duplicate) and adds nothing.
	IdempotencyKey string
}

// SendMessage sends payload (JSON, at most 1 MiB) to run id on topic
// (POST /v1/runs/{id}/messages/{topic}): it is kept in the run's log until
// the run takes it (weir.Recv). Errors match weir.ErrNotFound (no such
// run), store.ErrGone (the run ended), store.ErrKeyReused,
// store.ErrTooLarge, store.ErrInvalid.
func (c *Client) SendMessage(ctx context.Context, id, topic string, payload json.RawMessage, opts *SendOptions) (*api.MessageSent, error) {
	if err := store.CheckTopic("topic", topic); err != nil {
		return nil, fmt.Errorf("client: send message: %w", err)
	}
	h := http.Header{"Content-Type": {"application/json"}}
	if opts != nil && opts.IdempotencyKey != "" {
		h.Set("Idempotency-Key", opts.IdempotencyKey)
	}
	var out api.MessageSent
	if _, err := c.doJSON(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(id)+"/messages/"+url.PathEscape(topic), nil, h, payload, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// EventOptions are optional settings of GetEvent.
type EventOptions struct {
	// Wait, if positive, waits up to this long (the server allows 60s)
	// for a value newer than After; none came: GetEvent returns nil, nil.
	Wait  time.Duration
	After int64
}

// GetEvent returns run event key's latest value in run id (GET
// /v1/runs/{id}/events/{key}), or with Wait the next one after After
// (nil if none came in time). Errors match weir.ErrNotFound: no such run,
// a key never set, or a run that ended without a newer value.
func (c *Client) GetEvent(ctx context.Context, id, key string, opts *EventOptions) (*api.RunEvent, error) {
	if err := store.CheckTopic("run event key", key); err != nil {
		return nil, fmt.Errorf("client: get event: %w", err)
	}
	var q url.Values
	if opts != nil && opts.Wait > 0 {
		q = url.Values{"wait": {opts.Wait.String()}, "after": {strconv.FormatInt(opts.After, 10)}}
	}
	var out api.RunEvent
	status, err := c.doJSON(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/events/"+url.PathEscape(key), q, nil, nil, &out)
	if err != nil {
		return nil, err
	}
	if status == http.StatusNoContent {
		return nil, nil
	}
	return &out, nil
}

// State returns the run events run id published (latest values) and the
// messages sent to it, by topic (GET /v1/runs/{id}/state).
func (c *Client) State(ctx context.Context, id string) (*api.RunState, error) {
	var out api.RunState
	if _, err := c.doJSON(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/state", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Waiting returns what run id waits on now (GET /v1/runs/{id}/waiting): a
// worker, a running step, a retry's backoff, a timer, a hook, a child.
func (c *Client) Waiting(ctx context.Context, id string) (*api.Waiting, error) {
	var out api.Waiting
	if _, err := c.doJSON(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/waiting", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Limiters returns the server's limiters with their state (GET
// /v1/limiters, every page).
func (c *Client) Limiters(ctx context.Context) ([]api.Limiter, error) {
	return pagesByName(ctx, c, "/v1/limiters", func(l *api.LimiterList) ([]api.Limiter, bool, string) {
		return l.Limiters, l.More, l.NextAfter
	})
}

// pagesByName reads every page of a list paged by name (?after=, and
// more and next_after in each reply); a cursor that does not move on ends
// it, so that a server's mistake cannot loop a client.
func pagesByName[L, T any](ctx context.Context, c *Client, path string, page func(*L) (items []T, more bool, next string)) ([]T, error) {
	var all []T
	after := ""
	for {
		var q url.Values
		if after != "" {
			q = url.Values{"after": {after}}
		}
		var out L
		if _, err := c.doJSON(ctx, http.MethodGet, path, q, nil, nil, &out); err != nil {
			return nil, err
		}
		items, more, next := page(&out)
		all = append(all, items...)
		if !more || next <= after {
			return all, nil
		}
		after = next
	}
}

// Limiter returns one limiter with its state (GET /v1/limiters/{name}).
func (c *Client) Limiter(ctx context.Context, name string) (*api.Limiter, error) {
	var out api.Limiter
	if _, err := c.doJSON(ctx, http.MethodGet, "/v1/limiters/"+url.PathEscape(name), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetLimiter creates limiter l.Name or changes its bounds (PUT
// /v1/limiters/{name}); every process on the server's store keeps to them
// from its next request.
func (c *Client) SetLimiter(ctx context.Context, l *api.Limiter) (*api.Limiter, error) {
	body, err := json.Marshal(api.Limiter{Concurrency: l.Concurrency, PerKey: l.PerKey, Rate: l.Rate, Budget: l.Budget, Period: l.Period})
	if err != nil {
		return nil, err
	}
	var out api.Limiter
	h := http.Header{"Content-Type": {"application/json"}}
	if _, err := c.doJSON(ctx, http.MethodPut, "/v1/limiters/"+url.PathEscape(l.Name), nil, h, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteLimiter deletes a limiter nothing uses (DELETE
// /v1/limiters/{name}): a slot held, someone in line or a run queued in it
// is a conflict (Weir-Error limiter_in_use).
func (c *Client) DeleteLimiter(ctx context.Context, name string) error {
	_, err := c.doJSON(ctx, http.MethodDelete, "/v1/limiters/"+url.PathEscape(name), nil, nil, nil, nil)
	return err
}

// Workflows returns the names of the workflows the server can start.
func (c *Client) Workflows(ctx context.Context) ([]string, error) {
	var out api.WorkflowList
	if _, err := c.doJSON(ctx, http.MethodGet, "/v1/workflows", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Workflows, nil
}

// Wait polls a run until it ends (or ctx does) and returns it.
func (c *Client) Wait(ctx context.Context, id string) (*Run, error) {
	delay := 10 * time.Millisecond
	for {
		r, err := c.GetRun(ctx, id)
		if err != nil {
			return nil, err
		}
		if r.Status.Terminal() {
			return r, nil
		}
		if err := sleep(ctx, delay); err != nil {
			return nil, err
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// Health returns nil if the server answers /healthz with 200.
func (c *Client) Health(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errorFrom(resp)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// maxReplyBytes bounds a runs API reply the client reads.
const maxReplyBytes = 256 << 20

// doJSON sends a request and decodes a 2xx JSON reply into out.
func (c *Client) doJSON(ctx context.Context, method, path string, q url.Values, h http.Header, body []byte, out any) (int, error) {
	resp, err := c.do(ctx, method, path, q, h, body)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, errorFrom(resp)
	}
	if resp.StatusCode == http.StatusNoContent {
		return resp.StatusCode, nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("client: %s %s: reading the reply: %w", method, path, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return resp.StatusCode, fmt.Errorf("client: %s %s: decoding the reply: %w", method, path, err)
	}
	return resp.StatusCode, nil
}

// do sends one request to the server; path is already escaped.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, h http.Header, body []byte) (*http.Response, error) {
	u := *c.base
	raw := c.base.EscapedPath() + path
	p, err := url.PathUnescape(raw)
	if err != nil {
		return nil, fmt.Errorf("client: path %q: %w", raw, err)
	}
	u.Path, u.RawPath = p, raw
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", c.ua)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Schedules returns every schedule (GET /v1/schedules), by name, asking
// for them a page at a time.
func (c *Client) Schedules(ctx context.Context) ([]api.Schedule, error) {
	return pagesByName(ctx, c, "/v1/schedules", func(l *api.ScheduleList) ([]api.Schedule, bool, string) {
		return l.Schedules, l.More, l.NextAfter
	})
}

// Schedule returns one schedule (GET /v1/schedules/{name}).
func (c *Client) Schedule(ctx context.Context, name string) (*api.Schedule, error) {
	var out api.Schedule
	if _, err := c.doJSON(ctx, http.MethodGet, "/v1/schedules/"+url.PathEscape(name), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetSchedule creates schedule sc.Name or changes it (PUT
// /v1/schedules/{name}): its configuration fields are sent.
func (c *Client) SetSchedule(ctx context.Context, sc *api.Schedule) (*api.Schedule, error) {
	body, err := json.Marshal(api.Schedule{Workflow: sc.Workflow, Input: sc.Input, Spec: sc.Spec, TZ: sc.TZ, Overlap: sc.Overlap,
		Backfill: sc.Backfill, Paused: sc.Paused})
	if err != nil {
		return nil, err
	}
	var out api.Schedule
	h := http.Header{"Content-Type": {"application/json"}}
	if _, err := c.doJSON(ctx, http.MethodPut, "/v1/schedules/"+url.PathEscape(sc.Name), nil, h, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PauseSchedule pauses schedule name, keeping the rest of it (POST
// /v1/schedules/{name}/pause): no tick starts until it is resumed, and the
// ticks meanwhile never do. ErrNotFound if there is none.
func (c *Client) PauseSchedule(ctx context.Context, name string) (*api.Schedule, error) {
	return c.pauseSchedule(ctx, name, "pause")
}

// ResumeSchedule resumes a paused schedule (POST
// /v1/schedules/{name}/resume): its ticks start from now.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (*api.Schedule, error) {
	return c.pauseSchedule(ctx, name, "resume")
}

func (c *Client) pauseSchedule(ctx context.Context, name, verb string) (*api.Schedule, error) {
	var out api.Schedule
	if _, err := c.doJSON(ctx, http.MethodPost, "/v1/schedules/"+url.PathEscape(name)+"/"+verb, nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteSchedule deletes a schedule (DELETE /v1/schedules/{name}); the runs
// it started are kept.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	_, err := c.doJSON(ctx, http.MethodDelete, "/v1/schedules/"+url.PathEscape(name), nil, nil, nil, nil)
	return err
}

// Migrated is what MigrateRuns moved: how many runs (Count), the first
// api.MaxMigratedListed of them by id (Migrated), and whether more moved
// than it lists (More).
type Migrated = api.MigrateReply

// MigrateRuns moves the runs in flight of application version from (those
// of ids, if any) to version to (POST /v1/runs/migrate), and says how many
// it moved, listing at most api.MaxMigratedListed of them.
func (c *Client) MigrateRuns(ctx context.Context, from, to string, ids ...string) (*Migrated, error) {
	body, err := json.Marshal(api.MigrateRequest{From: from, To: to, Runs: ids})
	if err != nil {
		return nil, err
	}
	var out Migrated
	h := http.Header{"Content-Type": {"application/json"}}
	if _, err := c.doJSON(ctx, http.MethodPost, "/v1/runs/migrate", nil, h, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ForkOptions say where a fork begins (api.ForkRequest): Op, the first
// operation it runs again (1-based), or Step, the first step of that name.
type ForkOptions = api.ForkRequest

// Fork starts a new run from run id's operation o.Op (or step o.Step): it
// replays the operations before it and its streams begin with their
// committed output (weir.Engine.Fork). A bad fork point is an error
// matching ErrInvalid (400).
func (c *Client) Fork(ctx context.Context, id string, o ForkOptions) (*Run, error) {
	return c.postRun(ctx, "/v1/runs/"+url.PathEscape(id)+"/fork", o)
}

// RetryFrom forks run id from its step named step, or, with step "", from
// the step whose failure ended it.
func (c *Client) RetryFrom(ctx context.Context, id, step string) (*Run, error) {
	return c.postRun(ctx, "/v1/runs/"+url.PathEscape(id)+"/retry", api.RetryRequest{Step: step})
}

// Resume makes a failed or cancelled run run again, with its id and history
// (weir.Engine.Resume). A run that did not fail and was not cancelled is
// a 409 error.
func (c *Client) Resume(ctx context.Context, id string) (*Run, error) {
	var out Run
	if _, err := c.doJSON(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(id)+"/resume", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (c *Client) postRun(ctx context.Context, path string, in any) (*Run, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	var out Run
	h := http.Header{"Content-Type": {"application/json"}}
	if _, err := c.doJSON(ctx, http.MethodPost, path, nil, h, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
