package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/stream"
)

// Forks and resumes under torture. In half the trials the workers, once
// every run ended, fork one or two runs from a seeded operation (every
// worker process asks, with the fork's id: one fork), run the forks under
// the trial's faults, and resume a fork that failed, once. The checker
// then holds every fork to docs/semantics.md ("Forks and resumes"): a
// fork is made exactly when apply.PlanFork accepts its point; it ends;
// the operations it keeps never run again; its streams begin with the
// kept steps' committed chunks, equal to the source's, and the workflow's
// chunks below the fork point's mark, equal to the source's; a resume
// reruns only the steps it names and those after them, and reopens every
// stream once.

// ForkSpec is a fork of a trial's run.
type ForkSpec struct {
	Source string // the run forked (a RunSpec's ID)
	Op     int64  // the fork point
	ID     string // the fork's id
}

// addForks, in two trials of three, forks one or two runs whose id is known
// and do nothing but steps, workflow writes, sleeps and hooks, from any
// operation after their last hook (its payloads are delivered to the
// source; a fork keeps them) up to one past their last. A message, a child
// run, a cancel are the source's: runs with those are not forked. Its own
// stream of the seed keeps the rest of the schedule as it was.
func addForks(t *Trial, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0xf0_12c))
	if r.IntN(3) == 0 {
		return
	}
	var cands []int
	for i := range t.Runs {
		rs := &t.Runs[i]
		if rs.Start == StartHTTPKey || rs.Workflow != "" { // a key-started run's id is the server's
			continue
		}
		ok := true
		for _, it := range rs.Items {
			switch it.Kind {
			case ItemStep, ItemWFWrite, ItemSleep, ItemHook:
			default:
				ok = false
			}
		}
		if ok {
			cands = append(cands, i)
		}
	}
	if len(cands) == 0 {
		// None to fork: a run of its own, to fork.
		rs := genRun(r, t.Prefix+"-rf", 1)
		rs.Prefix = t.Prefix
		t.Runs = append(t.Runs, rs)
		cands = append(cands, len(t.Runs)-1)
	}
	r.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	for k, i := range cands[:min(len(cands), 1+r.IntN(2))] {
		if op := pickForkPoint(r, &t.Runs[i]); op > 0 {
			t.Forks = append(t.Forks, ForkSpec{Source: t.Runs[i].ID, Op: op, ID: fmt.Sprintf("%s-fork%d", t.Runs[i].ID, k)})
		}
	}
}

// pickForkPoint picks a fork point of rs after its last hook, 0 for none:
// mostly one its log will have (not inside a parallel group, not past the
// step that fails the run), sometimes any, for the refusals. A hook's
// takers use ops after its own (timers, selects) up to the next item's:
// a point among them would fork from inside the wait, and the payloads
// delivered to the source after it are the source's, never sent again. So
// the points are steps' and sleeps' ops after the last hook, and the end
// only when the run does not end with a hook.
func pickForkPoint(r *rand.Rand, rs *RunSpec) int64 {
	var maxOp, lastHook int64
	for _, it := range rs.Items {
		maxOp = max(maxOp, it.Op)
		if it.Kind == ItemHook {
			lastHook = it.Op
		}
	}
	endsWithHook := lastHook == maxOp && lastHook > 0
	if r.IntN(4) == 0 && lastHook == 0 {
		return 1 + r.Int64N(maxOp+1)
	}
	var points []int64
	prevGroup := 0
	for _, it := range rs.Items {
		if it.Op > lastHook && (it.Kind == ItemStep || it.Kind == ItemSleep) && (it.Group == 0 || it.Group != prevGroup) {
			points = append(points, it.Op)
		}
		if it.Kind == ItemStep {
			prevGroup = it.Group
			if it.Final && !rs.ContinueOnFail && len(points) > 0 {
				return points[r.IntN(len(points))]
			}
		}
	}
	if !endsWithHook {
		points = append(points, maxOp+1)
	}
	if len(points) == 0 {
		return 0
	}
	return points[r.IntN(len(points))]
}

// forkPhase is the workers' part, once every run of the trial ended: make
// the forks (a refused point is the checker's to judge), wait for them to
// end, resume each that failed once, and wait again.
func forkPhase(ctx context.Context, s store.Full, t *Trial) error {
	if len(t.Forks) == 0 {
		return nil
	}
	retry := func(f func() error) error {
		for {
			err := f()
			if err == nil || ctx.Err() != nil {
				return err
			}
			if !errors.Is(err, store.ErrClosedStore) && (errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrHookConflict) || errors.Is(err, store.ErrNotFound)) {
				return nil // refused: the checker decides whether rightly
			}
			select { // a restarting database
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	for _, f := range t.Forks {
		if err := retry(func() error {
			_, _, err := s.ForkRun(ctx, &store.ForkRunParams{Source: f.Source, ID: f.ID, Op: f.Op})
			return err
		}); err != nil {
			return err
		}
	}
	wait := func() error {
		for _, f := range t.Forks {
			for {
				r, err := s.GetRun(ctx, f.ID)
				if errors.Is(err, store.ErrNotFound) || err == nil && r.Status.Terminal() {
					break
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(30 * time.Millisecond):
				}
			}
		}
		return nil
	}
	if err := wait(); err != nil {
		return err
	}
	for _, f := range t.Forks {
		if err := retry(func() error {
			r, err := s.GetRun(ctx, f.ID)
			if err != nil || r.Status != store.RunFailed {
				return err
			}
			evs, err := s.ListEvents(ctx, f.ID, 0)
			if err != nil {
				return err
			}
			for _, e := range evs {
				if e.Type == store.EventRunResumed {
					return nil // resumed once already (by another worker)
				}
			}
			_, err = s.ResumeRun(ctx, &store.ResumeRunParams{ID: f.ID})
			return err
		}); err != nil {
			return err
		}
	}
	return wait()
}

// checkForks holds the trial's forks to their rules.
func (c *checker) checkForks(ctx context.Context, t *Trial) error {
	for _, f := range t.Forks {
		if err := c.checkFork(ctx, &f); err != nil {
			return err
		}
	}
	return nil
}

func (c *checker) checkFork(ctx context.Context, f *ForkSpec) error {
	where := "fork " + f.ID
	src, err := c.s.GetRun(ctx, f.Source)
	if err != nil {
		return fmt.Errorf("%s: source: %w", where, err)
	}
	srcEvents, err := c.s.ListEvents(ctx, f.Source, 0)
	if err != nil {
		return fmt.Errorf("%s: source's events: %w", where, err)
	}
	plan, perr := apply.PlanFork(src, srcEvents, &store.ForkRunParams{Source: f.Source, ID: f.ID, Op: f.Op})
	fork, err := c.s.GetRun(ctx, f.ID)
	switch {
	case perr != nil && errors.Is(err, store.ErrNotFound):
		c.stats.ForksRefused++
		return nil
	case perr != nil && err == nil:
		c.fail("fork", where, "made, though its point op %d is refused: %v", f.Op, perr)
		return nil
	case errors.Is(err, store.ErrNotFound):
		c.fail("fork", where, "not made from op %d of %s, which PlanFork accepts", f.Op, f.Source)
		return nil
	case err != nil:
		return fmt.Errorf("%s: %w", where, err)
	}
	c.stats.Forks++
	if !fork.Status.Terminal() {
		c.fail("fork", where, "did not end: %s", fork.Status)
	}
	// The same code on the same path: a completed run's fork completes
	// (its steps have attempts to spare for the workers the faults take).
	if src.Status == store.RunCompleted && fork.Status != store.RunCompleted {
		c.fail("fork", where, "of a completed run ended %s: %s", fork.Status, fork.Error)
	}
	events, err := c.s.ListEvents(ctx, f.ID, 0)
	if err != nil {
		return fmt.Errorf("%s: events: %w", where, err)
	}
	// The kept operations never run again; after a resume, only the steps
	// it names and those after them do.
	forked, resumes := false, 0
	var allowed func(op int64) bool
	for _, e := range events {
		switch e.Type {
		case store.EventRunForked:
			forked = true
			allowed = func(op int64) bool { return op >= plan.Op }
		case store.EventRunResumed:
			resumes++
			c.stats.Resumes++
			var d struct{ Ops []int64 }
			if err := json.Unmarshal(e.Data, &d); err != nil {
				c.fail("fork", where, "run_resumed %s: %v", e.Data, err)
				continue
			}
			if len(d.Ops) > 0 {
				first, last := slices.Min(d.Ops), slices.Max(d.Ops)
				allowed = func(op int64) bool { return op >= first && (slices.Contains(d.Ops, op) || op > last) }
			}
		case store.EventStepStarted:
			if forked && allowed != nil && !allowed(e.Op) {
				c.fail("fork", where, "op %d (%s) started again at attempt %d: it was kept (fork point %d)", e.Op, e.Name, e.Attempt, plan.Op)
			}
		}
	}
	if !forked {
		c.fail("fork", where, "its log has no run_forked event")
	}
	// Its streams.
	srcStreams, err := c.s.ListStreams(ctx, f.Source)
	if err != nil {
		return err
	}
	forkStreams, err := c.s.ListStreams(ctx, f.ID)
	if err != nil {
		return err
	}
	byName := map[string]*store.StreamInfo{}
	for _, si := range forkStreams {
		byName[si.Name] = si
	}
	for _, ss := range srcStreams {
		fs := byName[ss.Name]
		if fs == nil {
			c.fail("fork", where, "has no stream %q, which its source has", ss.Name)
			continue
		}
		srcRecs, _, err := ReadLive(ctx, c.s, ss.ID)
		if err != nil {
			return err
		}
		forkRecs, _, err := ReadLive(ctx, c.s, fs.ID)
		if err != nil {
			return err
		}
		sw, fw := committedByWriter(srcRecs), committedByWriter(forkRecs)
		kept := func(writer string) bool {
			var op int64
			if _, err := fmt.Sscanf(writer, "step/%d", &op); err == nil {
				return op < plan.Op
			}
			return false
		}
		for w, chunks := range sw {
			if kept(w) && !equalChunks(fw[w], chunks) {
				c.fail("fork", where+" stream "+ss.Name, "kept writer %s: %d committed chunks, the source's %d differ", w, len(fw[w]), len(chunks))
			}
		}
		for w := range fw {
			if kept(w) && sw[w] == nil {
				c.fail("fork", where+" stream "+ss.Name, "kept writer %s has chunks the source never committed", w)
			}
		}
		n := int(plan.Workflow[ss.Name])
		if got, want := fw["workflow"], sw["workflow"]; len(got) < n || len(want) < n || !equalChunks(got[:n], want[:n]) {
			c.fail("fork", where+" stream "+ss.Name, "the workflow's first %d chunks (the fork point's mark) differ from the source's", n)
		}
		// Nothing of the copy is void, and the copy comes first.
		var closes, reopens int
		for i, r := range forkRecs {
			switch r.Kind {
			case stream.KindClose:
				closes++
			case stream.KindReopen:
				reopens++
			case stream.KindData:
				if r.Attempt != 0 && i < keptCount(sw, plan, ss.Name, kept) {
					c.fail("fork", where+" stream "+ss.Name, "record %d, in the copied part, has attempt %d", r.Offset, r.Attempt)
				}
				// A step the fork runs again writes with its attempts: a
				// chunk of it committed at append was copied, wrongly.
				var op int64
				if _, err := fmt.Sscanf(r.Writer, "step/%d", &op); err == nil && op >= plan.Op && r.Attempt == 0 {
					c.fail("fork", where+" stream "+ss.Name, "record %d of %s, a step the fork runs again, was copied from the source", r.Offset, r.Writer)
				}
			}
		}
		if reopens != resumes || fork.Status.Terminal() && closes != resumes+1 {
			c.fail("fork", where+" stream "+ss.Name, "%d closes and %d reopens for %d resumes of a %s run", closes, reopens, resumes, fork.Status)
		}
	}
	return nil
}

// keptCount is how many records a fork's stream copied: the kept writers'
// committed chunks and the workflow's below its mark.
func keptCount(sw map[string][][]byte, plan *apply.ForkPlan, name string, kept func(string) bool) int {
	n := int(min(plan.Workflow[name], int64(len(sw["workflow"]))))
	for w, chunks := range sw {
		if kept(w) {
			n += len(chunks)
		}
	}
	return n
}

// committedByWriter is a stream's committed chunks by writer, in order.
func committedByWriter(recs []stream.Record) map[string][][]byte {
	out := map[string][][]byte{}
	cv := stream.NewCommitted(0)
	for i := range recs {
		cv.Push(&recs[i], func(r *stream.Record) {
			if r.Kind == stream.KindData {
				out[r.Writer] = append(out[r.Writer], r.Data)
			}
		})
	}
	return out
}

func equalChunks(a, b [][]byte) bool {
	return slices.EqualFunc(a, b, func(x, y []byte) bool { return string(x) == string(y) })
}
