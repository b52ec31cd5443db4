package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/pgstore"
	"github.com/weirhq/weir/store/sqlitestore"
)

// storeOpeners opens a store from a --store value, by scheme. A backend is
// one line here.
var storeOpeners = map[string]func(ctx context.Context, dsn string) (store.Store, error){
	"sqlite":     openSQLite,
	"postgres":   openPostgres,
	"postgresql": openPostgres,
}

// openStore opens the store a --store value names: sqlite:PATH, or
// postgres://… (any backend keyed by its URL scheme gets the whole URL).
func openStore(ctx context.Context, spec string) (store.Store, error) {
	scheme, rest, ok := strings.Cut(spec, ":")
	if !ok || scheme == "" {
		return nil, fmt.Errorf("--store %q: want sqlite:PATH (or a database URL)", spec)
	}
	open := storeOpeners[strings.ToLower(scheme)]
	if open == nil {
		return nil, fmt.Errorf("--store %q: unknown store %q (have: %s)", spec, scheme, strings.Join(storeSchemes(), ", "))
	}
	if strings.HasPrefix(rest, "//") {
		return open(ctx, spec) // a URL: the backend parses it whole
	}
	return open(ctx, rest)
}

func storeSchemes() []string {
	var out []string
	for k := range storeOpeners {
		out = append(out, k)
	}
	return out
}

// openPostgres opens a PostgreSQL store; dsn is the whole postgres://… URL.
func openPostgres(ctx context.Context, dsn string) (store.Store, error) {
	s, err := pgstore.Open(ctx, dsn, nil)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// openSQLite opens sqlite:PATH[?synchronous=FULL|NORMAL|OFF|EXTRA]. FULL,
// the default, fsyncs every commit: an acknowledged write survives a power
// loss. NORMAL does not sync each commit: acknowledged writes survive a crash
// of the process, and the last ones may be lost to a power loss.
func openSQLite(ctx context.Context, spec string) (store.Store, error) {
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
