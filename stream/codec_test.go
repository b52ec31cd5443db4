package stream_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/weirhq/weir/stream"
)

// sampleLog is a small history with every record kind, anonymous and
// attempt-0 data, adoption, divergence, an empty chunk and a long one.
func sampleLog(t testing.TB) (*tstream, [][]stream.Record) {
	t.Helper()
	m := newTStream()
	var batches [][]stream.Record
	for _, o := range []rop{
		app("step/1", 1, 0, "x", "y", "z"),
		anon("", strings.Repeat("p", 300)),
		app("workflow", 0, 0, "w"),
		app("step/1", 2, 0, "x", "Q"),
		app("step/2", 1, 0, "é\x00\xff"),
		commit("step/1", 2),
		abort("step/2", 1),
		closeOp(),
	} {
		r := m.do(o)
		if r.err != nil {
			t.Fatalf("%v: %v", o, r.err)
		}
		batches = append(batches, r.recs)
	}
	return m, batches
}

// normalized is a record as the codec keeps it: no data or digest but for
// data records.
func normalized(r stream.Record) stream.Record {
	if r.Kind != stream.KindData {
		r.Data, r.Digest = nil, stream.Digest{}
	}
	return r
}

func TestCodecRoundTrip(t *testing.T) {
	m, batches := sampleLog(t)
	var all []byte
	var decoded []stream.Record
	for _, recs := range batches {
		if len(recs) == 0 {
			continue
		}
		b := stream.EncodeBatch(nil, recs)
		all = append(all, b...)
		var err error
		decoded, err = stream.DecodeBatch(decoded, b, recs[0].Offset, math.MinInt64)
		if err != nil {
			t.Fatalf("decode %v: %v", recs, err)
		}
	}
	if len(decoded) != len(m.log) {
		t.Fatalf("decoded %d records, want %d", len(decoded), len(m.log))
	}
	for i := range m.log {
		if !sameRecord(decoded[i], normalized(m.log[i])) {
			t.Errorf("record %d: decoded %v, want %v", i, decoded[i], m.log[i])
		}
	}
	// The whole log as one batch, read from every offset.
	for from := int64(-1); from <= int64(len(m.log))+1; from++ {
		got, err := stream.DecodeBatch(nil, all, 0, from)
		if err != nil {
			t.Fatal(err)
		}
		skip := min(max(from, 0), int64(len(m.log)))
		if int64(len(got)) != int64(len(m.log))-skip {
			t.Fatalf("from %d: %d records", from, len(got))
		}
		for i, r := range got {
			if !sameRecord(r, normalized(m.log[skip+int64(i)])) {
				t.Fatalf("from %d: record %v, want %v", from, r, m.log[skip+int64(i)])
			}
		}
	}
	if re := stream.EncodeBatch(nil, decoded); !bytes.Equal(re, all) {
		t.Fatal("re-encoding the decoded log differs")
	}
}

func TestCodecOffsets(t *testing.T) {
	_, batches := sampleLog(t)
	b := stream.EncodeBatch(nil, batches[0])
	got, err := stream.DecodeBatch(nil, b, 1000, 1001)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Offset != 1001 || got[1].Offset != 1002 || string(got[0].Data) != "y" {
		t.Fatalf("got %v", got)
	}
}

func TestCodecAppendsToDst(t *testing.T) {
	_, batches := sampleLog(t)
	prefix := []byte("keep")
	b := stream.EncodeBatch(prefix, batches[0])
	if !bytes.HasPrefix(b, []byte("keep")) {
		t.Fatal("EncodeBatch dropped buf")
	}
	dst := []stream.Record{{Offset: -5}}
	got, err := stream.DecodeBatch(dst, b[4:], 0, 0)
	if err != nil || len(got) != 4 || got[0].Offset != -5 {
		t.Fatalf("got %v, %v", got, err)
	}
	got, err = stream.DecodeBatch(nil, nil, 0, 0)
	if err != nil || len(got) != 0 {
		t.Fatalf("empty batch: %v, %v", got, err)
	}
	if b := stream.EncodeBatch(nil, nil); len(b) != 0 {
		t.Fatalf("empty encode %q", b)
	}
}

