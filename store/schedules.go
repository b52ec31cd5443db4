package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/weirhq/weir/schedule"
)

// Schedules is the capability of schedules (package schedule): the store
// keeps each schedule, its configuration and its state, and leases it to
// one engine at a time to decide its ticks, so that on PostgreSQL every
// process on the database shares one schedule. Exactly one run per tick
// comes from the tick's run id (schedule.RunID): an engine that died after
// starting a tick's run and before AdvanceSchedule leaves the tick to the
// next engine, whose start of the same id finds the run.
type Schedules interface {
	// SetSchedule creates schedule p.Name or changes it; its state is
	// kept (a resumed schedule's cursor moves to now: the ticks while it
	// was paused start nothing).
	SetSchedule(ctx context.Context, p *SetScheduleParams) (*Schedule, error)
	// GetSchedule returns a schedule; ErrNotFound.
	GetSchedule(ctx context.Context, name string) (*Schedule, error)
	// ListSchedules returns a page of the schedules, by name (byte
	// order): at most p.Limit of them and, past the first, those within
	// p.MaxBytes of configuration, each with its input.
	ListSchedules(ctx context.Context, p *ListSchedulesParams) (*SchedulePage, error)
	// DeleteSchedule deletes a schedule (the runs it started are kept);
	// ErrNotFound.
	DeleteSchedule(ctx context.Context, name string) error
	// ClaimSchedules leases up to p.Limit due schedules (not paused, their
	// NextDue passed, no live lease) to p.Owner for p.Lease.
	ClaimSchedules(ctx context.Context, p *ClaimSchedulesParams) ([]*Schedule, error)
	// AdvanceSchedule saves what the lease's holder decided, and frees the
	// lease: false if the schedule changed since the claim (a set, a
	// pause, a delete, the lease lost and claimed again).
	AdvanceSchedule(ctx context.Context, p *AdvanceScheduleParams) (bool, error)
}

// Schedule is a schedule as a store keeps it.
type Schedule struct {
	Name     string
	Workflow string
	// Input is every run's input, JSON; nil is null.
	Input []byte
	// Spec and TZ are the expression and time zone (schedule.Parse).
	Spec, TZ string
	schedule.Policy
	Paused bool
	State  schedule.State
	// NextDue is when it wants deciding; zero while paused.
	NextDue time.Time
	// Version counts its changes: every set, claim and advance.
	Version              int64
	LeaseOwner           string
	LeaseExpires         time.Time
	CreatedAt, UpdatedAt time.Time
}

// SetScheduleParams creates or changes a schedule.
type SetScheduleParams struct {
	Name, Workflow string
	Input          []byte
	Spec, TZ       string
	schedule.Policy
	Paused bool
	// PauseOnly changes nothing but Paused: the schedule's other fields
	// stay as stored (in the store's one transaction, so a change made
	// meanwhile is not undone), and a schedule that does not exist is
	// ErrNotFound. Workflow, Input, Spec, TZ and Policy are then ignored.
	PauseOnly bool
	Now       time.Time // zero: the store's clock
}

