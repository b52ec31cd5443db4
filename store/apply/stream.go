package apply

import (
	"fmt"
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
// another workflow than p asks for; CreateRun then refuses p.
func RunConflict(run *store.Run, p *store.CreateRunParams) error {
	if run.Workflow != p.Workflow {
		return fmt.Errorf("%w: run %q is of workflow %q, not %q", store.ErrRunConflict, p.ID, run.Workflow, p.Workflow)
	}
	return nil
}

// Initial returns the batches a new stream starts with, after its fork copy
// if it is a fork (h is its head then, and becomes the new head): p.Chunks,
// anonymous and committed, then a close record if p.Closed. A new stream is
// not subject to its own expiry: a TTL of 0 still takes its first records.
func Initial(h *stream.Head, p *store.CreateStreamParams) [][]stream.Record {
	var out [][]stream.Record
	if len(p.Chunks) > 0 {
		_, recs, err := stream.Append(h, nil, &stream.AppendRequest{Chunks: p.Chunks})
		if err != nil {
			panic(err) // an anonymous append to an open stream cannot fail
		}
		out = append(out, recs)
	}
	if p.Closed {
		if r, recs := stream.Close(h); r == stream.Done {
			out = append(out, recs)
		}
	}
	return out
}
