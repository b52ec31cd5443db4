package apply

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/weirhq/weir/schedule"
	"github.com/weirhq/weir/store"
)

// ScheduleTx is what schedules (store.Schedules) need of a transaction: a
// schedule's row, loaded locked, and saved. The rules (a resume's cursor,
// what a claim and an advance change) are here and in package schedule; a
// backend holds only the SQL.
type ScheduleTx interface {
	// LockSchedule loads schedule name, locked for the transaction; nil
	// if there is none.
	LockSchedule(name string) (*store.Schedule, error)
	// SaveSchedule writes s, inserting it if insert.
	SaveSchedule(s *store.Schedule, insert bool) error
	// DueSchedules returns the names of up to limit schedules not paused
	// whose NextDue is at or before now and whose lease is free, ran out
	// or is owner's (a claim sent again), soonest due first; on a store
	// with many writers, those another transaction holds are left out
	// (not waited for).
	DueSchedules(now time.Time, owner string, limit int) ([]string, error)
	// CountSchedules counts the schedules.
	CountSchedules() (int, error)
}

// scheduleConfig is how a schedule's configuration is kept (a JSON column).
type scheduleConfig struct {
	Workflow string          `json:"workflow"`
	Input    json.RawMessage `json:"input,omitempty"`
	Spec     string          `json:"spec"`
	TZ       string          `json:"tz,omitempty"`
	Overlap  schedule.Overlap
	Backfill time.Duration `json:",omitempty"`
}

// EncodeSchedule returns the kept forms of s's configuration and state.
func EncodeSchedule(s *store.Schedule) (config, state []byte, err error) {
	if config, err = json.Marshal(scheduleConfig{Workflow: s.Workflow, Input: s.Input, Spec: s.Spec, TZ: s.TZ, Overlap: s.Overlap, Backfill: s.Backfill}); err != nil {
		return nil, nil, err
	}
	st := s.State
	st.Cursor, st.Buffered, st.LastTick = utcOf(st.Cursor), utcOf(st.Buffered), utcOf(st.LastTick)
	state, err = json.Marshal(st)
	return config, state, err
}

// DecodeSchedule fills s's configuration and state from their kept forms.
func DecodeSchedule(s *store.Schedule, config, state []byte) error {
	var c scheduleConfig
	if err := json.Unmarshal(config, &c); err != nil {
		return fmt.Errorf("schedule %q: its config: %w", s.Name, err)
	}
	s.Workflow, s.Input, s.Spec, s.TZ, s.Overlap, s.Backfill = c.Workflow, []byte(c.Input), c.Spec, c.TZ, c.Overlap, c.Backfill
	if err := json.Unmarshal(state, &s.State); err != nil {
		return fmt.Errorf("schedule %q: its state: %w", s.Name, err)
	}
	return nil
}

// SetSchedule applies a SetSchedule call (p checked, with its defaults): a
// new schedule's ticks start after now; a changed one keeps its state, but
// one resumed, or whose spec or time zone changed, moves its cursor to now,
// and one paused is due never.
func SetSchedule(tx ScheduleTx, p *store.SetScheduleParams) (*store.Schedule, error) {
	s, err := tx.LockSchedule(p.Name)
	if err != nil {
		return nil, err
	}
	insert := s == nil
	if p.PauseOnly {
		if insert {
			return nil, fmt.Errorf("%w: no schedule %q", store.ErrNotFound, p.Name)
		}
		q := *p
		q.Workflow, q.Input, q.Spec, q.TZ, q.Policy = s.Workflow, s.Input, s.Spec, s.TZ, s.Policy
		p = &q
	}
	if insert {
		n, err := tx.CountSchedules()
		if err != nil {
			return nil, err
		}
		if n >= store.MaxSchedules {
			return nil, fmt.Errorf("%w: %d schedules, the most there may be: delete one first", store.ErrQuota, n)
		}
		s = &store.Schedule{Name: p.Name, CreatedAt: p.Now, State: schedule.State{Cursor: p.Now}}
	} else if (s.Paused && !p.Paused || s.Spec != p.Spec || s.TZ != p.TZ) && s.State.Cursor.Before(p.Now) {
		// Resumed, or its times changed: the ticks before now were not
		// the schedule's (a spec changed from yearly to every second
		// would otherwise backfill from its creation).
		s.State.Cursor = p.Now
	}
	s.Workflow, s.Input, s.Spec, s.TZ, s.Policy, s.Paused = p.Workflow, p.Input, p.Spec, p.TZ, p.Policy, p.Paused
	s.Version++
	s.UpdatedAt = p.Now
	// A change ends a decision in flight: its advance will find the
	// version moved on.
	s.LeaseOwner, s.LeaseExpires = "", time.Time{}
	s.NextDue = time.Time{}
	if !s.Paused {
		spec, err := schedule.Parse(s.Spec, s.TZ)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", store.ErrInvalid, err)
		}
		s.NextDue = spec.Next(s.State.Cursor)
		if !s.State.Buffered.IsZero() {
			s.NextDue = p.Now
		}
	}
	if err := tx.SaveSchedule(s, insert); err != nil {
		return nil, err
	}
	return s, nil
}

// ClaimSchedules applies a ClaimSchedules call (p checked, p.Now set).
func ClaimSchedules(tx ScheduleTx, p *store.ClaimSchedulesParams) ([]*store.Schedule, error) {
	names, err := tx.DueSchedules(p.Now, p.Owner, p.Limit)
	if err != nil {
		return nil, err
	}
	var out []*store.Schedule
	for _, n := range names {
		s, err := tx.LockSchedule(n)
		if err != nil {
			return nil, err
		}
		if s == nil {
			continue
		}
		s.LeaseOwner, s.LeaseExpires = p.Owner, p.Now.Add(p.Lease)
		s.Version++
		if err := tx.SaveSchedule(s, false); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// AdvanceSchedule applies an AdvanceSchedule call (p checked, p.Now set).
func AdvanceSchedule(tx ScheduleTx, p *store.AdvanceScheduleParams) (bool, error) {
	s, err := tx.LockSchedule(p.Name)
	if err != nil || s == nil {
		return false, err
	}
	if s.Version != p.Version || s.LeaseOwner != p.Owner {
		return false, nil
	}
	s.State, s.NextDue = p.State, p.NextDue
	s.LeaseOwner, s.LeaseExpires = "", time.Time{}
	s.Version++
	s.UpdatedAt = p.Now
	return true, tx.SaveSchedule(s, false)
}

// utcOf is t in UTC, the zero time kept zero.
func utcOf(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}
