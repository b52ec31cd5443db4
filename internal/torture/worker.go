package torture

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/internal/harness"
	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// WorkerEnv, set to "1" in a process's environment, makes it a torture
// worker: `weir` and this package's tests check it before anything else.
const WorkerEnv = "WEIR_TORTURE_WORKER"

// WorkflowName is the workflow every trial run executes.
const WorkflowName = "torture"

// output serialises the worker's lines on stdout.
type output struct {
	mu sync.Mutex
	w  io.Writer
}

func (o *output) line(format string, args ...any) {
	o.mu.Lock()
	fmt.Fprintf(o.w, format+"\n", args...)
	o.mu.Unlock()
}

// WorkerMain is the body of a worker process: it opens the store, starts the
// trial's runs (idempotently), executes them on its engines, runs the
// external producers, and returns once every run has ended and every
// producer is done. It reports progress as lines on stdout:
//
//	P <engine> <what…>   a progress event (the fault schedule counts them)
//	V <message>          a violation seen from inside (an unexpected error)
//	Z <what…>            a zombie attempt was fenced
//	A <addr>             it serves the HTTP API there
//	L <run> <op> <attempt> <epoch> <start> <end>
//	                     a limited attempt's span (the checker's), run by
//	                     the run's execution of lease epoch <epoch>
//	S <run> <op> <attempt> <epoch>
//	                     the attempt's start is in the run's log, written
//	                     by that execution (the checker's)
//	N park <run> <async> a park lined (async 1: its workflow waited for
//	                     steps on goroutines of their own)
//	N claim <run>        a run claimed lined
//	C <index> <kind>     it made the trial's limiter change index
//	DONE                 every run ended
//
// SIGUSR1 freezes the engine that reported progress last; SIGUSR2 thaws it.
// A trial with limiter changes reads their indexes on stdin, a line each,
// as the harness asks (changeLimiter).
func WorkerMain(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("torture-worker", flag.ContinueOnError)
	dsn := fs.String("store", "", "store")
	trialPath := fs.String("trial", "", "trial file")
	inc := fs.Int("incarnation", 0, "worker incarnation")
	httpAddr := fs.String("http", "", "serve the HTTP API on loopback and write its address to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := os.ReadFile(*trialPath)
	if err != nil {
		return err
	}
	var t Trial
	if err := json.Unmarshal(b, &t); err != nil {
		return err
	}
	out := &output{w: stdout}
	s, err := OpenStore(ctx, *dsn)
	if err != nil {
		return err
	}
	defer s.Close()

	var lastEngine atomic.Int32
	gates := make([]*gatedStore, t.Engines)
	warnLog := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	engines := make([]*weir.Engine, t.Engines)
	kill := newChildKiller(&t, filepath.Dir(*trialPath), out)
	lined := newLinedWatch(out)
	for i := range engines {
		gates[i] = &gatedStore{Full: s, afterRecord: kill, lined: lined, out: out}
		es, err := gates[i].forEngine()
		if err != nil {
			return err
		}
		e, err := weir.New(es, &weir.Config{
			WorkerID: fmt.Sprintf("w%d-e%d-%d", *inc, i, os.Getpid()),
			// 0: the defaults; small in some limiter trials (addLines).
			Concurrency:  t.Concurrency,
			LineRuns:     t.LineRuns,
			PollInterval: 20 * time.Millisecond,
			LeaseTTL:     leaseMillis * time.Millisecond,
			ParkAfter:    100 * time.Millisecond,
			Retry:        weir.RetryPolicy{InitialInterval: 5 * time.Millisecond, MaxInterval: 50 * time.Millisecond},
			Writer: weir.WriterConfig{
				MaxBatchChunks: t.Writer.MaxBatchChunks, MaxBatchBytes: t.Writer.MaxBatchBytes,
				Linger: time.Duration(t.Writer.LingerMicros+1) * time.Microsecond,
			},
			Logger: warnLog, // to its log file (run.go), kept with a failed trial
		})
		if err != nil {
			return err
		}
		idx := int32(i)
		report := func(format string, args ...any) {
			lastEngine.Store(idx)
			out.line("P %d "+format, append([]any{idx}, args...)...)
		}
		env := &wfEnv{e: e, s: s, report: report, out: out, lined: lined}
		wf := func(ctx weir.Context, rs RunSpec) (int, error) { return runWorkflow(ctx, &rs, env) }
		weir.Register(e, WorkflowName, wf)
		weir.Register(e, WorkflowChild, wf)
		weir.Register(e, WorkflowDeadline, wf, weir.WithRunTimeout(DeadlineMillis*time.Millisecond))
		engines[i] = e
	}

	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sig)
	go func() {
		var frozen *gatedStore
		for s := range sig {
			switch s {
			case syscall.SIGUSR1:
				if frozen == nil {
					frozen = gates[lastEngine.Load()]
					frozen.freeze()
				}
			case syscall.SIGUSR2:
				if frozen != nil {
					frozen.thaw()
					frozen = nil
				}
			}
		}
	}()

	// Every worker sets the trial's queue and limiter (the same: idempotent)
	// before it starts or serves runs: a run started over HTTP executes at
	// once in the engine that serves it, and a step that names a limiter
	// not set fails for good.
	var limiters []*limit.Config
	if t.Queue > 0 {
		limiters = append(limiters, &limit.Config{Name: t.QueueName(), Concurrency: t.Queue})
	}
	if t.Limiter > 0 {
		limiters = append(limiters, &limit.Config{Name: t.LimiterName(), Concurrency: t.Limiter})
	}
	for _, l := range limiters {
		for {
			err := s.SetLimiter(ctx, l)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return err
			}
			time.Sleep(50 * time.Millisecond) // a restarting database
		}
	}
	if len(t.LimiterChanges) > 0 {
		go changeLimiter(ctx, s, &t, os.Stdin, out)
	}
	if *httpAddr != "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: server.New(engines[0], &server.Config{Logger: slog.New(slog.DiscardHandler)})}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		tmp := *httpAddr + fmt.Sprintf(".%d", os.Getpid())
		if err := os.WriteFile(tmp, []byte(ln.Addr().String()), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, *httpAddr); err != nil {
			return err
		}
		out.line("A %s", ln.Addr())
	}
	for _, rs := range t.Runs {
		if rs.Start != StartDirect {
			continue // the harness starts it over HTTP
		}
		in, _ := json.Marshal(rs)
		wf := rs.Workflow
		if wf == "" {
			wf = WorkflowName
		}
		opts := &weir.StartOptions{ID: rs.ID}
		if rs.Queued {
			opts.Queue = t.QueueName()
		}
		for {
			_, _, err := engines[0].StartRun(ctx, wf, in, opts)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return err
			}
			time.Sleep(50 * time.Millisecond) // a restarting database
		}
	}
	for _, e := range engines {
		if err := e.Work(ctx); err != nil {
			return err
		}
	}
	// The deliverers run until every run ended: a run waiting for a payload
	// has not.
	dctx, stopDelivering := context.WithCancel(ctx)
	defer stopDelivering()
	deliver(dctx, s, &t, out)
	var prodWG sync.WaitGroup
	for _, p := range t.Producers {
		for w := range p.Writers {
			prodWG.Add(1)
			go func() {
				defer prodWG.Done()
				produce(ctx, s, &p, w, *inc, out)
			}()
		}
	}
	prodDone := make(chan struct{})
	go func() { prodWG.Wait(); close(prodDone) }()

	// Wait for every run to end, asking the store directly.
	// Runs started over HTTP are waited for through ids.json, which the
	// harness writes once every start has its answer: runs started with an
	// Idempotency-Key get ids the server derives, and a start whose reply
	// was cut is sent again, which needs a server: a worker must not exit
	// (taking its server with it) before then, even if the run has ended.
	pending := map[string]bool{}
	unresolved := map[string]bool{}
	for _, rs := range t.Runs {
		if rs.Start != StartDirect {
			unresolved[rs.ID] = true
		} else {
			pending[rs.ID] = true
		}
	}
	idsPath := filepath.Join(filepath.Dir(*trialPath), "ids.json")
	for len(pending)+len(unresolved) > 0 {
		if len(unresolved) > 0 {
			var ids map[string]string
			if b, err := os.ReadFile(idsPath); err == nil && json.Unmarshal(b, &ids) == nil {
				for spec := range unresolved {
					if id := ids[spec]; id != "" {
						pending[id] = true
						delete(unresolved, spec)
					}
				}
			}
		}
		for id := range pending {
			r, err := s.GetRun(ctx, id)
			if err == nil && r.Status.Terminal() {
				delete(pending, id)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(30 * time.Millisecond):
		}
	}
	<-prodDone
	if err := forkPhase(ctx, s, &t); err != nil {
		return err
	}
	// HTTP stream writers need a server until they are done.
	if len(t.HTTPStreams) > 0 {
		done := filepath.Join(filepath.Dir(*trialPath), "streams.done")
		for {
			if _, err := os.Stat(done); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(30 * time.Millisecond):
			}
		}
	}
	for _, g := range gates {
		g.thaw()
	}
	// Abandoned attempts of steps deaf to their context (cancels, deadlines)
	// still sleep: Close waits for them only a moment.
	cctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, e := range engines {
		_ = e.Close(cctx)
	}
	out.line("DONE")
	return nil
}

