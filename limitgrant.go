package weir

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
)

// Grants: the fast path of a limited step. A limiter that bounds only
// concurrency (and per key) lets an engine hold a block of its slots under
// one hold (limit.Request.Grant) and hand them to its own attempts in
// memory, so a step whose limit is not the bottleneck costs no store
// transaction of its own: the engine asks the store only to grow the block
// (doubling), and its keeper renews or shrinks it every grantTick.
//
// The bounds stay exact: the store never grants more slots than are free,
// and the engine hands out no more than it was granted (a shrink lowers
// its count before the store is asked). What a grant gives up is the line's
// order while the limit binds, so a grant grows only while no one waits in
// line, and gives back what it does not use as soon as someone does: at once
// when the waiter is in this engine, within grantTick when it is in
// another process (its renewal says so). Waiting itself, with its place in
// line, its priority and its fair share, is always the store's
// (stepEnv.takeSlot). A limiter with a rate or a budget counts every slot
// taken, when it is taken, so it takes no grants: its every slot is one
// transaction.
type grants struct {
	e *Engine

	mu      sync.Mutex
	pools   map[grantKey]*grantPool
	waiting map[string]*atomic.Int64 // limiter -> this engine's attempts in its line
	refused map[string]uint64        // limiter -> attempts and queued starts it kept waiting
	lines   map[string]*localLine    // limiter -> its local line (limitline.go)
	closed  bool
	made    uint64 // pools made: each names its hold apart
	wg      sync.WaitGroup
	stop    chan struct{}
}

// grantTick is how often a grant's keeper renews it and gives back what
// was not used: how long another process's waiter may wait for slots a
// grant holds idle.
const grantTick = 200 * time.Millisecond

// grantRetry is how long an engine goes without asking a limiter that took
// no grant (a rate or a budget) for one again: its configuration may change.
const grantRetry = 5 * time.Second

type grantKey struct{ limiter, key string }

func newGrants(e *Engine) *grants {
	return &grants{e: e, pools: map[grantKey]*grantPool{}, waiting: map[string]*atomic.Int64{}, refused: map[string]uint64{}, stop: make(chan struct{})}
}

// refuse counts an attempt or a queued start limiter kept waiting.
func (g *grants) refuse(limiter string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.refused[limiter]; !ok && len(g.refused) >= maxRefusalSeries {
		limiter = "(other)" // a metric's series stay bounded
	}
	g.refused[limiter]++
}

// maxRefusalSeries bounds the limiters refusals are counted by name.
const maxRefusalSeries = 256

// refusals is a copy of the refusal counts.
func (g *grants) refusals() map[string]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]uint64, len(g.refused))
	for k, v := range g.refused {
		out[k] = v
	}
	return out
}

// waiters counts this engine's attempts waiting in limiter's line.
func (g *grants) waiters(limiter string) *atomic.Int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.waiting[limiter]
	if w == nil {
		w = new(atomic.Int64)
		g.waiting[limiter] = w
	}
	return w
}

// pool returns the pool of limiter's slots for key; nil once closed.
func (g *grants) pool(limiter, key string) *grantPool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	k := grantKey{limiter, key}
	p := g.pools[k]
	if p == nil {
		w := g.waiting[limiter]
		if w == nil {
			w = new(atomic.Int64)
			g.waiting[limiter] = w
		}
		// The holder is the pool's for every ask: a key is named by its
		// digest, so that any key fits a holder's length, and the pool by
		// its number, so that a pool made after an idle one was dropped
		// (an attempt may still hold the old one) has a hold of its own.
		sum := sha256.Sum256([]byte(key))
		g.made++
		p = &grantPool{g: g, key: grantKey{limiter, key}, limiter: limiter, waiting: w, kick: make(chan struct{}, 1),
			holder: "grant:" + g.e.cfg.WorkerID + ":" + hex.EncodeToString(sum[:8]) + ":" + strconv.FormatUint(g.made, 36)}
		g.pools[k] = p
	}
	return p
}

// kick makes limiter's pools give back their idle slots now: an attempt of
// this engine waits in its line.
func (g *grants) kick(limiter string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, p := range g.pools {
		if k.limiter == limiter {
			p.nudge()
		}
	}
}

// close stops the keepers, which give their grants back.
func (g *grants) close() {
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		close(g.stop)
	}
	g.mu.Unlock()
	g.wg.Wait()
}

