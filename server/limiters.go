package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/weirhq/weir/api"
	limits "github.com/weirhq/weir/limit"
)

// The limiters API: the store's limiters (store.Limits) that steps take
// slots of (weir.WithLimiter). A PUT applies to the next request of every
// process on the store at once.

// handleLimiters serves GET /v1/limiters: the limiters by name with their
// state, a page at a time (?after=<name>&limit=<n>): each limiter's state is
// read from the store, so a store of many limiters is read in pages.
func (s *Server) handleLimiters(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "after", "limit")
	if err != nil {
		httpError(w, err)
		return
	}
	after, n := "", defaultLimiterPage
	if v, ok := q["after"]; ok {
		after = v[0]
	}
	if v, ok := q["limit"]; ok {
		if n, err = queryCount("limit", v[0], 1, maxLimiterPage); err != nil {
			httpError(w, err)
			return
		}
	}
	cs, err := s.store.ListLimiters(r.Context())
	if err != nil {
		httpError(w, err)
		return
	}
	// By name, as the store lists them; the page starts after the cursor.
	i, _ := slices.BinarySearchFunc(cs, after, func(c *limits.Config, name string) int { return strings.Compare(c.Name, name) })
	for i < len(cs) && cs[i].Name <= after {
		i++
	}
	page := cs[i:min(len(cs), i+n)]
	out := api.LimiterList{Limiters: make([]api.Limiter, 0, len(page)), More: i+len(page) < len(cs)}
	for _, c := range page {
		out.Limiters = append(out.Limiters, s.limiterJSON(r, c))
	}
	if out.More && len(page) > 0 {
		out.NextAfter = page[len(page)-1].Name
	}
	s.writeJSON(w, http.StatusOK, out)
}

// defaultLimiterPage and maxLimiterPage are GET /v1/limiters's page sizes:
// each limiter on a page costs a read of its state.
const (
	defaultLimiterPage = 100
	maxLimiterPage     = 500
)

// handleLimiter serves GET /v1/limiters/{name}.
func (s *Server) handleLimiter(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	c, err := s.store.GetLimiter(r.Context(), r.PathValue("name"))
	if err != nil {
		httpError(w, err)
		return
	}
	s.writeJSON(w, http.StatusOK, s.limiterJSON(r, c))
}