// wfEnv is what the trial workflow reaches beyond its context: its
// engine (a step asks it to cancel the step's own run), the store (a
// step looks at a hook) and the worker's output.
type wfEnv struct {
	e      *weir.Engine
	s      store.Full
	report func(string, ...any)
	out    *output
	lined  *linedWatch
}

// runWorkflow is the trial workflow: its items in order.
func runWorkflow(ctx weir.Context, rs *RunSpec, env *wfEnv) (int, error) {
	report, out := env.report, env.out
	wfSeq := map[string]int{}
	completed := 0
	for idx := range rs.Items {
		it := &rs.Items[idx]
		switch it.Kind {
		case ItemWFWrite:
			w := ctx.Stream(it.Stream)
			for j := range it.Count {
				c := Chunk(rs.Seed, wfOp(idx), it.Stream, j, 0, it.MinLen, it.MaxLen)
				if _, err := w.Write(c); err != nil {
					return 0, err
				}
				wfSeq[it.Stream]++
			}
		case ItemSleep:
			weir.Sleep(ctx, time.Duration(it.SleepMillis)*time.Millisecond)
		case ItemHook:
			if err := takePayloads(ctx, rs, it, env); err != nil {
				return 0, err
			}
		case ItemRecv:
			if err := takeMessages(ctx, it); err != nil {
				return 0, err
			}
		case ItemCancel, ItemHang:
			_, err := weir.Step(ctx, it.Name, func(sc weir.StepContext) (int, error) {
				return hangStep(sc, rs, it, env)
			}, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 10}))
			if err != nil {
				return 0, err
			}
		case ItemChild:
			wf := weir.WorkflowOf[RunSpec, int](env.e, WorkflowChild)
			c := weir.StartChild(ctx, wf, *it.Child, &weir.ChildOptions{ID: it.Child.ID})
			outcome := "ok"
			if _, err := c.Get(ctx); err != nil {
				outcome = "failed"
			}
			if _, err := fmt.Fprintf(ctx.Stream(HookStream), "child %s %s", c.ID, outcome); err != nil {
				return 0, err
			}
		case ItemStep:
			if it.Group != 0 {
				if idx > 0 && rs.Items[idx-1].Group == it.Group {
					continue // started with the group's first step
				}
				n, err := func() (int, error) {
					// A park lined meanwhile is one of a run whose steps
					// run on goroutines of their own (the report's).
					defer env.lined.inGroup(ctx.RunID())()
					var fs []*weir.Future[int]
					for j := idx; j < len(rs.Items) && rs.Items[j].Group == it.Group; j++ {
						gi := &rs.Items[j]
						fs = append(fs, weir.StepAsync(ctx, gi.Name, stepFunc(rs, gi, report, out), stepOptions(rs, gi)...))
					}
					n := 0
					for _, f := range fs {
						if _, err := f.Get(ctx); err != nil {
							if !rs.ContinueOnFail {
								return n, err
							}
							continue
						}
						n++
					}
					return n, nil
				}()
				completed += n
				if err != nil {
					return 0, err
				}
				continue
			}
			_, err := weir.Step(ctx, it.Name, stepFunc(rs, it, report, out), stepOptions(rs, it)...)
			if err != nil {
				if !rs.ContinueOnFail {
					return 0, err
				}
				continue
			}
			completed++
		}
	}
	return completed, nil
}

