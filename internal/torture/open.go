package torture

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/sqlitestore"
)

// openPostgres is set by open_pg.go once the PostgreSQL store exists.
var openPostgres func(ctx context.Context, url string) (store.Full, error)

// IsPostgres reports whether dsn names a PostgreSQL database.
func IsPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// OpenStore opens "sqlite:PATH" or a postgres:// URL. A SQLite file still
// locked by a process that is dying is retried for a few seconds.
func OpenStore(ctx context.Context, dsn string) (store.Full, error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(dsn, "sqlite:")
		deadline := time.Now().Add(10 * time.Second)
		for {
			s, err := sqlitestore.Open(ctx, path, nil)
			if err == nil {
				return s, nil
			}
			if !errors.Is(err, sqlitestore.ErrInUse) || time.Now().After(deadline) {
				return nil, err
			}
			time.Sleep(20 * time.Millisecond)
		}
	case IsPostgres(dsn):
		if openPostgres == nil {
			return nil, errors.New("this build has no PostgreSQL store")
		}
		return openPostgres(ctx, dsn)
	}
	return nil, fmt.Errorf("store %q: want sqlite:PATH or postgres://…", dsn)
}
