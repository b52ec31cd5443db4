// Package torture is weir's fault-injection harness: it generates randomized
// trials from a seed, runs them in real worker processes that it kills,
// pauses and freezes at points chosen from the seed, and checks every
// invariant of docs/semantics.md on what the store holds afterwards.
//
// A trial is a pure function of its seed: the workflows, the bytes every
// attempt of every step writes, and the faults (kind and the progress event
// after which each strikes). Timing inside the processes is not
// deterministic, so a replayed seed repeats the same schedule, not the same
// interleaving to the microsecond.
package torture

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// FaultKind names a kind of fault.
type FaultKind string

// The faults the harness injects.
const (
	// FaultKill SIGKILLs a worker process after the k-th progress event.
	FaultKill FaultKind = "sigkill"
	// FaultCommitCrash SIGKILLs a worker a seeded number of microseconds after
	// a progress event, while it streams: most land inside a store commit.
	FaultCommitCrash FaultKind = "commit-crash"
	// FaultStop SIGSTOPs a worker process past its lease, then SIGCONTs it: a
	// zombie. With SQLite no other process can open the file meanwhile, so the
	// zombie's rival is the same process's claim loop once it resumes; with
	// PostgreSQL the other worker processes take its runs over.
	FaultStop FaultKind = "sigstop"
	// FaultFreeze freezes one engine of a two-engine worker process (every
	// store call it makes blocks; its step code runs on) past its lease: the
	// other engine takes the run over and starts a new attempt, then the
	// frozen one resumes as a zombie. It is how a zombie gets a live rival on
	// one SQLite file.
	FaultFreeze FaultKind = "freeze"
	// FaultPGRestart restarts the PostgreSQL cluster under the workers.
	FaultPGRestart FaultKind = "pg-restart"
	// FaultServerKill SIGKILLs a worker process that serves the HTTP API
	// the trial's HTTP runs are started through.
	FaultServerKill FaultKind = "server-kill"
	// FaultProxyCut is a connection the harness's TCP proxy cut after the
	// server replied to POST /v1/runs; the client resends. Counted, not
	// scheduled: each HTTP trial cuts its first 0-3 connections.
	FaultProxyCut FaultKind = "proxy-cut"
	// FaultStreamCut: the proxy in front of the HTTP stream writers cuts
	// Cuts connections, from the Request-th stream request on, after the
	// server replied (the append committed, the writer never heard); the
	// writer resends.
	FaultStreamCut FaultKind = "stream-cut"
	// FaultStreamKill SIGKILLs a process serving /v1/stream/ after the
	// After-th progress event, once an HTTP stream writer reports progress
	// (mid-stream); another starts on the same store.
	FaultStreamKill FaultKind = "stream-kill"
	// FaultChildKill: a worker process kills itself (SIGKILL) right after
	// the Advance that ended a child run committed, before anything else it
	// would do for that end (telling the parent). The first After worker
	// processes of the trial each strike once; not scheduled on progress.
	FaultChildKill FaultKind = "child-kill"
)

// AllFaults lists every fault kind, in report order.
var AllFaults = []FaultKind{FaultKill, FaultCommitCrash, FaultStop, FaultFreeze, FaultPGRestart, FaultServerKill, FaultProxyCut, FaultStreamCut, FaultStreamKill, FaultChildKill}

