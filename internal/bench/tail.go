package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// A timed chunk carries its write time (Unix nanoseconds) in its first 8
// bytes; byte 8 is 'h' for the hello chunk readers attach with.
func timedChunk(buf []byte, hello bool) []byte {
	if len(buf) < 9 {
		buf = make([]byte, 9)
	}
	binary.BigEndian.PutUint64(buf, uint64(time.Now().UnixNano()))
	buf[8] = 't'
	if hello {
		buf[8] = 'h'
	}
	return buf
}

// latencyOf returns how long ago a timed chunk was written, and whether it
// is a sample (not the hello chunk).
func latencyOf(data []byte) (time.Duration, bool) {
	if len(data) < 9 {
		return 0, false
	}
	at := int64(binary.BigEndian.Uint64(data))
	return time.Duration(time.Now().UnixNano() - at), data[8] == 't'
}

func (v *env) interval(def time.Duration) time.Duration {
	if v.cfg.Interval > 0 {
		return v.cfg.Interval
	}
	return def
}

// runTail: a step writes Samples chunks, one every Interval, through its
// stream writer (the engine's default batching); a live reader in the same
// process times each one's arrival. The baseline is the store alone: single
// anonymous appends, read by a live ReadStream. Where several processes may
// open the store, the reader also runs in another process.
func runTail(ctx context.Context, v *env) (*Result, error) {
	n := v.cfg.Samples
	gap := v.interval(2 * time.Millisecond)

	v.prog.phase("samples (baseline: store append → reader)")
	base, err := tailStore(ctx, v, n, gap)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}

	v.prog.phase("samples (step writer → reader)")
	lat, err := tailEngine(ctx, v, n, gap, nil)
	if err != nil {
		return nil, err
	}
	r := &Result{Unit: "samples", Ops: int64(len(lat)),
		Baseline:      "a single anonymous store append → live ReadStream (no step writer)",
		BaselineP50Ms: pct(base, 0.5), BaselineP99Ms: pct(base, 0.99),
		RatioOf: "p50 ÷ baseline p50",
	}
	r.latencies(lat)
	r.Ratio = r.P50Ms / r.BaselineP50Ms
	r.extra("interval_ms", ms(gap))
	r.extra("writer_linger_ms", ms(weir.Config{Writer: weir.WriterConfig{Linger: v.cfg.Linger}}.WithDefaults().Writer.Linger))
	r.target("p50 ≤ 1 ms and p99 ≤ 5 ms embedded", r.P50Ms <= 1 && r.P99Ms <= 5)

	switch {
	case !multiProcess(v.cfg.Store):
		r.Notes = append(r.Notes, "cross-process: not measured (the store allows one process; use --store postgres://…)")
	case len(v.cfg.ReaderCommand) == 0:
		r.Notes = append(r.Notes, "cross-process: not measured (no reader command)")
	default:
		v.prog.phase("samples (step writer → reader in another process)")
		xl, err := tailEngine(ctx, v, n, gap, v.cfg.ReaderCommand)
		if err != nil {
			return nil, fmt.Errorf("cross-process: %w", err)
		}
		r.extra("cross_process_p50_ms", pct(xl, 0.5))
		r.extra("cross_process_p99_ms", pct(xl, 0.99))
		r.extra("cross_process_p999_ms", pct(xl, 0.999))
	}
	return r, nil
}

func tailStore(ctx context.Context, v *env, n int, gap time.Duration) ([]time.Duration, error) {
	si, err := v.store.OpenStream(ctx, &store.OpenStreamParams{Path: fmt.Sprintf("bench/tail/%d", time.Now().UnixNano()), Create: true})
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lat := make([]time.Duration, 0, n)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for rec, err := range readPath(rctx, v.store, si.Path, &weir.ReadOptions{Follow: true}) {
			if err != nil {
				done <- err
				return
			}
			d, sample := latencyOf(rec.Data)
			if !sample {
				close(ready)
				continue
			}
			lat = append(lat, d)
			v.prog.add(1)
			if len(lat) == n {
				break
			}
		}
		done <- nil
	}()
	buf := make([]byte, v.cfg.ChunkSize)
	for i := range n + 1 {
		if _, err := v.store.Append(ctx, &store.AppendParams{StreamID: si.ID, Chunks: [][]byte{timedChunk(buf, i == 0)}}); err != nil {
			return nil, err
		}
		if i == 0 {
			select {
			case <-ready:
			case err := <-done:
				return nil, fmt.Errorf("reader: %v", err)
			}
		}
		time.Sleep(gap)
	}
	if err := <-done; err != nil {
		return nil, err
	}
	return lat, nil
}

