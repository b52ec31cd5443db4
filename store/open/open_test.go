package open_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/open"
	"github.com/weirhq/weir/store/sqlitestore"
)

func TestParse(t *testing.T) {
	for _, c := range []struct{ dsn, kind, target string }{
		{"postgres://u@h:5432/db?sslmode=disable", "postgres", "postgres://u@h:5432/db?sslmode=disable"},
		{"PostgreSQL://h/db", "postgres", "PostgreSQL://h/db"},
		{"sqlite:/var/lib/weir.db", "sqlite", "/var/lib/weir.db"},
		{"sqlite:///var/lib/weir.db", "sqlite", "/var/lib/weir.db"},
		{"sqlite:rel/weir.db", "sqlite", "rel/weir.db"},
		{"file:weir.db", "sqlite", "weir.db"},
		{"/var/lib/weir.db", "sqlite", "/var/lib/weir.db"},
		{"weir.db", "sqlite", "weir.db"},
		{"./a:b.db", "sqlite", "./a:b.db"},
		{`C:\weir.db`, "sqlite", `C:\weir.db`},
		{"mysql://h/db", "mysql", "//h/db"},
		{"", "", ""},
	} {
		kind, target := open.Parse(c.dsn)
		if kind != c.kind || target != c.target {
			t.Errorf("Parse(%q) = %q, %q; want %q, %q", c.dsn, kind, target, c.kind, c.target)
		}
	}
}

func TestOpenSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "weir.db")
	s, err := open.Open(t.Context(), "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*sqlitestore.Store); !ok {
		t.Fatalf("opened %T", s)
	}
}

func TestOpenRefuses(t *testing.T) {
	for _, dsn := range []string{"", "mysql://h/db", "sqlite:"} {
		if _, err := open.Open(t.Context(), dsn); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Open(%q): err = %v, want ErrInvalid", dsn, err)
		}
	}
}
