package world

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/weirhq/weir/names"
)

// Request is one events.create call.
type Request struct {
	// RunID is the run; empty for a run_created that lets the World mint it.
	RunID         string
	Type          EventType
	CorrelationID string
	Data          json.RawMessage // eventData, as sent
	SpecVersion   int             // 0: Spec
}

// State is what a store loaded for one request, in its transaction.
type State struct {
	// Run is the request's run, nil if there is none.
	Run *Run
	// Step is the step the correlation id names, for step events.
	Step *Step
	// Hook is the live hook the correlation id names, for hook events.
	Hook *Hook
	// TokenHolder is the live hook that holds a hook_created's token, if any.
	TokenHolder *Hook
	// Wait is the wait the correlation id names, for wait events.
	Wait *Wait
}

// Outcome is what a request writes, all in one transaction.
type Outcome struct {
	// Events are appended to the run's log at its next slots, in order.
	// None for an idempotent run_started on a running run.
	Events []Event
	// Run is the run's new state; NewRun: it is created. SetsOutput: the
	// outcome sets the run's Output (run_completed); else the stored one
	// stands, as the run was read (a Head reads none).
	Run        *Run
	NewRun     bool
	SetsOutput bool
	// Step, Hook and Wait are the entities changed or, with the New flag,
	// created.
	Step    *Step
	NewStep bool
	Hook    *Hook
	NewHook bool
	// DisposeHook disposes Hook (its token is free again).
	DisposeHook bool
	Wait        *Wait
	NewWait     bool
	// Ended: the run reached a terminal status; its hooks are disposed and
	// its waits removed.
	Ended bool
	// Stream effects on every stream of the run, writer StepWriter(step):
	// Fence raises the fence to the attempt (an attempt began, so older
	// ones are zombies); Commit or Abort finishes the attempt; Closes are
	// closed after the commit (an attempt's closes wait for it).
	Fence   int64
	Commit  int64
	Abort   int64
	Closes  []string
	StepID  string
	Returns Returns
}

// Returns names the entities an EventResult carries.
type Returns struct{ Run, Step, Hook, Wait bool }

// IDs mints the ids an outcome needs (run, event): prefix + "_" + a ULID.
type IDs interface{ New(prefix string) string }

// Decide applies req to st at now, as world-local 4.4.1 does: the outcome to
// write, or the error the runtime expects (ErrConflict, ErrRunExpired,
// *TooEarlyError, ErrRunNotFound, ErrHookNotFound, ErrStepNotFound,
// ErrWaitNotFound, ErrNotSupported, ErrInvalid). It changes nothing it was
// given; the outcome's entities are new values.
func Decide(st *State, req *Request, now time.Time, ids IDs) (*Outcome, error) {
	if !req.Type.Valid() {
		return nil, fmt.Errorf("%w: event type %q", ErrInvalid, req.Type)
	}
	spec := req.SpecVersion
	if spec == 0 {
		spec = Spec
	}
	d := &decider{st: st, req: req, now: now.UTC(), spec: spec, ids: ids, out: &Outcome{}}
	if err := d.checkRequest(); err != nil {
		return nil, err
	}
	if err := d.decide(); err != nil {
		return nil, err
	}
	return d.out, nil
}

type decider struct {
	st   *State
	req  *Request
	now  time.Time
	spec int
	ids  IDs
	out  *Outcome
}

// needsCorrelation lists the events that name an entity.
func needsCorrelation(t EventType) bool {
	switch t {
	case StepCreated, StepStarted, StepCompleted, StepFailed, StepRetrying,
		HookCreated, HookReceived, HookDisposed, WaitCreated, WaitCompleted:
		return true
	}
	return false
}

func (d *decider) checkRequest() error { return CheckRequest(d.req) }

