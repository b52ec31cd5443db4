package main

import (
	"context"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

// Once quiet, the server returns the heap a burst grew: 256 MiB of garbage
// is released (not kept for minutes as the runtime would).
func TestReturnMemoryOnceQuiet(t *testing.T) {
	released := func() uint64 {
		s := []metrics.Sample{{Name: "/memory/classes/heap/released:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
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
	go returnMemory(ctx, 20*time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for released() < before+128<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("released %d MiB of 256 MiB of garbage within 10 s", (released()-before)>>20)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
