// Package sqlrow is how weir's SQL backends map rows to the store's types:
// the column lists both schemas share, their scanners, and the times they
// keep as unix nanoseconds. One definition, so that a run or a stream reads
// back the same from every backend.
package sqlrow

import (
	"database/sql"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/stream"
)

// Scanner is a row of either driver: *sql.Row, *sql.Rows, pgx.Row, pgx.Rows.
type Scanner interface{ Scan(dest ...any) error }

// EventCols are an event's columns, as ScanEvent takes them.
const EventCols = `seq, type, op, name, attempt, data, error, final, at, wake_at`

// EventOutlineCols are EventCols as a fork or a resume plans from them,
// as ScanEvent takes them: an event's seq, type, op, name and attempt, a
// step failure's final, and the data of stream marks and run_forked
// events alone (a stream mark's counts, a fork point: a few bytes each);
// no error, no times. So a fork or a resume that refuses decides on the
// log's outline, not its messages' payloads (red team, round nineteen),
// and on SQLite does not reach a column past a payload either: the
// columns after the data (error, final, at, wake_at) lie past its
// overflow pages, which a read of them walks (the CASE reads final of a
// step failure alone, whose data is none).
const EventOutlineCols = `seq, type, op, name, attempt,
	CASE WHEN type IN ('` + string(store.EventStreamMark) + `', '` + string(store.EventRunForked) + `') THEN data END, '',
	CASE WHEN type = '` + string(store.EventStepFailed) + `' THEN final ELSE false END, 0, 0`

// EventPageSQL is a page of a run's log (store.ListEventsPage) in either
// backend's placeholders (run, after, limit, max bytes): at most limit
// events after after, those that begin within max bytes of data and errors
// (the first whatever its size), each with whether another event follows
// it (the page's last: whether the log goes on). The page is chosen from
// the events' seqs and sizes alone (the columns' lengths, which neither
// backend reads the data to know), and only its events' data is fetched:
// a window over whole rows would copy every candidate's data (up to limit
// messages of 1 MiB) to choose a few. dataOf (an event type; empty: all)
// is whose data the page carries (store.ListEventsParams.DataOf): the
// others' is neither read nor counted.
func EventPageSQL(events, run, after, limit, maxBytes, dataOf string) string {
	cols := strings.Replace(qualified("e", EventCols), "e.data", `CASE WHEN `+dataOf+` = '' OR e.type = `+dataOf+` THEN e.data END`, 1)
	return `SELECT ` + cols + `, k.more FROM ` + events + ` e JOIN (
		SELECT seq, more FROM (
			SELECT seq, lead(seq) OVER w IS NOT NULL AS more, sum(size) OVER w AS cum, size
			FROM (SELECT seq, CASE WHEN ` + dataOf + ` = '' OR type = ` + dataOf + ` THEN COALESCE(length(data), 0) ELSE 0 END + length(error) AS size
				FROM ` + events + ` WHERE run_id = ` + run + ` AND seq > ` + after + ` ORDER BY seq LIMIT ` + limit + ` + 1) x
			WINDOW w AS (ORDER BY seq)
		) y WHERE cum - size < ` + maxBytes + ` ORDER BY seq LIMIT ` + limit + `
	) k ON e.run_id = ` + run + ` AND e.seq = k.seq ORDER BY e.seq`
}

// qualified prefixes each of cols (a comma-separated list) with table.
func qualified(table, cols string) string {
	return table + "." + strings.ReplaceAll(cols, ", ", ", "+table+".")
}

// RunEventCols are a run event's columns (run_events), as ScanRunEvent
// takes them.
const RunEventCols = `run_id, key, value, seq, at`

// ScanRunEvent scans RunEventCols.
func ScanRunEvent(row Scanner) (*store.RunEvent, error) {
	ev := &store.RunEvent{}
	var at int64
	if err := row.Scan(&ev.RunID, &ev.Key, &ev.Value, &ev.Seq, &at); err != nil {
		return nil, err
	}
	ev.At, ev.Size = Time(at), len(ev.Value)
	return ev, nil
}

