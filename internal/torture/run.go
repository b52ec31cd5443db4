package torture

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configure RunTrials.
type Options struct {
	Trials int
	Seed   uint64
	// Store is "sqlite:DIR" (a fresh file per trial in DIR; empty DIR: a
	// temporary one) or a postgres:// URL (trials share it, under their own
	// run ids).
	Store string
	// Faults lists the fault kinds to inject; nil: every kind the store
	// allows.
	Faults []FaultKind
	// Scale multiplies runs and chunks (0: 1).
	Scale float64
	// WorkerCommand builds the command of a worker process with the given
	// arguments; the process must call WorkerMain with them. Default: this
	// executable with WorkerEnv=1.
	WorkerCommand func(args []string) *exec.Cmd
	// TrialTimeout fails a trial that has not ended by then (liveness).
	// Default 90s.
	TrialTimeout time.Duration
	// KeepGoing runs every trial even after a violation.
	KeepGoing bool
	// HTTP starts some runs over HTTP through a proxy that cuts replies,
	// from the worker processes' HTTP servers (which SIGKILLs hit too).
	HTTP bool
	// Agents adds the agent shapes (GenOptions.Agents).
	Agents bool
	// PGRestart restarts the PostgreSQL cluster for the pg-restart fault,
	// which only a caller that names it in Faults gets; default runs
	// `pg_ctlcluster --skip-systemctl-redirect VERSION main restart` with
	// the machine's only cluster version.
	PGRestart func(ctx context.Context) error
	// Log receives one line per trial (nil: none).
	Log io.Writer
}

// Report sums up RunTrials.
type Report struct {
	Trials   int
	Seed     uint64
	Stats    Stats
	Planned  map[FaultKind]int // in the schedules
	Injected map[FaultKind]int // actually struck (a worker that finished first escapes)
	Workers  int               // worker processes started
	// HTTPRequests counts the HTTP stream writers' requests, resends
	// included.
	HTTPRequests int64
	Fenced       int // zombie attempts stopped: ErrFenced or lease lost
	Failures     []TrialFailure
	Duration     time.Duration
	StoreKind    string
	FaultKinds   []FaultKind
}

// TrialFailure is a trial with violations, and the seed that replays it.
type TrialFailure struct {
	Seed       uint64
	Violations []Violation
	Dir        string // the trial's files, kept
}

// DefaultFaults are the fault kinds a trial plans unless told: every kind
// but pg-restart, which restarts a service of the machine and so is only
// planned when the caller names it.
func DefaultFaults(dsn string) []FaultKind {
	return []FaultKind{FaultKill, FaultCommitCrash, FaultStop, FaultFreeze, FaultStreamCut, FaultStreamKill, FaultChildKill}
}

// DefaultWorkerCommand re-executes this program with WorkerEnv=1.
func DefaultWorkerCommand(args []string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), WorkerEnv+"=1")
	return cmd
}

func defaultPGRestart(ctx context.Context) error {
	versions, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(versions) != 1 {
		return fmt.Errorf("pg restart: want one cluster version in /etc/postgresql (%v); set Options.PGRestart", err)
	}
	out, err := exec.CommandContext(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", versions[0].Name(), "main", "restart").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg restart: %v: %s", err, out)
	}
	return nil
}

