package weircli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/weirhq/weir/internal/bench"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/pgstore"
)

const benchUsage = `Usage: weir bench [WORKLOAD…] [flags]

Runs the named workloads (default: every embedded one, and http with --url),
each against a baseline measured in the same run, and prints a table (or one
JSON object per workload with --json). Progress goes to stderr.

Workloads:
%s
Flags:
`

func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c bench.Config
	fs.StringVar(&c.Store, "store", "", "store: sqlite:PATH or postgres://… (default: a fresh SQLite file per workload)")
	fs.StringVar(&c.URL, "url", "", "Durable Streams base URL for http; streams are created under it (default: an in-process weir server)")
	asJSON := fs.Bool("json", false, "print one JSON object per workload instead of a table")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	fs.IntVar(&c.ChunkSize, "chunk-size", 0, "bytes per chunk (default 100)")
	fs.DurationVar(&c.Duration, "duration", 0, "run append and http for this long instead of their counts")
	fs.DurationVar(&c.Linger, "linger", 0, "step writers' linger (default: the engine's, 2ms)")
	fs.IntVar(&c.Chunks, "chunks", 0, "append: total chunks (default 1,000,000)")
	fs.IntVar(&c.Writers, "writers", 0, "append: writers at once (default 16)")
	fs.IntVar(&c.AdoptChunks, "adopt-chunks", 0, "adopt, diverge: chunks of the retried step (default 100,000)")
	fs.IntVar(&c.Requests, "requests", 0, "http: requests (default 2,000)")
	fs.IntVar(&c.Clients, "clients", 0, "http: concurrent clients of the second phase, each on its own stream (default 16)")
	fs.IntVar(&c.Samples, "samples", 0, "tail: samples (default 1,000)")
	fs.DurationVar(&c.Interval, "interval", 0, "tail, fanout: pause between writes (default 2ms, 20ms)")
	fs.IntVar(&c.Steps, "steps", 0, "steps, replay: steps of the run (default 1,000)")
	fs.IntVar(&c.Runs, "runs", 0, "steps: short runs for runs/s (default 500)")
	fs.IntVar(&c.RunConcurrency, "run-concurrency", 0, "steps: those runs in flight at once, each started and awaited by a client (default 16)")
	fs.IntVar(&c.Replays, "replays", 0, "replay: replays (default 20)")
	fs.IntVar(&c.Readers, "readers", 0, "fanout: live readers (default 1,000)")
	fs.IntVar(&c.Messages, "messages", 0, "fanout: chunks written (default 50)")
	fs.IntVar(&c.DBOSRuns, "dbos-runs", 0, "dbos-like: runs (default 500)")
	fs.IntVar(&c.DBOSChunks, "dbos-chunks", 0, "dbos-like: chunks per run (default 20)")
	fs.IntVar(&c.CostsRuns, "costs-runs", 0, "costs: runs counted in each phase, one at a time (default 200)")
	fs.IntVar(&c.DBOSConcurrency, "dbos-concurrency", 0, "dbos-like: runs at once (default 16)")
	fs.IntVar(&c.TracingRounds, "tracing-rounds", 0, "tracing: rounds of each variant, interleaved (default 6)")
	fs.IntVar(&c.FlowRounds, "flow-rounds", 0, "flow: rounds of each variant (plain, queued, limited), interleaved (default 5)")
	fs.IntVar(&c.FlowQueueConcurrency, "flow-queue-concurrency", 0, "flow: the global limit of the queue across processes (default 8)")
	fs.IntVar(&c.FlowSlotRuns, "flow-slot-runs", 0, "flow: steps sharing a step limiter of 2 across processes (default 100)")
	fs.DurationVar(&c.FlowSlotHold, "flow-slot-hold", 0, "flow: how long each of them holds its slot (default 20ms, at most 1s)")
	fs.Var((*intList)(&c.Processes), "processes", "scale: the numbers of weir server processes to measure, e.g. 1,2,3 (default 1,2,3)")
	fs.IntVar(&c.ScaleRuns, "scale-runs", 0, "scale: runs for each number of processes (default 1,000)")
	fs.IntVar(&c.ScaleChunks, "scale-chunks", 0, "scale: chunks each run writes, of --chunk-size bytes (default 20)")
	fs.IntVar(&c.ScaleConcurrency, "scale-concurrency", 0, "scale: runs at once per process, started round-robin (default 16: 16×N in all)")
	fs.IntVar(&c.ScaleRounds, "scale-rounds", 0, "scale: measure each number of processes this many times, interleaved; figures are medians (default 1)")
	fs.DurationVar(&c.ScaleTimeout, "scale-timeout", 0, "scale: the longest one round's runs may take (default 5m)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memProfile := fs.String("memprofile", "", "write a heap profile at the end to this file")
	guard := fs.String("guard", "", "run the performance guard in this file (bench/guard.json): its workloads' ratios and counts must stay within its bands; exit 1 if one does not")
	fs.StringVar(&c.GuardPostgres, "guard-postgres", os.Getenv("WEIR_TEST_PG"), "guard: the PostgreSQL database of its PostgreSQL workloads (default $WEIR_TEST_PG, else "+bench.DefaultPostgres+")")
	// The cross-process reader of the tail workload (weir re-executes itself).
	tailReader := fs.Bool("tail-reader", false, "")
	runID := fs.String("run", "", "")
	fs.Usage = func() {
		var ws strings.Builder
		for _, w := range bench.Workloads() {
			fmt.Fprintf(&ws, "  %-10s %s\n", w[0], w[1])
		}
		fmt.Fprintf(fs.Output(), benchUsage, ws.String())
		fs.VisitAll(func(f *flag.Flag) {
			if f.Usage != "" {
				fmt.Fprintf(fs.Output(), "  --%s\t%s\n", f.Name, f.Usage)
			}
		})
	}
	// Flags may follow workload names.
	var names []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		names = append(names, fs.Arg(0))
		args = fs.Args()[1:]
	}

	bench.OpenStore = openBenchStore
	if *tailReader {
		if c.Store == "" || *runID == "" {
			return errors.New("--tail-reader needs --store and --run")
		}
		s, closeS, err := bench.OpenStore(ctx, c.Store)
		if err != nil {
			return err
		}
		defer closeS()
		return bench.TailReader(ctx, s, *runID, c.Samples, stdout)
	}

	if !*quiet {
		c.Progress = os.Stderr
	}
	if exe, err := os.Executable(); err == nil {
		c.ReaderCommand = []string{exe, "bench", "--tail-reader"}
		c.ServerCommand = []string{exe, "server"}
	}
	if *guard != "" {
		g, err := bench.ReadGuardFile(*guard)
		if err != nil {
			return err
		}
		vs, err := bench.RunGuard(ctx, g, c)
		if err != nil {
			return err
		}
		ok, err := bench.WriteVerdicts(stdout, vs)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("bench: the performance guard failed: a figure is outside its band (see above; bench/guard.json says how each is measured)")
		}
		return nil
	}
	stopProfile, err := startProfiles(*cpuProfile, *memProfile)
	if err != nil {
		return err
	}
	rs, err := bench.Run(ctx, c, names)
	if perr := stopProfile(); err == nil {
		err = perr
	}
	if len(rs) > 0 {
		if *asJSON {
			if werr := bench.WriteJSON(stdout, rs); err == nil {
				err = werr
			}
		} else if werr := bench.WriteTable(stdout, rs); err == nil {
			err = werr
		}
	}
	return err
}

