// Package delivery pushes the World's queue messages (store.WorldStore) to
// the apps they are for: each message is POSTed to its target's
// /.well-known/workflow/v1/flow or /step route, signed, under a lease the
// store holds and the deliverer renews while the app works, so that a
// deliverer that dies leaves the message to another (or to itself,
// restarted) within one lease.
//
// The contract with the app (docs/world.md, "Delivery"):
//
//   - POST {target}/.well-known/workflow/v1/flow for __[ns_]wkf_workflow_…
//     queues, …/step for __[ns_]wkf_step_…; the body is the payload as
//     queued.
//   - Headers x-vqs-queue-name, x-vqs-message-id (stable across
//     deliveries), x-vqs-message-attempt (1, 2, …), Weir-Signature
//     (see Sign), which the World package checks: unsigned or stale
//     deliveries get 401; and traceparent, the run's trace (tracing.go).
//   - A 2xx with {"timeoutSeconds": n} delivers the same message again in n
//     seconds (sleeps, step retries); any other 2xx is done. Anything else
//     (another status, a timeout, a refused connection) is retried after
//     Config.Backoff, and dead-lettered after Config.MaxAge of failures
//     (or Config.MaxFailures of them): kept, listed, counted, never
//     dropped.
//
// Delivery is at least once: the runtime's claims and conflicts absorb a
// duplicate.
//
// A run's workflow messages are delivered one at a time: each makes the app
// replay the run, and a replay that starts after a message was queued sees
// everything that message was sent to wake it for. So while a run's
// workflow delivery is in flight the run's other workflow messages wait,
// and once it succeeds the ones queued before it began are dropped
// (store.WorldStore.CoalesceMessages). A step that completes wakes its
// workflow; without this, a fan-out of N steps replays the run N times at
// once, each replay re-queueing every pending step.
package delivery

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/world"
)

// Config configures a Deliverer.
type Config struct {
	// Store holds the queue. Required.
	Store store.WorldStore
	// Secret signs deliveries (Sign); the app's World package has the
	// same. Required, at least 16 bytes.
	Secret []byte
	// Owner names this deliverer in its leases. Defaults to
	// host/pid/random.
	Owner string
	// Concurrency bounds deliveries in flight. Defaults to 100.
	Concurrency int
	// MaxPerTarget bounds the deliveries in flight to one target (an
	// app's base URL), so that a target that hangs holds this many of
	// Concurrency and no more: the others' deliveries go on. Defaults to
	// 32, or Concurrency if smaller.
	MaxPerTarget int
	// Limiter, if set, names a limiter of Limits (package limit) that
	// every delivery takes a slot of before it is sent and gives back
	// when the app has answered: on PostgreSQL one bound for every
	// deliverer on the database, where Concurrency and MaxPerTarget bound
	// this process alone. A delivery's key in the limiter is its target,
	// so the limiter's PerKey is a per-app bound and apps get a fair share
	// of it; a workflow message (a replay, short, and what moves a run
	// on) goes before a step's. A delivery waiting for its slot keeps its
	// message's lease (no other deliverer takes it) and its place in the
	// limiter's line; a limiter that does not exist holds deliveries back,
	// logged, until it is set. Empty: no limiter.
	Limiter string
	// Limits keeps Limiter. Required with Limiter.
	Limits store.Limits
	// LeaseTTL is how long a delivery's lease lasts without renewal; the
	// deliverer renews it every LeaseTTL/3 while the app works. A
	// deliverer that dies leaves its messages to another after at most
	// this long. Defaults to 30s.
	LeaseTTL time.Duration
	// Timeout bounds one delivery's HTTP exchange: a step may take this
	// long. Defaults to 15m.
	Timeout time.Duration
	// Backoff is the wait before each retry of a failed delivery; the
	// last is repeated. Defaults to 1s, 2s, 5s, 10s, 30s, 60s.
	Backoff []time.Duration
	// MaxAge dead-letters a message that has failed for this long.
	// Defaults to 24h.
	MaxAge time.Duration
	// MaxFailures, if > 0, dead-letters a message after this many failed
	// deliveries in a row. Defaults to 0: MaxAge alone.
	MaxFailures int
	// Client sends the deliveries. Defaults to a client that follows no
	// redirects (a 3xx is a failure) and gives up on a connection that
	// does not open in 10 s (a TLS handshake, in 10 s more).
	Client *http.Client
	// PollInterval is the longest the deliverer sleeps without looking at
	// the queue (wakes from enqueues make it look sooner). Defaults to 1s.
	PollInterval time.Duration
	// Observe, if set, is called after each delivery with its outcome:
	// "delivered", "rescheduled", "failed" or "dead".
	Observe func(outcome string, d time.Duration)
	// Logger receives the deliverer's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// TracerProvider makes the deliveries' spans (weir.world.deliver), one
	// trace per run, whose traceparent each delivery carries to the app.
	// Defaults to otel.GetTracerProvider(), which records nothing until a
	// provider is installed; the traceparent goes out either way.
	TracerProvider trace.TracerProvider
}

