package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/weirhq/weir/store"
)

// healthProbeTimeout bounds the store probe of /healthz.
const healthProbeTimeout = 2 * time.Second

// handleHealth serves GET /healthz: 200 "ok" while the store answers, 503
// with the reason otherwise (closed, or too slow). It needs no token.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), healthProbeTimeout)
	defer cancel()
	// A read of a run that should not exist: any answer but ErrNotFound (or
	// the run) means the store is unwell. (The id must be one every store
	// accepts: PostgreSQL refuses a NUL byte in text.)
	_, err := s.store.GetRun(ctx, "weir-healthz-probe")
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		if !errors.Is(err, store.ErrClosedStore) {
			s.log.Warn("weir server: health probe", "err", err)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("unavailable: the store did not answer\n"))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte("ok\n"))
}
