package weircli

import (
	"context"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func released() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// Once quiet, the server returns the heap a burst grew: 256 MiB of garbage
// is released (not kept for minutes as the runtime would).
func TestReturnMemoryOnceQuiet(t *testing.T) {
	var sink [][]byte
	for range 256 {
		b := make([]byte, 1<<20)
		for i := range b {
			b[i] = 1 // touched: resident
		}
		sink = append(sink, b)
	}
	runtime.KeepAlive(sink)
	sink = nil
	before := released()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go returnMemory(ctx, 20*time.Millisecond, time.Hour)
	deadline := time.Now().Add(10 * time.Second)
	for released() < before+128<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("released %d MiB of 256 MiB of garbage within 10 s", (released()-before)>>20)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Memory that dies with no collection to notice (readers cut, bodies
// dropped, on a quiet server) is found by the next collection once the last
// is again old.
func TestReturnMemoryDiedQuietly(t *testing.T) {
	var sink [][]byte
	for range 256 {
		b := make([]byte, 1<<20)
		for i := range b {
			b[i] = 1
		}
		sink = append(sink, b)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go returnMemory(ctx, 20*time.Millisecond, 200*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // a first collection, with it all live
	runtime.KeepAlive(sink)
	sink = nil
	before := released()
	deadline := time.Now().Add(10 * time.Second)
	for released() < before+128<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("released %d MiB of 256 MiB that died quietly within 10 s", int64(released()-before)>>20)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
