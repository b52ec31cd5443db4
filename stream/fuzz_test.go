package stream_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/weirhq/weir/stream"
)

// fuzzOps turns fuzz bytes into operations. Each op takes four bytes and
// then one byte per chunk:
//
//	b0: the op (appends most often) and, for fenced appends, the fence
//	b1: writer (low 2 bits) and attempt (next 3 bits, minus 1: -1..6)
//	b2: first seq (low 3 bits, minus 1: -1..6; top bit: near MaxInt64)
//	b3: number of chunks (0..4)
//
// A chunk byte picks one of four one-byte chunks, or a longer one, so that
// retransmits, adoptions and conflicts all come up.
func fuzzOps(data []byte) []rop {
	var ops []rop
	writers := [4]string{"s", "t", "workflow", "s"}
	for len(data) >= 4 {
		b0, b1, b2, b3 := data[0], data[1], data[2], data[3]
		data = data[4:]
		w := writers[b1&3]
		a := int64(b1>>2&7) - 1
		s := int64(b2&7) - 1
		if b2&0x80 != 0 {
			s = math.MaxInt64 - int64(b2&7)
		}
		var o rop
		switch k := b0 & 15; {
		case k < 9:
			o = app(w, a, s)
		case k < 11:
			o = anon()
		case k < 12:
			o = commit(w, a)
		case k < 13:
			o = abort(w, a)
		case k < 14:
			o = closeOp()
		default:
			o = fenced(w, a, s, int64(b0>>4)%5)
		}
		if o.op == "append" {
			for range b3 % 5 {
				if len(data) == 0 {
					break
				}
				c := data[0]
				data = data[1:]
				chunk := string(rune('a' + c&3))
				if c >= 0xf0 {
					chunk = string(make([]byte, int(c-0xf0)*37))
				}
				o.chunks = append(o.chunks, chunk)
			}
		}
		ops = append(ops, o)
	}
	return ops
}

// FuzzAppend applies random requests through the rules with every check of
// the property test: no panic, all or nothing, dense offsets, acks that
// point at the right records, the committed view and its invariants once
// every writer finished.
func FuzzAppend(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 4, 1, 3, 0, 1, 2})                                  // s a0 seq0 "a" "b" "c"
	f.Add([]byte{0, 8, 1, 3, 0, 1, 2, 0, 12, 1, 2, 0, 3, 11, 12, 0, 0}) // s a1, s a2 diverges, commit a2
	f.Add([]byte{0, 8, 1, 2, 0, 1, 13, 0, 0, 0, 0, 8, 1, 1, 0})         // s a1, close, retransmit
	f.Add([]byte{0, 6, 1, 1, 0, 0x2e, 9, 1, 1, 0, 9, 0, 0, 2, 1, 2})    // workflow, fenced, anonymous
	f.Add([]byte{0, 8, 1, 0, 12, 8, 0, 0})                              // empty attempt, then abort
	f.Add([]byte{0, 8, 0x81, 1, 1, 0, 8, 1, 4, 0xf3, 0xf0, 1, 2})       // seq near MaxInt64, long chunks
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 2048 { // the checks are quadratic in the history
			data = data[:2048]
		}
		var voidsBug bool
		h := newHarness(t, &voidsBug)
		for _, o := range fuzzOps(data) {
			h.apply(o)
		}
		checkReplay(t, h.m.log, h.m.ws)
		h.finish(rand.New(rand.NewPCG(uint64(len(data)), 1)))
	})
}

// TestFuzzOpsDecode makes sure the fuzz decoding reaches every op kind.
func TestFuzzOpsDecode(t *testing.T) {
	seen := map[string]bool{}
	for b0 := range 16 {
		for _, o := range fuzzOps([]byte{byte(b0), 9, 0x81, 2, 0xf1, 2}) {
			seen[o.op] = true
			if o.op == "append" && o.w != "" && o.fence == 0 && (o.a != 1 || o.s != math.MaxInt64-1 || len(o.chunks) != 2 || len(o.chunks[0]) != 37) {
				t.Fatalf("decoded %v", o)
			}
		}
	}
	if len(seen) != 4 {
		t.Fatalf("ops seen: %v", seen)
	}
	_ = stream.KindData
}