// Trial is everything one trial does, derived from its seed.
type Trial struct {
	Seed      uint64
	Prefix    string // run ids and standalone stream paths start with it
	Runs      []RunSpec
	Producers []ProducerSpec
	Faults    []Fault
	Writer    WriterSpec
	Engines   int // engines per worker process
	Workers   int // worker processes at once (1 on SQLite)
	// HTTPCuts is how many connections the proxy cuts after the server
	// replied, when some runs start over HTTP.
	HTTPCuts int
	// HTTPStreams are standalone streams written over HTTP, through a
	// cutting proxy, by external writers (httpstream.go).
	HTTPStreams []HTTPStreamSpec
	// Queue is the concurrency of the trial's queue (QueueName): its
	// runs with Queued wait in it; 0: no queue.
	Queue int `json:",omitempty"`
	// Limiter is the concurrency of the trial's step limiter
	// (LimiterName): its items with Limited take a slot of it for each
	// attempt; 0: no limiter.
	Limiter int `json:",omitempty"`
	// Forks are forks the workers make once every run ended, and run (and
	// resume, if they fail) under the trial's faults (forks.go).
	Forks []ForkSpec `json:",omitempty"`
	// LineRuns and Concurrency, if not 0, are the workers' engines'
	// Config.LineRuns and Config.Concurrency (0: the engine's defaults).
	// Small, in some limiter trials, with more limited runs than the
	// engines have seats for: their runs park lined, are claimed lined,
	// and better waiters evict worse ones (lineseats.go).
	LineRuns    int `json:",omitempty"`
	Concurrency int `json:",omitempty"`
	// LimiterChanges are PUTs of the trial's limiter (Store.SetLimiter)
	// while its runs run, in order, each once the workers reported After
	// limited attempts in all (run.go sends it to a worker, which makes
	// it). None lowers the concurrency: the checker's bound (Limiter)
	// holds whatever is in force.
	LimiterChanges []LimiterChange `json:",omitempty"`

	// limited is what the workers reported of the limited attempts'
	// spans (their own clocks around the step's code), for the checker.
	limited []attemptSpan
	// started are the lease epochs of the executions whose start of an
	// attempt the workers saw the store take (S lines): whose run of it
	// the log holds. A start whose record's answer was lost (a kill, a
	// cut) is not here.
	started map[attemptKey][]int64
	// lined counts what the workers reported of lined parking and of the
	// limiter changes they made, for the report.
	lined linedCounts
	// http is what the HTTP stream writers were acknowledged, for the
	// checker (not part of the schedule).
	http *httpRun
	// workersLost is how many faults struck that can take a worker away
	// mid-step (a kill, a stop, a freeze, a database restart): then an
	// attempt may end without an outcome, for the checker.
	workersLost int
}

// HasHTTP reports whether the trial talks HTTP to its worker processes:
// some run starts over HTTP, or HTTP writers write streams.
func (t *Trial) HasHTTP() bool {
	if len(t.HTTPStreams) > 0 {
		return true
	}
	return t.hasHTTPRuns()
}

func (t *Trial) hasHTTPRuns() bool {
	for _, r := range t.Runs {
		if r.Start != StartDirect {
			return true
		}
	}
	return false
}

// WriterSpec is the step writers' batching, so batches page differently.
type WriterSpec struct {
	MaxBatchChunks int
	MaxBatchBytes  int
	LingerMicros   int
}

// Fault is one fault of a trial's schedule.
type Fault struct {
	Kind FaultKind
	// After is the number of progress events (acknowledged batches, failed
	// attempts, producer appends) the target worker reports before it strikes.
	After int
	// DelayMicros is waited after that event (commit-crash).
	DelayMicros int
	// HoldMillis is how long a stop or freeze lasts.
	HoldMillis int
	// Request and Cuts: a stream-cut cuts Cuts connections from the
	// Request-th stream request on (After plays no part).
	Request int `json:",omitempty"`
	Cuts    int `json:",omitempty"`
}

// RunSpec is one run: its workflow executes Items in order.
type RunSpec struct {
	ID    string
	Seed  uint64
	Start string // StartDirect, StartHTTPID or StartHTTPKey
	// Workflow is the workflow the run executes: WorkflowName (empty),
	// WorkflowDeadline or WorkflowChild.
	Workflow string `json:",omitempty"`
	// Prefix is its trial's (Trial.Prefix), for its hooks' tokens.
	Prefix string `json:",omitempty"`
	Items  []Item
	// Queued: started in its trial's queue (Trial.QueueName), so it waits
	// for one of the queue's slots before it runs.
	Queued bool `json:",omitempty"`
	// ContinueOnFail: the workflow carries on after a step fails for good (the
	// run completes); otherwise it returns the error (the run fails).
	ContinueOnFail bool
}

