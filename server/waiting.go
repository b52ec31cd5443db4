package server

import (
	"errors"
	"net/http"
	"time"

	"github.com/weirhq/weir/api"
	limits "github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/runwait"
	"github.com/weirhq/weir/store"
)

// handleWaiting serves GET /v1/runs/{id}/waiting: what the run waits on
// now, read from its row, its log and its hooks (package runwait).
func (s *Server) handleWaiting(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	run, err := s.runHead(r)
	if err != nil {
		httpError(w, err)
		return
	}
	out := api.Waiting{Waits: []api.Wait{}}
	if !run.Status.Terminal() {
		// The log's heads, and the data of limiter waits alone: what
		// the run waits on, held as a page at a time, not the log.
		events, err := store.Outline(r.Context(), s.store, run.ID, store.EventLimitWaiting)
		if err != nil {
			httpError(w, err)
			return
		}
		hooks, err := s.store.ListHooks(r.Context(), run.ID)
		if errors.Is(err, store.ErrUnsupported) {
			hooks, err = nil, nil // a store without hooks: no hook is waited on
		}
		if err != nil {
			httpError(w, err)
			return
		}
		ws := runwait.Of(run, events, hooks, time.Now())
		s.limiterPlaces(r, run.ID, ws)
		s.queuePlace(r, run, ws)
		out.Summary = runwait.Summary(ws)
		for _, wt := range ws {
			out.Waits = append(out.Waits, waitJSON(wt))
		}
	}
	s.writeJSON(w, http.StatusOK, out)
}

func waitJSON(w runwait.Wait) api.Wait {
	out := api.Wait{Kind: w.Kind, Name: w.Name, Op: w.Op, Attempt: w.Attempt, Since: w.Since.UTC(), Text: w.String()}
	if w.Kind == runwait.Limiter || w.Kind == runwait.Queue {
		ahead := w.Ahead
		out.Limiter, out.Ahead = w.Limit, &ahead
	}
	if !w.Until.IsZero() {
		t := w.Until.UTC()
		out.Until = &t
	}
	return out
}

// limiterPlaces fills in how many go before each of ws's waits for a
// limiter: its place in the limiter's line now (-1 if it is not in it,
// say after a long park, until it asks again).
func (s *Server) limiterPlaces(r *http.Request, runID string, ws []runwait.Wait) {
	for i := range ws {
		w := &ws[i]
		if w.Kind != runwait.Limiter {
			continue
		}
		st, err := s.store.LimiterState(r.Context(), w.Limit, time.Time{})
		if err != nil {
			continue
		}
		// Whichever execution of the run waits (StepHolder names it).
		for n, x := range limits.Order(*st) {
			if run, op, attempt, ok := limits.HolderStep(x.Holder); ok && run == runID && op == w.Op && attempt == w.Attempt {
				w.Ahead = n
			}
		}
	}
}

// queuePlace fills in how many of its queue's line go before a queued
// run (limit.Line over the queue's first queued runs; -1 past them).
func (s *Server) queuePlace(r *http.Request, run *store.Run, ws []runwait.Wait) {
	for i := range ws {
		w := &ws[i]
		if w.Kind != runwait.Queue {
			continue
		}
		st, err := s.store.LimiterState(r.Context(), w.Limit, time.Time{})
		if err != nil {
			continue
		}
		// Their heads: the line is ordered by key, priority and age, and
		// a run's values (up to 4 KiB each listed) are not read.
		queued, err := s.store.ListRuns(r.Context(), &store.ListRunsParams{Queue: w.Limit, Queued: true, Limit: 1000, NoData: true})
		if err != nil {
			continue
		}
		cands := make([]limits.Candidate, 0, len(queued))
		now := time.Now()
		for _, q := range queued {
			if !q.WakeAt.After(now) || q.ID == run.ID {
				cands = append(cands, limits.Candidate{Holder: limits.RunHolder(q.ID), Key: q.QueueKey, Priority: q.Priority, Since: q.CreatedAt})
			}
		}
		for n, x := range limits.Line(*st, cands) {
			if x.Holder == limits.RunHolder(run.ID) {
				w.Ahead = n
			}
		}
	}
}