// CheckRequest refuses a request no event could come of, on its own: a
// run id or correlation id that could name no entity, eventData that is
// not JSON. A store checks it before it reads anything for the request,
// so that both refuse the same, in the World's words.
func CheckRequest(r *Request) error {
	if r.RunID != "" {
		if err := entityID("run id", r.RunID); err != nil {
			return err
		}
	}
	if r.RunID == "" && r.Type != RunCreated {
		return fmt.Errorf("%w: a %s needs a run id", ErrInvalid, r.Type)
	}
	if needsCorrelation(r.Type) {
		if err := entityID("correlation id", r.CorrelationID); err != nil {
			return err
		}
	}
	if len(r.Data) > 0 && !json.Valid(r.Data) {
		return fmt.Errorf("%w: eventData is not JSON", ErrInvalid)
	}
	if r.Type == HookCreated {
		// Its token is looked up before the event is decided: checked
		// here, so that no store reads for a token no hook could have.
		var v struct {
			Token string `json:"token"`
		}
		if err := json.Unmarshal(r.Data, &v); err != nil {
			return fmt.Errorf("%w: hook_created's eventData: %v", ErrInvalid, err)
		}
		if err := Token(v.Token); err != nil {
			return err
		}
	}
	return nil
}

// entityID refuses ids that could not name an entity: empty, over 256 bytes,
// with controls, spaces or slashes.
func entityID(what, id string) error {
	if id == "" || len(id) > 256 {
		return fmt.Errorf("%w: %s of 1 to 256 bytes is required", ErrInvalid, what)
	}
	for _, c := range []byte(id) {
		if c <= ' ' || c == '/' || c == 0x7f || c >= 0x80 {
			return fmt.Errorf("%w: %s %.40q: letters, digits and _ - . : only", ErrInvalid, what, id)
		}
	}
	return nil
}

// runID refuses a World run id a client names: an entity id that takes
// no prefix weir mints other runs' ids with (a schedule's ticks, an
// Idempotency-Key's runs), so that a World run cannot take one of those
// before weir makes it. World runs' own prefix, wrun_, is the runtime's to
// use.
func runID(id string) error {
	if err := entityID("run id", id); err != nil {
		return err
	}
	for _, p := range names.ReservedRunIDPrefixes {
		if p != "wrun_" && strings.HasPrefix(id, p) {
			return fmt.Errorf("%w: run id %.40q: the prefix %q is weir's own", ErrInvalid, id, p)
		}
	}
	return nil
}

// event returns the event req appends, at now.
func (d *decider) event(t EventType, data json.RawMessage) Event {
	return Event{RunID: d.runID(), EventID: d.ids.New("evnt"), EventType: t, CorrelationID: d.req.CorrelationID,
		EventData: data, CreatedAt: d.now, SpecVersion: d.spec}
}

func (d *decider) runID() string {
	if d.out.Run != nil {
		return d.out.Run.RunID
	}
	return d.req.RunID
}

