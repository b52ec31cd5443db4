package stream_test

import (
	"errors"
	"testing"

	"github.com/weirhq/weir/stream"
)

func TestProduce(t *testing.T) {
	st := func(epoch, last int64) *stream.ProducerState {
		return &stream.ProducerState{Epoch: epoch, LastSeq: last}
	}
	for _, c := range []struct {
		name    string
		st      *stream.ProducerState
		epoch   int64
		seq     int64
		next    stream.ProducerState
		dup     bool
		wantErr error
	}{
		{"first request", nil, 0, 0, ps(0, 0), false, nil},
		{"first request at a higher epoch", nil, 3, 0, ps(3, 0), false, nil},
		{"first request past seq 0", nil, 0, 1, ps(0, 0), false, stream.ErrProducerGap},
		{"next seq", st(0, 0), 0, 1, ps(0, 1), false, nil},
		{"retry of the last seq", st(0, 2), 0, 2, ps(0, 2), true, nil},
		{"retry of an older seq", st(0, 2), 0, 1, ps(0, 2), true, nil},
		{"gap", st(0, 0), 0, 2, ps(0, 0), false, stream.ErrProducerGap},
		{"new epoch", st(0, 7), 1, 0, ps(1, 0), false, nil},
		{"new epoch past seq 0", st(0, 7), 1, 5, ps(0, 7), false, stream.ErrEpochSeq},
		{"stale epoch", st(2, 0), 1, 0, ps(2, 0), false, stream.ErrStaleEpoch},
		{"stale epoch at a retried seq", st(2, 4), 1, 1, ps(2, 4), false, stream.ErrStaleEpoch},
		{"negative seq", st(0, 0), 0, -1, ps(0, 0), false, errAny},
		{"negative epoch", nil, -1, 0, ps(0, 0), false, errAny},
	} {
		t.Run(c.name, func(t *testing.T) {
			var before stream.ProducerState
			if c.st != nil {
				before = *c.st
			}
			next, dup, err := stream.Produce(c.st, stream.Producer{ID: "p", Epoch: c.epoch, Seq: c.seq})
			switch {
			case c.wantErr == errAny:
				if err == nil {
					t.Fatal("no error")
				}
				return
			case c.wantErr != nil:
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("err = %v, want %v", err, c.wantErr)
				}
			case err != nil:
				t.Fatalf("err = %v", err)
			default:
				if next != c.next || dup != c.dup {
					t.Fatalf("got %+v dup %v, want %+v dup %v", next, dup, c.next, c.dup)
				}
			}
			if c.st != nil && *c.st != before {
				t.Fatalf("Produce changed its argument: %+v", *c.st)
			}
		})
	}

	_, _, err := stream.Produce(st(2, 0), stream.Producer{Epoch: 1})
	var se *stream.StaleEpochError
	if !errors.As(err, &se) || se.Current != 2 || se.Epoch != 1 {
		t.Fatalf("stale epoch error = %#v", err)
	}
	_, _, err = stream.Produce(st(0, 0), stream.Producer{Seq: 2})
	var ge *stream.ProducerGapError
	if !errors.As(err, &ge) || ge.Expected != 1 || ge.Received != 2 {
		t.Fatalf("gap error = %#v", err)
	}
}

var errAny = errors.New("any error")

func ps(epoch, last int64) stream.ProducerState {
	return stream.ProducerState{Epoch: epoch, LastSeq: last}
}

func TestCheckStreamSeq(t *testing.T) {
	for _, c := range []struct {
		last, got string
		ok        bool
	}{
		{"", "001", true},
		{"001", "", true},
		{"001", "002", true},
		{"002", "001", false},
		{"001", "001", false},
		{"2", "10", false}, // bytewise, not numeric
		{"09", "10", true},
		{"a", "B", false},
		{"B", "a", true},
	} {
		err := stream.CheckStreamSeq(c.last, c.got)
		if (err == nil) != c.ok {
			t.Errorf("CheckStreamSeq(%q, %q) = %v, want ok %v", c.last, c.got, err, c.ok)
		}
		if err != nil && !errors.Is(err, stream.ErrStreamSeq) {
			t.Errorf("CheckStreamSeq(%q, %q) = %v, not ErrStreamSeq", c.last, c.got, err)
		}
	}
}
