// Command dbos-peer is the DBOS Go side of weir's `weir bench dbos-like`
// comparison: the same workload (runs × chunks, a fixed number of runs at a
// time) run through DBOS Transact for Go on a PostgreSQL system database,
// so that both can be measured in the same sitting on the same server.
//
// Each round starts from an empty DBOS system schema, launches a DBOS
// context, runs the workload, checks every run's stream, and shuts DBOS
// down. See README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
)

const streamKey = "out"

type config struct {
	db          string
	schema      string
	runs        int
	chunks      int
	concurrency int
	size        int
	mode        string
	rounds      int
	json        bool
	verify      bool
	close       bool
	verbose     bool
}

// result is one round's figures; its JSON mirrors the fields of weir's
// bench.Result that apply, so both can be read by the same tooling.
type result struct {
	Workload  string             `json:"workload"`
	Store     string             `json:"store"`
	Mode      string             `json:"mode"`
	Round     int                `json:"round"`
	Unit      string             `json:"unit"`
	Ops       int64              `json:"ops"`
	Seconds   float64            `json:"seconds"`
	OpsPerSec float64            `json:"ops_per_sec"`
	P50Ms     float64            `json:"p50_ms"`
	P99Ms     float64            `json:"p99_ms"`
	MaxMs     float64            `json:"max_ms"`
	Extra     map[string]float64 `json:"extra"`
	Notes     []string           `json:"notes,omitempty"`
}

func main() {
	var c config
	flag.StringVar(&c.db, "db", "postgres://postgres@127.0.0.1:5432/dbosbench?sslmode=disable", "PostgreSQL URL of the DBOS system database (created if missing)")
	flag.StringVar(&c.schema, "schema", "dbos", "DBOS system schema; dropped and recreated at the start of every round")
	flag.IntVar(&c.runs, "runs", 500, "workflow runs per round")
	flag.IntVar(&c.chunks, "chunks", 20, "stream chunks written by each run")
	flag.IntVar(&c.concurrency, "concurrency", 16, "runs in flight at once (goroutines, each starting a run and waiting for its result)")
	flag.IntVar(&c.size, "size", 100, "bytes per chunk")
	flag.StringVar(&c.mode, "mode", "workflow", "workflow: WriteStream from workflow code (exactly-once, one checkpointed step per write); step: WriteStream from inside one step (at-least-once)")
	flag.IntVar(&c.rounds, "rounds", 1, "rounds to run, each from a fresh system schema")
	flag.BoolVar(&c.json, "json", false, "print one JSON object per round instead of text")
	flag.BoolVar(&c.verify, "verify", true, "after each round (untimed), read every run's stream back and check its chunks")
	flag.BoolVar(&c.close, "close", false, "also close each run's stream (CloseStream, one more checkpointed step) after its chunks")
	flag.BoolVar(&c.verbose, "v", false, "show DBOS's own log (info level)")
	flag.Parse()

	if err := c.check(); err != nil {
		fmt.Fprintln(os.Stderr, "dbos-peer:", err)
		flag.Usage()
		os.Exit(2)
	}
	ctx := context.Background()
	if err := ensureDatabase(ctx, c.db); err != nil {
		fmt.Fprintln(os.Stderr, "dbos-peer:", err)
		os.Exit(1)
	}
	if !c.json {
		fmt.Printf("dbos-peer: DBOS Go %s, %d runs × %d chunks × %d B, %d at a time, mode=%s, db=%s\n",
			dbosVersion, c.runs, c.chunks, c.size, c.concurrency, c.mode, redact(c.db))
	}
	var all []*result
	for r := 1; r <= c.rounds; r++ {
		res, err := round(ctx, &c, r)
		if err != nil {
			fmt.Fprintf(os.Stderr, "dbos-peer: round %d: %v\n", r, err)
			os.Exit(1)
		}
		all = append(all, res)
		if c.json {
			enc := json.NewEncoder(os.Stdout)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(res); err != nil {
				fmt.Fprintln(os.Stderr, "dbos-peer:", err)
				os.Exit(1)
			}
		} else {
			fmt.Printf("round %d: %d chunks in %.3fs: %.0f chunks/s, %.1f runs/s (run p50 %.1f ms, p99 %.1f ms, max %.1f ms)\n",
				r, res.Ops, res.Seconds, res.OpsPerSec, res.Extra["runs_per_sec"], res.P50Ms, res.P99Ms, res.MaxMs)
		}
	}
	if !c.json && len(all) > 1 {
		var cps, rps []float64
		for _, r := range all {
			cps = append(cps, r.OpsPerSec)
			rps = append(rps, r.Extra["runs_per_sec"])
		}
		fmt.Printf("median of %d rounds: %.0f chunks/s, %.1f runs/s\n", len(all), median(cps), median(rps))
	}
}