// DefaultBackoff is Config.Backoff's default.
var DefaultBackoff = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute}

// ErrConfig is a Config New refuses.
var ErrConfig = errors.New("delivery: bad config")

// WithDefaults returns a copy of c with its defaults set.
func (c *Config) WithDefaults() *Config {
	out := *c
	if out.Owner == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		out.Owner = fmt.Sprintf("%s/%d/%x", host, os.Getpid(), b)
	}
	if out.Concurrency == 0 {
		out.Concurrency = 100
	}
	if out.MaxPerTarget == 0 {
		out.MaxPerTarget = min(32, out.Concurrency)
	}
	if out.LeaseTTL == 0 {
		out.LeaseTTL = 30 * time.Second
	}
	if out.Timeout == 0 {
		out.Timeout = 15 * time.Minute
	}
	if len(out.Backoff) == 0 {
		out.Backoff = DefaultBackoff
	}
	if out.MaxAge == 0 {
		out.MaxAge = 24 * time.Hour
	}
	if out.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		tr.TLSHandshakeTimeout = 10 * time.Second
		tr.MaxIdleConnsPerHost = out.MaxPerTarget
		out.Client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if out.PollInterval == 0 {
		out.PollInterval = time.Second
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return &out
}

// Deliverer pushes queue messages to apps. Run it with Run.
type Deliverer struct {
	cfg    *Config
	tracer trace.Tracer
	sem    chan struct{}
	wg     sync.WaitGroup
	done   chan struct{} // a delivery ended: a slot is free

	mu      sync.Mutex
	busy    map[string]time.Time // run -> when its workflow delivery in flight began
	targets map[string]int       // target -> its deliveries in flight
	warned  map[string]time.Time // target -> when a failure to it was last logged at WARN
}

// warnTarget reports whether a failed delivery to target is logged at WARN:
// the first, and one a minute after.
func (d *Deliverer) warnTarget(target string, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if last, ok := d.warned[target]; ok && now.Sub(last) < time.Minute {
		return false
	}
	if len(d.warned) > 1024 {
		clear(d.warned)
	}
	d.warned[target] = now
	return true
}