// RunEventPageSQL is a page of a run's run events
// (store.ListRunEventsPage) in either backend's placeholders (run, after,
// limit): up to limit + 1 keys after after (the one past limit tells that
// more follow), byKey the ORDER BY that sorts keys by their bytes, each as
// ScanRunEventPage takes it: its value only if it is at most
// store.MaxInlineEventValue bytes, else NULL, with its size. Both
// backends know a value's length without reading it, so a run's values of
// 1 MiB are never loaded to list them.
func RunEventPageSQL(runEvents, byKey, run, after, limit string) string {
	return `SELECT key, CASE WHEN length(value) <= ` + strconv.Itoa(store.MaxInlineEventValue) + ` THEN value END,
		length(value), seq, at FROM ` + runEvents + `
		WHERE run_id = ` + run + ` AND ` + byKey + ` > ` + after + ` ORDER BY ` + byKey + ` LIMIT ` + limit + ` + 1`
}

// ScanRunEventPage scans a row of RunEventPageSQL, of run run: a value
// over store.MaxInlineEventValue comes Elided, without it.
func ScanRunEventPage(row Scanner, run string) (*store.RunEvent, error) {
	ev := &store.RunEvent{RunID: run}
	var at int64
	if err := row.Scan(&ev.Key, &ev.Value, &ev.Size, &ev.Seq, &at); err != nil {
		return nil, err
	}
	ev.At = Time(at)
	if ev.Size > store.MaxInlineEventValue {
		ev.Value, ev.Elided = nil, true
	}
	return ev, nil
}

// RunEventPage makes a page of the rows RunEventPageSQL returned for
// limit: the row past limit only says that more follow.
func RunEventPage(evs []*store.RunEvent, limit int) *store.RunEventPage {
	page := &store.RunEventPage{Events: evs}
	if len(evs) > limit {
		page.Events, page.More = evs[:limit], true
	}
	return page
}

// MessageCountsSQL is what a run's log says of its messages
// (store.CountMessages) in either backend's placeholder (run), as
// AddMessageCount takes its rows in order: a row a topic (its name, how
// many messages came on it, its first message's seq), and a row an end
// of the run or a messages_taken event (its type, its seq, and the data
// of messages_taken alone). Only the events' types and names are read of
// the messages (SQLite keeps them before the data in a row, PostgreSQL
// keeps large data out of line), never a payload: 10,000 messages of
// 1 MiB are counted without loading one.
func MessageCountsSQL(events, run string) string {
	return `SELECT 0, name, count(*), min(seq), CAST(NULL AS bytea) FROM ` + events + `
		WHERE run_id = ` + run + ` AND type = '` + string(store.EventMessageReceived) + `' GROUP BY name
	UNION ALL
	SELECT 1, type, 0, seq, CASE WHEN type = '` + string(store.EventMessagesTaken) + `' THEN data END FROM ` + events + `
		WHERE run_id = ` + run + ` AND type IN ('` + string(store.EventMessagesTaken) + `', '` + string(store.EventRunCompleted) + `', '` +
		string(store.EventRunFailed) + `', '` + string(store.EventRunCancelled) + `')
	ORDER BY 4`
}

// AddMessageCount adds a row of MessageCountsSQL to c: the rows must come
// in the query's order, so that topics keep the order of their first
// messages and a later messages_taken's counts win.
func AddMessageCount(c *store.MessageCounts, row Scanner) error {
	var kind, n int
	var name string
	var seq int64
	var data []byte
	if err := row.Scan(&kind, &name, &n, &seq, &data); err != nil {
		return err
	}
	switch {
	case kind == 0:
		c.Topics = append(c.Topics, store.TopicCount{Topic: name, Received: n})
	case store.EventType(name) == store.EventMessagesTaken:
		if c.Taken == nil {
			c.Taken = map[string]int{}
		}
		// Into the map so far: a topic this one does not name keeps its
		// count. The engine writes it as JSON; counts are a summary, and
		// one unreadable event does not hide the rest.
		_ = json.Unmarshal(data, &c.Taken)
	default:
		c.Ended = true
	}
	return nil
}