func (c *config) check() error {
	switch {
	case c.mode != "workflow" && c.mode != "step":
		return fmt.Errorf("-mode must be workflow or step, not %q", c.mode)
	case c.runs < 1, c.chunks < 1, c.concurrency < 1, c.size < 1, c.rounds < 1:
		return errors.New("-runs, -chunks, -concurrency, -size and -rounds must be at least 1")
	case c.schema == "":
		return errors.New("-schema must not be empty")
	}
	return nil
}

// round runs the workload once on a fresh DBOS system schema.
func round(ctx context.Context, c *config, n int) (*result, error) {
	if err := dropSchema(ctx, c.db, c.schema); err != nil {
		return nil, err
	}
	level := slog.LevelWarn
	if c.verbose {
		level = slog.LevelInfo
	}
	dctx, err := dbos.NewContext(ctx, dbos.Config{
		AppName:        "weir-bench-dbos-peer",
		DatabaseURL:    c.db,
		DatabaseSchema: c.schema,
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	})
	if err != nil {
		return nil, fmt.Errorf("dbos.NewContext: %w", err)
	}

	// The workflow: c.chunks stream writes, either from workflow code (each
	// WriteStream is then its own checkpointed step: exactly-once) or from
	// inside one step (the writes are attributed to that step and happen
	// again if the step is retried: at-least-once).
	var body dbos.Workflow[int, int]
	switch c.mode {
	case "workflow":
		body = func(wctx dbos.Context, _ int) (int, error) {
			buf := make([]byte, c.size)
			for j := range c.chunks {
				fillChunk(buf, 'w', j)
				if err := dbos.WriteStream(wctx, streamKey, string(buf)); err != nil {
					return 0, err
				}
			}
			if c.close {
				if err := dbos.CloseStream(wctx, streamKey); err != nil {
					return 0, err
				}
			}
			return c.chunks, nil
		}
	case "step":
		body = func(wctx dbos.Context, _ int) (int, error) {
			k, err := dbos.RunAsStep(wctx, func(sctx context.Context) (int, error) {
				dc, ok := sctx.(dbos.Context)
				if !ok {
					return 0, fmt.Errorf("step context is %T, not a dbos.Context", sctx)
				}
				buf := make([]byte, c.size)
				for j := range c.chunks {
					fillChunk(buf, 's', j)
					if err := dbos.WriteStream(dc, streamKey, string(buf)); err != nil {
						return 0, err
					}
				}
				return c.chunks, nil
			}, dbos.WithStepName("emit"))
			if err != nil {
				return 0, err
			}
			if c.close {
				// CloseStream is refused inside a step; it is its own step here.
				if err := dbos.CloseStream(wctx, streamKey); err != nil {
					return 0, err
				}
			}
			return k, nil
		}
	}
	dbos.RegisterWorkflow(dctx, body, dbos.WithWorkflowName("bench-dbos-"+c.mode))

	if err := dbos.Launch(dctx); err != nil {
		return nil, fmt.Errorf("dbos.Launch: %w", err)
	}
	defer func() { _ = dbos.Shutdown(dctx, 30*time.Second) }()

	ids := make([]string, c.runs)
	lat := make([]time.Duration, c.runs)
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, c.concurrency)
	t0 := time.Now()
	for range c.concurrency {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < c.runs; i = int(next.Add(1) - 1) {
				s := time.Now()
				h, err := dbos.RunWorkflow(dctx, body, i)
				if err != nil {
					errc <- fmt.Errorf("run %d: RunWorkflow: %w", i, err)
					return
				}
				k, err := h.GetResult()
				if err != nil {
					errc <- fmt.Errorf("run %d (%s): GetResult: %w", i, h.GetWorkflowID(), err)
					return
				}
				if k != c.chunks {
					errc <- fmt.Errorf("run %d (%s): result %d, want %d", i, h.GetWorkflowID(), k, c.chunks)
					return
				}
				lat[i] = time.Since(s)
				ids[i] = h.GetWorkflowID()
			}
		})
	}
	wg.Wait()
	d := time.Since(t0)
	select {
	case err := <-errc:
		return nil, err
	default:
	}

	total := int64(c.runs) * int64(c.chunks)
	res := &result{
		Workload: "dbos-peer", Store: redact(c.db), Mode: c.mode, Round: n, Unit: "chunks",
		Ops: total, Seconds: d.Seconds(), OpsPerSec: float64(total) / d.Seconds(),
		Extra: map[string]float64{
			"runs_per_sec": float64(c.runs) / d.Seconds(),
			"runs":         float64(c.runs),
			"chunks":       float64(c.chunks),
			"size":         float64(c.size),
			"concurrency":  float64(c.concurrency),
		},
	}
	slices.Sort(lat)
	res.P50Ms = ms(quantile(lat, 0.50))
	res.P99Ms = ms(quantile(lat, 0.99))
	res.MaxMs = ms(lat[len(lat)-1])
	res.Notes = append(res.Notes, "DBOS Go "+dbosVersion+"; "+modeNote(c.mode))
	if c.verify {
		if err := verify(dctx, c, ids); err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		res.Notes = append(res.Notes, fmt.Sprintf("verified (untimed): every run's stream holds its %d chunks in order", c.chunks))
	}
	return res, nil
}

