package sqlitestore

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/weirhq/weir/stream"
)

// The tail cache copies an append's records into arenas of at most
// tailArena bytes (a larger record alone), so a page it serves, which shares
// them, keeps no more than an arena beyond its own records at each end, not
// the whole append (up to 16 MiB). Not parallel: it measures the heap.
func TestTailArenasAreBounded(t *testing.T) {
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
		out := copyRecords(recs)
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
		limit := int64(max(c.size, tailArena)) + 16<<10
		t.Logf("%s: one record of %d bytes keeps %d bytes", c.name, c.size, held)
		if held > limit {
			t.Errorf("%s: one record of %d bytes keeps %d bytes of the append's %d, more than %d", c.name, c.size, held, c.n*c.size, limit)
		}
	}
}