// tailEngine runs the step writer; the reader is a goroutine, or readerCmd
// in another process (see TailReader).
func tailEngine(ctx context.Context, v *env, n int, gap time.Duration, readerCmd []string) ([]time.Duration, error) {
	ready := make(chan struct{})
	e, closeE, err := v.engine(ctx, 1)
	if err != nil {
		return nil, err
	}
	defer closeE()
	wf := weir.Register(e, "bench-tail", func(ctx weir.Context, _ int) (int, error) {
		return weir.Step(ctx, "emit", func(sc weir.StepContext) (int, error) {
			w := sc.Stream("tail")
			buf := make([]byte, v.cfg.ChunkSize)
			if _, err := w.Write(timedChunk(buf, true)); err != nil {
				return 0, err
			}
			select {
			case <-ready:
			case <-sc.Done():
				return 0, context.Cause(sc)
			}
			for range n {
				time.Sleep(gap)
				if _, err := w.Write(timedChunk(buf, false)); err != nil {
					return 0, err
				}
			}
			return n, nil
		}, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 1}))
	})
	if err := e.Work(ctx); err != nil {
		closeE()
		return nil, err
	}
	h, err := wf.Start(ctx, 0, nil)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var lat []time.Duration
	done := make(chan error, 1)
	if readerCmd == nil {
		go func() {
			done <- tailRead(rctx, e, h.ID, n, func() { close(ready) }, func(d time.Duration) {
				lat = append(lat, d)
				v.prog.add(1)
			})
		}()
	} else {
		args := append(append([]string(nil), readerCmd[1:]...), "--store", v.cfg.Store, "--run", h.ID, "--samples", strconv.Itoa(n))
		cmd := exec.CommandContext(rctx, readerCmd[0], args...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				line := sc.Text()
				if line == "ready" {
					close(ready)
					continue
				}
				ns, err := strconv.ParseInt(line, 10, 64)
				if err != nil {
					continue
				}
				lat = append(lat, time.Duration(ns))
				v.prog.add(1)
			}
			err := cmd.Wait()
			if err != nil {
				err = fmt.Errorf("reader process: %v: %s", err, stderr.String())
			}
			done <- err
		}()
	}
	if _, err := h.Result(ctx); err != nil {
		return nil, err
	}
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
	case <-time.After(30 * time.Second):
		return nil, errors.New("the reader did not see every chunk")
	}
	if len(lat) != n {
		return nil, fmt.Errorf("reader saw %d samples, want %d", len(lat), n)
	}
	return lat, nil
}

// tailRead follows run's "tail" stream: ready once it sees the hello chunk,
// then sample for each of n timed chunks.
func tailRead(ctx context.Context, e *weir.Engine, runID string, n int, ready func(), sample func(time.Duration)) error {
	got := 0
	for rec, err := range e.Read(ctx, runID, "tail", &weir.ReadOptions{Follow: true}) {
		if err != nil {
			return err
		}
		if rec.Kind != stream.KindData {
			continue
		}
		d, ok := latencyOf(rec.Data)
		if !ok {
			ready()
			continue
		}
		sample(d)
		if got++; got == n {
			return nil
		}
	}
	return fmt.Errorf("stream ended after %d samples", got)
}

// TailReader is the cross-process reader of the tail workload: it follows
// the "tail" stream of runID on s, prints "ready" once attached, then one
// latency in nanoseconds per line for each of samples chunks.
func TailReader(ctx context.Context, s store.Store, runID string, samples int, out io.Writer) error {
	e, err := weir.New(s, &weir.Config{NoWorker: true})
	if err != nil {
		return err
	}
	defer e.Close(context.Background())
	bw := bufio.NewWriter(out)
	lat := make([]time.Duration, 0, samples)
	err = tailRead(ctx, e, runID, samples, func() {
		fmt.Fprintln(bw, "ready")
		bw.Flush()
	}, func(d time.Duration) { lat = append(lat, d) })
	for _, d := range lat {
		fmt.Fprintln(bw, int64(d))
	}
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return err
}