// takePayloads takes hook item it's payloads with its takers program and
// writes each to HookStream as it is taken. With CloseEarly a step waits
// until every payload is in the log, the hook is closed, and its payloads
// are taken until the hook says it is disposed.
func takePayloads(ctx weir.Context, rs *RunSpec, it *Item, env *wfEnv) error {
	token := HookToken(rs, it.Op)
	h, err := weir.NewHook[int](ctx, token)
	if err != nil {
		return err
	}
	w := ctx.Stream(HookStream)
	took := func(k int) error {
		_, err := fmt.Fprintf(w, "%s %d", token, k)
		return err
	}
	if it.CloseEarly {
		if _, err := weir.Step(ctx, "payloads-in", func(sc weir.StepContext) (int64, error) {
			deadline := time.Now().Add(20 * time.Second)
			for {
				hi, err := env.s.GetHook(sc, token)
				if err == nil && hi.Received >= int64(it.Payloads) {
					return hi.Received, nil
				}
				if time.Now().After(deadline) {
					return 0, fmt.Errorf("hook %s: the payloads did not come in 20s (%v)", token, err)
				}
				select {
				case <-sc.Done():
					return 0, context.Cause(sc)
				case <-time.After(10 * time.Millisecond):
				}
			}
		}, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 10})); err != nil {
			return err
		}
		h.Close(ctx)
		for {
			k, err := h.Receive(ctx)
			if errors.Is(err, weir.ErrHookDisposed) {
				return nil
			}
			if err != nil {
				return err
			}
			if err := took(k); err != nil {
				return err
			}
		}
	}
	return takeWith(ctx, it, h.Next, func(yield func(int) bool) error {
		for k, err := range h.Each(ctx) {
			if err != nil {
				return err
			}
			if !yield(k) {
				return nil
			}
		}
		return nil
	}, took)
}