// ScheduleCols are a schedule's columns, as ScanSchedule takes them.
const ScheduleCols = `name, config, state, paused, next_due, version, lease_owner, lease_expires, created_at, updated_at`

// ScanSchedule scans ScheduleCols, then extra.
func ScanSchedule(row Scanner, extra ...any) (*store.Schedule, error) {
	s := &store.Schedule{}
	var config, state []byte
	var next, expires, created, updated int64
	if err := row.Scan(append([]any{&s.Name, &config, &state, &s.Paused, &next, &s.Version, &s.LeaseOwner, &expires, &created, &updated}, extra...)...); err != nil {
		return nil, err
	}
	s.NextDue, s.LeaseExpires, s.CreatedAt, s.UpdatedAt = Time(next), Time(expires), Time(created), Time(updated)
	return s, apply.DecodeSchedule(s, config, state)
}

// SchedulePageSQL is a page of the schedules (store.ListSchedules) in
// either backend's placeholders (after, limit, max bytes), byName the
// ORDER BY that sorts names by their bytes: as EventPageSQL, those that
// begin within max bytes of configuration, each with whether another
// schedule follows it, chosen from names and sizes before any
// configuration is fetched.
func SchedulePageSQL(schedules, byName, after, limit, maxBytes string) string {
	return `SELECT ` + qualified("s", ScheduleCols) + `, k.more FROM ` + schedules + ` s JOIN (
		SELECT name, more, pos FROM (
			SELECT name, lead(name) OVER w IS NOT NULL AS more, sum(size) OVER w AS cum, size, row_number() OVER w AS pos
			FROM (SELECT name, length(config) AS size
				FROM ` + schedules + ` WHERE ` + byName + ` > ` + after + ` ORDER BY ` + byName + ` LIMIT ` + limit + ` + 1) x
			WINDOW w AS (ORDER BY ` + byName + `)
		) y WHERE cum - size < ` + maxBytes + ` ORDER BY pos LIMIT ` + limit + `
	) k ON s.name = k.name ORDER BY k.pos`
}

// ScanEvent scans an event's EventCols, then extra.
func ScanEvent(row Scanner, extra ...any) (store.Event, error) {
	var e store.Event
	var typ string
	var at, wake int64
	err := row.Scan(append([]any{&e.Seq, &typ, &e.Op, &e.Name, &e.Attempt, &e.Data, &e.Error, &e.Final, &at, &wake}, extra...)...)
	e.Type, e.At, e.WakeAt = store.EventType(typ), Time(at), Time(wake)
	return e, err
}

// RunCols are a run's columns, as ScanRun takes them.
const RunCols = `id, workflow, status, input, output, error, created_at, updated_at,
	wake_at, lease_owner, lease_expires, lease_epoch, cancel_requested, kind, parent_id, trace_parent,
	queue, queue_key, priority, dedupe, queued, version`

// RunHeadCols are RunCols with the run's input and output NULL, its
// error kept: a run a write returns whose data is read after its commit,
// not while the write holds its locks (an admission from a queue, whose
// limiter's row it holds: red team, round nineteen audit).
const RunHeadCols = `id, workflow, status, CAST(NULL AS bytea), CAST(NULL AS bytea), error, created_at, updated_at,
	wake_at, lease_owner, lease_expires, lease_epoch, cancel_requested, kind, parent_id, trace_parent,
	queue, queue_key, priority, dedupe, queued, version`

// RunColsNoData are RunCols without the run's data: its input and output
// NULL and its error empty, for a decision over many runs that needs their
// rank and state, never their data (a queue's heads, a migration's runs).
// Read whole, 30 queued runs of 15 MiB cost a server a core at each poll
// (red team, round fourteen). RunColsNoDataFrom are the columns a subquery
// gives it.
const RunColsNoData = `id, workflow, status, CAST(NULL AS bytea), CAST(NULL AS bytea), '', created_at, updated_at,
	wake_at, lease_owner, lease_expires, lease_epoch, cancel_requested, kind, parent_id, trace_parent,
	queue, queue_key, priority, dedupe, queued, version`

// RunColsNoDataFrom: see RunColsNoData.
const RunColsNoDataFrom = `id, workflow, status, created_at, updated_at,
	wake_at, lease_owner, lease_expires, lease_epoch, cancel_requested, kind, parent_id, trace_parent,
	queue, queue_key, priority, dedupe, queued, version, seq`

// ListedRunCols are RunCols as a list carries them (store.ListRuns): an
// input or output over store.MaxListedValue bytes left out with the
// other, an error cut to that many characters, and whether any was
// (store.Run.Elided), as ScanListedRun takes them. Both backends know a value's length without reading it.
const ListedRunCols = `id, workflow, status,
	CASE WHEN ` + elided + ` THEN NULL ELSE input END, CASE WHEN ` + elided + ` THEN NULL ELSE output END,
	` + cutError + `, created_at, updated_at,
	wake_at, lease_owner, lease_expires, lease_epoch, cancel_requested, kind, parent_id, trace_parent,
	queue, queue_key, priority, dedupe, queued, version, ` + elided

// ListedRunColsNoData are ListedRunCols of a list of heads
// (store.ListRunsParams.NoData): RunColsNoData, every run Elided.
const ListedRunColsNoData = RunColsNoData + `, TRUE`

// RunColsWithin are RunCols with the input and output left out, and the
// error cut to store.MaxListedValue characters, if the three together are
// over max bytes (a placeholder), then whether they were and the bytes of
// the input, output and error, as ScanRunWithin takes them.
// errBytes is the backend's expression of the error's length in bytes
// (length counts a text's characters on both).
func RunColsWithin(max, errBytes string) string {
	over := `(COALESCE(length(input), 0) + COALESCE(length(output), 0) + COALESCE(` + errBytes + `, 0) > ` + max + `)`
	return `id, workflow, status,
	CASE WHEN ` + over + ` THEN NULL ELSE input END, CASE WHEN ` + over + ` THEN NULL ELSE output END,
	CASE WHEN ` + over + ` THEN substr(error, 1, 4096) ELSE error END, created_at, updated_at,
	wake_at, lease_owner, lease_expires, lease_epoch, cancel_requested, kind, parent_id, trace_parent,
	queue, queue_key, priority, dedupe, queued, version, ` + over + `,
	COALESCE(length(input), 0) + COALESCE(length(output), 0) + COALESCE(` + errBytes + `, 0)`
}

// FoundRunCols are RunCols as a create reads the run it finds at its id
// (apply.FoundConflict), in a backend's expressions: max (a
// placeholder, apply.FoundBound) the most bytes of its input and output
// it reads, over which neither is (their lengths tell, without reading
// them), then whether they were left out (store.Run.Elided), whether
// the run has no input, and whether its input is in (apply.FoundCompared;
// NULL: compare nothing), compared only if their lengths are equal: a
// start that differs reads nothing of a 15 MiB input, and one that is
// the same sent as many bytes as it reads (red team, round nineteen). As
// ScanFoundRun takes them.
func FoundRunCols(max, in string) string {
	over := `(COALESCE(length(input), 0) > ` + max + ` OR COALESCE(length(output), 0) > ` + max + `)`
	return `id, workflow, status,
	CASE WHEN ` + over + ` THEN NULL ELSE input END, CASE WHEN ` + over + ` THEN NULL ELSE output END, error, created_at, updated_at,
	wake_at, lease_owner, lease_expires, lease_epoch, cancel_requested, kind, parent_id, trace_parent,
	queue, queue_key, priority, dedupe, queued, version, ` + over + `, length(input) IS NULL,
	CASE WHEN length(input) = length(` + in + `) THEN input = ` + in + ` ELSE false END`
}

// ScanFoundRun scans FoundRunCols, then extra.
func ScanFoundRun(row Scanner, extra ...any) (*store.Run, apply.Found, error) {
	var f apply.Found
	var omitted bool
	r, err := ScanRun(row, append([]any{&omitted, &f.NoInput, &f.SameInput}, extra...)...)
	if err != nil {
		return nil, f, err
	}
	r.Elided = omitted
	return r, f, nil
}

