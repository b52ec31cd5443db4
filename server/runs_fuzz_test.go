package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store/sqlitestore"
)

// FuzzStartRun feeds POST /v1/runs arbitrary bodies (and an optional
// Idempotency-Key): the parser either accepts a body it can vouch for or
// refuses it with api.ErrBadRequest and a one-line reason, and the handler never
// answers 5xx nor anything but a one-line error.
func FuzzStartRun(f *testing.F) {
	for _, seed := range []struct{ body, key string }{
		{`{"workflow":"echo","input":{"a":1}}`, ""},
		{`{"workflow":"echo","input":[1,"x",null,true,1.5e3]}`, "k"},
		{`{"workflow":"echo","id":"run-1"}`, ""},
		{`{"workflow":"nope"}`, ""},
		{`{"workflow":"echo","input":"\u0000\ud800"}`, ""},
		{`{"workflow":"echo","id":"a/b"}`, ""},
		{`{"workflow":1}`, ""},
		{`{"workflow":"echo"} trailing`, ""},
		{`{"workflow":"echo","extra":1}`, ""},
		{`[`, ""},
		{``, "k"},
		{`{"workflow":"echo","input":{"deep":[[[[[[[[[[1]]]]]]]]]]}}`, ""},
		{`{"workflow":"echo","workflow":"block"}`, ""},
		{`{"WORKFLOW":"echo"}`, ""},
	} {
		f.Add([]byte(seed.body), seed.key)
	}
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(f.TempDir(), "weir.db"), &sqlitestore.Config{Synchronous: "OFF"})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	// No worker: runs are created, never executed.
	e, err := weir.New(st, &weir.Config{NoWorker: true, Logger: discardLogger()})
	if err != nil {
		f.Fatal(err)
	}
	weir.Register(e, "echo", func(_ weir.Context, in json.RawMessage) (json.RawMessage, error) { return in, nil })
	srv := New(e, &Config{MaxBodyBytes: 1 << 16, Logger: discardLogger()})

	f.Fuzz(func(t *testing.T, body []byte, key string) {
		req, err := parseStartRequest(body)
		if err != nil {
			if !errors.Is(err, api.ErrBadRequest) {
				t.Fatalf("parse error %v does not match api.ErrBadRequest", err)
			}
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("parse error is not one line: %q", err)
			}
		} else {
			if req.Workflow == "" {
				t.Fatal("accepted a request without a workflow")
			}
			if len(req.Input) > 0 && !json.Valid(req.Input) {
				t.Fatalf("accepted input %q that is not JSON", req.Input)
			}
			if req.ID != "" && checkRunID(req.ID) != nil {
				t.Fatalf("accepted id %q", req.ID)
			}
		}

		r := httptest.NewRequest("POST", "/v1/runs", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if key != "" && !strings.ContainsAny(key, "\r\n\x00") {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK, http.StatusCreated:
			if err != nil {
				t.Fatalf("handler started a run the parser refused: %v", err)
			}
			var run api.Run
			if jerr := json.Unmarshal(w.Body.Bytes(), &run); jerr != nil || run.ID == "" || run.Workflow != req.Workflow {
				t.Fatalf("reply %q: %v", w.Body.String(), jerr)
			}
		case http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
			b := w.Body.String()
			if !strings.HasSuffix(b, "\n") || strings.Count(b, "\n") != 1 {
				t.Fatalf("%d with a reply that is not one line: %q", w.Code, b)
			}
		default:
			t.Fatalf("status %d for %q: %s", w.Code, body, w.Body.String())
		}
	})
}

