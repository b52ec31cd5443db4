package apply

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
)

// hookMem serves the message rule too: its keys map holds (run, key).
func (m *hookMem) MessageKey(run, key string) (*Key, error) {
	return m.keys[[2]string{"msg:" + run, key}], nil
}
func (m *hookMem) SaveMessageKey(run, key string, k *Key) error {
	m.saves++
	m.keys[[2]string{"msg:" + run, key}] = k
	return nil
}

func (m *hookMem) Awaits(run string) (*store.Awaits, error) { return m.awaits[run], nil }

// RunInbox counts run's messages and hook payloads in the log, as the
// stores' counters do.
func (m *hookMem) RunInbox(run string) (n, b int64, err error) {
	for _, e := range m.events[run] {
		if e.Type == store.EventMessageReceived || e.Type == store.EventHookReceived {
			n, b = n+1, b+int64(len(e.Data))
		}
	}
	return n + m.extraMessages, b, nil
}

// AddInbox counts nothing: RunInbox reads the log.
func (m *hookMem) AddInbox(run string, n, bytes int64) error { return nil }

func TestMessageRule(t *testing.T) {
	now := time.Unix(1000, 0)
	m := newHookMem()
	m.runs["r1"] = &Run{ID: "r1", Epoch: 1, Owner: "", Status: store.RunRunning}
	send := func(run, topic, key, digest string) (*store.MessageSent, error) {
		return SendMessage(m, &store.SendMessageParams{RunID: run, Topic: topic, Payload: []byte(`"hi"`), IdempotencyKey: key,
			RequestDigest: []byte(digest), KeyTTL: time.Hour, Now: now})
	}
	if _, err := send("nope", "t", "", ""); !errors.Is(err, store.ErrNotFound) || m.saves != 0 {
		t.Fatalf("a message to an unknown run: %v, saves %d", err, m.saves)
	}
	first, err := send("r1", "t", "k", "d")
	if err != nil || first.Seq != 1 || first.Topic != "t" || first.Duplicate {
		t.Fatalf("first %+v %v", first, err)
	}
	if evs := m.events["r1"]; len(evs) != 1 || evs[0].Type != store.EventMessageReceived || evs[0].Name != "t" || evs[0].Op != 0 {
		t.Fatalf("events %+v", evs)
	}
	saves := m.saves
	if again, err := send("r1", "t", "k", "d"); err != nil || !again.Duplicate || again.Seq != 1 || m.saves != saves {
		t.Fatalf("sent again: %+v %v, saves %d", again, err, m.saves-saves)
	}
	if _, err := send("r1", "t", "k", "other"); !errors.Is(err, store.ErrKeyReused) || m.saves != saves {
		t.Fatalf("a key reused: %v", err)
	}
	m.runs["r1"].Status = store.RunCompleted
	if _, err := send("r1", "t", "", ""); !errors.Is(err, store.ErrGone) || m.saves != saves {
		t.Fatalf("a message to an ended run: %v", err)
	}
	if again, err := send("r1", "t", "k", "d"); err != nil || !again.Duplicate {
		t.Fatalf("sent again after the run ended: %+v %v", again, err)
	}
	// A run's log takes so many messages, and no more; one sent again
	// with its key still gets its first reply.
	m.runs["r2"] = &Run{ID: "r2", Epoch: 1, Status: store.RunRunning}
	if _, err := send("r2", "t", "k2", "d"); err != nil {
		t.Fatal(err)
	}
	m.extraMessages = store.MaxRunMessages - 1
	saves = m.saves
	if _, err := send("r2", "t", "", ""); !errors.Is(err, store.ErrQuota) || m.saves != saves || !strings.Contains(err.Error(), "10000 messages") {
		t.Fatalf("a message past the bound: %v", err)
	}
	if again, err := send("r2", "t", "k2", "d"); err != nil || !again.Duplicate {
		t.Fatalf("sent again at the bound: %+v %v", again, err)
	}
	m.extraMessages = 0
	big := make([]byte, store.MaxMessagePayload)
	for i := range store.MaxRunMessageBytes/store.MaxMessagePayload - 1 { // r2 holds a 4-byte message
		if _, err := SendMessage(m, &store.SendMessageParams{RunID: "r2", Topic: "t", Payload: big, Now: now}); err != nil {
			t.Fatalf("message %d of %d bytes: %v", i, len(big), err)
		}
	}
	if _, err := SendMessage(m, &store.SendMessageParams{RunID: "r2", Topic: "t", Payload: big, Now: now}); !errors.Is(err, store.ErrQuota) {
		t.Fatalf("a message past the bytes: %v", err)
	}
}

// A message wakes a parked run only if it waits for its topic; a leased
// run is never woken (its worker reads the log), and a run whose release
// said nothing is woken by every message.
func TestMessageWakesOnlyWhatWaits(t *testing.T) {
	for _, c := range []struct {
		name   string
		owner  string
		awaits *store.Awaits
		topic  string
		wake   bool
	}{
		{"released without a word", "", nil, "t", true},
		{"waits for the topic", "", &store.Awaits{Topics: []string{"a", "t"}}, "t", true},
		{"waits for another topic", "", &store.Awaits{Topics: []string{"a"}}, "t", false},
		{"asleep", "", &store.Awaits{}, "t", false},
		{"leased", "w1", nil, "t", false},
		{"leased, waiting for it", "w1", &store.Awaits{Topics: []string{"t"}}, "t", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newHookMem()
			m.runs["r"] = &Run{ID: "r", Epoch: 1, Owner: c.owner, Status: store.RunRunning}
			m.awaits = map[string]*store.Awaits{"r": c.awaits}
			res, err := SendMessage(m, &store.SendMessageParams{RunID: "r", Topic: c.topic, Payload: []byte(`1`), Now: time.Unix(1000, 0)})
			if err != nil || res.Seq != 1 {
				t.Fatalf("sent: %+v %v", res, err)
			}
			if m.woke["r"] != c.wake {
				t.Fatalf("woke %v, want %v", m.woke["r"], c.wake)
			}
			if len(m.events["r"]) != 1 {
				t.Fatalf("the message is not in the log: %+v", m.events["r"])
			}
		})
	}
}

// An Advance's event_set events become their keys' latest values.
func TestRecordSetsRunEvents(t *testing.T) {
	m := fixture()
	m.begin()
	if err := Advance(m, leased(store.AdvanceParams{Events: []store.Event{
		{Type: store.EventSet, Op: 1, Name: "status", Data: []byte(`"started"`)},
		{Type: store.EventSet, Op: 2, Name: "status", Data: []byte(`"half"`)},
	}}), t0); err != nil {
		t.Fatal(err)
	}
	if v := m.values[[2]string{"r", "status"}]; string(v.Data) != `"half"` || v.Seq != 2 {
		t.Fatalf("status = %+v, want the later value", v)
	}
}
