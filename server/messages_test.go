package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
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
