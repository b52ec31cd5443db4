package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// batchChunks is what the SDK writer sends per append by default, and what
// the anonymous baseline sends.
const batchChunks = 1000

// span records the earliest start and latest end of concurrent work.
type span struct {
	mu         sync.Mutex
	start, end time.Time
}

func (s *span) add(a, b time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.start.IsZero() || a.Before(s.start) {
		s.start = a
	}
	if b.After(s.end) {
		s.end = b
	}
}

func (s *span) dur() time.Duration { return s.end.Sub(s.start) }

// runAppend: Writers runs at once, each a step writing its share of Chunks
// through its stream writer, durable; the baseline is Writers goroutines
// appending the same chunks anonymously (no writer, no dedupe state) in the
// SDK's batches of 1,000, one stream each. They alternate in two rounds each
// (baseline, writers, writers, baseline) so drift hits both alike.
func runAppend(ctx context.Context, v *env) (*Result, error) {
	c := v.cfg
	per := max(1, c.Chunks/c.Writers/2) // per writer and round
	round := c.Duration / 2

	e, closeE, err := v.engine(ctx, c.Writers)
	if err != nil {
		return nil, err
	}
	defer closeE()
	type in struct {
		N        int
		Deadline time.Time
	}
	var sp *span
	var n atomic.Int64
	wf := weir.Register(e, "bench-append", func(ctx weir.Context, p in) (int, error) {
		return weir.Step(ctx, "emit", func(sc weir.StepContext) (int, error) {
			w := sc.Stream("out")
			buf := make([]byte, c.ChunkSize)
			t0 := time.Now()
			i := 0
			for ; (p.Deadline.IsZero() && i < p.N) || (!p.Deadline.IsZero() && (i%256 != 0 || time.Now().Before(p.Deadline))); i++ {
				fillChunk(buf, 'w', i)
				if _, err := w.Write(buf); err != nil {
					return 0, err
				}
				if i%1024 == 1023 {
					v.prog.add(1024)
				}
			}
			if err := w.Flush(); err != nil {
				return 0, err
			}
			sp.add(t0, time.Now())
			n.Add(int64(i))
			return i, nil
		})
	})
	if err := e.Work(ctx); err != nil {
		closeE()
		return nil, err
	}
	writers := func() (time.Duration, error) {
		v.prog.phase("chunks (step writers)")
		sp = &span{}
		p := in{N: per}
		if round > 0 {
			p.Deadline = time.Now().Add(round)
		}
		hs := make([]*weir.Handle[int], c.Writers)
		for i := range hs {
			if hs[i], err = wf.Start(ctx, p, nil); err != nil {
				return 0, err
			}
		}
		for _, h := range hs {
			if _, err := h.Result(ctx); err != nil {
				return 0, err
			}
		}
		return sp.dur(), nil
	}

	tag := time.Now().UnixNano()
	ids := make([]int64, c.Writers)
	for w := range ids {
		si, err := v.store.OpenStream(ctx, &store.OpenStreamParams{Path: fmt.Sprintf("bench/append/%d/%d", tag, w), Create: true})
		if err != nil {
			return nil, err
		}
		ids[w] = si.ID
	}
	var baseN atomic.Int64
	anonymous := func() (time.Duration, error) {
		v.prog.phase("chunks (baseline: anonymous appends)")
		var deadline time.Time
		if round > 0 {
			deadline = time.Now().Add(round)
		}
		errs := make(chan error, c.Writers)
		var wg sync.WaitGroup
		start := time.Now()
		for _, id := range ids {
			wg.Go(func() {
				batch := make([][]byte, batchChunks)
				for i := range batch {
					batch[i] = make([]byte, c.ChunkSize)
				}
				for n := 0; (deadline.IsZero() && n < per) || (!deadline.IsZero() && time.Now().Before(deadline)); {
					k := batchChunks
					if deadline.IsZero() {
						k = min(k, per-n)
					}
					for i := range k {
						fillChunk(batch[i], 'p', n+i)
					}
					if _, err := v.store.Append(ctx, &store.AppendParams{StreamID: id, Chunks: batch[:k]}); err != nil {
						errs <- err
						return
					}
					n += k
					baseN.Add(int64(k))
					v.prog.add(int64(k))
				}
			})
		}
		wg.Wait()
		select {
		case err := <-errs:
			return 0, fmt.Errorf("baseline: %w", err)
		default:
		}
		return time.Since(start), nil
	}

	var baseDur, dur time.Duration
	for _, f := range []struct {
		run func() (time.Duration, error)
		to  *time.Duration
	}{{anonymous, &baseDur}, {writers, &dur}, {writers, &dur}, {anonymous, &baseDur}} {
		d, err := f.run()
		if err != nil {
			return nil, err
		}
		*f.to += d
	}
	r := &Result{
		Unit: "chunks", Ops: n.Load(), Seconds: dur.Seconds(),
		OpsPerSec:         float64(n.Load()) / dur.Seconds(),
		Baseline:          "anonymous appends (no writer, no dedupe state), same writers and chunks, batches of 1,000",
		BaselineOpsPerSec: float64(baseN.Load()) / baseDur.Seconds(),
	}
	r.Ratio = r.OpsPerSec / r.BaselineOpsPerSec
	r.RatioOf = "step-writer chunks/s ÷ anonymous chunks/s"
	r.extra("writers", float64(c.Writers))
	r.extra("chunk_bytes", float64(c.ChunkSize))
	r.extra("writer_linger_ms", ms(e.Config().Writer.Linger))
	r.target("≥ 300,000 chunks/s embedded, durable", r.OpsPerSec >= 300_000)
	return r, nil
}

