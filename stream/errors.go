package stream

import (
	"errors"
	"fmt"
)

// Sentinel errors of the stream rules. Each rule returns one of them, usually
// wrapped in a typed error that carries the expected value; test with
// errors.Is.
var (
	// ErrClosed is returned for an append, commit or abort on a closed stream,
	// unless the append is an exact retransmit of acknowledged chunks.
	ErrClosed = errors.New("stream closed")
	// ErrFenced is returned to an attempt older than the writer's current one:
	// a zombie. Its step must stop. See FencedError.
	ErrFenced = errors.New("attempt fenced")
	// ErrGap is returned when a request's first seq is past the writer's next
	// seq; the whole request is refused. See GapError.
	ErrGap = errors.New("sequence gap")
	// ErrConflict is returned when an acknowledged seq comes back with other
	// bytes. See ConflictError.
	ErrConflict = errors.New("conflicting chunk")
	// ErrWriterFinished is returned for a new chunk or a new attempt of a
	// writer that already committed or was aborted for good.
	ErrWriterFinished = errors.New("writer finished")
	// ErrUnknownWriter is returned to commit or abort a writer that never wrote
	// on the stream.
	ErrUnknownWriter = errors.New("unknown writer")
	// ErrMode is returned when a writer that wrote with attempt 0 (committed at
	// append) is later used with attempts. (The other way round, attempt 0 is
	// older than any attempt: FencedError.)
	ErrMode = errors.New("writer mode mismatch")
	// ErrFull is returned when the new data of a request would take the
	// stream past its byte limit (AppendRequest.MaxBytes); the whole
	// request is refused. See FullError.
	ErrFull = errors.New("stream full")
)

// FullError reports a request whose new data the stream has no room for.
// It matches ErrFull.
type FullError struct {
	Limit  int64 // the stream's limit, in data bytes
	Holds  int64 // the data bytes it holds
	Adding int64 // the new data bytes the request would add
}

func (e *FullError) Error() string {
	return fmt.Sprintf("stream full: it holds %d of its %d data bytes, the request adds %d", e.Holds, e.Limit, e.Adding)
}

// Is makes errors.Is(err, ErrFull) true.
func (e *FullError) Is(target error) bool { return target == ErrFull }

// FencedError reports a zombie attempt. It matches ErrFenced.
type FencedError struct {
	Attempt int64 // the attempt that was refused
	Current int64 // the writer's current attempt
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("attempt fenced: attempt %d is older than current attempt %d", e.Attempt, e.Current)
}

// Is makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// GapError reports a request that skips seqs. It matches ErrGap.
type GapError struct {
	Expected int64 // the seq the writer expects next
	Got      int64 // the request's first seq
}

func (e *GapError) Error() string {
	return fmt.Sprintf("sequence gap: expected seq %d, got %d", e.Expected, e.Got)
}

// Is makes errors.Is(err, ErrGap) true.
func (e *GapError) Is(target error) bool { return target == ErrGap }

// ConflictError reports other bytes at an acknowledged seq. It matches
// ErrConflict.
type ConflictError struct {
	Seq    int64  // the conflicting seq
	Offset int64  // where the acknowledged chunk is
	Want   Digest // the acknowledged chunk's digest
	Got    Digest // the refused chunk's digest
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("conflicting chunk: seq %d was acknowledged at offset %d with digest %s, got digest %s",
		e.Seq, e.Offset, e.Want, e.Got)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }
