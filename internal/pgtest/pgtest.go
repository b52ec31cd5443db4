// Package pgtest gives tests the PostgreSQL server they run against: its URL
// (WEIR_TEST_DATABASE_URL, or the local server), a small admin pool, and
// fresh schemas dropped when the test ends.
//
// An unreachable server ends the test binary with one line saying how to
// start the server or how to run without it: a test never skips PostgreSQL
// unless the caller asked for the SQLite-only subset (SQLiteOnlyEnv).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultURL is the server the tests use unless WEIR_TEST_DATABASE_URL names
// another.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// URL returns the tests' database URL.
func URL() string {
	if u := os.Getenv("WEIR_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

var (
	adminOnce sync.Once
	admin     *pgxpool.Pool
	adminErr  error
)

// Admin returns the tests' own small pool, for creating and dropping
// schemas and looking at tables.
func Admin(t testing.TB) *pgxpool.Pool {
	t.Helper()
	adminOnce.Do(func() {
		// A server that is restarting (another package's test, opted in
		// with RestartEnv) is waited for, up to 30 s; one that refuses
		// connections without such a restart is reported at once.
		deadline := time.Now().Add(30 * time.Second)
		for {
			adminErr = connectAdmin()
			if adminErr == nil || time.Now().After(deadline) {
				return
			}
			if os.Getenv(RestartEnv) == "" && !strings.Contains(adminErr.Error(), "57P03") {
				return // not starting up or shutting down: not coming
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	if adminErr != nil {
		if os.Getenv(SQLiteOnlyEnv) != "" {
			t.Skipf("%s is set: this test needs PostgreSQL", SQLiteOnlyEnv)
		}
		// One line for the whole package, not one failure per test: the
		// fix is the same for all of them.
		unreachableOnce.Do(func() {
			fmt.Fprintf(os.Stderr, "weir tests: PostgreSQL is not reachable at %s (%v): start it (pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start), point WEIR_TEST_DATABASE_URL at one, or run the SQLite-only subset: %s=1 go test ./...\n",
				URL(), oneLine(adminErr), SQLiteOnlyEnv)
			os.Exit(1)
		})
	}
	return admin
}

// SQLiteOnlyEnv, set to any value, skips the tests that need PostgreSQL
// instead of failing them: the subset that runs anywhere.
const SQLiteOnlyEnv = "WEIR_TEST_SQLITE_ONLY"

// Available reports whether the tests' PostgreSQL server is to be used:
// false only when the caller asked for the SQLite-only subset.
func Available() bool { return os.Getenv(SQLiteOnlyEnv) == "" }

var unreachableOnce sync.Once

// oneLine is err's text on one line (pgx puts its cause on the next).
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

func connectAdmin() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(URL())
	if err != nil {
		return err
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return err
	}
	admin = pool
	return nil
}

// NewSchema returns a fresh schema name, dropped when t ends.
func NewSchema(t testing.TB) string {
	t.Helper()
	pool := Admin(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "weirtest_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		if err := Do(func(ctx context.Context) error {
			_, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`)
			return err
		}); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

// Do runs f again for up to 15s while it fails: the tests share the server
// with others who may restart it.
func Do(f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		err := f(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// RestartEnv opts a test run in to restarting the PostgreSQL server the
// tests use: "1" restarts the machine's only cluster with pg_ctlcluster
// (as root); any other value is a shell command that restarts it. Tests
// never restart a service of the machine without it; CI sets it.
const RestartEnv = "WEIR_TEST_PG_RESTART"

// RestartCommand returns the command that restarts the tests' PostgreSQL
// server, or nil if the caller did not opt in (RestartEnv) or this machine
// offers no way.
func RestartCommand() []string {
	c := os.Getenv(RestartEnv)
	switch {
	case c == "":
		return nil
	case c != "1":
		return []string{"sh", "-c", c}
	}
	if _, err := exec.LookPath("pg_ctlcluster"); err != nil || os.Geteuid() != 0 {
		return nil
	}
	vers, _ := filepath.Glob("/etc/postgresql/*/main")
	if len(vers) != 1 {
		return nil
	}
	v := filepath.Base(filepath.Dir(vers[0]))
	if _, err := strconv.Atoi(v); err != nil {
		return nil
	}
	return []string{"pg_ctlcluster", "--skip-systemctl-redirect", v, "main", "restart"}
}

// Restart restarts the tests' PostgreSQL server and returns once it
// answers again; it skips the test unless the caller opted in
// (RestartEnv).
func Restart(t testing.TB) {
	t.Helper()
	cmd := RestartCommand()
	if cmd == nil {
		t.Skipf("restarts PostgreSQL: set %s=1 (pg_ctlcluster, as root) or to a command that does", RestartEnv)
	}
	out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("restart PostgreSQL: %v\n%s", err, out)
	}
	if err := Do(func(ctx context.Context) error { return Admin(t).Ping(ctx) }); err != nil {
		t.Fatalf("PostgreSQL did not come back: %v", err)
	}
}