// retryRun runs one workflow of one step whose attempt 1 writes chunks
// and fails, and whose attempt 2 writes chunks2 (the same, or not) and
// succeeds. It returns both attempts' write times (writes and flush) and the
// stream's committed count.
func retryRun(ctx context.Context, v *env, name string, n int, second func(buf []byte, i int)) (t1, t2 time.Duration, committed int64, err error) {
	c := v.cfg
	fail := errors.New("attempt 1 fails after writing")
	e, closeE, err := v.engine(ctx, 1)
	if err != nil {
		return 0, 0, 0, err
	}
	defer closeE()
	wf := weir.Register(e, "bench-"+name, func(ctx weir.Context, _ int) (int, error) {
		return weir.Step(ctx, "emit", func(sc weir.StepContext) (int, error) {
			w := sc.Stream("out")
			buf := make([]byte, c.ChunkSize)
			t0 := time.Now()
			for i := range n {
				if sc.Attempt() == 1 {
					fillChunk(buf, 'a', i)
				} else {
					second(buf, i)
				}
				if _, err := w.Write(buf); err != nil {
					return 0, err
				}
				if i%1024 == 1023 {
					v.prog.add(1024)
				}
			}
			if err := w.Flush(); err != nil {
				return 0, err
			}
			if sc.Attempt() == 1 {
				t1 = time.Since(t0)
				return 0, fail
			}
			t2 = time.Since(t0)
			return n, nil
		}, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 2}))
	})
	if err := e.Work(ctx); err != nil {
		closeE()
		return 0, 0, 0, err
	}
	h, err := wf.Start(ctx, 0, nil)
	if err != nil {
		return 0, 0, 0, err
	}
	if _, err := h.Result(ctx); err != nil {
		return 0, 0, 0, err
	}
	for rec, err := range e.Read(ctx, h.ID, "out", &weir.ReadOptions{View: weir.CommittedView}) {
		if err != nil {
			return 0, 0, 0, err
		}
		if rec.Kind == stream.KindData {
			committed++
		}
	}
	return t1, t2, committed, nil
}

// runAdopt: a step writes AdoptChunks and fails; its retry writes the same
// chunks, which are adopted. Ratio: adopt time ÷ append time.
func runAdopt(ctx context.Context, v *env) (*Result, error) {
	n := v.cfg.AdoptChunks
	v.prog.phase("chunks")
	t1, t2, committed, err := retryRun(ctx, v, "adopt", n, func(buf []byte, i int) { fillChunk(buf, 'a', i) })
	if err != nil {
		return nil, err
	}
	if committed != int64(n) {
		return nil, fmt.Errorf("committed view holds %d chunks, want %d", committed, n)
	}
	r := &Result{
		Unit: "chunks", Ops: int64(n), Seconds: t2.Seconds(), OpsPerSec: float64(n) / t2.Seconds(),
		Baseline:          "append: the step's first attempt writing the same chunks",
		BaselineOpsPerSec: float64(n) / t1.Seconds(),
		Ratio:             t2.Seconds() / t1.Seconds(),
		RatioOf:           "adopt time ÷ append time",
	}
	r.extra("committed_chunks", float64(committed))
	r.target("adopt ≤ 1.2× append time", r.Ratio <= 1.2)
	return r, nil
}

