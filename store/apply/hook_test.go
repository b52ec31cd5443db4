package apply

import (
	"errors"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
)

// hookMem is a HookTx over maps that counts saves: a refused request must
// save nothing.
type hookMem struct {
	runs   map[string]*Run
	hooks  map[string]*Hook
	keys   map[[2]string]*Key
	events map[string][]store.Event
	saves  int
	// extraMessages are messages RunInbox counts beyond the log's.
	extraMessages int64
	// awaits is what a parked run's release said; woke, the runs a rule
	// made claimable now.
	awaits map[string]*store.Awaits
	woke   map[string]bool
}

func newHookMem() *hookMem {
	return &hookMem{runs: map[string]*Run{}, hooks: map[string]*Hook{}, keys: map[[2]string]*Key{}, events: map[string][]store.Event{}}
}

func (m *hookMem) Run(id string) (*Run, error) {
	if r := m.runs[id]; r != nil {
		c := *r
		return &c, nil
	}
	return nil, store.ErrNotFound
}
func (m *hookMem) Hook(token string) (*Hook, error) {
	if h := m.hooks[token]; h != nil {
		c := *h
		return &c, nil
	}
	return nil, nil
}
func (m *hookMem) HookKey(token, key string) (*Key, error) { return m.keys[[2]string{token, key}], nil }
func (m *hookMem) AddEvents(run *Run, evs []store.Event) error {
	m.saves++
	m.events[run.ID] = append(m.events[run.ID], evs...)
	return nil
}
func (m *hookMem) SaveRun(run *Run, c *RunChange) error {
	m.saves++
	if c.Wake {
		if m.woke == nil {
			m.woke = map[string]bool{}
		}
		m.woke[run.ID] = true
	}
	r := *run
	m.runs[run.ID] = &r
	return nil
}
func (m *hookMem) SaveHook(h *Hook, fresh bool) error {
	m.saves++
	if fresh {
		for k := range m.keys {
			if k[0] == h.Token {
				delete(m.keys, k)
			}
		}
	}
	c := *h
	m.hooks[h.Token] = &c
	return nil
}
func (m *hookMem) SaveHookKey(token, key string, k *Key) error {
	m.saves++
	m.keys[[2]string{token, key}] = k
	return nil
}

func TestHookRules(t *testing.T) {
	now := time.Unix(1000, 0)
	m := newHookMem()
	m.runs["r1"] = &Run{ID: "r1", Epoch: 1, Owner: "w", Status: store.RunRunning}
	m.runs["r2"] = &Run{ID: "r2", Epoch: 1, Owner: "w", Status: store.RunRunning}
	create := func(run, token string, op int64) error {
		return CreateHook(m, &store.HookParams{RunID: run, LeaseEpoch: 1, Token: token, Op: op, Now: now})
	}
	deliver := func(token, key, digest string) (*store.HookDelivery, error) {
		return DeliverHook(m, &store.DeliverHookParams{Token: token, Payload: []byte("p"), IdempotencyKey: key,
			RequestDigest: []byte(digest), KeyTTL: time.Hour, Now: now})
	}
	if err := create("r1", "t", 1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		do   func() error
		want error
	}{
		{"another run's live token", func() error { return create("r2", "t", 1) }, store.ErrHookConflict},
		{"a lost lease", func() error {
			return CreateHook(m, &store.HookParams{RunID: "r1", LeaseEpoch: 2, Token: "u", Op: 2, Now: now})
		}, store.ErrLeaseLost},
		{"an unknown token", func() error { _, err := deliver("nope", "", ""); return err }, store.ErrNotFound},
		{"a disposal of another op", func() error {
			return DisposeHook(m, &store.HookParams{RunID: "r1", LeaseEpoch: 1, Token: "t", Op: 9, Now: now})
		}, store.ErrNotFound},
		{"a delivery naming another run", func() error {
			_, err := DeliverHook(m, &store.DeliverHookParams{RunID: "r2", Token: "t", Payload: []byte("p"), Now: now})
			return err
		}, store.ErrNotFound},
	} {
		before := m.saves
		if err := tc.do(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if m.saves != before {
			t.Errorf("%s: refused, but saved", tc.name)
		}
	}
	if _, err := deliver("t", "k", "d"); err != nil {
		t.Fatal(err)
	}
	before := m.saves
	if res, err := deliver("t", "k", "d"); err != nil || !res.Duplicate || m.saves != before {
		t.Fatalf("a duplicate: %+v %v, saves %d", res, err, m.saves-before)
	}
	if _, err := deliver("t", "k", "other"); !errors.Is(err, store.ErrKeyReused) {
		t.Fatalf("a key reused: %v", err)
	}
	// OnlyFirst: the hook has received one, so another adds nothing.
	before = m.saves
	if res, err := DeliverHook(m, &store.DeliverHookParams{RunID: "r1", Token: "t", Payload: []byte("end"), OnlyFirst: true, Now: now}); err != nil || !res.Duplicate || res.Count != 1 || m.saves != before {
		t.Fatalf("a second delivery with OnlyFirst: %+v %v, saves %d", res, err, m.saves-before)
	}
	m.runs["r1"].Status = store.RunCompleted
	if _, err := deliver("t", "", ""); !errors.Is(err, store.ErrGone) {
		t.Fatalf("a delivery to an ended run: %v", err)
	}
	if err := create("r2", "t", 1); err != nil {
		t.Fatalf("taking over an ended run's token: %v", err)
	}
	if len(m.keys) != 0 {
		t.Fatal("the token's new hook kept the old one's keys")
	}
	if evs := m.events["r1"]; len(evs) != 2 || evs[0].Type != store.EventHookCreated || evs[1].Type != store.EventHookReceived || evs[1].Seq != 2 {
		t.Fatalf("r1's events %+v", evs)
	}
}
