package store

import (
	"context"
	"fmt"
	"github.com/weirhq/weir/names"
	"time"

	"github.com/weirhq/weir/limit"
)

// Limits is the capability of limiters (package limit): the store keeps
// each limiter's configuration and state and decides every request under
// its lock with package limit's rules, so that on PostgreSQL every process
// on the database keeps to one limit, and on SQLite the one process does.
// A changed configuration applies to the next request, in every process.
type Limits interface {
	// SetLimiter creates limiter c.Name or changes its configuration; its
	// holds, uses and line are kept.
	SetLimiter(ctx context.Context, c *limit.Config) error
	// GetLimiter returns a limiter's configuration; ErrNotFound.
	GetLimiter(ctx context.Context, name string) (*limit.Config, error)
	// ListLimiters returns every limiter's configuration, by name.
	ListLimiters(ctx context.Context) ([]*limit.Config, error)
	// DeleteLimiter deletes a limiter nothing uses (apply.DeleteLimiter):
	// ErrLimiterInUse while a slot is held, someone waits or runs are
	// queued in it; ErrNotFound.
	DeleteLimiter(ctx context.Context, name string) error
	// AcquireSlot asks limiter p.Limiter for a slot (limit.Acquire):
	// granted, or not yet, with why and when to ask again. Asking again
	// with the same holder is idempotent. ErrNotFound for no such limiter.
	AcquireSlot(ctx context.Context, p *AcquireSlotParams) (*limit.Decision, error)
	// ReleaseSlot gives a slot back and charges its cost (limit.Release),
	// once; false if the holder held nothing (its lease had run out).
	ReleaseSlot(ctx context.Context, p *ReleaseSlotParams) (bool, error)
	// RenewSlot extends a held slot's lease; false if its lease had run
	// out.
	RenewSlot(ctx context.Context, p *RenewSlotParams) (bool, error)
	// SlotHeld reports whether p.Holder holds a slot of p.Limiter, and
	// until when by the caller's clock (limit.HeldFor), from what is
	// committed, taking no lock and writing nothing: how a waiter handed
	// a slot (LimiterWatcher.WatchSlot) starts its step without an ask of
	// its own, whose commit would sit between every step and the next.
	// ErrNotFound for no such limiter.
	SlotHeld(ctx context.Context, p *SlotHeldParams) (until time.Time, held bool, err error)
	// LimiterState returns what a limiter holds at now (zero: the store's
	// clock): its live holds, its uses in the window, its line (for
	// /metrics and the UI).
	LimiterState(ctx context.Context, name string, now time.Time) (*limit.State, error)
	// AdmitRuns lets queued runs (CreateRunParams.Queue) start, in each
	// queue's line order (limit.Admit) while its bounds allow, up to
	// p.Limit in all, and leases them to p.Owner as ClaimRuns would. A
	// queue's admitted runs that ended give their slots back here. With
	// no run queued it returns at once and writes nothing.
	AdmitRuns(ctx context.Context, p *AdmitRunsParams) ([]*Run, error)
}

// MaxLimiters bounds how many limiters (and queues) a store keeps: one more
// is ErrQuota. Each is a row its users lock; names are clients' to choose.
const MaxLimiters = 10_000

// ErrLimiterInUse is a limiter deleted while something uses it.
var ErrLimiterInUse = fmt.Errorf("%w: limiter in use", ErrInvalid)

// AdmitRunsParams is an AdmitRuns call.
type AdmitRunsParams struct {
	Owner    string        // required: the worker's id
	Limit    int           // at least 1
	LeaseTTL time.Duration // required
	// Workflows, if not nil: only runs of these workflows.
	Workflows []string
	// Versions, if not nil: only runs of these application versions
	// (ClaimRunsParams.Versions).
	Versions []string
	// Room bounds the runs admitted from each queue it names (the
	// worker's room for them, Config.QueueConcurrency); a queue it does
	// not name takes up to Limit.
	Room map[string]int
	Now  time.Time // zero: the store's clock
}

// Check validates an AdmitRuns call.
func (p *AdmitRunsParams) Check() error {
	c := ClaimRunsParams{Owner: p.Owner, Limit: p.Limit, LeaseTTL: p.LeaseTTL, Workflows: p.Workflows, Versions: p.Versions}
	return c.Check()
}