// RunTrials runs opts.Trials trials, seeds opts.Seed, opts.Seed+1, …, and
// checks each. It returns an error only when the harness itself fails;
// violations are in the report.
func RunTrials(ctx context.Context, opts Options) (*Report, error) {
	if opts.WorkerCommand == nil {
		opts.WorkerCommand = DefaultWorkerCommand
	}
	if opts.TrialTimeout == 0 {
		opts.TrialTimeout = 90 * time.Second
	}
	if opts.PGRestart == nil {
		opts.PGRestart = defaultPGRestart
	}
	if opts.Faults == nil {
		opts.Faults = DefaultFaults(opts.Store)
	}
	pg := IsPostgres(opts.Store)
	rep := &Report{Seed: opts.Seed, Planned: map[FaultKind]int{}, Injected: map[FaultKind]int{}, FaultKinds: opts.Faults, StoreKind: "sqlite"}
	if pg {
		rep.StoreKind = "postgres"
	}
	base := ""
	if !pg {
		base = strings.TrimPrefix(opts.Store, "sqlite:")
		if !strings.HasPrefix(opts.Store, "sqlite:") {
			return nil, fmt.Errorf("store %q: want sqlite:DIR or postgres://…", opts.Store)
		}
	}
	tmp, err := os.MkdirTemp(base, "weir-torture-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	nonce := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff)
	for i := range opts.Trials {
		if ctx.Err() != nil {
			break
		}
		seed := opts.Seed + uint64(i)
		prefix := ""
		if pg {
			prefix = fmt.Sprintf("t%x-%s", seed, nonce)
		}
		t := Generate(seed, prefix, GenOptions{Faults: opts.Faults, Postgres: pg, Scale: opts.Scale, HTTP: opts.HTTP, Agents: opts.Agents})
		dir := filepath.Join(tmp, fmt.Sprintf("trial-%d", seed))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return rep, err
		}
		dsn := opts.Store
		if !pg {
			dsn = "sqlite:" + filepath.Join(dir, "weir.db")
		}
		tstart := time.Now()
		tr, err := runTrial(ctx, &opts, t, dir, dsn)
		if err != nil {
			return rep, fmt.Errorf("trial seed %d: %w", seed, err)
		}
		rep.Trials++
		rep.Workers += tr.workers
		rep.Fenced += tr.fenced
		for _, f := range t.Faults {
			k := f.Kind
			if k == FaultKill && t.HasHTTP() {
				k = FaultServerKill
			}
			switch k {
			case FaultStreamCut:
				continue
			case FaultChildKill:
				rep.Planned[k] += f.After // the first After workers strike once each
				continue
			}
			rep.Planned[k]++
		}
		_, nCuts := streamCuts(t)
		rep.Planned[FaultStreamCut] += nCuts
		rep.HTTPRequests += tr.httpRequests
		for k, n := range tr.injected {
			rep.Injected[k] += n
		}
		var viols []Violation
		viols = append(viols, tr.violations...)
		for k, n := range tr.injected {
			if k != FaultProxyCut && k != FaultStreamCut {
				t.workersLost += n
			}
		}
		if ctx.Err() == nil {
			cv, st, err := checkTrial(ctx, dsn, t)
			if err != nil {
				viols = append(viols, Violation{"state", "checker", err.Error()})
			}
			viols = append(viols, cv...)
			rep.Stats.add(st)
		}
		if opts.Log != nil {
			lined := ""
			if t.LineRuns > 0 || len(t.LimiterChanges) > 0 {
				lined = fmt.Sprintf(" (LineRuns %d, Concurrency %d: %d lined parks, %d lined claims; limiter changes %d of %d)",
					t.LineRuns, t.Concurrency, t.lined.parks, t.lined.claims, t.lined.changes, len(t.LimiterChanges))
			}
			fmt.Fprintf(opts.Log, "trial %d seed %d: %d runs%s, %d faults struck %v, %d workers, %s: %d violations\n",
				i+1, seed, len(t.Runs), lined, tr.total(), tr.injected, tr.workers, time.Since(tstart).Round(time.Millisecond), len(viols))
		}
		if len(viols) > 0 {
			keep := filepath.Join(os.TempDir(), fmt.Sprintf("weir-torture-failed-%d", seed))
			_ = os.RemoveAll(keep)
			_ = os.Rename(dir, keep)
			rep.Failures = append(rep.Failures, TrialFailure{Seed: seed, Violations: viols, Dir: keep})
			if !opts.KeepGoing {
				break
			}
			continue
		}
		_ = os.RemoveAll(dir)
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

func checkTrial(ctx context.Context, dsn string, t *Trial) ([]Violation, Stats, error) {
	s, err := OpenStore(ctx, dsn)
	if err != nil {
		return nil, Stats{}, err
	}
	defer s.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return checkOverHTTP(cctx, s, t)
}

type trialResult struct {
	violations   []Violation
	injected     map[FaultKind]int
	workers      int
	fenced       int
	httpRequests int64
}

func (r *trialResult) total() int {
	n := 0
	for _, v := range r.injected {
		n += v
	}
	return n
}

type proc struct {
	id     int
	cmd    *exec.Cmd
	stdin  io.WriteCloser // limiter changes to make (nil: the trial has none)
	stderr *bytes.Buffer
	killed bool
	done   bool // printed DONE
	exited bool
	addr   string // where it serves HTTP ("A addr")
}

// servers are the live worker processes' HTTP addresses, for the stream
// writers' proxy: each connection goes to one of them at random.
type servers struct {
	mu    sync.Mutex
	addrs map[int]string
	r     *rand.Rand
}

func (s *servers) set(id int, addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if addr == "" {
		delete(s.addrs, id)
	} else {
		s.addrs[id] = addr
	}
}

func (s *servers) pick() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var as []string
	for _, a := range s.addrs {
		as = append(as, a)
	}
	if len(as) == 0 {
		return ""
	}
	slices.Sort(as)
	return as[s.r.IntN(len(as))]
}

type procMsg struct {
	p    *proc
	line string
	exit bool
	err  error
}

// httpSettle is how long a trial waits for its HTTP clients once the runs
// ended. It must outlast a client's request timeout (10 s) plus a retry: a
// start whose reply was cut may be retried against a server that is still
// frozen or restarting, and that retry may take a whole timeout.
const httpSettle = 30 * time.Second

// runTrial runs t's workers until every run has ended, striking its faults.
func runTrial(ctx context.Context, opts *Options, t *Trial, dir, dsn string) (*trialResult, error) {
	res := &trialResult{injected: map[FaultKind]int{}}
	tb, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	trialPath := filepath.Join(dir, "trial.json")
	if err := os.WriteFile(trialPath, tb, 0o644); err != nil {
		return nil, err
	}
	msgs := make(chan procMsg, 256)
	var procs []*proc
	var wg sync.WaitGroup
	incarnation := 0
	addrFile := ""
	if t.HasHTTP() {
		addrFile = filepath.Join(dir, "addr")
	}
	srvs := &servers{addrs: map[int]string{}, r: rand.New(rand.NewPCG(t.Seed, 0x5e7))}
	start := func() error {
		incarnation++
		args := []string{"--store", dsn, "--trial", trialPath, "--incarnation", fmt.Sprint(incarnation)}
		if addrFile != "" {
			args = append(args, "--http", addrFile)
		}
		cmd := opts.WorkerCommand(args)
		p := &proc{id: incarnation, cmd: cmd, stderr: &bytes.Buffer{}}
		// Its stderr is kept in the trial's files too (a failed trial's
		// are kept): the engine's warnings, and its goroutines' stacks
		// when a trial outlives its timeout (SIGQUIT).
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("worker-%d.log", incarnation)))
		if err != nil {
			return err
		}
		cmd.Stderr = io.MultiWriter(&limitedBuffer{b: p.stderr, max: 64 << 10}, logf)
		out, err := cmd.StdoutPipe()
		if err != nil {
			logf.Close()
			return err
		}
		if len(t.LimiterChanges) > 0 {
			if p.stdin, err = cmd.StdinPipe(); err != nil {
				logf.Close()
				return err
			}
		}
		if err := cmd.Start(); err != nil {
			logf.Close()
			return err
		}
		res.workers++
		procs = append(procs, p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				msgs <- procMsg{p: p, line: sc.Text()}
			}
			err := cmd.Wait()
			logf.Close()
			msgs <- procMsg{p: p, exit: true, err: err}
		}()
		return nil
	}
	defer func() {
		for _, p := range procs {
			if !p.exited {
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
				_ = p.cmd.Process.Kill()
			}
		}
		go func() { wg.Wait() }()
	}()
	for range t.Workers {
		if err := start(); err != nil {
			return nil, err
		}
	}

	type httpResult struct {
		ids   map[string]string
		cut   int64
		viols []Violation
		err   error
	}
	httpDone := make(chan httpResult, 1)
	type streamResult struct {
		run *httpRun
		err error
	}
	streamDone := make(chan streamResult, 1)
	streamProgress := make(chan struct{}, 4096)
	var streams *streamResult // once the stream writers are done
	if len(t.HTTPStreams) > 0 {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			run, err := runHTTPStreams(sctx, t, srvs.pick, func() {
				select {
				case streamProgress <- struct{}{}:
				default:
				}
			})
			streamDone <- streamResult{run, err}
		}()
	} else {
		streams = &streamResult{}
	}
	if addrFile != "" {
		hctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			ids, cut, viols, err := startOverHTTP(hctx, t, addrFile, t.HTTPCuts)
			httpDone <- httpResult{ids, cut, viols, err}
		}()
	}
	finish := func() (*trialResult, error) {
		if streams == nil { // not expected: the workers wait for the writers
			select {
			case sr := <-streamDone:
				streams = &sr
			case <-time.After(httpSettle):
				return nil, errors.New("the HTTP stream writers did not finish though every worker exited")
			}
		}
		if streams.err != nil {
			return nil, streams.err
		}
		if h := streams.run; h != nil {
			t.http = h
			res.injected[FaultStreamCut] += int(h.cut)
			res.httpRequests += h.requests
			res.violations = append(res.violations, h.viols...)
		}
		if addrFile == "" {
			return res, nil
		}
		select {
		case h := <-httpDone:
			if h.err != nil {
				return nil, h.err
			}
			res.injected[FaultProxyCut] += int(h.cut)
			res.violations = append(res.violations, h.viols...)
			for i := range t.Runs {
				if id := h.ids[t.Runs[i].ID]; id != "" {
					t.Runs[i].ID = id
				}
			}
			return res, nil
		case <-time.After(httpSettle):
			return nil, errors.New("the HTTP starts did not finish though every run ended")
		}
	}
	deadline := time.NewTimer(opts.TrialTimeout)
	defer deadline.Stop()
	progress, fi := 0, 0
	var sched []Fault // the faults struck at progress events (not stream-cut: the proxy's)
	for _, f := range t.Faults {
		if f.Kind != FaultStreamCut && f.Kind != FaultChildKill {
			sched = append(sched, f)
		}
	}
	busy := false // a fault is being applied
	faultDone := make(chan error, 1)
	crashes := 0
	live := func() int {
		n := 0
		for _, p := range procs {
			if !p.exited {
				n++
			}
		}
		return n
	}
	anyDone := false
	// The limiter changes, in order: the next is sent to a live worker
	// once the workers reported its After limited attempts, and again to
	// another if that one exits before it says the change is made (a
	// change made twice is the same PUT twice).
	nextChange, limitedSeen := 0, 0
	var changing *proc // the worker asked to make nextChange
	sendChange := func(p *proc) {
		if changing != nil || nextChange >= len(t.LimiterChanges) || limitedSeen < t.LimiterChanges[nextChange].After ||
			p == nil || p.exited || p.done || p.stdin == nil {
			return
		}
		if _, err := fmt.Fprintf(p.stdin, "%d\n", nextChange); err == nil {
			changing = p
		}
	}
	anyLive := func() *proc {
		for _, p := range procs {
			if !p.exited && !p.done {
				return p
			}
		}
		return nil
	}
	// serving is the newest live process that serves HTTP: HTTP stream
	// writers' progress is counted as its.
	serving := func() *proc {
		for i := len(procs) - 1; i >= 0; i-- {
			if p := procs[i]; !p.exited && !p.done && p.addr != "" {
				return p
			}
		}
		return nil
	}
	// onProgress counts a progress event of p (of an HTTP stream writer:
	// fromHTTP) and strikes the next fault once its count is reached.
	onProgress := func(p *proc, fromHTTP bool) {
		progress++
		// Stream faults left over once the stream writers are done escape.
		for streams != nil && fi < len(sched) && sched[fi].Kind == FaultStreamKill {
			fi++
		}
		if busy || fi >= len(sched) || progress < sched[fi].After || p == nil || p.exited || p.done {
			return
		}
		f := sched[fi]
		if f.Kind == FaultStreamKill && !fromHTTP {
			return // mid-stream: on a stream writer's progress
		}
		fi++
		busy = true
		kind := f.Kind
		if kind == FaultKill && addrFile != "" {
			kind = FaultServerKill // this worker serves the HTTP API
		}
		res.injected[kind]++
		go func() { faultDone <- strike(ctx, opts, f, p) }()
		if f.Kind == FaultKill || f.Kind == FaultCommitCrash || f.Kind == FaultStreamKill {
			p.killed = true
		}
	}
	for {
		select {
		case <-ctx.Done():
			return res, nil
		case <-streamProgress:
			onProgress(serving(), true)
		case sr := <-streamDone:
			streams = &sr
			// The workers wait for this file before they exit.
			if err := os.WriteFile(filepath.Join(dir, "streams.done"), nil, 0o644); err != nil {
				return nil, err
			}
		case <-deadline.C:
			dumped := dumpStacks(procs, msgs)
			res.violations = append(res.violations, Violation{"state", "trial", fmt.Sprintf("liveness: the runs did not all end within %v (%d progress events, %d faults struck; the stacks of %d live workers are in their worker-N.log)", opts.TrialTimeout, progress, res.total(), dumped)})
			return res, nil
		case err := <-faultDone:
			busy = false
			if err != nil {
				return nil, err
			}
		case m := <-msgs:
			p := m.p
			if m.exit {
				p.exited = true
				srvs.set(p.id, "")
				if changing == p {
					changing = nil
				}
				switch {
				case p.done:
					anyDone = true
				case p.killed:
				default:
					// A worker died by itself (e.g. its database restarted
					// under it): start another, within reason.
					crashes++
					if crashes > 20 {
						return nil, fmt.Errorf("worker %d exited: %v: %s", p.id, m.err, tail(p.stderr))
					}
				}
				if !anyDone && live() < t.Workers {
					if err := start(); err != nil {
						return nil, err
					}
				}
				if live() == 0 && anyDone {
					return finish()
				}
				sendChange(anyLive())
				continue
			}
			switch {
			case m.line == "DONE":
				p.done = true
			case strings.HasPrefix(m.line, "Z "):
				res.fenced++
			case strings.HasPrefix(m.line, "L "):
				if a, ok := parseAttemptSpan(m.line[2:]); ok {
					t.limited = append(t.limited, a)
				} else {
					res.violations = append(res.violations, Violation{"worker", fmt.Sprintf("worker %d", p.id), "a malformed limited attempt: " + m.line})
				}
				limitedSeen++
				sendChange(p)
			case strings.HasPrefix(m.line, "S "):
				if !t.noteStarted(m.line[2:]) {
					res.violations = append(res.violations, Violation{"worker", fmt.Sprintf("worker %d", p.id), "a malformed attempt start: " + m.line})
				}
			case strings.HasPrefix(m.line, "N "):
				if !t.lined.note(m.line[2:]) {
					res.violations = append(res.violations, Violation{"worker", fmt.Sprintf("worker %d", p.id), "a malformed lined report: " + m.line})
				}
			case strings.HasPrefix(m.line, "C "):
				var i int
				if _, err := fmt.Sscanf(m.line[2:], "%d", &i); err == nil && changing == p && i == nextChange {
					t.lined.changes++
					nextChange, changing = nextChange+1, nil
					sendChange(p)
				}
			case strings.HasPrefix(m.line, "X "):
				// It kills itself (FaultChildKill).
				p.killed = true
				res.injected[FaultChildKill]++
			case strings.HasPrefix(m.line, "V "):
				res.violations = append(res.violations, Violation{"worker", fmt.Sprintf("worker %d", p.id), m.line[2:]})
			case strings.HasPrefix(m.line, "A "):
				p.addr = m.line[2:]
				srvs.set(p.id, p.addr)
			case strings.HasPrefix(m.line, "P "):
				onProgress(p, false)
			}
		}
	}
}