// takeMessages takes ItemRecv it's messages with its takers program and
// writes "<topic> <k>" to HookStream as it takes each; then it takes the
// rest with Recv, and leaves the extra ones.
func takeMessages(ctx weir.Context, it *Item) error {
	w := ctx.Stream(HookStream)
	took := func(k int) error {
		_, err := fmt.Fprintf(w, "%s %d", it.Topic, k)
		return err
	}
	next := func() *weir.Future[int] { return weir.NextMessage[int](ctx, it.Topic) }
	// A select with nothing left to take waits on a topic no one sends
	// to: on the item's own topic it would take one of the extra messages
	// whenever one came within the select's time, which the plan never
	// counts (a select's two ops are made whatever is left, so that the
	// ops after it keep their positions).
	idle := func() *weir.Future[int] { return weir.NextMessage[int](ctx, it.Topic+".idle") }
	return takeWithIdle(ctx, it, next, idle, nil, took)
}

// takeWith takes it.Payloads values with it's takers program over an
// inbox: next makes a Future of its next value, each (nil: none) ranges
// over them until its yield says stop; took records each value taken, in
// take order. The rest are taken one by one.
func takeWith(ctx weir.Context, it *Item, next func() *weir.Future[int], each func(yield func(int) bool) error, took func(int) error) error {
	return takeWithIdle(ctx, it, next, next, each, took)
}

// takeWithIdle is takeWith whose selects made when nothing is left to take
// wait on idle's Future instead of next's.
func takeWithIdle(ctx weir.Context, it *Item, next, idle func() *weir.Future[int], each func(yield func(int) bool) error, took func(int) error) error {
	taken := 0
	get := func(f *weir.Future[int]) error {
		k, err := f.Get(ctx)
		if err != nil {
			return err
		}
		taken++
		return took(k)
	}
	for _, kind := range it.Takers {
		left := it.Payloads - taken
		switch {
		case kind == TakeSelect:
			// Its ops are taken whatever is left.
			f := next()
			if left <= 0 {
				f = idle()
			}
			if weir.Select(ctx, f, weir.NewTimer(ctx, time.Duration(it.SelectMillis)*time.Millisecond)) == 0 {
				if err := get(f); err != nil {
					return err
				}
			}
		case left <= 0:
		case kind == TakeAll2 && left >= 2:
			a, b := next(), next()
			weir.Await(ctx, a, b)
			if err := get(a); err != nil {
				return err
			}
			if err := get(b); err != nil {
				return err
			}
		case kind == TakePending && left >= 2:
			// A Future made before a take, and got after it: the take gets
			// the first value, the Future the second.
			f := next()
			if err := get(next()); err != nil {
				return err
			}
			if err := get(f); err != nil {
				return err
			}
		case kind == TakeEach && each != nil:
			n, want := 0, min(it.EachTakes, left)
			var ferr error
			if err := each(func(k int) bool {
				taken++
				if ferr = took(k); ferr != nil {
					return false
				}
				n++
				return n < want
			}); err != nil {
				return err
			}
			if ferr != nil {
				return ferr
			}
		default: // TakeReceive, TakeEach without Each, or too few left for a pair
			if err := get(next()); err != nil {
				return err
			}
		}
	}
	for taken < it.Payloads {
		if err := get(next()); err != nil {
			return err
		}
	}
	return nil
}

// hangStep is an ItemCancel or ItemHang step: it writes a chunk (its
// attempt's start is then durable), for ItemCancel asks for its run's
// cancel, then ignores its context for HangMillis.
func hangStep(sc weir.StepContext, rs *RunSpec, it *Item, env *wfEnv) (int, error) {
	w := sc.Stream("s0")
	if _, err := w.Write(Chunk(rs.Seed, it.Op, "s0", 0, sc.Attempt(), 1, 64)); err != nil {
		return 0, err
	}
	if err := w.Flush(); err != nil {
		return 0, err
	}
	if it.Kind == ItemCancel {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(sc), 10*time.Second)
		err := env.e.Cancel(ctx, sc.RunID())
		cancel()
		if err != nil {
			return 0, err
		}
	}
	env.report("hang %s %d %d", rs.ID, it.Op, sc.Attempt())
	time.Sleep(HangMillis * time.Millisecond)
	return 0, fmt.Errorf("%w: %s attempt %d hung %dms and was not stopped", errPlanned, it.Name, sc.Attempt(), HangMillis)
}

// stepFunc is step it's function.
func stepFunc(rs *RunSpec, it *Item, report func(string, ...any), out *output) func(weir.StepContext) (int, error) {
	return func(sc weir.StepContext) (int, error) {
		start := time.Now()
		n, err := runStep(sc, rs, it, report)
		if it.Limited {
			// Inside the attempt's slot: from after its grant to before
			// its release. The checker holds these spans to the limit,
			// those of the execution whose start of the attempt is in the
			// log (its epoch, the S lines).
			weir.ChargeLimiter(sc, sc.Attempt())
			epoch, _ := harness.StepEpoch(sc)
			out.line("L %s %d %d %d %d %d", rs.ID, it.Op, sc.Attempt(), epoch, start.UnixNano(), time.Now().UnixNano())
		}
		if errors.Is(err, weir.ErrFenced) || errors.Is(err, store.ErrLeaseLost) {
			// A zombie attempt: another worker took the run over.
			out.line("Z %s %d %d %v", rs.ID, it.Op, sc.Attempt(), err)
		}
		return n, err
	}
}

