package apply

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
	"github.com/weirhq/weir/world"
)

// WorldTx is a Tx that also holds the World's entities. A backend runs a
// World event in one transaction that locks the event's run first.
type WorldTx interface {
	Tx
	// WorldRun returns a World run's head (world.Run.Head: without its
	// input and output), nil if there is none: an event is decided on the
	// run's state, and a run's data (up to 30 MiB) is read, if a reply
	// carries it, after the commit (WorldReplyData), not in the writer.
	WorldRun(id string) (*world.Run, error)
	// WorldStep, WorldHook, WorldHookByToken and WorldWait return the
	// entity, nil if there is none (hooks: live ones only).
	WorldStep(runID, stepID string) (*world.Step, error)
	WorldHook(hookID string) (*world.Hook, error)
	WorldHookByToken(token string) (*world.Hook, error)
	WorldWait(runID, waitID string) (*world.Wait, error)
	// WorldRunStream returns run's World stream name, nil if none.
	WorldRunStream(runID, name string) (*Stream, error)

	// SaveWorldRun saves a World run (its runs row too, kind "world"):
	// created, whole; else its state, and its output if output (the event
	// set it: world.Outcome.SetsOutput). Its input, and an output it does
	// not set, stay as stored: a run loaded is a head, without them.
	SaveWorldRun(r *world.Run, created, output bool) error
	SaveWorldStep(s *world.Step, created bool) error
	SaveWorldHook(h *world.Hook) error
	// DisposeWorldHooks disposes one hook, or every hook of runID if
	// hookID is empty.
	DisposeWorldHooks(runID, hookID string) error
	SaveWorldWait(w *world.Wait, created bool) error
	// DeleteWorldWaits removes a run's waits (its end).
	DeleteWorldWaits(runID string) error
	// AddWorldEvents appends events at their slots.
	AddWorldEvents(evs []world.Event) error
}

// WorldEvent applies one World event on tx: the rules decide (world.Decide),
// then the entities, the events at the run's next slots and the stream
// effects are saved, in one transaction. Everything that can refuse the
// event is checked first, the finish of the step's writer on each stream
// included (tried on copies, as Advance does).
func WorldEvent(tx WorldTx, p *store.WorldEventParams, ids world.IDs) (*store.WorldEventResult, error) {
	req := &p.Request
	st, err := loadWorld(tx, req)
	if err != nil {
		return nil, err
	}
	out, err := world.Decide(st, req, p.Now, ids)
	if err != nil {
		return nil, err
	}
	plan, err := planWorldEvent(tx, req, out)
	if err != nil {
		return nil, err
	}
	// Nothing can refuse the event from here on.
	run := out.Run
	if run == nil {
		run = st.Run // Decide refuses an event of no run
	}
	if run, err = saveWorldEvent(tx, plan, out, run); err != nil {
		return nil, err
	}
	res := &store.WorldEventResult{Events: out.Events}
	if out.Returns.Run {
		res.Run = run
	}
	if out.Returns.Step {
		res.Step = out.Step
	}
	if out.Returns.Hook {
		res.Hook = out.Hook
	}
	if out.Returns.Wait {
		res.Wait = out.Wait
	}
	return res, nil
}

// worldPlan is what a World event's stream effects will do, checked
// before anything is saved: its run, its step's writer and that writer's
// fence, the finishes tried on copies, the streams it closes.
type worldPlan struct {
	runID, writer string
	fence         int64
	finishes      []tried
	closes        []*Stream
}