func modeNote(mode string) string {
	if mode == "step" {
		return "WriteStream inside one RunAsStep step: at-least-once"
	}
	return "WriteStream from workflow code, one checkpointed step per write: exactly-once"
}

// verify reads every run's stream back (a snapshot read: the runs are done)
// and checks it holds exactly the chunks written, in order.
func verify(dctx dbos.Context, c *config, ids []string) error {
	tag := byte('w')
	if c.mode == "step" {
		tag = 's'
	}
	want := make([]byte, c.size)
	for i, id := range ids {
		vs, closed, err := dbos.ReadStream[string](dctx, id, streamKey, dbos.WithReadStreamSnapshot())
		if err != nil {
			return fmt.Errorf("run %d (%s): %w", i, id, err)
		}
		if len(vs) != c.chunks {
			return fmt.Errorf("run %d (%s): %d chunks, want %d", i, id, len(vs), c.chunks)
		}
		if c.close && !closed {
			return fmt.Errorf("run %d (%s): stream not closed", i, id)
		}
		for j, v := range vs {
			fillChunk(want, tag, j)
			if v != string(want) {
				return fmt.Errorf("run %d (%s): chunk %d is %q, want %q", i, id, j, v, want)
			}
		}
	}
	return nil
}

// fillChunk writes a recognisable chunk: tag, a 10-digit index, then
// letters (the same shape as weir's bench chunks).
func fillChunk(b []byte, tag byte, i int) {
	for j := range b {
		b[j] = 'a' + byte(j%26)
	}
	b[0] = tag
	for j := min(10, len(b)-1); j >= 1; j-- {
		b[j] = '0' + byte(i%10)
		i /= 10
	}
}

// ensureDatabase creates the database named in url if it does not exist,
// connecting to the server's "postgres" database to do so.
func ensureDatabase(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("parse -db: %w", err)
	}
	name := cfg.Database
	if name == "" {
		return errors.New("-db names no database")
	}
	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect to the postgres database: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// dropSchema drops the DBOS system schema so that DBOS recreates it empty
// on launch: rounds and invocations start from the same state.
func dropSchema(ctx context.Context, url, schema string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	return nil
}

// redact hides a password in a URL for printing.
func redact(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil || cfg.Password == "" {
		return url
	}
	return fmt.Sprintf("postgres://%s:***@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// dbosVersion is the version of the DBOS module this binary was built with.
var dbosVersion = func() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/dbos-inc/dbos-transact-golang" {
				if m.Replace != nil {
					return m.Replace.Version
				}
				return m.Version
			}
		}
	}
	return "(unknown)"
}()
