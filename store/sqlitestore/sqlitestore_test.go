package sqlitestore_test

import (
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
