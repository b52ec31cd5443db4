// Command agent-chat serves a chat with a weir agent on the embedded store:
//
//	go run ./examples/agent-chat
//
// then open http://127.0.0.1:8090. Each message starts a run of the agent
// (package agent): a scripted model that streams its tokens, calls two
// tools in parallel and answers. Tick "fail mid-stream" and its first model
// call fails after a few tokens and is retried with other words: the page
// shows the first attempt's tokens live, drops them when the retry's rewind
// arrives, and ends with exactly the committed answer. With "retry says the
// same" the retry is adopted and nothing on the page moves.
//
// The page (web/, built into static/app.js) reads the run's stream through
// the app's own route, GET /api/chat/{run}/stream, which package runstream
// serves from the engine in this process: the browser gets weir's records
// (data, abort, commit, close) and no weir token. The weir server itself is
// served on --weir-addr (loopback) for `weir runs show` and its UI.
package main

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/examples/agent-chat/agent"
	"github.com/weirhq/weir/runstream"
	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/store/sqlitestore"
)

//go:embed static
var static embed.FS

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "agent-chat:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("agent-chat", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8090", "where the chat page is served")
	weirAddr := fs.String("weir-addr", "127.0.0.1:8091", "where weir's own server (API and UI) is served; empty: not at all")
	db := fs.String("db", filepath.Join(os.TempDir(), "weir-agent-chat.db"), "the SQLite file of the embedded store")
	tokenDelay := fs.Duration("token-delay", 40*time.Millisecond, "how long the scripted model takes per token")
	retryDelay := fs.Duration("retry-delay", 700*time.Millisecond, "the wait before a failed model call is retried")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	st, err := sqlitestore.Open(ctx, *db, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e, err := weir.New(st, &weir.Config{Logger: log})
	if err != nil {
		return err
	}
	turn := agent.Register(e, &agent.Config{TokenDelay: *tokenDelay, RetryDelay: *retryDelay})
	if err := e.Work(ctx); err != nil {
		return err
	}
	defer e.Close(context.Background())
	weirSrv := server.New(e, &server.Config{Logger: log, AllowedHosts: server.LoopbackHosts})

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	app := &http.Server{Handler: newApp(turn, weirSrv, ln.Addr().String()), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = app.Serve(ln) }()
	defer app.Close()
	fmt.Fprintf(stdout, "agent-chat: http://%s (store %s)\n", ln.Addr(), *db)
	if *weirAddr != "" {
		wl, err := net.Listen("tcp", *weirAddr)
		if err != nil {
			return err
		}
		ws := &http.Server{Handler: weirSrv, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = ws.Serve(wl) }()
		defer ws.Close()
		fmt.Fprintf(stdout, "weir server: http://%s (weir runs list --server http://%s)\n", wl.Addr(), wl.Addr())
	}
	<-ctx.Done()
	return nil
}

// newApp is the chat app's handler: the page, POST /api/chat to start a
// turn, GET /api/chat/{run}/stream to read its stream.
func newApp(turn *weir.Workflow[agent.Turn, agent.Answer], weirSrv *server.Server, addr string) http.Handler {
	mux := http.NewServeMux()
	files, _ := fs.Sub(static, "static")
	mux.Handle("GET /", http.FileServerFS(files))
	mux.HandleFunc("POST /api/chat", func(w http.ResponseWriter, r *http.Request) {
		startTurn(w, r, turn)
	})
	// The app decides who reads which run: this example has no users, so
	// anyone who knows a run's id may read its stream; a real app checks
	// the run is the signed-in user's here.
	mux.Handle("GET /api/chat/{run}/stream", runstream.Handler(&runstream.Config{
		Backend: weirSrv,
		Stream: func(r *http.Request) (string, string, error) {
			return r.PathValue("run"), agent.Stream, nil
		},
	}))
	return guard(mux, addr)
}

// startTurn starts a run of the turn and answers where its stream is.
func startTurn(w http.ResponseWriter, r *http.Request, turn *weir.Workflow[agent.Turn, agent.Answer]) {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		http.Error(w, "POST a JSON body", http.StatusUnsupportedMediaType)
		return
	}
	var in agent.Turn
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		http.Error(w, "bad JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := in.Check(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// The page's id for the turn makes a re-sent request (a retry after a
	// cut reply) the same run.
	var opts weir.StartOptions
	if k := r.Header.Get("Idempotency-Key"); k != "" {
		if len(k) > 100 {
			http.Error(w, "Idempotency-Key too long", http.StatusBadRequest)
			return
		}
		opts.ID = "chat-" + k
	}
	h, err := turn.Start(r.Context(), in, &opts)
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, weir.ErrRunConflict) {
			status = http.StatusConflict
		}
		http.Error(w, err.Error(), status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{
		"runId":  h.ID,
		"stream": "/api/chat/" + url.PathEscape(h.ID) + "/stream",
	})
}

// guard refuses what a hostile page could send a loopback server: another
// Host (DNS rebinding), and a change from another origin.
func guard(h http.Handler, addr string) http.Handler {
	host, _, _ := net.SplitHostPort(addr)
	allowed := map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true, host: true}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rh, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			rh = r.Host
		}
		if !allowed[strings.Trim(rh, "[]")] {
			http.Error(w, "unknown host", http.StatusForbidden)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && r.Method != http.MethodGet && r.Method != http.MethodHead {
			if u, err := url.Parse(o); err != nil || u.Host != r.Host {
				http.Error(w, "cross-origin request refused", http.StatusForbidden)
				return
			}
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
		h.ServeHTTP(w, r)
	})
}
