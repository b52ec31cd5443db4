package pgstore

import (
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
)

// The ops on runs.

// advanceOp is an Advance. Its group saves its token on the run row: when the
// connection is lost after the commit was sent, the retry finds the token
// and knows the Advance committed. So an Advance is never applied twice, and an
// error still means nothing was written.
type advanceOp struct {
	opBase
	p   *store.AdvanceParams // checked
	now int64
	evs int // bytes of its events, for size
}

func newRecordOp(p *store.AdvanceParams, now int64) *advanceOp {
	o := &advanceOp{p: p, now: now, evs: len(p.Output)}
	for i := range p.Events {
		o.evs += len(p.Events[i].Data) + len(p.Events[i].Error)
	}
	return o
}

func (o *advanceOp) plan(g *group, r *readPlan) { r.AdvanceReads(o.p) }

func (o *advanceOp) apply(g *group) error {
	r := g.runs[o.p.RunID]
	if r != nil && o.prevToken != 0 && r.dbToken == o.prevToken {
		return nil // an earlier try committed
	}
	if r != nil {
		r.recorded = true
	}
	return apply.Advance(g, o.p, sqlrow.Time(o.now))
}

func (o *advanceOp) size() int  { return 256 + o.evs }
func (o *advanceOp) clear(bool) {}

// createRunOp is a CreateRun: the run is inserted in the first round trip
// unless it exists, and found either way (a retry finds the run its lost
// reply created, then as created false).
type createRunOp struct {
	opBase
	p       *store.CreateRunParams
	now     int64
	lease   apply.NewRunLease
	run     *store.Run
	created bool
	// found is the run at the op's id as its read found it, what it
	// asked of its data (sqlrow.FoundRunCols), nil if the group inserted
	// it; foundAs, what the read said of its input.
	found   *store.Run
	foundAs apply.Found
}

func (o *createRunOp) plan(g *group, r *readPlan) { r.creates = append(r.creates, o) }

func (o *createRunOp) apply(g *group) error {
	r := g.existing[o.p.ID]
	if r == nil {
		return &retryError{"run vanished during create"} // purged since
	}
	if g.inserted[o.p.ID] {
		// The first op of the group with this id created it.
		if err := apply.RunConflict(r, o.p); err != nil {
			return err
		}
		o.run, o.created = r, true
		delete(g.inserted, o.p.ID)
		return nil
	}
	run, f := o.found, o.foundAs
	if run == nil { // an earlier op of the group inserted it: held whole
		run, f = apply.FoundInMemory(r, o.p)
	}
	if err := apply.FoundConflict(run, o.p, f); err != nil {
		return err
	}
	o.run, o.created = run, false
	return nil
}

func (o *createRunOp) size() int { return 256 + len(o.p.Input) }
func (o *createRunOp) clear(bool) {
	o.run, o.created, o.found, o.foundAs = nil, false, nil, apply.Found{}
}

// claimOp is a ClaimRuns, done in the first round trip. A retry after a
// lost reply returns the runs the lost try claimed, found by its token,
// instead of claiming more.
type claimOp struct {
	opBase
	p       *store.ClaimRunsParams // with Now set
	claimed []claimedRun
}

func (o *claimOp) plan(g *group, r *readPlan) { r.claims = append(r.claims, o) }
func (o *claimOp) apply(g *group) error       { return nil }
func (o *claimOp) size() int                  { return 256 }
func (o *claimOp) clear(bool)                 { o.claimed = nil }
