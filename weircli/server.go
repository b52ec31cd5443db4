package weircli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/delivery"
	"github.com/weirhq/weir/internal/demo"
	"github.com/weirhq/weir/server"
)

const serverUsage = `Usage: %s server [flags]

Executes the runs of its workflows (unless --no-worker) and serves the runs
API, the hooks, every stream over the Durable Streams protocol
(/v1/stream/...), the World API, the UI (/ui/), /healthz and /metrics.
SIGINT or SIGTERM drains in-flight requests, stops the engine (releasing
its runs' leases) and closes the store.

Flags:
`

// serverCmd runs `weir server` until ctx ends.
func serverCmd(ctx context.Context, cfg *Config, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintf(stderr, serverUsage, cfg.name()); fs.PrintDefaults() }
	addr := fs.String("addr", "127.0.0.1:4437", "address to listen on; beyond loopback a token is required")
	storeSpec := fs.String("store", "sqlite:./weir.db", "the store: sqlite:PATH[?synchronous=NORMAL], or a postgres:// URL")
	token := fs.String("token", "", "bearer token (at least 16 bytes) that writes (and, beyond loopback, reads) must carry (default $WEIR_TOKEN); see also --token-file")
	tokenFile := fs.String("token-file", "", "read the token from this file (its first line), so that it is not in the process's command line")
	readToken := fs.String("read-token", "", "a second token (at least 16 bytes) that reads only, for dashboards (default $WEIR_READ_TOKEN); needs --token")
	readTokenFile := fs.String("read-token-file", "", "read the read-only token from this file (its first line)")
	longPoll := fs.Duration("long-poll-timeout", 20*time.Second, "how long a long-poll read waits for data before answering 204")
	shutdown := fs.Duration("shutdown-timeout", 15*time.Second, "how long SIGTERM waits for in-flight requests and runs to stop")
	retention := fs.Duration("retention", 0, "delete finished runs, with their streams, this long after they end (0: keep them forever)")
	noDemo, registerBench := new(bool), func(*weir.Engine) {}
	if cfg.Builtin {
		noDemo = fs.Bool("no-demo", false, "leave out the demo workflow (demo.tokens); the default beyond loopback")
		registerBench = benchWorkflows(fs)
	}
	noWorker := fs.Bool("no-worker", false, "serve the API and the streams but execute no run (workers are other processes on the same PostgreSQL database)")
	worldSecret := fs.String("world-secret", "", "the secret that signs World deliveries to Vercel Workflow apps (at least 16 bytes; default $WEIR_WORLD_SECRET); without one, World queue messages are refused")
	var scfg server.Config
	fs.IntVar(&scfg.MaxReaders, "max-readers", 1024, "stream reads served at once (catch-up, long-poll, SSE); one more gets 503 with Retry-After")
	fs.Int64Var(&scfg.MaxUploadBytes, "max-upload-bytes", 256<<20, "request body bytes received at once across requests; one more gets 503 with Retry-After")
	fs.Int64Var(&scfg.MinUploadRate, "min-upload-rate", 1<<10, "the slowest a request body may arrive, in bytes a second, after 30 s")
	maxStreams := fs.Int64("max-streams", 100_000, "standalone streams clients may create; one more gets 507 until one is deleted (0: no limit)")
	maxStreamBytes := fs.Int64("max-stream-bytes", 1<<30, "data bytes clients may write to one stream; new data past it gets 413 (0: no limit)")
	var corsOrigins listFlag
	fs.Var(&corsOrigins, "cors-origin", "a web origin (https://app.example) besides the server's own whose pages may use the API and read replies; repeat, or * for any (default: none)")
	var worldTargets listFlag
	fs.Var(&worldTargets, "world-target", "an origin (http://app.internal:3000) World messages may be delivered to without their target signed with the World secret; repeat, or * for any (default: none: @weirhq/world signs its target)")
	var wcfg delivery.Config
	fs.DurationVar(&wcfg.LeaseTTL, "world-lease", 30*time.Second, "a World delivery's lease, renewed while the app works: a server killed mid-delivery leaves the message to another after this long")
	fs.DurationVar(&wcfg.Timeout, "world-timeout", 15*time.Minute, "the longest one World delivery (a step) may take")
	fs.IntVar(&wcfg.Concurrency, "world-concurrency", 100, "World deliveries in flight at once")
	fs.IntVar(&wcfg.MaxPerTarget, "world-target-concurrency", 32, "World deliveries in flight to one app at once (a hung app holds this many, no more)")
	fs.DurationVar(&wcfg.MaxAge, "world-max-age", 24*time.Hour, "dead-letter a World message that has failed for this long")
	fs.IntVar(&wcfg.MaxFailures, "world-max-failures", 0, "dead-letter a World message after this many failed deliveries in a row (0: --world-max-age alone)")
	err := fs.Parse(args)
	if err != nil {
		return errUsage(err)
	}
	if fs.NArg() > 0 {
		return errUsage(fmt.Errorf("server: unexpected argument %q", fs.Arg(0)))
	}
	if *token, err = secret("token", *token, *tokenFile, "WEIR_TOKEN"); err != nil {
		return err
	}
	if *readToken, err = secret("read token", *readToken, *readTokenFile, "WEIR_READ_TOKEN"); err != nil {
		return err
	}
	if *readToken != "" && *token == "" {
		return errUsage(fmt.Errorf("server: a read token needs a token too: the read token reads only, and writes need the token"))
	}
	if *readToken != "" && *readToken == *token {
		return errUsage(fmt.Errorf("server: the read token must differ from the token"))
	}
	if *worldSecret == "" {
		*worldSecret = os.Getenv("WEIR_WORLD_SECRET")
	}
	for _, o := range worldTargets {
		if u, err := url.Parse(o); o != "*" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/")) {
			return errUsage(fmt.Errorf("server: --world-target %q: want scheme://host[:port], or *", o))
		}
	}
	for _, o := range corsOrigins {
		if u, err := url.Parse(o); o != "*" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/")) {
			return errUsage(fmt.Errorf("server: --cors-origin %q: want scheme://host[:port], or *", o))
		}
	}
	if *worldSecret != "" && len(*worldSecret) < 16 {
		return errUsage(fmt.Errorf("server: the World secret must have at least 16 bytes"))
	}
	if *longPoll <= 0 {
		return errUsage(fmt.Errorf("server: --long-poll-timeout must be positive"))
	}
	loopback, err := isLoopback(*addr)
	if err != nil {
		return err
	}
	if !loopback && *token == "" {
		return fmt.Errorf("server: refusing to listen on %s without a token: anyone who can reach it could start and cancel runs and write to streams; set --token or WEIR_TOKEN, or listen on 127.0.0.1", *addr)
	}

	log := slog.New(slog.NewTextHandler(stderr, nil))
	st, err := openStore(ctx, *storeSpec)
	if err != nil {
		return err
	}
	closeStore := func() {
		if err := st.Close(); err != nil {
			log.Error(cfg.name()+" server: close store", "err", err)
		}
	}
	ist := server.InstrumentStore(st)
	e, err := weir.New(ist, &weir.Config{Logger: log, Retention: *retention, NoWorker: *noWorker})
	if err != nil {
		closeStore()
		return err
	}
	demoSet := false
	fs.Visit(func(f *flag.Flag) { demoSet = demoSet || f.Name == "no-demo" })
	if !demoSet && !loopback {
		*noDemo = true
	}
	if cfg.Builtin && !*noDemo {
		demo.Register(e)
	}
	registerBench(e)
	if err := cfg.register(e); err != nil {
		closeStore()
		return err
	}
	if len(e.Workflows()) == 0 && !*noWorker {
		// A server of the World, or of other processes' runs: it has
		// nothing to claim, and says so.
		log.Warn(cfg.name() + " server: no workflow is registered: this server executes no run of its own (it serves the API, the streams and the World); register workflows with weircli.Config.Register, or pass --no-worker")
		*noWorker = true
	}
	if !*noWorker {
		if err := e.Work(ctx); err != nil {
			closeStore()
			return err
		}
	}
	var hosts []string
	if loopback {
		// Against DNS rebinding: a name an attacker points at 127.0.0.1
		// reaches nothing.
		hosts = append([]string{}, server.LoopbackHosts...)
		if h, _, err := net.SplitHostPort(*addr); err == nil && h != "" {
			hosts = append(hosts, strings.ToLower(strings.Trim(h, "[]")))
		}
	}
	srv := server.New(e, &server.Config{
		MaxReaders:           scfg.MaxReaders,
		MaxUploadBytes:       scfg.MaxUploadBytes,
		MinUploadRate:        scfg.MinUploadRate,
		MaxStreams:           noLimit(*maxStreams),
		MaxStreamBytes:       noLimit(*maxStreamBytes),
		Token:                *token,
		ReadToken:            *readToken,
		AllowedHosts:         hosts,
		CORSOrigins:          corsOrigins,
		RequireTokenForReads: !loopback,
		LongPollTimeout:      *longPoll,
		Logger:               log,
		WorldDelivery:        *worldSecret != "",
		WorldSecret:          []byte(*worldSecret),
		WorldTargets:         worldTargets,
	})
	var deliverer *delivery.Deliverer
	if *worldSecret != "" {
		wcfg.Store, wcfg.Secret, wcfg.Logger, wcfg.Observe = st, []byte(*worldSecret), log, srv.DeliveryObserver()
		if deliverer, err = delivery.New(&wcfg); err != nil {
			_ = e.Close(context.Background())
			closeStore()
			return errUsage(err)
		}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		_ = e.Close(context.Background())
		closeStore()
		return err
	}
	hs := &http.Server{
		Handler: srv,
		// A client that stalls sending headers is dropped after this; one
		// that stalls mid-body, by the server's body guard.
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	hs.RegisterOnShutdown(srv.Drain)

	auth := "no token: loopback only"
	if *token != "" {
		auth = "token required for writes"
		if !loopback {
			auth = "token required for reads and writes"
		}
		if *readToken != "" {
			auth += ", read token for reads"
		}
	}
	world := "World deliveries off (no --world-secret)"
	if deliverer != nil {
		world = "World deliveries on"
	}
	fmt.Fprintf(stdout, "%s server listening on http://%s (store %s; %s; workflows %s; %s)\n",
		cfg.name(), ln.Addr(), *storeSpec, auth, strings.Join(e.Workflows(), ", "), world)

	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	mctx, stopMemory := context.WithCancel(context.Background())
	defer stopMemory()
	go returnMemory(mctx, 5*time.Second, 10*time.Second)
	dctx, stopDelivery := context.WithCancel(context.Background())
	delivered := make(chan struct{})
	if deliverer != nil {
		go func() { defer close(delivered); _ = deliverer.Run(dctx) }()
	} else {
		close(delivered)
	}
	var serveErr error
	select {
	case <-ctx.Done():
		fmt.Fprintln(stdout, cfg.name()+" server: stopping: draining requests")
	case serveErr = <-errc:
	}

	// Stop accepting, end live reads, wait for the other requests; then
	// stop the engine (its runs' leases are released for whoever runs
	// next) and close the store. Everything acknowledged was committed
	// before its reply.
	sctx, cancel := context.WithTimeout(context.Background(), *shutdown)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn(cfg.name()+" server: requests still running at the shutdown timeout; closing them", "err", err)
		_ = hs.Close()
	}
	// Deliveries in flight are cut and their messages made due again, for
	// the next server.
	stopDelivery()
	<-delivered
	if err := e.Close(sctx); err != nil {
		log.Warn(cfg.name()+" server: runs still stopping at the shutdown timeout", "err", err)
	}
	closeStore()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	fmt.Fprintln(stdout, cfg.name()+" server: stopped")
	return nil
}

