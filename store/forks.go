package store

import (
	"context"
	"fmt"
	"github.com/weirhq/weir/names"
	"time"
)

// Forks is the capability to change what a run does after the fact: fork
// a run from one of its operations into a new run, and resume a run that
// failed or was cancelled. The rules (which operations a fork keeps, where
// each stream is cut, which failures a resume undoes) are package apply's;
// a backend holds the SQL.
type Forks interface {
	// ForkRun creates run p.ID, a fork of run p.Source from operation
	// p.Op (or the first step named p.Step): its log holds the source's
	// events before that operation began, then a run_forked event; each
	// of its streams holds, in the source's order, the records of the
	// operations it keeps (their committed chunks, and their attempts'
	// aborted ones with the aborts that void them) and the workflow
	// code's chunks written before the fork point; hooks the kept
	// operations created and did not dispose are the fork's. It is
	// pending: any worker of its workflow and version claims it. A fork
	// with p.ID that exists is returned (created false) if it is a fork
	// of the same run from the same operation, else ErrRunConflict.
	//
	// Returns ErrNotFound (no source), ErrInvalid (a fork point past the
	// run's end, inside a parallel group, a step name the run has not
	// reached, a World run), ErrHookConflict (a kept hook is live in
	// another run: the source, still running).
	ForkRun(ctx context.Context, p *ForkRunParams) (run *Run, created bool, err error)
	// ResumeRun makes a failed or cancelled run pending again, with its
	// id and history: a run_resumed event names the steps whose final
	// failures ended it, which run again under their retry policies; its
	// streams reopen (a reopen record follows their close) and those
	// steps' writers take new attempts. Returns ErrNotFound, and
	// ErrNotResumable for a run that has not ended, one that completed
	// (there is nothing to resume) and a World run.
	ResumeRun(ctx context.Context, p *ResumeRunParams) (*Run, error)
}

// ErrNotResumable is returned by ResumeRun for a run that did not fail and
// was not cancelled: running, pending, completed, or a World run.
var ErrNotResumable = fmt.Errorf("%w: only a failed or cancelled run can be resumed", ErrInvalid)

// Event types of forks and resumes. Both have Op 0: replay skips them.
const (
	// EventRunForked ends the log a fork inherited: Name is the source
	// run, Data {"op": the fork point}.
	EventRunForked EventType = "run_forked"
	// EventRunResumed marks a resume: Data {"ops": [...]}, the steps whose
	// final failures it undid (they run again).
	EventRunResumed EventType = "run_resumed"
	// EventStreamMark records, when the workflow reaches operation Op,
	// how many chunks its code (weir.WorkflowWriterID) had written on
	// each stream: Data {"name": count}. A fork from Op cuts the workflow
	// writer's chunks there. Written only when the workflow code wrote
	// since the last mark.
	EventStreamMark EventType = "stream_mark"
)

// ForkRunParams forks a run (Forks.ForkRun).
type ForkRunParams struct {
	Source string // the run forked; required
	ID     string // the fork's id; required: the caller's idempotency key
	// Op is the first operation the fork runs again (1-based, as the
	// run's log numbers them); the operations before it are kept. Op
	// past the source's last operation + 1 is ErrInvalid. Zero: Step.
	Op int64
	// Step, with Op zero, names the fork point: the first operation that
	// is a step of that name.
	Step string
	// Input, if not nil, is the fork's input (JSON); nil: the source's.
	// The kept operations replay their recorded outcomes whatever it is.
	Input []byte
	// Version is the application version the fork starts on; "" keeps
	// the source's (Run.Version).
	Version string
	Now     time.Time // zero: the store's clock
}

// Check validates p.
func (p *ForkRunParams) Check() error {
	if err := CheckRunID(p.Source); err != nil {
		return err
	}
	if err := nameErr(names.MintedRunID(p.ID)); err != nil {
		return err
	}
	if p.ID == p.Source {
		return fmt.Errorf("%w: a fork needs an id of its own, not its source's %q", ErrInvalid, p.ID)
	}
	if p.Op < 0 {
		return fmt.Errorf("%w: fork point op %d", ErrInvalid, p.Op)
	}
	if p.Op == 0 && p.Step == "" {
		return fmt.Errorf("%w: a fork needs a fork point: an operation or a step name", ErrInvalid)
	}
	if p.Op > 0 && p.Step != "" {
		return fmt.Errorf("%w: a fork point is an operation or a step name, not both", ErrInvalid)
	}
	if err := checkVersion(p.Version); err != nil {
		return err
	}
	return nil
}

// ResumeRunParams resumes a run (Forks.ResumeRun).
type ResumeRunParams struct {
	ID  string
	Now time.Time // zero: the store's clock
}

// Check validates p.
func (p *ResumeRunParams) Check() error { return CheckRunID(p.ID) }
