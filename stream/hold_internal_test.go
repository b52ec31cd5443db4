package stream

import "testing"

// What the committed view holds is bounded with its data: a writer's
// million one-byte records never committed are, past Hold, one entry, not
// a million held whole (red team, round eight: 86 MiB a committed reader).
func TestCommittedHoldCountsEntries(t *testing.T) {
	c := NewCommitted(0)
	c.Hold(1 << 20)
	for i := range int64(200_000) {
		c.Push(&Record{Offset: i, Kind: KindData, Writer: "step/w", Attempt: 1, Seq: i, Data: []byte{'x'}}, func(*Record) {
			t.Fatal("a record of a writer still open was released")
		})
	}
	// Those held whole until Hold was reached, then one run.
	if most := (1<<20)/heldCost(&Record{Writer: "step/w", Data: []byte{'x'}}) + 2; len(c.q) > most {
		t.Fatalf("200,000 pending one-byte records of one writer held as %d entries, want at most %d", len(c.q), most)
	}
	if c.Pending() != 200_000 {
		t.Fatalf("pending %d", c.Pending())
	}
}
