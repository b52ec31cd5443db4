package store

import "context"

// LeaseRenewer is a store that renews many runs' leases in one call, on a
// path nothing else of the store waits on: PostgreSQL renews them on a
// connection of its own, so a pool busy with limiter or step transactions
// never makes a live worker's leases lapse (which would have another worker
// run its steps again). The engine renews every run it executes in one
// call every LeaseTTL/3 where the store has it (LeaseRenewerOf), instead
// of one call a run.
type LeaseRenewer interface {
	// RenewLeases renews each of ps as RenewLease would, and returns a
	// result for each, in order. The error is the call's (the store or its
	// connection failed: nothing is known of any lease); a lease that is
	// not held is its result's Err (ErrLeaseLost, ErrNotFound).
	RenewLeases(ctx context.Context, ps []RenewLeaseParams) ([]RenewLeaseResult, error)
}

// RenewLeaseResult is what RenewLeases did with one lease: Cancel reports
// a cancel requested (as RenewLease's), Err a lease not renewed.
type RenewLeaseResult struct {
	Cancel bool
	Err    error
}

// LeaseRenewerOf returns s's LeaseRenewer (or that of the store it wraps),
// if it has one.
func LeaseRenewerOf(s Store) (LeaseRenewer, bool) { return as[LeaseRenewer](s) }
