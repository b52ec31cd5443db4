package weir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/weirhq/weir/schedule"
	"github.com/weirhq/weir/store"
)

// ScheduleOptions are a schedule's options (Workflow.Schedule).
type ScheduleOptions struct {
	// TZ is the IANA time zone a cron expression is read in ("" is UTC).
	TZ string
	// Overlap says what a tick does while the last tick's run is still in
	// flight: schedule.Skip (the default), schedule.BufferOne or
	// schedule.Allow.
	Overlap schedule.Overlap
	// Backfill is how late a tick may be and still start: after every
	// worker was down, the ticks missed within it start, each once, in
	// order. 0: schedule.DefaultBackfill (a minute).
	Backfill time.Duration
	// Paused sets the schedule paused: no tick starts until it is set
	// again without Paused, and the ticks meanwhile never do.
	Paused bool
}

// Schedule creates or changes schedule name: each tick of spec (a cron
// expression, a macro such as @daily, or "@every 15m": schedule.Parse)
// starts one run of w with input in, with the tick's own run id
// (schedule.RunID), however many workers run and whichever of them dies.
// A changed schedule keeps its place: the ticks it handled stay handled.
// Any engine that works (Engine.Work) on the store decides the ticks,
// leased to one at a time; the run then goes to a worker of w as any run
// does.
func (w *Workflow[In, Out]) Schedule(ctx context.Context, name, spec string, in In, opts *ScheduleOptions) (*store.Schedule, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("encode input: %w", err)
	}
	var o ScheduleOptions
	if opts != nil {
		o = *opts
	}
	return w.e.store.SetSchedule(ctx, &store.SetScheduleParams{Name: name, Workflow: w.name, Input: b, Spec: spec, TZ: o.TZ,
		Policy: schedule.Policy{Overlap: o.Overlap, Backfill: o.Backfill}, Paused: o.Paused})
}

// PauseSchedule pauses schedule name and keeps the rest of it: no tick
// starts until ResumeSchedule, and the ticks meanwhile never do.
// ErrNotFound if there is none.
func (e *Engine) PauseSchedule(ctx context.Context, name string) (*store.Schedule, error) {
	return e.store.SetSchedule(ctx, &store.SetScheduleParams{Name: name, PauseOnly: true, Paused: true})
}

// ResumeSchedule resumes a paused schedule: its ticks start from now.
// ErrNotFound if there is none.
func (e *Engine) ResumeSchedule(ctx context.Context, name string) (*store.Schedule, error) {
	return e.store.SetSchedule(ctx, &store.SetScheduleParams{Name: name, PauseOnly: true})
}

// ScheduledTick returns the schedule and tick that started the run of ctx;
// ok false for a run no schedule started.
func ScheduledTick(ctx Context) (name string, tick time.Time, ok bool) {
	return schedule.ParseRunID(ctx.RunID())
}

// scheduleDeciders bounds the schedules one engine decides at once.
const scheduleDeciders = 8

// scheduleLoop decides the store's due schedules, leased to this engine
// one claim at a time, until ctx ends.
func (e *Engine) scheduleLoop(ctx context.Context) {
	defer e.loopWG.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		wait := e.cfg.PollInterval
		ss, err := e.store.ClaimSchedules(ctx, &store.ClaimSchedulesParams{Owner: e.cfg.WorkerID, Lease: e.cfg.LeaseTTL, Limit: 16})
		switch {
		case errors.Is(err, store.ErrUnsupported):
			return // a store without schedules
		case err != nil && ctx.Err() == nil:
			e.log.Warn("weir: claim schedules", "err", err)
		}
		// Schedules are decided side by side: the twentieth of an instant
		// does not wait for the nineteen before it.
		nexts := make([]time.Time, len(ss))
		var wg sync.WaitGroup
		sem := make(chan struct{}, scheduleDeciders)
		for i, s := range ss {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				nexts[i] = e.decideSchedule(ctx, s)
			}()
		}
		wg.Wait()
		for _, next := range nexts {
			if !next.IsZero() {
				wait = min(wait, max(0, time.Until(next)))
			}
		}
		if len(ss) == 16 {
			wait = 0 // there may be more due
		}
		t.Reset(wait)
	}
}

// decideSchedule starts the runs of s's due ticks and records what it
// decided; it returns when s wants deciding next (zero if unknown). A
// failure leaves s to its lease: the next engine to claim it decides the
// same ticks, and their run ids find the runs already started.
func (e *Engine) decideSchedule(ctx context.Context, s *store.Schedule) time.Time {
	log := e.log.With("schedule", s.Name)
	spec, err := schedule.Parse(s.Spec, s.TZ)
	if err != nil {
		log.Error("weir: a schedule that does not parse", "err", err)
		return time.Time{}
	}
	last := schedule.LastEnded
	if s.State.LastRun != "" {
		// Its status alone: read at each decision, the run's data is not
		// needed (red team, round nineteen audit).
		r, err := e.runHead(ctx, s.State.LastRun)
		switch {
		case err == nil && r.Status == store.RunRunning:
			last = schedule.LastRunning
		case err == nil && r.Status == store.RunPending:
			last = schedule.LastPending
		case err != nil && !errors.Is(err, store.ErrNotFound): // a purged run is not in flight
			log.Warn("weir: a schedule's last run", "run", s.State.LastRun, "err", err)
			return time.Time{}
		}
	}
	d := schedule.Decide(spec, s.Policy, s.State, time.Now(), last)
	input := s.Input
	if len(input) == 0 {
		input = []byte("null")
	}
	for _, tick := range d.Start {
		id := schedule.RunID(s.Name, tick)
		if err := e.startScheduled(ctx, s.Workflow, input, id); err != nil {
			log.Warn("weir: start a schedule's run", "run", id, "err", err)
			return time.Time{}
		}
		d.State.LastRun = id
	}
	ok, err := e.store.AdvanceSchedule(ctx, &store.AdvanceScheduleParams{Name: s.Name, Owner: e.cfg.WorkerID, Version: s.Version, State: d.State, NextDue: d.Next})
	switch {
	case err != nil && ctx.Err() == nil:
		log.Warn("weir: record a schedule's ticks", "err", err)
	case err == nil && !ok:
		log.Debug("weir: a schedule changed while its ticks were decided; its next claim decides again")
	}
	return d.Next
}

// startScheduled starts run id of workflow: executed here at once if this
// engine has the workflow and a free slot, else left to a worker of it.
func (e *Engine) startScheduled(ctx context.Context, workflow string, input []byte, id string) error {
	e.mu.Lock()
	_, here := e.workflows[workflow]
	e.mu.Unlock()
	if here {
		_, _, err := e.StartRun(ctx, workflow, input, &StartOptions{ID: id})
		return err
	}
	_, _, err := e.store.CreateRun(ctx, &store.CreateRunParams{ID: id, Workflow: workflow, Input: input, Version: e.cfg.Version})
	if err == nil {
		e.nudge()
	}
	return err
}