// grantPool is this engine's grant of one limiter's slots for one key.
type grantPool struct {
	g               *grants
	key             grantKey
	limiter, holder string
	waiting         *atomic.Int64 // the limiter's waiters in this engine
	kick            chan struct{}

	// ask serializes the pool's requests to the store (a growth, a
	// renewal, a shrink), so that what one decides is what the next sees.
	ask sync.Mutex

	mu      sync.Mutex
	granted int       // the slots the store holds for this engine
	inUse   int       // of them, handed to attempts
	peak    int       // the most in use since the keeper's last tick
	others  int       // waiters in the store's line at its last answer
	off     time.Time // the limiter took no grant: not asked again before
	keeping bool      // the keeper runs
	// lease fences the attempts the grant's slots were handed to: lost if
	// the grant's hold runs out under them (its renewals late, or the
	// store's answer short of what is in use). A lost lease hands out
	// nothing more; the next grant the store makes starts a new one.
	lease *slotLease
}

func (p *grantPool) nudge() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// takeLocal hands out a granted slot if one is free and no one waits,
// with the channel that says its grant's hold was lost.
func (p *grantPool) takeLocal() (<-chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.handOut()
}

// handOut is takeLocal with p.mu held.
func (p *grantPool) handOut() (<-chan struct{}, bool) {
	if p.inUse < p.granted && p.others == 0 && p.waiting.Load() == 0 && p.lease != nil && !p.lease.isLost() {
		p.inUse++
		p.peak = max(p.peak, p.inUse)
		return p.lease.lost, true
	}
	return nil, false
}

// heard moves the grant's lease on the store's answer to an ask sent at
// sent, which holds count slots for it (p.mu held): a hold of fewer slots
// than are in use ran out under them, and its attempts must stop.
func (p *grantPool) heard(sent time.Time, count int) {
	ttl := p.g.e.cfg.LeaseTTL
	switch {
	case p.lease == nil || p.lease.isLost():
		p.lease = newSlotLease(sent, ttl)
	case count < p.inUse:
		p.lease.lose()
		p.lease = newSlotLease(sent, ttl)
	default:
		p.lease.renewed(sent)
	}
	if time.Until(sent.Add(ttl)) < ttl*2/3 {
		// The ask waited long for the limiter's row: its lease began
		// when it was sent. Renewed now, not at the keeper's tick.
		p.nudge()
	}
}