// startProfiles starts a CPU profile to cpu (if set); the returned function
// stops it and writes a heap profile to mem (if set).
func startProfiles(cpu, mem string) (func() error, error) {
	var f *os.File
	if cpu != "" {
		var err error
		if f, err = os.Create(cpu); err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
	}
	return func() error {
		var errs []error
		if f != nil {
			pprof.StopCPUProfile()
			errs = append(errs, f.Close())
		}
		if mem != "" {
			m, err := os.Create(mem)
			if err != nil {
				return err
			}
			runtime.GC()
			errs = append(errs, pprof.WriteHeapProfile(m), m.Close())
		}
		return errors.Join(errs...)
	}, nil
}

// openBenchStore opens --store with the command's opener (store.go), except
// that PostgreSQL gets a schema of the bench's own.
func openBenchStore(ctx context.Context, dsn string) (store.Store, func() error, error) {
	var s store.Store
	var err error
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		s, err = pgstore.Open(ctx, dsn, &pgstore.Config{Schema: bench.PostgresSchema})
	} else {
		s, err = openStore(ctx, dsn)
	}
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

// intList is a flag of comma-separated positive integers.
type intList []int

func (l *intList) String() string {
	var parts []string
	for _, n := range *l {
		parts = append(parts, strconv.Itoa(n))
	}
	return strings.Join(parts, ",")
}

func (l *intList) Set(v string) error {
	*l = nil
	for _, p := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 {
			return fmt.Errorf("%q: want positive integers separated by commas", v)
		}
		*l = append(*l, n)
	}
	return nil
}
