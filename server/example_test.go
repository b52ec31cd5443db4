package server_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/store/sqlitestore"
)

// Mount weir's server (the runs, hooks and streams APIs, the UI, /metrics)
// in your own HTTP application, beside your own routes, on the engine that
// executes your workflows: one process, one SQLite file.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "weir-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "app.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	// InstrumentStore lets /metrics count the runs the SDK starts too.
	e, err := weir.New(server.InstrumentStore(st), &weir.Config{PollInterval: 5 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close(ctx)
	weir.Register(e, "greet", func(ctx weir.Context, name string) (string, error) {
		return weir.Step(ctx, "greet", func(sc weir.StepContext) (string, error) {
			fmt.Fprintf(sc.Stream("out"), "hello, %s", name)
			return "greeted " + name, nil
		})
	})
	if err := e.Work(ctx); err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "your own route\n") })
	mux.Handle("/weir/", http.StripPrefix("/weir", server.New(e, &server.Config{Token: "a-token-of-16-bytes-or-more"})))
	app := httptest.NewServer(mux)
	defer app.Close()

	// What a client of your application does: start a run, wait for it, read its stream.
	req, _ := http.NewRequest("POST", app.URL+"/weir/v1/runs", strings.NewReader(`{"workflow":"greet","input":"ada","id":"greet-1"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer a-token-of-16-bytes-or-more")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println("start:", resp.Status)
	if _, err := e.Wait(ctx, "greet-1"); err != nil {
		log.Fatal(err)
	}
	for _, path := range []string{"/hello", "/weir/v1/stream/runs/greet-1/out?offset=-1"} {
		resp, err := http.Get(app.URL + path)
		if err != nil {
			log.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s: %s\n", path, strings.TrimSpace(string(b)))
	}
	// Output:
	// start: 201 Created
	// /hello: your own route
	// /weir/v1/stream/runs/greet-1/out?offset=-1: hello, ada
}
