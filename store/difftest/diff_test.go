package difftest

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/pgtest"
	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/schedule"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/pgstore"
	"github.com/weirhq/weir/store/sqlitestore"
	"github.com/weirhq/weir/stream"
)

var (
	flagSeeds = flag.Int("difftest.seeds", 12, "how many seeds to run")
	flagOps   = flag.Int("difftest.ops", 300, "operations per seed")
	flagSeed  = flag.Int64("difftest.seed", -1, "run this seed alone (replays a failure)")
)

func TestDifferential(t *testing.T) {
	if *flagSeed >= 0 {
		runSeed(t, uint64(*flagSeed), *flagOps)
		return
	}
	base := uint64(time.Now().UnixNano() % 1_000_000)
	for i := range *flagSeeds {
		seed := base + uint64(i)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runSeed(t, seed, *flagOps)
		})
	}
}

// clock is the two stores' shared clock: it moves only between operations,
// so both see the same times.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// side is one backend under test, with what the sequence learnt of its
// stream ids (they may differ between backends: a PostgreSQL sequence is
// not transactional).
type side struct {
	name   string
	s      store.Full
	ids    map[string]int64  // path -> id
	paths  map[int64]string  // id -> path
	leases map[string]string // queue message -> its last claim's lease
}

func (sd *side) learn(si *store.StreamInfo) {
	if si != nil {
		sd.ids[si.Path], sd.paths[si.ID] = si.ID, si.Path
	}
}

// id returns the backend's id of the stream at path; an id no stream has if
// it never saw one there.
func (sd *side) id(path string) int64 {
	if id, ok := sd.ids[path]; ok {
		return id
	}
	return 1 << 40
}

var streamRef = regexp.MustCompile(`stream (\d+)`)

// norm makes an error message comparable: stream ids become paths.
func (sd *side) norm(err error) string {
	if err == nil {
		return "<nil>"
	}
	return streamRef.ReplaceAllStringFunc(err.Error(), func(m string) string {
		n, _ := strconv.ParseInt(m[len("stream "):], 10, 64)
		if p, ok := sd.paths[n]; ok {
			return "stream " + strconv.Quote(p)
		}
		return m
	})
}

func runSeed(t *testing.T, seed uint64, ops int) {
	clk := &clock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	// Both stores read batches a window at a time (sqlrow.Page.Feed) when
	// a batch is larger than the window; SQLite decodes a batch its window
	// holds whole at once (stream.DecodeBatch). With its default window for
	// even seeds, SQLite checks PostgreSQL's windows against DecodeBatch.
	liteWindow := 0
	if seed%2 == 1 {
		liteWindow = []int{1, 2, 4, 7, 16}[seed/2%5]
	}
	lite, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "weir.db"), &sqlitestore.Config{Now: clk.Now, ReadWindow: liteWindow})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lite.Close() })
	// Windows of a few bytes cut every head and every chunk somewhere (0:
	// the default, 1 MiB).
	window := []int{1, 2, 3, 5, 8, 40, 0}[seed%7]
	pg, err := pgstore.Open(t.Context(), pgtest.URL(), &pgstore.Config{Schema: pgtest.NewSchema(t), MaxConns: 4, Now: clk.Now, ReadWindow: window})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	sides := [2]*side{
		{name: "sqlite", s: lite, ids: map[string]int64{}, paths: map[int64]string{}, leases: map[string]string{}},
		{name: "postgres", s: pg, ids: map[string]int64{}, paths: map[int64]string{}, leases: map[string]string{}},
	}
	g := &gen{rng: rand.New(rand.NewPCG(seed, 0x5eed)), clk: clk, epochs: map[string]int64{}}
	var trail []string
	for i := range ops {
		clk.advance(time.Duration(1+g.n(3)) * time.Millisecond)
		if g.n(20) == 0 {
			clk.advance(time.Duration(g.n(90)) * time.Second) // past TTLs and leases now and then
		}
		o := g.next()
		var outs [2]string
		for k, sd := range sides {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			outs[k] = o.run(ctx, sd)
			cancel()
		}
		trail = append(trail, fmt.Sprintf("%3d %s\n      -> %s", i, o.desc, outs[0]))
		if outs[0] != outs[1] {
			t.Fatalf("seed %d, operation %d: the backends differ (replay: go test ./store/difftest -run TestDifferential -difftest.seed %d -difftest.ops %d)\n%s\n%s: %s\n%s: %s",
				seed, i, seed, i+1, strings.Join(trail, "\n"), sides[0].name, outs[0], sides[1].name, outs[1])
		}
		g.learn(o, outs[0])
	}
}

// op is one operation, run on each backend; run returns its outcome as text.
type op struct {
	desc string
	run  func(ctx context.Context, sd *side) string
	// claim, if set, names the lease epochs a claim's outcome holds.
	claim bool
}

// gen generates operations from small pools of names, so that they meet.
type gen struct {
	rng    *rand.Rand
	clk    *clock
	epochs map[string]int64 // run -> the epoch of its last claim
}

var (
	runs      = []string{"r1", "r2", "r3", "q1", "q2", "q3"}
	workflows = []string{"wf1", "wf2"}
	writers   = []string{"step/1", "step/2", "workflow", "w"}
	paths     = []string{"s1", "s2", "s3", "runs/r1/a", "runs/r2/a", "runs/r1/b"}
)

func (g *gen) n(k int) int             { return g.rng.IntN(k) }
func (g *gen) pick(xs []string) string { return xs[g.n(len(xs))] }
func (g *gen) chance(k int) bool       { return g.n(k) == 0 }