func stepOptions(rs *RunSpec, it *Item) []weir.StepOption {
	opts := []weir.StepOption{weir.WithRetry(weir.RetryPolicy{MaxAttempts: it.MaxAttempts})}
	if it.Limited {
		opts = append(opts, weir.WithLimiter(limiterName(rs.Prefix), &weir.LimitOptions{Key: it.LimitKey, Priority: it.LimitPriority}))
	}
	if it.TimeoutMillis > 0 {
		opts = append(opts, weir.WithTimeout(time.Duration(it.TimeoutMillis)*time.Millisecond))
	}
	return opts
}

// deliver starts a deliverer for each hook of the trial's runs: payload k
// goes after payload k-1 is in the log, with the key "k<k>". Every worker
// process delivers, so a killed one is covered, and the keys make them one.
// A deliverer ends when its payloads are in, or its run ended, or ctx ends.
func deliver(ctx context.Context, s store.Full, t *Trial, out *output) {
	for i := range t.Runs {
		rs := &t.Runs[i]
		for j := range rs.Items {
			if it := &rs.Items[j]; it.Kind == ItemRecv {
				go sendMessages(ctx, s, rs, it, out)
			}
		}
		for j := range rs.Items {
			it := &rs.Items[j]
			if it.Kind != ItemHook {
				continue
			}
			go func() {
				token := HookToken(rs, it.Op)
				for k := 0; k < it.Payloads; {
					p := []byte(strconv.Itoa(k))
					_, err := s.DeliverHook(ctx, &store.DeliverHookParams{Token: token, Payload: p,
						IdempotencyKey: fmt.Sprintf("k%d", k), RequestDigest: p})
					switch {
					case err == nil:
						k++
					case errors.Is(err, store.ErrGone):
						return // the run ended
					case errors.Is(err, store.ErrKeyReused), errors.Is(err, store.ErrInvalid):
						out.line("V hook %s payload %d: %v", token, k, err)
						return
					default: // not created yet, or a restarting database
						select {
						case <-ctx.Done():
							return
						case <-time.After(20 * time.Millisecond):
						}
					}
				}
			}()
		}
	}
}

