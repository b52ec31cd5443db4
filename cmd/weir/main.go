// Command weir runs weir's demo, its server, and a client of that server.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

const usage = `weir — durable workflows for Go whose streams are exactly-once.

Usage:
  weir demo [--db PATH] [--fast]   run a step that streams tokens, fails midway and is retried
  weir server [--addr A] [--store sqlite:PATH] [--token T]
                                   serve the runs API and every stream over HTTP
  weir runs ls|show|start|cancel   the runs of a server
  weir runs signal|send|event      deliver to a run's hook, send it a message, read its run events
  weir stream tail|cat RUN NAME    read a run's stream from a server
  weir bench [WORKLOAD…] [--store S] [--url U] [--json]
                                   measure weir against same-run baselines
  weir torture [--trials N] [--seed S] [--store sqlite:DIR|postgres://…] [--soak D]
                                   prove exactly-once under faults (docs/reliability.md)
  weir version                     print the version

Run 'weir demo' first. 'weir COMMAND -h' tells more.
`

// version is weir's version: a release's (scripts/dist.sh sets it from
// VERSION with -ldflags -X), else "dev"; commit the commit it was built
// from, if the build said (-X again, or the build's VCS stamp).
var version, commit = "dev", ""

// versionLine is what `weir version` prints: the version, and the commit
// the binary was built from when the build recorded one.
func versionLine() string {
	line := "weir " + version
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := commit, ""
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

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "demo":
		err = demoCmd(ctx, args[1:], stdout)
	case "server":
		err = serverCmd(ctx, args[1:], stdout, stderr)
	case "runs":
		err = runsCmd(ctx, args[1:], stdout, stderr)
	case "stream":
		err = streamCmd(ctx, args[1:], stdout, stderr)
	case "bench":
		err = benchCmd(ctx, args[1:], stdout)
	case "torture":
		err = tortureCmd(ctx, args[1:], stdout)
	case "version":
		fmt.Fprintln(stdout, versionLine())
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "weir: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "weir:", err)
		return 2
	}
	fmt.Fprintln(stderr, "weir:", err)
	return 1
}
