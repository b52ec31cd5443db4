package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
)

var _ store.LeaseRenewer = (*Store)(nil)

// renewer is the connection leases are renewed on, apart from the pool: a
// pool whose connections all wait on a limiter's row, or on long step
// transactions, must not hold up the renewal that keeps a live worker's
// runs its own. One call at a time uses it; it is dialled again after a
// failure.
type renewer struct {
	mu   sync.Mutex
	conn *pgx.Conn
}

func (r *renewer) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil {
		_ = r.conn.Close(context.Background())
		r.conn = nil
	}
}

// RenewLeases renews leases in one statement on the renewal connection
// (store.LeaseRenewer).
func (s *Store) RenewLeases(ctx context.Context, ps []store.RenewLeaseParams) ([]store.RenewLeaseResult, error) {
	out := make([]store.RenewLeaseResult, len(ps))
	ids, epochs, expires := make([]string, 0, len(ps)), make([]int64, 0, len(ps)), make([]int64, 0, len(ps))
	now := s.cfg.Now()
	for i := range ps {
		if err := ps[i].Check(); err != nil {
			out[i].Err = fmt.Errorf("renew lease: %w", err)
			continue
		}
		ids, epochs, expires = append(ids, ps[i].RunID), append(epochs, ps[i].LeaseEpoch), append(expires, sqlrow.Nanos(now.Add(ps[i].LeaseTTL)))
	}
	if len(ids) == 0 {
		return out, nil
	}
	sortLeases(ids, epochs, expires)
	r := &s.renew
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.isClosed() { // under r.mu: Close closes the connection after it
		return nil, fmt.Errorf("renew leases: %w", store.ErrClosedStore)
	}
	var renewed map[lease]bool
	var err error
	// Once more on a fresh connection if the one kept failed: it may
	// have been cut (a restarted server, a proxy's idle timeout).
	for try := range 2 {
		if r.conn == nil || r.conn.IsClosed() {
			if r.conn, err = pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig); err != nil {
				r.conn = nil
				return nil, fmt.Errorf("renew leases: connect: %w", err)
			}
		}
		renewed, err = s.renewOn(ctx, r.conn, ids, epochs, expires, now)
		if err == nil {
			break
		}
		_ = r.conn.Close(context.Background())
		r.conn = nil
		if try == 1 || ctx.Err() != nil {
			return nil, fmt.Errorf("renew leases: %w", err)
		}
	}
	for i := range ps {
		if out[i].Err != nil {
			continue
		}
		cancel, ok := renewed[lease{ps[i].RunID, ps[i].LeaseEpoch}]
		if !ok {
			out[i].Err = s.leaseLostOn(ctx, r.conn, ps[i].RunID, ps[i].LeaseEpoch)
			continue
		}
		out[i].Cancel = cancel
	}
	return out, nil
}

// lease is a run's lease at an epoch.
type lease struct {
	run   string
	epoch int64
}

// renewOn renews the leases on conn and returns those renewed, with
// whether a cancel is requested of each.
func (s *Store) renewOn(ctx context.Context, conn *pgx.Conn, ids []string, epochs, expires []int64, now time.Time) (map[lease]bool, error) {
	rows, err := conn.Query(ctx, s.q.renewMany, ids, epochs, expires, sqlrow.Nanos(now))
	if err != nil {
		return nil, err
	}
	renewed := make(map[lease]bool, len(ids))
	var l lease
	var cancel bool
	_, err = pgx.ForEachRow(rows, []any{&l.run, &l.epoch, &cancel}, func() error {
		renewed[l] = cancel
		return nil
	})
	return renewed, err
}

// leaseLostOn explains why run's lease at epoch was not renewed.
func (s *Store) leaseLostOn(ctx context.Context, conn *pgx.Conn, run string, epoch int64) error {
	r := &apply.Run{ID: run}
	var status string
	err := conn.QueryRow(ctx, s.q.runLease, run).Scan(&r.Epoch, &r.Owner, &status)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("renew lease: run %q: %w", run, store.ErrNotFound)
	}
	if err != nil {
		// Not renewed, and not known why: as good as lost to the caller,
		// who gives the run up only once its lease ran out.
		return fmt.Errorf("renew lease: run %q: %w", run, err)
	}
	r.Status = store.RunStatus(status)
	if apply.CheckLease(r, epoch) == nil {
		// Still its lease: the row was skipped, locked (renewMany).
		return fmt.Errorf("renew lease: run %q: %w: its row is locked by a write in progress", run, store.ErrNotRenewed)
	}
	return fmt.Errorf("renew lease: %w", apply.LeaseLost(r, epoch))
}

// sortLeases sorts the leases to renew by run id, with their epochs and
// expiries: rows are locked in the order groups lock them (renewMany).
func sortLeases(ids []string, epochs, expires []int64) {
	idx := make([]int, len(ids))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return strings.Compare(ids[a], ids[b]) })
	ids2, epochs2, expires2 := slices.Clone(ids), slices.Clone(epochs), slices.Clone(expires)
	for i, j := range idx {
		ids[i], epochs[i], expires[i] = ids2[j], epochs2[j], expires2[j]
	}
}
