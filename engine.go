package weir

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// Config configures an Engine. The zero value is valid: every field has a
// default, applied by WithDefaults without changing the caller's struct.
type Config struct {
	// WorkerID names this engine in leases. Defaults to host-pid-random.
	WorkerID string
	// Version is the application version this engine runs (a build, a
	// release: "2026-12-04.1"). Every run it starts records it, and it
	// claims only the runs of its own version and of CompatibleVersions:
	// a run in flight finishes on code that can replay it, while workers of
	// the next version take the new runs. Move runs between versions
	// knowingly with Store.MigrateRuns (`weir runs migrate`), and change a
	// workflow for the runs of both with Patched. "" (the default): runs
	// record no version, and the engine claims every run.
	Version string
	// CompatibleVersions are the other versions whose runs this engine
	// claims (with Version set): versions whose logs its code replays.
	CompatibleVersions []string
	// Concurrency is how many runs this engine executes at once. Defaults to
	// 64. A run whose steps all wait in a limiter's line for a held slot
	// (WithLimiter) does not count (up to LineRuns of them): it executes
	// nothing, and a flood of one tenant's waiting runs must not keep
	// another tenant's run, or a higher priority's, from being claimed and
	// joining the line, where it goes ahead of them. A run handed its slot
	// counts again at once, even past Concurrency: the slot is held for it.
	Concurrency int
	// LineRuns bounds the runs this engine keeps, beyond Concurrency,
	// while their steps wait in a limiter's line for a held slot. Each is
	// a goroutine and its run's state, and its lease is renewed with the
	// others' every LeaseTTL/3, which is what a run costs the store while
	// it waits: 3 processes of Concurrency 128 and LineRuns 1,024 renewed
	// 10,000 leases a second with a 1 s lease, and their renewals fell
	// behind. Past it, a run whose step waits inline (Step) parks, lined:
	// it holds nothing, and this engine or another claims it again first
	// when one of these seats is free; one better in the limiter's order
	// (a higher priority, a key holding fewer seats) takes the seat of the
	// worst, which parks (lineseats.go). So claims never stop at a flood,
	// whatever its size. A run whose steps run on goroutines of their own
	// (StepAsync) parks lined too, once none of its steps runs and its
	// workflow goroutine waits for them: until then it keeps its worker.
	// Defaults to Concurrency; negative: none (every waiting run counts
	// against Concurrency, none parks lined).
	LineRuns int
	// LeaseTTL is how long a claimed run stays this engine's without a
	// heartbeat; heartbeats come every LeaseTTL/3. A dead worker's runs are
	// taken over this long after its last heartbeat. Defaults to 15s.
	LeaseTTL time.Duration
	// PollInterval is how often an idle engine looks for runnable runs (runs
	// started in this process wake it at once). Defaults to 200ms.
	PollInterval time.Duration
	// ParkAfter is the longest wait (a sleep, a retry backoff) held in
	// process; a longer one parks the run, freeing its goroutine and lease,
	// and any worker resumes it when due. Defaults to 2s; NoWait parks at
	// every wait.
	ParkAfter time.Duration
	// Retry is the retry policy of steps given none. Defaults to
	// DefaultRetryPolicy.
	Retry RetryPolicy
	// StepConcurrency is the most steps of one run that run an attempt at
	// once (Go); more wait for a slot. Defaults to 16.
	StepConcurrency int
	// StepOutcomeDelay is how long a completed step's outcome may wait in
	// memory to be written with the run's next record, so that consecutive
	// short steps and the run's end share one transaction (checkpoint.go):
	// a crash meanwhile runs the step again, as a crash just before its
	// outcome would. Defaults to 2ms; NoWait writes every outcome before
	// Step returns.
	StepOutcomeDelay time.Duration
	// Writer configures step stream writers.
	Writer WriterConfig
	// Logger receives the engine's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// TracerProvider receives the engine's OpenTelemetry spans: one per
	// execution of a run, one per step attempt (retries are siblings, each
	// with its error, its backoff and what its stream writes did). Defaults
	// to otel.GetTracerProvider(), which records nothing until a program
	// installs one (weircli does when OTEL_* variables configure an
	// exporter). A step's own spans and attributes (the GenAI conventions'
	// model and token usage) go on trace.SpanFromContext(stepContext).
	TracerProvider trace.TracerProvider
	// NoWorker makes this engine start and read runs but never execute them
	// (a client of a database other processes work on). Defaults to false.
	NoWorker bool
	// QueueConcurrency bounds how many runs of each queue it names
	// (StartOptions.Queue) this engine executes at once, within
	// Concurrency; the queue's own limiter bounds them across every
	// process. Defaults to none: a queue's runs take any free slot.
	QueueConcurrency map[string]int
	// Retention is how long a finished run (completed, failed or cancelled)
	// is kept, with its event log and streams, after it ends. A worker
	// engine deletes older ones in the background, a batch at a time (see
	// store.Store.PurgeRuns), without holding up writers. Defaults to 0:
	// finished runs are kept forever.
	Retention time.Duration
	// Limiters are the limiters this engine's steps and queues use
	// (WithLimiter, StartOptions.Queue), set in the store by Work before it
	// claims a run: created if missing, changed if their bounds differ,
	// their slots and lines kept. A limiter the store cannot take fails
	// Work, at deploy time, instead of failing a step for good when it
	// first names it. Processes that share a database should declare the
	// same bounds: the last to start sets them. Defaults to none (set
	// limiters with Engine.SetLimiter or `weir limiters set`).
	Limiters []limit.Config
}

