package weir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// WorkflowWriterID is the writer of writes from workflow code (outside any
// step). Its chunks are committed as they are appended and numbered in replay
// order, so a replay re-sends the same (writer, seq) and is recognised.
const WorkflowWriterID = "workflow"

// Step writers copy chunks into slabs: the first of firstSlab bytes, each
// next twice the last up to maxSlab. A step that writes a few chunks (most
// do) no longer allocates and clears 256 KiB (7% of a short HTTP run's CPU).
const (
	firstSlab = 4 << 10
	maxSlab   = 256 << 10
)

// Writer writes chunks to one stream of a run. Each Write is one chunk.
//
// From a step, writes are batched and sent in the background (see
// WriterConfig); Write returns once the chunk is buffered, and blocks only
// when MaxBufferedBytes are unacknowledged. The step's outcome waits for
// every chunk to be acknowledged, then commits (or aborts) them together
// with the step's event. If a newer attempt of the step exists, Write
// returns an error matching ErrFenced and the step's context is cancelled.
//
// From workflow code, Write appends and commits the chunk before it returns.
type Writer struct {
	x       *execution
	name    string
	opts    streamOptions
	writer  string
	attempt int64
	cfg     WriterConfig
	ctx     context.Context
	onFence context.CancelCauseFunc // cancels the step
	start   *stepStart              // the step attempt's start, recorded before the first append

	mu       sync.Mutex
	acked    *sync.Cond // signalled when a batch is acknowledged or fails
	kick     chan struct{}
	done     chan struct{}
	slab     []byte   // where Write copies chunks; a new one when full
	pend     [][]byte // chunks written and not yet handed to the sender
	pendSize int      // their bytes
	firstAt  time.Time
	sent     int64 // chunks handed to the sender (seq of the first pending chunk)
	written  int64 // chunks written
	ackedN   int64 // chunks acknowledged
	inflight int   // bytes handed to the sender and not acknowledged
	flushReq bool
	closing  bool
	started  bool
	err      error
	streamID int64
}

func newStepWriter(sc *stepContext, name string, o streamOptions) *Writer {
	w := &Writer{
		x: sc.x, name: name, opts: o, writer: stepWriter(sc.op), attempt: sc.attempt,
		cfg: sc.x.e.cfg.Writer, ctx: sc.Context, onFence: sc.cancel, start: sc.start,
		kick: make(chan struct{}, 1), done: make(chan struct{}),
	}
	w.acked = sync.NewCond(&w.mu)
	return w
}

func newWorkflowWriter(x *execution, name string, o streamOptions) *Writer {
	return &Writer{x: x, name: name, opts: o, writer: WorkflowWriterID, ctx: x.ctx}
}

// failedWriter is a Writer whose every call returns err.
func failedWriter(name string, err error) *Writer {
	w := &Writer{name: name, err: err}
	w.acked = sync.NewCond(&w.mu)
	return w
}

// Name returns the stream's name.
func (w *Writer) Name() string { return w.name }

