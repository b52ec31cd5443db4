package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/world"
)

// The World's metrics: events by type, deliveries by outcome (package
// delivery reports them through DeliveryObserver), and the dead letters
// the store holds, counted at scrape time.

type worldMetrics struct {
	eventsMu     sync.RWMutex
	events       map[string]*atomic.Uint64 // by event type
	deliveriesMu sync.RWMutex
	deliveries   map[string]*atomic.Uint64 // by outcome

	// deadMu serializes the scrapes' count of dead letters, which one
	// read of the store serves for deadFresh: a dead letter's payload may
	// be 16 MiB, and scrapes at once each reading a thousand of them took
	// a server past 1 GB (red-team round five).
	deadMu sync.Mutex
	deadAt time.Time
	dead   int
	deadOK bool
}

// deadFresh is how long one count of the dead letters serves scrapes.
const deadFresh = 5 * time.Second

// maxDeadBytes bounds the payloads one count of dead letters reads: past
// them the count stops, and says so (a lower bound, as past maxDeadCount).
const maxDeadBytes = store.MaxWorldPageBytes

func (m *metrics) worldEvent(t world.EventType) {
	if m == nil {
		return
	}
	counter(&m.world.eventsMu, m.world.events, string(t)).Add(1)
}

// DeliveryObserver returns the func package delivery calls after each
// delivery, with its outcome ("delivered", "rescheduled", "failed",
// "dead"), so that /metrics counts them.
func (s *Server) DeliveryObserver() func(outcome string, d time.Duration) {
	return func(outcome string, _ time.Duration) {
		counter(&s.metrics.world.deliveriesMu, s.metrics.world.deliveries, outcome).Add(1)
	}
}

// maxDeadCount bounds the scrape's count of dead letters.
const maxDeadCount = 1000

func (s *Server) writeWorldMetrics(w io.Writer) {
	m := &s.metrics.world
	family := func(name, typ, help string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	family("weir_world_events_total", "counter", "World events created, by type.")
	writeLabelled(w, &m.eventsMu, m.events, "weir_world_events_total", "type", loadU)
	family("weir_world_deliveries_total", "counter", "World queue deliveries to apps by this process, by outcome: delivered, rescheduled ({timeoutSeconds}), failed (retried with backoff), dead (dead-lettered).")
	writeLabelled(w, &m.deliveriesMu, m.deliveries, "weir_world_deliveries_total", "outcome", loadU)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if n, ok := s.deadLetters(ctx); ok {
		family("weir_world_dead_letters", "gauge", fmt.Sprintf("World queue messages dead-lettered and kept (counted up to %d, or %d MiB of their payloads, every %s): GET /v1/world/queue?state=dead lists them.",
			maxDeadCount, maxDeadBytes>>20, deadFresh))
		fmt.Fprintf(w, "weir_world_dead_letters %d\n", n)
	}
}

// deadLetters counts the dead letters the store keeps, up to maxDeadCount
// or maxDeadBytes of their payloads, at most once per deadFresh: scrapes
// meanwhile get the last count.
func (s *Server) deadLetters(ctx context.Context) (int, bool) {
	m := &s.metrics.world
	m.deadMu.Lock()
	defer m.deadMu.Unlock()
	if !m.deadAt.IsZero() && time.Since(m.deadAt) < deadFresh {
		return m.dead, m.deadOK
	}
	// Reserve is told the bytes so far with each message; a read tried
	// again starts from 0, and so does the count.
	n, last := 0, -1
	full := errors.New("the count's bytes are spent")
	list, err := s.store.Messages(ctx, &store.MessagesParams{State: "dead", Limit: maxDeadCount, Reserve: func(bytes int) error {
		if bytes < last {
			n = 0
		}
		last = bytes
		if bytes > maxDeadBytes {
			return full
		}
		n++
		return nil
	}})
	if err == nil {
		n = len(list)
	}
	m.deadAt, m.dead, m.deadOK = time.Now(), n, err == nil || errors.Is(err, full)
	return m.dead, m.deadOK
}