// isLoopback reports whether addr (host:port) listens on loopback only.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, errUsage(fmt.Errorf("server: --addr %q: %v", addr, err))
	}
	switch host {
	case "":
		return false, nil // every interface
	case "localhost":
		return true, nil
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback(), nil
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return false, fmt.Errorf("server: --addr %q: %w", addr, err)
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false, nil
		}
	}
	return len(ips) > 0, nil
}

// listFlag is a flag that may be repeated, each value also comma-separated.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// minTokenLen is the shortest token or read token `weir server` takes: 16
// bytes, 128 bits when random, out of reach of guessing at any rate a
// server answers.
const minTokenLen = 16

// secret is a token from its flag, else its file's first line, else the
// environment variable: one source, at least minTokenLen bytes, or none.
func secret(name, flagValue, file, env string) (string, error) {
	if flagValue != "" && file != "" {
		return "", errUsage(fmt.Errorf("server: give the %s by flag or by file, not both", name))
	}
	v := flagValue
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("server: the %s file: %w", name, err)
		}
		v, _, _ = strings.Cut(string(b), "\n")
		v = strings.TrimSpace(v)
		if v == "" {
			return "", errUsage(fmt.Errorf("server: the %s file %s is empty", name, file))
		}
	}
	if v == "" {
		v = os.Getenv(env)
	}
	if v != "" && len(v) < minTokenLen {
		return "", errUsage(fmt.Errorf("server: the %s has %d bytes; it must have at least %d (try: openssl rand -hex 16)", name, len(v), minTokenLen))
	}
	return v, nil
}

// noLimit turns a flag's 0 (no limit) into server.Config's negative.
func noLimit(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}
