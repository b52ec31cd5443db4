package apply

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// ForkPoint resolves the fork offset of fp on its source src (ForkParams.Offset
// -1 is the source's next offset). A soft-deleted source is store.ErrGone;
// an offset past the source's next offset is store.ErrInvalid.
func ForkPoint(src *Stream, fp *store.ForkParams) (int64, error) {
	if src.Deleted {
		return 0, fmt.Errorf("fork source: stream %d: %w", src.ID, store.ErrGone)
	}
	off := fp.Offset
	if off == -1 {
		off = src.Head.NextOffset
	}
	if off > src.Head.NextOffset {
		return 0, fmt.Errorf("%w: fork offset %d is past the source's next offset %d", store.ErrInvalid, off, src.Head.NextOffset)
	}
	return off, nil
}

// Delete decides what store.Store.DeleteStream does with st: keep it
// (DeleteKept, for a lazy expiry of a stream not expired at IfExpiredAt or
// already soft-deleted), soft-delete it (DeleteSoft: forks reference it), or
// delete it (DeleteFull, then Release its fork source). It changes st for a
// soft delete; the backend saves it.
func Delete(st *Stream, p *store.DeleteStreamParams) (store.DeleteResult, error) {
	if st.RunID != "" {
		return 0, fmt.Errorf("%w: stream %d is a run's stream", store.ErrInvalid, st.ID)
	}
	if !p.IfExpiredAt.IsZero() {
		if st.Deleted || !st.Expired(p.IfExpiredAt) {
			return store.DeleteKept, nil
		}
	} else if st.Deleted {
		return 0, fmt.Errorf("stream %d: %w", st.ID, store.ErrGone)
	}
	if st.Forks > 0 {
		st.Deleted = true
		return store.DeleteSoft, nil
	}
	return store.DeleteFull, nil
}

// Release drops one fork reference from src, the source of a stream just
// deleted, and reports whether src must be deleted in turn: it was
// soft-deleted and no fork references it any more. Otherwise the backend
// saves src's Forks (and goes no further up the chain).
func Release(src *Stream) (deleteToo bool) {
	src.Forks = max(src.Forks-1, 0)
	return src.Forks == 0 && src.Deleted
}

// Touch renews st's sliding TTL at at, and reports whether it changed: a
// stream without a TTL, or accessed later already, is left alone.
func Touch(st *Stream, at time.Time) bool {
	if !st.Expiry.HasTTL || !at.After(st.LastAccess) {
		return false
	}
	st.LastAccess = at
	return true
}

// RunConflict returns store.ErrRunConflict if run, the run at p.ID, is of
// another workflow than p asks for, or, with p.OwnChild, of another parent
// (a child's default id taken first by a client's run: a parent adopts
// only its own); CreateRun then refuses p.
func RunConflict(run *store.Run, p *store.CreateRunParams) error {
	if run.Workflow != p.Workflow {
		return fmt.Errorf("%w: run %q is of workflow %q, not %q", store.ErrRunConflict, p.ID, run.Workflow, p.Workflow)
	}
	if p.OwnChild && run.Parent != p.Parent {
		return fmt.Errorf("%w: run %q exists with parent %q, not %q", store.ErrRunConflict, p.ID, run.Parent, p.Parent)
	}
	return nil
}

// Found is what a backend's read of the run a create finds at its id
// (sqlrow.FoundRunCols) says of the run's input, which it need not read:
// whether the run has none, and whether it is the create's
// (FoundCompared), byte for byte.
type Found struct {
	NoInput, SameInput bool
}

// FoundBound is the most bytes of a found run's input and output a
// create reads (store.CreateRunParams.ElideFound): over it, neither.
func FoundBound(p *store.CreateRunParams) int64 {
	if p.ElideFound {
		return store.MaxListedValue
	}
	return math.MaxInt64
}

// FoundCompared is what a create's read compares the found run's input
// with (store.CreateRunParams.SameInput): its own, no input being null;
// nil, compare nothing.
func FoundCompared(p *store.CreateRunParams) []byte {
	switch {
	case !p.SameInput:
		return nil
	case len(p.Input) == 0:
		return []byte("null")
	}
	return p.Input
}

