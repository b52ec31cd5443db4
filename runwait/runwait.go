// Package runwait says what a run that has not ended is waiting on: a
// worker to claim it, a step attempt that is running, a retry's backoff, a
// timer, a hook's payload, a child run's end. The answer is read from the
// run's row, its event log and its hooks, so that every reader (the server's
// /v1/runs/{id}/waiting, the UI, `weir runs watch`) gives the same one.
//
// The log does not record which of a run's open hooks the workflow code
// awaits at this moment (a hook may be made early and awaited later): an
// open hook of a run that runs no step is reported as waited on, which is
// what it is in every workflow that awaits what it makes.
package runwait

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/weirhq/weir/store"
)

// Kind is what a run waits on.
type Kind string

// The kinds of wait.
const (
	// Worker: the run is runnable and no worker holds it: never claimed
	// yet, released to be resumed, or its worker's lease ran out.
	Worker Kind = "worker"
	// Step: an attempt of a step is running.
	Step Kind = "step"
	// Retry: a step's attempt failed and its next one waits for its
	// backoff to pass.
	Retry Kind = "retry"
	// Timer: a durable sleep.
	Timer Kind = "timer"
	// Hook: a payload delivered to a hook (POST /v1/hooks/{token}).
	Hook Kind = "hook"
	// Child: a child run's end.
	Child Kind = "child"
	// Limiter: an attempt of a step waits for a slot of its limiter
	// (weir.WithLimiter).
	Limiter Kind = "limiter"
	// Queue: a run waits in its queue to be admitted
	// (weir.StartOptions.Queue).
	Queue Kind = "queue"
	// Scheduled: a run not yet started, whose start is in the future.
	Scheduled Kind = "scheduled"
	// Park: the run is parked until a time for nothing the log names (a
	// message on a topic, a deadline).
	Park Kind = "park"
)

// Wait is one thing a run waits on.
type Wait struct {
	Kind Kind
	// Name is the step's name, the hook's token or the child run's id;
	// for a Worker wait, the application version a worker must run (the
	// run's, "" if none).
	Name string
	// Op is the operation in the run's log (0 for Worker, Scheduled, Park).
	Op int64
	// Attempt is the running attempt (Step) or the failed one (Retry).
	Attempt int64
	// Since is when the wait began.
	Since time.Time
	// Until is when it ends at the latest: a retry's next attempt, a
	// timer, a hook's timeout, a parked run's wake-up. Zero: no bound.
	Until time.Time
	// Limit is the limiter a Limiter or Queue wait is for, and Ahead how
	// many of its line go first (-1: not known; the server fills it in).
	Limit string
	Ahead int
}

// String is the wait in a sentence, for a person.
func (w Wait) String() string {
	var s string
	switch w.Kind {
	case Worker:
		s = "a worker to claim it (is a worker running with this workflow registered?)"
		if w.Name != "" {
			s = fmt.Sprintf("a worker of version %q to claim it (is a worker of that version running with this workflow registered? or move the run: weir runs migrate)", w.Name)
		}
	case Step:
		s = fmt.Sprintf("step %q, attempt %d, running", w.Name, w.Attempt)
	case Retry:
		s = fmt.Sprintf("the retry of step %q after attempt %d failed", w.Name, w.Attempt)
	case Timer:
		s = "a timer"
	case Hook:
		s = fmt.Sprintf("a payload for hook %q", w.Name)
	case Child:
		s = fmt.Sprintf("child run %s to end", w.Name)
	case Limiter:
		s = fmt.Sprintf("step %q, attempt %d, waiting for the limiter %q", w.Name, w.Attempt, w.Limit)
		if w.Ahead >= 0 {
			s += fmt.Sprintf(": %d ahead", w.Ahead)
		}
	case Queue:
		s = fmt.Sprintf("its turn in the queue %q", w.Limit)
		if w.Ahead >= 0 {
			s += fmt.Sprintf(": %d ahead", w.Ahead)
		}
		if !w.Until.IsZero() {
			s += " (debounced: more starts of its key push it back)"
		}
	case Scheduled:
		s = "its scheduled start"
	default:
		s = "a wake-up (a message, a deadline)"
	}
	if !w.Until.IsZero() {
		s += ", until " + w.Until.UTC().Format(time.RFC3339Nano)
	}
	return s
}

// noBound is how far away a wake-up must be to mean "no bound": the
// engine parks a run that waits for nothing but a delivery a century away.
const noBound = 50 * 365 * 24 * time.Hour

// Of returns what run waits on at now, given its events (the whole log, in
// order) and its hooks (nil if the store keeps none): nothing for a run
// that has ended, or that executes workflow code between operations. The
// list is in a stable order: the worker first, then by operation.
func Of(run *store.Run, events []store.Event, hooks []*store.HookInfo, now time.Time) []Wait {
	if run.Status.Terminal() {
		return nil
	}
	wake := run.WakeAt
	if !wake.IsZero() && wake.Sub(now) > noBound {
		wake = time.Time{}
	}
	if run.Queued && !run.CancelRequested {
		w := Wait{Kind: Queue, Since: run.CreatedAt, Limit: run.Queue, Ahead: -1}
		if wake.After(now) {
			w.Until = wake
		}
		return []Wait{w}
	}
	if run.Status == store.RunPending {
		if wake.After(now) {
			return []Wait{{Kind: Scheduled, Since: run.CreatedAt, Until: wake}}
		}
		return []Wait{{Kind: Worker, Name: run.Version, Since: later(run.CreatedAt, run.WakeAt)}}
	}
	var out []Wait
	leased := run.LeaseOwner != "" && run.LeaseExpires.After(now)
	if !leased && !run.WakeAt.After(now) {
		// Runnable and unheld: claimed by no one since it was released
		// (a park that ended) or since its worker's lease ran out.
		since := later(run.UpdatedAt, run.WakeAt)
		if run.LeaseOwner != "" {
			since = later(since, run.LeaseExpires)
		}
		out = append(out, Wait{Kind: Worker, Name: run.Version, Since: since})
	}
	ops, idle := fromLog(events)
	open := map[string]bool{}
	for _, h := range hooks {
		if !h.Disposed {
			open[h.Token] = true
		}
	}
	if hooks != nil {
		// Disposed without an event of it: the hook's run ended.
		keep := func(w Wait) bool { return w.Kind != Hook || open[w.Name] }
		ops, idle = slices.DeleteFunc(ops, func(w Wait) bool { return !keep(w) }), slices.DeleteFunc(idle, func(w Wait) bool { return !keep(w) })
	}
	if len(ops) == 0 {
		// Nothing else open: the hooks the run went on from are what it
		// can be waiting on again.
		ops = idle
	}
	out = append(out, foldTimeouts(ops)...)
	if len(out) == 0 && wake.After(now) {
		out = append(out, Wait{Kind: Park, Since: lastAt(events, run.UpdatedAt), Until: wake})
	}
	return out
}