// TestCodecAliasing pins the documented aliasing: Data points into the
// batch, Writer does not.
func TestCodecAliasing(t *testing.T) {
	recs := []stream.Record{{Offset: 0, Kind: stream.KindData, Writer: "w", Attempt: 1, Digest: stream.Sum([]byte("abc")), Data: []byte("abc")}}
	b := stream.EncodeBatch(nil, recs)
	got, err := stream.DecodeBatch(nil, b, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	b[1+1] = 'v'      // the writer byte
	b[len(b)-1] = 'C' // the last data byte
	if got[0].Writer != "w" {
		t.Fatalf("writer aliases the batch: %q", got[0].Writer)
	}
	if string(got[0].Data) != "abC" {
		t.Fatalf("data does not alias the batch: %q", got[0].Data)
	}
	if cap(got[0].Data) != len(got[0].Data) {
		t.Fatal("data's capacity reaches into the rest of the batch: an append would overwrite it")
	}
}

func TestCodecCorrupt(t *testing.T) {
	_, batches := sampleLog(t)
	one := stream.EncodeBatch(nil, batches[0][:1])
	// Every cut inside a record is corrupt.
	for n := 1; n < len(one); n++ {
		if _, err := stream.DecodeBatch(nil, one[:n], 0, 0); !errors.Is(err, stream.ErrCorrupt) {
			t.Errorf("cut at %d/%d: %v", n, len(one), err)
		}
	}
	uv := func(v uint64) []byte { return binary.AppendUvarint(nil, v) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for name, b := range map[string][]byte{
		"kind 0":          {0, 0, 0, 0},
		"kind 6":          {6, 0, 0, 0},
		"long writer":     cat([]byte{byte(stream.KindClose)}, uv(stream.MaxWriterLen+1), make([]byte, stream.MaxWriterLen+1), uv(0), uv(0)),
		"huge writer len": cat([]byte{byte(stream.KindClose)}, uv(math.MaxUint64)),
		"attempt > 2^62":  cat([]byte{byte(stream.KindClose), 0}, uv(1<<62+1), uv(0)),
		"seq > 2^62":      cat([]byte{byte(stream.KindClose), 0}, uv(0), uv(1<<62+1)),
		"varint overflow": cat([]byte{byte(stream.KindClose), 0}, bytes.Repeat([]byte{0xff}, 10), []byte{1}, uv(0)),
		"data too long":   cat([]byte{byte(stream.KindData), 0, 1, 0}, make([]byte, 16), uv(5), []byte("abcd")),
		"data len huge":   cat([]byte{byte(stream.KindData), 0, 1, 0}, make([]byte, 16), uv(math.MaxUint64)),
		"short digest":    cat([]byte{byte(stream.KindData), 0, 1, 0}, make([]byte, 15)),
		"good then bad":   cat(one, []byte{9}),
	} {
		if _, err := stream.DecodeBatch(nil, b, 0, 0); !errors.Is(err, stream.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	// The largest values the decoder accepts round-trip.
	max := []stream.Record{{Kind: stream.KindCommit, Writer: strings.Repeat("w", stream.MaxWriterLen), Attempt: 1 << 62, Seq: 1 << 62}}
	got, err := stream.DecodeBatch(nil, stream.EncodeBatch(nil, max), 0, 0)
	if err != nil || len(got) != 1 || !sameRecord(got[0], max[0]) {
		t.Fatalf("limits: %v, %v", got, err)
	}
}

// TestDecodeBatchRejectsNonCanonicalVarint: "ErrCorrupt is returned by
// DecodeBatch for bytes EncodeBatch did not write". EncodeBatch writes
// minimal uvarints only, but binary.Uvarint also accepts padded ones
// (0x80 0x00 is 0), so DecodeBatch accepts bytes EncodeBatch never wrote,
// and decoding then re-encoding does not give the same bytes.
func TestDecodeBatchRejectsNonCanonicalVarint(t *testing.T) {
	for name, b := range map[string][]byte{
		"writer length": {byte(stream.KindClose), 0x80, 0x00, 0x00, 0x00},
		"attempt":       {byte(stream.KindCommit), 0x00, 0x81, 0x00, 0x00},
		"seq":           {byte(stream.KindCommit), 0x00, 0x01, 0x82, 0x80, 0x00},
		"data length":   append(append([]byte{byte(stream.KindData), 0x00, 0x01, 0x00}, make([]byte, 16)...), 0x80, 0x00),
	} {
		recs, err := stream.DecodeBatch(nil, b, 0, 0)
		if err == nil {
			t.Errorf("%s: %x decodes to %v, which encodes as %x; want ErrCorrupt", name, b, recs, stream.EncodeBatch(nil, recs))
		}
	}
}

func FuzzDecodeBatch(f *testing.F) {
	_, batches := sampleLog(f)
	for _, recs := range batches {
		if len(recs) > 0 {
			f.Add(stream.EncodeBatch(nil, recs), recs[0].Offset, int64(0))
		}
	}
	f.Add([]byte{}, int64(0), int64(0))
	f.Add([]byte{byte(stream.KindClose), 0, 0, 0}, int64(7), int64(8))
	f.Fuzz(func(t *testing.T, b []byte, first, from int64) {
		if first < 0 || first > 1<<62 {
			first = 0
		}
		all, err := stream.DecodeBatch(nil, b, first, math.MinInt64)
		if err != nil {
			if !errors.Is(err, stream.ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		for i, r := range all {
			if r.Offset != first+int64(i) {
				t.Fatalf("record %d at offset %d", i, r.Offset)
			}
			if r.Kind < stream.KindData || r.Kind > stream.KindReopen || r.Attempt < 0 || r.Seq < 0 || len(r.Writer) > stream.MaxWriterLen {
				t.Fatalf("decoded an invalid record %+v", r)
			}
			if r.Kind != stream.KindData && (r.Data != nil || r.Digest != (stream.Digest{})) {
				t.Fatalf("%v carries data", r)
			}
		}
		if re := stream.EncodeBatch(nil, all); !bytes.Equal(re, b) {
			t.Fatalf("%x decodes to %v, which re-encodes as %x", b, all, re)
		}
		// Reading from an offset gives the suffix.
		part, err := stream.DecodeBatch(nil, b, first, from)
		if err != nil {
			t.Fatalf("from %d: %v", from, err)
		}
		skip := 0
		for skip < len(all) && all[skip].Offset < from {
			skip++
		}
		if len(part) != len(all)-skip {
			t.Fatalf("from %d: %d records of %d", from, len(part), len(all))
		}
		for i := range part {
			if !sameRecord(part[i], all[skip+i]) {
				t.Fatalf("from %d: %v, want %v", from, part[i], all[skip+i])
			}
		}
	})
}
