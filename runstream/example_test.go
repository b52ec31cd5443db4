package runstream_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/runstream"
	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/store/sqlitestore"
)

// An app runs its workflows on an embedded engine and lets its signed-in
// users read a run's stream at its own route. The weir server is not
// mounted at all: the Handler reads through it in process.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "weir-example")
	defer os.RemoveAll(dir)
	st, _ := sqlitestore.Open(ctx, filepath.Join(dir, "weir.db"), nil)
	defer st.Close()
	e, _ := weir.New(st, nil)
	greet := weir.Register(e, "greet", func(ctx weir.Context, name string) (string, error) {
		return weir.Step(ctx, "say", func(sc weir.StepContext) (string, error) {
			_, err := sc.Stream("default").WriteString("hello, " + name)
			return "ok", err
		})
	})
	_ = e.Work(ctx)
	defer e.Close(ctx)

	mux := http.NewServeMux()
	signedIn := func(h http.Handler) http.Handler { return h } // the app's own check
	mux.Handle("GET /runs/{run}/stream", signedIn(runstream.Handler(&runstream.Config{Backend: server.New(e, nil)})))
	site := httptest.NewServer(mux)
	defer site.Close()

	run, _ := greet.Start(ctx, "ada", nil)
	_, _ = e.Wait(ctx, run.ID)
	resp, err := http.Get(site.URL + "/runs/" + run.ID + "/stream?offset=-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var rec struct {
			Kind, Writer string
			Data         []byte // base64 in the record: the stream is bytes
		}
		_ = json.Unmarshal(sc.Bytes(), &rec)
		fmt.Println(strings.TrimSpace(fmt.Sprintf("%s %s %s", rec.Kind, rec.Writer, rec.Data)))
	}
	// Output:
	// data step/1 hello, ada
	// commit step/1
	// close
}
