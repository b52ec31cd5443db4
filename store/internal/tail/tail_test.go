package tail

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// The tail cache copies an append's records into arenas of at most
// arena bytes (a larger record alone), so a page it serves, which shares
// them, keeps no more than an arena beyond its own records at each end, not
// the whole append (up to 16 MiB). Not parallel: it measures the heap.
func TestArenasAreBounded(t *testing.T) {
	heap := func() int64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	for _, c := range []struct {
		name    string
		n, size int
	}{
		{"64 KiB records", 64, 64 << 10},
		{"1 KiB records", 4096, 1 << 10},
		{"10 B records", 1000, 10},
	} {
		recs := make([]stream.Record, c.n+1)
		for i := range c.n {
			recs[i] = stream.Record{Kind: stream.KindData, Offset: int64(i), Data: bytes.Repeat([]byte{byte(i)}, c.size)}
		}
		recs[c.n] = stream.Record{Kind: stream.KindClose, Offset: int64(c.n)}
		out := CopyRecords(recs)
		for i, r := range out {
			if !bytes.Equal(r.Data, recs[i].Data) || cap(r.Data) != len(r.Data) || r.Kind != recs[i].Kind || r.Offset != recs[i].Offset {
				t.Fatalf("%s: record %d = %+v, want %+v", c.name, i, r, recs[i])
			}
		}
		// One record kept, as by a page the cache served, once the cache
		// has let go of the rest: what it keeps alive.
		keep := out[c.n/2].Data
		with := heap()
		runtime.KeepAlive(keep)
		held := with - heap()
		limit := int64(max(c.size, arena)) + 16<<10
		t.Logf("%s: one record of %d bytes keeps %d bytes", c.name, c.size, held)
		if held > limit {
			t.Errorf("%s: one record of %d bytes keeps %d bytes of the append's %d, more than %d", c.name, c.size, held, c.n*c.size, limit)
		}
	}
}

func recs(from int64, kinds ...stream.Kind) []stream.Record {
	out := make([]stream.Record, len(kinds))
	for i, k := range kinds {
		out[i] = stream.Record{Kind: k, Offset: from + int64(i)}
		if k == stream.KindData {
			out[i].Data = []byte{byte(from) + byte(i)}
		}
	}
	return out
}

// An entry is a contiguous run of committed records that ends where its
// stream stood after the last commit it saw: a gap drops it, a reopen
// undoes a close, and a read that must end at another head is not served.
func TestEntries(t *testing.T) {
	followed := func(int64) bool { return true }
	c := New(4)
	c.Apply([]Add{{ID: 1, Recs: recs(5, stream.KindData, stream.KindData)}}, nil, followed)
	if next, closed, ok := c.Head(1); !ok || next != 7 || closed {
		t.Fatalf("head = %d %v %v, want 7 open", next, closed, ok)
	}
	p := &store.ReadParams{StreamID: 1, From: 5}
	p = p.WithDefaults()
	if res, ok, err := c.Read(p, 7); !ok || err != nil || len(res.Records) != 2 || res.NextOffset != 7 {
		t.Fatalf("read at 7 = %+v %v %v", res, ok, err)
	}
	if _, ok, _ := c.Read(p, 9); ok {
		t.Fatal("a read that must reach 9 was served from an entry ending at 7")
	}
	if _, ok, _ := c.Read(&store.ReadParams{StreamID: 1, From: 4}, -1); ok {
		t.Fatal("a read from before the entry was served")
	}
	c.Apply([]Add{{ID: 1, Recs: recs(7, stream.KindCommit, stream.KindClose)}}, nil, followed)
	if _, closed, _ := c.Head(1); !closed {
		t.Fatal("a close did not close the entry")
	}
	c.Apply([]Add{{ID: 1, Recs: recs(9, stream.KindReopen)}}, nil, followed)
	if next, closed, _ := c.Head(1); closed || next != 10 {
		t.Fatalf("after a reopen: head %d closed %v, want 10 open", next, closed)
	}
	// Records that leave a gap (another transaction's came first, or were
	// another process's): the entry goes; a followed stream starts anew.
	c.Apply([]Add{{ID: 1, Recs: recs(12, stream.KindData)}}, nil, func(int64) bool { return false })
	if _, _, ok := c.Head(1); ok {
		t.Fatal("a gap kept the entry")
	}
	c.Apply([]Add{{ID: 1, Recs: recs(13, stream.KindData)}}, nil, followed)
	c.Apply(nil, []int64{1}, nil)
	if _, _, ok := c.Head(1); ok {
		t.Fatal("a stream changed without records kept its entry")
	}
}