func (d *decider) decide() error {
	r, run := d.req, d.st.Run
	if r.Type == RunCreated {
		return d.runCreated()
	}
	if run == nil {
		if r.Type == RunStarted {
			if err := d.resilientStart(); err != nil {
				return err
			}
		}
		if run = d.out.Run; run == nil {
			return fmt.Errorf("%w: %q", ErrRunNotFound, r.RunID)
		}
	}
	if run.SpecVersion > Spec {
		return fmt.Errorf("%w: run %q is of spec %d, this World serves %d", ErrNotSupported, run.RunID, run.SpecVersion, Spec)
	}
	// A terminal run refuses what needs a live one.
	if run.Status.Terminal() {
		switch r.Type {
		case RunCancelled:
			if run.Status == Cancelled {
				// Idempotent, and nothing is added: a run that ended
				// takes no event without bound.
				d.out.Returns.Run = true
				return nil
			}
			return fmt.Errorf("%w: cannot transition run from terminal state %q", ErrConflict, run.Status)
		case RunStarted:
			return fmt.Errorf("%w: workflow run %q is already in terminal state %q", ErrRunExpired, run.RunID, run.Status)
		case RunCompleted, RunFailed:
			return fmt.Errorf("%w: cannot transition run from terminal state %q", ErrConflict, run.Status)
		case StepCreated, HookCreated, WaitCreated:
			return fmt.Errorf("%w: cannot create new entities on run in terminal state %q", ErrConflict, run.Status)
		case StepStarted, StepRetrying:
			// No attempt begins, and none is retried, once the run ended:
			// a step in flight may still end (step_completed, step_failed).
			return fmt.Errorf("%w: cannot %s a step of a run in terminal state %q", ErrRunExpired,
				map[EventType]string{StepStarted: "start", StepRetrying: "retry"}[r.Type], run.Status)
		}
	}
	switch r.Type {
	case RunStarted:
		return d.runStarted(run)
	case RunCompleted, RunFailed, RunCancelled:
		return d.runEnded(run)
	case StepCreated:
		return d.stepCreated()
	case StepStarted, StepCompleted, StepFailed, StepRetrying:
		return d.stepEvent(run)
	case HookCreated:
		return d.hookCreated()
	case HookReceived, HookDisposed:
		return d.hookEvent()
	case WaitCreated, WaitCompleted:
		return d.waitEvent()
	}
	return fmt.Errorf("%w: event type %q", ErrInvalid, r.Type)
}

type runCreatedData struct {
	DeploymentID     string          `json:"deploymentId"`
	WorkflowName     string          `json:"workflowName"`
	Input            json.RawMessage `json:"input"`
	ExecutionContext json.RawMessage `json:"executionContext"`
}

func (d *decider) parse(v any) error {
	if len(d.req.Data) == 0 {
		return nil
	}
	if err := json.Unmarshal(d.req.Data, v); err != nil {
		return fmt.Errorf("%w: eventData of %s: %v", ErrInvalid, d.req.Type, err)
	}
	return nil
}

func (d *decider) runCreated() error {
	if d.st.Run != nil {
		return fmt.Errorf("%w: workflow run %q already exists", ErrConflict, d.st.Run.RunID)
	}
	var data runCreatedData
	if err := d.parse(&data); err != nil {
		return err
	}
	if err := d.checkRunData(&data); err != nil {
		return err
	}
	id := d.req.RunID
	if id == "" {
		id = d.ids.New("wrun")
	} else if err := runID(id); err != nil {
		return err
	}
	d.out.Run = &Run{RunID: id, Status: Pending, DeploymentID: data.DeploymentID, WorkflowName: data.WorkflowName,
		SpecVersion: d.spec, ExecutionContext: nonNull(data.ExecutionContext), Input: data.Input,
		CreatedAt: d.now, UpdatedAt: d.now}
	d.out.NewRun, d.out.Returns.Run = true, true
	d.out.Events = append(d.out.Events, d.event(RunCreated, d.req.Data))
	return nil
}