func (g *gen) chunks(max int) [][]byte {
	var out [][]byte
	for range g.n(max + 1) {
		out = append(out, []byte(strings.Repeat(string(rune('a'+g.n(3))), 1+g.n(3))))
	}
	return out
}

func (g *gen) epoch(run string) int64 {
	e := g.epochs[run]
	if g.chance(6) {
		e += int64(g.n(3)) - 1
	}
	return e
}

// learn keeps the lease epochs a claim returned.
func (g *gen) learn(o *op, out string) {
	if !o.claim {
		return
	}
	for _, m := range regexp.MustCompile(`\{id=(\w+) [^}]*epoch=(\d+)`).FindAllStringSubmatch(out, -1) {
		e, _ := strconv.ParseInt(m[2], 10, 64)
		g.epochs[m[1]] = e
	}
}

func (g *gen) next() *op {
	now := g.clk.Now()
	switch g.n(43) {
	case 0, 1:
		p := store.CreateRunParams{ID: g.pick(runs), Workflow: g.pick(workflows), Input: []byte(g.pick(runs))}
		if g.chance(6) {
			// Past the bound a found run is read within (ElideFound).
			p.Input = []byte(`"` + strings.Repeat(g.pick(runs), store.MaxListedValue/2) + `"`)
		}
		// A start that finds its run: elided as a server's reply has it,
		// its input compared by the store (an Idempotency-Key's start).
		p.ElideFound, p.SameInput = g.chance(2), g.chance(3)
		if g.chance(4) {
			p.Parent = g.pick(runs)
		}
		if g.chance(3) {
			// A run's trace, kept by both stores alike; one too long is
			// refused by both.
			p.TraceParent = g.pick([]string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", strings.Repeat("t", store.MaxTraceParentLen+1)})
		}
		if g.chance(4) {
			p.WakeAt = now.Add(time.Duration(g.n(60)) * time.Second)
		}
		if g.chance(2) {
			p.Owner, p.LeaseTTL = g.pick([]string{"o1", "o2"}), time.Duration(1+g.n(60))*time.Second
		}
		if g.chance(3) {
			p.Version = g.pick([]string{"v1", "v2"})
		}
		if g.chance(3) {
			// Queued (the limiters double as queues; "nope" is none).
			p.ID = g.pick([]string{"q1", "q2", "q3"})
			p.Queue, p.QueueKey, p.Priority = g.pick([]string{"openai", "tokens", "openai", "nope"}), g.pick([]string{"", "t1", "t2"}), g.n(3)
			if g.chance(2) {
				p.Dedupe = g.pick([]string{"d1", "d2"})
				if g.chance(2) {
					p.Debounce = time.Duration(g.n(3)) * time.Second
					if g.chance(2) {
						p.DebounceMax = time.Duration(g.n(5)) * time.Second
					}
				}
			}
		}
		return &op{desc: fmt.Sprintf("CreateRun %+v", p), claim: true, run: func(ctx context.Context, sd *side) string {
			r, created, err := sd.s.CreateRun(ctx, &p)
			return fmt.Sprintf("%s created=%v %s", showRun(r), created, sd.norm(err))
		}}
	case 2, 3:
		p := store.ClaimRunsParams{Owner: g.pick([]string{"o1", "o2"}), Limit: 1 + g.n(3), LeaseTTL: time.Duration(1+g.n(60)) * time.Second}
		if g.chance(3) {
			p.Workflows = []string{g.pick(workflows)}
		}
		if g.chance(4) {
			p.Versions = []string{g.pick([]string{"", "v1", "v2"})}
		}
		if g.chance(4) {
			p.SkipQueues = []string{g.pick([]string{"openai", "tokens"})}
		}
		if g.chance(2) {
			p.Lined = g.n(3) // runs parked in a limiter's line first, within Limit
		}
		return &op{desc: fmt.Sprintf("ClaimRuns %+v", p), claim: true, run: func(ctx context.Context, sd *side) string {
			rs, err := sd.s.ClaimRuns(ctx, &p)
			return showRuns(rs) + " " + sd.norm(err)
		}}
	case 4:
		run := g.pick(runs)
		p := store.RenewLeaseParams{RunID: run, LeaseEpoch: g.epoch(run), LeaseTTL: time.Duration(1+g.n(60)) * time.Second}
		return &op{desc: fmt.Sprintf("RenewLease %+v", p), run: func(ctx context.Context, sd *side) string {
			cancel, err := sd.s.RenewLease(ctx, &p)
			return fmt.Sprintf("cancel=%v %s", cancel, sd.norm(err))
		}}
	case 5:
		run := g.pick(runs)
		return &op{desc: "RequestCancel " + run, run: func(ctx context.Context, sd *side) string {
			return sd.norm(sd.s.RequestCancel(ctx, run))
		}}
	case 6, 7, 8:
		return g.record()
	case 9:
		p := store.OpenStreamParams{Create: !g.chance(4), ContentType: g.pick([]string{"", "text/plain"})}
		if g.chance(2) {
			p.RunID, p.Name = g.pick(runs), g.pick([]string{"a", "b"})
		} else {
			p.Path = g.pick(paths)
		}
		return &op{desc: fmt.Sprintf("OpenStream %+v", p), run: func(ctx context.Context, sd *side) string {
			si, err := sd.s.OpenStream(ctx, &p)
			sd.learn(si)
			return sd.showStream(si) + " " + sd.norm(err)
		}}
	case 10, 11:
		return g.createStream(now)
	case 12, 13, 14, 15:
		return g.append(now)
	case 16:
		path := g.pick(paths)
		p := store.FinishWriterParams{Writer: g.pick(writers), Attempt: int64(g.n(4)), Commit: g.chance(2)}
		return &op{desc: fmt.Sprintf("FinishWriter %s %+v", path, p), run: func(ctx context.Context, sd *side) string {
			q := p
			q.StreamID = sd.id(path)
			res, err := sd.s.FinishWriter(ctx, &q)
			return fmt.Sprintf("%v %s", res, sd.norm(err))
		}}
	case 17:
		path := g.pick(paths)
		return &op{desc: "CloseStream " + path, run: func(ctx context.Context, sd *side) string {
			res, err := sd.s.CloseStream(ctx, sd.id(path))
			return fmt.Sprintf("%v %s", res, sd.norm(err))
		}}
	case 18:
		path := g.pick(paths)
		p := store.DeleteStreamParams{}
		if g.chance(2) {
			p.IfExpiredAt = now
		}
		return &op{desc: fmt.Sprintf("DeleteStream %s %+v", path, p), run: func(ctx context.Context, sd *side) string {
			q := p
			q.ID = sd.id(path)
			res, err := sd.s.DeleteStream(ctx, &q)
			return fmt.Sprintf("%v %s", res, sd.norm(err))
		}}
	case 19:
		path := g.pick(paths)
		at := now.Add(time.Duration(g.n(3)-1) * time.Second)
		return &op{desc: fmt.Sprintf("TouchStream %s at %v", path, at), run: func(ctx context.Context, sd *side) string {
			return sd.norm(sd.s.TouchStream(ctx, &store.TouchStreamParams{ID: sd.id(path), At: at}))
		}}
	case 20:
		p := store.PurgeRunsParams{Before: now.Add(-time.Duration(g.n(30)) * time.Second), Limit: g.n(3)}
		return &op{desc: fmt.Sprintf("PurgeRuns %+v", p), run: func(ctx context.Context, sd *side) string {
			n, err := sd.s.PurgeRuns(ctx, &p)
			return fmt.Sprintf("%d %s", n, sd.norm(err))
		}}
	case 21, 22:
		path := g.pick(paths)
		p := store.ReadParams{From: int64(g.n(8)), Limit: g.n(4), MaxBytes: g.n(2) * 3}
		if g.chance(2) {
			p.From = 0
		}
		return &op{desc: fmt.Sprintf("Read %s %+v", path, p), run: func(ctx context.Context, sd *side) string {
			q := p
			q.StreamID = sd.id(path)
			res, err := sd.s.Read(ctx, &q)
			return showRead(res) + " " + sd.norm(err)
		}}
	case 23, 24, 25, 26, 27, 28:
		return g.worldOp()
	case 29, 30:
		return g.hookOp(now)
	case 31, 32:
		return g.messageOp(now)
	case 33, 34, 35:
		return g.limiterOp(now)
	case 36, 37:
		return g.scheduleOp(now)
	case 38:
		p := store.MigrateRunsParams{From: g.pick([]string{"", "v1", "v2"}), To: g.pick([]string{"", "v1", "v2"})}
		if g.chance(2) {
			p.RunIDs = []string{g.pick([]string{"q1", "q2", "r1", "r2"})}
		}
		return &op{desc: fmt.Sprintf("MigrateRuns %+v", p), run: func(ctx context.Context, sd *side) string {
			ids, err := sd.s.MigrateRuns(ctx, &p)
			return fmt.Sprintf("%v %s", ids, sd.norm(err))
		}}
	case 39:
		// A fork of a run (often refused: a run with no such op, a fork
		// point inside a group, an id taken), into an id the others use.
		p := store.ForkRunParams{Source: g.pick(runs), ID: g.pick(runs), Op: int64(g.n(5)), Now: now}
		if p.Op == 0 {
			p.Step = g.pick([]string{"fetch", "write", "t"})
		}
		if g.chance(3) {
			p.Version = "v2"
		}
		return &op{desc: fmt.Sprintf("ForkRun %+v", p), claim: true, run: func(ctx context.Context, sd *side) string {
			r, created, err := sd.s.ForkRun(ctx, &p)
			return fmt.Sprintf("%s created=%v %s", showRun(r), created, sd.norm(err))
		}}
	case 40:
		p := store.ResumeRunParams{ID: g.pick(runs), Now: now}
		return &op{desc: fmt.Sprintf("ResumeRun %+v", p), claim: true, run: func(ctx context.Context, sd *side) string {
			r, err := sd.s.ResumeRun(ctx, &p)
			return showRun(r) + " " + sd.norm(err)
		}}
	case 41, 42:
		return g.openAppend()
	default:
		return g.look()
	}
}

// openAppend is a step writer's first batch with its stream's creation: with
// its attempt's start, or carried by the record that follows it (a Then: an
// Advance as record draws them, with a finish of the writer); often for a
// stream that exists, a stale lease, a fenced attempt.
func (g *gen) openAppend() *op {
	run := g.pick(runs)
	w := g.pick(writers[:2])
	p := store.OpenAppendParams{RunID: run, Name: g.pick([]string{"a", "b"}), ContentType: g.pick([]string{"", "text/plain"}),
		Append: store.AppendParams{Writer: w, Attempt: int64(1 + g.n(3)), FirstSeq: int64(g.n(2)), Chunks: g.chunks(3)}}
	if len(p.Append.Chunks) == 0 {
		p.Append.Chunks = [][]byte{[]byte("c")}
	}
	if g.chance(2) {
		p.Start = &store.AdvanceParams{RunID: run, LeaseEpoch: g.epoch(run),
			Events: []store.Event{{Type: store.EventStepStarted, Op: int64(1 + g.n(3)), Name: "write", Attempt: p.Append.Attempt}},
			Fence:  &store.Fence{Writer: w, Attempt: p.Append.Attempt}}
	} else if g.chance(2) {
		t := &store.AdvanceParams{RunID: run, LeaseEpoch: g.epoch(run),
			Events: []store.Event{{Type: store.EventStepStarted, Op: 1, Name: "write", Attempt: p.Append.Attempt},
				{Type: store.EventStepCompleted, Op: 1, Name: "write", Attempt: p.Append.Attempt, Data: []byte("1")}},
			Finish: &store.Finish{Writer: w, Attempt: p.Append.Attempt, Commit: true}}
		if g.chance(3) {
			t.Status, t.Output, t.CloseStreams = store.RunCompleted, []byte("42"), true
		}
		p.Then = t
	}
	return &op{desc: fmt.Sprintf("OpenAppend %+v start %+v then %+v", p, p.Start, p.Then), run: func(ctx context.Context, sd *side) string {
		sa, ok := store.StepAppenderOf(sd.s)
		if !ok {
			return "no StepAppender"
		}
		res, err := sa.OpenAppend(ctx, &p)
		if res == nil {
			return sd.norm(err)
		}
		sd.learn(res.Stream)
		out := fmt.Sprintf("created=%v stream %s", res.Created, sd.showStream(res.Stream))
		if a := res.Append; a != nil {
			out += fmt.Sprintf(" acks=%v next=%d aborted=%v", a.Acks, a.NextOffset, a.Aborted)
		}
		return out + " " + sd.norm(err)
	}}
}

// limiterOp is a limiter's: set (sometimes to what is refused), a slot
// asked for, released with a cost, renewed, the state looked at; at the
// generator's clock, so both stores decide at the same instant.
func (g *gen) limiterOp(now time.Time) *op {
	name := g.pick([]string{"openai", "tokens"})
	holder := g.pick([]string{"h1", "h2", "h3", "h4"})
	if g.chance(3) {
		// A step's holder: a change of the limiter may wake its run
		// (apply.SetLimiter, WakeParkedRuns).
		holder = limit.StepHolder(g.pick(runs), 1, 1, 1)
	}
	lim := func(sd *side) store.Limits { return sd.s.(store.Limits) }
	switch g.n(10) {
	case 8:
		// Refused while a slot is held, someone waits, a run is queued in
		// it or parked for it (apply.DeleteLimiter, ParkedFor).
		return &op{desc: "DeleteLimiter " + name, run: func(ctx context.Context, sd *side) string {
			err := lim(sd).DeleteLimiter(ctx, name)
			_, gerr := lim(sd).GetLimiter(ctx, name)
			return sd.norm(err) + " " + sd.norm(gerr)
		}}
	case 5, 6, 7:
		// Queued runs admitted (limit.Admit), and the queue looked at.
		p := store.AdmitRunsParams{Owner: g.pick([]string{"o1", "o2"}), Limit: 1 + g.n(3), LeaseTTL: time.Duration(1+g.n(60)) * time.Second, Now: now}
		if g.chance(3) {
			p.Room = map[string]int{name: g.n(2)}
		}
		if g.chance(3) {
			p.Workflows = []string{g.pick(workflows)}
		}
		return &op{desc: fmt.Sprintf("AdmitRuns %+v, LimiterState %s", p, name), claim: true, run: func(ctx context.Context, sd *side) string {
			rs, err := lim(sd).AdmitRuns(ctx, &p)
			st, serr := lim(sd).LimiterState(ctx, name, now)
			return fmt.Sprintf("%s %s %+v %s", showRuns(rs), sd.norm(err), st, sd.norm(serr))
		}}
	case 0, 4:
		c := limit.Config{Name: name, Concurrency: g.n(3), PerKey: g.n(2), Rate: g.n(4), Budget: int64(g.n(3) * 50), Period: time.Duration(g.n(3)) * time.Second}
		return &op{desc: fmt.Sprintf("SetLimiter %+v", c), run: func(ctx context.Context, sd *side) string {
			err := lim(sd).SetLimiter(ctx, &c)
			got, gerr := lim(sd).GetLimiter(ctx, name)
			// Which runs are claimable now: a change wakes the runs of
			// waiters that asked at a rate or a budget.
			var due []string
			for _, id := range runs {
				if r, err := sd.s.GetRun(ctx, id); err == nil && !r.WakeAt.After(now) {
					due = append(due, id)
				}
			}
			return fmt.Sprintf("%s %+v %s due=%v", sd.norm(err), got, sd.norm(gerr), due)
		}}
	case 1, 2:
		p := store.AcquireSlotParams{Limiter: name, Request: limit.Request{Holder: holder, Key: holder[:2], Priority: g.n(2),
			Lease: time.Duration(1+g.n(20)) * time.Second}, Now: now}
		if g.n(3) == 0 {
			p.Grant = g.n(5) // 0: an ordinary request
			p.InUse = g.n(p.Grant + 1)
		}
		return &op{desc: fmt.Sprintf("AcquireSlot %+v", p), run: func(ctx context.Context, sd *side) string {
			d, err := lim(sd).AcquireSlot(ctx, &p)
			return fmt.Sprintf("%+v %s", d, sd.norm(err))
		}}
	case 3:
		p := store.ReleaseSlotParams{Limiter: name, Holder: holder, Cost: int64(g.n(3)*30 - 10), Now: now}
		return &op{desc: fmt.Sprintf("ReleaseSlot %+v, SlotHeld of each", p), run: func(ctx context.Context, sd *side) string {
			ok, err := lim(sd).ReleaseSlot(ctx, &p)
			// What a waiter the release handed a slot reads (SlotHeld).
			out := fmt.Sprintf("%v %s", ok, sd.norm(err))
			for _, h := range []string{"h1", "h2", "h3", "h4"} {
				until, held, err := lim(sd).SlotHeld(ctx, &store.SlotHeldParams{Limiter: name, Holder: h, Now: now})
				out += fmt.Sprintf(" %s:%v,%v,%s", h, until.Sub(now), held, sd.norm(err))
			}
			return out
		}}
	default:
		p := store.RenewSlotParams{Limiter: name, Holder: holder, Lease: time.Duration(g.n(10)) * time.Second, Now: now}
		return &op{desc: fmt.Sprintf("RenewSlot %+v, LimiterState", p), run: func(ctx context.Context, sd *side) string {
			ok, err := lim(sd).RenewSlot(ctx, &p)
			st, serr := lim(sd).LimiterState(ctx, name, now)
			return fmt.Sprintf("%v %s %+v %s", ok, sd.norm(err), st, sd.norm(serr))
		}}
	}
}

// messageOp is a message sent to a run (with or without a key), or a look
// at a run's events.
func (g *gen) messageOp(now time.Time) *op {
	run := g.pick(runs)
	if g.chance(2) {
		p := store.SendMessageParams{RunID: run, Topic: g.pick([]string{"a", "b"}), Payload: []byte(g.pick([]string{"1", `"x"`})), Now: now}
		if g.chance(2) {
			p.IdempotencyKey, p.RequestDigest = g.pick([]string{"k1", "k2"}), []byte(g.pick([]string{"d1", "d2"}))
		}
		return &op{desc: fmt.Sprintf("SendMessage %+v", p), run: func(ctx context.Context, sd *side) string {
			res, err := sd.s.SendMessage(ctx, &p)
			return fmt.Sprintf("%+v %s", res, sd.norm(err))
		}}
	}
	key := g.pick([]string{"status", "answer"})
	return &op{desc: "GetRunEvent " + run + " " + key + " ListRunEvents ListRunEventsPage", run: func(ctx context.Context, sd *side) string {
		ev, err := sd.s.GetRunEvent(ctx, run, key)
		var out string
		if ev != nil {
			out = fmt.Sprintf("%s=%s@%d", ev.Key, ev.Value, ev.Seq)
		}
		evs, lerr := sd.s.ListRunEvents(ctx, run)
		for _, e := range evs {
			out += fmt.Sprintf(" %s=%s@%d", e.Key, e.Value, e.Seq)
		}
		page, perr := sd.s.ListRunEventsPage(ctx, &store.ListRunEventsParams{RunID: run, Limit: 1})
		if page != nil {
			for _, e := range page.Events {
				out += fmt.Sprintf(" page %s=%s@%d size %d elided %v", e.Key, e.Value, e.Seq, e.Size, e.Elided)
			}
			out += fmt.Sprintf(" more %v", page.More)
		}
		return out + " " + sd.norm(err) + " " + sd.norm(lerr) + " " + sd.norm(perr)
	}}
}

// hookOp is a hook's: created, disposed, delivered to (with or without a
// key), looked up.
func (g *gen) hookOp(now time.Time) *op {
	token := g.pick([]string{"h1", "h2", "h3"})
	run := g.pick(runs)
	switch g.n(5) {
	case 0, 1:
		p := store.HookParams{RunID: run, LeaseEpoch: g.epoch(run), Token: token, Op: int64(1 + g.n(3)), Now: now}
		return &op{desc: fmt.Sprintf("CreateHook %+v", p), run: func(ctx context.Context, sd *side) string {
			return sd.norm(sd.s.CreateHook(ctx, &p))
		}}
	case 2:
		p := store.HookParams{RunID: run, LeaseEpoch: g.epoch(run), Token: token, Op: int64(1 + g.n(3)), Now: now}
		return &op{desc: fmt.Sprintf("DisposeHook %+v", p), run: func(ctx context.Context, sd *side) string {
			return sd.norm(sd.s.DisposeHook(ctx, &p))
		}}
	case 3:
		p := store.DeliverHookParams{Token: token, Payload: []byte(g.pick([]string{"1", `"x"`})), Now: now}
		if g.chance(2) {
			p.IdempotencyKey, p.RequestDigest = g.pick([]string{"k1", "k2"}), []byte(g.pick([]string{"d1", "d2"}))
		}
		if g.chance(3) {
			p.RunID, p.OnlyFirst = run, g.chance(2)
		}
		if g.chance(5) {
			p.Close = true
			if g.chance(2) {
				p.Payload = nil
			}
		}
		return &op{desc: fmt.Sprintf("DeliverHook %+v", p), run: func(ctx context.Context, sd *side) string {
			res, err := sd.s.DeliverHook(ctx, &p)
			return fmt.Sprintf("%+v %s", res, sd.norm(err))
		}}
	default:
		return &op{desc: "GetHook " + token + " ListHooks " + run, run: func(ctx context.Context, sd *side) string {
			h, err := sd.s.GetHook(ctx, token)
			var out string
			if h != nil {
				c := *h
				c.CreatedAt = time.Time{}
				out = fmt.Sprintf("%+v", c)
			}
			hs, lerr := sd.s.ListHooks(ctx, run)
			for _, x := range hs {
				out += fmt.Sprintf(" %s@%d/%v/%d", x.Token, x.Op, x.Disposed, x.Received)
			}
			return out + " " + sd.norm(err) + " " + sd.norm(lerr)
		}}
	}
}

func (g *gen) record() *op {
	run := g.pick(runs)
	p := store.AdvanceParams{RunID: run, LeaseEpoch: g.epoch(run)}
	w := g.pick(writers[:2])
	for range g.n(3) {
		ev := store.Event{Type: store.EventType(g.pick([]string{"step_started", "step_completed", "step_failed", "sleep_scheduled", "event_set"})),
			Op: int64(1 + g.n(3)), Name: g.pick([]string{"fetch", "write"}), Attempt: int64(g.n(3)), Data: []byte("d"), Error: g.pick([]string{"", "boom"})}
		if ev.Type == store.EventSet {
			ev.Name, ev.Data = g.pick([]string{"status", "answer"}), []byte(g.pick([]string{`1`, `"x"`}))
		}
		if g.chance(3) {
			ev.At = g.clk.Now().Add(-time.Second)
		}
		p.Events = append(p.Events, ev)
	}
	if g.chance(2) {
		p.Fence = &store.Fence{Writer: w, Attempt: int64(1 + g.n(3))}
	}
	if g.chance(2) {
		p.Finish = &store.Finish{Writer: w, Attempt: int64(1 + g.n(3)), Commit: g.chance(2)}
	}
	switch g.n(6) {
	case 0:
		p.Status, p.Output = store.RunCompleted, []byte("42")
	case 1:
		p.Status, p.Error = store.RunFailed, "failed"
	case 2:
		p.Status = store.RunRunning
	}
	p.CloseStreams = p.Status.Terminal() || g.chance(10)
	if g.chance(4) {
		p.Release = true
		p.WakeAt = g.clk.Now().Add(time.Duration(g.n(30)) * time.Second)
		if g.chance(2) {
			p.SeenEvents, p.CheckSeen = int64(g.n(12)), true // none, behind, at or past the log's end
		}
		if g.chance(2) {
			// Parked for limiters' windows, or in a line for a held slot
			// (AdvanceParams.Limiters, Lined): what a change of a limiter
			// wakes, what a delete refuses, what a claim with Lined takes.
			p.Limiters = []string{g.pick([]string{"openai", "tokens"})}
			if g.chance(3) {
				p.Limiters = []string{"openai", "tokens"}
			}
			if g.chance(2) {
				p.Lined, p.LinePriority = true, g.n(3)
			}
		}
	}
	if g.chance(4) {
		// A child's end told to another run's hook in the same transaction.
		to := g.pick(runs)
		if to != run {
			p.Deliver = &store.DeliverHookParams{RunID: to, Token: g.pick([]string{"h1", "h2", "h3"}), Payload: []byte(`{"end":1}`), OnlyFirst: g.chance(2)}
		}
	}
	return &op{desc: fmt.Sprintf("Advance %+v fence %+v finish %+v deliver %+v", p, p.Fence, p.Finish, p.Deliver), run: func(ctx context.Context, sd *side) string {
		return sd.norm(sd.s.Advance(ctx, &p))
	}}
}

func (g *gen) createStream(now time.Time) *op {
	p := store.CreateStreamParams{Path: g.pick(paths[:3]), ContentType: g.pick([]string{"", "text/plain"}), Chunks: g.chunks(2), Closed: g.chance(5)}
	if g.chance(4) {
		p.Path = g.pick([]string{"f1", "f2"})
	}
	switch g.n(4) {
	case 0:
		p.Expiry = store.Expiry{HasTTL: true, TTL: time.Duration(g.n(3)) * 30 * time.Second}
	case 1:
		p.Expiry = store.Expiry{At: now.Add(time.Duration(g.n(3)) * 30 * time.Second)}
	}
	if g.chance(2) {
		p.Now = now.Add(-time.Second)
	}
	if g.chance(4) {
		p.MaxStreams = int64(1 + g.n(4))
	}
	if g.chance(4) {
		p.MaxBytes = int64(1 + g.n(6))
	}
	src := ""
	if g.chance(2) {
		src = g.pick(append(paths[:3:3], "f1", "f2"))
		p.Fork = &store.ForkParams{Offset: int64(g.n(6)) - 1, SubOffset: int64(g.n(3)), SubRecords: g.chance(2)}
		if g.chance(2) {
			p.Fork.SubOffset = 0
		}
	}
	return &op{desc: fmt.Sprintf("CreateStream %+v fork of %q %+v", p, src, p.Fork), run: func(ctx context.Context, sd *side) string {
		q := p
		if q.Fork != nil {
			f := *q.Fork
			f.SourceID = sd.id(src)
			q.Fork = &f
		}
		si, created, err := sd.s.CreateStream(ctx, &q)
		sd.learn(si)
		return fmt.Sprintf("%s created=%v %s", sd.showStream(si), created, sd.norm(err))
	}}
}

func (g *gen) append(now time.Time) *op {
	path := g.pick(paths)
	p := store.AppendParams{Chunks: g.chunks(3)}
	switch g.n(3) {
	case 0:
		p.Writer, p.Attempt, p.FirstSeq = g.pick(writers), int64(g.n(4)), int64(g.n(4))
		if g.chance(2) {
			p.FirstSeq = 0
		}
	case 1:
		p.Producer = &stream.Producer{ID: g.pick([]string{"p1", "p2"}), Epoch: int64(g.n(2)), Seq: int64(g.n(3))}
	}
	if g.chance(4) {
		p.StreamSeq = strconv.Itoa(g.n(10))
	}
	if g.chance(6) {
		p.Close = true
	}
	if g.chance(3) {
		p.IdempotencyKey = g.pick([]string{"k1", "k2"})
		p.RequestDigest = []byte(g.pick([]string{"d1", "d2"}))
		if g.chance(3) {
			p.KeyTTL = time.Duration(1+g.n(60)) * time.Second
		}
	}
	if g.chance(3) {
		p.Now = now.Add(time.Duration(g.n(3)-1) * time.Second)
	}
	if g.chance(3) {
		p.MaxBytes = int64(1 + g.n(30))
	}
	return &op{desc: fmt.Sprintf("Append %s %+v producer %+v", path, p, p.Producer), run: func(ctx context.Context, sd *side) string {
		q := p
		q.StreamID = sd.id(path)
		res, err := sd.s.Append(ctx, &q)
		return fmt.Sprintf("%+v %s", res, sd.norm(err))
	}}
}

// look is a read of state: a stream, a run, the lists.
func (g *gen) look() *op {
	switch g.n(6) {
	case 5:
		p := store.ListStandaloneParams{Prefix: g.pick([]string{"", "s", "f", "x"}), Limit: g.n(3)}
		if g.chance(2) {
			p.After = g.pick(append(paths[:3:3], "f1", "f2"))
		}
		if g.chance(3) {
			p.Now = g.clk.Now().Add(time.Duration(g.n(3)) * 30 * time.Second)
		}
		return &op{desc: fmt.Sprintf("ListStandaloneStreams %+v", p), run: func(ctx context.Context, sd *side) string {
			l, err := sd.s.ListStandaloneStreams(ctx, &p)
			if err != nil {
				return sd.norm(err)
			}
			var b strings.Builder
			for _, si := range l.Streams {
				b.WriteString(sd.showStream(si))
			}
			return b.String() + " next=" + l.Next
		}}
	case 0:
		path := g.pick(paths)
		return &op{desc: "GetStream " + path, run: func(ctx context.Context, sd *side) string {
			si, err := sd.s.GetStream(ctx, sd.id(path))
			return sd.showStream(si) + " " + sd.norm(err)
		}}
	case 1:
		run := g.pick(runs)
		return &op{desc: "ListStreams " + run, run: func(ctx context.Context, sd *side) string {
			sis, err := sd.s.ListStreams(ctx, run)
			var b strings.Builder
			for _, si := range sis {
				b.WriteString(sd.showStream(si))
			}
			return b.String() + " " + sd.norm(err)
		}}
	case 2:
		run := g.pick(runs)
		return &op{desc: "GetRun " + run, run: func(ctx context.Context, sd *side) string {
			r, err := sd.s.GetRun(ctx, run)
			return showRun(r) + " " + sd.norm(err)
		}}
	case 3:
		p := store.ListRunsParams{Limit: g.n(3)}
		if g.chance(2) {
			p.Workflow = g.pick(workflows)
		}
		if g.chance(3) {
			p.Status = store.RunStatus(g.pick([]string{"pending", "running", "completed", "failed"}))
		}
		if g.chance(3) {
			p.Before = g.pick(runs)
		}
		if g.chance(3) {
			// A prefix of a run's id (the runs' creation times differ
			// between the two sides, so no time bound is drawn here).
			id := g.pick(runs)
			p.IDPrefix = id[:1+g.n(max(1, len(id)-1))]
		}
		p.NoData = g.chance(3)
		return &op{desc: fmt.Sprintf("ListRuns %+v", p), run: func(ctx context.Context, sd *side) string {
			rs, err := sd.s.ListRuns(ctx, &p)
			return showRuns(rs) + " " + sd.norm(err)
		}}
	default:
		run := g.pick(runs)
		after := int64(g.n(3))
		return &op{desc: fmt.Sprintf("ListEvents %s after %d", run, after), run: func(ctx context.Context, sd *side) string {
			evs, err := sd.s.ListEvents(ctx, run, after)
			return fmt.Sprintf("%+v %s", evs, sd.norm(err))
		}}
	}
}

func showRun(r *store.Run) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("{id=%s wf=%s %s in=%q out=%q err=%q created=%v updated=%v wake=%v owner=%s expires=%v epoch=%d cancel=%v parent=%s trace=%q queue=%s/%s/%d/%s queued=%v version=%q}",
		r.ID, r.Workflow, r.Status, r.Input, r.Output, r.Error, r.CreatedAt, r.UpdatedAt, r.WakeAt, r.LeaseOwner,
		r.LeaseExpires, r.LeaseEpoch, r.CancelRequested, r.Parent, r.TraceParent, r.Queue, r.QueueKey, r.Priority, r.Dedupe, r.Queued, r.Version) +
		fmt.Sprintf("lined=%v elided=%v", r.Lined, r.Elided)
}