// runDiverge: a step writes AdoptChunks and fails; its retry writes the
// first half the same and the second half different. Through the engine it
// reports the retry's rate against the first attempt's; at the store it
// times the one append that carries the first difference (abort + append)
// against the appends before (adopted) and after (new).
func runDiverge(ctx context.Context, v *env) (*Result, error) {
	n := v.cfg.AdoptChunks
	half := n / 2
	v.prog.phase("chunks")
	t1, t2, committed, err := retryRun(ctx, v, "diverge", n, func(buf []byte, i int) {
		if i < half {
			fillChunk(buf, 'a', i)
		} else {
			fillChunk(buf, 'b', i)
		}
	})
	if err != nil {
		return nil, err
	}
	if committed != int64(n) {
		return nil, fmt.Errorf("committed view holds %d chunks, want %d", committed, n)
	}

	// The abort's cost, at the store: batches of 1,000 as the SDK sends.
	si, err := v.store.OpenStream(ctx, &store.OpenStreamParams{Path: fmt.Sprintf("bench/diverge/%d", time.Now().UnixNano()), Create: true})
	if err != nil {
		return nil, err
	}
	batches := max(2, n/batchChunks)
	mk := func(tag byte, b int) [][]byte {
		out := make([][]byte, batchChunks)
		for i := range out {
			out[i] = make([]byte, v.cfg.ChunkSize)
			fillChunk(out[i], tag, b*batchChunks+i)
		}
		return out
	}
	for b := range batches {
		if _, err := v.store.Append(ctx, &store.AppendParams{StreamID: si.ID, Writer: "step/1", Attempt: 1, FirstSeq: int64(b * batchChunks), Chunks: mk('a', b)}); err != nil {
			return nil, err
		}
	}
	var adopted, fresh []time.Duration
	var abortDur time.Duration
	for b := range batches {
		tag := byte('a')
		if b >= batches/2 {
			tag = 'b'
		}
		cs := mk(tag, b)
		t0 := time.Now()
		res, err := v.store.Append(ctx, &store.AppendParams{StreamID: si.ID, Writer: "step/1", Attempt: 2, FirstSeq: int64(b * batchChunks), Chunks: cs})
		d := time.Since(t0)
		if err != nil {
			return nil, err
		}
		switch {
		case b < batches/2:
			adopted = append(adopted, d)
		case b == batches/2:
			abortDur = d
			if res.Acks[0].Outcome == stream.Adopted {
				return nil, errors.New("the diverging chunk was adopted")
			}
		default:
			fresh = append(fresh, d)
		}
	}
	r := &Result{
		Unit: "chunks", Ops: int64(n), Seconds: t2.Seconds(), OpsPerSec: float64(n) / t2.Seconds(),
		Baseline:          "append: the step's first attempt",
		BaselineOpsPerSec: float64(n) / t1.Seconds(),
		Ratio:             t2.Seconds() / t1.Seconds(),
		RatioOf:           "diverging retry time ÷ first attempt time",
	}
	newMs := pct(fresh, 0.5)
	r.extra("abort_batch_ms", ms(abortDur))
	r.extra("new_batch_p50_ms", newMs)
	r.extra("adopt_batch_p50_ms", pct(adopted, 0.5))
	r.extra("abort_cost_ms", ms(abortDur)-newMs)
	r.extra("voided_chunks", float64((batches-batches/2)*batchChunks))
	r.Notes = append(r.Notes, fmt.Sprintf("store level: the append carrying the first difference (abort of %d chunks + 1,000 new) took %.3f ms; a new batch %.3f ms",
		(batches-batches/2)*batchChunks, ms(abortDur), newMs))
	return r, nil
}
