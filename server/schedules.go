package server

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/schedule"
	"github.com/weirhq/weir/store"
)

// The schedules API: the store's schedules (store.Schedules), whose ticks
// every worker on the store decides, one at a time, each tick starting one
// run (schedule.RunID).

// handleSchedules serves GET /v1/schedules[?after=NAME&limit=N]: a page of
// the schedules (store.ListSchedules bounds its size).
func (s *Server) handleSchedules(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "after", "limit")
	if err != nil {
		httpError(w, err)
		return
	}
	p := &store.ListSchedulesParams{}
	if v, ok := q["after"]; ok {
		p.After = v[0]
	}
	if v, ok := q["limit"]; ok {
		if p.Limit, err = queryCount("limit", v[0], 1, store.MaxSchedulePage); err != nil {
			httpError(w, err)
			return
		}
	}
	page, err := s.store.ListSchedules(r.Context(), p)
	if err != nil {
		httpError(w, err)
		return
	}
	out := api.ScheduleList{Schedules: make([]api.Schedule, 0, len(page.Schedules)), More: page.More}
	for _, sc := range page.Schedules {
		out.Schedules = append(out.Schedules, scheduleJSON(sc))
	}
	if page.More && len(page.Schedules) > 0 {
		out.NextAfter = page.Schedules[len(page.Schedules)-1].Name
	}
	s.writeJSON(w, http.StatusOK, out)
}

// handleSchedule serves GET /v1/schedules/{name}.
func (s *Server) handleSchedule(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	sc, err := s.store.GetSchedule(r.Context(), r.PathValue("name"))
	if err != nil {
		httpError(w, err)
		return
	}
	s.writeJSON(w, http.StatusOK, scheduleJSON(sc))
}

// handleSetSchedule serves PUT /v1/schedules/{name}: creates the schedule
// or changes it (its ticks handled stay handled; one set paused starts
// nothing until it is set again without, and the ticks meanwhile never do).
func (s *Server) handleSetSchedule(w http.ResponseWriter, r *http.Request) {
	var in api.Schedule
	if err := readJSON(w, r, store.MaxScheduleInput+16<<10, &in); err != nil {
		httpError(w, err)
		return
	}
	name := r.PathValue("name")
	if in.Name != "" && in.Name != name {
		httpError(w, fmt.Errorf("%w: the body names schedule %q, the path %q", api.ErrBadRequest, in.Name, name))
		return
	}
	p := store.SetScheduleParams{Name: name, Workflow: in.Workflow, Input: in.Input, Spec: in.Spec, TZ: in.TZ, Paused: in.Paused,
		Policy: schedule.Policy{Overlap: schedule.Overlap(in.Overlap)}}
	if in.Backfill != "" {
		var err error
		if p.Backfill, err = time.ParseDuration(in.Backfill); err != nil {
			httpError(w, fmt.Errorf("%w: backfill %q: want a duration (1h, 30m)", api.ErrBadRequest, in.Backfill))
			return
		}
	}
	sc, err := s.store.SetSchedule(r.Context(), &p)
	if err != nil {
		httpError(w, err)
		return
	}
	s.writeWritten(w, http.StatusOK, scheduleJSON(sc))
}

// handlePauseSchedule serves POST /v1/schedules/{name}/pause and
// /resume: the schedule's Paused alone changes, in the store's one
// transaction (a change made meanwhile is kept).
func (s *Server) handlePauseSchedule(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	paused := strings.HasSuffix(r.URL.Path, "/pause")
	sc, err := s.store.SetSchedule(r.Context(), &store.SetScheduleParams{Name: r.PathValue("name"), PauseOnly: true, Paused: paused})
	if err != nil {
		httpError(w, err)
		return
	}
	s.writeWritten(w, http.StatusOK, scheduleJSON(sc))
}

// handleDeleteSchedule serves DELETE /v1/schedules/{name}: the schedule
// starts no more runs; those it started are kept.
func (s *Server) handleDeleteSchedule(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	if err := s.store.DeleteSchedule(r.Context(), r.PathValue("name")); err != nil {
		httpError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// scheduleJSON is sc as the API gives it.
func scheduleJSON(sc *store.Schedule) api.Schedule {
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		u := t.UTC()
		return &u
	}
	out := api.Schedule{Name: sc.Name, Workflow: sc.Workflow, Input: sc.Input, Spec: sc.Spec, TZ: sc.TZ, Overlap: string(sc.Overlap.Or()),
		Paused: sc.Paused, NextDue: at(sc.NextDue), LastTick: at(sc.State.LastTick), LastRun: sc.State.LastRun, Buffered: at(sc.State.Buffered),
		Started: sc.State.Started, Skipped: sc.State.Skipped, CreatedAt: at(sc.CreatedAt), UpdatedAt: at(sc.UpdatedAt)}
	if sc.Backfill > 0 {
		out.Backfill = sc.Backfill.String()
	}
	return out
}