// Hint says what a failed delivery's error (a message's LastError) most
// likely means for the app, and what to check: for logs, weir runs show and
// the UI.
func Hint(lastError string) string {
	e := strings.ToLower(lastError)
	switch {
	case e == "":
		return ""
	case strings.Contains(e, "http 401"):
		return "the app refused the delivery's signature: its WEIR_WORLD_SECRET must be weir's --world-secret (or $WEIR_WORLD_SECRET), and the clocks within 5 minutes of each other"
	case strings.Contains(e, "http 404"), strings.Contains(e, "http 405"):
		return "the app has no /.well-known/workflow/v1 route there: is WEIR_APP_URL the app's base URL, and was the app built with workflow (wf build, withWorkflow)?"
	case strings.Contains(e, "http 3"):
		return "the app answered with a redirect, which weir does not follow: WEIR_APP_URL must be the URL the routes answer at (scheme, host, port, no trailing path)"
	case strings.Contains(e, "http 5"):
		return "the app failed handling the delivery: its own log says why"
	case strings.Contains(e, "connection refused"):
		return "nothing listens at the app's URL: is the app running, and is WEIR_APP_URL its address?"
	case strings.Contains(e, "no such host"), strings.Contains(e, "server misbehaving"):
		return "the app's host name does not resolve: check WEIR_APP_URL"
	case strings.Contains(e, "timeout"), strings.Contains(e, "deadline exceeded"):
		return "the app did not answer in time: is it reachable from weir, or is a step slower than --world-timeout?"
	case strings.Contains(e, "not the world's json reply"):
		return "something else answers at the app's URL (a page, a proxy): WEIR_APP_URL must be the app's own base URL"
	case strings.Contains(e, "has no route"):
		return "the queue name is not the runtime's (__wkf_workflow_… or __wkf_step_…)"
	}
	return "check that the app is up at WEIR_APP_URL and shares weir's World secret"
}

// New returns a Deliverer.
func New(cfg *Config) (*Deliverer, error) {
	c := cfg.WithDefaults()
	switch {
	case c.Store == nil:
		return nil, fmt.Errorf("%w: no Store", ErrConfig)
	case len(c.Secret) < 16:
		return nil, fmt.Errorf("%w: a Secret of at least 16 bytes is required", ErrConfig)
	case c.Limiter != "" && c.Limits == nil:
		return nil, fmt.Errorf("%w: a Limiter needs Limits", ErrConfig)
	case c.Limiter != "" && store.CheckLimiterName(c.Limiter) != nil:
		return nil, fmt.Errorf("%w: Limiter: %w", ErrConfig, store.CheckLimiterName(c.Limiter))
	case c.Concurrency < 1 || c.MaxPerTarget < 1 || c.LeaseTTL < 3*time.Millisecond || c.Timeout <= 0 || c.MaxAge <= 0 || c.MaxFailures < 0:
		return nil, fmt.Errorf("%w: Concurrency and MaxPerTarget >= 1, LeaseTTL, Timeout and MaxAge > 0, MaxFailures >= 0", ErrConfig)
	}
	for _, b := range c.Backoff {
		if b <= 0 {
			return nil, fmt.Errorf("%w: a Backoff of %v", ErrConfig, b)
		}
	}
	tp := c.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Deliverer{cfg: c, tracer: tp.Tracer("github.com/weirhq/weir/delivery"), sem: make(chan struct{}, c.Concurrency), done: make(chan struct{}, 1), busy: map[string]time.Time{},
		targets: map[string]int{}, warned: map[string]time.Time{}}, nil
}

