package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
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
