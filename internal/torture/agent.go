package torture

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// The agent shapes: what weir's agent primitives must survive, generated
// from a random source of their own, so that a seed's other items stay
// what they were without them.
//
//   - hooks whose payloads several takers take at once (Next, Receive,
//     Each, Select against a timer), and hooks closed while payloads are
//     pending: every acknowledged payload must be taken exactly once, in
//     log order;
//   - a step that asks for its own run's cancel, then ignores its context;
//     a run whose deadline passes while a step ignores its context: the
//     run must end within a bound;
//   - steps whose final attempt times out after writing: they must fail
//     with their timeout, not as a lost worker, and their run go on;
//   - child runs, some of whose workers die right after the child's end:
//     the parent must learn of it within a bound.
func addAgentShapes(t *Trial, seed uint64, o GenOptions) {
	r := rand.New(rand.NewPCG(seed, 0xa6e7_5ba9e))
	children := 0
	for i := range t.Runs {
		rs := &t.Runs[i]
		// Hooks: the ones the plan has get takers, and maybe a new one.
		for j := range rs.Items {
			if it := &rs.Items[j]; it.Kind == ItemHook && r.IntN(2) == 0 {
				shapeHook(r, it)
			}
		}
		if r.IntN(3) == 0 {
			it := Item{Kind: ItemHook, Payloads: 1 + r.IntN(5)}
			shapeHook(r, &it)
			insertItem(r, rs, it)
		}
		// Final attempts that time out after writing.
		for j := range rs.Items {
			it := &rs.Items[j]
			if it.Kind == ItemStep && it.TimeoutMillis > 0 && !it.Final && r.IntN(2) == 0 {
				it.FailUpTo = 0
				it.HangUpTo = 1 + r.IntN(2)
				it.MaxAttempts = it.HangUpTo
			}
		}
		if r.IntN(4) == 0 {
			// A step with a timeout and a final attempt that hangs.
			it := Item{Kind: ItemStep, Name: fmt.Sprintf("timeout%d", len(rs.Items)), FlushEvery: 1, HangUpTo: 1 + r.IntN(2),
				Outputs: []Output{{Stream: "s0", Count: 2, MinLen: 1, MaxLen: 64}}}
			it.MaxAttempts, it.TimeoutMillis = it.HangUpTo, 300+r.IntN(300)
			insertItem(r, rs, it)
		}
		// Child runs, in runs started here (their ids are known).
		if rs.Start == StartDirect && r.IntN(3) == 0 {
			child := &RunSpec{ID: fmt.Sprintf("%s-c%d", t.Prefix, children), Seed: r.Uint64(), Workflow: WorkflowChild, Start: StartDirect}
			children++
			for k := range 1 + r.IntN(3) {
				it := Item{Kind: ItemStep, Name: fmt.Sprintf("cstep%d", k), FlushEvery: 1 + r.IntN(5), SleepMicros: r.IntN(1000),
					Outputs: []Output{{Stream: "s0", Count: 1 + r.IntN(20), MinLen: 1, MaxLen: 256}}, MaxAttempts: 10}
				if r.IntN(3) == 0 {
					it.FailUpTo, it.FailAfter = 1, r.IntN(5)
				}
				child.Items = append(child.Items, it)
			}
			assignOps(child)
			insertItem(r, rs, Item{Kind: ItemChild, Child: child})
		}
		// A cancel, in one run in five: the items after it never run.
		if r.IntN(5) == 0 {
			insertItem(r, rs, Item{Kind: ItemCancel, Name: "cancel"})
		}
		assignOps(rs)
	}
	// A run with a deadline and a step that outlives it, in a third of the
	// trials.
	if r.IntN(3) == 0 {
		rs := RunSpec{ID: fmt.Sprintf("%s-d", t.Prefix), Seed: r.Uint64(), Workflow: WorkflowDeadline, Start: StartDirect}
		for k := range r.IntN(3) {
			rs.Items = append(rs.Items, Item{Kind: ItemStep, Name: fmt.Sprintf("dstep%d", k), FlushEvery: 1,
				Outputs: []Output{{Stream: "s0", Count: 1 + r.IntN(10), MinLen: 1, MaxLen: 64}}, MaxAttempts: 10})
		}
		rs.Items = append(rs.Items, Item{Kind: ItemHang, Name: "hang"})
		assignOps(&rs)
		t.Runs = append(t.Runs, rs)
	}
	if children > 0 && slices.Contains(o.Faults, FaultChildKill) && r.IntN(2) == 0 {
		t.Faults = append(t.Faults, Fault{Kind: FaultChildKill, After: 1 + r.IntN(min(children, 2))})
	}
	addMessageShapes(t, seed)
}

// addMessageShapes adds messages to runs, from a random source of their
// own (the shapes above keep their seeds): a run takes a topic's messages
// with several takers, some sent before it asks, some after, and leaves
// the extra ones. Only runs started here: their senders know their ids.
func addMessageShapes(t *Trial, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x3e55a9e5))
	for i := range t.Runs {
		rs := &t.Runs[i]
		if rs.Start != StartDirect || rs.Workflow == WorkflowDeadline || r.IntN(3) != 0 {
			continue
		}
		for k := range 1 + r.IntN(2) {
			it := Item{Kind: ItemRecv, Topic: fmt.Sprintf("t%d", k), Payloads: 1 + r.IntN(5), Extra: r.IntN(3), SelectMillis: r.IntN(60)}
			kinds := []string{TakeReceive, TakeAll2, TakePending, TakeSelect}
			for range r.IntN(4) {
				it.Takers = append(it.Takers, kinds[r.IntN(len(kinds))])
			}
			insertItem(r, rs, it)
		}
		assignOps(rs)
	}
}

// shapeHook gives hook it a takers program, or makes it close early.
func shapeHook(r *rand.Rand, it *Item) {
	if r.IntN(3) == 0 {
		it.CloseEarly = true
		return
	}
	kinds := []string{TakeReceive, TakeAll2, TakePending, TakeSelect, TakeEach}
	for range 1 + r.IntN(4) {
		it.Takers = append(it.Takers, kinds[r.IntN(len(kinds))])
	}
	it.SelectMillis = r.IntN(60)
	it.EachTakes = 1 + r.IntN(3)
}

// insertItem inserts it into rs at a random place between items (never
// inside a group of steps that run at once).
func insertItem(r *rand.Rand, rs *RunSpec, it Item) {
	var at []int
	for i := 0; i <= len(rs.Items); i++ {
		if i > 0 && i < len(rs.Items) && rs.Items[i].Group != 0 && rs.Items[i].Group == rs.Items[i-1].Group {
			continue
		}
		at = append(at, i)
	}
	i := at[r.IntN(len(at))]
	rs.Items = slices.Insert(rs.Items, i, it)
}

// assignOps gives rs's items their durable operation positions, in order.
func assignOps(rs *RunSpec) {
	var op int64
	for i := range rs.Items {
		it := &rs.Items[i]
		if n := it.opSpan(); n > 0 {
			it.Op = op + 1
			op += n
		} else {
			it.Op = 0
		}
	}
}
