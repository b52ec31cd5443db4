package pgstore

import (
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/stream"
	"github.com/weirhq/weir/world"
)

// The ops on streams. Each names what the rules read (apply.Reads) in its
// plan and calls the rule in apply; the part of its own is how a retry after
// a lost reply tells whether its last try committed.

// appendOp is an Append.
type appendOp struct {
	opBase
	p    *store.AppendParams // checked, with its defaults
	res  *store.AppendResult
	prev *store.AppendResult // the result of the try whose reply was lost
}

// An anonymous append locks no run.
func (o *appendOp) writerStream() (int64, bool) { return o.p.StreamID, o.p.Writer != "" }

func (o *appendOp) plan(g *group, r *readPlan) {
	run := ""
	if o.p.Writer != "" {
		run = g.runOf(o.p.StreamID)
	} else if o.prevToken != 0 {
		r.anon = append(r.anon, anonKey{o.p.StreamID, o.prevToken})
	}
	r.AppendReads(o.p, run)
	// apply's lateWriter reads the World step of a writer that has no row
	// yet; a writer in the cache has one.
	if id, ok := world.StepOfWriter(o.p.Writer); ok && o.p.Late && run != "" && !g.s.writers.has(writerKey{o.p.StreamID, o.p.Writer}) {
		r.world = append(r.world, worldReads{run: run, step: id})
	}
}

func (o *appendOp) apply(g *group) error {
	if o.prevToken != 0 && o.prev != nil {
		// An earlier try committed if its group's token is on the rows it
		// wrote: the writer's row, or an anonymous append's batch.
		gw := g.writers[writerKey{o.p.StreamID, o.p.Writer}]
		if o.p.Writer != "" && gw != nil && gw.existed && gw.dbToken == o.prevToken ||
			o.p.Writer == "" && g.anonDone[anonKey{o.p.StreamID, o.prevToken}] {
			o.res = o.prev
			return nil
		}
	}
	var err error
	o.res, err = apply.Append(g, o.p)
	return err
}

func (o *appendOp) size() int {
	n := 256
	for _, c := range o.p.Chunks {
		n += len(c) + 32
	}
	return n
}

func (o *appendOp) clear(keep bool) {
	if keep {
		o.prev = o.res
	}
	o.res = nil
}

// finishOp is a FinishWriter.
type finishOp struct {
	opBase
	p      *store.FinishWriterParams
	result stream.Result
	prev   stream.Result
}

func (o *finishOp) writerStream() (int64, bool) { return o.p.StreamID, true }

func (o *finishOp) plan(g *group, r *readPlan) { r.FinishReads(o.p, g.runOf(o.p.StreamID)) }

func (o *finishOp) apply(g *group) error {
	gw := g.writers[writerKey{o.p.StreamID, o.p.Writer}]
	if o.prevToken != 0 && gw != nil && gw.existed && gw.dbToken == o.prevToken {
		o.result = o.prev
		return nil
	}
	var err error
	o.result, err = apply.Finish(g, o.p)
	return err
}

func (o *finishOp) size() int { return 256 }

func (o *finishOp) clear(keep bool) {
	if keep {
		o.prev = o.result
	}
	o.result = 0
}

// closeOp is a CloseStream: closing twice writes nothing, so a retry needs
// no token.
type closeOp struct {
	opBase
	id     int64
	result stream.Result
}

func (o *closeOp) plan(g *group, r *readPlan) { r.CloseReads(o.id) }

func (o *closeOp) apply(g *group) error {
	var err error
	o.result, err = apply.Close(g, o.id)
	return err
}

func (o *closeOp) size() int  { return 256 }
func (o *closeOp) clear(bool) { o.result = 0 }

// openStreamOp is OpenStream's creation: the stream is inserted in the
// first round trip unless it exists, and found either way.
type openStreamOp struct {
	opBase
	path, runID, name, contentType string
	now                            int64
	info                           *store.StreamInfo
	retried                        bool // once, for a creation it raced (apply)
}

func (o *openStreamOp) plan(g *group, r *readPlan) {
	// The run is not locked with the group's runs: the insert locks it FOR
	// KEY SHARE (insertStreams), which no other group's lock blocks, so a
	// step's start and its stream's creation go on at once. Only a purge
	// (FOR UPDATE) blocks it, and a purge takes no stream lock a group may
	// hold but those of the finished runs it deletes; a deadlock there is
	// retried as any.
	r.opens = append(r.opens, o)
}

func (o *openStreamOp) apply(g *group) error {
	si := g.opened[o.path]
	if si == nil && o.runID != "" && !o.retried {
		// Another process created the run's stream between this group's
		// lookup and its insert (a zombie attempt and its successor open
		// it at once): the insert yielded to it, the lookup had not seen
		// it. The group's next try finds it. Only if it does not is the
		// run gone.
		o.retried = true
		return &retryError{"run stream created concurrently"}
	}
	if si == nil {
		if _, err := g.Run(o.runID); o.runID != "" && err != nil {
			return err
		}
		return &retryError{"stream vanished during create"} // deleted since
	}
	o.info = si
	if o.runID != "" {
		g.runWakes = append(g.runWakes, o.runID)
		if si.NextOffset == 0 && g.s.runs.Has(store.RunKey(o.runID)) {
			// Readers wait for this run's streams: its first records
			// go to the tail cache too.
			g.begins = append(g.begins, si.ID)
			g.watched = append(g.watched, si)
		}
	}
	return nil
}

func (o *openStreamOp) size() int  { return 256 }
func (o *openStreamOp) clear(bool) { o.info = nil }
