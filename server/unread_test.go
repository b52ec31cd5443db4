package server

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/pgtest"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/pgstore"
	"github.com/weirhq/weir/store/sqlitestore"
)

// onEveryStoreInTurn runs f on a server on each store, one after the
// other: for a test that measures the process's allocations, which no
// other test may share (the test itself must not be parallel).
func onEveryStoreInTurn(t *testing.T, f func(t *testing.T, d *dsServer)) {
	t.Run("sqlite", func(t *testing.T) {
		st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "weir.db"), &sqlitestore.Config{Synchronous: "OFF"})
		if err != nil {
			t.Fatal(err)
		}
		f(t, newDSServerOn(t, nil, st))
	})
	t.Run("postgres", func(t *testing.T) {
		st, err := pgstore.Open(context.Background(), pgtest.URL(), &pgstore.Config{Schema: pgtest.NewSchema(t), MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		f(t, newDSServerOn(t, nil, st))
	})
}

// bigInput is a run's input of 8 MiB, JSON. A run's input a store
// reads is copied into the heap at least once, by either driver, so a
// request that reads none of it allocates (allocated) far less; a
// wrapper of the store would not see the store's own reads.
const bigInput = 8 << 20

// createBig creates run id of a workflow no worker runs, with an input of
// bigInput bytes.
func createBig(t *testing.T, d *dsServer, id string) {
	t.Helper()
	input := []byte(`"` + strings.Repeat("i", bigInput-2) + `"`)
	if _, _, err := d.st.CreateRun(t.Context(), &store.CreateRunParams{ID: id, Workflow: "nobody", Input: input}); err != nil {
		t.Fatal(err)
	}
}

// GET /v1/runs/{id}/events/{key} of a key the run never set reads none of
// the run's input, at once (404) and waiting (?wait=: 204), on both
// stores. Red team, round nineteen: the store looked whether the run
// exists by reading it whole, and a wait looked again at every backoff:
// a run with a 15 MiB input cost 31 ms a look, and 128 waiters held a
// core. Not parallel: it measures the process's allocations.
func TestMissingRunEventReadsNoRunData(t *testing.T) {
	onEveryStoreInTurn(t, func(t *testing.T, d *dsServer) {
		createBig(t, d, "big")
		d.runsCall("GET", "/v1/runs/big/events/never").must(t, http.StatusNotFound) // warm
		if n := allocated(func() {
			for range 4 {
				d.runsCall("GET", "/v1/runs/big/events/never").must(t, http.StatusNotFound)
			}
		}); n >= bigInput {
			t.Errorf("4 GETs of a key never set allocated %d bytes: the run's input (%d bytes) was read", n, bigInput)
		}
		if n := allocated(func() {
			d.runsCall("GET", "/v1/runs/big/events/never?wait=300ms").must(t, http.StatusNoContent)
		}); n >= bigInput {
			t.Errorf("a wait of 300ms for a key never set allocated %d bytes: the run's input (%d bytes) was read", n, bigInput)
		}
	})
}