// runFanout: Readers live readers follow one stream; Messages single-chunk
// appends, one every Interval, are timed at every reader. Memory per reader
// is the growth of heap and stacks once every reader waits, over Readers.
// The baseline is the same with one reader.
func runFanout(ctx context.Context, v *env) (*Result, error) {
	gap := v.interval(20 * time.Millisecond)
	v.prog.phase("deliveries (baseline: 1 reader)")
	base, _, err := fanout(ctx, v, 1, v.cfg.Messages, gap)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	v.prog.phase(fmt.Sprintf("deliveries (%d readers)", v.cfg.Readers))
	lat, perReader, err := fanout(ctx, v, v.cfg.Readers, v.cfg.Messages, gap)
	if err != nil {
		return nil, err
	}
	r := &Result{Unit: "deliveries", Ops: int64(len(lat)),
		Baseline:      "the same stream and messages with one reader",
		BaselineP50Ms: pct(base, 0.5), BaselineP99Ms: pct(base, 0.99),
		RatioOf: "p99 ÷ baseline p99",
	}
	r.latencies(lat)
	r.Ratio = r.P99Ms / r.BaselineP99Ms
	r.extra("readers", float64(v.cfg.Readers))
	r.extra("bytes_per_reader", perReader)
	r.extra("interval_ms", ms(gap))
	r.target("p99 ≤ 50 ms with ≤ 64 KiB per reader (1,000 readers)", r.P99Ms <= 50 && perReader <= 64<<10)
	return r, nil
}

func fanout(ctx context.Context, v *env, readers, msgs int, gap time.Duration) ([]time.Duration, float64, error) {
	si, err := v.store.OpenStream(ctx, &store.OpenStreamParams{Path: fmt.Sprintf("bench/fanout/%d", time.Now().UnixNano()), Create: true})
	if err != nil {
		return nil, 0, err
	}
	lat := make([]time.Duration, readers*msgs)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var attached, finished sync.WaitGroup
	attached.Add(readers)
	finished.Add(readers)
	errc := make(chan error, readers)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range readers {
		go func() {
			defer finished.Done()
			got, isAttached := 0, false
			for rec, err := range readPath(rctx, v.store, si.Path, &weir.ReadOptions{Follow: true}) {
				if err != nil {
					if !isAttached {
						attached.Done()
					}
					errc <- err
					return
				}
				d, sample := latencyOf(rec.Data)
				if !sample {
					attached.Done()
					isAttached = true
					continue
				}
				lat[i*msgs+got] = d
				v.prog.add(1)
				if got++; got == msgs {
					return
				}
			}
		}()
	}
	buf := make([]byte, v.cfg.ChunkSize)
	if _, err := v.store.Append(ctx, &store.AppendParams{StreamID: si.ID, Chunks: [][]byte{timedChunk(buf, true)}}); err != nil {
		return nil, 0, err
	}
	attached.Wait()
	select {
	case err := <-errc:
		return nil, 0, err
	default:
	}
	// Every reader now waits for the next record.
	time.Sleep(20 * time.Millisecond)
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := float64(after.HeapInuse+after.StackInuse) - float64(before.HeapInuse+before.StackInuse)
	for range msgs {
		time.Sleep(gap)
		if _, err := v.store.Append(ctx, &store.AppendParams{StreamID: si.ID, Chunks: [][]byte{timedChunk(buf, false)}}); err != nil {
			return nil, 0, err
		}
	}
	done := make(chan struct{})
	go func() { finished.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		return nil, 0, errors.New("readers did not get every message within 60s")
	}
	select {
	case err := <-errc:
		return nil, 0, err
	default:
	}
	return lat, grown / float64(readers), nil
}

// readPath reads the stream at path through an engine that executes
// nothing (weir.Engine.ReadPath).
func readPath(ctx context.Context, s store.Store, path string, opts *weir.ReadOptions) iter.Seq2[weir.StreamRecord, error] {
	return func(yield func(weir.StreamRecord, error) bool) {
		e, err := weir.New(s, &weir.Config{NoWorker: true})
		if err != nil {
			yield(weir.StreamRecord{}, err)
			return
		}
		defer e.Close(context.WithoutCancel(ctx))
		for r, err := range e.ReadPath(ctx, path, opts) {
			if !yield(r, err) {
				return
			}
		}
	}
}