// FoundInMemory is run, found at p.ID and held whole (a run a group
// inserted a moment ago), as a create's read (sqlrow.FoundRunCols)
// would have returned it, with what it says of its input.
func FoundInMemory(run *store.Run, p *store.CreateRunParams) (*store.Run, Found) {
	f := Found{NoInput: run.Input == nil}
	if in := FoundCompared(p); in != nil {
		f.SameInput = bytes.Equal(run.Input, in)
	}
	if b := FoundBound(p); int64(len(run.Input)) > b || int64(len(run.Output)) > b {
		c := *run
		c.Input, c.Output, c.Elided = nil, nil, true
		run = &c
	}
	return run, f
}

// FoundConflict is RunConflict for a create that found run at p.ID, f
// what its read said of the run's input: with p.SameInput, a run whose
// input is not p.Input (none being null) is store.ErrKeyReused.
func FoundConflict(run *store.Run, p *store.CreateRunParams, f Found) error {
	if err := RunConflict(run, p); err != nil {
		return err
	}
	same := f.SameInput
	if f.NoInput {
		same = len(p.Input) == 0 || string(p.Input) == "null"
	}
	if p.SameInput && !same {
		return fmt.Errorf("%w: run %q exists with another input", store.ErrKeyReused, p.ID)
	}
	return nil
}

// Initial returns the batches a new stream st starts with, after its fork
// copy if it is a fork (st.Head is the head after the copy then): p.Chunks,
// anonymous and committed, then a close record if p.Closed. It advances
// st.Head and st.Bytes by them. A new stream is not subject to its own
// expiry: a TTL of 0 still takes its first records.
func Initial(st *Stream, p *store.CreateStreamParams) [][]stream.Record {
	var out [][]stream.Record
	if len(p.Chunks) > 0 {
		_, recs, err := stream.Append(&st.Head, nil, &stream.AppendRequest{Chunks: p.Chunks})
		if err != nil {
			panic(err) // an anonymous append to an open stream cannot fail
		}
		st.Bytes += stream.DataBytes(recs)
		out = append(out, recs)
	}
	if p.Closed {
		if r, recs := stream.Close(&st.Head); r == stream.Done {
			out = append(out, recs)
		}
	}
	return out
}

// CheckCount refuses a new standalone stream (store.ErrQuota) when the
// store holds live of them and p's limit (CreateStreamParams.MaxStreams)
// allows no more.
func CheckCount(p *store.CreateStreamParams, live int64) error {
	if p.MaxStreams > 0 && live >= p.MaxStreams {
		return fmt.Errorf("%w: the store holds %d standalone streams, its limit; delete one to make room", store.ErrQuota, live)
	}
	return nil
}

// ListStandalone makes the page of store.ListStandaloneStreams from fetch,
// which returns up to n standalone streams (not deleted) whose path is at
// or after from, in byte order. The streams with p.Prefix form one run of
// that order, so the page ends at the first path without it; expired
// streams are left out, fetching on past them. p must have its defaults.
func ListStandalone(p *store.ListStandaloneParams, fetch func(from string, n int) ([]*store.StreamInfo, error)) (*store.StreamList, error) {
	from := p.Prefix
	if p.After != "" && p.After >= from {
		// No path lies between a path and itself + "\x01": paths hold no NUL.
		from = p.After + "\x01"
	}
	out := &store.StreamList{}
	n := p.Limit + 1
	for {
		rows, err := fetch(from, n)
		if err != nil {
			return nil, err
		}
		for _, si := range rows {
			if !strings.HasPrefix(si.Path, p.Prefix) {
				return out, nil
			}
			if si.Expiry.Passed(si.LastAccess, p.Now) {
				continue
			}
			if len(out.Streams) == p.Limit {
				out.Next = out.Streams[len(out.Streams)-1].Path
				return out, nil
			}
			out.Streams = append(out.Streams, si)
		}
		if len(rows) < n {
			return out, nil
		}
		from = rows[len(rows)-1].Path + "\x01"
	}
}
