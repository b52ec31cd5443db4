package pgstore

import (
	"context"
	"io"
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
	c      *pgxpool.Conn
	t      *try
	schema string // the store's, for testHookCommitted
}

func (s *Store) acquire(ctx context.Context, t *try) (*txn, error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &txn{c: c, t: t, schema: s.cfg.Schema}, nil
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
	if err := x.c.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if testHookCommitted != nil && testHookCommitted(x.schema) {
		// The server committed; the client is made not to hear of it.
		_ = x.c.Conn().Close(ctx)
		return io.ErrUnexpectedEOF
	}
	return nil
}

// testHookCommitted, if set (by tests only), runs after each commit of a
// store on schema; true loses the commit's reply, as a connection cut after
// the server committed.
var testHookCommitted func(schema string) bool

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