// Write writes p as one chunk. p may be reused once Write returns. It never
// returns a short count without an error.
func (w *Writer) Write(p []byte) (int, error) {
	if w.x == nil {
		return 0, w.err // failedWriter
	}
	if len(p) > store.MaxChunkSize {
		return 0, fmt.Errorf("weir: write to %q: %w: chunk of %d bytes, the limit is %d", w.name, ErrTooLarge, len(p), store.MaxChunkSize)
	}
	if w.opts.json && !json.Valid(p) {
		return 0, fmt.Errorf("weir: write to %q: %w: a chunk of an application/json stream is one JSON value", w.name, ErrContentType)
	}
	if w.writer == WorkflowWriterID {
		return w.writeWorkflow(p)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.err == nil && !w.closing && len(w.pend) > 0 && w.pendSize+w.inflight+len(p) > w.cfg.MaxBufferedBytes {
		w.acked.Wait()
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.closing {
		return 0, fmt.Errorf("write to %q: %w", w.name, ErrWriterClosed)
	}
	if w.ctx.Err() != nil {
		// The attempt is over (timed out, fenced, its run cancelled or
		// lost): nothing it writes now can be kept. Say so at once, not at
		// the next flush, and for good.
		w.err = fmt.Errorf("weir: write to %q: the attempt is over: %w", w.name, context.Cause(w.ctx))
		w.acked.Broadcast()
		return 0, w.err
	}
	if len(w.pend) == 0 {
		w.firstAt = time.Now()
	}
	// Chunks are copied into slabs: batches then reference them without
	// another copy, and the sender never moves what is still pending.
	if len(w.slab)+len(p) > cap(w.slab) {
		w.slab = make([]byte, 0, max(min(2*cap(w.slab), maxSlab), firstSlab, len(p)))
	}
	n := len(w.slab)
	w.slab = append(w.slab, p...)
	w.pend = append(w.pend, w.slab[n:n+len(p):n+len(p)])
	w.pendSize += len(p)
	w.written++
	if !w.started {
		w.started = true
		go w.sendLoop()
	}
	if len(w.pend) == 1 || len(w.pend) >= w.cfg.MaxBatchChunks || w.pendSize >= w.cfg.MaxBatchBytes {
		w.poke()
	}
	return len(p), nil
}

// WriteString writes s as one chunk.
func (w *Writer) WriteString(s string) (int, error) { return w.Write([]byte(s)) }

func (w *Writer) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Flush waits until every chunk written so far is acknowledged.
func (w *Writer) Flush() error {
	if w.writer == WorkflowWriterID || w.x == nil {
		return w.err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushReq = true
	w.poke()
	for w.err == nil && w.ackedN < w.written {
		w.acked.Wait()
	}
	w.flushReq = false
	return w.err
}

// closeNow makes a writer that never wrote refuse writes: it was asked
// for after its step's function returned.
func (w *Writer) closeNow() {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
}

// Close flushes and stops the writer; the engine calls it when the step's
// function returns. Writes after it fail.
func (w *Writer) Close() error {
	if w.writer == WorkflowWriterID || w.x == nil {
		return w.err
	}
	w.mu.Lock()
	w.closing = true
	started := w.started
	w.poke()
	w.mu.Unlock()
	if started {
		<-w.done
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.acked.Broadcast()
	return w.err
}

// sendLoop sends batches, one at a time and in seq order, until closed.
func (w *Writer) sendLoop() {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		w.mu.Lock()
		for {
			n := len(w.pend)
			if w.err != nil || (n == 0 && w.closing) {
				w.mu.Unlock()
				return
			}
			linger := w.cfg.Linger
			if w.streamID == 0 && w.start != nil && w.x.e.stepAppender() != nil {
				linger = max(linger, w.cfg.FirstLinger) // the first batch opens the stream
			}
			wait := linger - time.Since(w.firstAt)
			if n > 0 && (w.flushReq || w.closing || n >= w.cfg.MaxBatchChunks || w.pendSize >= w.cfg.MaxBatchBytes || wait <= 0) {
				break
			}
			w.mu.Unlock()
			if n > 0 {
				timer.Reset(wait)
			}
			select {
			case <-w.kick:
			case <-timer.C:
			}
			timer.Stop()
			w.mu.Lock()
		}
		if w.streamID == 0 && (w.start == nil || w.x.e.stepAppender() == nil) {
			// The stream's creation (and the step's start) first: the
			// chunks written meanwhile join the first batch, instead of
			// waiting behind a batch of one. (With a StepAppender they go
			// together.)
			w.mu.Unlock()
			err := w.openRetrying()
			w.mu.Lock()
			if err != nil {
				w.err = fmt.Errorf("weir: write to %q: %w", w.name, err)
				w.acked.Broadcast()
				w.mu.Unlock()
				if errors.Is(err, ErrFenced) {
					w.onFence(err)
				}
				return
			}
		}
		// Take one batch.
		k, size := 0, 0
		for k < len(w.pend) && k < w.cfg.MaxBatchChunks && (k == 0 || size+len(w.pend[k]) <= w.cfg.MaxBatchBytes) {
			size += len(w.pend[k])
			k++
		}
		chunks := w.pend[:k:k]
		w.pend = w.pend[k:]
		if len(w.pend) == 0 {
			w.pend = nil // let the sent batch's slice go with it
		}
		w.pendSize -= size
		w.firstAt = time.Now()
		first := w.sent
		w.sent += int64(k)
		w.inflight += size
		w.mu.Unlock()

		err := w.send(first, chunks)

		w.mu.Lock()
		w.inflight -= size
		if err != nil {
			w.err = fmt.Errorf("weir: write to %q: %w", w.name, err)
		} else {
			w.ackedN += int64(k)
		}
		w.acked.Broadcast()
		w.mu.Unlock()
		if errors.Is(err, ErrFenced) {
			w.onFence(err)
		}
	}
}

// openAppend sends a step writer's first batch with its stream's creation
// and its attempt's start (if not recorded yet), in one transaction
// (store.StepAppender). It returns nil and no error when nothing was
// appended (the stream existed, or the start was recorded already): the
// stream's id is then known, and the caller appends to it.
func (w *Writer) openAppend(sa store.StepAppender, first int64, chunks [][]byte) (*store.AppendResult, error) {
	x := w.x
	x.streamsMu.Lock()
	_, opened := x.streams[w.name]
	x.streamsMu.Unlock()
	if opened {
		return nil, w.open()
	}
	var res *store.OpenAppendResult
	via := func(ctx context.Context, p *store.AdvanceParams) error {
		var err error
		res, err = sa.OpenAppend(ctx, &store.OpenAppendParams{
			RunID: x.run.ID, Name: w.name, ContentType: w.opts.contentType, Start: p,
			Append: store.AppendParams{Writer: w.writer, Attempt: w.attempt, FirstSeq: first, Chunks: chunks},
		})
		return err
	}
	err := w.start.ensureVia(via)
	if errors.Is(err, store.ErrUnsupported) {
		x.e.noAppender.Store(true) // a wrapper of a store that cannot: the plain way, from now on
		return nil, w.open()
	}
	if err != nil {
		return nil, fmt.Errorf("record step start: %w", err)
	}
	if res == nil {
		return nil, w.open() // the start was recorded before: the plain way
	}
	si := res.Stream
	x.streamsMu.Lock()
	if x.streams == nil {
		x.streams = make(map[string]streamRef)
	}
	ref := streamRef{id: si.ID, opts: streamOptions{contentType: si.ContentType}}
	x.streams[w.name] = ref
	x.streamsMu.Unlock()
	if err := ref.opts.check(w.name, w.opts.contentType); err != nil {
		return nil, err // an existing stream of another type: nothing appended
	}
	w.streamID = si.ID
	if !res.Created {
		return nil, nil
	}
	return res.Append, nil
}

// carriedBatch is a step writer's first batch, handed to the step's
// outcome record instead of sent (Writer.carryFirst, execution.carryVia).
type carriedBatch struct {
	w      *Writer
	chunks [][]byte
}

// carryFirst takes the writer's batch for its step's outcome record, if the
// step returned before the writer sent anything (the first batch lingers,
// WriterConfig.FirstLinger), its stream is not open yet, and the store can
// write the stream's creation, the chunks and the record in one transaction
// (store.StepAppender). Nil if not: the writer sends as it would.
func (w *Writer) carryFirst() *carriedBatch {
	if w.x == nil || w.writer == WorkflowWriterID || w.start == nil || w.x.e.stepAppender() == nil {
		return nil
	}
	w.x.streamsMu.Lock()
	_, opened := w.x.streams[w.name]
	w.x.streamsMu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if opened || w.err != nil || w.closing || w.sent > 0 || w.streamID != 0 || len(w.pend) == 0 || w.start.written() {
		return nil
	}
	c := &carriedBatch{w: w, chunks: w.pend}
	w.pend, w.pendSize = nil, 0
	w.sent, w.ackedN = w.written, w.written // the record acknowledges them, or the step fails
	w.closing = true
	w.poke() // the sender finds nothing to send, and ends
	return c
}

// carryVia writes a step's outcome record with the batch its writer never
// sent, in one transaction (store.OpenAppendParams.Then): the stream's
// creation, the chunks, the record. If the stream exists (another step's,
// or an earlier attempt's), the chunks are appended to it first and the
// record is written alone. Nil for no batch.
func (x *execution) carryVia(c *carriedBatch) advanceVia {
	if c == nil {
		return nil
	}
	w := c.w
	return func(ctx context.Context, p *store.AdvanceParams) error {
		a := store.AppendParams{Writer: w.writer, Attempt: w.attempt, Chunks: c.chunks}
		res, err := x.e.appender.OpenAppend(ctx, &store.OpenAppendParams{RunID: x.run.ID, Name: w.name, ContentType: w.opts.contentType, Append: a, Then: p})
		if err != nil {
			return err
		}
		si := res.Stream
		x.streamsMu.Lock()
		if x.streams == nil {
			x.streams = make(map[string]streamRef)
		}
		ref := streamRef{id: si.ID, opts: streamOptions{contentType: si.ContentType}}
		x.streams[w.name] = ref
		x.streamsMu.Unlock()
		if res.Append != nil {
			if w.start != nil && len(res.Append.Acks) > 0 {
				w.start.stats.count(res.Append, c.chunks, time.Since(w.start.at))
			}
			return nil
		}
		// The store could not take the chunks with the record (their
		// stream appeared after its locks): the start first, which must
		// be durable before a chunk, then the chunks, then the rest.
		if err := ref.opts.check(w.name, w.opts.contentType); err != nil {
			return NonRetryable(err)
		}
		start, rest := splitStart(p, w)
		if start != nil {
			if err := x.e.store.Advance(ctx, start); err != nil {
				return err
			}
		}
		a.StreamID = si.ID
		if _, err := x.e.store.Append(ctx, &a); err != nil {
			return err
		}
		return x.e.store.Advance(ctx, rest)
	}
}

// splitStart splits from p the start of w's attempt (its step_started and
// its fence), if p carries it: start is nil if not.
func splitStart(p *store.AdvanceParams, w *Writer) (start, rest *store.AdvanceParams) {
	r := *p
	r.Events = nil
	var evs []store.Event
	for _, e := range p.Events {
		if e.Type == store.EventStepStarted && stepWriter(e.Op) == w.writer && e.Attempt == w.attempt {
			evs = append(evs, e)
			continue
		}
		r.Events = append(r.Events, e)
	}
	if len(evs) == 0 {
		return nil, p
	}
	start = &store.AdvanceParams{RunID: p.RunID, LeaseEpoch: p.LeaseEpoch, Events: evs}
	if f := p.Fence; f != nil && f.Writer == w.writer {
		start.Fence, r.Fence = f, nil
	}
	return start, &r
}

// openRetrying opens the stream as send does, retrying errors that may be
// transient.
func (w *Writer) openRetrying() error {
	return w.retrying("stream open failed; trying again", w.open)
}

// retrying calls f until it succeeds, fails for good, or WriterConfig's
// RetryFor passes, backing off between tries. An error once the step's
// context ended is why it ended (a fence, a lost lease, a cancel), not the
// context's.
func (w *Writer) retrying(warn string, f func() error) error {
	deadline := time.Now().Add(w.cfg.RetryFor)
	backoff := 5 * time.Millisecond
	for {
		err := f()
		if err != nil && w.ctx.Err() != nil {
			return context.Cause(w.ctx)
		}
		if err == nil || permanent(err) || time.Now().After(deadline) {
			return err
		}
		w.x.e.log.Warn("weir: "+warn, "run", w.x.run.ID, "stream", w.name, "err", err)
		select {
		case <-time.After(backoff):
		case <-w.ctx.Done():
			return context.Cause(w.ctx)
		}
		backoff = min(2*backoff, time.Second)
	}
}

// permanent reports whether a store error will not go away by resending:
// the table of errors (package api) says, and a backend's error its
// Temporary method.
func permanent(err error) bool { return !api.Retryable(err) }

// send appends one batch, resending the same (writer, attempt, seq) after
// errors that may be transient: a resend of a batch that did land is
// acknowledged as a retransmit, so this is always safe.
func (w *Writer) send(first int64, chunks [][]byte) error {
	return w.retrying("stream append failed; resending", func() error {
		var res *store.AppendResult
		var err error
		if sa := w.x.e.stepAppender(); w.streamID == 0 && w.start != nil && sa != nil {
			res, err = w.openAppend(sa, first, chunks)
		} else {
			err = w.open()
		}
		if err == nil && res == nil {
			res, err = w.x.e.store.Append(w.ctx, &store.AppendParams{
				StreamID: w.streamID, Writer: w.writer, Attempt: w.attempt, FirstSeq: first, Chunks: chunks,
			})
		}
		if err == nil && w.start != nil {
			w.start.stats.count(res, chunks, time.Since(w.start.at))
		}
		return err
	})
}

func (w *Writer) open() error {
	if w.streamID != 0 {
		return nil
	}
	if w.start == nil {
		id, err := w.x.streamID(w.ctx, w.name, w.opts.contentType)
		if err != nil {
			return err
		}
		w.streamID = id
		return nil
	}
	// The start must be durable before the first append, the stream must
	// exist: neither waits for the other, so they share a group commit.
	var (
		id    int64
		idErr error
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		id, idErr = w.x.streamID(w.ctx, w.name, w.opts.contentType)
	}()
	startErr := w.start.ensure()
	<-done
	if startErr != nil {
		return fmt.Errorf("record step start: %w", startErr)
	}
	if idErr != nil {
		return idErr
	}
	w.streamID = id
	return nil
}

// streamID opens (creating) the run's stream name and caches its id. A
// content type asked for (not "") must be the stream's: the first open that
// creates the stream sets it.
func (x *execution) streamID(ctx context.Context, name, contentType string) (int64, error) {
	x.streamsMu.Lock()
	defer x.streamsMu.Unlock()
	ref, ok := x.streams[name]
	if !ok {
		info, err := x.e.store.OpenStream(ctx, &store.OpenStreamParams{RunID: x.run.ID, Name: name, Create: true, ContentType: contentType})
		if err != nil {
			return 0, fmt.Errorf("open stream %q: %w", name, err)
		}
		if x.streams == nil {
			x.streams = make(map[string]streamRef)
		}
		ref = streamRef{id: info.ID, opts: streamOptions{contentType: info.ContentType}}

		x.streams[name] = ref
	}
	if err := ref.opts.check(name, contentType); err != nil {
		return 0, err
	}
	return ref.id, nil
}

// streamRef is a run stream this execution opened.
type streamRef struct {
	id   int64
	opts streamOptions
}

// writeWorkflow appends one chunk from workflow code, committed at append.
// On replay the same (writer, seq) comes back and is acknowledged as a
// retransmit; other bytes there mean the workflow is not deterministic.
func (w *Writer) writeWorkflow(p []byte) (int, error) {
	x := w.x
	if x.ended.Load() {
		// Used after its run's execution: leaving would unwind the
		// caller's goroutine, which is not the workflow's.
		return 0, fmt.Errorf("weir: write to %q: %w", w.name, ErrWriterClosed)
	}
	if x.readOnly {
		return len(p), nil
	}
	if x.wfSeq == nil {
		x.wfSeq = make(map[string]int64)
	}
	seq := x.wfSeq[w.name]
	x.settle() // committed at append: after the outcomes before it
	chunk := append([]byte(nil), p...)
	backoff := 5 * time.Millisecond
	deadline := time.Now().Add(x.e.cfg.Writer.RetryFor)
	for {
		err := w.open()
		if err == nil {
			_, err = x.e.store.Append(x.ctx, &store.AppendParams{
				StreamID: w.streamID, Writer: WorkflowWriterID, FirstSeq: seq, Chunks: [][]byte{chunk},
			})
		}
		if err == nil {
			x.wfSeq[w.name] = seq + 1
			x.wfDirty = true
			return len(p), nil
		}
		if errors.Is(err, stream.ErrConflict) {
			x.leave(exitNonDeterminism, &NonDeterminismError{
				Op: x.opSeq, Recorded: fmt.Sprintf("chunk %d of stream %q with other bytes", seq, w.name),
				Replayed: "a write of different bytes",
			})
		}
		if r, ok := x.interrupted(); ok {
			x.leave(r, context.Cause(x.ctx))
		}
		if permanent(err) || time.Now().After(deadline) {
			return 0, fmt.Errorf("weir: write to %q: %w", w.name, err)
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}
