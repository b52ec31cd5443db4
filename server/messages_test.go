package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
)

// POST /v1/runs/{id}/messages/{topic}, GET /v1/runs/{id}/events/{key} and
// GET /v1/runs/{id}/state over HTTP, on both stores: a message kept and
// taken once (a re-sent one answers the first reply), a run event read and
// waited for, and every bad request refused with its status and code,
// changing nothing.
func TestMessagesAndRunEventsOverHTTP(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		gate := make(chan struct{})
		open := sync.OnceFunc(func() { close(gate) })
		defer open() // a failure must not leave the run blocked
		wf := weir.Register(d.e, "chat", func(ctx weir.Context, _ int) (string, error) {
			if err := weir.SetEvent(ctx, "status", "waiting"); err != nil {
				return "", err
			}
			<-gate // holds the run open, deaf: it only waits for the test
			m, err := weir.Recv[map[string]string](ctx, "user")
			if err != nil {
				return "", err
			}
			return m["text"], weir.SetEvent(ctx, "status", "answered")
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.e.Work(ctx); err != nil {
			t.Fatal(err)
		}
		run, err := wf.Start(ctx, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		path := "/v1/runs/" + run.ID
		jsonHdr := []string{"Content-Type", "application/json"}
		logLen := func() int {
			evs, err := d.st.ListEvents(ctx, run.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			return len(evs)
		}
		eventually(t, "the first status", func() bool { return d.runsCall("GET", path+"/events/status").status == http.StatusOK })
		var ev api.RunEvent
		if err := json.Unmarshal(d.runsCall("GET", path+"/events/status").must(t, http.StatusOK).body, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Key != "status" || string(ev.Value) != `"waiting"` || ev.Seq == 0 {
			t.Fatalf("run event %+v", ev)
		}
		before := logLen()
		for _, tc := range []struct {
			path string
			body string
			hdr  []string
			code int
			wire string
		}{
			{"/v1/runs/nope/messages/user", `1`, jsonHdr, http.StatusNotFound, "not_found"},
			{path + "/messages/bad%FFtopic", `1`, jsonHdr, http.StatusBadRequest, "invalid_name"},
			{path + "/messages/" + strings.Repeat("t", store.MaxTopicLen+1), `1`, jsonHdr, http.StatusBadRequest, "invalid_name"},
			{path + "/messages/a%0D%0Ab", `1`, jsonHdr, http.StatusBadRequest, "invalid_name"},
			{path + "/messages/a%01b", `1`, jsonHdr, http.StatusBadRequest, "invalid_name"},
			{path + "/messages/user", `{"text":`, jsonHdr, http.StatusBadRequest, "invalid"},
			{path + "/messages/user", `{"text":"hi"}`, []string{"Content-Type", "text/plain"}, http.StatusUnsupportedMediaType, "unsupported_media_type"},
			{path + "/messages/user?x=1", `{"text":"hi"}`, jsonHdr, http.StatusBadRequest, "bad_request"},
			{path + "/messages/user", `{"text":"hi"}`, append(jsonHdr, "Origin", "https://evil.example"), http.StatusForbidden, "forbidden"},
		} {
			r := d.post(tc.path, []byte(tc.body), tc.hdr...)
			if r.status != tc.code || r.h.Get(api.ErrorHeader) != tc.wire {
				t.Errorf("POST %s: %d %s %q, want %d %s", clip(tc.path), r.status, r.h.Get(api.ErrorHeader), r.body, tc.code, tc.wire)
			}
		}
		// Too large: refused on its headers, unread.
		conn, err := net.Dial("tcp", d.ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST %s/messages/user HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, store.MaxMessagePayload+1)
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || resp.Header.Get(api.ErrorHeader) != "too_large" {
			t.Fatalf("a message over the limit: %d %s", resp.StatusCode, resp.Header.Get(api.ErrorHeader))
		}
		if n := logLen(); n != before {
			t.Fatalf("refused messages changed the run's log: %d events, then %d", before, n)
		}
		keyed := append(jsonHdr, "Idempotency-Key", "m1")
		var first, again api.MessageSent
		if err := json.Unmarshal(d.post(path+"/messages/user", []byte(`{"text":"hi"}`), keyed...).must(t, http.StatusOK).body, &first); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(d.post(path+"/messages/user", []byte(`{"text":"hi"}`), keyed...).must(t, http.StatusOK).body, &again); err != nil {
			t.Fatal(err)
		}
		if first.RunID != run.ID || first.Topic != "user" || first.Duplicate || !again.Duplicate || again.Seq != first.Seq {
			t.Fatalf("sent %+v, then %+v", first, again)
		}
		d.post(path+"/messages/user", []byte(`{"text":"other"}`), keyed...).must(t, http.StatusUnprocessableEntity).header(t, api.ErrorHeader, "key_reused")
		d.post(path+"/messages/user", []byte(`{"text":"other"}`), append(jsonHdr, "Idempotency-Key", "a", "X", "y")...).must(t, http.StatusOK)
		// Run events: bad queries, a wait that times out, a wait answered.
		d.runsCall("GET", path+"/events/status?wait=forever").must(t, http.StatusBadRequest)
		d.runsCall("GET", path+"/events/status?after=3").must(t, http.StatusBadRequest)
		d.runsCall("GET", path+"/events/nope").must(t, http.StatusNotFound).header(t, api.ErrorHeader, "not_found")
		d.runsCall("GET", "/v1/runs/nope/events/status").must(t, http.StatusNotFound)
		d.runsCall("GET", path+"/events/status?wait=100ms&after="+strconv.FormatInt(ev.Seq, 10)).must(t, http.StatusNoContent)
		d.runsCall("GET", path+"/events/status?wait=0s&after="+strconv.FormatInt(ev.Seq, 10)).must(t, http.StatusNoContent)
		d.runsCall("GET", path+"/events/status?wait=0s").must(t, http.StatusOK) // a wait of 0 looks once
		d.runsCall("GET", path+"/events/nope?wait=0s").must(t, http.StatusNoContent)
		answered := make(chan *dsReply, 1)
		go func() {
			answered <- d.runsCall("GET", path+"/events/status?wait=30s&after="+strconv.FormatInt(ev.Seq, 10))
		}()
		open()
		r := <-answered
		if err := json.Unmarshal(r.must(t, http.StatusOK).body, &ev); err != nil || string(ev.Value) != `"answered"` {
			t.Fatalf("waited for the next status: %+v %v", ev, err)
		}
		if out, err := run.Result(ctx); err != nil || out != "hi" {
			t.Fatalf("result %q %v", out, err)
		}
		d.post(path+"/messages/user", []byte(`1`), jsonHdr...).must(t, http.StatusGone).header(t, api.ErrorHeader, "gone")
		d.runsCall("GET", path+"/events/status?wait=30s&after="+strconv.FormatInt(ev.Seq, 10)).must(t, http.StatusNotFound)
		var st api.RunState
		if err := json.Unmarshal(d.runsCall("GET", path+"/state").must(t, http.StatusOK).body, &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Events) != 1 || st.Events[0].Key != "status" || len(st.Messages) != 1 ||
			st.Messages[0] != (api.TopicMessages{Topic: "user", Received: 2, Taken: 1, Left: 1}) {
			t.Fatalf("state %+v", st)
		}
	})
}

// Waits for a run event hold reader slots (MaxReaders), as live stream
// reads do: past them a wait is 503 busy, and a slot comes back when its
// wait ends. Before, any number of waits each polled the store.
func TestRunEventWaitsAreBounded(t *testing.T) {
	s := newTestServer(t, &Config{MaxReaders: 2})
	run := s.start(`{"workflow":"block"}`)
	path := "/v1/runs/" + run.ID + "/events/status?wait=30s"
	ended := make(chan int, 2)
	for range 2 {
		go func() {
			req, _ := http.NewRequest("GET", s.ts.URL+path, nil)
			resp, err := s.ts.Client().Do(req)
			if err != nil {
				ended <- 0
				return
			}
			resp.Body.Close()
			ended <- resp.StatusCode
		}()
	}
	eventually(t, "two waits holding reader slots", func() bool { return len(s.srv.readers) == 2 })
	r := s.do("GET", path, "").want(t, http.StatusServiceUnavailable)
	if r.header.Get("Weir-Error") != "busy" || r.header.Get("Retry-After") == "" {
		t.Fatalf("a wait past the readers: %v", r.header)
	}
	// The run ends without the event: the waits end with 404 and give
	// their slots back.
	s.do("POST", "/v1/runs/"+run.ID+"/cancel", "").want(t, http.StatusAccepted)
	for range 2 {
		select {
		case code := <-ended:
			if code != http.StatusNotFound {
				t.Fatalf("a wait on a run that ended without the event: %d", code)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a wait did not end with its run")
		}
	}
	eventually(t, "the slots given back", func() bool { return len(s.srv.readers) == 0 })
}

// GET /v1/runs/{id}/state of a run that set many run events of 1 MiB lists
// them by key with their sizes, each value over 4 KiB left out
// ("elided": true; GET .../events/{key} has it), a page of at most 1,000
// keys at a time: the reply is a few KiB and fits a replies' budget
// smaller than the values, on both stores. (Security review: it read and
// encoded every value whole before any charge; 64 keys of 1 MiB took a
// server +331 MB a request, 8 clients ~2 GB.)
func TestRunStateListsLargeRunEventsBySize(t *testing.T) {
	const n, big = 16, store.MaxEventValue
	// Twice the values would not fit: the reply must not carry them.
	onEveryStoreWith(t, &Config{MaxReplyBytes: 24 << 20}, func(t *testing.T, d *dsServer) {
		value := json.RawMessage(`"` + strings.Repeat("v", big-2) + `"`)
		key := func(i int) string { return fmt.Sprintf("big-%02d", i) }
		wf := weir.Register(d.e, "publish", func(ctx weir.Context, _ int) (int, error) {
			for i := range n {
				if err := weir.SetEvent(ctx, key(i), value); err != nil {
					return 0, err
				}
			}
			return n, weir.SetEvent(ctx, "status", "done")
		})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := d.e.Work(ctx); err != nil {
			t.Fatal(err)
		}
		run, err := wf.Start(ctx, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Result(ctx); err != nil {
			t.Fatal(err)
		}
		path := "/v1/runs/" + run.ID
		get := func(q string) *dsReply {
			t.Helper()
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, "GET", d.ts.URL+path+q, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := d.ts.Client().Do(req)
			if err != nil {
				t.Fatalf("GET %s: %v", q, err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			return &dsReply{status: resp.StatusCode, h: resp.Header, body: b}
		}
		r := get("/state").must(t, http.StatusOK)
		if len(r.body) > 16<<10 {
			t.Fatalf("/state of %d run events of %d bytes: a reply of %d bytes", n, big, len(r.body))
		}
		var st api.RunState
		if err := json.Unmarshal(r.body, &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Events) != n+1 || st.More || st.NextAfter != "" {
			t.Fatalf("/state: %d run events, more %v %q", len(st.Events), st.More, st.NextAfter)
		}
		for i, ev := range st.Events[:n] {
			if ev.Key != key(i) || !ev.Elided || ev.Size != big || ev.Value != nil || ev.Seq == 0 || ev.At.IsZero() {
				t.Fatalf("run event %d: %s elided %v, size %d, %d bytes of value", i, ev.Key, ev.Elided, ev.Size, len(ev.Value))
			}
		}
		if ev := st.Events[n]; ev.Key != "status" || ev.Elided || string(ev.Value) != `"done"` || ev.Size != len(`"done"`) {
			t.Fatalf("a small run event: %+v", ev)
		}
		// The event's own route has its value whole.
		var ev api.RunEvent
		if err := json.Unmarshal(get("/events/"+key(3)).must(t, http.StatusOK).body, &ev); err != nil {
			t.Fatal(err)
		}
		if len(ev.Value) != big || ev.Size != big || ev.Elided || ev.Seq != st.Events[3].Seq {
			t.Fatalf("GET .../events/%s: %d bytes, size %d, elided %v", key(3), len(ev.Value), ev.Size, ev.Elided)
		}
		// Pages: after= the last key of one, until more is false.
		var keys []string
		for q := "/state?limit=5"; ; {
			var pg api.RunState
			if err := json.Unmarshal(get(q).must(t, http.StatusOK).body, &pg); err != nil {
				t.Fatal(err)
			}
			if len(pg.Messages) != 0 || len(keys) > n {
				t.Fatalf("a page: %+v", pg)
			}
			for _, ev := range pg.Events {
				keys = append(keys, ev.Key)
			}
			if !pg.More {
				break
			}
			if len(pg.Events) != 5 || pg.NextAfter != pg.Events[4].Key {
				t.Fatalf("a page of %d run events, next_after %q", len(pg.Events), pg.NextAfter)
			}
			q = "/state?limit=5&after=" + url.QueryEscape(pg.NextAfter)
		}
		for i, k := range keys {
			if i < n && k != key(i) || i == n && k != "status" {
				t.Fatalf("pages listed %q", keys)
			}
		}
		if len(keys) != n+1 {
			t.Fatalf("pages listed %q", keys)
		}
		for q, code := range map[string]string{
			"/state?limit=0": "bad_request", "/state?limit=1001": "bad_request", "/state?limit=x": "bad_request",
			"/state?after=a%2Fb": "invalid_name", "/state?x=1": "bad_request",
		} {
			get(q).must(t, http.StatusBadRequest).header(t, api.ErrorHeader, code)
		}
		d.runsCall("GET", "/v1/runs/nope/state").must(t, http.StatusNotFound).header(t, api.ErrorHeader, "not_found")
	})
}

// payloadReads is a store that counts the bytes of message payloads its
// reads of runs' logs hand out.
type payloadReads struct {
	store.Full
	bytes atomic.Int64
}

func (s *payloadReads) count(evs []store.Event) {
	for _, ev := range evs {
		if ev.Type == store.EventMessageReceived {
			s.bytes.Add(int64(len(ev.Data)))
		}
	}
}

func (s *payloadReads) ListEvents(ctx context.Context, runID string, after int64) ([]store.Event, error) {
	evs, err := s.Full.ListEvents(ctx, runID, after)
	s.count(evs)
	return evs, err
}

func (s *payloadReads) ListEventsPage(ctx context.Context, p *store.ListEventsParams) (*store.EventPage, error) {
	page, err := s.Full.ListEventsPage(ctx, p)
	if err == nil {
		s.count(page.Events)
	}
	return page, err
}

// GET /v1/runs/{id}/state counts a run's messages without reading their
// payloads, on both stores. (Red team, round fourteen: it read the run's
// whole log with them, 64 MB of values at 130–245 ms a request.)
func TestRunStateCountsMessagesWithoutTheirPayloads(t *testing.T) {
	wrap := func(st store.Full) store.Full { return &payloadReads{Full: st} }
	onEveryStoreWrapped(t, nil, wrap, func(t *testing.T, d *dsServer) {
		reads := d.st.(*payloadReads)
		ctx := t.Context()
		// A run no worker claims: its log holds the messages alone.
		if _, _, err := d.st.CreateRun(ctx, &store.CreateRunParams{ID: "inbox", Workflow: "wf"}); err != nil {
			t.Fatal(err)
		}
		payload := json.RawMessage(`"` + strings.Repeat("m", 256<<10) + `"`)
		for i := range 8 {
			if _, err := d.e.Send(ctx, "inbox", []string{"b", "a"}[i%2], payload, nil); err != nil {
				t.Fatal(err)
			}
		}
		reads.bytes.Store(0)
		var st api.RunState
		if err := json.Unmarshal(d.runsCall("GET", "/v1/runs/inbox/state").must(t, http.StatusOK).body, &st); err != nil {
			t.Fatal(err)
		}
		want := []api.TopicMessages{{Topic: "b", Received: 4, Taken: -1, Left: -1}, {Topic: "a", Received: 4, Taken: -1, Left: -1}}
		if !slices.Equal(st.Messages, want) {
			t.Fatalf("/state messages %+v, want %+v", st.Messages, want)
		}
		if n := reads.bytes.Load(); n != 0 {
			t.Fatalf("/state read %d bytes of message payloads to count them", n)
		}
		// /waiting outlines the log (store.Outline): the data of limit
		// waits alone (red team, round fifteen: every UI refresh read a
		// 16 MiB log's messages, 60–160 ms).
		d.runsCall("GET", "/v1/runs/inbox/waiting").must(t, http.StatusOK)
		if n := reads.bytes.Load(); n != 0 {
			t.Fatalf("/waiting read %d bytes of message payloads", n)
		}
	})
}
