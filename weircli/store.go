package weircli

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/open"
	"github.com/weirhq/weir/store/sqlitestore"
)

// openStore opens the store a --store value names, as package store/open
// reads it (sqlite:PATH, a bare path, postgres://…), plus SQLite options:
// sqlite:PATH?synchronous=NORMAL.
func openStore(ctx context.Context, spec string) (store.Full, error) {
	if kind, target := open.Parse(spec); kind == "sqlite" {
		return openSQLite(ctx, target)
	}
	s, err := open.Open(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("--store: %w", err)
	}
	return s, nil
}

// openSQLite opens PATH[?synchronous=FULL|NORMAL|OFF|EXTRA]. FULL, the
// default, fsyncs every commit: an acknowledged write survives a power loss.
// NORMAL does not sync each commit: acknowledged writes survive a crash of
// the process, and the last ones may be lost to a power loss.
func openSQLite(ctx context.Context, spec string) (store.Full, error) {
	path, query, _ := strings.Cut(spec, "?")
	if path == "" {
		return nil, fmt.Errorf("--store sqlite:PATH needs a path")
	}
	cfg := &sqlitestore.Config{}
	if query != "" {
		q, err := url.ParseQuery(query)
		if err != nil {
			return nil, fmt.Errorf("--store sqlite:%s: %v", spec, err)
		}
		for k, v := range q {
			switch k {
			case "synchronous":
				cfg.Synchronous = strings.ToUpper(v[len(v)-1])
			default:
				return nil, fmt.Errorf("--store sqlite:%s: unknown option %q (have: synchronous)", spec, k)
			}
		}
	}
	s, err := sqlitestore.Open(ctx, path, cfg)
	if err != nil {
		return nil, err
	}
	return s, nil
}
