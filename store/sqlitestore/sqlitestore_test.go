package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

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
	// Back to version 4: what migrations 5 to 16 made is undone.
	for _, q := range []string{`DROP INDEX runs_limiters`, `DROP INDEX runs_lined`, `ALTER TABLE runs DROP COLUMN limiters`, `ALTER TABLE runs DROP COLUMN line_priority`, `DROP INDEX runs_queued`, `DROP INDEX runs_dedupe`, `ALTER TABLE runs DROP COLUMN queue`, `ALTER TABLE runs DROP COLUMN queue_key`,
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
