package weir

import (
	"fmt"

	"github.com/weirhq/weir/store"
)

// Patched reports whether the run takes the path of code patch name: true
// in a run that reaches this point under code that has the patch, false in
// one that passed this point before it was deployed (its log goes on with
// what the old code did). Use it to change a workflow that has runs in
// flight, deterministically:
//
//	if weir.Patched(ctx, "cheaper-model") {
//		out, err = weir.Step(ctx, "draft", draftWithSmallModel)
//	} else {
//		out, err = weir.Step(ctx, "draft", draftWithLargeModel)
//	}
//
// The first time a run reaches it under the patch, the choice is its next
// durable operation (a `patched` event), so every replay takes the same
// path. Once no run that began before the patch is in flight, replace the
// call with DeprecatePatch and drop the old path; once no run that holds
// the marker is in flight either, drop that too.
func Patched(ctx Context, name string) bool {
	x := ctx.execution()
	next := x.opSeq + 1
	if st := x.ops[next]; st != nil || next <= x.maxOp {
		// The log has the run's next operation, or one beyond it: the
		// run went on from here already, with or without the patch.
		if st != nil && st.kind == opPatch && st.name == name {
			x.opSeq++
			return true
		}
		return false
	}
	if x.readOnly {
		x.leave(exitFrontier, nil)
	}
	if err := store.CheckTopic("patch name", name); err != nil {
		panic(fmt.Sprintf("weir: Patched: %v", err))
	}
	op, _ := x.nextOp()
	x.ops[op] = &opState{kind: opPatch, name: name}
	x.record(&store.AdvanceParams{Events: []store.Event{{Type: store.EventPatched, Op: op, Name: name}}})
	return true
}

// DeprecatePatch stands where Patched(ctx, name) stood once the runs that
// began before the patch have all ended: runs that took the patch (their
// log holds its marker) replay past it, and new runs record nothing.
func DeprecatePatch(ctx Context, name string) {
	x := ctx.execution()
	if st := x.ops[x.opSeq+1]; st != nil && st.kind == opPatch && st.name == name {
		x.opSeq++
	}
}
