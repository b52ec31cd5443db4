// Package open opens a store from one string, choosing the backend by its
// scheme: what a program's --store flag or a config file holds.
//
//	postgres://user@host:5432/db?sslmode=disable    PostgreSQL (pgstore), schema "weir"
//	postgres://…/db?schema=weir_staging             PostgreSQL, another schema
//	sqlite:/var/lib/weir/weir.db                    a SQLite file (sqlitestore)
//	/var/lib/weir/weir.db                           the same: a path is a SQLite file
package open

import (
	"context"
	"fmt"
	"strings"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/pgstore"
	"github.com/weirhq/weir/store/sqlitestore"
)

// Open opens the store dsn names, with each backend's default
// configuration:
//   - postgres://… or postgresql://…: the whole URL goes to pgstore.Open;
//   - sqlite:PATH (also sqlite://PATH and file:PATH): sqlitestore.Open(PATH);
//   - anything without a scheme: a SQLite file at that path.
//
// Both backends have every capability (store.Full). Returns
// store.ErrInvalid for an empty dsn or an unknown scheme.
func Open(ctx context.Context, dsn string) (store.Full, error) {
	kind, rest := Parse(dsn)
	switch kind {
	case "postgres":
		s, err := pgstore.Open(ctx, rest, nil)
		if err != nil {
			return nil, err
		}
		return s, nil
	case "sqlite":
		if rest == "" {
			return nil, fmt.Errorf("%w: store %q: no SQLite file path", store.ErrInvalid, dsn)
		}
		s, err := sqlitestore.Open(ctx, rest, nil)
		if err != nil {
			return nil, err
		}
		return s, nil
	case "":
		return nil, fmt.Errorf("%w: empty store", store.ErrInvalid)
	}
	return nil, fmt.Errorf("%w: store %q: unknown scheme %q (want postgres:// or sqlite:)", store.ErrInvalid, dsn, kind)
}

// Parse tells which backend dsn names ("postgres", "sqlite", or its
// unknown scheme; "" for an empty dsn) and what that backend opens: the
// whole URL for PostgreSQL, the file path for SQLite.
func Parse(dsn string) (kind, target string) {
	if dsn == "" {
		return "", ""
	}
	scheme, rest, ok := strings.Cut(dsn, ":")
	// A path has no scheme; nor does a Windows drive letter ("C:\…").
	if !ok || len(scheme) < 2 || strings.ContainsAny(scheme, `/\.`) {
		return "sqlite", dsn
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		return "postgres", dsn
	case "sqlite", "sqlite3", "file":
		return "sqlite", strings.TrimPrefix(rest, "//")
	}
	return strings.ToLower(scheme), rest
}
