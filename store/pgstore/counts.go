package pgstore

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/store"
)

// What the store asks of PostgreSQL, counted on the client's side: the cost
// of a run in statements, round trips and commits does not move with the
// machine's load as its time does, so benchmarks report it per run and CI
// guards it (docs/benchmarks.md, "What a run costs").
//
// The counter is the pool's pgx tracer (Open installs it; a pool given to
// New is not counted). It takes no lock and allocates nothing.
type counter struct {
	statements atomic.Int64 // statements sent: each of a pipelined batch counts
	roundTrips atomic.Int64 // waits for the server: a statement alone, a batch, a prepare
	commits    atomic.Int64 // COMMITs sent (explicit transactions; a lone statement commits by itself)
	prepares   atomic.Int64 // statements prepared on a connection (the first use of each)
}

var (
	_ pgx.QueryTracer   = (*counter)(nil)
	_ pgx.BatchTracer   = (*counter)(nil)
	_ pgx.PrepareTracer = (*counter)(nil)
)

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.statements.Add(1)
	c.roundTrips.Add(1)
	if isCommit(d.SQL) {
		c.commits.Add(1)
	}
	return ctx
}

func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.roundTrips.Add(1)
	return ctx
}

func (c *counter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.statements.Add(1)
	if isCommit(d.SQL) {
		c.commits.Add(1)
	}
}

func (c *counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *counter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	return ctx
}

func (c *counter) TracePrepareEnd(_ context.Context, _ *pgx.Conn, d pgx.TracePrepareEndData) {
	if !d.AlreadyPrepared {
		c.prepares.Add(1)
		c.roundTrips.Add(1)
	}
}

func isCommit(sql string) bool { return len(sql) == 6 && strings.EqualFold(sql, "COMMIT") }

// Counts returns what the store asked of PostgreSQL since it opened
// (store.Counter). Statements, round trips and commits are counted only on
// a pool Open made.
func (s *Store) Counts() store.Counts {
	return store.Counts{
		Statements: s.count.statements.Load(),
		RoundTrips: s.count.roundTrips.Load(),
		Commits:    s.count.commits.Load(),
		Groups:     s.stats.groups.Load(),
		GroupOps:   s.stats.ops.Load(),
	}
}
