package weir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
// nothing, and a long wait parks the run (it holds no worker) and resumes
// in line where it was. A limiter that does not exist fails the step for
// good (set it with the store's SetLimiter, or `weir limiters set`).
func WithLimiter(name string, opts *LimitOptions) StepOption {
	return func(c *stepConfig) {
		c.limiter = name
		if opts != nil {
			c.limitOpts = *opts
		}
	}
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

// errLimiter marks a limiter the step cannot use: none by that name, or a
// store without limiters. It fails the step for good.
var errLimiter = errors.New("weir: step limiter")

// takeSlot waits until attempt of step op holds a slot of its limiter,
// and returns what gives it back. Waits are env's (a long one parks the
// run); a limiter that cannot be used is an error.
func (env *stepEnv) takeSlot(op int64, st *opState, attempt int64, cfg *stepConfig) (func(cost int64), error) {
	x := env.x
	lim := x.e.store
	lease := x.e.cfg.LeaseTTL
	p := &store.AcquireSlotParams{Limiter: cfg.limiter, Request: limit.Request{
		Holder: limit.StepHolder(x.run.ID, op, attempt), Key: cfg.limitOpts.Key, Priority: cfg.limitOpts.Priority, Lease: lease}}
	if g := x.e.grants.pool(cfg.limiter, cfg.limitOpts.Key); g != nil {
		if release, ok := g.take(x.ctx); ok {
			return release, nil
		}
	}
	// In line: this engine's grants of the limiter give back what they do
	// not use, and hand out nothing while it waits.
	waiting := x.e.grants.waiters(cfg.limiter)
	inLine := false
	defer func() {
		if inLine {
			waiting.Add(-1)
		}
	}()
	poll := 5 * time.Millisecond
	for {
		d, err := lim.AcquireSlot(x.ctx, p)
		switch {
		case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalid), errors.Is(err, store.ErrUnsupported):
			return nil, fmt.Errorf("%w: %w", errLimiter, err)
		case err != nil:
			env.fail(err)
		case d.Granted:
			return x.holdSlot(lim, cfg.limiter, p.Holder, lease), nil
		}
		if !inLine {
			inLine = true
			waiting.Add(1)
			x.e.grants.kick(cfg.limiter)
			x.e.grants.refuse(cfg.limiter)
		}
		if st.limitWait < attempt {
			// The log says the attempt waits, once: what the UI and
			// `runs watch` show ("waiting for openai: 3 ahead").
			data, _ := json.Marshal(map[string]string{"limiter": cfg.limiter, "reason": string(d.Reason)})
			env.record(&store.AdvanceParams{Events: []store.Event{{Type: store.EventLimitWaiting, Op: op, Name: st.name, Attempt: attempt, Data: data}}})
			st.limitWait = attempt
		}
		// A rate or budget window says when; a held slot comes back on a
		// release, which polling finds (up to the engine's poll interval).
		next := time.Now().Add(poll)
		if d.Reason == limit.Rate || d.Reason == limit.Budget {
			next = d.RetryAt
		}
		poll = min(2*poll, x.e.cfg.PollInterval)
		env.wait(next)
		if r, ok := x.interrupted(); ok {
			env.leave(r, context.Cause(x.ctx))
		}
	}
}

// holdSlot keeps a granted slot's lease renewed until the returned
// function gives it back with the attempt's cost.
func (x *execution) holdSlot(lim store.Limits, name, holder string, lease time.Duration) func(cost int64) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(lease / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if _, err := lim.RenewSlot(context.Background(), &store.RenewSlotParams{Limiter: name, Holder: holder, Lease: lease}); err != nil {
					x.e.log.Warn("weir: renewing a limiter's slot failed", "limiter", name, "holder", holder, "err", err)
				}
			}
		}
	}()
	return func(cost int64) {
		close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// A release lost here is taken back with the lease; the cost it
		// carried is then not charged (logged).
		if _, err := lim.ReleaseSlot(ctx, &store.ReleaseSlotParams{Limiter: name, Holder: holder, Cost: cost}); err != nil {
			x.e.log.Warn("weir: releasing a limiter's slot failed; it comes back with its lease", "limiter", name, "holder", holder, "cost", cost, "err", err)
		}
	}
}
