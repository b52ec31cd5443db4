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

// slabSize is the size of the buffers step writers copy chunks into.
const slabSize = 256 << 10

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
		w.slab = make([]byte, 0, max(slabSize, len(p)))
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
			wait := w.cfg.Linger - time.Since(w.firstAt)
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

// permanent reports whether a store error will not go away by resending:
// the table of errors (package api) says, and a backend's error its
// Temporary method.
func permanent(err error) bool { return !api.Retryable(err) }

// send appends one batch, resending the same (writer, attempt, seq) after
// errors that may be transient: a resend of a batch that did land is
// acknowledged as a retransmit, so this is always safe.
func (w *Writer) send(first int64, chunks [][]byte) error {
	deadline := time.Now().Add(w.cfg.RetryFor)
	backoff := 5 * time.Millisecond
	for {
		err := w.open()
		if err == nil {
			var res *store.AppendResult
			res, err = w.x.e.store.Append(w.ctx, &store.AppendParams{
				StreamID: w.streamID, Writer: w.writer, Attempt: w.attempt, FirstSeq: first, Chunks: chunks,
			})
			if err == nil && w.start != nil {
				w.start.stats.count(res, chunks, time.Since(w.start.at))
			}
		}
		if err != nil && w.ctx.Err() != nil {
			// The step's context ended under the append: why it did is the
			// error (a fence, a lost lease, a cancel), not the context's.
			return context.Cause(w.ctx)
		}
		if err == nil || permanent(err) || time.Now().After(deadline) {
			return err
		}
		w.x.e.log.Warn("weir: stream append failed; resending", "run", w.x.run.ID, "stream", w.name, "err", err)
		select {
		case <-time.After(backoff):
		case <-w.ctx.Done():
			return context.Cause(w.ctx)
		}
		backoff = min(2*backoff, time.Second)
	}
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