// ScanRunWithin scans RunColsWithin.
func ScanRunWithin(row Scanner) (*store.Run, int64, error) {
	var omitted bool
	var size int64
	r, err := ScanRun(row, &omitted, &size)
	if err != nil {
		return nil, 0, err
	}
	r.Elided = omitted
	return r, size, nil
}

// elided is whether a run's input, output or error is over
// store.MaxListedValue.
const elided = `(COALESCE(length(input), 0) > 4096 OR COALESCE(length(output), 0) > 4096 OR COALESCE(length(error), 0) > 4096)`

// cutError is a run's error as a list carries it: its first
// store.MaxListedValue characters.
const cutError = `CASE WHEN COALESCE(length(error), 0) > 4096 THEN substr(error, 1, 4096) ELSE error END`

// ScanListedRun scans ListedRunCols.
func ScanListedRun(row Scanner) (*store.Run, error) {
	var omitted bool
	r, err := ScanRun(row, &omitted)
	if err != nil {
		return nil, err
	}
	r.Elided = omitted
	return r, nil
}

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

// ScanStream scans StreamCols, then extra.
func ScanStream(row Scanner, extra ...any) (*store.StreamInfo, error) {
	var si store.StreamInfo
	var created, expires, access, cbEpoch, cbSeq, forkOffset, forkSub int64
	var ttl, forkSource sql.NullInt64
	var closedBy sql.NullString
	var forkPath string
	dest := []any{&si.ID, &si.Path, &si.RunID, &si.Name, &si.ContentType, &si.NextOffset, &si.Closed, &created,
		&ttl, &expires, &access, &closedBy, &cbEpoch, &cbSeq, &si.StreamSeq,
		&forkSource, &forkPath, &forkOffset, &forkSub, &si.Forks, &si.Deleted, &si.DataBytes}
	if err := row.Scan(append(dest, extra...)...); err != nil {
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

// EncodeAwaits is a run's awaits column for a (store.AdvanceParams.Awaits):
// nil (SQL NULL) for nil, else each topic followed by a newline, which no
// topic holds (names.Topic).
func EncodeAwaits(a *store.Awaits) any {
	if a == nil {
		return nil
	}
	var b strings.Builder
	for _, t := range a.Topics {
		b.WriteString(t)
		b.WriteByte('\n')
	}
	return b.String()
}

// RunParked is the test that a run is parked: in flight, its lease given
// up (the same SQL on both stores).
const RunParked = `status IN ('pending', 'running') AND lease_owner = ''`

// RunParkedForAWindow is the test that a run is parked for a limiter's
// window, not lined: a limiter change that opens a window wakes these
// (apply.SetLimiter); a run parked lined waits for a seat, which no
// change of the limiter gives it.
const RunParkedForAWindow = RunParked + ` AND line_priority IS NULL`

// EncodeLimiters is a run's limiters column for names (the limiters a
// parked run waits for, store.AdvanceParams.Limiters): nil (SQL NULL) for
// none, else each name followed by a newline, which no limiter name holds
// (names.Limiter). LimitersHas is the test of one name in SQL.
func EncodeLimiters(names []string) any {
	if len(names) == 0 {
		return nil
	}
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n)
		b.WriteByte('\n')
	}
	return b.String()
}

// LinePriority is a run's line_priority column: SQL NULL unless the run
// is parked in a limiter's line (store.AdvanceParams.Lined).
func LinePriority(lined bool, prio int) any {
	if !lined {
		return nil
	}
	return int64(prio)
}

// DecodeAwaits reads an awaits column: nil when not valid (NULL).
func DecodeAwaits(s string, valid bool) *store.Awaits {
	if !valid {
		return nil
	}
	a := &store.Awaits{Topics: []string{}}
	for s != "" {
		t, rest, _ := strings.Cut(s, "\n")
		a.Topics = append(a.Topics, t)
		s = rest
	}
	return a
}