// WriterConfig configures the batching of step stream writers.
type WriterConfig struct {
	// Linger is how long a writer holds a batch for more chunks before it
	// sends it. Defaults to 0: a batch goes as soon as the previous one is
	// acknowledged, and the chunks written meanwhile form the next one, so
	// batches grow with the write rate without delaying a lone chunk.
	Linger time.Duration
	// FirstLinger is how long a step's writer holds its first batch for
	// more chunks (or the step's return) before it sends it: the first
	// batch goes with the stream's creation and the attempt's start, in
	// one transaction where the store can (store.StepAppender), which
	// before took a transaction of their own ahead of it. Defaults to 1ms,
	// less than that transaction took; negative: none.
	FirstLinger time.Duration
	// MaxBatchChunks sends a batch once it has this many chunks. Defaults to
	// 1000.
	MaxBatchChunks int
	// MaxBatchBytes sends a batch once it has this many bytes. Defaults to
	// 1 MiB.
	MaxBatchBytes int
	// MaxBufferedBytes bounds the bytes a writer holds unacknowledged; Write
	// blocks beyond it. Defaults to 8 MiB.
	MaxBufferedBytes int
	// RetryFor is how long a writer retries a batch after store errors that
	// may be transient, resending the same (writer, attempt, seq): always
	// safe. Defaults to 30s.
	RetryFor time.Duration
}

