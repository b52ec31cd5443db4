// Package weircli is weir's command line as a library: a program that
// registers its own workflows gets the whole of it — `server` (the runs,
// hooks, streams and World APIs, the UI, /metrics) serving those
// workflows, and `runs`, `stream` and `version` — with one call:
//
//	func main() {
//		weircli.Main(&weircli.Config{Name: "myapp", Register: func(e *weir.Engine) error {
//			answer = weir.Register(e, "answer", answerWorkflow)
//			return nil
//		}})
//	}
//
// so that `myapp server --store sqlite:./myapp.db` executes its runs and
// serves them, and `myapp runs start answer '"hi"'`, `myapp runs hook`
// and `myapp stream tail` work against it. weir's own binary is this with
// Builtin set (cmd/weir): the demo, bench and torture, which run workflows
// of their own.
//
// docs/operations.md ("Deployment shapes") says which process runs which
// command on SQLite and on PostgreSQL.
package weircli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/weirhq/weir"
)

// Config configures a command line. The zero value is a command line with
// no workflows of its own (a client of a server, and a server of the World
// API).
type Config struct {
	// Name is the program's name in its usage and its messages. Defaults
	// to the base name of os.Args[0].
	Name string
	// Register registers the program's workflows on the engine of a
	// command that runs one (server, demo). It is called once per engine,
	// before the engine starts; an error stops the command.
	Register func(e *weir.Engine) error
	// Builtin adds weir's own commands and workflows: demo, bench,
	// torture, and the demo's workflows in server (unless --no-demo).
	// cmd/weir sets it. Defaults to false.
	Builtin bool
	// Version and Commit are what `version` prints. Default "dev", and the
	// build's VCS stamp if any.
	Version, Commit string
}

func (c *Config) name() string {
	if c.Name != "" {
		return c.Name
	}
	return strings.TrimSuffix(filepath.Base(os.Args[0]), ".exe")
}

// register registers the program's workflows. weir.Register panics on a
// mistake (a name registered twice); the command line says it in one line
// instead of a goroutine dump.
func (c *Config) register(e *weir.Engine) (err error) {
	if c.Register == nil {
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			msg, ok := p.(string)
			if !ok || !strings.HasPrefix(msg, "weir: ") {
				panic(p)
			}
			err = fmt.Errorf("registering the workflows: %s", strings.TrimPrefix(msg, "weir: "))
		}
	}()
	if err := c.Register(e); err != nil {
		return fmt.Errorf("registering the workflows: %w", err)
	}
	return nil
}

// Main runs the command line of os.Args until SIGINT or SIGTERM, and exits
// with its status.
func Main(cfg *Config) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, cfg, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func (c *Config) usage() string {
	n := c.name()
	var b strings.Builder
	if c.Builtin {
		fmt.Fprintf(&b, "%s — durable workflows for Go whose streams are exactly-once.\n\nUsage:\n", n)
		fmt.Fprintf(&b, "  %s demo [--db PATH] [--fast]   run a step that streams tokens, fails midway and is retried\n", n)
	} else {
		fmt.Fprintf(&b, "%s — its workflows, on weir.\n\nUsage:\n", n)
	}
	fmt.Fprintf(&b, `  %[1]s server [--addr A] [--store sqlite:PATH] [--token T]
                                   execute the runs, serve the runs API and every stream over HTTP
%[2]s  %[1]s runs ls|show|start|watch|cancel
                                   the runs of a server; watch shows one's progress live
  %[1]s runs hook|send|event        deliver to a run's hook, send it a message, read its run events
  %[1]s stream tail|cat|ls          read a run's stream from a server; list the standalone streams
  %[1]s limiters ls|show|set        the limiters steps take slots of: concurrency, rate, token budget
  %[1]s schedules ls|show|set|pause|resume|rm
                                   schedules: a run of a workflow at each tick of a cron spec or interval
`, n, c.workerLine())
	if c.Builtin {
		fmt.Fprintf(&b, `  %[1]s bench [WORKLOAD…] [--store S] [--url U] [--json]
                                   measure weir against same-run baselines
  %[1]s torture [--trials N] [--seed S] [--store sqlite:DIR|postgres://…] [--soak D]
                                   prove exactly-once under faults (docs/reliability.md)
`, n)
	}
	fmt.Fprintf(&b, "  %s version                     print the version\n\n", n)
	if c.Builtin {
		fmt.Fprintf(&b, "Run '%s demo' first. ", n)
	}
	fmt.Fprintf(&b, "'%s COMMAND -h' tells more.\n", n)
	return b.String()
}