// fromLog is the open operations of a log, by op: running attempts,
// backoffs, timers, hooks and children not yet over. A hook that took a
// payload and was followed by operations after it is in idle instead: the
// workflow went on from it, and may or may not await it again.
func fromLog(events []store.Event) (open, idle []Wait) {
	byOp := map[int64]*Wait{}
	lastOf := map[int64]int{} // hook op -> index of its last event
	children := map[int64]bool{}
	received := map[int64]bool{}               // hooks that took a payload
	maxOpAfter := make([]int64, len(events)+1) // the largest op at or after each index
	for i := len(events) - 1; i >= 0; i-- {
		maxOpAfter[i] = maxOpAfter[i+1]
		if events[i].Type != store.EventSleepScheduled {
			// (a timer set after a hook is its timeout, part of the wait)
			maxOpAfter[i] = max(maxOpAfter[i], events[i].Op)
		}
	}
	for i := range events {
		ev := &events[i]
		switch ev.Type {
		case store.EventStepStarted:
			byOp[ev.Op] = &Wait{Kind: Step, Name: ev.Name, Op: ev.Op, Attempt: ev.Attempt, Since: ev.At}
		case store.EventLimitWaiting:
			var d struct{ Limiter string }
			_ = json.Unmarshal(ev.Data, &d)
			byOp[ev.Op] = &Wait{Kind: Limiter, Name: ev.Name, Op: ev.Op, Attempt: ev.Attempt, Since: ev.At, Limit: d.Limiter, Ahead: -1}
		case store.EventStepFailed:
			if ev.Final {
				delete(byOp, ev.Op)
				continue
			}
			byOp[ev.Op] = &Wait{Kind: Retry, Name: ev.Name, Op: ev.Op, Attempt: ev.Attempt, Since: ev.At, Until: ev.WakeAt}
		case store.EventStepCompleted, store.EventSleepFired, store.EventHookDisposed:
			delete(byOp, ev.Op)
		case store.EventSleepScheduled:
			byOp[ev.Op] = &Wait{Kind: Timer, Op: ev.Op, Since: ev.At, Until: ev.WakeAt}
			lastOf[ev.Op] = i
		case store.EventHookCreated:
			byOp[ev.Op] = &Wait{Kind: Hook, Name: ev.Name, Op: ev.Op, Since: ev.At}
			lastOf[ev.Op] = i
		case store.EventChildStarted:
			children[ev.Op] = true
			byOp[ev.Op] = &Wait{Kind: Child, Name: ev.Name, Op: ev.Op, Since: ev.At}
		case store.EventHookReceived:
			w := byOp[ev.Op]
			switch {
			case w == nil:
			case children[ev.Op]:
				delete(byOp, ev.Op) // the child's end
			default:
				w.Since = ev.At // waiting for the next payload, if at all
				lastOf[ev.Op] = i
				received[ev.Op] = true
			}
		}
	}
	for _, w := range byOp {
		last, ok := lastOf[w.Op]
		switch {
		case !ok || maxOpAfter[last+1] <= w.Op:
			open = append(open, *w)
		case w.Kind == Hook && !received[w.Op]:
			// Made and not yet given a payload: the run waits for one,
			// now or once what it went on to do is done.
			open = append(open, *w)
		case w.Kind == Hook:
			idle = append(idle, *w)
		default:
			// A timer the workflow went on from: a Select's timeout
			// that lost, a sleep of a branch no longer awaited.
		}
	}
	byOpOrder := func(a, b Wait) int { return int(a.Op - b.Op) }
	slices.SortFunc(open, byOpOrder)
	slices.SortFunc(idle, byOpOrder)
	return open, idle
}

// foldTimeouts makes a timer set after a hook or a child (ReceiveWithin,
// a Select with a sleep) that hook's or child's bound, not a wait of its
// own: the run waits for the payload, until then.
func foldTimeouts(ws []Wait) []Wait {
	out := ws[:0]
	last := -1 // the latest hook or child kept
	for _, w := range ws {
		switch {
		case w.Kind == Hook || w.Kind == Child:
			last = len(out)
		case w.Kind == Timer && last >= 0 && out[last].Until.IsZero():
			out[last].Until = w.Until
			continue
		}
		out = append(out, w)
	}
	return out
}

// Summary is the waits in one line: "" for none.
func Summary(ws []Wait) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = w.String()
	}
	return strings.Join(parts, "; ")
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func lastAt(events []store.Event, def time.Time) time.Time {
	if len(events) == 0 {
		return def
	}
	return later(events[len(events)-1].At, def)
}
