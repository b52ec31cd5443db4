package stream_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/weirhq/weir/stream"
)

// A reader with part of a batch (a window of a stored row) decodes each
// record's head with DecodeHead: it says "not yet" exactly while the bytes
// end inside the head, and then what DecodeBatch decodes.
func TestDecodeHeadPieceByPiece(t *testing.T) {
	m, _ := sampleLog(t)
	all := stream.EncodeBatch(nil, m.log)
	want, err := stream.DecodeBatch(nil, all, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	pos := 0
	for i, w := range want {
		_, head, size, ok, err := stream.DecodeHead(all[pos:], int64(i), "")
		if !ok || err != nil {
			t.Fatalf("record %d: ok %v, %v", i, ok, err)
		}
		if head > stream.MaxHeadLen {
			t.Fatalf("record %d: head of %d bytes, MaxHeadLen %d", i, head, stream.MaxHeadLen)
		}
		for cut := 0; cut <= head; cut++ {
			r, h, n, ok, err := stream.DecodeHead(all[pos:pos+cut], int64(i), w.Writer)
			if ok != (cut == head) {
				t.Fatalf("record %d cut at %d of its %d-byte head: ok %v", i, cut, head, ok)
			}
			if !ok {
				if !errors.Is(err, stream.ErrCorrupt) {
					t.Fatalf("record %d cut at %d: %v", i, cut, err)
				}
				continue
			}
			if err != nil || h != head || n != size || n != len(w.Data) {
				t.Fatalf("record %d: head %d size %d, %v", i, h, n, err)
			}
			r.Data = w.Data
			if !sameRecord(r, w) {
				t.Fatalf("record %d: %+v, want %+v", i, r, w)
			}
		}
		pos += head + size
	}
	if pos != len(all) {
		t.Fatalf("decoded %d of %d bytes", pos, len(all))
	}
}

// decodePieces decodes b as a reader that sees at most window bytes at a
// time would, with DecodeHead: what DecodeBatch decodes, or an error where it
// errs.
func decodePieces(b []byte, first int64, window int) ([]stream.Record, error) {
	var out []stream.Record
	off, pos, last := first, 0, ""
	for pos < len(b) {
		w := b[pos:min(len(b), pos+max(window, stream.MaxHeadLen))]
		r, head, size, ok, err := stream.DecodeHead(w, off, last)
		if !ok {
			if pos+len(w) < len(b) {
				return nil, errors.New("a head longer than MaxHeadLen")
			}
			return nil, err
		}
		if err != nil {
			return nil, err
		}
		pos += head
		if r.Kind == stream.KindData {
			if len(b)-pos < size {
				return nil, stream.ErrCorrupt
			}
			r.Data = b[pos : pos+size : pos+size]
			pos += size
		}
		last = r.Writer
		out = append(out, r)
		off++
	}
	return out, nil
}

func FuzzDecodeHead(f *testing.F) {
	_, batches := sampleLog(f)
	for _, recs := range batches {
		if len(recs) > 0 {
			f.Add(stream.EncodeBatch(nil, recs), uint16(3))
		}
	}
	f.Add([]byte{byte(stream.KindClose), 0, 0, 0}, uint16(1))
	f.Add([]byte{byte(stream.KindData), 0, 0x80, 0}, uint16(1))
	f.Fuzz(func(t *testing.T, b []byte, window uint16) {
		want, werr := stream.DecodeBatch(nil, b, 0, 0)
		got, gerr := decodePieces(b, 0, int(window))
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%x: DecodeBatch %v, piece by piece %v", b, werr, gerr)
		}
		if werr != nil {
			if !errors.Is(gerr, stream.ErrCorrupt) {
				t.Fatalf("%x: %v is not ErrCorrupt", b, gerr)
			}
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%x: %d records, want %d", b, len(got), len(want))
		}
		for i := range want {
			if !sameRecord(got[i], want[i]) || !bytes.Equal(got[i].Data, want[i].Data) {
				t.Fatalf("%x: record %d = %+v, want %+v", b, i, got[i], want[i])
			}
		}
	})
}

// EncodeBatch allocates once, exactly: BatchLen is the encoding's length.
func TestBatchLen(t *testing.T) {
	_, batches := sampleLog(t)
	for _, recs := range batches {
		b := stream.EncodeBatch(nil, recs)
		if n := stream.BatchLen(recs); n != len(b) || cap(b) != len(b) && len(b) > 0 {
			t.Fatalf("BatchLen %d, encoding %d bytes (cap %d)", n, len(b), cap(b))
		}
	}
	big := []stream.Record{{Kind: stream.KindData, Writer: "w", Attempt: 1 << 40, Seq: 300, Data: make([]byte, 1<<20)}, {Kind: stream.KindCommit, Writer: "w", Attempt: 1 << 40, Seq: 1}}
	if n, b := stream.BatchLen(big), stream.EncodeBatch(nil, big); n != len(b) || cap(b) != n {
		t.Fatalf("BatchLen %d, encoding %d bytes (cap %d)", n, len(b), cap(b))
	}
}
