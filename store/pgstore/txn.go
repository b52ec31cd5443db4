package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// commitTimeout bounds a commit batch. Commits do not take the caller's
// context: cancelling the caller after the commit was sent would leave its
// outcome unknown, where letting it finish keeps "an error means nothing was
// written" true for everything but a lost connection.
const commitTimeout = 30 * time.Second

// txn is one explicit transaction on a pooled connection, driven by pipelined
// batches: the first begins with BEGIN, the last ends with COMMIT, so a
// transaction costs one round trip per batch.
type txn struct {
	c *pgxpool.Conn
	t *try
}

func (s *Store) acquire(ctx context.Context, t *try) (*txn, error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &txn{c: c, t: t}, nil
}

// Query runs a query inside the transaction.
func (x *txn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return x.c.Query(ctx, sql, args...)
}

// commit sends b, which must end with COMMIT, and reads every result.
func (x *txn) commit(ctx context.Context, b *pgx.Batch) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	x.t.committing = true
	return x.c.SendBatch(ctx, b).Close()
}

// release rolls back whatever is still open and returns the connection to
// the pool; a connection that cannot be rolled back is closed instead.
func (x *txn) release() {
	pc := x.c.Conn().PgConn()
	if !pc.IsClosed() && pc.TxStatus() != 'I' {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := pc.Exec(ctx, "ROLLBACK").ReadAll(); err != nil {
			_ = x.c.Conn().Close(ctx)
		}
		cancel()
	}
	x.c.Release()
}