func (d *decider) checkRunData(data *runCreatedData) error {
	if data.DeploymentID == "" || data.WorkflowName == "" {
		return fmt.Errorf("%w: a run needs a deploymentId and a workflowName", ErrInvalid)
	}
	if len(data.WorkflowName) > 1024 || len(data.DeploymentID) > 1024 {
		return fmt.Errorf("%w: workflowName and deploymentId have at most 1024 bytes", ErrInvalid)
	}
	// Printable, as every name weir keeps (names.Text): a line feed or a
	// bidirectional override would show in the UI, the CLI and the logs
	// as another workflow.
	for what, v := range map[string]string{"workflowName": data.WorkflowName, "deploymentId": data.DeploymentID} {
		if err := names.Text(what, v, 1024); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	if len(data.Input) == 0 {
		return fmt.Errorf("%w: a run needs an input", ErrInvalid)
	}
	return nil
}

// resilientStart is world-local's "resilient start": a run_started that
// carries the run's input creates the run (and its run_created event) first,
// so the queue can bootstrap a run whose start() failed to create it.
func (d *decider) resilientStart() error {
	var data runCreatedData
	if err := d.parse(&data); err != nil {
		return err
	}
	if data.DeploymentID == "" || data.WorkflowName == "" || len(data.Input) == 0 {
		return nil
	}
	if err := d.checkRunData(&data); err != nil {
		return err
	}
	if err := runID(d.req.RunID); err != nil {
		return err
	}
	created, _ := json.Marshal(data)
	d.out.Run = &Run{RunID: d.req.RunID, Status: Pending, DeploymentID: data.DeploymentID, WorkflowName: data.WorkflowName,
		SpecVersion: d.spec, ExecutionContext: nonNull(data.ExecutionContext), Input: data.Input,
		CreatedAt: d.now, UpdatedAt: d.now}
	d.out.NewRun = true
	ev := d.event(RunCreated, created)
	ev.CorrelationID = ""
	d.out.Events = append(d.out.Events, ev)
	return nil
}

func (d *decider) runStarted(run *Run) error {
	if run.Status == Running {
		// Idempotent for concurrent invocations: no second event.
		d.out.Run, d.out.Returns.Run = copyRun(run), true
		return nil
	}
	next := copyRun(run)
	next.Status, next.UpdatedAt = Running, d.now
	if next.StartedAt == nil {
		next.StartedAt = ptr(d.now)
	}
	d.setRun(next)
	// eventData belongs on run_created only.
	d.out.Events = append(d.out.Events, d.event(RunStarted, nil))
	return nil
}

// setRun records next as the run's state, keeping NewRun if the outcome
// creates it.
func (d *decider) setRun(next *Run) {
	d.out.Run, d.out.Returns.Run = next, true
}

func (d *decider) runEnded(run *Run) error {
	next := copyRun(run)
	next.UpdatedAt, next.CompletedAt = d.now, ptr(d.now)
	data := d.req.Data
	switch d.req.Type {
	case RunCompleted:
		var v struct {
			Output json.RawMessage `json:"output"`
		}
		if err := d.parse(&v); err != nil {
			return err
		}
		next.Status, next.Output = Completed, v.Output
		d.out.SetsOutput = true
	case RunFailed:
		var v struct {
			Error     json.RawMessage `json:"error"`
			ErrorCode string          `json:"errorCode"`
		}
		if err := d.parse(&v); err != nil {
			return err
		}
		next.Status = Failed
		next.Error = structuredError(v.Error, "")
		next.Error.Code = v.ErrorCode
	case RunCancelled:
		next.Status, data = Cancelled, nil
	}
	d.setRun(next)
	d.out.Ended = true
	d.out.Events = append(d.out.Events, d.event(d.req.Type, data))
	return nil
}

func (d *decider) stepCreated() error {
	if d.st.Step != nil {
		return fmt.Errorf("%w: step %q already exists", ErrConflict, d.req.CorrelationID)
	}
	var v struct {
		StepName string          `json:"stepName"`
		Input    json.RawMessage `json:"input"`
	}
	if err := d.parse(&v); err != nil {
		return err
	}
	if v.StepName == "" || len(v.StepName) > 1024 {
		return fmt.Errorf("%w: a step needs a stepName of 1 to 1024 bytes", ErrInvalid)
	}
	if err := names.Text("stepName", v.StepName, 1024); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	d.out.Step = &Step{RunID: d.req.RunID, StepID: d.req.CorrelationID, StepName: v.StepName, Status: Pending,
		Input: v.Input, CreatedAt: d.now, UpdatedAt: d.now, SpecVersion: d.spec}
	d.out.NewStep, d.out.Returns.Step = true, true
	d.out.Events = append(d.out.Events, d.event(StepCreated, d.req.Data))
	return nil
}

func (d *decider) stepEvent(run *Run) error {
	step := d.st.Step
	if step == nil {
		return fmt.Errorf("%w: step %q", ErrStepNotFound, d.req.CorrelationID)
	}
	if step.Status.Terminal() {
		return fmt.Errorf("%w: cannot modify step in terminal state %q", ErrConflict, step.Status)
	}
	// On a terminal run, only a running step may still end.
	if run.Status.Terminal() && step.Status != Running {
		return fmt.Errorf("%w: cannot modify non-running step on run in terminal state %q", ErrRunExpired, run.Status)
	}
	next := copyStep(step)
	next.UpdatedAt = d.now
	d.out.StepID = step.StepID
	data := d.req.Data
	switch d.req.Type {
	case StepStarted:
		if step.RetryAfter != nil && step.RetryAfter.After(d.now) {
			wait := step.RetryAfter.Sub(d.now)
			return &TooEarlyError{StepID: step.StepID, RetryAfter: time.Duration(math.Ceil(wait.Seconds())) * time.Second}
		}
		next.Status, next.Attempt, next.RetryAfter, next.Closes = Running, step.Attempt+1, nil, nil
		if next.StartedAt == nil {
			next.StartedAt = ptr(d.now)
		}
		d.out.Fence = next.Attempt
	case StepCompleted:
		var v struct {
			Result json.RawMessage `json:"result"`
		}
		if err := d.parse(&v); err != nil {
			return err
		}
		next.Status, next.Output, next.CompletedAt = Completed, v.Result, ptr(d.now)
		if next.Attempt > 0 {
			d.out.Commit, d.out.Closes = next.Attempt, step.Closes
		}
		next.Closes = nil
	case StepFailed:
		var v struct {
			Error json.RawMessage `json:"error"`
			Stack string          `json:"stack"`
		}
		if err := d.parse(&v); err != nil {
			return err
		}
		next.Status, next.Error, next.CompletedAt, next.Closes = Failed, structuredError(v.Error, v.Stack), ptr(d.now), nil
		if next.Attempt > 0 {
			d.out.Abort = next.Attempt
		}
	case StepRetrying:
		var v struct {
			Error      json.RawMessage `json:"error"`
			Stack      string          `json:"stack"`
			RetryAfter *time.Time      `json:"retryAfter"`
		}
		if err := d.parse(&v); err != nil {
			return err
		}
		next.Status, next.Error, next.RetryAfter, next.Closes = Pending, structuredError(v.Error, v.Stack), v.RetryAfter, nil
	}
	d.out.Step, d.out.Returns.Step = next, true
	d.out.Events = append(d.out.Events, d.event(d.req.Type, data))
	return nil
}

func (d *decider) hookCreated() error {
	var v struct {
		Token     string          `json:"token"`
		Metadata  json.RawMessage `json:"metadata"`
		IsWebhook *bool           `json:"isWebhook"`
	}
	if err := d.parse(&v); err != nil {
		return err
	}
	if err := Token(v.Token); err != nil {
		return err
	}
	if h := d.st.Hook; h != nil {
		return fmt.Errorf("%w: hook %q already created", ErrConflict, h.HookID)
	}
	if h := d.st.TokenHolder; h != nil {
		if h.RunID == d.req.RunID && h.HookID == d.req.CorrelationID {
			return fmt.Errorf("%w: hook %q already created", ErrConflict, h.HookID)
		}
		// Another live hook holds the token: the World answers with a
		// hook_conflict event, and the workflow fails when it awaits it.
		data, _ := json.Marshal(struct {
			Token            string `json:"token"`
			ConflictingRunID string `json:"conflictingRunId,omitempty"`
		}{v.Token, h.RunID})
		d.out.Events = append(d.out.Events, d.event(HookConflict, data))
		return nil
	}
	hook := &Hook{RunID: d.req.RunID, HookID: d.req.CorrelationID, Token: v.Token, OwnerID: "weir-owner",
		ProjectID: "weir-project", Environment: "weir", Metadata: v.Metadata, CreatedAt: d.now, SpecVersion: d.spec,
		IsWebhook: v.IsWebhook != nil && *v.IsWebhook}
	d.out.Hook, d.out.NewHook, d.out.Returns.Hook = hook, true, true
	d.out.Events = append(d.out.Events, d.event(HookCreated, d.req.Data))
	return nil
}

// Token checks a hook token: 1 to 1024 bytes of printable ASCII, no spaces
// or slashes (it travels in URL paths).
func Token(token string) error {
	if token == "" || len(token) > 1024 {
		return fmt.Errorf("%w: a hook token of 1 to 1024 bytes is required", ErrInvalid)
	}
	for _, c := range []byte(token) {
		if c <= ' ' || c >= 0x7f || c == '/' || c == '?' || c == '#' || c == '%' {
			return fmt.Errorf("%w: hook token %.40q: printable ASCII without spaces, / ? # %%", ErrInvalid, token)
		}
	}
	if token == "." || token == ".." {
		return fmt.Errorf("%w: hook token %q: it is a path segment of the API", ErrInvalid, token)
	}
	return nil
}

func (d *decider) hookEvent() error {
	h := d.st.Hook
	if h == nil || h.RunID != d.req.RunID {
		return fmt.Errorf("%w: %q", ErrHookNotFound, d.req.CorrelationID)
	}
	if d.req.Type == HookDisposed {
		d.out.Hook, d.out.DisposeHook = h, true
	}
	d.out.Events = append(d.out.Events, d.event(d.req.Type, d.req.Data))
	return nil
}

func (d *decider) waitEvent() error {
	w := d.st.Wait
	switch d.req.Type {
	case WaitCreated:
		if w != nil {
			return fmt.Errorf("%w: wait %q already exists", ErrConflict, d.req.CorrelationID)
		}
		var v struct {
			ResumeAt *time.Time `json:"resumeAt"`
		}
		if err := d.parse(&v); err != nil {
			return err
		}
		d.out.Wait = &Wait{WaitID: WaitID(d.req.RunID, d.req.CorrelationID), RunID: d.req.RunID, Status: "waiting",
			ResumeAt: v.ResumeAt, CreatedAt: d.now, UpdatedAt: d.now, SpecVersion: d.spec}
		d.out.NewWait = true
	case WaitCompleted:
		if w == nil {
			return fmt.Errorf("%w: %q", ErrWaitNotFound, d.req.CorrelationID)
		}
		if w.Status == "completed" {
			return fmt.Errorf("%w: wait %q already completed", ErrConflict, d.req.CorrelationID)
		}
		next := *w
		next.Status, next.CompletedAt, next.UpdatedAt = "completed", ptr(d.now), d.now
		d.out.Wait = &next
	}
	d.out.Returns.Wait = true
	d.out.Events = append(d.out.Events, d.event(d.req.Type, d.req.Data))
	return nil
}

// WaitID is the id of a run's wait, as world-local names it.
func WaitID(runID, correlationID string) string { return runID + "-" + correlationID }

// CloseAfterCommit records that the current attempt of step closed stream
// name: the close waits for the attempt's commit, so that what the attempt
// wrote joins the committed view first. It returns the step's new state,
// and whether the stream is to be closed now instead: the attempt already
// committed. A close from an attempt that failed or is retrying does
// nothing (ok false, now false): the next attempt closes again.
func CloseAfterCommit(step *Step, attempt int64, name string) (next *Step, now bool) {
	switch {
	case step.Status == Completed && attempt == step.Attempt:
		return nil, true
	case step.Status != Running || attempt != step.Attempt:
		return nil, false
	}
	for _, n := range step.Closes {
		if n == name {
			return nil, false
		}
	}
	next = copyStep(step)
	next.Closes = append(next.Closes, name)
	return next, false
}

// MaxErrorText bounds a failed run's or step's error message and stack,
// each: what is past it is cut (CutText). An error is for people to read,
// and a failure's text must not make every page that lists the run carry
// megabytes.
const MaxErrorText = 16 << 10

// CutText is s as a store keeps an error's text: a NUL as U+FFFD (a
// PostgreSQL text cannot hold one, and both stores must keep the same),
// then cut to at most limit bytes on a rune boundary, with a note of how
// much was cut.
func CutText(s string, limit int) string {
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if len(s) <= limit {
		return s
	}
	note := fmt.Sprintf("… (%d bytes cut)", len(s)-limit)
	n := limit - len(note)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:max(n, 0)] + note
}