// Item kinds.
const (
	ItemStep    = "step"
	ItemWFWrite = "wfwrite"
	ItemSleep   = "sleep"
	// ItemHook waits for Payloads payloads delivered to the hook HookToken
	// (by every worker process, each payload k with the key "k<k>"), and
	// writes each to the workflow stream HookStream as it takes it. Takers
	// is the program that takes them (several takers at once, Select with
	// a timer, Each); with CloseEarly a step first waits until every
	// payload is in, then the hook is closed and its payloads taken after.
	ItemHook = "hook"
	// ItemCancel is a step that writes a chunk, asks for its own run to be
	// cancelled, then hangs deaf to its context: the run must end
	// cancelled within a bound all the same.
	ItemCancel = "cancel"
	// ItemHang is a step that writes a chunk and hangs deaf to its context
	// (the last item of a WorkflowDeadline run): the run's deadline must
	// end it within a bound.
	ItemHang = "hang"
	// ItemChild starts the child run Child (WorkflowChild, its id given),
	// waits for its end and writes "child <id> <outcome>" to HookStream.
	ItemChild = "child"
	// ItemRecv takes Payloads messages sent to the run on Topic (by every
	// worker process, message k with the key "<topic>/m<k>", after k-1 is
	// in the log; Extra more follow, which the run leaves), with its
	// Takers program (TakeReceive, TakeAll2, TakePending, TakeSelect), and
	// writes "<topic> <k>" to HookStream as it takes each.
	ItemRecv = "recv"
)

// The workflows a trial's runs execute.
const (
	// WorkflowDeadline is the trial workflow with a run deadline of
	// DeadlineMillis (WithRunTimeout).
	WorkflowDeadline = "torture-deadline"
	// WorkflowChild is the trial workflow, for child runs.
	WorkflowChild = "torture-child"
	// DeadlineMillis is WorkflowDeadline's run timeout.
	DeadlineMillis = 1500
	// HangMillis is how long ItemCancel and ItemHang steps ignore their
	// context: far past any bound the checker allows.
	HangMillis = 40_000
)

// The taker kinds of an ItemHook's Takers program; each takes the number
// of payloads it names (a select none if its timer wins).
const (
	TakeReceive = "receive" // Receive: 1
	TakeAll2    = "all2"    // All(Next(), Next()): 2
	TakePending = "pending" // f := Next(); Receive(); f.Get(): 2, Receive's first
	TakeSelect  = "select"  // Select(Next(), NewTimer(SelectMillis)): 1 or 0
	TakeEach    = "each"    // Each, broken after EachTakes: EachTakes
)

// HookStream is the stream the trial workflow writes hook payloads to.
const HookStream = "hooks"

// HookToken is the token of run rs's hook at op: from its seed and its
// trial's prefix, which (unlike its id, for runs started with an
// Idempotency-Key) the workflow, the deliverers and the checker all know.
// The prefix keeps a trial off the tokens of an earlier one with the same
// seed on the same database (a deliverer would find that one's hook gone,
// and stop).
func HookToken(rs *RunSpec, op int64) string {
	return fmt.Sprintf("h%016x-%s-%d", rs.Seed, rs.Prefix, op)
}

// Item is one thing a workflow does.
type Item struct {
	Kind string
	// Op is the item's durable operation position (steps and sleeps), from 1;
	// 0 for workflow writes.
	Op   int64
	Name string // step name

	// Step.
	Outputs     []Output
	Nondet      bool // each attempt writes other bytes; even attempts fewer chunks
	FailUpTo    int  // attempts 1..FailUpTo fail, after writing FailAfter chunks per stream
	FailAfter   int
	Final       bool // fails on every attempt; from FailUpTo+1 on with a non-retryable error
	MaxAttempts int
	SleepMicros int // between chunks
	FlushEvery  int // flush (and report progress) every this many chunks

	// Workflow write and step output.
	Stream string
	Count  int
	MinLen int
	MaxLen int

	// Sleep.
	SleepMillis int

	// Group, if not 0, makes the consecutive steps with the same Group run
	// at once (weir.StepAsync, then weir.All).
	Group int `json:",omitempty"`
	// TimeoutMillis, if not 0, is the step's start-to-close timeout;
	// attempts 1..HangUpTo outlive it (they write, then hang, ignoring
	// their context) and are retried.
	TimeoutMillis int `json:",omitempty"`
	HangUpTo      int `json:",omitempty"`

	// Hook: how many payloads, the takers and whether the hook is closed
	// before they take.
	Payloads     int      `json:",omitempty"`
	Takers       []string `json:",omitempty"`
	CloseEarly   bool     `json:",omitempty"`
	SelectMillis int      `json:",omitempty"` // a select taker's timer
	EachTakes    int      `json:",omitempty"`

	// Child: the child run.
	Child *RunSpec `json:",omitempty"`

	// Recv: the topic, and the messages sent past Payloads (left).
	Topic string `json:",omitempty"`
	Extra int    `json:",omitempty"`

	// Limited: each attempt of the step takes a slot of its trial's
	// limiter (Trial.LimiterName) first, with LimitKey and LimitPriority
	// (weir.LimitOptions), and charges it the attempt's number.
	Limited bool `json:",omitempty"`
	// LimitKey is a limited step's tenant, shared by several runs, so
	// that keys hold different numbers of seats; LimitPriority its
	// priority in the line.
	LimitKey      string `json:",omitempty"`
	LimitPriority int    `json:",omitempty"`
}