// WithDefaults returns a copy of c with defaults applied.
func (c Config) WithDefaults() Config {
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.WorkerID == "" {
		h, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.WorkerID = fmt.Sprintf("%s-%d-%s", h, os.Getpid(), hex.EncodeToString(b))
	}
	if c.Concurrency == 0 {
		c.Concurrency = 64
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 15 * time.Second
	}
	if c.PollInterval == 0 {
		c.PollInterval = 200 * time.Millisecond
	}
	if c.ParkAfter == 0 {
		c.ParkAfter = 2 * time.Second
	}
	if c.StepConcurrency == 0 {
		c.StepConcurrency = 16
	}
	if c.LineRuns == 0 {
		c.LineRuns = c.Concurrency
	}
	if c.StepOutcomeDelay == 0 {
		c.StepOutcomeDelay = 2 * time.Millisecond
	}
	c.Retry = c.Retry.WithDefaults()
	w := &c.Writer
	if w.MaxBatchChunks == 0 {
		w.MaxBatchChunks = 1000
	}
	if w.FirstLinger == 0 {
		w.FirstLinger = time.Millisecond
	}
	if w.MaxBatchBytes == 0 {
		w.MaxBatchBytes = 1 << 20
	}
	if w.MaxBufferedBytes == 0 {
		w.MaxBufferedBytes = 8 << 20
	}
	if w.RetryFor == 0 {
		w.RetryFor = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c *Config) validate() error {
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("config: Concurrency %d, want >= 1", c.Concurrency)
	case c.StepConcurrency < 1:
		return fmt.Errorf("config: StepConcurrency %d, want >= 1", c.StepConcurrency)
	case c.LeaseTTL < 100*time.Millisecond:
		return fmt.Errorf("config: LeaseTTL %v, want >= 100ms", c.LeaseTTL)
	case c.StepOutcomeDelay < 0 && c.StepOutcomeDelay != NoWait:
		return fmt.Errorf("config: StepOutcomeDelay %v, want > 0 or NoWait", c.StepOutcomeDelay)
	case c.Retention < 0:
		return fmt.Errorf("config: Retention %v, want >= 0 (0: keep forever)", c.Retention)
	case c.PollInterval <= 0 || c.ParkAfter < 0 && c.ParkAfter != NoWait:
		return fmt.Errorf("config: PollInterval must be positive, ParkAfter positive or NoWait")
	case c.Writer.MaxBatchChunks < 1 || c.Writer.MaxBatchChunks > store.MaxAppendChunks:
		return fmt.Errorf("config: Writer.MaxBatchChunks %d, want 1..%d", c.Writer.MaxBatchChunks, store.MaxAppendChunks)
	case c.Writer.MaxBatchBytes < 1 || c.Writer.MaxBatchBytes > store.MaxAppendBytes:
		return fmt.Errorf("config: Writer.MaxBatchBytes %d, want 1..%d", c.Writer.MaxBatchBytes, store.MaxAppendBytes)
	case len(c.CompatibleVersions) > 0 && c.Version == "":
		return fmt.Errorf("config: CompatibleVersions need a Version")
	}
	seen := map[string]bool{}
	for i := range c.Limiters {
		l := &c.Limiters[i]
		if err := l.Check(); err != nil {
			return fmt.Errorf("config: Limiters[%d]: %w", i, err)
		}
		if seen[l.Name] {
			return fmt.Errorf("config: Limiters: limiter %q twice", l.Name)
		}
		seen[l.Name] = true
	}
	for _, v := range append([]string{c.Version}, c.CompatibleVersions...) {
		if len(v) > store.MaxVersionLen || !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl) {
			return fmt.Errorf("config: version %q: at most %d bytes of text", v, store.MaxVersionLen)
		}
	}
	return c.Retry.validate()
}

// Engine runs workflows on a store. Register workflows, then call Start to
// begin executing runs; any number of engines may share a store that allows
// it (PostgreSQL), each claiming runs with leases.
type Engine struct {
	store store.Full // store.Capable: the capabilities it lacks answer ErrUnsupported
	// appender opens a step's stream with its first batch, if the store
	// can (store.StepAppender); noAppender is set once it said it cannot.
	appender   store.StepAppender
	noAppender atomic.Bool
	cfg        Config
	log        *slog.Logger
	// tracer makes the engine's spans (Config.TracerProvider).
	tracer trace.Tracer

	mu        sync.Mutex
	workflows map[string]*registered
	started   bool
	closed    bool
	running   map[string]*execution // run id -> its execution here
	launched  map[string]int        // run id -> its executions launched here and not returned
	inflight  int                   // runs launched and not yet ended, but for those aside
	aside     int                   // runs launched whose steps all wait in a limiter's line (Config.LineRuns)
	seats     []*lineSeat           // theirs (lineseats.go)
	seatSeq   uint64
	// linedPending: lined runs claimed (ClaimRunsParams.Lined) that have
	// not reached their line yet: each will take a seat.
	linedPending int
	linedRuns    map[string]bool        // launched lined, not yet executing
	inQueue      map[string]int         // of them, those of each queue
	done         map[string]*ending     // run id -> its waiters here, told when this engine ends it
	events       map[string]*eventWaits // run id -> its GetEvent waiters here
	// claimBounded: the claim loop's last claim took as many runs as it
	// had free slots for (or had none): more may wait.
	claimBounded bool

	runCtx context.Context // what runs execute in, once started

	wake     chan struct{} // nudges the claim loop
	stop     context.CancelFunc
	loopWG   sync.WaitGroup
	runWG    sync.WaitGroup
	attempts sync.WaitGroup // step attempts' functions, abandoned ones included

	grants *grants // limiters' slots held in blocks (limitgrant.go)
	// leases renews the leases of the runs executing here at once, if the
	// store can (store.LeaseRenewer; leases.go); nil: each run its own.
	leases *leaseKeeper

	lingering      atomic.Int64  // abandoned attempts whose function has not returned
	abandonedTotal atomic.Uint64 // attempts abandoned (timed out, or their run interrupted)
}

