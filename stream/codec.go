package stream

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrCorrupt is returned by DecodeBatch for bytes EncodeBatch did not write.
var ErrCorrupt = errors.New("corrupt record batch")

// MaxWriterLen bounds a writer id, so a corrupt length cannot allocate much.
const MaxWriterLen = 1 << 10

// EncodeBatch appends the storage encoding of recs, which must have
// consecutive offsets, to buf. Stores keep one such batch per append, so a
// thousand chunks cost one row, not a thousand.
//
// Per record: kind byte, uvarint writer length and bytes, uvarint attempt,
// uvarint seq and, for data, the 16-byte digest, uvarint length and bytes.
// Offsets are implicit: the batch's first offset plus the index.
//
// buf grows once, to the batch's exact size (BatchLen): a 16 MiB append
// costs one 16 MiB buffer, not the garbage of appending to it.
func EncodeBatch(buf []byte, recs []Record) []byte {
	if n := BatchLen(recs); cap(buf)-len(buf) < n {
		buf = append(make([]byte, 0, len(buf)+n), buf...)
	}
	for i := range recs {
		r := &recs[i]
		buf = append(buf, byte(r.Kind))
		buf = binary.AppendUvarint(buf, uint64(len(r.Writer)))
		buf = append(buf, r.Writer...)
		buf = binary.AppendUvarint(buf, uint64(r.Attempt))
		buf = binary.AppendUvarint(buf, uint64(r.Seq))
		if r.Kind == KindData {
			buf = append(buf, r.Digest[:]...)
			buf = binary.AppendUvarint(buf, uint64(len(r.Data)))
			buf = append(buf, r.Data...)
		}
	}
	return buf
}

// BatchLen is the length of recs' encoding by EncodeBatch.
func BatchLen(recs []Record) int {
	n := 0
	for i := range recs {
		r := &recs[i]
		n += 1 + uvarintLen(uint64(len(r.Writer))) + len(r.Writer) + uvarintLen(uint64(r.Attempt)) + uvarintLen(uint64(r.Seq))
		if r.Kind == KindData {
			n += DigestSize + uvarintLen(uint64(len(r.Data))) + len(r.Data)
		}
	}
	return n
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// DecodeBatch decodes a batch written by EncodeBatch whose first record has
// offset first, appending the records with Offset >= from to dst. Records
// alias b: their Data and Writer point into it (Writer is copied).
func DecodeBatch(dst []Record, b []byte, first, from int64) ([]Record, error) {
	off := first
	var last string // consecutive records mostly share a writer: copy it once
	for len(b) > 0 {
		r, head, size, ok, err := DecodeHead(b, off, last)
		if !ok || err != nil {
			return dst, err
		}
		b = b[head:]
		if r.Kind == KindData {
			if len(b) < size {
				return dst, fmt.Errorf("%w: data at offset %d", ErrCorrupt, off)
			}
			r.Data = b[:size:size]
			b = b[size:]
		}
		last = r.Writer
		if off >= from {
			dst = append(dst, r)
		}
		off++
	}
	return dst, nil
}

// MaxHeadLen bounds the bytes of a record before its data (its head): all
// DecodeHead needs to see.
const MaxHeadLen = 1 + binary.MaxVarintLen64 + MaxWriterLen + 3*binary.MaxVarintLen64 + DigestSize

// DecodeHead decodes the head of the record that b begins with (b is part
// of a batch, from a record on): every field but Data, with Offset off;
// head is the head's length in bytes, size the data's that follow it (0 for
// a record of another kind than data). Writer is last if equal, else a
// copy. ok is false if b ends before the head does: err then says where, as
// for a batch cut short (a reader that has only part of a batch reads on
// with more of it). A batch can be decoded a piece at a time with it: no
// record's head is longer than MaxHeadLen.
func DecodeHead(b []byte, off int64, last string) (r Record, head, size int, ok bool, err error) {
	short := func(what string) (Record, int, int, bool, error) {
		return Record{}, 0, 0, false, fmt.Errorf("%w: %s at offset %d", ErrCorrupt, what, off)
	}
	bad := func(what string) (Record, int, int, bool, error) {
		return Record{}, 0, 0, true, fmt.Errorf("%w: %s at offset %d", ErrCorrupt, what, off)
	}
	if len(b) == 0 {
		return short("kind")
	}
	r.Kind = Kind(b[0])
	if r.Kind < KindData || r.Kind > KindReopen {
		return Record{}, 0, 0, true, fmt.Errorf("%w: kind %d at offset %d", ErrCorrupt, b[0], off)
	}
	i := 1
	n, k := uvarint(b[i:])
	switch {
	case k < 0 || (k > 0 && n > MaxWriterLen):
		return bad("writer")
	case k == 0 || uint64(len(b)-i-k) < n:
		return short("writer")
	}
	i += k
	if n > 0 {
		if string(b[i:i+int(n)]) != last {
			last = string(b[i : i+int(n)])
		}
		r.Writer = last
	}
	i += int(n)
	v, k := uvarint(b[i:])
	switch {
	case k < 0 || (k > 0 && v > 1<<62):
		return bad("attempt")
	case k == 0:
		return short("attempt")
	}
	r.Attempt = int64(v)
	i += k
	v, k = uvarint(b[i:])
	switch {
	case k < 0 || (k > 0 && v > 1<<62):
		return bad("seq")
	case k == 0:
		return short("seq")
	}
	r.Seq = int64(v)
	i += k
	if r.Kind == KindData {
		if len(b)-i < DigestSize {
			return short("digest")
		}
		copy(r.Digest[:], b[i:])
		i += DigestSize
		v, k = uvarint(b[i:])
		switch {
		case k < 0 || (k > 0 && v > 1<<62):
			return bad("data")
		case k == 0:
			return short("data")
		}
		i += k
		size = int(v)
	}
	r.Offset = off
	return r, i, size, true, nil
}

// uvarint is binary.Uvarint that also refuses non-minimal encodings (a last
// byte of zero after a continuation), so every batch that decodes has exactly
// one encoding.
// It returns k == 0 for bytes that end inside the varint, k < 0 for one
// that is not minimal or overflows.
func uvarint(b []byte) (uint64, int) {
	v, k := binary.Uvarint(b)
	if k > 1 && b[k-1] == 0 {
		return 0, -1
	}
	return v, k
}