// opSpan is how many durable operations item it takes: a step, sleep or
// child one; a hook one, plus one for CloseEarly's step and two (a timer
// and the choice) for each select taker; a workflow write none.
func (it *Item) opSpan() int64 {
	switch it.Kind {
	case ItemWFWrite:
		return 0
	case ItemHook:
		n := int64(1)
		if it.CloseEarly {
			n++
		}
		for _, k := range it.Takers {
			if k == TakeSelect {
				n += 2
			}
		}
		return n
	case ItemRecv:
		n := int64(0) // a Recv takes no op; a select a timer and its choice
		for _, k := range it.Takers {
			if k == TakeSelect {
				n += 2
			}
		}
		return n
	}
	return 1
}

// failsForGood reports whether step it fails on every attempt: planned
// (Final), or each allowed attempt hangs past its timeout.
func (it *Item) failsForGood() bool {
	return it.Final || it.HangUpTo > 0 && it.HangUpTo >= it.MaxAttempts
}

// failsAt reports whether attempt a of step it cannot succeed.
func (it *Item) failsAt(a int64) bool {
	return it.Final || a <= int64(it.FailUpTo) || a <= int64(it.HangUpTo)
}

// Output is what a step writes to one stream.
type Output struct {
	Stream string
	Count  int
	MinLen int
	MaxLen int
}

// ProducerSpec is an external producer: Writers writers each append Count
// chunks at attempt 0 to one standalone stream, concurrently. Every worker
// process resends each writer's chunks from seq 0 with its own paging: all
// but the new ones must be acknowledged as retransmits.
type ProducerSpec struct {
	Path    string
	Writers int
	Count   int
	MinLen  int
	MaxLen  int
	Seed    uint64
}

// GenOptions shape generated trials.
type GenOptions struct {
	Faults   []FaultKind // kinds allowed; empty: none
	Postgres bool
	// Scale multiplies run and chunk counts (1 = default).
	Scale float64
	// HTTP starts some runs through the HTTP API (POST /v1/runs, with and
	// without Idempotency-Key) behind a proxy that cuts replies.
	HTTP bool
	// Agents adds the agent shapes (agent.go): hooks with several takers
	// and closed with payloads pending, cancels and run deadlines over
	// steps deaf to their context, final attempts that time out after
	// writing, child runs whose worker dies after their end.
	Agents bool
}

