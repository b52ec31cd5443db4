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
func EncodeBatch(buf []byte, recs []Record) []byte {
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

// DecodeBatch decodes a batch written by EncodeBatch whose first record has
// offset first, appending the records with Offset >= from to dst. Records
// alias b: their Data and Writer point into it (Writer is copied).
func DecodeBatch(dst []Record, b []byte, first, from int64) ([]Record, error) {
	off := first
	var last string // consecutive records mostly share a writer: copy it once
	for len(b) > 0 {
		var r Record
		r.Kind = Kind(b[0])
		if r.Kind < KindData || r.Kind > KindClose {
			return dst, fmt.Errorf("%w: kind %d at offset %d", ErrCorrupt, b[0], off)
		}
		b = b[1:]
		n, k := uvarint(b)
		if k <= 0 || n > MaxWriterLen || uint64(len(b)-k) < n {
			return dst, fmt.Errorf("%w: writer at offset %d", ErrCorrupt, off)
		}
		b = b[k:]
		if n > 0 {
			if string(b[:n]) != last {
				last = string(b[:n])
			}
			r.Writer = last
		}
		b = b[n:]
		v, k := uvarint(b)
		if k <= 0 || v > 1<<62 {
			return dst, fmt.Errorf("%w: attempt at offset %d", ErrCorrupt, off)
		}
		r.Attempt = int64(v)
		b = b[k:]
		v, k = uvarint(b)
		if k <= 0 || v > 1<<62 {
			return dst, fmt.Errorf("%w: seq at offset %d", ErrCorrupt, off)
		}
		r.Seq = int64(v)
		b = b[k:]
		if r.Kind == KindData {
			if len(b) < DigestSize {
				return dst, fmt.Errorf("%w: digest at offset %d", ErrCorrupt, off)
			}
			copy(r.Digest[:], b)
			b = b[DigestSize:]
			n, k := uvarint(b)
			if k <= 0 || uint64(len(b)-k) < n {
				return dst, fmt.Errorf("%w: data at offset %d", ErrCorrupt, off)
			}
			b = b[k:]
			r.Data = b[:n:n]
			b = b[n:]
		}
		r.Offset = off
		if off >= from {
			dst = append(dst, r)
		}
		off++
	}
	return dst, nil
}

// uvarint is binary.Uvarint that also refuses non-minimal encodings (a last
// byte of zero after a continuation), so every batch that decodes has exactly
// one encoding.
func uvarint(b []byte) (uint64, int) {
	v, k := binary.Uvarint(b)
	if k > 1 && b[k-1] == 0 {
		return 0, 0
	}
	return v, k
}