// workerLine is the usage's line for `worker`, which a program with
// workflows of its own has.
func (c *Config) workerLine() string {
	if c.Register == nil {
		return ""
	}
	return fmt.Sprintf("  %s worker --store postgres://…\n                                   execute the runs beside API servers (server --no-worker)\n", c.name())
}

// versionLine is what `version` prints: the version, and the commit the
// binary was built from when the build recorded one.
func (c *Config) versionLine() string {
	bi, ok := debug.ReadBuildInfo()
	return c.versionOf(bi, ok)
}

// versionOf is versionLine of the build bi (ok: the binary has one).
func (c *Config) versionOf(bi *debug.BuildInfo, ok bool) string {
	v := c.Version
	if (v == "" || v == "dev") && ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version // go install github.com/weirhq/weir/cmd/weir@v0.1.0 stamps the module's
	}
	line := c.name() + " " + cmp.Or(v, "dev")
	if ok {
		rev, dirty := c.Commit, ""
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = cmp.Or(rev, s.Value)
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
		if len(rev) >= 12 {
			line += " (" + rev[:12] + dirty + ")"
		}
		line += " " + bi.GoVersion
	}
	return line
}

// Run runs the command line args (without the program's name) and returns
// its exit status: 0, 1 for a failure, 2 for a mistake on the command line.
func Run(ctx context.Context, cfg *Config, args []string, stdout, stderr io.Writer) int {
	if cfg == nil {
		cfg = &Config{}
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, cfg.usage())
		return 2
	}
	var err error
	switch cmd := args[0]; {
	case cmd == "demo" && cfg.Builtin:
		err = demoCmd(ctx, args[1:], stdout, stderr)
	case cmd == "server":
		err = serverCmd(ctx, cfg, args[1:], stdout, stderr)
	case cmd == "worker" && cfg.Register != nil:
		err = workerCmd(ctx, cfg, args[1:], stdout, stderr)
	case cmd == "runs":
		err = runsCmd(ctx, cfg.name(), args[1:], stdout, stderr)
	case cmd == "stream":
		err = streamCmd(ctx, cfg.name(), args[1:], stdout, stderr)
	case cmd == "limiters":
		err = limitersCmd(ctx, cfg.name(), args[1:], stdout, stderr)
	case cmd == "schedules":
		err = schedulesCmd(ctx, cfg.name(), args[1:], stdout, stderr)
	case cmd == "bench" && cfg.Builtin:
		err = benchCmd(ctx, args[1:], stdout, stderr)
	case cmd == "torture" && cfg.Builtin:
		err = tortureCmd(ctx, args[1:], stdout, stderr)
	case cmd == "version":
		fmt.Fprintln(stdout, cfg.versionLine())
	case cmd == "help" || cmd == "-h" || cmd == "--help":
		fmt.Fprint(stdout, cfg.usage())
	default:
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n%s", cfg.name(), cmd, cfg.usage())
		return 2
	}
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, cfg.name()+":", err)
		return 2
	}
	fmt.Fprintln(stderr, cfg.name()+":", err)
	if unreachable(err) {
		fmt.Fprintf(stderr, "%s: no weir server answers there: start one (%s server), or point --url (or $WEIR_URL) at yours\n", cfg.name(), cfg.name())
	}
	return 1
}

// unreachable reports whether err is a client's failure to connect to its
// server: refused, or no such host.
func unreachable(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}