// Generate derives trial seed's schedule. Run ids and stream paths start
// with prefix (empty: "t<seed in hex>"), so trials can share a database.
func Generate(seed uint64, prefix string, o GenOptions) *Trial {
	r := rand.New(rand.NewPCG(seed, 0x7e1a_70_7e))
	scale := o.Scale
	if scale <= 0 {
		scale = 1
	}
	if prefix == "" {
		prefix = fmt.Sprintf("t%x", seed)
	}
	t := &Trial{Seed: seed, Prefix: prefix, Engines: 2, Workers: 1}
	if o.Postgres {
		t.Workers = 2
		t.Engines = 1 + r.IntN(2)
	}
	t.Writer = WriterSpec{MaxBatchChunks: pick(r, 1, 4, 17, 64, 1000), MaxBatchBytes: pick(r, 1024, 64<<10, 256<<10, 1<<20), LingerMicros: r.IntN(3000)}
	nRuns := 1 + int(float64(r.IntN(4))*scale)
	for i := range nRuns {
		t.Runs = append(t.Runs, genRun(r, fmt.Sprintf("%s-r%d", t.Prefix, i), scale))
	}
	if o.HTTP && r.IntN(2) == 0 {
		for i := range t.Runs {
			t.Runs[i].Start = []string{StartDirect, StartHTTPID, StartHTTPKey}[r.IntN(3)]
		}
		t.HTTPCuts = r.IntN(4)
	}
	if r.IntN(2) == 0 {
		p := ProducerSpec{Path: fmt.Sprintf("torture/%s/p", t.Prefix), Writers: 1 + r.IntN(4), Count: 1 + int(float64(r.IntN(150))*scale), Seed: r.Uint64()}
		p.MinLen, p.MaxLen = sizes(r)
		t.Producers = append(t.Producers, p)
	}
	if len(o.Faults) > 0 {
		n := r.IntN(4) // 0..3 faults
		after := 0
		for range n {
			f := Fault{Kind: o.Faults[r.IntN(len(o.Faults))]}
			if f.Kind == FaultProxyCut || f.Kind == FaultChildKill {
				f.Kind = FaultKill // not struck at progress events
			}
			after += 1 + r.IntN(8)
			f.After = after
			switch f.Kind {
			case FaultCommitCrash:
				f.DelayMicros = r.IntN(4000)
			case FaultStop, FaultFreeze:
				f.HoldMillis = leaseMillis*3/2 + r.IntN(leaseMillis)
			case FaultStreamCut:
				f.Request = 1 + r.IntN(24)
				f.Cuts = 1 + r.IntN(4)
			}
			t.Faults = append(t.Faults, f)
		}
	}
	// HTTP stream writers: in half the trials, and in every trial whose
	// schedule has a stream fault.
	streamFault := false
	for _, f := range t.Faults {
		streamFault = streamFault || f.Kind == FaultStreamCut || f.Kind == FaultStreamKill
	}
	if o.Agents {
		addAgentShapes(t, seed, o)
		addQueue(t, seed)
		addLimiter(t, seed)
	}
	addForks(t, seed)
	if o.Agents {
		// After the forks: the fork points drawn stay what they were.
		addLines(t, seed)
	}
	if o.HTTP && (streamFault || r.IntN(2) == 0) {
		for i := range 1 + r.IntN(2) {
			t.HTTPStreams = append(t.HTTPStreams, genHTTPStream(r, fmt.Sprintf("torture-%s-%d", t.Prefix, i), scale))
		}
	} else {
		for i := range t.Faults {
			if k := t.Faults[i].Kind; k == FaultStreamCut || k == FaultStreamKill {
				t.Faults[i] = Fault{Kind: FaultKill, After: t.Faults[i].After}
			}
		}
	}
	for i := range t.Runs {
		t.Runs[i].Prefix = t.Prefix
		for j := range t.Runs[i].Items {
			if c := t.Runs[i].Items[j].Child; c != nil {
				c.Prefix = t.Prefix
			}
		}
	}
	return t
}

// leaseMillis is the workers' lease; zombies are held past it.
const leaseMillis = 800

func pick(r *rand.Rand, vs ...int) int { return vs[r.IntN(len(vs))] }

// sizes picks a chunk size range: tiny, mixed (1 B .. 64 KiB) or large.
func sizes(r *rand.Rand) (int, int) {
	switch r.IntN(4) {
	case 0:
		return 1, 1
	case 1:
		return 1, 64
	case 2:
		return 1, 64 << 10
	}
	return 32 << 10, 64 << 10
}