func showRuns(rs []*store.Run) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(showRun(r))
	}
	return "[" + b.String() + "]"
}

func (sd *side) showStream(si *store.StreamInfo) string {
	if si == nil {
		return "-"
	}
	c := *si
	c.ID = 0
	fork := ""
	if f := c.Fork; f != nil {
		fork = fmt.Sprintf("fork{%q@%d+%d}", f.SourcePath, f.Offset, f.SubOffset)
		if sd.paths[f.SourceID] != f.SourcePath {
			fork += "(source id unknown)"
		}
		c.Fork = nil
	}
	cb := ""
	if c.ClosedBy != nil {
		cb = fmt.Sprintf("closedBy=%+v", *c.ClosedBy)
		c.ClosedBy = nil
	}
	return fmt.Sprintf("%+v%s%s", c, fork, cb)
}

// showRead shows a page of the live view and, for a page read from 0, the
// committed view of it.
func showRead(res *store.ReadResult) string {
	if res == nil {
		return "-"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "next=%d closed=%v ", res.NextOffset, res.Closed)
	for _, r := range res.Records {
		fmt.Fprintf(&b, "%v|", r)
	}
	if len(res.Records) > 0 && res.Records[0].Offset == 0 {
		c := stream.NewCommitted(0)
		var committed []int64
		for i := range res.Records {
			c.Push(&res.Records[i], func(r *stream.Record) { committed = append(committed, r.Offset) })
		}
		fmt.Fprintf(&b, " committed=%v", slices.Clip(committed))
	}
	return b.String()
}

