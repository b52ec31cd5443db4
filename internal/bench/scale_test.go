package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/pgtest"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// TestScale runs the scale workload small against PostgreSQL with a built
// weir binary: 1 then 2 real `weir server` processes, each round on a fresh
// schema of its own (named after a random tag, dropped at its end). Besides
// the workload's own checks, every run is checked again here through the
// runs API: started once, completed once, its stream holding exactly its
// chunks; and with 2 processes both executed runs.
func TestScale(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := pgtest.Admin(t) // fails the test at once if PostgreSQL is unreachable
	// Where the server preloads pg_stat_statements, the workload's
	// statement counts are checked too.
	var preload string
	if err := admin.QueryRow(ctx, `SHOW shared_preload_libraries`).Scan(&preload); err != nil {
		t.Fatal(err)
	}
	withStatements := strings.Contains(preload, "pg_stat_statements")
	if withStatements {
		if _, err := admin.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
			t.Logf("pg_stat_statements: %v", err)
			withStatements = false
		}
	}
	bin := filepath.Join(t.TempDir(), "weir")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/weirhq/weir/cmd/weir").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	const runs, chunks, size = 24, 5, 64
	checked := map[int]map[int]int{} // processes → pid → runs executed
	scaleVerifyHook = func(ctx context.Context, n int, c *client.Client) error {
		byPID := map[int]int{}
		checked[n] = byPID
		var ids []string
		for run, err := range c.Runs(ctx, &client.ListOptions{Workflow: EmitWorkflow}) {
			if err != nil {
				return err
			}
			ids = append(ids, run.ID)
		}
		slices.Sort(ids)
		if len(ids) != runs || len(slices.Compact(slices.Clone(ids))) != runs {
			return fmt.Errorf("N=%d: %d runs (%d distinct), want %d", n, len(ids), len(slices.Compact(slices.Clone(ids))), runs)
		}
		for _, id := range ids {
			run, err := c.GetRun(ctx, id)
			if err != nil {
				return err
			}
			if run.Status != store.RunCompleted {
				return fmt.Errorf("run %s: %s", id, run.Status)
			}
			var out EmitOutput
			if err := json.Unmarshal(run.Output, &out); err != nil {
				return err
			}
			byPID[out.PID]++
			evs, err := c.Events(ctx, id, 0)
			if err != nil {
				return err
			}
			ends := 0
			for _, e := range evs {
				if e.Type == store.EventRunCompleted || e.Type == store.EventRunFailed || e.Type == store.EventRunCancelled {
					ends++
				}
			}
			if ends != 1 {
				return fmt.Errorf("run %s: %d ends in its log", id, ends)
			}
			var got [][]byte
			for rec, err := range c.Read(ctx, id, EmitStream, &client.ReadOptions{View: stream.CommittedView}) {
				if err != nil {
					return err
				}
				if rec.Kind == stream.KindData {
					got = append(got, rec.Data)
				}
			}
			if len(got) != chunks {
				return fmt.Errorf("run %s: %d chunks in its stream, want %d", id, len(got), chunks)
			}
			for j, b := range got {
				if want := EmitChunk(size, j); string(b) != string(want) {
					return fmt.Errorf("run %s: chunk %d is %q, want %q", id, j, b, want)
				}
			}
		}
		return nil
	}
	t.Cleanup(func() { scaleVerifyHook = nil })

	c := Config{
		Store: pgtest.URL(), Processes: []int{1, 2}, ScaleRuns: runs, ScaleChunks: chunks, ChunkSize: size,
		ScaleConcurrency: 3, ServerCommand: []string{bin, "server"},
	}.WithDefaults()
	v := &env{cfg: c, name: "scale", prog: startProgress(nil, "scale")}
	r, err := runScale(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2} {
		byPID := checked[n]
		total := 0
		for _, k := range byPID {
			total += k
		}
		if total != runs || len(byPID) != n {
			t.Errorf("N=%d: runs by process %v, want %d runs over %d processes", n, byPID, runs, n)
		}
		if got := r.Extra[fmt.Sprintf("n%d_processes_executing", n)]; got != float64(n) {
			t.Errorf("N=%d: the result says %v processes executed runs", n, got)
		}
		if r.Extra[fmt.Sprintf("n%d_runs_per_sec", n)] <= 0 || r.Extra[fmt.Sprintf("n%d_chunks_per_sec", n)] <= 0 {
			t.Errorf("N=%d: no throughput in %v", n, r.Extra)
		}
		if withStatements && r.Extra[fmt.Sprintf("n%d_pg_statements_per_run", n)] <= 0 {
			t.Errorf("N=%d: no statements counted in %v", n, r.Extra)
		}
		if r.Extra[fmt.Sprintf("n%d_pg_wal_bytes_per_run", n)] <= 0 {
			t.Errorf("N=%d: no WAL counted in %v", n, r.Extra)
		}
	}
	if r.Ratio <= 0 || !strings.Contains(r.RatioOf, "N=2") {
		t.Errorf("ratio %v (%s)", r.Ratio, r.RatioOf)
	}
	t.Logf("%s\n%s", strings.Join(r.Notes, "\n"), fmt.Sprint(r.Extra))
}

// TestScaleNeedsPostgres: on SQLite, scale refuses with a message that says
// why; and it runs only when named.
func TestScaleNeedsPostgres(t *testing.T) {
	_, err := Run(context.Background(), Config{ServerCommand: []string{"weir", "server"}}, []string{"scale"})
	if err == nil || !strings.Contains(err.Error(), "PostgreSQL") {
		t.Fatalf("scale on SQLite: %v", err)
	}
	if slices.Contains(Default(Config{URL: "http://127.0.0.1:1"}), "scale") {
		t.Error("scale is in the default workloads")
	}
}
