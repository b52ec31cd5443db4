package apply

import (
	"errors"
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