// Run delivers until ctx ends, then waits for the deliveries in flight:
// each is cut, and its message made due again at once, so that the next
// deliverer sends it without waiting for the lease.
func (d *Deliverer) Run(ctx context.Context) error {
	defer d.wg.Wait()
	c := d.cfg
	for ctx.Err() == nil {
		wake, stop := c.Store.WatchMessages(ctx)
		n, err := d.claim(ctx)
		if err != nil && ctx.Err() == nil {
			c.Logger.Warn("world delivery: claim failed", "err", err)
		}
		if n > 0 && len(d.sem) < cap(d.sem) {
			stop()
			continue // there may be more due
		}
		wait := c.PollInterval
		if len(d.sem) < cap(d.sem) {
			if due, err := c.Store.NextMessageDue(ctx); err == nil && !due.IsZero() {
				wait = min(wait, max(0, due.Sub(c.Now())))
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-d.done:
		case <-t.C:
		}
		t.Stop()
		stop()
	}
	return nil
}

// claim leases as many due messages as there are free slots and starts
// their deliveries.
func (d *Deliverer) claim(ctx context.Context) (int, error) {
	free := cap(d.sem) - len(d.sem)
	if free == 0 {
		return 0, nil
	}
	d.mu.Lock()
	skip := make([]string, 0, len(d.busy))
	for run := range d.busy {
		skip = append(skip, run)
	}
	var full []string
	for t, n := range d.targets {
		if n >= d.cfg.MaxPerTarget {
			full = append(full, t)
		}
	}
	d.mu.Unlock()
	ms, err := d.cfg.Store.ClaimMessages(ctx, &store.ClaimMessagesParams{Owner: d.cfg.Owner, Limit: free, Lease: d.cfg.LeaseTTL,
		SkipRuns: skip, SkipTargets: full, Now: d.cfg.Now()})
	if err != nil {
		return 0, err
	}
	// Extras first, so that a delivery that ends at once finds them back
	// in the queue for its coalescing.
	var start []*store.Message
	for _, m := range ms {
		if d.begin(m) {
			start = append(start, m)
			continue
		}
		// A second workflow message of a run this claim took one of, or
		// one more for a target that has MaxPerTarget in flight: back to
		// the queue, due when it was; claims skip it while those are
		// delivered (the first may make it redundant). Put back, not
		// answered: its failures stay, and so does its backoff.
		d.settle(&store.SettleParams{ID: m.ID, Lease: m.Lease, DeliverAt: m.DeliverAt, Back: true}, "", time.Now())
	}
	for _, m := range start {
		d.sem <- struct{}{}
		d.wg.Add(1)
		go func() {
			defer func() {
				<-d.sem
				d.wg.Done()
				select {
				case d.done <- struct{}{}:
				default:
				}
			}()
			d.deliver(ctx, m)
		}()
	}
	return len(ms), nil
}

// begin takes a slot of m's target and marks the run of a workflow
// message busy; false if the target has no slot or the run is busy.
func (d *Deliverer) begin(m *store.Message) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.targets[m.Target] >= d.cfg.MaxPerTarget {
		return false
	}
	if m.Kind == "workflow" && m.RunID != "" {
		if _, ok := d.busy[m.RunID]; ok {
			return false
		}
		d.busy[m.RunID] = d.cfg.Now()
	}
	d.targets[m.Target]++
	return true
}

// end frees m's slot of its target and the run of a workflow message;
// after a replay that succeeded, the run's workflow messages queued before
// it began are dropped.
func (d *Deliverer) end(m *store.Message, ok bool) {
	d.mu.Lock()
	if d.targets[m.Target]--; d.targets[m.Target] <= 0 {
		delete(d.targets, m.Target)
	}
	d.mu.Unlock()
	if m.Kind != "workflow" || m.RunID == "" {
		return
	}
	d.mu.Lock()
	began := d.busy[m.RunID]
	d.mu.Unlock()
	if ok {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		n, err := d.cfg.Store.CoalesceMessages(ctx, &store.CoalesceParams{RunID: m.RunID, Before: began})
		cancel()
		if err == nil && d.cfg.Observe != nil {
			for range n {
				d.cfg.Observe("coalesced", 0)
			}
		}
	}
	d.mu.Lock()
	delete(d.busy, m.RunID)
	d.mu.Unlock()
}

// route returns the app's route for a queue name.
func route(queue string) (string, bool) {
	kind, ok := world.QueueKind(queue)
	if !ok {
		return "", false
	}
	if kind == "workflow" {
		return "/.well-known/workflow/v1/flow", true
	}
	return "/.well-known/workflow/v1/step", true
}