func genRun(r *rand.Rand, id string, scale float64) RunSpec {
	rs := RunSpec{ID: id, Seed: r.Uint64(), ContinueOnFail: r.IntN(2) == 0}
	streams := []string{"s0", "s1", "s2"}[:1+r.IntN(3)]
	nSteps := 1 + r.IntN(20)
	var op int64
	group, groupLeft := 0, 0
	for i := range nSteps {
		if groupLeft == 0 && r.IntN(5) == 0 {
			group, groupLeft = group+1, 2+r.IntN(3) // the next steps run at once
		}
		inGroup := groupLeft > 0
		if !inGroup && r.IntN(8) == 0 {
			op++
			rs.Items = append(rs.Items, Item{Kind: ItemHook, Op: op, Payloads: 1 + r.IntN(3)})
		}
		if !inGroup && r.IntN(4) == 0 {
			it := Item{Kind: ItemWFWrite, Stream: streams[r.IntN(len(streams))], Count: 1 + r.IntN(4)}
			it.MinLen, it.MaxLen = 1, 64
			rs.Items = append(rs.Items, it)
		}
		if !inGroup && r.IntN(10) == 0 {
			op++
			rs.Items = append(rs.Items, Item{Kind: ItemSleep, Op: op, SleepMillis: r.IntN(250)})
		}
		op++
		it := Item{Kind: ItemStep, Op: op, Name: fmt.Sprintf("step%d", i), SleepMicros: r.IntN(1500), FlushEvery: 1 + r.IntN(20)}
		nOut := r.IntN(3) // 0..2 streams
		if r.IntN(5) == 0 {
			nOut = 0
		}
		for _, j := range r.Perm(len(streams))[:min(nOut, len(streams))] {
			o := Output{Stream: streams[j]}
			o.MinLen, o.MaxLen = sizes(r)
			maxCount := 200
			if o.MinLen > 1024 {
				maxCount = 12
			} else if o.MaxLen > 1024 {
				maxCount = 30
			}
			o.Count = 1 + int(float64(r.IntN(maxCount))*scale)
			it.Outputs = append(it.Outputs, o)
		}
		it.Nondet = r.IntN(3) == 0
		if r.IntN(3) == 0 {
			it.FailUpTo = 1 + r.IntN(2)
			it.FailAfter = r.IntN(40)
		}
		if r.IntN(8) == 0 {
			// A timeout well above what the step takes, so only the
			// planned hang times out.
			chunks := 0
			for _, o := range it.Outputs {
				chunks += o.Count
			}
			it.TimeoutMillis = 400 + 4*chunks*(it.SleepMicros+300)/1000
			it.HangUpTo = 1
		}
		it.MaxAttempts = max(it.FailUpTo, it.HangUpTo) + 1 + 8
		if r.IntN(12) == 0 {
			it.Final = true
			if r.IntN(2) == 0 {
				it.MaxAttempts = max(it.FailUpTo, it.HangUpTo) + 1 // exhausted retries
			}
		}
		if groupLeft > 0 {
			it.Group = group
			groupLeft--
		}
		rs.Items = append(rs.Items, it)
	}
	if r.IntN(3) == 0 {
		it := Item{Kind: ItemWFWrite, Stream: streams[0], Count: 1 + r.IntN(3), MinLen: 1, MaxLen: 32}
		rs.Items = append(rs.Items, it)
	}
	return rs
}

// CountOn returns how many chunks step it writes to output o on attempt a.
// A nondeterministic step writes fewer on even attempts (the surplus of the
// attempt before is aborted).
func (it *Item) CountOn(o *Output, attempt int64) int {
	if it.Nondet && attempt%2 == 0 && o.Count > 1 {
		return o.Count - 1 - o.Count/3
	}
	return o.Count
}

// Chunk returns chunk seq of (run, op, stream) written by the given
// attempt variant (0 for deterministic output and workflow writes). Sizes
// depend on seq only; bytes on the variant too.
func Chunk(runSeed uint64, op int64, streamName string, seq int, variant int64, minLen, maxLen int) []byte {
	h := mix(runSeed, uint64(op), strHash(streamName), uint64(seq))
	n := minLen
	if maxLen > minLen {
		// log-uniform-ish between minLen and maxLen
		span := maxLen - minLen + 1
		switch h % 3 {
		case 0:
			n = minLen + int(h>>8)%span
		default:
			n = minLen + int(h>>8)%min(span, 1+int(h>>40)%span)
		}
	}
	b := make([]byte, n)
	pr := rand.New(rand.NewPCG(mix(h, uint64(variant)), 0x5eed))
	for i := 0; i < n; i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], pr.Uint64())
		copy(b[i:], w[:])
	}
	return b
}

func strHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(s) {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

func mix(vs ...uint64) uint64 {
	h := uint64(0x9e3779b97f4a7c15)
	for _, v := range vs {
		h ^= v + 0x9e3779b97f4a7c15 + (h << 6) + (h >> 2)
		h *= 0xbf58476d1ce4e5b9
		h ^= h >> 31
	}
	return h
}

// variant is the byte variant a step writes on an attempt.
func (it *Item) variant(attempt int64) int64 {
	if it.Nondet {
		return attempt
	}
	return 0
}

// QueueName is the trial's queue (a limiter the workers set).
func (t *Trial) QueueName() string { return t.Prefix + "-q" }

// addQueue, in half the trials, starts some of the runs the workers start
// directly in a queue of concurrency 1 or 2, which the checker holds them
// to. Its own stream of the seed keeps the rest of the schedule as it was.
func addQueue(t *Trial, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x9e_e0e))
	if r.IntN(2) != 0 {
		return
	}
	t.Queue = 1 + r.IntN(2)
	for i := range t.Runs {
		// A deadline run counts its deadline from its start: not one to queue.
		if t.Runs[i].Start == StartDirect && t.Runs[i].Workflow == "" && r.IntN(3) != 0 {
			t.Runs[i].Queued = true
		}
	}
}

// LimiterName is the trial's step limiter (the workers set it).
func (t *Trial) LimiterName() string { return limiterName(t.Prefix) }

func limiterName(prefix string) string { return prefix + "-lim" }

// addLimiter, in half the trials, makes some plain steps (parallel groups
// among them) take a slot of a limiter of concurrency 1 to 3 for each
// attempt, which the checker holds them to. Steps that outlive their
// slot by design are left out: one with a timeout whose attempt hangs deaf
// to its context, and a deadline run's. Its own stream of the seed keeps
// the rest of the schedule as it was.
func addLimiter(t *Trial, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x11_3173))
	if r.IntN(2) != 0 {
		return
	}
	t.Limiter = 1 + r.IntN(3)
	for i := range t.Runs {
		rs := &t.Runs[i]
		if rs.Workflow != "" {
			continue
		}
		for j := range rs.Items {
			if it := &rs.Items[j]; it.Kind == ItemStep && it.TimeoutMillis == 0 && r.IntN(2) == 0 {
				it.Limited = true
			}
		}
	}
}

// attemptKey names an attempt of a run's step: the run's log has it once,
// while several executions of the run may have run it (attemptSpan).
type attemptKey struct {
	run         string
	op, attempt int64
}

// attemptSpan is a limited attempt's run of its code, as its worker saw it:
// by the run's execution of lease epoch epoch. An execution that lost its
// lease before the attempt's start was durable leaves the attempt's number
// to the next, which runs it again: an attempt may have spans of several
// executions, of which the log holds one's.
type attemptSpan struct {
	attemptKey
	epoch      int64
	start, end time.Time
}

// parseAttemptSpan reads a worker's "L run op attempt epoch startNanos
// endNanos".
func parseAttemptSpan(line string) (attemptSpan, bool) {
	var a attemptSpan
	var start, end int64
	if n, err := fmt.Sscanf(line, "%s %d %d %d %d %d", &a.run, &a.op, &a.attempt, &a.epoch, &start, &end); n != 6 || err != nil || end < start {
		return a, false
	}
	a.start, a.end = time.Unix(0, start), time.Unix(0, end)
	return a, true
}

// noteStarted reads a worker's "S run op attempt epoch" into t.started.
func (t *Trial) noteStarted(line string) bool {
	var k attemptKey
	var epoch int64
	if n, err := fmt.Sscanf(line, "%s %d %d %d", &k.run, &k.op, &k.attempt, &epoch); n != 4 || err != nil {
		return false
	}
	if t.started == nil {
		t.started = map[attemptKey][]int64{}
	}
	if !slices.Contains(t.started[k], epoch) {
		t.started[k] = append(t.started[k], epoch)
	}
	return true
}