// handleDeleteLimiter serves DELETE /v1/limiters/{name}: 204, or 409
// limiter_in_use while a slot is held, someone waits or runs are queued in
// it.
func (s *Server) handleDeleteLimiter(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	if err := s.store.DeleteLimiter(r.Context(), r.PathValue("name")); err != nil {
		httpError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleSetLimiter serves PUT /v1/limiters/{name}: creates the limiter or
// changes its bounds (its holds and line are kept).
func (s *Server) handleSetLimiter(w http.ResponseWriter, r *http.Request) {
	var in api.Limiter
	if err := readJSON(w, r, 64<<10, &in); err != nil {
		httpError(w, err)
		return
	}
	name := r.PathValue("name")
	if in.Name != "" && in.Name != name {
		httpError(w, fmt.Errorf("%w: the body names limiter %q, the path %q", api.ErrBadRequest, in.Name, name))
		return
	}
	c := limits.Config{Name: name, Concurrency: in.Concurrency, PerKey: in.PerKey, Rate: in.Rate, Budget: in.Budget}
	if in.Period != "" {
		var err error
		if c.Period, err = time.ParseDuration(in.Period); err != nil {
			httpError(w, fmt.Errorf("%w: period %q: want a duration (1m, 500ms)", api.ErrBadRequest, in.Period))
			return
		}
	}
	if err := s.store.SetLimiter(r.Context(), &c); err != nil {
		httpError(w, err)
		return
	}
	s.writeWritten(w, http.StatusOK, s.limiterJSON(r, &c))
}

// limiterJSON is c as the API gives it, with its state now (left out if
// it cannot be read).
func (s *Server) limiterJSON(r *http.Request, c *limits.Config) api.Limiter {
	out := api.Limiter{Name: c.Name, Concurrency: c.Concurrency, PerKey: c.PerKey, Rate: c.Rate, Budget: c.Budget}
	if c.Period > 0 {
		out.Period = c.Period.String()
	}
	if st, err := s.store.LimiterState(r.Context(), c.Name, time.Time{}); err == nil {
		ls := &api.LimiterState{Held: limits.Held(*st), Waiting: len(st.Waiters), Queued: st.Queued}
		for _, u := range st.Uses {
			ls.Taken += u.N()
			ls.Spent += u.Cost
		}
		out.State = ls
	}
	return out
}

// maxLimiterSeries bounds the limiters /metrics reports, so that a store
// with very many does not make every scrape slow.
const maxLimiterSeries = 200

// writeLimiterMetrics writes each limiter's state, read from the store:
// the same for every process on it.
func (s *Server) writeLimiterMetrics(w io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cs, err := s.store.ListLimiters(ctx)
	if err != nil || len(cs) == 0 {
		return
	}
	cs = cs[:min(len(cs), maxLimiterSeries)]
	type row struct {
		name                 string
		held, waiting, taken int
		queued               int
		spent                int64
		oldest               time.Time
		c                    *limits.Config
	}
	rows := make([]row, 0, len(cs))
	for _, c := range cs {
		st, err := s.store.LimiterState(ctx, c.Name, time.Time{})
		if err != nil {
			continue
		}
		r := row{name: c.Name, held: limits.Held(*st), waiting: len(st.Waiters), queued: st.Queued, c: c}
		for _, w := range st.Waiters {
			if r.oldest.IsZero() || w.Since.Before(r.oldest) {
				r.oldest = w.Since
			}
		}
		for _, u := range st.Uses {
			r.taken += u.N()
			r.spent += u.Cost
		}
		rows = append(rows, r)
	}
	gauge := func(name, help string, v func(r row) (float64, bool)) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
		for _, r := range rows {
			if x, ok := v(r); ok {
				fmt.Fprintf(w, "%s{limiter=\"%s\"} %g\n", name, labelValue(r.name), x)
			}
		}
	}
	gauge("weir_limiter_held", "Slots of the limiter held now, by every process on the store.", func(r row) (float64, bool) { return float64(r.held), true })
	gauge("weir_limiter_waiting", "Step attempts in the limiter's line now.", func(r row) (float64, bool) { return float64(r.waiting), true })
	gauge("weir_limiter_queued", "Runs waiting in the limiter as a queue (not yet admitted).", func(r row) (float64, bool) { return float64(r.queued), true })
	now := time.Now()
	gauge("weir_limiter_wait_seconds", "How long the step attempt longest in the limiter's line has waited.", func(r row) (float64, bool) {
		return now.Sub(r.oldest).Seconds(), !r.oldest.IsZero()
	})
	gauge("weir_limiter_taken", "Slots taken in the limiter's window (its rate's count).", func(r row) (float64, bool) { return float64(r.taken), r.c.Rate > 0 || r.c.Budget > 0 })
	gauge("weir_limiter_spent", "Cost charged in the limiter's window (its budget's count).", func(r row) (float64, bool) { return float64(r.spent), r.c.Budget > 0 })
	gauge("weir_limiter_concurrency", "The limiter's concurrency bound.", func(r row) (float64, bool) { return float64(r.c.Concurrency), r.c.Concurrency > 0 })
	gauge("weir_limiter_per_key", "The limiter's per-key concurrency bound.", func(r row) (float64, bool) { return float64(r.c.PerKey), r.c.PerKey > 0 })
	gauge("weir_limiter_rate", "The limiter's rate bound (slots per period).", func(r row) (float64, bool) { return float64(r.c.Rate), r.c.Rate > 0 })
	gauge("weir_limiter_budget", "The limiter's budget (cost per period).", func(r row) (float64, bool) { return float64(r.c.Budget), r.c.Budget > 0 })
}