// EngineStats are an engine's counters, for metrics.
type EngineStats struct {
	// Running is how many runs the engine executes now.
	Running int
	// LingeringAttempts is how many step attempts the engine abandoned
	// (timed out, or their run cancelled, past its deadline or lost) whose
	// function has not returned yet: each holds a goroutine, and whatever
	// the function holds. A step that ignores its context shows here.
	LingeringAttempts int64
	// AbandonedAttempts counts the attempts abandoned since the engine was
	// made.
	AbandonedAttempts uint64
	// LimiterWaits counts, by limiter, the step attempts of this engine
	// that a limiter did not let start at once (they waited in its line),
	// and the starts it made in a queue that did not admit them at once:
	// the limiter's refusals, as this process saw them.
	LimiterWaits map[string]uint64
	// LeaseRenewals are the lease keeper's counts, where the store renews
	// the leases of many runs at once (store.LeaseRenewer; zero otherwise).
	LeaseRenewals LeaseRenewalStats
}

// LeaseRenewalStats count what became of the rounds in which an engine
// renews the leases of the runs it executes (one store call a third of a
// lease). A lease lost to another worker is not counted here: that is the
// store's answer, not the keeper's lateness.
type LeaseRenewalStats struct {
	// Skipped counts leases a round did not renew because their run's
	// row was locked by a write in progress (PostgreSQL): each is renewed
	// at the next round. Thousands under a saturated limiter's flood are
	// normal; what matters is Lapsed.
	Skipped uint64
	// Failed counts rounds that failed or timed out (half a lease): the
	// store or its connection was slow or gone.
	Failed uint64
	// Lapsed counts leases that went a whole lease without a renewal: the
	// run was given up, and another worker may run its step again.
	Lapsed uint64
}

// Stats returns the engine's counters.
func (e *Engine) Stats() EngineStats {
	e.mu.Lock()
	running := len(e.running)
	e.mu.Unlock()
	st := EngineStats{Running: running, LingeringAttempts: e.lingering.Load(), AbandonedAttempts: e.abandonedTotal.Load(),
		LimiterWaits: e.grants.refusals()}
	if k := e.leases; k != nil {
		st.LeaseRenewals = LeaseRenewalStats{Skipped: k.skipped.Load(), Failed: k.failed.Load(), Lapsed: k.lapsed.Load()}
	}
	return st
}

// workflowFunc runs a registered workflow: decode input, call, encode output.
type workflowFunc func(ctx *wfContext, input []byte) ([]byte, error)

// registered is a workflow and its options.
type registered struct {
	fn       workflowFunc
	timeout  time.Duration // WithRunTimeout; 0: none
	limiters []string      // UsesLimiters
}

