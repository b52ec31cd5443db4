package store

import (
	"context"
	"fmt"
)

// StepAppender is a store that begins a step's stream in one transaction:
// the stream's creation, the step attempt's start and its first chunks. A
// step that streams its output then costs one commit before its outcome
// instead of two (the start with the creation, then the chunks). The
// engine uses it where the store has it (StepAppenderOf).
type StepAppender interface {
	// OpenAppend appends p.Append's chunks to run p.RunID's stream p.Name,
	// created by this call, after recording p.Start (if set), all in one
	// transaction, all or nothing: a start or an append the rules refuse
	// writes nothing. If the stream exists already, OpenAppend records the
	// start and appends nothing: the result says so (Created false), and
	// the caller appends to Stream.ID. Before the start is recorded, the
	// append is checked against its writer's fence as the start leaves it
	// (*stream.FencedError).
	OpenAppend(ctx context.Context, p *OpenAppendParams) (*OpenAppendResult, error)
}

// OpenAppendParams is an OpenAppend.
type OpenAppendParams struct {
	// RunID and Name name the run stream; ContentType is the type it is
	// created with (DefaultContentType if empty).
	RunID, Name, ContentType string
	// Append is a step writer's append: a Writer, an Attempt, its chunks;
	// its StreamID is ignored. No producer, idempotency key or close.
	Append AppendParams
	// Start, if set, is the attempt's start: an Advance of RunID with
	// events, a fence and a finish (an earlier step's outcome riding with
	// it), no status change, release or delivery.
	Start *AdvanceParams
	// Then, if set, is recorded after the append, in the same transaction:
	// the outcome of a step that returned before its writer sent anything
	// (its start, its completion and the commit of these chunks, with
	// whatever rides along, up to the run's end). With Then there is no
	// Start, and a stream that exists gets the chunks too (Created false,
	// Append set), unless the store cannot lock it in the same transaction:
	// then nothing is written (Append nil), and the caller records the
	// start, appends, and records the rest itself.
	Then *AdvanceParams
}

// OpenAppendResult is the reply to an OpenAppend.
type OpenAppendResult struct {
	// Stream is the stream, as it stood before the append.
	Stream *StreamInfo
	// Created reports that the call created the stream. Append is the
	// append's result when the chunks were appended (and Then recorded);
	// nil when the stream existed and nothing was appended (the start, if
	// any, was recorded; Then was not).
	Created bool
	Append  *AppendResult
}

// Check validates an OpenAppend's shape.
func (p *OpenAppendParams) Check() (path string, err error) {
	o := OpenStreamParams{RunID: p.RunID, Name: p.Name, ContentType: p.ContentType}
	if p.RunID == "" {
		return "", fmt.Errorf("%w: an open-append needs a run stream", ErrInvalid)
	}
	if path, err = o.ResolvePath(); err != nil {
		return "", err
	}
	a := &p.Append
	if a.Writer == "" || a.Producer != nil || a.IdempotencyKey != "" || a.Close || len(a.Chunks) == 0 {
		return "", fmt.Errorf("%w: an open-append is a writer's chunks (no producer, key or close)", ErrInvalid)
	}
	if err := a.Check(); err != nil {
		return "", err
	}
	if s := p.Start; s != nil {
		if s.RunID != p.RunID {
			return "", fmt.Errorf("%w: the start is run %q's, the stream run %q's", ErrInvalid, s.RunID, p.RunID)
		}
		if s.Status != "" || s.CloseStreams || s.Release || s.Deliver != nil || len(s.Output) > 0 || s.Error != "" {
			return "", fmt.Errorf("%w: a start records events, a fence and a finish; it does not end, release or deliver", ErrInvalid)
		}
		if err := s.Check(); err != nil {
			return "", err
		}
	}
	if t := p.Then; t != nil {
		if p.Start != nil {
			return "", fmt.Errorf("%w: an open-append has a start or a then, not both", ErrInvalid)
		}
		if t.RunID != p.RunID {
			return "", fmt.Errorf("%w: the record is run %q's, the stream run %q's", ErrInvalid, t.RunID, p.RunID)
		}
		if err := t.Check(); err != nil {
			return "", err
		}
	}
	return path, nil
}

// StepAppenderOf returns s, or the store it wraps, as a StepAppender.
func StepAppenderOf(s Store) (StepAppender, bool) { return as[StepAppender](s) }
