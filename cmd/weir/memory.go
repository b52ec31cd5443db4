package main

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
// peak would become the steady state. Every tick, if the last tick's
// allocations were few (under quietAllocs) and the heap holds more than
// keepExtra beyond what it held after the last such collection (whatever
// the work left live: stalled readers' pages), it collects and returns what
// is free (debug.FreeOSMemory): once per burst, a collection a busy server
// would have made anyway. A busy server is left to the runtime: it would
// only take the memory again.
func returnMemory(ctx context.Context, every time.Duration) {
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
	var floor uint64 // the heap after the last collection here
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
		if quiet && h > floor+keepExtra {
			debug.FreeOSMemory()
			metrics.Read(s)
			floor, last = held(), s[0].Value.Uint64()
		}
	}
}
