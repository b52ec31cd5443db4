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
	"strconv"
	"strings"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/delivery"
	"github.com/weirhq/weir/internal/demo"
	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/store"
)

const serverUsage = `Usage: %s server [flags]

Executes the runs of its workflows (unless --no-worker) and serves the runs
API, the hooks, every stream over the Durable Streams protocol
(/v1/stream/...), the World API, the UI (/ui/), /healthz and /metrics.
SIGINT or SIGTERM drains in-flight requests, stops the engine (releasing
its runs' leases) and closes the store.

Flags:
`

// serverFlags is what the flags of `server` say, checked.
type serverFlags struct {
	addr, storeSpec               string
	token, readToken, worldSecret string
	longPoll, shutdown, retention time.Duration
	noDemo, noWorker, loopback    bool
	scfg                          server.Config
	maxStreams, maxStreamBytes    int64
	corsOrigins, worldTargets     listFlag
	wcfg                          delivery.Config
	versions                      versionFlags
	registerBench                 func(*weir.Engine)
	cpuProfile                    string
}

// parseServerFlags parses and checks the flags of `server`.
func parseServerFlags(cfg *Config, args []string, stderr io.Writer) (*serverFlags, error) {
	f := &serverFlags{registerBench: func(*weir.Engine) {}}
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintf(stderr, serverUsage, cfg.name()); fs.PrintDefaults() }
	fs.StringVar(&f.addr, "addr", "127.0.0.1:4437", "address to listen on; beyond loopback a token is required")
	fs.StringVar(&f.storeSpec, "store", "sqlite:./weir.db", "the store: sqlite:PATH[?synchronous=NORMAL], or a postgres:// URL")
	fs.StringVar(&f.token, "token", "", "bearer token (at least 16 bytes) that writes (and, beyond loopback, reads) must carry (default $WEIR_TOKEN); see also --token-file")
	tokenFile := fs.String("token-file", "", "read the token from this file (its first line), so that it is not in the process's command line")
	fs.StringVar(&f.readToken, "read-token", "", "a second token (at least 16 bytes) that reads only, for dashboards (default $WEIR_READ_TOKEN); needs --token")
	readTokenFile := fs.String("read-token-file", "", "read the read-only token from this file (its first line)")
	fs.DurationVar(&f.longPoll, "long-poll-timeout", 20*time.Second, "how long a long-poll read waits for data before answering 204")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", 15*time.Second, "how long SIGTERM waits for in-flight requests and runs to stop")
	fs.DurationVar(&f.retention, "retention", 0, "delete finished runs, with their streams, this long after they end (0: keep them forever)")
	if cfg.Builtin {
		fs.BoolVar(&f.noDemo, "no-demo", false, "leave out the demo workflow (demo.tokens); the default beyond loopback")
		f.registerBench = benchWorkflows(fs)
	}
	f.versions.register(fs)
	fs.BoolVar(&f.noWorker, "no-worker", false, "serve the API and the streams but execute no run (workers are other processes on the same PostgreSQL database)")
	fs.StringVar(&f.worldSecret, "world-secret", "", "the secret that signs World deliveries to Vercel Workflow apps (at least 16 bytes; default $WEIR_WORLD_SECRET); without one, World queue messages are refused")
	fs.IntVar(&f.scfg.MaxReaders, "max-readers", 1024, "stream reads served at once (catch-up, long-poll, SSE) and run event waits; one more gets 503 with Retry-After")
	fs.Int64Var(&f.scfg.MaxUploadBytes, "max-upload-bytes", 256<<20, "request body bytes received at once across requests; one more gets 503 with Retry-After")
	fs.Int64Var(&f.scfg.MinUploadRate, "min-upload-rate", 1<<10, "the slowest a request body may arrive, in bytes a second, after 30 s")
	fs.Int64Var(&f.maxStreams, "max-streams", 100_000, "standalone streams clients may create; one more gets 507 until one is deleted (0: no limit)")
	fs.Int64Var(&f.maxStreamBytes, "max-stream-bytes", 1<<30, "data bytes clients may write to one stream; new data past it gets 413 (0: no limit)")
	fs.Var(&f.corsOrigins, "cors-origin", "a web origin (https://app.example) besides the server's own whose pages may use the API and read replies; repeat, or * for any (default: none)")
	fs.Var(&f.worldTargets, "world-target", "an origin (http://app.internal:3000) World messages may be delivered to without their target signed with the World secret; repeat, or * for any (default: none: @weirhq/world signs its target)")
	fs.DurationVar(&f.wcfg.LeaseTTL, "world-lease", 30*time.Second, "a World delivery's lease, renewed while the app works: a server killed mid-delivery leaves the message to another after this long")
	fs.DurationVar(&f.wcfg.Timeout, "world-timeout", 15*time.Minute, "the longest one World delivery (a step) may take")
	fs.IntVar(&f.wcfg.Concurrency, "world-concurrency", 100, "World deliveries in flight at once")
	fs.IntVar(&f.wcfg.MaxPerTarget, "world-target-concurrency", 32, "World deliveries in flight to one app at once (a hung app holds this many, no more)")
	fs.StringVar(&f.wcfg.Limiter, "world-limiter", "", "a limiter (weir limiters set) every World delivery takes a slot of, keyed by its app: its concurrency, per-key (per app), rate and budget hold across every server on the database (default: none; the two flags above bound this process alone)")
	fs.DurationVar(&f.wcfg.MaxAge, "world-max-age", 24*time.Hour, "dead-letter a World message that has failed for this long")
	fs.StringVar(&f.cpuProfile, "cpuprofile", os.Getenv("WEIR_CPUPROFILE"), "write a CPU profile of the process, from its start until it stops, to this file; %p in it is the pid (default $WEIR_CPUPROFILE, which reaches the servers weir bench starts)")
	fs.IntVar(&f.wcfg.MaxFailures, "world-max-failures", 0, "dead-letter a World message after this many failed deliveries in a row (0: --world-max-age alone)")
	if err := fs.Parse(args); err != nil {
		return nil, errUsage(err)
	}
	if fs.NArg() > 0 {
		return nil, errUsage(fmt.Errorf("server: unexpected argument %q", fs.Arg(0)))
	}
	var err error
	if f.token, err = secret("token", f.token, *tokenFile, "WEIR_TOKEN"); err != nil {
		return nil, err
	}
	if f.readToken, err = secret("read token", f.readToken, *readTokenFile, "WEIR_READ_TOKEN"); err != nil {
		return nil, err
	}
	if f.worldSecret == "" {
		f.worldSecret = os.Getenv("WEIR_WORLD_SECRET")
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	// Beyond loopback the demo is off unless asked for.
	demoSet := false
	fs.Visit(func(fl *flag.Flag) { demoSet = demoSet || fl.Name == "no-demo" })
	if !demoSet && !f.loopback {
		f.noDemo = true
	}
	return f, nil
}