func structuredError(raw json.RawMessage, stack string) *StructuredError {
	e := structuredErrorOf(raw, stack)
	e.Message, e.Stack, e.Code = CutText(e.Message, MaxErrorText), CutText(e.Stack, MaxErrorText), CutText(e.Code, 256)
	return e
}

func structuredErrorOf(raw json.RawMessage, stack string) *StructuredError {
	e := &StructuredError{Stack: stack}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		e.Message = s
		return e
	}
	var o struct {
		Message string `json:"message"`
		Stack   string `json:"stack"`
	}
	if err := json.Unmarshal(raw, &o); err == nil && o.Message != "" {
		e.Message = o.Message
		if e.Stack == "" {
			e.Stack = o.Stack
		}
		return e
	}
	e.Message = "Unknown error"
	return e
}

func nonNull(raw json.RawMessage) json.RawMessage {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return nil
	}
	return raw
}

func copyRun(r *Run) *Run {
	c := *r
	return &c
}

func copyStep(s *Step) *Step {
	c := *s
	c.Closes = append([]string(nil), s.Closes...)
	return &c
}

func ptr[T any](v T) *T { return &v }

// TerminalEvent reports whether t ends a run.
func TerminalEvent(t EventType) bool { return t == RunCompleted || t == RunFailed || t == RunCancelled }

