package torture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
)

// SoakOptions configure Soak.
type SoakOptions struct {
	Store    string // sqlite:DIR or postgres://…
	Duration time.Duration
	// Interval between samples; default Duration/20, within 1s..10s.
	Interval time.Duration
	// InFlight is how many runs stream at once (default 8); Followers how
	// many readers follow the standalone stream (default 4).
	InFlight, Followers int
	Log                 io.Writer
}

// Sample is one line of the soak's report.
type Sample struct {
	At           time.Duration
	ChunksPerSec float64 // acknowledged to step writers
	ReadsPerSec  float64 // records yielded to readers
	RunsDone     int64
	HeapMiB      float64
	Goroutines   int
	OpenReaders  int64
}

// SoakReport is the soak's outcome: Problems is empty when it passed.
type SoakReport struct {
	Samples  []Sample
	Problems []string
}

// Soak runs sustained writes and reads: runs whose steps stream (each
// followed by a live and a committed reader that check what they get), and
// a standalone stream appended to without end and followed by readers that
// must keep advancing. It samples throughput, heap, goroutines and open
// readers, and reports growth that does not level off and stalled readers.
func Soak(ctx context.Context, o SoakOptions) (*SoakReport, error) {
	if o.InFlight == 0 {
		o.InFlight = 8
	}
	if o.Followers == 0 {
		o.Followers = 4
	}
	if o.Interval == 0 {
		o.Interval = min(max(o.Duration/20, time.Second), 10*time.Second)
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	dsn := o.Store
	if !IsPostgres(dsn) {
		dir, err := os.MkdirTemp(trimSQLite(dsn), "weir-soak-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		dsn = "sqlite:" + filepath.Join(dir, "weir.db")
	}
	s, err := OpenStore(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	e, err := weir.New(s, &weir.Config{PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	const chunksPerStep, steps = 200, 3
	var written, read, runsDone, openReaders atomic.Int64
	var problemsMu sync.Mutex
	var problems []string
	problem := func(format string, args ...any) {
		problemsMu.Lock()
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
		problemsMu.Unlock()
	}
	wf := weir.Register(e, "soak", func(ctx weir.Context, n int) (int, error) {
		for i := range steps {
			if _, err := weir.Step(ctx, fmt.Sprintf("emit%d", i), func(sc weir.StepContext) (int, error) {
				w := sc.Stream("out")
				for j := range chunksPerStep {
					if _, err := fmt.Fprintf(w, "run %d step %d chunk %d", n, i, j); err != nil {
						return 0, err
					}
				}
				if err := w.Flush(); err != nil {
					return 0, err
				}
				written.Add(chunksPerStep)
				return chunksPerStep, nil
			}); err != nil {
				return 0, err
			}
		}
		return n, nil
	})
	if err := e.Work(ctx); err != nil {
		return nil, err
	}
	ctx, stop := context.WithTimeout(ctx, o.Duration)
	defer stop()
	var wg sync.WaitGroup

	follow := func(runID string, view weir.View) {
		defer wg.Done()
		openReaders.Add(1)
		defer openReaders.Add(-1)
		n := 0
		for r, err := range e.Read(ctx, runID, "out", &weir.ReadOptions{View: view, Follow: true}) {
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					problem("reader of %s: %v", runID, err)
				}
				return
			}
			read.Add(1)
			if r.Kind == 1 {
				n++
			}
		}
		if ctx.Err() == nil && view == weir.CommittedView && n != steps*chunksPerStep {
			problem("committed reader of %s got %d chunks, want %d", runID, n, steps*chunksPerStep)
		}
	}
	// Runs, InFlight at a time, each followed in both views.
	for w := range o.InFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("soak-%d-%d", w, i)
				h, err := wf.Start(ctx, w*1_000_000+i, &weir.StartOptions{ID: id})
				if err != nil {
					if ctx.Err() == nil {
						problem("start run: %v", err)
					}
					return
				}
				wg.Add(2)
				go follow(id, weir.LiveView)
				go follow(id, weir.CommittedView)
				if _, err := h.Result(ctx); err != nil {
					if ctx.Err() == nil {
						problem("run %s: %v", id, err)
					}
					return
				}
				runsDone.Add(1)
			}
		}()
	}
	// A standalone stream appended to without end, and its followers.
	info, err := s.OpenStream(ctx, &store.OpenStreamParams{Path: "soak/tail", Create: true})
	if err != nil {
		return nil, err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := int64(0); ctx.Err() == nil; seq += 10 {
			chunks := make([][]byte, 10)
			for i := range chunks {
				chunks[i] = fmt.Appendf(nil, "tail %d", seq+int64(i))
			}
			if _, err := s.Append(ctx, &store.AppendParams{StreamID: info.ID, Writer: "tail", FirstSeq: seq, Chunks: chunks}); err != nil && ctx.Err() == nil {
				problem("append to the tail stream: %v", err)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	pos := make([]atomic.Int64, o.Followers)
	for i := range o.Followers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			openReaders.Add(1)
			defer openReaders.Add(-1)
			view := weir.LiveView
			if i%2 == 1 {
				view = weir.CommittedView
			}
			for r, err := range readPath(ctx, s, info.Path, &weir.ReadOptions{View: view, Follow: true}) {
				if err != nil {
					return
				}
				read.Add(1)
				pos[i].Store(r.Offset + 1)
			}
		}()
	}

	rep := &SoakReport{}
	start := time.Now()
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	lastW, lastR := int64(0), int64(0)
	lastPos := make([]int64, o.Followers)
	stalled := make([]int, o.Followers)
	fmt.Fprintf(o.Log, "weir soak on %s for %v: %d runs streaming at once, %d followers of a stream appended without end\n", kindOf(dsn), o.Duration, o.InFlight, o.Followers)
	fmt.Fprintf(o.Log, "%8s %12s %12s %8s %9s %10s %8s\n", "t", "chunks/s", "reads/s", "runs", "heap MiB", "goroutines", "readers")
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		wn, rn := written.Load(), read.Load()
		sec := o.Interval.Seconds()
		sm := Sample{At: time.Since(start).Round(time.Second), ChunksPerSec: float64(wn-lastW) / sec, ReadsPerSec: float64(rn-lastR) / sec,
			RunsDone: runsDone.Load(), HeapMiB: float64(ms.HeapAlloc) / (1 << 20), Goroutines: runtime.NumGoroutine(), OpenReaders: openReaders.Load()}
		lastW, lastR = wn, rn
		rep.Samples = append(rep.Samples, sm)
		fmt.Fprintf(o.Log, "%8v %12.0f %12.0f %8d %9.1f %10d %8d\n", sm.At, sm.ChunksPerSec, sm.ReadsPerSec, sm.RunsDone, sm.HeapMiB, sm.Goroutines, sm.OpenReaders)
		if sm.ChunksPerSec == 0 {
			problem("no chunk acknowledged in the interval ending at %v", sm.At)
		}
		for i := range pos {
			p := pos[i].Load()
			if p == lastPos[i] {
				stalled[i]++
				if stalled[i] == 3 {
					problem("follower %d stopped advancing at offset %d (t=%v)", i, p, sm.At)
				}
			} else {
				stalled[i] = 0
			}
			lastPos[i] = p
		}
	}
	stop()
	wg.Wait()
	_ = e.Close(context.Background())
	// Growth that does not level off: the last third's peak well above the
	// middle third's.
	if n := len(rep.Samples); n >= 6 {
		mid, last := rep.Samples[n/3:2*n/3], rep.Samples[2*n/3:]
		peak := func(ss []Sample, f func(Sample) float64) float64 {
			m := 0.0
			for _, s := range ss {
				m = max(m, f(s))
			}
			return m
		}
		heap := func(s Sample) float64 { return s.HeapMiB }
		gor := func(s Sample) float64 { return float64(s.Goroutines) }
		rdr := func(s Sample) float64 { return float64(s.OpenReaders) }
		if a, b := peak(mid, heap), peak(last, heap); b > 1.5*a+32 {
			problem("heap grows without levelling off: peak %.1f MiB in the middle third, %.1f MiB in the last", a, b)
		}
		if a, b := peak(mid, gor), peak(last, gor); b > 1.5*a+64 {
			problem("goroutines grow without levelling off: %v then %v", a, b)
		}
		if a, b := peak(mid, rdr), peak(last, rdr); b > 1.5*a+16 {
			problem("open readers grow without levelling off: %v then %v", a, b)
		}
	} else {
		fmt.Fprintf(o.Log, "(too few samples to judge growth: run longer)\n")
	}
	rep.Problems = problems
	if len(problems) == 0 {
		fmt.Fprintf(o.Log, "soak passed: %d runs, %d chunks written, %d records read\n", runsDone.Load(), written.Load(), read.Load())
	}
	for _, p := range problems {
		fmt.Fprintf(o.Log, "PROBLEM: %s\n", p)
	}
	return rep, nil
}

func trimSQLite(dsn string) string {
	if len(dsn) >= 7 && dsn[:7] == "sqlite:" {
		return dsn[7:]
	}
	return ""
}

func kindOf(dsn string) string {
	if IsPostgres(dsn) {
		return "postgres"
	}
	return "sqlite"
}
