package sqlitestore_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

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

// After Close every operation returns ErrClosedStore, and a Wait blocked at
// the time returns too.
func TestClosedStore(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "weir.db"))
	si, err := s.OpenStream(t.Context(), &store.OpenStreamParams{Path: "s", Create: true})
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- s.Wait(t.Context(), si.ID, 0) }()
	time.Sleep(10 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; !errors.Is(err, store.ErrClosedStore) {
		t.Fatalf("blocked Wait: err = %v", err)
	}
	_, err = s.Append(t.Context(), &store.AppendParams{StreamID: si.ID, Chunks: [][]byte{[]byte("x")}})
	if !errors.Is(err, store.ErrClosedStore) {
		t.Fatalf("Append after Close: err = %v", err)
	}
	_, err = s.Read(t.Context(), &store.ReadParams{StreamID: si.ID})
	if !errors.Is(err, store.ErrClosedStore) {
		t.Fatalf("Read after Close: err = %v", err)
	}
	_, err = s.GetRun(t.Context(), "r")
	if !errors.Is(err, store.ErrClosedStore) {
		t.Fatalf("GetRun after Close: err = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
