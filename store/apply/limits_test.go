package apply

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
)

// limTx is an in-memory LimiterTx: limiters by name, a count it may claim
// to have beside them, the queues with runs in them.
type limTx struct {
	cfg     map[string]*limit.Config
	state   map[string][]byte
	extra   int
	queued  map[string]bool
	woken   []string        // WakeParkedRuns
	parked  map[string]bool // limiters parked runs wait for
	wokeFor []string        // WakeRunsFor
}

func newLimTx() *limTx {
	return &limTx{cfg: map[string]*limit.Config{}, state: map[string][]byte{}, queued: map[string]bool{}}
}

func (m *limTx) LockLimiter(name string) (*limit.Config, []byte, bool, error) {
	c, ok := m.cfg[name]
	return c, m.state[name], ok, nil
}
func (m *limTx) SaveLimiter(c *limit.Config, st []byte) error {
	m.cfg[c.Name], m.state[c.Name] = c, st
	return nil
}
func (m *limTx) CountLimiters() (int, error)          { return len(m.cfg) + m.extra, nil }
func (m *limTx) QueuedRuns(name string) (bool, error) { return m.queued[name], nil }
func (m *limTx) WakeParkedRuns(runs []string) error {
	m.woken = append(m.woken, runs...)
	return nil
}
func (m *limTx) WakeRunsFor(name string) error {
	m.wokeFor = append(m.wokeFor, name)
	return nil
}
func (m *limTx) ParkedFor(name string) (bool, error) { return m.parked[name], nil }
func (m *limTx) DeleteLimiter(name string) error {
	delete(m.cfg, name)
	delete(m.state, name)
	return nil
}

func TestLimiterCountAndDelete(t *testing.T) {
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	tx := newLimTx()
	c := &limit.Config{Name: "openai", Concurrency: 2}
	if _, err := SetLimiter(tx, c); err != nil {
		t.Fatal(err)
	}
	// At the bound a new limiter is refused; a change of one that exists
	// is not.
	tx.extra = store.MaxLimiters - 1
	if _, err := SetLimiter(tx, &limit.Config{Name: "more", Concurrency: 1}); !errors.Is(err, store.ErrQuota) {
		t.Fatalf("a limiter past the bound: %v, want ErrQuota", err)
	}
	if _, err := SetLimiter(tx, &limit.Config{Name: "openai", Concurrency: 3}); err != nil {
		t.Fatalf("a change at the bound: %v", err)
	}
	tx.extra = 0
	for _, c := range []struct {
		name   string
		state  limit.State
		queue  bool
		parked bool
		want   error
	}{
		{"a live hold", limit.State{Holds: []limit.Hold{{Holder: "r/1/1", Until: now.Add(time.Second)}}}, false, false, store.ErrLimiterInUse},
		{"a run's hold", limit.State{Holds: []limit.Hold{{Holder: "r", Run: true}}}, false, false, store.ErrLimiterInUse},
		{"someone in line", limit.State{Waiters: []limit.Waiter{{Holder: "r/2/1", Until: now.Add(time.Second)}}}, false, false, store.ErrLimiterInUse},
		{"a queued run", limit.State{}, true, false, store.ErrLimiterInUse},
		// A run parked for a window whose place lapsed (red team, round
		// eleven: DELETE took the limiter, and the run failed "no limiter").
		{"a run parked for it", limit.State{}, false, true, store.ErrLimiterInUse},
		{"a lapsed hold", limit.State{Holds: []limit.Hold{{Holder: "r/1/1", Until: now.Add(-time.Second)}}}, false, false, nil},
		// A place whose lease ran out with no decision since: an execution
		// of a run that went on as another (limit.StepHolder names each)
		// and ended; its place waits for nothing.
		{"a lapsed place in line", limit.State{Waiters: []limit.Waiter{{Holder: "r/2/1/1", Until: now.Add(-time.Second)}}}, false, false, nil},
	} {
		b, err := EncodeLimiterState(c.state)
		if err != nil {
			t.Fatal(err)
		}
		tx.cfg["openai"], tx.state["openai"], tx.queued["openai"] = &limit.Config{Name: "openai", Concurrency: 1}, b, c.queue
		tx.parked = map[string]bool{"openai": c.parked}
		if err := DeleteLimiter(tx, "openai", now); !errors.Is(err, c.want) || c.want == nil && err != nil {
			t.Fatalf("%s: %v, want %v", c.name, err, c.want)
		}
		if _, gone := tx.cfg["openai"]; gone == (c.want == nil) {
			t.Fatalf("%s: deleted %v", c.name, !gone)
		}
	}
	if err := DeleteLimiter(tx, "openai", now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
}

// A change of a limiter wakes every waiter (the holders it returns), and
// makes claimable the runs of those that asked at a rate or a budget:
// they may be parked for its window and hear no wake.
func TestSetLimiterWakesItsLine(t *testing.T) {
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	tx := newLimTx()
	rated := &limit.Config{Name: "llm", Concurrency: 1, Rate: 1, Period: time.Hour}
	if _, err := SetLimiter(tx, rated); err != nil {
		t.Fatal(err)
	}
	ask := func(holder string) *limit.Decision {
		t.Helper()
		d, err := AcquireSlot(tx, &store.AcquireSlotParams{Limiter: "llm", Now: now, Request: limit.Request{Holder: holder, Lease: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	a, b := limit.StepHolder("run-a", 1, 1, 1), limit.StepHolder("run-b", 2, 1, 1)
	if !ask(a).Granted {
		t.Fatal("a: the free slot refused")
	}
	if d := ask(b); d.Granted || d.HandsOff {
		t.Fatalf("b at the rate: %+v", d)
	}
	woken, err := SetLimiter(tx, &limit.Config{Name: "llm", Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(woken, b) {
		t.Fatalf("woke %v, want b among them", woken)
	}
	if !slices.Contains(tx.wokeFor, "llm") {
		t.Fatalf("runs parked for the limiter woken: %v, want llm's", tx.wokeFor)
	}
	if !slices.Equal(tx.woken, []string{"run-b"}) {
		t.Fatalf("runs made claimable: %v, want b's (it asked at the rate)", tx.woken)
	}
}
