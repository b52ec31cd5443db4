// Package sqlrow is how weir's SQL backends map rows to the store's types:
// the column lists both schemas share, their scanners, and the times they
// keep as unix nanoseconds. One definition, so that a run or a stream reads
// back the same from every backend.
package sqlrow

import (
	"database/sql"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/stream"
)

// Scanner is a row of either driver: *sql.Row, *sql.Rows, pgx.Row, pgx.Rows.
type Scanner interface{ Scan(dest ...any) error }

// EventCols are an event's columns, as ScanEvent takes them.
const EventCols = `seq, type, op, name, attempt, data, error, final, at, wake_at`

// ScanEvent scans an event's EventCols.
func ScanEvent(row Scanner) (store.Event, error) {
	var e store.Event
	var typ string
	var at, wake int64
	err := row.Scan(&e.Seq, &typ, &e.Op, &e.Name, &e.Attempt, &e.Data, &e.Error, &e.Final, &at, &wake)
	e.Type, e.At, e.WakeAt = store.EventType(typ), Time(at), Time(wake)
	return e, err
}

// RunCols are a run's columns, as ScanRun takes them.
const RunCols = `id, workflow, status, input, output, error, created_at, updated_at,
	wake_at, lease_owner, lease_expires, lease_epoch, cancel_requested, kind, parent_id, trace_parent,
	queue, queue_key, priority, dedupe, queued, version`

// StreamCols are a stream's columns, as ScanStream takes them.
const StreamCols = `id, path, COALESCE(run_id, ''), name, content_type, next_offset, closed, created_at,
	ttl, expires_at, last_access, closed_by, closed_by_epoch, closed_by_seq, stream_seq,
	fork_source, fork_source_path, fork_offset, fork_sub_offset, forks, deleted, data_bytes`

// StateCols are a stream's state as the rules see it (apply.Stream), as
// ScanState takes them.
const StateCols = `id, COALESCE(run_id, ''), next_offset, closed, ttl, expires_at, last_access,
	closed_by, closed_by_epoch, closed_by_seq, stream_seq, COALESCE(fork_source, 0), forks, deleted, data_bytes`

// HookCols are a hook's columns, as ScanHook takes them.
const HookCols = `token, run_id, op, disposed, received, created_at`

// ScanHook scans HookCols.
func ScanHook(row Scanner) (*store.HookInfo, error) {
	h := &store.HookInfo{}
	var created int64
	if err := row.Scan(&h.Token, &h.RunID, &h.Op, &h.Disposed, &h.Received, &created); err != nil {
		return nil, err
	}
	h.CreatedAt = Time(created)
	return h, nil
}

// ScanRun scans RunCols, then extra.
func ScanRun(row Scanner, extra ...any) (*store.Run, error) {
	var r store.Run
	var status string
	var created, updated, wake, expires int64
	dest := []any{&r.ID, &r.Workflow, &status, &r.Input, &r.Output, &r.Error, &created, &updated,
		&wake, &r.LeaseOwner, &expires, &r.LeaseEpoch, &r.CancelRequested, &r.Kind, &r.Parent, &r.TraceParent,
		&r.Queue, &r.QueueKey, &r.Priority, &r.Dedupe, &r.Queued, &r.Version}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return nil, err
	}
	r.Status = store.RunStatus(status)
	r.CreatedAt, r.UpdatedAt = Time(created), Time(updated)
	r.WakeAt, r.LeaseExpires = Time(wake), Time(expires)
	return &r, nil
}

// ScanStream scans StreamCols.
func ScanStream(row Scanner) (*store.StreamInfo, error) {
	var si store.StreamInfo
	var created, expires, access, cbEpoch, cbSeq, forkOffset, forkSub int64
	var ttl, forkSource sql.NullInt64
	var closedBy sql.NullString
	var forkPath string
	if err := row.Scan(&si.ID, &si.Path, &si.RunID, &si.Name, &si.ContentType, &si.NextOffset, &si.Closed, &created,
		&ttl, &expires, &access, &closedBy, &cbEpoch, &cbSeq, &si.StreamSeq,
		&forkSource, &forkPath, &forkOffset, &forkSub, &si.Forks, &si.Deleted, &si.DataBytes); err != nil {
		return nil, err
	}
	si.CreatedAt, si.LastAccess = Time(created), Time(access)
	si.Expiry = expiry(ttl, expires)
	si.ClosedBy = producer(closedBy, cbEpoch, cbSeq)
	if forkSource.Valid {
		si.Fork = &store.ForkInfo{SourceID: forkSource.Int64, SourcePath: forkPath, Offset: forkOffset, SubOffset: forkSub}
	}
	return &si, nil
}

// ScanState scans StateCols, then extra.
func ScanState(row Scanner, extra ...any) (*apply.Stream, error) {
	st := &apply.Stream{}
	var ttl sql.NullInt64
	var closedBy sql.NullString
	var expires, access, cbEpoch, cbSeq int64
	dest := []any{&st.ID, &st.RunID, &st.Head.NextOffset, &st.Head.Closed, &ttl, &expires, &access,
		&closedBy, &cbEpoch, &cbSeq, &st.StreamSeq, &st.ForkSource, &st.Forks, &st.Deleted, &st.Bytes}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return nil, err
	}
	st.Expiry, st.LastAccess = expiry(ttl, expires), Time(access)
	st.ClosedBy = producer(closedBy, cbEpoch, cbSeq)
	return st, nil
}

func expiry(ttl sql.NullInt64, at int64) store.Expiry {
	e := store.Expiry{At: Time(at)}
	if ttl.Valid {
		e.HasTTL, e.TTL = true, time.Duration(ttl.Int64)
	}
	return e
}

func producer(id sql.NullString, epoch, seq int64) *stream.Producer {
	if !id.Valid {
		return nil
	}
	return &stream.Producer{ID: id.String, Epoch: epoch, Seq: seq}
}

// TTL is e's sliding TTL as its column holds it: NULL for none.
func TTL(e store.Expiry) sql.NullInt64 {
	return sql.NullInt64{Int64: int64(e.TTL), Valid: e.HasTTL}
}

// ClosedBy is a closing producer as its columns hold it.
func ClosedBy(p *stream.Producer) (id sql.NullString, epoch, seq int64) {
	if p == nil {
		return sql.NullString{}, 0, 0
	}
	return sql.NullString{String: p.ID, Valid: true}, p.Epoch, p.Seq
}

// Nanos is t as the columns keep it: unix nanoseconds, 0 for the zero time.
func Nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// Time is the inverse of Nanos, in UTC.
func Time(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