// deliver takes m's slot of the limiter, sends m and settles it.
func (d *Deliverer) deliver(ctx context.Context, m *store.Message) {
	c := d.cfg
	start := time.Now()
	ok := false
	defer func() { d.end(m, ok) }()
	// Renew the lease (and the limiter's slot, once held) while the
	// delivery waits for its slot and while the app works; a lost lease
	// (the message was claimed again after a stall) cuts the delivery.
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	lost := make(chan struct{})
	var slot atomic.Pointer[string]
	go d.renew(lctx, m, lcancel, lost, &slot)
	release := d.takeSlot(lctx, m, &slot)
	if release == nil {
		lcancel()
		<-lost
		if ctx.Err() != nil {
			d.settle(&store.SettleParams{ID: m.ID, Lease: m.Lease, DeliverAt: c.Now()}, "", start)
		}
		return
	}
	dctx, cancel := context.WithTimeout(lctx, c.Timeout)
	dctx, sp := d.startSpan(dctx, m)
	status, timeout, err := d.post(dctx, m)
	endSpan(sp, status, err)
	cancel()
	lcancel()
	<-lost
	release()
	if err != nil && ctx.Err() != nil {
		// Cut by a shutdown: due again now rather than after the lease.
		d.settle(&store.SettleParams{ID: m.ID, Lease: m.Lease, DeliverAt: c.Now()}, "", start)
		return
	}
	now := c.Now()
	switch {
	case err == nil && status/100 == 2 && timeout >= 0:
		ok = true
		d.settle(&store.SettleParams{ID: m.ID, Lease: m.Lease, DeliverAt: now.Add(timeout)}, "rescheduled", start)
	case err == nil && status/100 == 2:
		ok = true
		d.settle(&store.SettleParams{ID: m.ID, Lease: m.Lease, Done: true}, "delivered", start)
	default:
		msg := fmt.Sprintf("HTTP %d", status)
		if err != nil {
			msg = err.Error()
		}
		first := m.FirstFailure
		if first.IsZero() {
			first = now
		}
		failures := m.Failures + 1
		p := &store.SettleParams{ID: m.ID, Lease: m.Lease, Failed: true, LastError: clip(msg, 1024), Now: now}
		if c.MaxFailures > 0 && failures >= int64(c.MaxFailures) || now.Sub(first) >= c.MaxAge {
			p.Failed, p.Dead = false, true
			c.Logger.Warn("world delivery: dead-lettered", "message", m.ID, "queue", m.QueueName, "run", m.RunID,
				"failures", failures, "err", msg)
			d.settle(p, "dead", start)
			return
		}
		p.DeliverAt = now.Add(c.Backoff[min(int(failures-1), len(c.Backoff)-1)])
		if d.warnTarget(m.Target, now) {
			// The first failure to an app (and one a minute after): what
			// to look at, for an operator whose runs stay pending.
			c.Logger.Warn("world delivery: the app did not take a delivery; retrying", "target", m.Target, "message", m.ID,
				"run", m.RunID, "err", msg, "hint", Hint(msg))
		} else {
			c.Logger.Info("world delivery: failed, will retry", "message", m.ID, "target", m.Target, "err", msg, "at", p.DeliverAt)
		}
		d.settle(p, "failed", start)
	}
}

// renew renews m's lease, and the limiter's slot once slot names its
// holder, every third of LeaseTTL until ctx ends; a lost lease cancels the
// delivery. It closes lost when it returns.
func (d *Deliverer) renew(ctx context.Context, m *store.Message, cancel func(), lost chan struct{}, slot *atomic.Pointer[string]) {
	defer close(lost)
	c := d.cfg
	t := time.NewTicker(c.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := c.Store.RenewMessage(ctx, &store.RenewMessageParams{ID: m.ID, Lease: m.Lease, Until: c.Now().Add(c.LeaseTTL)})
		if errors.Is(err, store.ErrLeaseLost) {
			c.Logger.Warn("world delivery: lease lost mid-delivery", "message", m.ID)
			cancel()
			return
		}
		if h := slot.Load(); h != nil {
			if _, err := c.Limits.RenewSlot(ctx, &store.RenewSlotParams{Limiter: c.Limiter, Holder: *h, Lease: c.LeaseTTL}); err != nil && ctx.Err() == nil {
				c.Logger.Warn("world delivery: renewing the limiter's slot failed", "limiter", c.Limiter, "message", m.ID, "err", err)
			}
		}
	}
}