// New returns an engine on s. It executes nothing until Work.
func New(s store.Store, cfg *Config) (*Engine, error) {
	if s == nil {
		return nil, errors.New("weir: nil store")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c = c.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	e := &Engine{
		store:     store.Capable(s),
		cfg:       c,
		log:       c.Logger,
		tracer:    c.TracerProvider.Tracer("github.com/weirhq/weir"),
		workflows: make(map[string]*registered),
		running:   make(map[string]*execution),
		launched:  make(map[string]int),
		inQueue:   make(map[string]int),
		done:      make(map[string]*ending),
		wake:      make(chan struct{}, 1),
	}
	e.appender, _ = store.StepAppenderOf(e.store)
	if r, ok := store.LeaseRenewerOf(e.store); ok {
		e.leases = newLeaseKeeper(e, r)
	}
	e.grants = newGrants(e)
	return e, nil
}

// stepAppender returns the store's StepAppender, nil if it has none.
func (e *Engine) stepAppender() store.StepAppender {
	if e.appender == nil || e.noAppender.Load() {
		return nil
	}
	return e.appender
}

// Store returns the engine's store with every capability (store.Capable):
// those the backend lacks answer store.ErrUnsupported.
func (e *Engine) Store() store.Full { return e.store }

// Config returns the engine's configuration, defaults applied.
func (e *Engine) Config() Config { return e.cfg }

// Workflows returns the names of the registered workflows, sorted.
func (e *Engine) Workflows() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	names := make([]string, 0, len(e.workflows))
	for n := range e.workflows {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (e *Engine) register(name string, reg *registered) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.workflows[name]; dup {
		panic(fmt.Sprintf("weir: workflow %q registered twice on one engine: register each workflow once, "+
			"and get another handle to it with weir.WorkflowOf[In, Out](e, %[1]q)", name))
	}
	e.workflows[name] = reg
}

// Work begins claiming and executing runs of the registered workflows
// until Close. It returns at once. It returns ErrNoWorkflows when no
// workflow is registered (and Config.NoWorker is not set): such an engine
// would claim nothing, which is a mistake of the program.
func (e *Engine) Work(ctx context.Context) error {
	if !e.cfg.NoWorker {
		for i := range e.cfg.Limiters {
			c := e.cfg.Limiters[i]
			if err := e.ensureLimiter(ctx, &c); err != nil {
				return fmt.Errorf("weir: Config.Limiters: %w", err)
			}
		}
	}
	if !e.cfg.NoWorker {
		if err := e.checkUsedLimiters(ctx); err != nil {
			return err
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrEngineClosed
	}
	if e.started || e.cfg.NoWorker {
		return nil
	}
	if len(e.workflows) == 0 {
		return fmt.Errorf("%w, so this engine would claim no run: register workflows (weir.Register) before Work, "+
			"or set Config.NoWorker for an engine that only starts and reads runs", ErrNoWorkflows)
	}
	e.started = true
	ctx, e.stop = context.WithCancel(context.WithoutCancel(ctx))
	e.runCtx = ctx
	e.loopWG.Add(2)
	go e.claimLoop(ctx)
	go e.scheduleLoop(ctx)
	if e.cfg.Retention > 0 {
		e.loopWG.Add(1)
		go e.retentionLoop(ctx)
	}
	return nil
}

// Close stops claiming, interrupts the runs this engine executes (their
// leases are released so another engine resumes them at once) and waits for
// them to stop, and for the functions of their step attempts to return, or
// for ctx.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	stop := e.stop
	for _, x := range e.running {
		x.cancel(errEngineStopping)
	}
	e.mu.Unlock()
	if stop != nil {
		stop()
	}
	done := make(chan struct{})
	go func() { e.loopWG.Wait(); e.runWG.Wait(); e.attempts.Wait(); e.grants.close(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *Engine) nudge() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *Engine) claimLoop(ctx context.Context) {
	defer e.loopWG.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-e.wake:
		}
		e.mu.Lock()
		free := e.cfg.Concurrency - e.inflight
		room, full := e.queueRoom()
		// Seats free for lined runs (lineseats.go), less those claimed
		// that have not reached their line yet.
		seats := max(0, e.cfg.LineRuns-e.aside-e.linedPending)
		e.mu.Unlock()
		claimed, want := 0, min(free, 32)
		if free > 0 {
			// Queued runs first: an admission leases them here.
			runs, err := e.store.AdmitRuns(ctx, &store.AdmitRunsParams{Versions: e.versions(),
				Owner: e.cfg.WorkerID, Limit: want, LeaseTTL: e.cfg.LeaseTTL, Workflows: e.Workflows(), Room: room,
			})
			if err != nil && ctx.Err() == nil {
				e.log.Warn("weir: admit queued runs", "err", err)
			}
			for _, r := range runs {
				e.launch(ctx, r)
			}
			claimed = len(runs)
		}
		if claimed < want {
			runs, err := e.store.ClaimRuns(ctx, &store.ClaimRunsParams{Versions: e.versions(),
				Owner: e.cfg.WorkerID, Limit: want - claimed, LeaseTTL: e.cfg.LeaseTTL, Workflows: e.Workflows(), SkipQueues: full,
				Lined: seats,
			})
			if err != nil && ctx.Err() == nil {
				e.log.Warn("weir: claim runs", "err", err)
			}
			for _, r := range runs {
				// A lined run takes a seat when it reaches its line.
				e.launchClaimed(ctx, r, r.Lined)
			}
			claimed += len(runs)
		}
		e.mu.Lock()
		// The claim was bounded by the free slots: a run ending here
		// should look again at once (spawn), not wait for the poll.
		e.claimBounded = free <= 0 || claimed == want
		e.mu.Unlock()
		if claimed > 0 && claimed == want {
			// There may be more: look again at once.
			t.Reset(0)
			continue
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(e.cfg.PollInterval)
	}
}

// versions are the application versions whose runs this engine claims;
// nil (every run) without a Version.
func (e *Engine) versions() []string {
	if e.cfg.Version == "" {
		return nil
	}
	return append([]string{e.cfg.Version}, e.cfg.CompatibleVersions...)
}

// queueRoom is how many more runs of each queue of
// Config.QueueConcurrency this engine may execute, and the queues it has
// no room for. e.mu held.
func (e *Engine) queueRoom() (map[string]int, []string) {
	if len(e.cfg.QueueConcurrency) == 0 {
		return nil, nil
	}
	room := make(map[string]int, len(e.cfg.QueueConcurrency))
	var full []string
	for q, n := range e.cfg.QueueConcurrency {
		room[q] = max(0, n-e.inQueue[q])
		if room[q] == 0 {
			full = append(full, q)
		}
	}
	return room, full
}

// launch executes r, which a claim leased to this engine.
func (e *Engine) launch(ctx context.Context, r *store.Run) { e.launchClaimed(ctx, r, false) }

// launchClaimed is launch of a run that was lined (lineseats.go), if
// lined: it counts in e.linedPending until it reaches its line.
func (e *Engine) launchClaimed(ctx context.Context, r *store.Run, lined bool) {
	e.mu.Lock()
	if lined {
		if e.linedRuns == nil {
			e.linedRuns = map[string]bool{}
		}
		e.linedRuns[r.ID] = true
		e.linedPending++
	}
	e.inflight++
	if r.Queue != "" {
		e.inQueue[r.Queue]++
	}
	e.launched[r.ID]++
	e.mu.Unlock()
	e.spawn(ctx, r, false)
}

// reserve takes a slot for a run this engine starts, if it executes runs
// and has one free; it returns the context runs execute in.
func (e *Engine) reserve(queue string) (context.Context, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.started || e.closed || e.runCtx == nil || e.inflight >= e.cfg.Concurrency {
		return nil, false
	}
	if queue != "" {
		if n, ok := e.cfg.QueueConcurrency[queue]; ok && e.inQueue[queue] >= n {
			return nil, false
		}
		e.inQueue[queue]++
	}
	e.inflight++
	return e.runCtx, true
}

// runsVersion reports whether this engine claims runs of version v.
func (e *Engine) runsVersion(v string) bool {
	vs := e.versions()
	return vs == nil || slices.Contains(vs, v)
}

// unreserve gives back a slot reserve took and nothing used.
func (e *Engine) unreserve(queue string) {
	e.mu.Lock()
	e.inflight--
	if queue != "" {
		if e.inQueue[queue]--; e.inQueue[queue] <= 0 {
			delete(e.inQueue, queue)
		}
	}
	e.mu.Unlock()
	e.nudge()
}

// isLaunched reports whether run id's execution is under way here.
func (e *Engine) isLaunched(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.launched[id] > 0
}

// launchStarted executes r, leased to this engine as StartRun created it,
// in a slot already counted, unless an execution of r was launched here
// already (a StartRun of the same id at once); it reports whether it did.
// fresh: this call created r, which has no events yet.
func (e *Engine) launchStarted(ctx context.Context, r *store.Run, fresh bool) bool {
	e.mu.Lock()
	if e.launched[r.ID] > 0 {
		e.mu.Unlock()
		return false
	}
	e.launched[r.ID]++
	e.mu.Unlock()
	e.spawn(ctx, r, fresh)
	return true
}

// spawn runs r's execution on a goroutine of its own, in a slot and a
// launched count already taken; fresh: r has no events (skip reading them).
func (e *Engine) spawn(ctx context.Context, r *store.Run, fresh bool) {
	rctx, cancel := context.WithCancelCause(ctx)
	e.runWG.Add(1)
	// The slot is free once the run has ended (its end may tell a waiter
	// that starts the next run at once), or once the execution returns.
	free := sync.OnceFunc(func() {
		e.mu.Lock()
		e.inflight--
		if r.Queue != "" {
			if e.inQueue[r.Queue]--; e.inQueue[r.Queue] <= 0 {
				delete(e.inQueue, r.Queue)
			}
		}
		// A claim at once only if the last one may have left runs for
		// want of a slot (or a queue's room): otherwise the poll finds
		// what became runnable since, and a short run's end costs no
		// claim (two statements, one of them a transaction).
		look := e.claimBounded || r.Queue != ""
		e.mu.Unlock()
		if look {
			e.nudge()
		}
	})
	go func() {
		defer e.runWG.Done()
		defer func() {
			free()
			e.mu.Lock()
			if e.launched[r.ID]--; e.launched[r.ID] <= 0 {
				delete(e.launched, r.ID)
			}
			e.mu.Unlock()
			cancel(nil)
		}()
		e.execute(rctx, cancel, r, fresh, free)
	}()
}

var (
	errEngineStopping = errors.New("engine stopping")
	// errUnwinding stops a run's step goroutines when its workflow
	// goroutine left (a park, a non-determinism, a panic): their attempts
	// are abandoned, as a crash would.
	errUnwinding = errors.New("weir: run unwinding")
	// errStoreFailed stops a run after a step goroutine's store failure:
	// the run is left for a resume.
	errStoreFailed = errors.New("weir: store failed")
	errLeaseLost   = fmt.Errorf("weir: %w", store.ErrLeaseLost)
)

// Executing reports whether this engine executes run id now: the run
// exists and had not ended when its execution here began (it may be ending).
func (e *Engine) Executing(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.running[id]
	return ok
}

// interrupt cancels the execution of run id here, if any, with cause.
func (e *Engine) interrupt(id string, cause error) {
	e.mu.Lock()
	x := e.running[id]
	e.mu.Unlock()
	if x != nil {
		x.cancel(cause)
	}
}

func (e *Engine) notifyDone(id string, end *store.Run) {
	e.mu.Lock()
	d := e.done[id]
	delete(e.done, id)
	e.mu.Unlock()
	if d != nil {
		d.run = end
		close(d.ch)
	}
}

// ending is how the local waiters of a run learn that it ended here.
type ending struct {
	ch  chan struct{}
	run *store.Run // set before ch is closed: the run as it ended, its row as this engine last knew it
}

func (e *Engine) doneChan(id string) *ending {
	e.mu.Lock()
	defer e.mu.Unlock()
	d := e.done[id]
	if d == nil {
		d = &ending{ch: make(chan struct{})}
		e.done[id] = d
	}
	return d
}

func newRunID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "run_" + hex.EncodeToString(b)
}