// DataRefFields are the eventData fields that hold payloads, per event type:
// resolveData=none leaves them out (@workflow/world's EVENT_DATA_REF_FIELDS).
var DataRefFields = map[EventType][]string{
	RunCreated: {"input"}, RunCompleted: {"output"}, RunFailed: {"error"},
	StepCreated: {"input"}, StepCompleted: {"result"}, StepFailed: {"error"}, StepRetrying: {"error"},
	HookCreated: {"metadata"}, HookReceived: {"payload"},
}

// StripData returns e's eventData without its payload fields (resolveData
// none): {} when nothing else is left. (world-local leaves eventData out
// then; @workflow/world's EventSchema wants an object for run_completed,
// step_completed, hook_received and others, so a World client that checks
// what it reads, as @weirhq/world does, and the tools reading through it,
// got "expected object" for every finished run's events.)
func StripData(e *Event) json.RawMessage {
	fields := DataRefFields[e.EventType]
	if len(e.EventData) == 0 || len(fields) == 0 {
		return e.EventData
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(e.EventData, &m); err != nil {
		return json.RawMessage("{}")
	}
	for _, f := range fields {
		delete(m, f)
	}
	b, _ := json.Marshal(m)
	return b
}

// QueueKind returns "workflow" or "step" for a queue name of the runtime
// (__[ns_]wkf_workflow_<name>, __[ns_]wkf_step_<name>), and false for any
// other name.
func QueueKind(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "__")
	if !ok {
		return "", false
	}
	if i := strings.Index(rest, "wkf_"); i > 0 {
		ns := rest[:i]
		if !strings.HasSuffix(ns, "_") || !namespace(ns[:len(ns)-1]) {
			return "", false
		}
		rest = rest[i:]
	}
	rest, ok = strings.CutPrefix(rest, "wkf_")
	if !ok {
		return "", false
	}
	for _, kind := range []string{"workflow", "step"} {
		if id, ok := strings.CutPrefix(rest, kind+"_"); ok && id != "" {
			return kind, true
		}
	}
	return "", false
}

func namespace(ns string) bool {
	if ns == "" || ns[0] < 'a' || ns[0] > 'z' {
		return false
	}
	for _, c := range []byte(ns) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
