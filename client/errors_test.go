package client_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/stream"
)

// Every row of the table of errors comes back as its sentinel: the server
// sends the row's code (server's httpError, tested there) and the client
// maps it back. The replies here are written as the server writes them.
func TestEverySentinelCrossesTheWire(t *testing.T) {
	var row api.Error
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(api.ErrorHeader, row.Code)
		if row.Err == stream.ErrFenced {
			w.Header().Set("Weir-Attempt", "4")
		}
		if row.Err == stream.ErrGap {
			w.Header().Set("Weir-Expected-Seq", "7")
		}
		w.WriteHeader(row.Status)
		_, _ = w.Write([]byte(row.Err.Error() + "\n"))
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, row = range api.Errors {
		_, err := c.GetRun(ctxT(t), "r")
		if !errors.Is(err, row.Err) {
			t.Errorf("code %q: err %v does not match %v", row.Code, err, row.Err)
		}
		var e *client.Error
		if !errors.As(err, &e) || e.Code != row.Code || e.Retryable() != row.Retryable {
			t.Errorf("code %q: %#v", row.Code, err)
		}
	}
	row = api.Errors[0] // fenced
	_, err = c.GetRun(ctxT(t), "r")
	var fe *stream.FencedError
	if !errors.As(err, &fe) || fe.Current != 4 {
		t.Fatalf("a fenced reply: %v, want a *stream.FencedError at attempt 4", err)
	}
	row, _ = api.ByCode("gap")
	_, err = c.GetRun(ctxT(t), "r")
	var ge *stream.GapError
	if !errors.As(err, &ge) || ge.Expected != 7 {
		t.Fatalf("a gap reply: %v, want a *stream.GapError expecting 7", err)
	}
}

// A program that only talks to a weir server links neither the engine, the
// server nor a store backend.
func TestClientLinksNoEngine(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		switch {
		case pkg == "github.com/weirhq/weir", strings.HasPrefix(pkg, "github.com/weirhq/weir/server"),
			strings.HasPrefix(pkg, "github.com/weirhq/weir/store/"), strings.HasPrefix(pkg, "modernc.org/"),
			strings.HasPrefix(pkg, "github.com/jackc/"):
			t.Errorf("client links %s", pkg)
		}
	}
}