// sendMessages sends ItemRecv it's messages to its run: message k after
// message k-1 is in the log, with the key "m<k>" (every worker process
// sends them all; the keys make them one), Payloads the run takes and
// Extra it leaves. It ends when they are in, or the run ended, or ctx.
func sendMessages(ctx context.Context, s store.Full, rs *RunSpec, it *Item, out *output) {
	pace := rand.New(rand.NewPCG(rs.Seed, uint64(len(it.Topic))))
	for k := 0; k < it.Payloads+it.Extra; {
		p := []byte(strconv.Itoa(k))
		// A run's keys are the run's, not a topic's: the key names both.
		_, err := s.SendMessage(ctx, &store.SendMessageParams{RunID: rs.ID, Topic: it.Topic, Payload: p,
			IdempotencyKey: fmt.Sprintf("%s/m%d", it.Topic, k), RequestDigest: p})
		switch {
		case err == nil:
			k++
			sleepCtx(ctx, time.Duration(pace.IntN(30))*time.Millisecond) // some before the run asks, some after
		case errors.Is(err, store.ErrGone):
			return // the run ended
		case errors.Is(err, store.ErrKeyReused), errors.Is(err, store.ErrInvalid):
			out.line("V message %s %s %d: %v", rs.ID, it.Topic, k, err)
			return
		default: // the run not created yet, or a restarting database
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

// wfOp keys the bytes of a workflow write item.
func wfOp(idx int) int64 { return -int64(idx) - 1 }

var errPlanned = errors.New("planned failure")

func runStep(sc weir.StepContext, rs *RunSpec, it *Item, report func(string, ...any)) (int, error) {
	a := sc.Attempt()
	if a <= int64(it.HangUpTo) {
		// Write, then outlive the timeout, deaf to the context: the engine
		// must fail the attempt and fence it; its late write is refused.
		o := it.Outputs
		if len(o) > 0 {
			w := sc.Stream(o[0].Stream)
			_, _ = w.Write(Chunk(rs.Seed, it.Op, o[0].Stream, 0, it.variant(a), o[0].MinLen, o[0].MaxLen))
			_ = w.Flush()
		}
		report("hang %s %d %d", rs.ID, it.Op, a)
		time.Sleep(time.Duration(2*it.TimeoutMillis) * time.Millisecond)
		if len(o) > 0 {
			w := sc.Stream(o[0].Stream)
			_, _ = w.Write(Chunk(rs.Seed, it.Op, o[0].Stream, 1, it.variant(a), o[0].MinLen, o[0].MaxLen))
			_ = w.Flush()
		}
		return 0, fmt.Errorf("%w: %s attempt %d hung", errPlanned, it.Name, a)
	}
	failing := it.Final || a <= int64(it.FailUpTo)
	fail := func() (int, error) {
		report("fail %s %d %d", rs.ID, it.Op, a)
		err := fmt.Errorf("%w: %s attempt %d", errPlanned, it.Name, a)
		if it.Final && a > int64(it.FailUpTo) {
			return 0, weir.NonRetryable(err)
		}
		return 0, err
	}
	ws := make([]*weir.Writer, len(it.Outputs))
	counts := make([]int, len(it.Outputs))
	total := 0
	for i := range it.Outputs {
		ws[i] = sc.Stream(it.Outputs[i].Stream)
		counts[i] = it.CountOn(&it.Outputs[i], a)
		total += counts[i]
	}
	// Round robin over the outputs.
	written := 0
	for seq := 0; written < total; seq++ {
		for i := range it.Outputs {
			if seq >= counts[i] {
				continue
			}
			if failing && written == it.FailAfter {
				return fail()
			}
			o := &it.Outputs[i]
			c := Chunk(rs.Seed, it.Op, o.Stream, seq, it.variant(a), o.MinLen, o.MaxLen)
			if _, err := ws[i].Write(c); err != nil {
				return 0, err
			}
			written++
			if written%it.FlushEvery == 0 {
				for _, w := range ws {
					if err := w.Flush(); err != nil {
						return 0, err
					}
				}
				report("ack %s %d %d %d", rs.ID, it.Op, a, written)
			}
			if it.SleepMicros > 0 {
				time.Sleep(time.Duration(it.SleepMicros) * time.Microsecond)
			}
			if err := sc.Err(); err != nil {
				return 0, context.Cause(sc)
			}
		}
	}
	if failing {
		return fail()
	}
	return written, nil
}

// producerWriter is the writer id of producer w.
func producerWriter(w int) string { return fmt.Sprintf("prod/%d", w) }

// produce appends producer writer w's chunks from seq 0, paging at random;
// sometimes it steps back and resends. Everything already acknowledged by an
// earlier incarnation must come back as a retransmit.
func produce(ctx context.Context, s store.Full, p *ProducerSpec, w, inc int, out *output) {
	r := rand.New(rand.NewPCG(p.Seed, uint64(w)<<32|uint64(inc)))
	var id int64
	for id == 0 {
		info, err := s.OpenStream(ctx, &store.OpenStreamParams{Path: p.Path, Create: true})
		if err == nil {
			id = info.ID
			break
		}
		if ctx.Err() != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	seq := 0
	for seq < p.Count {
		n := min(p.Count-seq, 1+r.IntN(40))
		chunks := make([][]byte, n)
		for i := range chunks {
			chunks[i] = Chunk(p.Seed, int64(w), "prod", seq+i, 0, p.MinLen, p.MaxLen)
		}
		res, err := s.Append(ctx, &store.AppendParams{StreamID: id, Writer: producerWriter(w), FirstSeq: int64(seq), Chunks: chunks})
		switch {
		case err == nil:
			for _, a := range res.Acks {
				if a.Outcome == stream.Adopted {
					out.line("V producer %s writer %d: attempt-0 chunk adopted at offset %d", p.Path, w, a.Offset)
				}
			}
			seq += n
			out.line("P -1 prod %d %d", w, seq)
			if r.IntN(6) == 0 {
				seq = max(0, seq-r.IntN(30)) // resend some, paged otherwise
			}
		case errors.Is(err, stream.ErrConflict) || errors.Is(err, stream.ErrGap) || errors.Is(err, stream.ErrMode) ||
			errors.Is(err, stream.ErrWriterFinished) || errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrTooLarge):
			out.line("V producer %s writer %d seq %d: %v", p.Path, w, seq, err)
			return
		default:
			if ctx.Err() != nil {
				return
			}
			time.Sleep(20 * time.Millisecond) // a restarting database
		}
		time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
	}
}

// newChildKiller returns what a worker does after each Record: while the
// trial's child-kills have not all struck (a file in dir marks each), it
// kills itself right after the Advance that ended a child run.
func newChildKiller(t *Trial, dir string, out *output) func(p *store.AdvanceParams) {
	strikes := 0
	for _, f := range t.Faults {
		if f.Kind == FaultChildKill {
			strikes = f.After
		}
	}
	if strikes == 0 {
		return nil
	}
	children := map[string]bool{}
	for _, rs := range t.Runs {
		for _, it := range rs.Items {
			if it.Kind == ItemChild {
				children[it.Child.ID] = true
			}
		}
	}
	return func(p *store.AdvanceParams) {
		if !p.Status.Terminal() || !children[p.RunID] {
			return
		}
		struck, _ := filepath.Glob(filepath.Join(dir, "child-kill.*"))
		if len(struck) >= strikes {
			return
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("child-kill.%d", len(struck))), []byte(p.RunID), 0o644); err == nil {
			out.line("X child-kill %s", p.RunID)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
}

// gatedStore lets the harness freeze one engine: while frozen, every store
// call the engine makes blocks (it ignores its context: a paused process
// does not see time pass), while its workflow and step code runs on.
// afterRecord, if set, runs after each Record that succeeded.
type gatedStore struct {
	store.Full
	mu          sync.Mutex
	gate        chan struct{} // non-nil while frozen
	waiting     int           // calls blocked in pass
	waited      chan struct{} // closed when waiting grows (blocked)
	afterRecord func(p *store.AdvanceParams)
	lined       *linedWatch // told of lined parks and claims
	out         *output     // told of attempts' starts (S); nil: not told
}

func (g *gatedStore) freeze() {
	g.mu.Lock()
	if g.gate == nil {
		g.gate = make(chan struct{})
	}
	g.mu.Unlock()
}

func (g *gatedStore) thaw() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

// pass returns at once unless g is frozen, and then when it thaws.
func (g *gatedStore) pass() {
	g.mu.Lock()
	c := g.gate
	if c != nil {
		g.waiting++
		if g.waited != nil {
			close(g.waited)
			g.waited = nil
		}
	}
	g.mu.Unlock()
	if c == nil {
		return
	}
	<-c
	g.mu.Lock()
	g.waiting--
	g.mu.Unlock()
}

// blocked returns how many calls wait in pass, and a channel closed when
// one more does: a test waits for a call to block without sleeping.
func (g *gatedStore) blocked() (int, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.waited == nil {
		g.waited = make(chan struct{})
	}
	return g.waiting, g.waited
}

func (g *gatedStore) ClaimRuns(ctx context.Context, p *store.ClaimRunsParams) ([]*store.Run, error) {
	g.pass()
	runs, err := g.Full.ClaimRuns(ctx, p)
	g.lined.claimed(runs)
	return runs, err
}

func (g *gatedStore) AdmitRuns(ctx context.Context, p *store.AdmitRunsParams) ([]*store.Run, error) {
	g.pass()
	return g.Full.AdmitRuns(ctx, p)
}

func (g *gatedStore) RenewLease(ctx context.Context, p *store.RenewLeaseParams) (bool, error) {
	g.pass()
	return g.Full.RenewLease(ctx, p)
}

func (g *gatedStore) ListEvents(ctx context.Context, id string, after int64) ([]store.Event, error) {
	g.pass()
	return g.Full.ListEvents(ctx, id, after)
}

func (g *gatedStore) Advance(ctx context.Context, p *store.AdvanceParams) error {
	g.pass()
	err := g.Full.Advance(ctx, p)
	if err == nil {
		g.recorded(p)
	}
	return err
}

// recorded tells the harness of a record p that succeeded: the attempts
// it starts, a lined park, and afterRecord (which may kill the process: the
// starts are said first).
func (g *gatedStore) recorded(p *store.AdvanceParams) {
	if g.out != nil {
		// Which execution's run of an attempt the log holds: the one whose
		// start it took. An execution that lost its lease before its
		// attempt's start was durable leaves the attempt's number to the
		// next one, which runs it again (checkLimiter).
		for _, e := range p.Events {
			if e.Type == store.EventStepStarted {
				g.out.line("S %s %d %d %d", p.RunID, e.Op, e.Attempt, p.LeaseEpoch)
			}
		}
	}
	g.lined.advanced(p)
	if g.afterRecord != nil {
		g.afterRecord(p)
	}
}

func (g *gatedStore) OpenStream(ctx context.Context, p *store.OpenStreamParams) (*store.StreamInfo, error) {
	g.pass()
	return g.Full.OpenStream(ctx, p)
}

func (g *gatedStore) Append(ctx context.Context, p *store.AppendParams) (*store.AppendResult, error) {
	g.pass()
	return g.Full.Append(ctx, p)
}

func (g *gatedStore) GetRun(ctx context.Context, id string) (*store.Run, error) {
	g.pass()
	return g.Full.GetRun(ctx, id)
}

// capabilities is every optional capability of a store the engine or its
// server looks for by type (store.LimiterWatcherOf and its like, all
// through the store package's as): both real stores have them all. A
// capability added to the store package must be added here and to
// engineGate, or torture engines run without it (gate_test.go checks
// the list against the store package).
type capabilities interface {
	store.Counter
	store.LeaseRenewer
	store.StepAppender
	store.LogSizer
	store.RunWatcher
	store.LimiterWatcher
	store.WriterStatuses
	store.WorldSizer
}

// forEngine is g as its engine sees it: with its store's optional
// capabilities, each through the gate. A wrapper hides a store's optional
// interfaces (store.LimiterWatcherOf and its like look for them by type),
// and an engine without them runs its fallbacks, not the production
// paths: without a limiter watcher it polls its limiters (it never waits
// in a store line's seats, so it never parks lined or evicts,
// lineseats.go), without a lease renewer it renews one run a call,
// without a step appender it opens a step's stream and appends to it in
// two commits, and so on.
//
// One wrapper has them all, rather than one type per subset of them: both
// real stores have every one, so a store that lacks one is refused here
// (an error, not a wrapper claiming what the store cannot do). Nor does
// the wrapper have an Unwrap method, which store's as would follow: the
// engine would then call the store itself, past the gate.
func (g *gatedStore) forEngine() (store.Full, error) {
	c, ok := g.Full.(capabilities)
	if !ok {
		return nil, fmt.Errorf("torture: store %T lacks an optional capability the engine gate forwards (capabilities)", g.Full)
	}
	return &engineGate{gatedStore: g, c: c}, nil
}

// engineGate is a gatedStore with its store's optional capabilities, each
// call through the gate: a frozen engine's calls block, watches and
// in-memory ones (Counts, CreatedStream) too, as every call of a stalled
// process would. None of them may pass while frozen: a lease renewed in
// one call (RenewLeases) would keep a frozen engine's runs, and a step
// stream opened and appended in one (OpenAppend) would write past the
// freeze.
type engineGate struct {
	*gatedStore
	c capabilities
}

var _ capabilities = (*engineGate)(nil)

func (g *engineGate) Counts() store.Counts {
	g.pass()
	return g.c.Counts()
}

func (g *engineGate) RenewLeases(ctx context.Context, ps []store.RenewLeaseParams) ([]store.RenewLeaseResult, error) {
	g.pass()
	return g.c.RenewLeases(ctx, ps)
}

// OpenAppend records what Advance would (its Start, or its Then), so the
// harness hears of those records as of Advance's (recorded): a step's
// outcome riding in Then may end a child run or park a run lined.
func (g *engineGate) OpenAppend(ctx context.Context, p *store.OpenAppendParams) (*store.OpenAppendResult, error) {
	g.pass()
	res, err := g.c.OpenAppend(ctx, p)
	if err != nil {
		return res, err
	}
	if p.Start != nil {
		g.recorded(p.Start) // recorded whether the stream was created or not
	}
	if p.Then != nil && res.Append != nil {
		g.recorded(p.Then) // recorded only with the append
	}
	return res, nil
}

func (g *engineGate) LogBytes(ctx context.Context, run string) (int64, error) {
	g.pass()
	return g.c.LogBytes(ctx, run)
}

func (g *engineGate) WatchRun(run string) (<-chan struct{}, func()) {
	g.pass()
	return g.c.WatchRun(run)
}

func (g *engineGate) CreatedStream(path string) (*store.StreamInfo, bool) {
	g.pass()
	return g.c.CreatedStream(path)
}

func (g *engineGate) WatchLimiter(name string) (<-chan struct{}, func()) {
	g.pass()
	return g.c.WatchLimiter(name)
}

func (g *engineGate) WatchLimiterLine(name string) (<-chan struct{}, func()) {
	g.pass()
	return g.c.WatchLimiterLine(name)
}

func (g *engineGate) WatchSlot(name, holder string) (<-chan struct{}, func()) {
	g.pass()
	return g.c.WatchSlot(name, holder)
}

func (g *engineGate) WriterStatus(ctx context.Context, id int64, writer string) (stream.Status, int64, bool, bool, error) {
	g.pass()
	return g.c.WriterStatus(ctx, id, writer)
}

func (g *engineGate) WorldItemSize(ctx context.Context, ref store.WorldItemRef) (int64, error) {
	g.pass()
	return g.c.WorldItemSize(ctx, ref)
}

// A frozen engine's limiter calls block too: its slots then lapse with
// their leases, as a dead worker's do.

func (g *gatedStore) AcquireSlot(ctx context.Context, p *store.AcquireSlotParams) (*limit.Decision, error) {
	g.pass()
	return g.Full.AcquireSlot(ctx, p)
}

func (g *gatedStore) RenewSlot(ctx context.Context, p *store.RenewSlotParams) (bool, error) {
	g.pass()
	return g.Full.RenewSlot(ctx, p)
}

func (g *gatedStore) SlotHeld(ctx context.Context, p *store.SlotHeldParams) (time.Time, bool, error) {
	g.pass()
	return g.Full.SlotHeld(ctx, p)
}

func (g *gatedStore) ReleaseSlot(ctx context.Context, p *store.ReleaseSlotParams) (bool, error) {
	g.pass()
	return g.Full.ReleaseSlot(ctx, p)
}
