package weir

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirhq/weir/store"
)

// leaseKeeper renews the leases of every run this engine executes in one
// store call every LeaseTTL/3, where the store renews many at once
// (store.LeaseRenewer): one statement for a worker's hundred runs instead
// of a hundred, on a path (PostgreSQL: a connection of its own) that a
// pool busy with limiter or step transactions never holds up. A lease that
// lapsed under load would have another worker run the steps again; this
// one lapses only when the process or its database is gone.
type leaseKeeper struct {
	e *Engine
	r store.LeaseRenewer

	mu      sync.Mutex
	held    map[*execution]time.Time // each run's last renewal (or claim)
	running bool                     // loop runs while held is not empty

	// What an operator watches of a worker under load (EngineStats):
	// leases a round left for the next (their rows busy), rounds that
	// failed or timed out, and leases that ran out before a renewal.
	skipped, failed, lapsed atomic.Uint64
}

func newLeaseKeeper(e *Engine, r store.LeaseRenewer) *leaseKeeper {
	return &leaseKeeper{e: e, r: r, held: make(map[*execution]time.Time)}
}

// hold renews x's lease from now until drop.
func (k *leaseKeeper) hold(x *execution) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.held[x] = time.Now()
	if !k.running {
		k.running = true
		go k.loop()
	}
}

// drop stops renewing x's lease.
func (k *leaseKeeper) drop(x *execution) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.held, x)
}

// loop renews every held lease each LeaseTTL/3 until none is held. Its
// first round is at once: it readies the store's path (PostgreSQL dials
// its connection) while the leases just claimed are fresh.
func (k *leaseKeeper) loop() {
	ttl := k.e.cfg.LeaseTTL
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for first := true; ; first = false {
		if !first {
			<-t.C
		}
		k.mu.Lock()
		if len(k.held) == 0 {
			k.running = false
			k.mu.Unlock()
			return
		}
		xs := make([]*execution, 0, len(k.held))
		ps := make([]store.RenewLeaseParams, 0, len(k.held))
		for x := range k.held {
			xs = append(xs, x)
			ps = append(ps, store.RenewLeaseParams{RunID: x.run.ID, LeaseEpoch: x.epoch, LeaseTTL: ttl})
		}
		k.mu.Unlock()
		k.renew(xs, ps, ttl)
	}
}

// renew renews ps (the leases of xs) and tells each execution what came
// of it: a cancel requested, a lease lost, or, when the store could not
// be asked, nothing until its lease ran out.
func (k *leaseKeeper) renew(xs []*execution, ps []store.RenewLeaseParams, ttl time.Duration) {
	// Up to half the lease: a slow round still saves every lease renewed
	// at the last one, and the next round is not two behind.
	ctx, cancel := context.WithTimeout(context.Background(), ttl/2)
	res, err := k.r.RenewLeases(ctx, ps)
	cancel()
	now := time.Now()
	type verdict struct {
		x     *execution
		cause error
	}
	var out []verdict
	k.mu.Lock()
	for i, x := range xs {
		last, ok := k.held[x]
		if !ok {
			continue // its execution ended meanwhile
		}
		switch {
		case err == nil && res[i].Err == nil:
			k.held[x] = now
			if res[i].Cancel {
				out = append(out, verdict{x, ErrCancelled})
			}
		case err == nil && errors.Is(res[i].Err, store.ErrLeaseLost):
			delete(k.held, x)
			out = append(out, verdict{x, errLeaseLost})
		case now.Sub(last) > ttl:
			// Someone else may own the run by now.
			delete(k.held, x)
			out = append(out, verdict{x, errLeaseLost})
			k.lapsed.Add(1)
		}
	}
	k.mu.Unlock()
	if err != nil {
		k.failed.Add(1)
		k.e.log.Warn("weir: renew leases", "runs", len(ps), "err", err)
	} else {
		for i := range res {
			// Not renewed this round (a busy row): kept, and renewed at
			// the next, unless its lease runs out first (above). Counted,
			// not logged: a saturated limiter's flood skips thousands.
			switch e := res[i].Err; {
			case errors.Is(e, store.ErrNotRenewed):
				k.skipped.Add(1)
			case e != nil && !errors.Is(e, store.ErrLeaseLost):
				k.e.log.Warn("weir: renew lease", "run", ps[i].RunID, "err", e)
			}
		}
	}
	for _, v := range out {
		v.x.cancel(v.cause)
	}
}
