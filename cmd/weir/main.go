// Command weir runs weir's demo (and, later, its server, CLI and bench).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `weir — durable workflows for Go whose streams are exactly-once.

Usage:
  weir demo [--db PATH] [--fast]   run a step that streams tokens, fails midway and is retried
  weir bench [WORKLOAD…] [--store S] [--url U] [--json]
                                   measure weir against same-run baselines
  weir version                     print the version

Run 'weir demo' first.
`

var version = "dev"

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
	case "bench":
		err = benchCmd(ctx, args[1:], stdout)
	case "version":
		fmt.Fprintln(stdout, "weir", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "weir: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "weir:", err)
		return 1
	}
	return 0
}