// takeSlot waits until m's delivery holds a slot of Config.Limiter (at
// once without one) and returns what gives it back; nil if ctx ended
// first (a shutdown, or the message's lease lost).
func (d *Deliverer) takeSlot(ctx context.Context, m *store.Message, slot *atomic.Pointer[string]) func() {
	c := d.cfg
	if c.Limiter == "" {
		return func() {}
	}
	prio := 0
	if m.Kind == "workflow" {
		prio = 1
	}
	p := &store.AcquireSlotParams{Limiter: c.Limiter, Request: limit.Request{
		Holder: "world/" + m.ID + "/" + m.Lease, Key: TargetKey(m.Target), Priority: prio, Lease: c.LeaseTTL}}
	poll := 5 * time.Millisecond
	for {
		dec, err := c.Limits.AcquireSlot(ctx, p)
		wait := poll
		poll = min(2*poll, c.PollInterval)
		switch {
		case err == nil && dec.Granted:
			slot.Store(&p.Holder)
			return func() {
				rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				// A release lost here comes back with the slot's lease.
				if _, err := c.Limits.ReleaseSlot(rctx, &store.ReleaseSlotParams{Limiter: c.Limiter, Holder: p.Holder}); err != nil {
					c.Logger.Warn("world delivery: releasing the limiter's slot failed; it comes back with its lease", "limiter", c.Limiter, "message", m.ID, "err", err)
				}
			}
		case err == nil && (dec.Reason == limit.Rate || dec.Reason == limit.Budget):
			wait = max(wait, time.Until(dec.RetryAt))
		case err != nil && ctx.Err() == nil:
			// No such limiter (yet), or the store failed: the delivery
			// waits, its message kept; the operator is told.
			wait = c.PollInterval
			if d.warnTarget("limiter:"+c.Limiter, c.Now()) {
				hint := ""
				if errors.Is(err, store.ErrNotFound) {
					hint = "set it: weir limiters set " + c.Limiter + " --concurrency N"
				}
				c.Logger.Warn("world delivery: the limiter cannot be used; deliveries wait", "limiter", c.Limiter, "err", err, "hint", hint)
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// TargetKey is a delivery's key in Config.Limiter: its target, or a
// digest of one longer than a limiter's key may be.
func TargetKey(target string) string {
	if len(target) <= limit.MaxNameLen {
		return target
	}
	sum := sha256.Sum256([]byte(target))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (d *Deliverer) settle(p *store.SettleParams, outcome string, start time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.cfg.Store.SettleMessage(ctx, p); err != nil {
		// The lease ends and the message is delivered again: at least once.
		d.cfg.Logger.Warn("world delivery: settle failed", "message", p.ID, "err", err)
		return
	}
	if outcome != "" && d.cfg.Observe != nil {
		d.cfg.Observe(outcome, time.Since(start))
	}
}

// maxReply bounds the reply body read.
const maxReply = 64 << 10

// post sends m and returns the status and a {timeoutSeconds} reply's delay
// (-1 without one).
func (d *Deliverer) post(ctx context.Context, m *store.Message) (int, time.Duration, error) {
	path, ok := route(m.QueueName)
	if !ok {
		return 0, 0, fmt.Errorf("queue name %q has no route", m.QueueName)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(m.Target, "/")+path, bytes.NewReader(m.Payload))
	if err != nil {
		return 0, 0, err
	}
	attempt := strconv.FormatInt(m.Attempt, 10)
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("x-vqs-queue-name", m.QueueName)
	h.Set("x-vqs-message-id", m.ID)
	h.Set("x-vqs-message-attempt", attempt)
	h.Set(SignatureHeader, Sign(d.cfg.Secret, d.cfg.Now(), m.QueueName, m.ID, m.Attempt, m.Payload))
	inject(ctx, propagation.HeaderCarrier(h))
	resp, err := d.cfg.Client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, 0, nil
	}
	// The World's handler answers JSON, always: a 2xx of anything else (a
	// page of HTML, a proxy's login) is not the app's, and the message
	// would be lost if it counted as delivered.
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "application/json") {
		return resp.StatusCode, 0, fmt.Errorf("the target answered %d with %q, not the World's JSON reply: not the app's /.well-known/workflow/v1 route", resp.StatusCode, clip(ct, 64))
	}
	var v struct {
		TimeoutSeconds *float64 `json:"timeoutSeconds"`
	}
	if json.Unmarshal(body, &v) == nil && v.TimeoutSeconds != nil && *v.TimeoutSeconds >= 0 {
		return resp.StatusCode, time.Duration(min(*v.TimeoutSeconds, 10*365*24*3600) * float64(time.Second)), nil
	}
	return resp.StatusCode, -1, nil
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// SignatureHeader carries a delivery's signature.
const SignatureHeader = "Weir-Signature"

// MaxSkew is how old (or how far ahead) a signature's time may be before
// the app refuses the delivery.
const MaxSkew = 5 * time.Minute

// Sign returns the Weir-Signature value of a delivery: "t=<unix seconds>,
// v1=<hex HMAC-SHA256(secret, t.queue.id.attempt.body)>". The message id,
// queue name and attempt are signed with the body, so a captured delivery
// cannot be replayed under another name or id, and the time bounds a
// replay of the same one to MaxSkew.
func Sign(secret []byte, at time.Time, queue, id string, attempt int64, body []byte) string {
	t := strconv.FormatInt(at.Unix(), 10)
	return "t=" + t + ",v1=" + mac(secret, t, queue, id, attempt, body)
}

func mac(secret []byte, t, queue, id string, attempt int64, body []byte) string {
	h := hmac.New(sha256.New, secret)
	fmt.Fprintf(h, "%s.%s.%s.%d.", t, queue, id, attempt)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// TargetSignatureField names a queue request's target signature (POST
// /v1/world/queue's JSON field).
const TargetSignatureField = "targetSignature"

// SignTarget returns the signature of a delivery target (an app's base
// URL): "v1=<hex HMAC-SHA256(secret, "target." + target)>". An app that
// queues a message signs the URL weir is to deliver it to with the World
// secret it shares with weir, so that weir POSTs only to apps that hold
// the secret (or to origins its operator allows): a holder of weir's
// token alone cannot make it send signed requests anywhere.
func SignTarget(secret []byte, target string) string {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("target."))
	h.Write([]byte(target))
	return "v1=" + hex.EncodeToString(h.Sum(nil))
}

// VerifyTarget checks a target's signature (SignTarget).
func VerifyTarget(secret []byte, target, sig string) error {
	if sig == "" {
		return fmt.Errorf("%w: the target is not signed", ErrSignature)
	}
	if !hmac.Equal([]byte(sig), []byte(SignTarget(secret, target))) {
		return fmt.Errorf("%w: the target's signature does not match (is the app's WEIR_WORLD_SECRET weir's?)", ErrSignature)
	}
	return nil
}

// ErrSignature is a delivery whose signature is missing, malformed, wrong
// or stale.
var ErrSignature = errors.New("delivery: bad signature")

// Verify checks a delivery's signature at now: what the World package does
// (in TypeScript) before it runs a delivery.
func Verify(secret []byte, now time.Time, sig, queue, id string, attempt int64, body []byte) error {
	var t, v1 string
	for _, part := range strings.Split(sig, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			t = v
		case "v1":
			v1 = v
		}
	}
	sec, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v1 == "" {
		return fmt.Errorf("%w: want t=<unix>,v1=<hex>", ErrSignature)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > MaxSkew || d < -MaxSkew {
		return fmt.Errorf("%w: signed %v ago, the limit is %v", ErrSignature, d.Round(time.Second), MaxSkew)
	}
	if !hmac.Equal([]byte(v1), []byte(mac(secret, t, queue, id, attempt, body))) {
		return fmt.Errorf("%w: the signature does not match", ErrSignature)
	}
	return nil
}
