package pgstore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrationFS holds the schema's migrations, NNNN_name.sql, applied in order.
// Never edit one that has shipped: add the next.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations() ([]migration, error) {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var out []migration
	for i, n := range names {
		base := path.Base(n)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v != i+1 {
			return nil, fmt.Errorf("migration %s: want number %04d", base, i+1)
		}
		b, err := migrationFS.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: base, sql: string(b)})
	}
	return out, nil
}

// SchemaVersion is the schema version this build migrates to.
func SchemaVersion() int {
	ms, err := loadMigrations()
	if err != nil {
		panic(err)
	}
	return len(ms)
}

// migrate brings schema to the latest version in one transaction, holding a
// transaction-scoped advisory lock so that processes starting at once apply
// each migration once: the others wait, then find nothing to do.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	q := pgx.Identifier{schema}.Sanitize()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('weir.migrate:' || $1, 0))`, schema); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	// IF NOT EXISTS still takes locks; under ours it cannot race another weir.
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+q); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+q+`.weir_migrations (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("create migrations table: %w", err)
	}
	var cur int
	if err := tx.QueryRow(ctx, `SELECT COALESCE(max(version), 0) FROM `+q+`.weir_migrations`).Scan(&cur); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if cur > len(ms) {
		return fmt.Errorf("%w: schema %s is at version %d, this build knows %d", ErrSchemaTooNew, schema, cur, len(ms))
	}
	if cur == len(ms) {
		return tx.Commit(ctx)
	}
	if _, err := tx.Exec(ctx, `SET LOCAL search_path TO `+q); err != nil {
		return err
	}
	for _, m := range ms[cur:] {
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+q+`.weir_migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}