// FuzzSendMessage feeds POST /v1/runs/{id}/messages/{topic} arbitrary
// topics (escaped into the path), bodies and keys, and GET
// /v1/runs/{id}/events/{key} arbitrary keys and queries: a message is
// either stored as sent (its topic and payload the last event of the run's
// log) or refused with a 4xx and a one-line reason, storing nothing; a
// read is never a 5xx.
func FuzzSendMessage(f *testing.F) {
	for _, seed := range []struct{ topic, body, key, query string }{
		{"user", `{"text":"hi"}`, "", ""},
		{"user", `1`, "k", "wait=0s"},
		{"a/b", `1`, "", "wait=1ms&after=1"},
		{"..", `1`, "", "after=3"},
		{"", `1`, "", "wait=forever"},
		{"t\xff", `"x"`, "", "x=1"},
		{"user", `{"text":`, "", ""},
		{"user", ``, "k", "wait=-1s"},
		{strings.Repeat("t", 256), `1`, "", ""},
		{"user", `[1,2,3]`, "k\x00", ""},
		{"user", `1`, "", "wait=0s&after=%2B1"},
		{"user", `1`, "", "wait=0s&after=00000000000000000001"},
	} {
		f.Add(seed.topic, []byte(seed.body), seed.key, seed.query)
	}
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(f.TempDir(), "weir.db"), &sqlitestore.Config{Synchronous: "OFF"})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	e, err := weir.New(st, &weir.Config{NoWorker: true, Logger: discardLogger()})
	if err != nil {
		f.Fatal(err)
	}
	weir.Register(e, "echo", func(_ weir.Context, in json.RawMessage) (json.RawMessage, error) { return in, nil })
	run, _, err := e.StartRun(ctx, "echo", nil, &weir.StartOptions{ID: "fuzzed"})
	if err != nil {
		f.Fatal(err)
	}
	srv := New(e, &Config{MaxBodyBytes: 1 << 16, Logger: discardLogger()})
	oneLine := func(t *testing.T, code int, b string) {
		if !strings.HasSuffix(b, "\n") || strings.Count(b, "\n") != 1 {
			t.Fatalf("%d with a reply that is not one line: %q", code, b)
		}
	}

	f.Fuzz(func(t *testing.T, topic string, body []byte, key, query string) {
		before, err := st.ListEvents(ctx, run.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("POST", "/v1/runs/"+run.ID+"/messages/"+url.PathEscape(topic), bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if key != "" && !strings.ContainsAny(key, "\r\n\x00") {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		after, err := st.ListEvents(ctx, run.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case w.Code == http.StatusTemporaryRedirect && path.Clean(r.URL.Path) != r.URL.Path:
			// The router's redirect of a path with dot segments: no handler ran.
			if len(after) != len(before) {
				t.Fatal("a redirected request stored something")
			}
		case w.Code == http.StatusOK:
			var sent api.MessageSent
			if err := json.Unmarshal(w.Body.Bytes(), &sent); err != nil || sent.RunID != run.ID {
				t.Fatalf("reply %q: %v", w.Body.String(), err)
			}
			if !sent.Duplicate {
				last := after[len(after)-1]
				if last.Type != "message_received" || last.Name != sent.Topic || last.Seq != sent.Seq || !json.Valid(last.Data) {
					t.Fatalf("the message stored is %+v, the reply %+v", last, sent)
				}
			}
		case w.Code >= 400 && w.Code < 500:
			oneLine(t, w.Code, w.Body.String())
			if len(after) != len(before) {
				t.Fatalf("%d, yet the run's log grew from %d to %d events", w.Code, len(before), len(after))
			}
		default:
			t.Fatalf("status %d for topic %q body %q: %s", w.Code, topic, body, w.Body.String())
		}

		u := "/v1/runs/" + run.ID + "/events/" + url.PathEscape(topic)
		if query != "" && !strings.ContainsAny(query, "#\x00") {
			u += "?" + query
		}
		r = httptest.NewRequestWithContext(ctx, "GET", "/", nil)
		if pu, err := url.Parse(u); err == nil {
			r.URL = pu
		}
		w = httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		switch {
		case w.Code == http.StatusOK || w.Code == http.StatusNoContent:
		case w.Code == http.StatusTemporaryRedirect && path.Clean(r.URL.Path) != r.URL.Path:
		case w.Code >= 400 && w.Code < 500:
			oneLine(t, w.Code, w.Body.String())
		default:
			t.Fatalf("status %d for GET %q: %s", w.Code, u, w.Body.String())
		}
	})
}