// check refuses flags that do not go together, and a bind beyond loopback
// without a token.
func (f *serverFlags) check() error {
	if f.readToken != "" && f.token == "" {
		return errUsage(fmt.Errorf("server: a read token needs a token too: the read token reads only, and writes need the token"))
	}
	if f.readToken != "" && f.readToken == f.token {
		return errUsage(fmt.Errorf("server: the read token must differ from the token"))
	}
	for _, o := range f.worldTargets {
		if !isOrigin(o) {
			return errUsage(fmt.Errorf("server: --world-target %q: want scheme://host[:port], or *", o))
		}
	}
	for _, o := range f.corsOrigins {
		if !isOrigin(o) {
			return errUsage(fmt.Errorf("server: --cors-origin %q: want scheme://host[:port], or *", o))
		}
	}
	if f.worldSecret != "" && len(f.worldSecret) < 16 {
		return errUsage(fmt.Errorf("server: the World secret must have at least 16 bytes"))
	}
	if f.longPoll <= 0 {
		return errUsage(fmt.Errorf("server: --long-poll-timeout must be positive"))
	}
	var err error
	if f.loopback, err = isLoopback(f.addr); err != nil {
		return err
	}
	if !f.loopback && f.token == "" {
		return fmt.Errorf("server: refusing to listen on %s without a token: anyone who can reach it could start and cancel runs and write to streams; set --token or WEIR_TOKEN, or listen on 127.0.0.1", f.addr)
	}
	return nil
}

// isOrigin reports whether o is scheme://host[:port] (http or https), or *.
func isOrigin(o string) bool {
	if o == "*" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && (u.Path == "" || u.Path == "/")
}

// serverCmd runs `server` until ctx ends.
func serverCmd(ctx context.Context, cfg *Config, args []string, stdout, stderr io.Writer) error {
	f, err := parseServerFlags(cfg, args, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if f.cpuProfile != "" {
		stop, err := startProfiles(strings.ReplaceAll(f.cpuProfile, "%p", strconv.Itoa(os.Getpid())), "")
		if err != nil {
			return err
		}
		defer func() {
			if err := stop(); err != nil {
				log.Error(cfg.name()+" server: cpu profile", "err", err)
			}
		}()
	}
	stopTracing, err := setupTracing(ctx, cfg.name(), log)
	if err != nil {
		return err
	}
	defer stopTracing(context.Background())
	st, err := openStore(ctx, f.storeSpec)
	if err != nil {
		return err
	}
	closeStore := func() {
		if err := st.Close(); err != nil {
			log.Error(cfg.name()+" server: close store", "err", err)
		}
	}
	e, err := f.engine(ctx, cfg, st, log)
	if err != nil {
		closeStore()
		return err
	}
	srv := server.New(e, f.serverConfig(log))
	var deliverer *delivery.Deliverer
	if f.worldSecret != "" {
		f.wcfg.Store, f.wcfg.Limits, f.wcfg.Secret, f.wcfg.Logger, f.wcfg.Observe = st, st, []byte(f.worldSecret), log, srv.DeliveryObserver()
		if deliverer, err = delivery.New(&f.wcfg); err != nil {
			_ = e.Close(context.Background())
			closeStore()
			return errUsage(err)
		}
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		_ = e.Close(context.Background())
		closeStore()
		return err
	}
	fmt.Fprintf(stdout, "%s server listening on http://%s (store %s; %s; workflows %s; %s)\n",
		cfg.name(), ln.Addr(), f.storeSpec, f.authLine(), strings.Join(e.Workflows(), ", "), worldLine(deliverer))
	serveErr := serveUntil(ctx, cfg, srv, ln, deliverer, f.shutdown, log, stdout)

	// The engine stops after the requests (its runs' leases are released
	// for whoever runs next), then the store closes. Everything
	// acknowledged was committed before its reply.
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdown)
	defer cancel()
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

// engine makes the server's engine on st with the program's workflows
// (and weir's demo and bench ones when asked), working unless the server
// executes nothing.
func (f *serverFlags) engine(ctx context.Context, cfg *Config, st store.Full, log *slog.Logger) (*weir.Engine, error) {
	e, err := weir.New(server.InstrumentStore(st), &weir.Config{Logger: log, Retention: f.retention, NoWorker: f.noWorker,
		Version: f.versions.version, CompatibleVersions: f.versions.compatible})
	if err != nil {
		return nil, err
	}
	if cfg.Builtin && !f.noDemo {
		demo.Register(e)
	}
	f.registerBench(e)
	if err := cfg.register(e); err != nil {
		return nil, err
	}
	if len(e.Workflows()) == 0 && !f.noWorker {
		// A server of the World, or of other processes' runs: it has
		// nothing to claim, and says so.
		log.Warn(cfg.name() + " server: no workflow is registered: this server executes no run of its own (it serves the API, the streams and the World); register workflows with weircli.Config.Register, or pass --no-worker")
		return e, nil
	}
	if !f.noWorker {
		if err := e.Work(ctx); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// serverConfig is the server.Config the flags say.
func (f *serverFlags) serverConfig(log *slog.Logger) *server.Config {
	var hosts []string
	if f.loopback {
		// Against DNS rebinding: a name an attacker points at 127.0.0.1
		// reaches nothing.
		hosts = append([]string{}, server.LoopbackHosts...)
		if h, _, err := net.SplitHostPort(f.addr); err == nil && h != "" {
			hosts = append(hosts, strings.ToLower(strings.Trim(h, "[]")))
		}
	}
	return &server.Config{
		MaxReaders:           f.scfg.MaxReaders,
		MaxUploadBytes:       f.scfg.MaxUploadBytes,
		MinUploadRate:        f.scfg.MinUploadRate,
		MaxStreams:           noLimit(f.maxStreams),
		MaxStreamBytes:       noLimit(f.maxStreamBytes),
		Token:                f.token,
		ReadToken:            f.readToken,
		AllowedHosts:         hosts,
		CORSOrigins:          f.corsOrigins,
		RequireTokenForReads: !f.loopback,
		LongPollTimeout:      f.longPoll,
		Logger:               log,
		WorldDelivery:        f.worldSecret != "",
		WorldSecret:          []byte(f.worldSecret),
		WorldTargets:         f.worldTargets,
	}
}

// authLine says in the listening line who may do what.
func (f *serverFlags) authLine() string {
	if f.token == "" {
		return "no token: loopback only"
	}
	auth := "token required for writes"
	if !f.loopback {
		auth = "token required for reads and writes"
	}
	if f.readToken != "" {
		auth += ", read token for reads"
	}
	return auth
}

func worldLine(d *delivery.Deliverer) string {
	if d == nil {
		return "World deliveries off (no --world-secret)"
	}
	return "World deliveries on"
}

// serveUntil serves srv on ln, and d's World deliveries, until ctx ends or
// serving fails; then it stops accepting, ends live reads, waits for the
// other requests (up to shutdown, then cuts them) and cuts the
// deliveries in flight, whose messages are due again for the next server.
func serveUntil(ctx context.Context, cfg *Config, srv *server.Server, ln net.Listener, d *delivery.Deliverer, shutdown time.Duration, log *slog.Logger, stdout io.Writer) error {
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
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	mctx, stopMemory := context.WithCancel(context.Background())
	defer stopMemory()
	go returnMemory(mctx, 5*time.Second, 10*time.Second)
	dctx, stopDelivery := context.WithCancel(context.Background())
	delivered := make(chan struct{})
	if d != nil {
		go func() { defer close(delivered); _ = d.Run(dctx) }()
	} else {
		close(delivered)
	}
	var serveErr error
	select {
	case <-ctx.Done():
		fmt.Fprintln(stdout, cfg.name()+" server: stopping: draining requests")
	case serveErr = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdown)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn(cfg.name()+" server: requests still running at the shutdown timeout; closing them", "err", err)
		_ = hs.Close()
	}
	stopDelivery()
	<-delivered
	return serveErr
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