// planWorldEvent checks everything that can refuse the event out decided:
// a new run under a Go run's id, and the finish of the step's writer on
// each stream.
func planWorldEvent(tx WorldTx, req *world.Request, out *world.Outcome) (*worldPlan, error) {
	pl := &worldPlan{runID: req.RunID}
	if out.Run != nil {
		pl.runID = out.Run.RunID
	}
	if out.NewRun {
		// World runs and Go runs share their ids: a World run cannot be
		// created under a Go run's.
		if _, err := tx.Run(pl.runID); err == nil {
			return nil, fmt.Errorf("%w: run %q exists and is not a World run", world.ErrConflict, pl.runID)
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
	}
	pl.writer = world.StepWriter(out.StepID)
	var err error
	if out.Fence > 0 {
		if pl.fence, err = tx.Fence(pl.runID, pl.writer); err != nil {
			return nil, err
		}
	}
	switch {
	case out.Commit > 0:
		pl.finishes, err = tryFinishOn(tx, pl.runID, &store.Finish{Writer: pl.writer, Attempt: out.Commit, Commit: true}, 0)
	case out.Abort > 0:
		pl.finishes, err = tryFinishOn(tx, pl.runID, &store.Finish{Writer: pl.writer, Attempt: out.Abort}, 0)
	}
	if err != nil {
		return nil, err
	}
	for _, name := range out.Closes {
		s, err := tx.WorldRunStream(pl.runID, name)
		if err != nil {
			return nil, err
		}
		if s != nil {
			pl.closes = append(pl.closes, s)
		}
	}
	return pl, nil
}

// saveWorldEvent saves what out decided and pl planned: the run with its
// events at its next slots, the step, hook and wait, a run's end, the
// fence, the finishes and the closes. It returns the run as saved.
func saveWorldEvent(tx WorldTx, pl *worldPlan, out *world.Outcome, run *world.Run) (*world.Run, error) {
	next := *run
	for i := range out.Events {
		next.Events++
		out.Events[i].Slot = next.Events
	}
	if out.Run != nil || len(out.Events) > 0 {
		if err := tx.SaveWorldRun(&next, out.NewRun, out.SetsOutput); err != nil {
			return nil, err
		}
	}
	if err := tx.AddWorldEvents(out.Events); err != nil {
		return nil, err
	}
	if out.Step != nil {
		if err := tx.SaveWorldStep(out.Step, out.NewStep); err != nil {
			return nil, err
		}
	}
	switch {
	case out.Hook != nil && out.DisposeHook:
		if err := tx.DisposeWorldHooks(pl.runID, out.Hook.HookID); err != nil {
			return nil, err
		}
	case out.Hook != nil:
		if err := tx.SaveWorldHook(out.Hook); err != nil {
			return nil, err
		}
	}
	if out.Wait != nil {
		if err := tx.SaveWorldWait(out.Wait, out.NewWait); err != nil {
			return nil, err
		}
	}
	if out.Ended {
		if err := tx.DisposeWorldHooks(pl.runID, ""); err != nil {
			return nil, err
		}
		if err := tx.DeleteWorldWaits(pl.runID); err != nil {
			return nil, err
		}
	}
	if out.Fence > pl.fence {
		if err := tx.SaveFence(pl.runID, pl.writer, out.Fence); err != nil {
			return nil, err
		}
	}
	if err := saveFinishes(tx, pl.finishes); err != nil {
		return nil, err
	}
	for _, s := range pl.closes {
		for _, f := range pl.finishes {
			if f.st.ID == s.ID {
				s = f.st
			}
		}
		if _, err := closeStream(tx, s); err != nil {
			return nil, err
		}
	}
	return &next, nil
}

// WorldReplyData completes run, a World event's reply read as a head
// (world.Run.Head), with its data read after the commit: input and output
// the run's stored ones, and status the status stored with them. Its
// input is the run's from its creation; its output is an event's that
// set it (run's own, kept), or else the stored one if the run's status is
// still run's (a run that ended since has an output this reply's state
// has not). A nil input (the run gone since: a purge) leaves run as it
// is. It returns a copy: run may be the writer's.
func WorldReplyData(run *world.Run, input, output []byte, status world.Status) *world.Run {
	if run == nil || !run.Head || input == nil {
		return run
	}
	c := *run
	c.Head, c.Input = false, input
	if c.Output == nil && status == run.Status {
		c.Output = output
	}
	return &c
}

// loadWorld loads what the event's rules read.
func loadWorld(tx WorldTx, req *world.Request) (*world.State, error) {
	st := &world.State{}
	var err error
	if req.RunID != "" {
		if st.Run, err = tx.WorldRun(req.RunID); err != nil {
			return nil, err
		}
	}
	switch req.Type {
	case world.StepCreated, world.StepStarted, world.StepCompleted, world.StepFailed, world.StepRetrying:
		st.Step, err = tx.WorldStep(req.RunID, req.CorrelationID)
	case world.HookCreated, world.HookReceived, world.HookDisposed:
		if st.Hook, err = tx.WorldHook(req.CorrelationID); err == nil && req.Type == world.HookCreated {
			st.TokenHolder, err = tx.WorldHookByToken(tokenOf(req))
		}
	case world.WaitCreated, world.WaitCompleted:
		st.Wait, err = tx.WorldWait(req.RunID, world.WaitID(req.RunID, req.CorrelationID))
	}
	return st, err
}

// tokenOf is a hook_created's token ("" if its data has none: Decide
// refuses it).
func tokenOf(req *world.Request) string {
	var v struct {
		Token string `json:"token"`
	}
	_ = json.Unmarshal(req.Data, &v)
	return v.Token
}

// tryFinishOn decides finish f on every stream of run its writer wrote on,
// on copies, below a fence (0: the stored one).
func tryFinishOn(tx Tx, run string, f *store.Finish, fence int64) ([]tried, error) {
	stored, err := tx.Fence(run, f.Writer)
	if err != nil {
		return nil, err
	}
	return tryFinishAll(tx, run, f, max(stored, fence))
}

// saveFinishes writes what tryFinish decided.
func saveFinishes(tx Tx, finishes []tried) error {
	for _, f := range finishes {
		f.st.Head, *f.w = f.head, f.after
		if f.res != stream.Done {
			continue
		}
		if err := tx.AddRecords(f.st, f.recs); err != nil {
			return err
		}
		if err := tx.SaveWriter(f.st, f.w, false); err != nil {
			return err
		}
	}
	return nil
}

// lateWriter is the state a writer starts with on a stream it never wrote
// on: open, unless it is a World step's writer appending late (Late) at the
// attempt its step ended with. Then the attempt's outcome applies here too:
// completed, the writer starts committed, so that the chunks are appended
// and committed at once; failed, it starts aborted, and they are refused.
// (A step's stream can be new after its outcome: v4 pipes a stream a step
// returns only after the step completed.) The store holds the run's lock,
// so the step cannot end between this look and the append.
func lateWriter(tx Tx, st *Stream, p *store.AppendParams) *stream.Writer {
	w := &stream.Writer{ID: p.Writer}
	wt, ok := tx.(WorldTx)
	if !p.Late || !ok || st.RunID == "" {
		return w
	}
	id, ok := world.StepOfWriter(p.Writer)
	if !ok {
		return w
	}
	step, err := wt.WorldStep(st.RunID, id)
	if err != nil || step == nil || step.Attempt != p.Attempt {
		return w
	}
	switch step.Status {
	case world.Completed:
		w.Attempt, w.Status = p.Attempt, stream.WriterCommitted
	case world.Failed:
		w.Attempt, w.Status = p.Attempt, stream.WriterAborted
	}
	return w
}

// WorldClose closes a World stream for store.WorldStore.WorldCloseStream:
// at once, or, from a step attempt, when the attempt commits.
func WorldClose(tx WorldTx, p *store.WorldCloseParams) (bool, error) {
	s, err := tx.WorldRunStream(p.RunID, p.Name)
	if err != nil {
		return false, err
	}
	if s == nil {
		return false, fmt.Errorf("world stream %q of run %q: %w", p.Name, p.RunID, store.ErrNotFound)
	}
	if p.StepID != "" {
		step, err := tx.WorldStep(p.RunID, p.StepID)
		if err != nil {
			return false, err
		}
		if step == nil {
			return false, fmt.Errorf("%w: %q", world.ErrStepNotFound, p.StepID)
		}
		next, now := world.CloseAfterCommit(step, p.Attempt, p.Name)
		if !now {
			if next != nil {
				return false, tx.SaveWorldStep(next, false)
			}
			return false, nil
		}
	}
	res, err := closeStream(tx, s)
	return res == stream.Done, err
}