// take hands a slot to an attempt from the engine's grant, growing it if
// it must; false if the grant cannot (someone waits, no slot is free, the
// limiter takes no grants, the store failed): the attempt then asks the
// store alone, in line.
func (p *grantPool) take(ctx context.Context) (func(cost int64), <-chan struct{}, bool) {
	if lost, ok := p.takeLocal(); ok {
		return p.release, lost, true
	}
	p.mu.Lock()
	off := time.Now().Before(p.off)
	p.mu.Unlock()
	if off || p.waiting.Load() > 0 {
		return nil, nil, false
	}
	p.ask.Lock()
	defer p.ask.Unlock()
	if lost, ok := p.takeLocal(); ok { // grown by another attempt meanwhile
		return p.release, lost, true
	}
	p.mu.Lock()
	want := min(limit.MaxGrant, max(2*p.granted, p.inUse+1))
	inUse := p.inUse
	p.mu.Unlock()
	e := p.g.e
	sent := time.Now()
	d, err := e.store.AcquireSlot(ctx, &store.AcquireSlotParams{Limiter: p.limiter, Request: limit.Request{
		Holder: p.holder, Key: p.key.key, Lease: e.cfg.LeaseTTL, Grant: want, InUse: inUse}})
	if err != nil {
		return nil, nil, false // the attempt's own ask says what is wrong
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if d.Reason == limit.NoGrant {
		p.off = time.Now().Add(grantRetry)
		return nil, nil, false
	}
	p.granted, p.others = d.Count-d.Over, d.Waiting
	if d.Count > 0 {
		p.heard(sent, d.Count)
		if !p.keeping {
			p.keeping = true
			p.g.wg.Add(1)
			go p.keep()
		}
	}
	if lost, ok := p.handOut(); ok {
		return p.release, lost, true
	}
	return nil, nil, false
}

// release gives an attempt's slot back to the grant (a grant's limiter has
// no budget: the cost is nothing to it).
func (p *grantPool) release(int64) {
	p.mu.Lock()
	p.inUse--
	wanted := p.others > 0 || p.waiting.Load() > 0
	p.mu.Unlock()
	if wanted {
		p.nudge() // someone waits: the slot goes back to the line now
	}
}

// keep renews the grant every grantTick, shrunk to what was used since the
// last (to what is in use, while someone waits), and gives it back when
// none was used for a tick or the engine closes.
func (p *grantPool) keep() {
	defer p.g.wg.Done()
	e := p.g.e
	t := time.NewTicker(min(grantTick, e.cfg.LeaseTTL/3))
	defer t.Stop()
	watcher, watches := store.LimiterWatcherOf(e.store)
	for {
		// A waiter joined the limiter's line (in this process or
		// another): the grant hands out nothing more before it has asked
		// the store, and gives its idle slots back now rather than at its
		// next tick.
		var changed <-chan struct{}
		unwatch := func() {}
		if watches {
			changed, unwatch = watcher.WatchLimiterLine(p.limiter)
		}
		closing := false
		select {
		case <-t.C:
		case <-p.kick:
		case <-changed:
			p.mu.Lock()
			p.others = max(p.others, 1)
			idle := p.granted > p.inUse
			p.mu.Unlock()
			if !idle {
				// Nothing to give back now: the next release asks
				// (release nudges while others wait).
				unwatch()
				continue
			}
		case <-p.g.stop:
			closing = true
		}
		unwatch()
		if p.resize(closing) {
			return
		}
	}
}

// resize asks the store to hold what the grant needs now; true when the
// grant was given back and the keeper is done.
func (p *grantPool) resize(closing bool) bool {
	e := p.g.e
	p.ask.Lock()
	defer p.ask.Unlock()
	p.mu.Lock()
	want := p.peak
	if p.others > 0 || p.waiting.Load() > 0 {
		want = p.inUse
	}
	if closing {
		want = 0 // the engine's attempts have all ended
	}
	p.peak = p.inUse
	// Lowered before the store is asked: no attempt takes a slot the
	// store may no longer hold.
	p.granted = min(p.granted, want)
	if want == 0 {
		p.keeping = false
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if want == 0 {
		p.mu.Lock()
		if p.lease != nil {
			p.lease.stop()
			p.lease = nil
		}
		p.mu.Unlock()
		if _, err := e.store.ReleaseSlot(ctx, &store.ReleaseSlotParams{Limiter: p.limiter, Holder: p.holder}); err != nil {
			e.log.Warn("weir: giving a limiter's grant back failed; it comes back with its lease", "limiter", p.limiter, "err", err)
		}
		// An idle pool is dropped, so that an engine that served a
		// million keys does not keep a million pools.
		p.g.mu.Lock()
		if p.g.pools[p.key] == p {
			delete(p.g.pools, p.key)
		}
		p.g.mu.Unlock()
		return true
	}
	sent := time.Now()
	p.mu.Lock()
	inUse := p.inUse
	p.mu.Unlock()
	d, err := e.store.AcquireSlot(ctx, &store.AcquireSlotParams{Limiter: p.limiter, Request: limit.Request{
		Holder: p.holder, Key: p.key.key, Lease: e.cfg.LeaseTTL, Grant: max(want, inUse), InUse: inUse}})
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case errors.Is(err, store.ErrNotFound):
		p.granted = 0
	case err != nil:
		e.log.Warn("weir: renewing a limiter's grant failed", "limiter", p.limiter, "err", err)
	case d.Reason == limit.NoGrant:
		// Its configuration changed to a window: what is in use ends as
		// it is, and no more is handed out.
		p.granted, p.off = 0, time.Now().Add(grantRetry)
	default:
		// Less than asked only if the lease had run out and others took
		// the slots meanwhile: the attempts it was handed to stop (heard),
		// and no more is handed out until enough end.
		// What it keeps past a lowered bound (Over) is the attempts'
		// in use: none is handed out until that many have ended.
		p.granted, p.others = d.Count-d.Over, d.Waiting
		if d.Count > 0 {
			p.heard(sent, d.Count)
		} else if p.lease != nil {
			p.lease.lose()
		}
	}
	return false
}
