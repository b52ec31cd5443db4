package sqlrow

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/world"
)

// The World's rows (store.WorldStore), as both backends name their columns.

// The columns of each World entity, as its scanner takes them.
const (
	// WorldRunCols are a World run's: runs r joined with world_runs w.
	WorldRunCols = `r.id, r.status, w.deployment_id, r.workflow, w.spec_version, w.execution_context, r.input, r.output,
		w.error_json, w.started_at, w.completed_at, r.created_at, r.updated_at, w.events, w.target`
	WorldStepCols = `run_id, step_id, step_name, status, input, output, error_json, attempt, started_at, completed_at,
		created_at, updated_at, retry_after, spec_version, closes`
	WorldHookCols  = `run_id, hook_id, token, metadata, is_webhook, spec_version, created_at`
	WorldWaitCols  = `wait_id, run_id, status, resume_at, completed_at, created_at, updated_at, spec_version`
	WorldEventCols = `run_id, slot, event_id, type, correlation_id, data, spec_version, created_at`
)

// WorldRunHeadCols are WorldRunCols without the run's input and output
// (NULL, NULL), as ScanWorldRunHead takes them: what a store's
// transaction reads of a World run (apply.WorldTx.WorldRun).
var WorldRunHeadCols = strings.Replace(WorldRunCols, `r.input, r.output`, `NULL, NULL`, 1)

// WorldStepHeadCols are WorldStepCols without the step's input and
// output (NULL, NULL), as ScanWorldStep takes them.
var WorldStepHeadCols = strings.Replace(WorldStepCols, `input, output`, `NULL, NULL`, 1)

// ScanWorldRunHead scans WorldRunHeadCols: a world.Run.Head.
func ScanWorldRunHead(row Scanner) (*world.Run, error) {
	r, err := ScanWorldRun(row)
	if err != nil {
		return nil, err
	}
	r.Head = true
	return r, nil
}

// ScanWorldRun scans WorldRunCols.
func ScanWorldRun(row Scanner) (*world.Run, error) {
	var r world.Run
	var status string
	var errJSON []byte
	var started, completed, created, updated int64
	if err := row.Scan(&r.RunID, &status, &r.DeploymentID, &r.WorkflowName, &r.SpecVersion, Raw(&r.ExecutionContext),
		Raw(&r.Input), Raw(&r.Output), &errJSON, &started, &completed, &created, &updated, &r.Events, &r.Target); err != nil {
		return nil, err
	}
	r.Status = world.Status(status)
	r.StartedAt, r.CompletedAt = TimePtr(started), TimePtr(completed)
	r.CreatedAt, r.UpdatedAt = Time(created), Time(updated)
	r.Error = DecodeError(errJSON)
	return &r, nil
}

// ScanWorldStep scans WorldStepCols.
func ScanWorldStep(row Scanner) (*world.Step, error) {
	var s world.Step
	var status, closes string
	var errJSON []byte
	var started, completed, created, updated, retry int64
	if err := row.Scan(&s.RunID, &s.StepID, &s.StepName, &status, Raw(&s.Input), Raw(&s.Output), &errJSON, &s.Attempt,
		&started, &completed, &created, &updated, &retry, &s.SpecVersion, &closes); err != nil {
		return nil, err
	}
	s.Status = world.Status(status)
	s.StartedAt, s.CompletedAt, s.RetryAfter = TimePtr(started), TimePtr(completed), TimePtr(retry)
	s.CreatedAt, s.UpdatedAt = Time(created), Time(updated)
	s.Error = DecodeError(errJSON)
	if closes != "" {
		_ = json.Unmarshal([]byte(closes), &s.Closes)
	}
	return &s, nil
}

// ScanWorldHook scans WorldHookCols (a live hook).
func ScanWorldHook(row Scanner) (*world.Hook, error) {
	var h world.Hook
	var created int64
	if err := row.Scan(&h.RunID, &h.HookID, &h.Token, Raw(&h.Metadata), &h.IsWebhook, &h.SpecVersion, &created); err != nil {
		return nil, err
	}
	h.CreatedAt = Time(created)
	h.OwnerID, h.ProjectID, h.Environment = "weir-owner", "weir-project", "weir"
	return &h, nil
}

// ScanWorldWait scans WorldWaitCols.
func ScanWorldWait(row Scanner) (*world.Wait, error) {
	var w world.Wait
	var resume, completed, created, updated int64
	if err := row.Scan(&w.WaitID, &w.RunID, &w.Status, &resume, &completed, &created, &updated, &w.SpecVersion); err != nil {
		return nil, err
	}
	w.ResumeAt, w.CompletedAt = TimePtr(resume), TimePtr(completed)
	w.CreatedAt, w.UpdatedAt = Time(created), Time(updated)
	return &w, nil
}

// ScanWorldEvent scans WorldEventCols.
func ScanWorldEvent(row Scanner) (*world.Event, error) {
	var e world.Event
	var typ string
	var created int64
	if err := row.Scan(&e.RunID, &e.Slot, &e.EventID, &typ, &e.CorrelationID, Raw(&e.EventData), &e.SpecVersion, &created); err != nil {
		return nil, err
	}
	e.EventType, e.CreatedAt = world.EventType(typ), Time(created)
	return &e, nil
}

// Raw scans a JSON column, NULL as nil.
func Raw(p *json.RawMessage) *[]byte { return (*[]byte)(p) }

// TimePtr is a nanosecond column as an optional time: 0 is none.
func TimePtr(n int64) *time.Time {
	if n == 0 {
		return nil
	}
	t := Time(n)
	return &t
}

// PtrNanos is TimePtr's inverse.
func PtrNanos(t *time.Time) int64 {
	if t == nil {
		return 0
	}
	return Nanos(*t)
}

// DecodeError decodes an error_json column; nil for none.
func DecodeError(b []byte) *world.StructuredError {
	if len(b) == 0 {
		return nil
	}
	var e world.StructuredError
	if json.Unmarshal(b, &e) != nil {
		return nil
	}
	return &e
}

// EncodeError encodes e for an error_json column.
func EncodeError(e *world.StructuredError) []byte {
	if e == nil {
		return nil
	}
	b, _ := json.Marshal(e)
	return b
}

// MessageCols are a queue message's columns.
const MessageCols = `id, queue_name, kind, payload, target, idempotency_key, deployment_id, run_id, state, attempt,
	failures, deliver_at, first_failure, last_error, created_at, lease`

// ScanMessage scans MessageCols.
func ScanMessage(row Scanner) (*store.Message, error) {
	var m store.Message
	var payload []byte
	var due, first, created int64
	if err := row.Scan(&m.ID, &m.QueueName, &m.Kind, &payload, &m.Target, &m.IdempotencyKey, &m.DeploymentID, &m.RunID,
		&m.State, &m.Attempt, &m.Failures, &due, &first, &m.LastError, &created, &m.Lease); err != nil {
		return nil, err
	}
	m.Payload = payload
	m.DeliverAt, m.CreatedAt = Time(due), Time(created)
	if first != 0 {
		m.FirstFailure = Time(first)
	}
	return &m, nil
}

// EncodeCloses encodes a step's Closes for its closes column.
func EncodeCloses(closes []string) string {
	if len(closes) == 0 {
		return ""
	}
	b, _ := json.Marshal(closes)
	return string(b)
}
