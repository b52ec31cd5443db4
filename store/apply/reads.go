package apply

import "github.com/weirhq/weir/store"

// Reads lists what a request's rules may load from a Tx, for a backend that
// reads everything a group of requests needs in one round trip before it
// applies any of them (pgstore). A load the Reads of its request do not list
// finds nothing; the package's tests check that every load is listed.
type Reads struct {
	// Runs are loaded with Run, and locked: an Advance's run, and the run of a
	// stream a writer appends to or finishes on (its fences must be read
	// after any Advance that raises one commits).
	Runs []string
	// Streams are loaded with Stream.
	Streams []int64
	// RunStreams are runs whose every stream WriterStreams or RunStreams
	// may return.
	RunStreams []string
	// Writers are loaded with Writer.
	Writers []WriterRef
	// RunWriters are writers loaded with Writer on every stream of a run
	// that they wrote on.
	RunWriters []RunWriter
	// Fences are loaded with Fence.
	Fences []RunWriter
	// Producers and Keys are loaded with Producer and Key.
	Producers []StreamKey
	Keys      []StreamKey
	// Hooks are loaded with Hook (by token), and locked before the runs: a
	// Advance's delivery (its run is in Runs).
	Hooks []string
}

// WriterRef names a writer on a stream.
type WriterRef struct {
	Stream int64
	Writer string
}

// RunWriter names a writer on a run's streams.
type RunWriter struct {
	Run, Writer string
}

// StreamKey names a producer or an idempotency key on a stream.
type StreamKey struct {
	Stream int64
	Key    string
}

// AppendReads adds what Append(p) loads; run is the run of p's stream (""
// for a standalone stream), which only a writer's append needs.
func (r *Reads) AppendReads(p *store.AppendParams, run string) {
	r.Streams = append(r.Streams, p.StreamID)
	if p.Writer != "" {
		r.Writers = append(r.Writers, WriterRef{p.StreamID, p.Writer})
		if run != "" {
			r.Runs = append(r.Runs, run)
			r.Fences = append(r.Fences, RunWriter{run, p.Writer})
		}
	}
	if p.Producer != nil {
		r.Producers = append(r.Producers, StreamKey{p.StreamID, p.Producer.ID})
	}
	if p.IdempotencyKey != "" {
		r.Keys = append(r.Keys, StreamKey{p.StreamID, p.IdempotencyKey})
	}
}

// FinishReads adds what Finish(p) loads; run is the run of p's stream.
func (r *Reads) FinishReads(p *store.FinishWriterParams, run string) {
	r.Streams = append(r.Streams, p.StreamID)
	r.Writers = append(r.Writers, WriterRef{p.StreamID, p.Writer})
	if run != "" {
		r.Runs = append(r.Runs, run)
		r.Fences = append(r.Fences, RunWriter{run, p.Writer})
	}
}

// CloseReads adds what Close(id) loads.
func (r *Reads) CloseReads(id int64) { r.Streams = append(r.Streams, id) }

// AdvanceReads adds what Advance(p) loads.
func (r *Reads) AdvanceReads(p *store.AdvanceParams) {
	r.Runs = append(r.Runs, p.RunID)
	if p.Finish != nil || p.CloseStreams {
		r.RunStreams = append(r.RunStreams, p.RunID)
	}
	if f := p.Finish; f != nil {
		r.RunWriters = append(r.RunWriters, RunWriter{p.RunID, f.Writer})
		r.Fences = append(r.Fences, RunWriter{p.RunID, f.Writer})
	}
	if f := p.Fence; f != nil {
		r.Fences = append(r.Fences, RunWriter{p.RunID, f.Writer})
	}
	if d := p.Deliver; d != nil {
		r.Hooks = append(r.Hooks, d.Token)
		r.Runs = append(r.Runs, d.RunID)
	}
}
