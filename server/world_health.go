package server

import (
	"context"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/world"
)

// A health check's stream (`workflow health`, world.HealthCheckStream) is
// written for a run id the runtime makes up: no World run holds it. weir
// keeps it as a standalone stream of its own (healthStreamPath), which
// expires healthStreamTTL after it was last touched, so that the check's
// write, close and read work on any weir server of the store, and leave
// nothing behind.

// healthStreamTTL is how long a health check's stream lives untouched.
const healthStreamTTL = 10 * time.Minute

// healthStreamPath is the standalone stream that keeps health check
// stream name.
func healthStreamPath(name string) string { return "_weir/world-health/" + name }

// openWorldStream returns (creating) World stream name of run, or the
// stream of a health check.
//
// made reports that the stream may be new: always for a World stream (its
// opens are cached: this is the first of this server's for it), and for a
// health check's, which is opened at every write, only when it was created.
func (s *Server) openWorldStream(ctx context.Context, run, name string) (info *store.StreamInfo, made bool, err error) {
	if !world.HealthCheckStream(name) {
		info, err := s.store.WorldOpenStream(ctx, run, name)
		return info, err == nil, err
	}
	if err := world.StreamName(name); err != nil {
		return nil, false, err
	}
	info, created, err := s.store.CreateStream(ctx, &store.CreateStreamParams{Path: healthStreamPath(name), ContentType: "application/octet-stream",
		Expiry: store.Expiry{TTL: healthStreamTTL, HasTTL: true}, Now: s.now(), MaxStreams: limit(s.cfg.MaxStreams)})
	return info, created, err
}

// lookupWorldStream returns World stream name, or the stream of a health
// check.
func (s *Server) lookupWorldStream(ctx context.Context, name string) (*store.StreamInfo, error) {
	if !world.HealthCheckStream(name) {
		return s.store.WorldStream(ctx, name)
	}
	return s.lookup(ctx, healthStreamPath(name), s.now())
}
