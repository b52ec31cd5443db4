package weir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
)

// LimitOptions says how a step waits in a limiter's line (WithLimiter).
type LimitOptions struct {
	// Key is the step's fair-share group in the line: a tenant, a user.
	// Of waiters of one priority, those whose key holds fewer slots go
	// first, so one tenant's thousand steps do not hold up another's one.
	Key string
	// Priority: higher goes first.
	Priority int
}

// WithLimiter makes each attempt of the step take a slot of the store's
// limiter name first (store.Limits: its concurrency, its rate, its cost
// budget per period, across every process on a PostgreSQL database) and
// give it back when it ends, charged with what ChargeLimiter reported.
// The limit is on the step, the thing a provider limits (an LLM call), not
// on the run. An attempt waiting for its slot has not started: it writes
// nothing. A long wait for a rate or budget window parks the run (it holds
// no worker) and resumes in line where it was; a wait for a held slot
// keeps its run on the worker, where the slot's release wakes it at once
// (store.LimiterWatcher). A limiter that does not exist fails the step for
// good: declare it in Config.Limiters, or set it with Engine.SetLimiter or
// `weir limiters set`; declare the workflow's limiters with UsesLimiters
// for Engine.Work to refuse to start without them.
func WithLimiter(name string, opts *LimitOptions) StepOption {
	return func(c *stepConfig) {
		c.limiter = name
		if opts != nil {
			c.limitOpts = *opts
		}
	}
}

// SetLimiter creates limiter c or changes its bounds, keeping its slots
// held and its line (store.Limits.SetLimiter): on PostgreSQL, for every
// process on the database at once. ErrQuota past store.MaxLimiters.
func (e *Engine) SetLimiter(ctx context.Context, c limit.Config) error {
	return e.store.SetLimiter(ctx, &c)
}

