package stream

import (
	"errors"
	"fmt"
)

// This file holds the request-level rules of the Durable Streams protocol:
// the idempotent producer (Producer-Id, Producer-Epoch, Producer-Seq) and
// Stream-Seq. Unlike a Writer they count requests, not chunks, and they never
// compare bytes: a retried request is acknowledged without being looked at,
// and the first request at a seq wins. A store applies them inside the same
// transaction as the append they guard.

// Producer is one request of a Durable Streams idempotent producer.
type Producer struct {
	ID    string
	Epoch int64
	Seq   int64
}

// ProducerState is what a store keeps per (stream, producer id).
type ProducerState struct {
	Epoch   int64 // the producer's current epoch
	LastSeq int64 // the highest seq accepted in Epoch
}

// Errors of the producer and Stream-Seq rules; test with errors.Is.
var (
	// ErrStaleEpoch is returned to a request whose epoch is older than the
	// producer's current one: a zombie producer. See StaleEpochError.
	ErrStaleEpoch = errors.New("stale producer epoch")
	// ErrEpochSeq is returned when a producer starts a new epoch at a seq
	// other than 0.
	ErrEpochSeq = errors.New("a new producer epoch must start at seq 0")
	// ErrProducerGap is returned when a producer skips seqs. See
	// ProducerGapError.
	ErrProducerGap = errors.New("producer sequence gap")
	// ErrStreamSeq is returned when a Stream-Seq does not sort after the
	// stream's last one. See StreamSeqError.
	ErrStreamSeq = errors.New("stream seq regression")
)

// StaleEpochError reports a request from an older epoch. It matches
// ErrStaleEpoch.
type StaleEpochError struct {
	Epoch   int64 // the request's epoch
	Current int64 // the producer's current epoch
}

func (e *StaleEpochError) Error() string {
	return fmt.Sprintf("stale producer epoch: epoch %d is older than current epoch %d", e.Epoch, e.Current)
}

// Is makes errors.Is(err, ErrStaleEpoch) true.
func (e *StaleEpochError) Is(target error) bool { return target == ErrStaleEpoch }

// ProducerGapError reports a skipped producer seq. It matches ErrProducerGap.
type ProducerGapError struct {
	Expected int64 // the seq the producer must send next
	Received int64 // the request's seq
}

func (e *ProducerGapError) Error() string {
	return fmt.Sprintf("producer sequence gap: expected seq %d, got %d", e.Expected, e.Received)
}

// Is makes errors.Is(err, ErrProducerGap) true.
func (e *ProducerGapError) Is(target error) bool { return target == ErrProducerGap }

// StreamSeqError reports a Stream-Seq that does not sort after the last one.
// It matches ErrStreamSeq.
type StreamSeqError struct {
	Last string // the stream's last accepted Stream-Seq
	Got  string
}

func (e *StreamSeqError) Error() string {
	return fmt.Sprintf("stream seq regression: %q does not sort after the last seq %q", e.Got, e.Last)
}

// Is makes errors.Is(err, ErrStreamSeq) true.
func (e *StreamSeqError) Is(target error) bool { return target == ErrStreamSeq }

// Produce decides producer request p given the producer's state st (nil: the
// producer never wrote on this stream). It returns the state to save if the
// request is accepted, or dup true for a retry of an accepted request, which
// must be acknowledged without appending anything (next is then the state
// unchanged, its LastSeq the highest seq accepted).
//
//	no state:             seq 0 accepted (any epoch); other seqs ProducerGapError{Expected: 0}
//	epoch < current:      StaleEpochError
//	epoch > current:      seq 0 accepted as the new epoch; other seqs ErrEpochSeq
//	epoch == current:     seq <= last is a duplicate, last+1 is accepted,
//	                      anything higher is a ProducerGapError
//
// Errors: *StaleEpochError, ErrEpochSeq, *ProducerGapError; and a plain error
// for a negative epoch or seq.
func Produce(st *ProducerState, p Producer) (next ProducerState, dup bool, err error) {
	if p.Epoch < 0 || p.Seq < 0 {
		return ProducerState{}, false, fmt.Errorf("producer epoch %d and seq %d must not be negative", p.Epoch, p.Seq)
	}
	switch {
	case st == nil:
		if p.Seq != 0 {
			return ProducerState{}, false, &ProducerGapError{Expected: 0, Received: p.Seq}
		}
		return ProducerState{Epoch: p.Epoch, LastSeq: 0}, false, nil
	case p.Epoch < st.Epoch:
		return *st, false, &StaleEpochError{Epoch: p.Epoch, Current: st.Epoch}
	case p.Epoch > st.Epoch:
		if p.Seq != 0 {
			return *st, false, fmt.Errorf("%w: epoch %d begins at seq %d", ErrEpochSeq, p.Epoch, p.Seq)
		}
		return ProducerState{Epoch: p.Epoch, LastSeq: 0}, false, nil
	case p.Seq <= st.LastSeq:
		return *st, true, nil
	case p.Seq == st.LastSeq+1:
		return ProducerState{Epoch: st.Epoch, LastSeq: p.Seq}, false, nil
	default:
		return *st, false, &ProducerGapError{Expected: st.LastSeq + 1, Received: p.Seq}
	}
}

// CheckStreamSeq applies the Stream-Seq rule: a request's seq must sort
// strictly after the stream's last accepted one, bytewise (so "10" does not
// follow "2"). An empty seq is no seq; last empty means none yet.
func CheckStreamSeq(last, got string) error {
	if got == "" || last == "" || got > last {
		return nil
	}
	return &StreamSeqError{Last: last, Got: got}
}
