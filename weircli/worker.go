package weircli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/server"
)

const workerUsage = `Usage: %s worker --store postgres://… [flags]

Executes the runs of its workflows and serves nothing but, with
--metrics-addr, /healthz and /metrics. Run any number of workers on one
PostgreSQL database, and API/UI servers beside them with
'%[1]s server --no-worker' (docs/operations.md, "Deployment shapes"). A run
is claimed by one worker at a time under a lease; a killed worker's runs
are taken over when its lease expires. SIGINT or SIGTERM stops claiming,
interrupts the runs it executes (their leases are released for the other
workers at once) and closes the store.

Flags:
`

// workerCmd runs `worker` until ctx ends.
func workerCmd(ctx context.Context, cfg *Config, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintf(stderr, workerUsage, cfg.name()); fs.PrintDefaults() }
	storeSpec := fs.String("store", "sqlite:./weir.db", "the store: a postgres:// URL (SQLite is owned by one process: use `server` there)")
	metricsAddr := fs.String("metrics-addr", "", "serve /healthz and /metrics on this address (default: serve nothing)")
	concurrency := fs.Int("concurrency", 64, "runs executed at once")
	shutdown := fs.Duration("shutdown-timeout", 15*time.Second, "how long SIGTERM waits for the runs to stop")
	leaseTTL := fs.Duration("lease-ttl", 15*time.Second, "how long a run this worker claimed stays its without a heartbeat (one every third of it): how soon another worker takes over the runs of one that died")
	var vf versionFlags
	vf.register(fs)
	if err := fs.Parse(args); err != nil {
		return errUsage(err)
	}
	if fs.NArg() > 0 {
		return errUsage(fmt.Errorf("worker: unexpected argument %q", fs.Arg(0)))
	}
	if *concurrency <= 0 {
		return errUsage(fmt.Errorf("worker: --concurrency must be positive"))
	}
	if *leaseTTL < 100*time.Millisecond {
		return errUsage(fmt.Errorf("worker: --lease-ttl %v: at least 100ms", *leaseTTL))
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	stopTracing, err := setupTracing(ctx, cfg.name(), log)
	if err != nil {
		return err
	}
	defer stopTracing(context.Background())
	st, err := openStore(ctx, *storeSpec)
	if err != nil {
		return err
	}
	defer func() {
		if err := st.Close(); err != nil {
			log.Error(cfg.name()+" worker: close store", "err", err)
		}
	}()
	ist := server.InstrumentStore(st)
	e, err := weir.New(ist, &weir.Config{Logger: log, Concurrency: *concurrency, LeaseTTL: *leaseTTL, Version: vf.version, CompatibleVersions: vf.compatible})
	if err != nil {
		return err
	}
	if err := cfg.register(e); err != nil {
		return err
	}
	if len(e.Workflows()) == 0 {
		return fmt.Errorf("worker: %w, so this worker would claim no run: register the program's workflows in weircli.Config.Register", weir.ErrNoWorkflows)
	}
	if err := e.Work(ctx); err != nil {
		return err
	}
	var hs *http.Server
	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			_ = e.Close(context.Background())
			return err
		}
		srv := server.New(e, &server.Config{Logger: log})
		hs = &http.Server{Handler: metricsOnly(srv), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		fmt.Fprintf(stdout, "%s worker: /healthz and /metrics on http://%s\n", cfg.name(), ln.Addr())
	}
	fmt.Fprintf(stdout, "%s worker executing runs of %s (store %s)\n", cfg.name(), strings.Join(e.Workflows(), ", "), *storeSpec)
	<-ctx.Done()
	fmt.Fprintf(stdout, "%s worker: stopping\n", cfg.name())
	sctx, cancel := context.WithTimeout(context.Background(), *shutdown)
	defer cancel()
	if hs != nil {
		_ = hs.Shutdown(sctx)
	}
	if err := e.Close(sctx); err != nil {
		log.Warn(cfg.name()+" worker: runs still stopping at the shutdown timeout", "err", err)
	}
	fmt.Fprintf(stdout, "%s worker: stopped\n", cfg.name())
	return nil
}

// metricsOnly passes /healthz and /metrics to h and answers 404 to the
// rest: a worker serves no API.
func metricsOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && r.URL.Path != "/metrics" {
			http.Error(w, "a worker serves only /healthz and /metrics", http.StatusNotFound)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// versionFlags are the application version flags of server and worker
// (weir.Config.Version, CompatibleVersions).
type versionFlags struct {
	version    string
	compatible listFlag
}

func (v *versionFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&v.version, "app-version", os.Getenv("WEIR_APP_VERSION"), "the application version of this process's code (default $WEIR_APP_VERSION): the runs it starts record it, and it claims only the runs of its version (and --compatible-version); empty: every run")
	fs.Var(&v.compatible, "compatible-version", "another application version whose runs this process's code replays and claims; repeat")
}
