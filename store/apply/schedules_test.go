package apply

import (
	"errors"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
)

// schedTx is a ScheduleTx over a map, and extra schedules it only counts.
type schedTx struct {
	m     map[string]*store.Schedule
	extra int
}

func (m *schedTx) LockSchedule(name string) (*store.Schedule, error) {
	if s, ok := m.m[name]; ok {
		c := *s
		return &c, nil
	}
	return nil, nil
}
func (m *schedTx) SaveSchedule(s *store.Schedule, insert bool) error {
	c := *s
	m.m[s.Name] = &c
	return nil
}
func (m *schedTx) DueSchedules(time.Time, string, int) ([]string, error) { return nil, nil }
func (m *schedTx) CountSchedules() (int, error)                          { return len(m.m) + m.extra, nil }

func TestScheduleCount(t *testing.T) {
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	tx := &schedTx{m: map[string]*store.Schedule{}}
	set := func(name string) error {
		_, err := SetSchedule(tx, (&store.SetScheduleParams{Name: name, Workflow: "wf", Spec: "@hourly", Now: now}).WithDefaults(time.Now))
		return err
	}
	if err := set("nightly"); err != nil {
		t.Fatal(err)
	}
	// At the bound a new schedule is refused and nothing is saved; a
	// change of one that exists is not refused.
	tx.extra = store.MaxSchedules - 1
	if err := set("more"); !errors.Is(err, store.ErrQuota) {
		t.Fatalf("a schedule past the bound: %v, want ErrQuota", err)
	}
	if _, ok := tx.m["more"]; ok {
		t.Fatal("the refused schedule was saved")
	}
	if err := set("nightly"); err != nil {
		t.Fatalf("a change at the bound: %v", err)
	}
}