// scheduleOp is a schedule's: set (paused, resumed, sometimes refused),
// deleted, claimed, advanced under a claim's version (sometimes a stale
// one), looked at; on the generator's clock.
func (g *gen) scheduleOp(now time.Time) *op {
	name := g.pick([]string{"nightly", "tick", "bad name"})
	sch := func(sd *side) store.Schedules { return sd.s.(store.Schedules) }
	show := func(s *store.Schedule) string {
		if s == nil {
			return "<nil>"
		}
		return fmt.Sprintf("{%s %s %s %q %s/%s %s %v %v next=%v v%d lease=%s/%v created=%v updated=%v state=%+v}", s.Name, s.Workflow, s.Input, s.Spec, s.TZ,
			s.Overlap, s.Backfill, s.Paused, s.NextDue, s.NextDue.UnixNano(), s.Version, s.LeaseOwner, s.LeaseExpires.UnixNano(), s.CreatedAt.UnixNano(), s.UpdatedAt.UnixNano(), s.State)
	}
	switch g.n(6) {
	case 0, 1:
		p := store.SetScheduleParams{Name: name, Workflow: g.pick(workflows), Spec: g.pick([]string{"@every 1s", "*/5 * * * *", "0 3 * * *", "@every 1ms"}),
			TZ: g.pick([]string{"", "Europe/Paris", "Nowhere/Land"}), Paused: g.chance(3), Now: now,
			Policy: schedule.Policy{Overlap: schedule.Overlap(g.pick([]string{"", "skip", "buffer_one", "allow", "never"})), Backfill: time.Duration(g.n(3)) * time.Minute}}
		if g.chance(3) {
			p.Input = []byte(g.pick([]string{`{"a":1}`, `[1,2]`, `{`}))
		}
		return &op{desc: fmt.Sprintf("SetSchedule %+v", p), run: func(ctx context.Context, sd *side) string {
			s, err := sch(sd).SetSchedule(ctx, &p)
			return show(s) + " " + sd.norm(err)
		}}
	case 2:
		p := store.ClaimSchedulesParams{Owner: g.pick([]string{"o1", "o2"}), Lease: time.Duration(1+g.n(5)) * time.Second, Limit: 1 + g.n(2), Now: now}
		return &op{desc: fmt.Sprintf("ClaimSchedules %+v", p), run: func(ctx context.Context, sd *side) string {
			ss, err := sch(sd).ClaimSchedules(ctx, &p)
			var out []string
			for _, s := range ss {
				out = append(out, show(s))
			}
			return fmt.Sprintf("%v %s", out, sd.norm(err))
		}}
	case 3:
		p := store.AdvanceScheduleParams{Name: name, Owner: g.pick([]string{"o1", "o2"}), Version: int64(1 + g.n(6)), NextDue: now.Add(time.Duration(g.n(5)) * time.Second), Now: now,
			State: schedule.State{Cursor: now.Add(-time.Duration(g.n(5)) * time.Second), Started: int64(g.n(4)), LastRun: g.pick([]string{"", "sched:tick:x"})}}
		return &op{desc: fmt.Sprintf("AdvanceSchedule %+v", p), run: func(ctx context.Context, sd *side) string {
			ok, err := sch(sd).AdvanceSchedule(ctx, &p)
			return fmt.Sprintf("%v %s", ok, sd.norm(err))
		}}
	case 4:
		return &op{desc: "DeleteSchedule " + name, run: func(ctx context.Context, sd *side) string {
			return sd.norm(sch(sd).DeleteSchedule(ctx, name))
		}}
	default:
		after, limit := g.pick([]string{"", "a", "nightly", "tick"}), g.n(3)
		return &op{desc: fmt.Sprintf("GetSchedule %s, ListSchedules after %q limit %d", name, after, limit), run: func(ctx context.Context, sd *side) string {
			s, err := sch(sd).GetSchedule(ctx, name)
			page, lerr := sch(sd).ListSchedules(ctx, &store.ListSchedulesParams{After: after, Limit: limit})
			var names []string
			more := false
			if page != nil {
				for _, x := range page.Schedules {
					names = append(names, show(x))
				}
				more = page.More
			}
			return fmt.Sprintf("%s %s %v %v %s", show(s), sd.norm(err), names, more, sd.norm(lerr))
		}}
	}
}
