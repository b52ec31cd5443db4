package server

import (
	"context"
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
}

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
	if dead, err := s.store.Messages(ctx, &store.MessagesParams{State: "dead", Limit: maxDeadCount}); err == nil {
		family("weir_world_dead_letters", "gauge", fmt.Sprintf("World queue messages dead-lettered and kept (counted up to %d): GET /v1/world/queue?state=dead lists them.", maxDeadCount))
		fmt.Fprintf(w, "weir_world_dead_letters %d\n", len(dead))
	}
}
