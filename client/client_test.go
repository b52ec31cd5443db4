package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/demo"
	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/sqlitestore"
)

// newServer starts a real server on a fresh SQLite file, with the demo
// workflow, "echo" (returns its input) and "block" (waits to be
// cancelled), and returns a client of it.
func newServer(t *testing.T, cfg *server.Config, opts *client.Options) (*client.Client, *weir.Engine) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "weir.db"), &sqlitestore.Config{Synchronous: "OFF"})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := weir.New(st, &weir.Config{PollInterval: 10 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	demo.Register(e)
	weir.Register(e, "echo", func(_ weir.Context, in json.RawMessage) (json.RawMessage, error) { return in, nil })
	weir.Register(e, "block", func(ctx weir.Context, _ struct{}) (int, error) {
		return weir.Step(ctx, "wait", func(sc weir.StepContext) (int, error) {
			<-sc.Done()
			return 0, weir.NonRetryable(sc.Err())
		})
	})
	if err := e.Work(ctx); err != nil {
		t.Fatal(err)
	}
	var c server.Config
	if cfg != nil {
		c = *cfg
	}
	c.Logger = log
	if c.LongPollTimeout == 0 {
		c.LongPollTimeout = time.Second
	}
	ts := httptest.NewServer(server.New(e, &c))
	t.Cleanup(func() {
		ts.Close()
		_ = e.Close(context.Background())
		_ = st.Close()
	})
	cl, err := client.New(ts.URL, opts)
	if err != nil {
		t.Fatal(err)
	}
	return cl, e
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRunsAPI(t *testing.T) {
	c, _ := newServer(t, nil, nil)
	ctx := ctxT(t)

	wfs, err := c.Workflows(ctx)
	if err != nil || len(wfs) != 6 {
		t.Fatalf("workflows %v %v", wfs, err)
	}
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}

	run, created, err := c.Start(ctx, "echo", map[string]int{"n": 1}, nil)
	if err != nil || !created {
		t.Fatalf("start: %v %v", created, err)
	}
	done, err := c.Wait(ctx, run.ID)
	if err != nil || done.Status != store.RunCompleted || string(done.Output) != `{"n":1}` {
		t.Fatalf("wait: %+v %v", done, err)
	}
	got, err := c.GetRun(ctx, run.ID)
	if err != nil || got.ID != run.ID {
		t.Fatalf("get: %+v %v", got, err)
	}
	evs, err := c.Events(ctx, run.ID, 0)
	if err != nil || len(evs) < 2 || evs[0].Type != store.EventRunStarted {
		t.Fatalf("events %+v %v", evs, err)
	}
	later, err := c.Events(ctx, run.ID, evs[len(evs)-1].Seq)
	if err != nil || len(later) != 0 {
		t.Fatalf("events after the last: %+v %v", later, err)
	}

	// Raw JSON input passes as it is; the same id returns the same run.
	again, created, err := c.Start(ctx, "echo", json.RawMessage(`[1,2]`), &client.StartOptions{ID: "mine"})
	if err != nil || !created || string(again.Input) != `[1,2]` {
		t.Fatalf("start with id: %+v %v %v", again, created, err)
	}
	if _, created, err := c.Start(ctx, "echo", json.RawMessage(`[1,2]`), &client.StartOptions{ID: "mine"}); err != nil || created {
		t.Fatalf("start with the same id: %v %v", created, err)
	}

	// Idempotency keys.
	k1, _, err := c.Start(ctx, "echo", "a", &client.StartOptions{IdempotencyKey: "key"})
	if err != nil {
		t.Fatal(err)
	}
	k2, created, err := c.Start(ctx, "echo", "a", &client.StartOptions{IdempotencyKey: "key"})
	if err != nil || created || k2.ID != k1.ID {
		t.Fatalf("same key: %v %v %v", k2.ID, created, err)
	}
	if _, _, err := c.Start(ctx, "echo", "b", &client.StartOptions{IdempotencyKey: "key"}); !errors.Is(err, weir.ErrKeyReused) {
		t.Fatalf("key reused: %v", err)
	}

	// Streams of a run.
	tok, _, err := c.Start(ctx, demo.TokensWorkflow, demo.TokensInput{Text: "a b c"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	streams, err := c.Streams(ctx, tok.ID)
	if err != nil || len(streams) != 2 || streams[0].Name != "status" || streams[1].Name != "tokens" || !streams[1].Closed {
		t.Fatalf("streams %+v %v", streams, err)
	}
}

func TestListAndIterate(t *testing.T) {
	c, _ := newServer(t, nil, nil)
	ctx := ctxT(t)
	var ids []string
	for range 5 {
		r, _, err := c.Start(ctx, "echo", 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	page, err := c.ListRuns(ctx, &client.ListOptions{Limit: 2})
	if err != nil || len(page.Runs) != 2 || page.NextCursor == "" || page.Runs[0].ID != ids[4] {
		t.Fatalf("page %+v %v", page, err)
	}
	var all []string
	for r, err := range c.Runs(ctx, &client.ListOptions{Limit: 2, Workflow: "echo"}) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, r.ID)
	}
	if len(all) != 5 || all[0] != ids[4] || all[4] != ids[0] {
		t.Fatalf("iterated %v, started %v", all, ids)
	}
	// Stopping early is fine.
	n := 0
	for range c.Runs(ctx, &client.ListOptions{Limit: 1}) {
		n++
		if n == 2 {
			break
		}
	}
	if _, err := c.ListRuns(ctx, &client.ListOptions{Status: "done"}); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("bad status: %v", err)
	}
}

func TestCancel(t *testing.T) {
	c, _ := newServer(t, nil, nil)
	ctx := ctxT(t)
	r, _, err := c.Start(ctx, "block", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Cancel(ctx, r.ID)
	if err != nil || !got.CancelRequested {
		t.Fatalf("cancel: %+v %v", got, err)
	}
	end, err := c.Wait(ctx, r.ID)
	if err != nil || end.Status != store.RunCancelled {
		t.Fatalf("after cancel: %+v %v", end, err)
	}
}

func TestErrorsMapToSentinels(t *testing.T) {
	c, _ := newServer(t, &server.Config{Token: "tok"}, nil)
	ctx := ctxT(t)
	_, err := c.GetRun(ctx, "nope")
	var e *client.Error
	if !errors.Is(err, weir.ErrNotFound) || !errors.As(err, &e) || e.Status != 404 || e.Message == "" {
		t.Fatalf("unknown run: %#v", err)
	}
	for name, f := range map[string]func() error{
		"events":  func() error { _, err := c.Events(ctx, "nope", 0); return err },
		"streams": func() error { _, err := c.Streams(ctx, "nope"); return err },
	} {
		if err := f(); !errors.Is(err, weir.ErrNotFound) {
			t.Errorf("%s of an unknown run: %v", name, err)
		}
	}
	// Writes need the token.
	if _, _, err := c.Start(ctx, "echo", 1, nil); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("start without the token: %v", err)
	}
	if _, err := c.Cancel(ctx, "nope"); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("cancel without the token: %v", err)
	}
	authed, err := client.New(c.URL(), &client.Options{Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = authed.Start(ctx, "nope", nil, nil)
	if !errors.Is(err, weir.ErrUnknownWorkflow) || !errors.Is(err, weir.ErrNotFound) {
		t.Fatalf("unknown workflow: %v", err)
	}
	if _, err := authed.Cancel(ctx, "nope"); !errors.Is(err, weir.ErrNotFound) {
		t.Fatalf("cancel of an unknown run: %v", err)
	}
	if _, _, err := authed.Start(ctx, "echo", 1, &client.StartOptions{ID: "a/b"}); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("bad id: %v", err)
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:4437", "ftp://x", "http://", "http://x/?a=b", "::"} {
		if _, err := client.New(u, nil); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
	c, err := client.New("http://127.0.0.1:4437/", nil)
	if err != nil || c.URL() != "http://127.0.0.1:4437" {
		t.Fatalf("%v %v", c, err)
	}
}

func TestUnreachableServer(t *testing.T) {
	c, err := client.New("http://127.0.0.1:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetRun(ctxT(t), "x"); err == nil {
		t.Fatal("no error from a server that is not there")
	}
}
