package sqlitestore_test

import (
	"errors"
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
