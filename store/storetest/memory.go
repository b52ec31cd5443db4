package storetest

import (
	"bytes"
	"runtime"
	"testing"
	"unsafe"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// ReadHoldsAPage checks what one read page keeps alive: about its MaxBytes
// of data, whatever the size of the appends it reads from (one record
// larger than MaxBytes is the exception: it comes alone). A batch is one
// append, up to store.MaxAppendBytes; a page that aliased it, or a buffer
// grown by doubling, holds many times the page.
//
// It measures the heap a page keeps alive after a full collection, so it
// must run with no other test in the process: call it from a top-level test
// that is not parallel, on a store of its own. extra is what a read may
// leave the store's connections holding besides, counted with the page: a
// driver that keeps a read buffer per connection (pgstore: a window) shows
// it whenever a read lands on a connection whose buffer was smaller.
func ReadHoldsAPage(t *testing.T, s store.Full, extra int64) {
	const (
		page  = 256 << 10
		chunk = 64 << 10
		big   = 4 << 20 // an append: 64 chunks of 64 KiB
	)
	si := openStream(t, s, "pages")
	var want []byte
	appendChunks := func(n, size int) {
		t.Helper()
		cs := make([][]byte, n)
		for i := range cs {
			cs[i] = bytes.Repeat([]byte{byte('a' + len(want)/size%26)}, size)
			want = append(want, cs[i]...)
		}
		res, err := s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Chunks: cs})
		must(t, err)
		if len(res.Acks) != n {
			t.Fatalf("append: %d acks for %d chunks", len(res.Acks), n)
		}
	}
	for range 3 {
		appendChunks(big/chunk, chunk) // records 0-63, 64-127, 128-191
	}
	appendChunks(1, big)      // record 192: larger than a page
	appendChunks(4096, 1<<10) // records 193-4288: 1 KiB each
	appendChunks(1, 100)      // record 4289
	appendChunks(big/chunk, chunk)

	// The pages join up, from any start (and the store's connections are
	// warm: what they keep is not counted as a page's).
	for _, from := range []int64{0, 1, 63, 64, 191, 192, 4200} {
		var got []byte
		for next := from; ; {
			res, err := s.Read(ctx(t), &store.ReadParams{StreamID: si.ID, From: next, MaxBytes: page})
			must(t, err)
			if len(res.Records) == 0 {
				break
			}
			for _, r := range res.Records {
				got = append(got, r.Data...)
			}
			next = res.Records[len(res.Records)-1].Offset + 1
		}
		off := 0
		for i := range from {
			off += recordSize(i)
		}
		if !bytes.Equal(got, want[off:]) {
			t.Fatalf("pages from %d: %d bytes, want %d", from, len(got), len(want)-off)
		}
	}

	// held is the heap a page keeps alive: the live heap with the page,
	// less the live heap once it is gone; allocated, what the read
	// allocated (garbage included).
	held := func(p store.ReadParams) (res *store.ReadResult, held, allocated int64) {
		t.Helper()
		p.StreamID = si.ID
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before, total := int64(ms.HeapAlloc), int64(ms.TotalAlloc)
		res, err := s.Read(ctx(t), &p)
		must(t, err)
		runtime.ReadMemStats(&ms)
		allocated = int64(ms.TotalAlloc) - total
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		with := int64(ms.HeapAlloc)
		runtime.KeepAlive(res)
		return res, with - before, allocated
	}
	records := func(n int) int64 { return int64(n) * int64(unsafe.Sizeof(stream.Record{})) }
	for _, c := range []struct {
		name string
		from int64
		max  int // the page's data bytes at most
	}{
		{"from a batch's start", 0, page},
		{"inside a batch", 10, page},
		{"across batches", 62, page},
		{"across three batches", 126, page},
		{"one record larger than the page", 192, big},
		{"after the larger record", 193, page},
		{"small records", 300, page},
		{"the last batch", 4290, page},
	} {
		res, n, _ := held(store.ReadParams{From: c.from, MaxBytes: page})
		data := 0
		for i, r := range res.Records {
			if r.Offset != c.from+int64(i) {
				t.Fatalf("%s: record %d at offset %d", c.name, i, r.Offset)
			}
			data += len(r.Data)
		}
		if len(res.Records) == 0 || data > c.max {
			t.Fatalf("%s: %d records, %d data bytes: want some, at most %d", c.name, len(res.Records), data, c.max)
		}
		// The page's data, its records, and the noise of the store's own
		// goroutines: a page of 256 KiB may keep 320 KiB (and extra).
		limit := int64(data) + records(cap(res.Records)) + 64<<10 + extra
		t.Logf("%s: %d records, %d data bytes: the page holds %d bytes of heap (at most %d)", c.name, len(res.Records), data, n, limit)
		if n > limit {
			t.Errorf("%s: a page of %d data bytes holds %d bytes of heap, more than %d: it keeps what it was read from", c.name, data, n, limit)
		}
		// What the next page allocates on its way, garbage included, for a
		// reader that reads on: its page, and windows of about a page, not
		// the 4 MiB appends whole. (A read from an offset no page ended at
		// may fetch a batch whole, to find where its record begins.)
		next := res.Records[len(res.Records)-1].Offset + 1
		res, _, alloc := held(store.ReadParams{From: next, MaxBytes: page})
		data = 0
		for _, r := range res.Records {
			data += len(r.Data)
		}
		t.Logf("%s: the next page, %d records, %d data bytes, allocated %d bytes", c.name, len(res.Records), data, alloc)
		if most := 4*int64(max(data, page)) + extra; alloc > most {
			t.Errorf("%s: reading on, a page of %d data bytes allocated %d bytes, more than %d: it copies whole batches", c.name, data, alloc, most)
		}
	}
	// With Pieces, the record larger than the page comes a page at a
	// time: each piece holds its bytes, and reading on costs windows of
	// about a page, not the record.
	var got []byte
	for from := int64(0); ; {
		res, n, alloc := held(store.ReadParams{From: 192, MaxBytes: page, Pieces: true, DataFrom: from})
		if res.Piece == nil || len(res.Records) != 1 || res.Piece.From != from || res.Piece.Size != big {
			t.Fatalf("a piece from byte %d: %+v, %d records", from, res.Piece, len(res.Records))
		}
		d := len(res.Records[0].Data)
		if limit := int64(d) + records(cap(res.Records)) + 64<<10 + extra; n > limit || d > page {
			t.Errorf("a piece of %d bytes from byte %d holds %d bytes of heap, more than %d", d, from, n, limit)
		}
		if most := 4*int64(page) + extra; alloc > most && from > 0 {
			t.Errorf("a piece from byte %d allocated %d bytes, more than %d: it reads the record whole", from, alloc, most)
		}
		got = append(got, res.Records[0].Data...)
		if from = res.Piece.End(d); from == big {
			break
		}
	}
	if !bytes.Equal(got, want[192*chunk:192*chunk+big]) {
		t.Fatalf("the record read in pieces: %d bytes, not the record's", len(got))
	}
}

// recordSize is the data bytes of record i of ReadHoldsAPage's stream.
func recordSize(i int64) int {
	switch {
	case i < 192:
		return 64 << 10
	case i == 192:
		return 4 << 20
	case i < 4289:
		return 1 << 10
	case i == 4289:
		return 100
	}
	return 64 << 10
}
