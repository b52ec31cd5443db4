package sqlitestore_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/sqlitestore"
	"github.com/weirhq/weir/store/storetest"
)

func open(t testing.TB, path string) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			return open(t, filepath.Join(t.TempDir(), "weir.db"))
		},
		Reopen: func(t *testing.T, s store.Store) store.Store {
			old := s.(*sqlitestore.Store)
			if err := old.Close(); err != nil {
				t.Fatal(err)
			}
			return open(t, old.Path())
		},
	})
}

// A second store on an open database would write behind the first one's
// caches: Open refuses it until the first is closed.
func TestOpenTwiceIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "weir.db")
	s := open(t, path)
	if _, err := sqlitestore.Open(t.Context(), path, nil); !errors.Is(err, sqlitestore.ErrInUse) {
		t.Fatalf("second Open: err = %v, want ErrInUse", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	open(t, path)
}

func TestConfigIsValidated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "weir.db")
	for _, cfg := range []*sqlitestore.Config{{Synchronous: "SOMETIMES"}, {MaxBatch: -1}} {
		if _, err := sqlitestore.Open(t.Context(), path, cfg); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Open(%+v): err = %v, want ErrInvalid", cfg, err)
		}
	}
}

// A file from before migration 5 gets each stream's data bytes counted
// from its records: a fork's copied records not included.
func TestDataBytesBackfill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "weir.db")
	s := open(t, path)
	ctx := t.Context()
	src, _, err := s.CreateStream(ctx, &store.CreateStreamParams{Path: "src", Chunks: [][]byte{[]byte("abc"), []byte("de")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, &store.AppendParams{StreamID: src.ID, Writer: "w", Attempt: 1, Chunks: [][]byte{[]byte("fghi")}}); err != nil {
		t.Fatal(err)
	}
	fork, _, err := s.CreateStream(ctx, &store.CreateStreamParams{Path: "fork", Fork: &store.ForkParams{SourceID: src.ID, Offset: -1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, &store.AppendParams{StreamID: fork.ID, Chunks: [][]byte{[]byte("xy")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	// Back to version 4: what migrations 5 to 18 made is undone.
	for _, q := range []string{`DROP TABLE run_data`, `ALTER TABLE runs ADD COLUMN input BLOB`, `ALTER TABLE runs ADD COLUMN output BLOB`, `DROP INDEX runs_limiters`, `DROP INDEX runs_lined`, `ALTER TABLE runs DROP COLUMN limiters`, `ALTER TABLE runs DROP COLUMN line_priority`, `DROP INDEX runs_queued`, `DROP INDEX runs_dedupe`, `ALTER TABLE runs DROP COLUMN queue`, `ALTER TABLE runs DROP COLUMN queue_key`,
		`ALTER TABLE runs DROP COLUMN priority`, `ALTER TABLE runs DROP COLUMN dedupe`, `ALTER TABLE runs DROP COLUMN queued`, `ALTER TABLE runs DROP COLUMN version`, `ALTER TABLE runs DROP COLUMN awaits`, `ALTER TABLE runs DROP COLUMN inbox`, `ALTER TABLE runs DROP COLUMN inbox_bytes`, `ALTER TABLE runs DROP COLUMN parent_id`, `ALTER TABLE runs DROP COLUMN trace_parent`, `DROP TABLE hooks`, `DROP TABLE hook_keys`,
		`DROP TABLE message_keys`, `DROP TABLE run_events`, `DROP TABLE limiters`, `DROP TABLE schedules`, `DROP INDEX streams_standalone`,
		`ALTER TABLE streams DROP COLUMN data_bytes`, `PRAGMA user_version = 4`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	for id, want := range map[int64]int64{src.ID: 9, fork.ID: 2} {
		si, err := s.GetStream(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if si.DataBytes != want {
			t.Errorf("stream %q: DataBytes %d after the migration, want %d", si.Path, si.DataBytes, want)
		}
	}
}

// Not parallel: it measures the heap (storetest.LeavesRunDataUnread).
func TestLeavesRunDataUnread(t *testing.T) {
	s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "weir.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	storetest.LeavesRunDataUnread(t, s)
}

// Not parallel: it measures the heap (storetest.LeavesWorldRunDataUnread).
func TestLeavesWorldRunDataUnread(t *testing.T) {
	s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "weir.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	storetest.LeavesWorldRunDataUnread(t, s)
}

// Not parallel: it measures the heap (storetest.ReadHoldsAPage). With 32
// KiB windows, every batch is read a window at a time.
func TestReadHoldsAPage(t *testing.T) {
	for _, window := range []int{0, 32<<10 - 1<<10} {
		t.Run(fmt.Sprintf("window %d", window), func(t *testing.T) {
			s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "weir.db"), &sqlitestore.Config{ReadWindow: window})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			storetest.ReadHoldsAPage(t, s, 0)
		})
	}
}

// columns lists a table's columns in their order on disk.
func columns(t *testing.T, db *sql.DB, table string) []string {
	t.Helper()
	rows, err := db.Query(`SELECT name FROM pragma_table_info(?) ORDER BY cid`, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		out = append(out, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A run's data lives apart from its row (run_data, migration 18): SQLite
// reads and rewrites a row whole at every UPDATE and reaches a column past
// a large value through its overflow pages, and a claim, a poll or a
// message counted in a run's inbox must not read its input. The row's
// error, which may be long, comes last. A column added with ALTER TABLE
// lands after it and fails this test: add it by a rebuild.
func TestRunDataLivesApart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "weir.db")
	open(t, path)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cols := columns(t, db, "runs")
	if slices.Contains(cols, "input") || slices.Contains(cols, "output") || cols[len(cols)-1] != "error" {
		t.Fatalf("runs columns %v: no input or output, and error last", cols)
	}
	if got := columns(t, db, "run_data"); !slices.Equal(got, []string{"seq", "output", "input"}) {
		t.Fatalf("run_data columns %v", got)
	}
}

// A file from before migration 18, its runs' data amid their columns, is
// rebuilt with the data apart, and loses nothing: runs, their data, their
// logs, which refer to them.
func TestRunDataRebuild(t *testing.T) {
	// 16: the layout migrations 1 to 16 made, the data after status; 17:
	// main's for a day, the data last in the row.
	for _, v := range []int{16, 17} {
		t.Run(fmt.Sprint("version ", v), func(t *testing.T) { testRunDataRebuild(t, v) })
	}
}

func testRunDataRebuild(t *testing.T, version int) {
	path := filepath.Join(t.TempDir(), "weir.db")
	s := open(t, path)
	ctx := t.Context()
	input := bytes.Repeat([]byte("in"), 40<<10) // past a page: overflow pages
	run, _, err := s.CreateRun(ctx, &store.CreateRunParams{ID: "r1", Workflow: "wf", Input: input, Owner: "w", LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Advance(ctx, &store.AdvanceParams{RunID: "r1", LeaseEpoch: run.LeaseEpoch,
		Events: []store.Event{{Type: store.EventMessageReceived, Name: "t", Data: []byte("m")}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLimiter(ctx, &limit.Config{Name: "q", Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateRun(ctx, &store.CreateRunParams{ID: "r2", Workflow: "wf", Queue: "q", Input: []byte(`"x"`)}); err != nil {
		t.Fatal(err)
	}
	before, err := s.GetRun(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	// Back to the version's layout, the data in the runs row.
	old := []string{"seq", "id", "workflow", "status", "input", "output", "error", "created_at", "updated_at",
		"wake_at", "lease_owner", "lease_expires", "lease_epoch", "cancel_requested", "kind", "parent_id",
		"trace_parent", "queue", "queue_key", "priority", "dedupe", "queued", "version", "awaits", "inbox",
		"inbox_bytes", "limiters", "line_priority"}
	if version == 17 {
		old = append(slices.DeleteFunc(old, func(c string) bool { return c == "input" || c == "output" || c == "error" }), "error", "output", "input")
	}
	types := map[string]string{"seq": "INTEGER PRIMARY KEY", "id": "TEXT NOT NULL UNIQUE", "workflow": "TEXT NOT NULL",
		"status": "TEXT NOT NULL", "input": "BLOB", "output": "BLOB", "error": "TEXT NOT NULL DEFAULT ''",
		"created_at": "INTEGER NOT NULL", "updated_at": "INTEGER NOT NULL", "awaits": "TEXT", "limiters": "TEXT",
		"line_priority": "INTEGER", "kind": "TEXT NOT NULL DEFAULT ''", "parent_id": "TEXT NOT NULL DEFAULT ''",
		"trace_parent": "TEXT NOT NULL DEFAULT ''", "queue": "TEXT NOT NULL DEFAULT ''", "queue_key": "TEXT NOT NULL DEFAULT ''",
		"dedupe": "TEXT NOT NULL DEFAULT ''", "version": "TEXT NOT NULL DEFAULT ''", "lease_owner": "TEXT NOT NULL DEFAULT ''"}
	var defs []string
	for _, c := range old {
		typ := types[c]
		if typ == "" {
			typ = "INTEGER NOT NULL DEFAULT 0"
		}
		defs = append(defs, c+" "+typ)
	}
	list := strings.Join(slices.DeleteFunc(slices.Clone(old), func(c string) bool { return c == "input" || c == "output" }), ", ")
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`PRAGMA foreign_keys = OFF`, `BEGIN`,
		`CREATE TABLE runs_old (` + strings.Join(defs, ", ") + `)`,
		`INSERT INTO runs_old (` + list + `) SELECT ` + list + ` FROM runs`,
		`UPDATE runs_old SET input = (SELECT input FROM run_data d WHERE d.seq = runs_old.seq),
			output = (SELECT output FROM run_data d WHERE d.seq = runs_old.seq)`,
		`DROP TABLE run_data`, `DROP TABLE runs`, `ALTER TABLE runs_old RENAME TO runs`,
		`CREATE INDEX runs_runnable ON runs (wake_at, seq) WHERE status IN ('pending', 'running') AND kind = ''`,
		fmt.Sprintf(`PRAGMA user_version = %d`, version), `COMMIT`, `PRAGMA foreign_keys = ON`} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if got := columns(t, db, "runs"); !slices.Equal(got, old) {
		t.Fatalf("the old layout: %v", got)
	}
	conn.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, path)
	after, err := s.GetRun(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(after, before) {
		t.Errorf("run after the rebuild:\n%+v\nwant\n%+v", after, before)
	}
	page, err := s.ListEventsPage(ctx, &store.ListEventsParams{RunID: "r1", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 1 || string(page.Events[0].Data) != "m" {
		t.Errorf("r1's log after the rebuild: %+v", page.Events)
	}
	if q, err := s.GetRun(ctx, "r2"); err != nil || q.Queue != "q" {
		t.Errorf("queued run r2 after the rebuild: %+v, %v", q, err)
	}
	db, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if cols := columns(t, db, "runs"); slices.Contains(cols, "input") || cols[len(cols)-1] != "error" {
		t.Errorf("runs columns after the rebuild: %v", cols)
	}
	var data int
	if err := db.QueryRow(`SELECT count(*) FROM run_data`).Scan(&data); err != nil || data != 2 {
		t.Errorf("run_data holds %d rows after the rebuild (%v), want 2 (r1's input and r2's)", data, err)
	}
	var indexes int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs' AND sql IS NOT NULL`).Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	if indexes != 8 {
		t.Errorf("runs has %d indexes after the rebuild, want 8", indexes)
	}
}