// Check refuses a bad schedule: a name that could not stand in a run id,
// no workflow, input that is not JSON, an expression or a time zone that
// does not parse, a bad policy.
func (p *SetScheduleParams) Check() error {
	if err := schedule.CheckName(p.Name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if p.PauseOnly {
		return nil
	}
	if err := CheckID("workflow", p.Workflow); err != nil {
		return err
	}
	if len(p.Input) > MaxScheduleInput {
		return fmt.Errorf("%w: a schedule's input of %d bytes, the limit is %d", ErrInvalid, len(p.Input), MaxScheduleInput)
	}
	if len(p.Input) > 0 && !json.Valid(p.Input) {
		return fmt.Errorf("%w: a schedule's input is not JSON", ErrInvalid)
	}
	if _, err := schedule.Parse(p.Spec, p.TZ); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := p.Policy.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// MaxScheduleInput bounds a schedule's input.
const MaxScheduleInput = 64 << 10

// MaxSchedules bounds how many schedules a store keeps: a new one past it
// is refused with ErrQuota. With MaxScheduleInput it bounds what the
// schedules can hold (about 640 MiB), and so what deciding and listing
// them can cost. Two processes creating the last ones at once on
// PostgreSQL may pass it by one each.
const MaxSchedules = 10_000

// ListSchedulesParams asks for a page of the schedules (ListSchedules).
type ListSchedulesParams struct {
	// After is the name of the last schedule the reader has: the page
	// starts after it ("": at the first).
	After string
	// Limit bounds the schedules: 1 to MaxSchedulePage (0:
	// DefaultSchedulePage).
	Limit int
	// MaxBytes bounds the page's configurations (inputs, mostly): 1 to
	// MaxSchedulePageBytes (0: MaxSchedulePageBytes). The first schedule
	// is taken whatever its size, which MaxScheduleInput bounds.
	MaxBytes int
}

// The bounds of a schedule page: a page holds at most 1 MiB of inputs and
// one more schedule, whatever the schedules hold, so that a list costs a
// server a bounded amount of memory however many schedules there are.
const (
	DefaultSchedulePage  = 100
	MaxSchedulePage      = 1000
	MaxSchedulePageBytes = 1 << 20
)

// Check validates a ListSchedules call.
func (p *ListSchedulesParams) Check() error {
	if p.After != "" {
		if err := CheckScheduleName(p.After); err != nil {
			return err
		}
	}
	if p.Limit < 0 || p.Limit > MaxSchedulePage || p.MaxBytes < 0 || p.MaxBytes > MaxSchedulePageBytes {
		return fmt.Errorf("%w: a schedule page of %d schedules and %d bytes (limit 1 to %d, bytes 1 to %d)", ErrInvalid, p.Limit, p.MaxBytes, MaxSchedulePage, MaxSchedulePageBytes)
	}
	return nil
}

// WithDefaults returns p with its bounds set.
func (p *ListSchedulesParams) WithDefaults() *ListSchedulesParams {
	q := *p
	if q.Limit == 0 {
		q.Limit = DefaultSchedulePage
	}
	if q.MaxBytes == 0 {
		q.MaxBytes = MaxSchedulePageBytes
	}
	return &q
}

// SchedulePage is a page of the schedules.
type SchedulePage struct {
	Schedules []*Schedule
	// More reports that schedules follow the page's last.
	More bool
}

// WithDefaults returns a copy of p with its clock set and its overlap
// named.
func (p *SetScheduleParams) WithDefaults(clock func() time.Time) *SetScheduleParams {
	q := *p
	if q.Now.IsZero() {
		q.Now = clock()
	}
	q.Now = q.Now.UTC()
	q.Overlap = q.Overlap.Or()
	return &q
}

// ClaimSchedulesParams is a ClaimSchedules call.
type ClaimSchedulesParams struct {
	Owner string        // required
	Lease time.Duration // required
	Limit int           // at least 1
	Now   time.Time     // zero: the store's clock
}

// Check validates a ClaimSchedules call.
func (p *ClaimSchedulesParams) Check() error {
	if p.Owner == "" || p.Lease <= 0 || p.Limit < 1 {
		return fmt.Errorf("%w: a claim of schedules needs an owner, a lease and a limit", ErrInvalid)
	}
	return checkName("owner", p.Owner, MaxIDLen)
}

// WithDefaults returns a copy of p with its clock set.
func (p *ClaimSchedulesParams) WithDefaults(clock func() time.Time) *ClaimSchedulesParams {
	q := *p
	if q.Now.IsZero() {
		q.Now = clock()
	}
	q.Now = q.Now.UTC()
	return &q
}

// AdvanceScheduleParams is an AdvanceSchedule call.
type AdvanceScheduleParams struct {
	Name, Owner string
	// Version is the claimed schedule's.
	Version int64
	State   schedule.State
	NextDue time.Time
	Now     time.Time // zero: the store's clock
}

// Check validates an AdvanceSchedule call.
func (p *AdvanceScheduleParams) Check() error {
	if err := CheckScheduleName(p.Name); err != nil {
		return err
	}
	if p.Owner == "" {
		return fmt.Errorf("%w: an advance needs its claim's owner", ErrInvalid)
	}
	return nil
}

// WithDefaults returns a copy of p with its clock set.
func (p *AdvanceScheduleParams) WithDefaults(clock func() time.Time) *AdvanceScheduleParams {
	q := *p
	if q.Now.IsZero() {
		q.Now = clock()
	}
	q.Now = q.Now.UTC()
	return &q
}

// CheckScheduleName checks the schedule a lookup names: one that could
// never have been set is ErrInvalid, on every backend, before any query.
func CheckScheduleName(name string) error {
	if err := schedule.CheckName(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}
