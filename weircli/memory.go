package weircli

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// returnMemory gives the operating system back, once the server is quiet,
// the heap a burst of work grew (an attack, a flood of uploads or readers):
// the runtime would keep it for minutes (the next collection may be two
// minutes away, and its scavenger returns memory gradually), so that the
// peak would become the steady state. A tick is quiet if it allocated less
// than quietAllocs. On a quiet tick, if the heap holds more than keepExtra
// beyond what it held after the last collection here, or holds more than
// keepExtra at all and the last collection here is again old (memory may
// have died since: readers cut, bodies dropped, with no collection to
// notice), it collects and returns what is free (debug.FreeOSMemory). So a
// quiet server with a large heap collects once every again (weir server:
// every 5 s, again 10 s), and a busy one
// is left to the runtime: it would only take the memory back.
func returnMemory(ctx context.Context, every, again time.Duration) {
	const (
		quietAllocs = 16 << 20
		keepExtra   = 64 << 20
	)
	s := []metrics.Sample{
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	metrics.Read(s)
	for _, m := range s {
		if m.Value.Kind() != metrics.KindUint64 {
			return // not this runtime's metrics
		}
	}
	last := s[0].Value.Uint64()
	var (
		floor uint64    // the heap after the last collection here
		freed time.Time // when
	)
	held := func() uint64 { return s[1].Value.Uint64() + s[2].Value.Uint64() + s[3].Value.Uint64() }
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(s)
		allocs := s[0].Value.Uint64()
		quiet := allocs-last < quietAllocs
		last = allocs
		h := held()
		floor = min(floor, h)
		if quiet && (h > floor+keepExtra || h > keepExtra && time.Since(freed) >= again) {
			debug.FreeOSMemory()
			metrics.Read(s)
			floor, last, freed = held(), s[0].Value.Uint64(), time.Now()
		}
	}
}