// dumpStacks makes each live worker print its goroutines' stacks to its
// log and exit (SIGQUIT), and waits for them, 10 s at most. It returns how
// many it asked.
func dumpStacks(procs []*proc, msgs <-chan procMsg) int {
	n := 0
	for _, p := range procs {
		if !p.exited {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Signal(syscall.SIGQUIT)
			n++
		}
	}
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for left := n; left > 0; {
		select {
		case m := <-msgs:
			if m.exit && !m.p.exited {
				m.p.exited = true
				left--
			}
		case <-timeout.C:
			return n
		}
	}
	return n
}

// strike applies fault f to worker p.
func strike(ctx context.Context, opts *Options, f Fault, p *proc) error {
	pr := p.cmd.Process
	switch f.Kind {
	case FaultKill, FaultStreamKill:
		_ = pr.Signal(syscall.SIGKILL)
	case FaultCommitCrash:
		time.Sleep(time.Duration(f.DelayMicros) * time.Microsecond)
		_ = pr.Signal(syscall.SIGKILL)
	case FaultStop:
		_ = pr.Signal(syscall.SIGSTOP)
		sleepCtx(ctx, time.Duration(f.HoldMillis)*time.Millisecond)
		_ = pr.Signal(syscall.SIGCONT)
	case FaultFreeze:
		_ = pr.Signal(syscall.SIGUSR1)
		sleepCtx(ctx, time.Duration(f.HoldMillis)*time.Millisecond)
		_ = pr.Signal(syscall.SIGUSR2)
	case FaultPGRestart:
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := opts.PGRestart(rctx); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

type limitedBuffer struct {
	mu  sync.Mutex
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() < l.max {
		l.b.Write(p[:min(len(p), l.max-l.b.Len())])
	}
	return len(p), nil
}

func tail(b *bytes.Buffer) string {
	s := b.String()
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

// Print writes the report for people.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "weir torture: %d trials on %s, seeds %d..%d, %s\n", r.Trials, r.StoreKind, r.Seed, r.Seed+uint64(max(r.Trials, 1))-1, r.Duration.Round(time.Millisecond))
	st := r.Stats
	fmt.Fprintf(w, "  runs %d (completed %d, failed as planned %d), steps %d, attempts started %d, worker processes %d\n",
		st.Runs, st.Completed, st.Failed, st.Steps, st.Attempts, r.Workers)
	fmt.Fprintf(w, "  zombie attempts stopped (step code saw ErrFenced or a lost lease): %d\n", r.Fenced)
	fmt.Fprintf(w, "  streams %d, records %d, committed chunks %d (%d bytes), aborts %d\n", st.Streams, st.Records, st.Committed, st.Bytes, st.Aborts)
	fmt.Fprintf(w, "  steps run at once %d, hooks %d (payloads taken %d), attempts timed out %d\n", st.Parallel, st.Hooks, st.Payloads, st.TimedOut)
	if st.Takers+st.ClosedHooks+st.TimeoutFinal+st.Cancelled+st.Deadlines+st.Children > 0 {
		fmt.Fprintf(w, "  agent shapes: hooks with several takers %d, closed with payloads pending %d; steps failed by their last timeout %d; runs cancelled over a deaf step %d, ended by their deadline %d; child runs %d\n",
			st.Takers, st.ClosedHooks, st.TimeoutFinal, st.Cancelled, st.Deadlines, st.Children)
	}
	if st.Messages > 0 {
		fmt.Fprintf(w, "  messages to runs %d: taken %d, left at the runs' ends %d\n", st.Messages, st.MessagesTaken, st.MessagesLeft)
	}
	if st.Forks+st.ForksRefused > 0 {
		fmt.Fprintf(w, "  forks run and checked %d (points refused %d), failed forks resumed %d\n", st.Forks, st.ForksRefused, st.Resumes)
	}
	if st.Limited > 0 {
		fmt.Fprintf(w, "  limited attempts held to their trial's limiter %d\n", st.Limited)
	}
	if st.LinedParks+st.LinedClaims+st.LimiterChanges > 0 {
		fmt.Fprintf(w, "  lined parking: parks %d (runs %d; while steps ran on goroutines of their own %d), runs claimed lined %d; limiter changes made while runs ran %d\n",
			st.LinedParks, st.LinedRuns, st.LinedAsyncParks, st.LinedClaims, st.LimiterChanges)
	}
	if st.Queued > 0 {
		fmt.Fprintf(w, "  runs held to their trial's queue %d\n", st.Queued)
	}
	if st.HTTPStreams > 0 {
		fmt.Fprintf(w, "  HTTP streams %d: writers %d (weir %d, idempotency-key %d, producer %d), requests %d, acks checked %d\n",
			st.HTTPStreams, st.HTTPWeir+st.HTTPIdem+st.HTTPProducer, st.HTTPWeir, st.HTTPIdem, st.HTTPProducer, r.HTTPRequests, st.HTTPAcks)
	}
	fmt.Fprintf(w, "  faults struck (planned):")
	for _, k := range AllFaults {
		if r.Planned[k] > 0 || r.Injected[k] > 0 {
			fmt.Fprintf(w, " %s %d (%d)", k, r.Injected[k], r.Planned[k])
		}
	}
	fmt.Fprintln(w)
	n := 0
	for _, f := range r.Failures {
		n += len(f.Violations)
	}
	fmt.Fprintf(w, "  violations: %d\n", n)
	for _, f := range r.Failures {
		fmt.Fprintf(w, "  seed %d (files kept in %s):\n", f.Seed, f.Dir)
		for _, v := range f.Violations {
			fmt.Fprintf(w, "    %v\n", v)
		}
	}
}
