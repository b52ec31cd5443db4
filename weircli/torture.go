package weircli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/weirhq/weir/internal/torture"
)

// A torture worker is this binary re-executed with torture.WorkerEnv set: it
// must not reach main's command dispatch.
func init() {
	if os.Getenv(torture.WorkerEnv) != "1" {
		return
	}
	if err := torture.WorkerMain(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "weir torture worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func tortureCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("torture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	trials := fs.Int("trials", 20, "number of trials")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()%1_000_000), "first trial's seed (trial i uses seed+i)")
	dsn := fs.String("store", "sqlite:", "sqlite:DIR (a fresh file per trial) or postgres://…")
	faults := fs.String("faults", "", "comma-separated fault kinds (default: all but pg-restart, which restarts the machine's PostgreSQL and is only planned when named here): "+kinds())
	scale := fs.Float64("scale", 1, "multiply runs and chunks")
	keepGoing := fs.Bool("keep-going", false, "run every trial even after a violation")
	timeout := fs.Duration("trial-timeout", 90*time.Second, "fail a trial whose runs have not all ended by then")
	soak := fs.Duration("soak", 0, "instead of trials: sustained writes and reads for this long")
	quiet := fs.Bool("quiet", false, "no line per trial")
	agents := fs.Bool("agents", true, "add the agent shapes: hooks with several takers and closed with payloads pending, cancels and run deadlines over steps deaf to their context, final attempts that time out, child runs whose worker dies after their end")
	useHTTP := fs.Bool("http", true, "use HTTP through a proxy that cuts replies: start some runs (POST /v1/runs, with and without Idempotency-Key) and write streams (weir writers, Idempotency-Key and producer appends)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *soak > 0 {
		rep, err := torture.Soak(ctx, torture.SoakOptions{Store: *dsn, Duration: *soak, Log: stdout})
		if err != nil {
			return err
		}
		if len(rep.Problems) > 0 {
			return fmt.Errorf("soak failed: %s", strings.Join(rep.Problems, "; "))
		}
		return nil
	}
	opts := torture.Options{Trials: *trials, Seed: *seed, Store: *dsn, Scale: *scale, KeepGoing: *keepGoing, TrialTimeout: *timeout, HTTP: *useHTTP, Agents: *agents}
	if !*quiet {
		opts.Log = stdout
	}
	if *faults != "" {
		for _, k := range strings.Split(*faults, ",") {
			k := torture.FaultKind(strings.TrimSpace(k))
			if !slices.Contains(torture.AllFaults, k) {
				return fmt.Errorf("unknown fault %q (want %s)", k, kinds())
			}
			opts.Faults = append(opts.Faults, k)
		}
	}
	rep, err := torture.RunTrials(ctx, opts)
	if rep != nil {
		rep.Print(stdout)
	}
	if err != nil {
		return err
	}
	if len(rep.Failures) > 0 {
		f := rep.Failures[0]
		replay := fmt.Sprintf("weir torture --trials 1 --seed %d --store '%s'", f.Seed, *dsn)
		// The schedule follows from the seed and these: a replay without
		// them is another trial.
		if *faults != "" {
			replay += " --faults " + *faults
		}
		if *scale != 1 {
			replay += fmt.Sprintf(" --scale %g", *scale)
		}
		if !*agents {
			replay += " --agents=false"
		}
		if !*useHTTP {
			replay += " --http=false"
		}
		return fmt.Errorf("%d trial(s) violated exactly-once; replay with: %s", len(rep.Failures), replay)
	}
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	return nil
}

func kinds() string {
	var s []string
	for _, k := range torture.AllFaults {
		s = append(s, string(k))
	}
	return strings.Join(s, ",")
}