// WithDefaults returns p with its clock set.
func (p *AdmitRunsParams) WithDefaults(clock func() time.Time) *AdmitRunsParams {
	q := *p
	if q.Now.IsZero() {
		q.Now = clock()
	}
	return &q
}

// HeadsPerKey is how many of each key's first queued runs AdmitRuns
// weighs at once: enough for one call's Limit, few enough that a key with
// a thousand queued runs costs a read of its first ones only.
const HeadsPerKey = 32

// MaxQueueHeads bounds the candidates AdmitRuns weighs per queue.
const MaxQueueHeads = 1024

// AcquireSlotParams is an AcquireSlot call.
type AcquireSlotParams struct {
	Limiter string
	limit.Request
	Now time.Time // zero: the store's clock
}

// ReleaseSlotParams is a ReleaseSlot call.
type ReleaseSlotParams struct {
	Limiter, Holder string
	// Cost is what the slot used (tokens), charged to the limiter's
	// budget; 0 or more.
	Cost int64
	Now  time.Time // zero: the store's clock
}

// RenewSlotParams is a RenewSlot call.
type RenewSlotParams struct {
	Limiter, Holder string
	Lease           time.Duration // the hold lasts until now + Lease
	Now             time.Time     // zero: the store's clock
}

// SlotHeldParams is a SlotHeld call.
type SlotHeldParams struct {
	Limiter, Holder string
	Now             time.Time // zero: the store's clock
}

// Check validates an AcquireSlot call.
func (p *AcquireSlotParams) Check() error {
	if err := checkLimiterName(p.Limiter); err != nil {
		return err
	}
	if err := p.Request.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Check validates a ReleaseSlot call.
func (p *ReleaseSlotParams) Check() error {
	if err := checkLimiterName(p.Limiter); err != nil {
		return err
	}
	if p.Cost < 0 {
		return fmt.Errorf("%w: a negative cost %d", ErrInvalid, p.Cost)
	}
	return checkHolder(p.Holder)
}

// Check validates a RenewSlot call.
func (p *RenewSlotParams) Check() error {
	if err := checkLimiterName(p.Limiter); err != nil {
		return err
	}
	if p.Lease <= 0 {
		return fmt.Errorf("%w: a renew needs a positive lease", ErrInvalid)
	}
	return checkHolder(p.Holder)
}

// WithDefaults returns a copy of p with Now from clock if unset.
func (p *AcquireSlotParams) WithDefaults(clock func() time.Time) *AcquireSlotParams {
	out := *p
	if out.Now.IsZero() {
		out.Now = clock()
	}
	return &out
}

// WithDefaults returns a copy of p with Now from clock if unset.
func (p *ReleaseSlotParams) WithDefaults(clock func() time.Time) *ReleaseSlotParams {
	out := *p
	if out.Now.IsZero() {
		out.Now = clock()
	}
	return &out
}

// WithDefaults returns a copy of p with Now from clock if unset.
func (p *RenewSlotParams) WithDefaults(clock func() time.Time) *RenewSlotParams {
	out := *p
	if out.Now.IsZero() {
		out.Now = clock()
	}
	return &out
}

// Check validates a SlotHeld call.
func (p *SlotHeldParams) Check() error {
	if err := checkLimiterName(p.Limiter); err != nil {
		return err
	}
	return checkHolder(p.Holder)
}

// WithDefaults returns a copy of p with Now from clock if unset.
func (p *SlotHeldParams) WithDefaults(clock func() time.Time) *SlotHeldParams {
	out := *p
	if out.Now.IsZero() {
		out.Now = clock()
	}
	return &out
}

// CheckLimiter validates a limiter's configuration for SetLimiter.
func CheckLimiter(c *limit.Config) error {
	if err := c.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// CheckLimiterName checks the limiter a lookup names (GetLimiter,
// LimiterState): one that could never have been set is ErrInvalid, on
// every backend, before any query.
func CheckLimiterName(name string) error { return checkLimiterName(name) }

func checkLimiterName(name string) error { return nameErr(names.Limiter(name)) }

func checkHolder(h string) error {
	if h == "" {
		return fmt.Errorf("%w: no holder", ErrInvalid)
	}
	return checkName("holder", h, limit.MaxNameLen)
}