// Limiter returns limiter name's bounds and what it holds now: its slots
// held, its line, its recent uses. ErrNotFound if there is none.
func (e *Engine) Limiter(ctx context.Context, name string) (*limit.Config, *limit.State, error) {
	c, err := e.store.GetLimiter(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	st, err := e.store.LimiterState(ctx, name, time.Time{})
	if err != nil {
		return nil, nil, err
	}
	return c, st, nil
}

// Limiters returns every limiter's bounds.
func (e *Engine) Limiters(ctx context.Context) ([]*limit.Config, error) {
	return e.store.ListLimiters(ctx)
}

// DeleteLimiter deletes limiter name if nothing uses it (no slot held, no
// one in line, no run queued in it): store.ErrLimiterInUse if something
// does, ErrNotFound if there is none.
func (e *Engine) DeleteLimiter(ctx context.Context, name string) error {
	return e.store.DeleteLimiter(ctx, name)
}

// checkUsedLimiters fails with ErrNotFound if a limiter a registered
// workflow declares (UsesLimiters) is not in the store (Config.Limiters are
// set before it is asked).
func (e *Engine) checkUsedLimiters(ctx context.Context) error {
	e.mu.Lock()
	var names []string
	for _, wf := range e.workflows {
		for _, n := range wf.limiters {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	e.mu.Unlock()
	slices.Sort(names)
	var missing []string
	for _, n := range names {
		if _, err := e.store.GetLimiter(ctx, n); errors.Is(err, store.ErrNotFound) {
			missing = append(missing, n)
		} else if err != nil {
			return fmt.Errorf("weir: limiter %q: %w", n, err)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("weir: %w: the limiters %q that registered workflows use (UsesLimiters): set them in Config.Limiters, "+
			"with Engine.SetLimiter or `weir limiters set`", ErrNotFound, missing)
	}
	return nil
}

// ensureLimiter sets c unless the store has it with the same bounds
// (Config.Limiters): a restart does not write what is there.
func (e *Engine) ensureLimiter(ctx context.Context, c *limit.Config) error {
	have, err := e.store.GetLimiter(ctx, c.Name)
	if err == nil && *have == *c {
		return nil
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return e.store.SetLimiter(ctx, c)
}

// ChargeLimiter reports cost (the tokens a call used) for sc's attempt: it
// is charged to the attempt's limiter's budget when the attempt ends. Each
// call adds to it. Without WithLimiter it does nothing.
func ChargeLimiter(sc StepContext, cost int64) {
	if s := stepStartOf(sc); s != nil && cost > 0 {
		s.cost.Add(cost)
	}
}

// stepStartOf is the attempt behind sc, if it is one of the engine's.
func stepStartOf(sc StepContext) *stepStart {
	if c, ok := sc.(*stepContext); ok {
		return c.start
	}
	return nil
}

// closed reports whether ch is closed (nil: never).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// errLimiter marks a limiter the step cannot use: none by that name, or a
// store without limiters. It fails the step for good.
var errLimiter = errors.New("weir: step limiter")

// takeSlot waits until attempt of step op holds a slot of its limiter,
// and returns what gives it back and a channel closed if the slot is lost
// while the attempt runs (slotLease). Waits are env's (a long one parks
// the run); a limiter that cannot be used is an error.
func (env *stepEnv) takeSlot(op int64, st *opState, attempt int64, cfg *stepConfig) (func(cost int64), <-chan struct{}, error) {
	x := env.x
	x.reachLine()
	lim := x.e.store
	lease := x.e.cfg.LeaseTTL
	p := &store.AcquireSlotParams{Limiter: cfg.limiter, Request: limit.Request{
		Holder: limit.StepHolder(x.run.ID, op, attempt, x.epoch), Key: cfg.limitOpts.Key, Priority: cfg.limitOpts.Priority, Lease: lease}}
	if g := x.e.grants.pool(cfg.limiter, cfg.limitOpts.Key); g != nil {
		if release, lost, ok := g.take(x.ctx); ok {
			return release, lost, nil
		}
	}
	// An attempt stopped while it waits at the store (its run cancelled,
	// its lease lost, the engine closing) gives its place back, and any
	// slot handed to it meanwhile: the line goes on at once, where the
	// place would have been handed a slot nobody uses until its lease ran
	// out (red team, round nine: 22 s of a one-slot limiter idle).
	asked, granted := false, false
	defer func() {
		if asked && !granted && x.ctx.Err() != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if _, err := lim.ReleaseSlot(ctx, &store.ReleaseSlotParams{Limiter: cfg.limiter, Holder: p.Holder}); err != nil {
				x.e.log.Warn("weir: leaving a limiter's line failed; the place goes with its lease", "limiter", cfg.limiter, "holder", p.Holder, "err", err)
			}
		}
	}()
	// In line: this engine's grants of the limiter give back what they do
	// not use, and hand out nothing while it waits.
	waiting := x.e.grants.waiters(cfg.limiter)
	inLine := false
	defer func() {
		if inLine {
			waiting.Add(-1)
		}
	}()
	// A place in the limiter's line at the store, or first one in this
	// engine's local line (limitline.go).
	line, key, prio := x.e.grants.line(cfg.limiter), cfg.limitOpts.Key, cfg.limitOpts.Priority
	want := lineWant{limiter: cfg.limiter, key: key, prio: prio, parks: env.parks}
	// The log says the attempt waits, once: what the UI and `runs watch`
	// show ("waiting for openai: 3 ahead"). Written before the attempt
	// waits (flushWait), or with its park's record when it parks lined
	// at once (takeWait): a flood's run then costs one commit, not two.
	var waitEv []store.Event
	noteWait := func(reason limit.Reason) {
		if st.limitWait < attempt && waitEv == nil {
			data, _ := json.Marshal(map[string]string{"limiter": cfg.limiter, "reason": string(reason)})
			waitEv = []store.Event{{Type: store.EventLimitWaiting, Op: op, Name: st.name, Attempt: attempt, Data: data}}
		}
	}
	takeWait := func() []store.Event {
		evs := waitEv
		if evs != nil {
			waitEv, st.limitWait = nil, attempt
		}
		return evs
	}
	flushWait := func() {
		if evs := takeWait(); evs != nil {
			env.record(&store.AdvanceParams{Events: evs})
		}
	}
	if w := line.enter(key, prio); w != nil {
		inLine = true
		waiting.Add(1)
		x.e.grants.kick(cfg.limiter)
		x.e.grants.refuse(cfg.limiter)
		noteWait(limit.Queue)
		placed := false
		func() {
			defer func() {
				if !placed {
					line.cancel(w) // left while waiting (a wait may leave)
				}
			}()
			seat, park := x.lineEnter(want)
			defer x.lineLeave()
			if park && env.parks {
				// No seat for the run: it parks, lined (lineseats.go),
				// its wait said in the park's record.
				x.parkLined(cfg.limiter, prio, takeWait()...)
			}
			if park {
				defer env.standLined(want)()
			}
			flushWait()
			if !env.waitLocal(w, seat) {
				// A better waiter took its seat.
				if env.parks {
					x.parkLined(cfg.limiter, prio)
				}
				x.leaveSeat()
				defer env.standLined(want)()
				env.waitLocal(w, nil)
			}
			placed = true
		}()
	}
	defer line.leave(key, prio)
	poll := 5 * time.Millisecond
	watcher, watches := store.LimiterWatcherOf(lim)
	stop := func() {}
	defer func() { stop() }() // a wait may leave (a park, an interruption)
	for {
		// Watched before asking: a slot handed to it between the refusal
		// and the wait still wakes it.
		var handed, changed <-chan struct{}
		if watches {
			var unhand, unchange func()
			handed, unhand = watcher.WatchSlot(cfg.limiter, p.Holder)
			changed, unchange = watcher.WatchLimiter(cfg.limiter)
			stop = sync.OnceFunc(func() { unhand(); unchange() })
		}
		sent := time.Now()
		d, err := lim.AcquireSlot(x.ctx, p)
		if err != nil || d.Granted {
			stop()
		}
		asked = true
		granted = err == nil && d.Granted
		switch {
		case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalid), errors.Is(err, store.ErrUnsupported):
			return nil, nil, fmt.Errorf("%w: %w", errLimiter, err)
		case err != nil:
			env.fail(err)
		case d.Granted:
			release, lost := x.holdSlot(lim, cfg.limiter, p.Holder, lease, sent)
			return release, lost, nil
		}
		if !inLine {
			inLine = true
			waiting.Add(1)
			x.e.grants.kick(cfg.limiter)
			x.e.grants.refuse(cfg.limiter)
		}
		noteWait(d.Reason)
		switch {
		case d.Reason == limit.Rate || d.Reason == limit.Budget || !watches:
			flushWait()
			// A rate or budget window says when; without a watcher, a held
			// slot coming back is found by polling (up to the engine's
			// poll interval).
			next := time.Now().Add(poll)
			if d.Reason == limit.Rate || d.Reason == limit.Budget {
				next = d.RetryAt
			}
			poll = min(2*poll, x.e.cfg.PollInterval)
			stop()
			if d.Reason == limit.Rate || d.Reason == limit.Budget {
				// A park for the window says so on the run's row: a change
				// of the limiter wakes it, whenever its place in the line
				// lapsed (red team, round eleven: a rate taken off left
				// runs asleep for the old window, a day).
				func() {
					defer x.par.waitFor(cfg.limiter)()
					env.wait(next, nil, true)
				}()
			} else {
				env.wait(next, nil, true)
			}
		default:
			// A held slot comes back to the line's first at its release
			// (limit.HandOff), which wakes whom it handed it: this
			// attempt asks again then, or to keep its place (three
			// quarters of its place's lease), and not at every change of
			// the limiter. So a release costs the store one ask, and the
			// waiters of a saturated limiter leave its row to the
			// holders. Not parked: a parked run would not hear its turn
			// come.
			// A limiter that does not hand off (a rate's, a budget's)
			// wakes its waiters at every change instead.
			if !d.HandsOff {
				handed = changed
			}
			wasHanded := false
			func() {
				seat, park := x.lineEnter(want)
				defer x.lineLeave()
				if park && !env.parks {
					// No seat for the run, whose other steps may run: this
					// one waits on, lined, and the run parks once none runs.
					defer env.standLined(want)()
					park = false
				}
				if !park {
					flushWait()
				}
				var evict <-chan struct{}
				if seat != nil {
					evict = seat.evict
				}
				if !park {
					wake, unwatch := either(handed, evict)
					defer unwatch()
					env.wait(sent.Add(lease*3/4), wake, false)
					park = closed(evict) && !closed(handed)
					wasHanded = d.HandsOff && closed(handed)
				}
				if park && !env.parks {
					// A better waiter took its seat: it asks again, and
					// waits on lined if refused.
					x.leaveSeat()
					return
				}
				if park {
					// No seat for the run, or a better waiter took it: it
					// gives its place in the store's line back (a slot
					// handed to it goes on) and parks, lined
					// (lineseats.go).
					stop()
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer cancel()
					if _, err := lim.ReleaseSlot(ctx, &store.ReleaseSlotParams{Limiter: cfg.limiter, Holder: p.Holder}); err != nil {
						x.e.log.Warn("weir: leaving a limiter's line failed; the place goes with its lease", "limiter", cfg.limiter, "holder", p.Holder, "err", err)
					}
					x.parkLined(cfg.limiter, prio, takeWait()...)
				}
			}()
			stop()
			if _, stopped := x.interrupted(); wasHanded && !stopped {
				// Handed a slot (limit.HandOff): the release that handed
				// it committed the hold, its lease counted from then, so
				// a read of the limiter says whether it holds it and the
				// step starts without an ask of its own, whose commit
				// would be a second one between a step and the next. A
				// wake is a hint (a late one may be of a hand it gave
				// back): a hold not read, or with less than half its
				// lease left, is asked for.
				until, held, err := lim.SlotHeld(x.ctx, &store.SlotHeldParams{Limiter: cfg.limiter, Holder: p.Holder})
				if err == nil && held && time.Until(until) > lease/2 {
					granted = true
					release, lost := x.holdSlot(lim, cfg.limiter, p.Holder, lease, until.Add(-lease))
					return release, lost, nil
				}
			}
		}
		if r, ok := x.interrupted(); ok {
			env.leave(r, context.Cause(x.ctx))
		}
	}
}

// holdSlot keeps a granted slot's lease renewed until the returned
// function gives it back with the attempt's cost. The channel is closed
// when the slot is lost (slotLease): the store says it is no longer held,
// or no renewal was heard in time.
func (x *execution) holdSlot(lim store.Limits, name, holder string, lease time.Duration, sent time.Time) (func(cost int64), <-chan struct{}) {
	sl := newSlotLease(sent, lease)
	done := make(chan struct{})
	go func() {
		// Renewed every third of its lease, and sooner while less than
		// two thirds are left: a grant that waited long for the
		// limiter's row was given a lease that began when it was asked.
		last := sent
		next := func() time.Duration {
			return max(time.Millisecond, min(lease/3, time.Until(last.Add(lease))/2))
		}
		t := time.NewTimer(next())
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			sent := time.Now()
			ok, err := lim.RenewSlot(context.Background(), &store.RenewSlotParams{Limiter: name, Holder: holder, Lease: lease})
			switch {
			case err != nil:
				x.e.log.Warn("weir: renewing a limiter's slot failed", "limiter", name, "holder", holder, "err", err)
			case !ok:
				x.e.log.Warn("weir: a step's limiter slot was lost: its lease ran out before it was renewed", "limiter", name, "holder", holder)
				sl.lose()
				return
			default:
				last = sent
				sl.renewed(sent)
			}
			t.Reset(max(next(), 10*time.Millisecond))
		}
	}()
	return func(cost int64) {
		close(done)
		sl.stop()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// A release lost here is taken back with the lease; the cost it
		// carried is then not charged (logged).
		if _, err := lim.ReleaseSlot(ctx, &store.ReleaseSlotParams{Limiter: name, Holder: holder, Cost: cost}); err != nil {
			x.e.log.Warn("weir: releasing a limiter's slot failed; it comes back with its lease", "limiter", name, "holder", holder, "cost", cost, "err", err)
		}
	}, sl.lost
}

// slotLease fences a limiter slot's holder: the store gives a slot whose
// lease ran out to the next in line, so an attempt must stop before that
// can happen, or more steps than the bound would run at once. The lease
// runs out at the store no earlier than the holder's clock when it sent
// the last renewal the store granted, plus the lease; lost closes a tenth
// of a lease before that (room for the clocks of other processes), or at
// once when the store says the hold is gone. The attempt then ends as a
// timed-out one does (SlotLostError): its context is cancelled, it is
// fenced off its streams, and its step retries with a slot of its own.
type slotLease struct {
	lost  chan struct{}
	ttl   time.Duration
	timer *time.Timer

	mu   sync.Mutex
	gone bool // lost, or stopped: the deadline moves no more
}

// slotLeaseMargin is how long before its lease runs out a slot is given up.
func slotLeaseMargin(ttl time.Duration) time.Duration { return ttl / 10 }

func newSlotLease(sent time.Time, ttl time.Duration) *slotLease {
	l := &slotLease{lost: make(chan struct{}), ttl: ttl}
	// Held while the timer is made: a deadline already past fires at once,
	// and lose must see the timer.
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = time.AfterFunc(time.Until(sent.Add(ttl-slotLeaseMargin(ttl))), l.lose)
	return l
}

// renewed moves the deadline: the store granted a renewal sent at sent.
func (l *slotLease) renewed(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.gone {
		l.timer.Reset(time.Until(sent.Add(l.ttl - slotLeaseMargin(l.ttl))))
	}
}

// lose closes lost, once.
func (l *slotLease) lose() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.gone {
		l.gone = true
		l.timer.Stop()
		close(l.lost)
	}
}

// isLost reports whether lost is closed.
func (l *slotLease) isLost() bool {
	select {
	case <-l.lost:
		return true
	default:
		return false
	}
}

// stop ends the deadline: the slot was given back.
func (l *slotLease) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gone = true
	l.timer.Stop()
}
