package stream_test

import (
	"reflect"
	"testing"

	"github.com/weirhq/weir/stream"
)

func TestForkCopy(t *testing.T) {
	d := func(off int64, w string, a, seq int64) stream.Record {
		return stream.Record{Offset: off, Kind: stream.KindData, Writer: w, Attempt: a, Seq: seq, Data: []byte("x")}
	}
	log := []stream.Record{
		d(0, "open", 1, 0),
		d(1, "done", 1, 0),
		d(2, "open", 1, 1),
		{Offset: 3, Kind: stream.KindCommit, Writer: "done", Attempt: 1, Seq: 1},
		d(4, "gone", 2, 0),
		{Offset: 5, Kind: stream.KindAbort, Writer: "gone", Attempt: 2, Seq: 0},
		d(6, "anon", 0, 0),
		d(7, "late", 1, 0), // past the fork point
		{Offset: 8, Kind: stream.KindClose},
	}
	var fc stream.ForkCopy
	kept := fc.Keep(append([]stream.Record(nil), log...), 7)
	if len(kept) != 7 || kept[len(kept)-1].Offset != 6 {
		t.Fatalf("kept %v, want offsets 0..6", kept)
	}
	prefix := &stream.Record{Offset: 7, Kind: stream.KindData, Data: []byte("pre")}
	tail, next := fc.Tail(7, prefix)
	want := []stream.Record{*prefix, {Offset: 8, Kind: stream.KindAbort, Writer: "open", Attempt: 1}}
	if !reflect.DeepEqual(tail, want) || next != 9 {
		t.Fatalf("tail %v next %d, want %v next 9", tail, next, want)
	}
	// A close record is never copied, whatever the fork point.
	var fc2 stream.ForkCopy
	if kept := fc2.Keep(log[8:], 100); len(kept) != 0 {
		t.Fatalf("kept the close record: %v", kept)
	}
	// Tracked limits who can be open.
	fc3 := stream.ForkCopy{Tracked: func(w string) bool { return w != "open" }}
	fc3.Keep(append([]stream.Record(nil), log...), 7)
	if tail, next := fc3.Tail(7, nil); len(tail) != 0 || next != 7 {
		t.Fatalf("untracked writer got an abort: %v", tail)
	}
}
