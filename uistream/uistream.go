// Package uistream writes the Vercel AI SDK's UI message stream (the chunks
// the AI SDK's useChat consumes, "UIMessageChunk") to a weir stream, so that
// a Go agent running in a weir step can serve a useChat front end.
//
// A Writer wraps a ChunkWriter, usually the step's stream writer (errors
// elided):
//
//	ui := uistream.NewWriter(sc.Stream("ui", weir.ContentType(uistream.ContentType)))
//	ui.Start(sc.StepID(), nil)
//	ui.StartStep()
//	t, _ := ui.Text("")
//	t.Delta("Hello")
//	t.End()
//	ui.FinishStep()
//	ui.Finish(uistream.FinishStop)
//
// Each call writes exactly one chunk, one record of the weir stream, holding
// one compact JSON object such as {"type":"text-delta","id":"text-1",
// "delta":"Hello"}: no trailing newline, no "data: " framing. Calls out of
// order (a Delta after End, a tool output before its input, a chunk after
// Finish) return an error matching one of the Err variables and write
// nothing. A weir record holds at most 4 MiB: a larger chunk (a big tool
// output) fails with the ChunkWriter's error (weir.ErrTooLarge), writes
// nothing and leaves the Writer as it was, so the caller can write, say, a
// ToolOutputError instead.
//
// # Determinism: why retries need identical bytes
//
// weir streams are exactly-once across retries of a step: when a retried
// attempt writes the same chunks as the attempt before it, weir adopts them
// (readers see each chunk once); at the first chunk whose bytes differ, weir
// aborts the earlier attempt's chunks from there on. So a retry can only be
// adopted if it writes byte-for-byte what the failed attempt wrote.
//
// A Writer therefore never adds anything that varies between attempts: no
// random ids, no timestamps. The message id is the caller's (derive it from
// StepContext.StepID or the run id, never from a random generator); a text or
// reasoning part given the id "" is numbered in call order ("text-1",
// "reasoning-2", …); values (tool inputs and outputs, data, metadata) are
// encoded with encoding/json, which sorts map keys. The same calls with the
// same arguments write the same bytes. What is left to the caller is what it
// passes in: the model's own output (a retried model call that samples
// another answer is a divergence, which weir handles by aborting the earlier
// attempt's suffix), provider tool call ids, and anything else that must be
// recorded or seeded to come out the same twice.
//
// # Several steps, one message
//
// A UI message often spans several weir steps (a model call, then a tool,
// then another model call), each writing to the same run stream through its
// own weir writer. Return Writer.State from a step (weir records step results
// as JSON, and State encodes as JSON) and pass it to Resume in the next, so
// the next step's Writer carries on the same message with the same checks.
// Being the step's recorded result, the State is the same on replay.
//
// # Reading
//
// Open the stream with weir.ContentType(ContentType), as above: the stream is
// then application/json, and a reader of its records over HTTP (format=ndjson,
// @weirhq/client's follow) gets each chunk as a JSON value, the
// UIMessageChunk itself. (Without it the stream is application/octet-stream
// and each record's bytes, base64 over HTTP, are the chunk's JSON.)
//
// The live view shows chunks as they are written; after a retry that
// diverged it has the failed attempt's suffix and then an abort record. A
// reader that applies aborts (@weirhq/client's follow, and its chat helpers
// that rebuild the UIMessage on a rewind) shows each token once, live, and
// drops the failed attempt's tokens when the abort comes; the AI SDK's own
// useChat cannot take back what it rendered. The committed view holds only
// chunks that stay, once each, and shows a step's chunks when the step
// completes. To serve useChat's own HTTP transport instead, send each
// committed record as a server-sent event "data: <record>\n\n", end with
// "data: [DONE]\n\n", and set the header "x-vercel-ai-ui-message-stream: v1".
//
// # The AI SDK's schema
//
// The chunk shapes are those of uiMessageChunkSchema in
// packages/ai/src/ui-message-stream/ui-message-chunks.ts of
// github.com/vercel/ai, for ai 6.0.x and 7.0.x (the same for every chunk a
// Writer writes; ai 5.0.x too, but for the finish and abort fields noted at
// Finish and Abort). Many releases validate chunks with strict objects that
// refuse unknown fields (ai 6.0.0–6.0.230, 7.0.0–7.0.31, 5.0.0–5.0.216), so
// a Writer writes only the schema's fields and leaves optional ones out when
// they are empty. The finish reasons are the schema's enum (the Finish
// constants).
package uistream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
)

// ContentType is the content type of a stream of UI message chunks: each
// chunk is one JSON object. Open a step's stream with
// weir.ContentType(ContentType).
const ContentType = "application/json"

// ChunkWriter is where a Writer writes its chunks: each Write is one chunk.
// *weir.Writer (from StepContext.Stream or Context.Stream) is one. Write must
// write all of p as one chunk or return an error having written nothing of
// it, and must not keep p after it returns.
type ChunkWriter interface {
	Write(p []byte) (int, error)
}

// The errors a Writer returns for a call that does not fit the stream written
// so far, or for a bad argument. Such a call writes nothing. Match them with
// errors.Is.
var (
	// ErrNotStarted is returned by any call but Start before Start.
	ErrNotStarted = errors.New("uistream: the message is not started")
	// ErrAlreadyStarted is returned by a second Start.
	ErrAlreadyStarted = errors.New("uistream: the message is already started")
	// ErrEnded is returned by any call after Finish or Abort.
	ErrEnded = errors.New("uistream: the message has ended")
	// ErrStepOrder is returned by StartStep while a step is open, by
	// FinishStep with none open, and by Finish while a step is open.
	ErrStepOrder = errors.New("uistream: step out of order")
	// ErrPartOpen is returned by FinishStep and Finish while a text or
	// reasoning part is open.
	ErrPartOpen = errors.New("uistream: a part is still open")
	// ErrPartEnded is returned by Part.Delta and Part.End after Part.End.
	ErrPartEnded = errors.New("uistream: the part has ended")
	// ErrUnknownPart is returned by Writer.Part for an id that is not an
	// open part.
	ErrUnknownPart = errors.New("uistream: no open part has that id")
	// ErrDuplicateID is returned when a text or reasoning part, or a tool
	// call, is given an id the message already used.
	ErrDuplicateID = errors.New("uistream: the id is already used")
	// ErrToolOrder is returned by a tool call's chunk out of its order:
	// input start, input deltas, input available, then one output (or
	// output error). A delta without an input start, an output before the
	// input is available or after an output, an input twice, and FinishStep
	// or Finish while a call's input is still streaming are refused.
	ErrToolOrder = errors.New("uistream: tool call chunk out of order")
	// ErrInvalid is returned for a bad argument: an empty tool call id, tool
	// or data name, a finish reason the AI SDK does not know, a value
	// encoding/json cannot encode, a tool name that differs from the call's
	// input start.
	ErrInvalid = errors.New("uistream: invalid argument")
)

// The finish reasons of a finish chunk: the AI SDK's FinishReason values
// (the enum of the finish chunk's finishReason).
const (
	FinishStop          = "stop"
	FinishLength        = "length"
	FinishContentFilter = "content-filter"
	FinishToolCalls     = "tool-calls"
	FinishError         = "error"
	FinishOther         = "other"
)

// Part kinds.
const (
	kindText      = "text"
	kindReasoning = "reasoning"
)

// Tool call phases, named after the AI SDK's tool part states.
const (
	phaseStreaming = "input-streaming"
	phaseAvailable = "input-available"
	phaseOutput    = "output-available"
	phaseError     = "output-error"
)

// Writer writes one UI message as UI message stream chunks to a ChunkWriter,
// checking that the chunks come in an order the AI SDK accepts and that
// their ids agree. Each method writes exactly one chunk, or returns an error
// and writes nothing.
//
// Make one with NewWriter or Resume. A Writer is safe for concurrent use,
// but the order of the chunks is the order of the calls: for a retry of the
// step to write the same bytes (see the package documentation), make the
// calls in a deterministic order.
type Writer struct {
	mu  sync.Mutex
	cw  ChunkWriter
	st  snapshot
	buf bytes.Buffer // the chunk being built; reused
	val bytes.Buffer // a value being encoded; reused
	enc *json.Encoder
}

// NewWriter returns a Writer of a new message on cw. Its first call must be
// Start.
func NewWriter(cw ChunkWriter) *Writer {
	return Resume(cw, State{})
}

// Resume returns a Writer that carries on, on cw, the message whose State s
// an earlier Writer returned: typically one of an earlier step, on the same
// run stream. The zero State is a new message, as NewWriter's.
func Resume(cw ChunkWriter, s State) *Writer {
	w := &Writer{cw: cw, st: s.s.clone()}
	w.enc = json.NewEncoder(&w.val)
	w.enc.SetEscapeHTML(false)
	return w
}

// State returns a snapshot of what the Writer has written: whether the
// message started or ended, its id, whether a step is open, the parts and
// tool calls so far. Pass it to Resume to continue the message.
func (w *Writer) State() State {
	w.mu.Lock()
	defer w.mu.Unlock()
	return State{s: w.st.clone()}
}

// MessageID returns the message id given to Start ("" before it, or if Start
// was given none).
func (w *Writer) MessageID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.st.MessageID
}

// Start writes the start chunk, {"type":"start","messageId":…,
// "messageMetadata":…}: the message's id and, if not nil, its metadata. It
// must be the first call. An empty messageID is left out, and useChat then
// makes up an id of its own; give one that is the same on every attempt,
// such as one derived from StepContext.StepID.
func (w *Writer) Start(messageID string, metadata any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.st.Started {
		return fmt.Errorf("%w: start of message %q", ErrAlreadyStarted, messageID)
	}
	c := w.chunk("start")
	c.optString("messageId", messageID)
	if metadata != nil {
		c.value("messageMetadata", metadata)
	}
	return w.emit(c, func() {
		w.st.Started = true
		w.st.MessageID = messageID
	})
}

// StartStep writes {"type":"start-step"}: the start of a step of the
// message (one model call and its tool calls, in the AI SDK's terms). Steps
// do not nest.
func (w *Writer) StartStep() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.check("start-step"); err != nil {
		return err
	}
	if w.st.StepOpen {
		return fmt.Errorf("%w: start-step while a step is open", ErrStepOrder)
	}
	return w.emit(w.chunk("start-step"), func() { w.st.StepOpen = true })
}

// FinishStep writes {"type":"finish-step"}, ending the open step. Its text
// and reasoning parts must have ended (useChat forgets parts still open at a
// finish-step) and its tool calls' inputs must be complete.
func (w *Writer) FinishStep() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.check("finish-step"); err != nil {
		return err
	}
	if !w.st.StepOpen {
		return fmt.Errorf("%w: finish-step without a start-step", ErrStepOrder)
	}
	if err := w.checkClosed("finish-step"); err != nil {
		return err
	}
	return w.emit(w.chunk("finish-step"), func() { w.st.StepOpen = false })
}

// Text writes {"type":"text-start","id":…} and returns the text part, whose
// Delta and End write its text-delta and text-end chunks. An empty id is
// replaced by the next of "text-1", "text-2", … (numbered in call order, with
// reasoning parts), which is the same on every attempt. The id must not be
// one the message used already.
func (w *Writer) Text(id string) (*Part, error) {
	return w.startPart(kindText, id)
}

// Reasoning writes {"type":"reasoning-start","id":…} and returns the
// reasoning part, whose Delta and End write its reasoning-delta and
// reasoning-end chunks. Its id is as Text's.
func (w *Writer) Reasoning(id string) (*Part, error) {
	return w.startPart(kindReasoning, id)
}

// Part returns the open text or reasoning part id: to continue, in a Writer
// made by Resume, a part that an earlier Writer started. ErrUnknownPart if
// no part of that id is open.
func (w *Writer) Part(id string) (*Part, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.st.Parts[id]
	if !ok || !p.Open {
		return nil, fmt.Errorf("%w: %q", ErrUnknownPart, id)
	}
	return &Part{w: w, id: id, kind: p.Kind}, nil
}

func (w *Writer) startPart(kind, id string) (*Part, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	typ := kind + "-start"
	if err := w.check(typ); err != nil {
		return nil, err
	}
	next := w.st.NextAuto
	if id == "" {
		for {
			next++
			id = kind + "-" + strconv.Itoa(next)
			if _, used := w.st.Parts[id]; !used {
				break
			}
		}
	} else if _, used := w.st.Parts[id]; used {
		return nil, fmt.Errorf("%w: %s %q", ErrDuplicateID, typ, id)
	}
	c := w.chunk(typ)
	c.str("id", id)
	err := w.emit(c, func() {
		w.st.NextAuto = next
		if w.st.Parts == nil {
			w.st.Parts = make(map[string]partState)
		}
		w.st.Parts[id] = partState{Kind: kind, Open: true}
	})
	if err != nil {
		return nil, err
	}
	return &Part{w: w, id: id, kind: kind}, nil
}

// ToolInputStart writes {"type":"tool-input-start","toolCallId":…,
// "toolName":…}: the model started a call of tool toolName, whose input
// ToolInputDelta streams. callID must be new to the message.
func (w *Writer) ToolInputStart(callID, toolName string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	const typ = "tool-input-start"
	if err := w.check(typ); err != nil {
		return err
	}
	if err := nonEmpty(typ, "toolCallId", callID, "toolName", toolName); err != nil {
		return err
	}
	if _, used := w.st.Tools[callID]; used {
		return fmt.Errorf("%w: %s %q", ErrDuplicateID, typ, callID)
	}
	c := w.chunk(typ)
	c.str("toolCallId", callID)
	c.str("toolName", toolName)
	return w.emit(c, func() { w.st.setTool(callID, toolCall{Name: toolName, Phase: phaseStreaming}) })
}

// ToolInputDelta writes {"type":"tool-input-delta","toolCallId":…,
// "inputTextDelta":…}: the next piece of the JSON text of the call's input,
// after ToolInputStart and before ToolInputAvailable.
func (w *Writer) ToolInputDelta(callID, delta string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	const typ = "tool-input-delta"
	if err := w.check(typ); err != nil {
		return err
	}
	t, ok := w.st.Tools[callID]
	if !ok {
		return fmt.Errorf("%w: %s for call %q without its tool-input-start", ErrToolOrder, typ, callID)
	}
	if t.Phase != phaseStreaming {
		return fmt.Errorf("%w: %s for call %q, whose input is already available", ErrToolOrder, typ, callID)
	}
	c := w.chunk(typ)
	c.str("toolCallId", callID)
	c.str("inputTextDelta", delta)
	return w.emit(c, nil)
}

// ToolInputAvailable writes {"type":"tool-input-available","toolCallId":…,
// "toolName":…,"input":…}: the call's complete input, encoded with
// encoding/json (nil is null). It may follow ToolInputStart (with the same
// toolName) or come alone, for an input that was not streamed.
func (w *Writer) ToolInputAvailable(callID, toolName string, input any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	const typ = "tool-input-available"
	if err := w.check(typ); err != nil {
		return err
	}
	if err := nonEmpty(typ, "toolCallId", callID, "toolName", toolName); err != nil {
		return err
	}
	if t, ok := w.st.Tools[callID]; ok {
		if t.Phase != phaseStreaming {
			return fmt.Errorf("%w: %s for call %q, whose input is already available", ErrToolOrder, typ, callID)
		}
		if t.Name != toolName {
			return fmt.Errorf("%w: %s for call %q of tool %q, started as a call of %q", ErrInvalid, typ, callID, toolName, t.Name)
		}
	}
	c := w.chunk(typ)
	c.str("toolCallId", callID)
	c.str("toolName", toolName)
	c.value("input", input)
	return w.emit(c, func() { w.st.setTool(callID, toolCall{Name: toolName, Phase: phaseAvailable}) })
}

// ToolOutputAvailable writes {"type":"tool-output-available",
// "toolCallId":…,"output":…}: the result of the call, encoded with
// encoding/json (nil is null). The call's input must be available
// (ToolInputAvailable) and it must have no output yet.
func (w *Writer) ToolOutputAvailable(callID string, output any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	const typ = "tool-output-available"
	if err := w.checkOutput(typ, callID); err != nil {
		return err
	}
	c := w.chunk(typ)
	c.str("toolCallId", callID)
	c.value("output", output)
	return w.emit(c, func() { w.st.setPhase(callID, phaseOutput) })
}

// ToolOutputError writes {"type":"tool-output-error","toolCallId":…,
// "errorText":…}: the call failed. Its order is ToolOutputAvailable's.
func (w *Writer) ToolOutputError(callID, errorText string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	const typ = "tool-output-error"
	if err := w.checkOutput(typ, callID); err != nil {
		return err
	}
	c := w.chunk(typ)
	c.str("toolCallId", callID)
	c.str("errorText", errorText)
	return w.emit(c, func() { w.st.setPhase(callID, phaseError) })
}

func (w *Writer) checkOutput(typ, callID string) error {
	if err := w.check(typ); err != nil {
		return err
	}
	t, ok := w.st.Tools[callID]
	switch {
	case !ok:
		return fmt.Errorf("%w: %s for call %q before its input", ErrToolOrder, typ, callID)
	case t.Phase == phaseStreaming:
		return fmt.Errorf("%w: %s for call %q before its input is available", ErrToolOrder, typ, callID)
	case t.Phase != phaseAvailable:
		return fmt.Errorf("%w: %s for call %q, which has its output", ErrToolOrder, typ, callID)
	}
	return nil
}

// Data writes {"type":"data-<name>","data":…}: a custom data part of the
// message, data encoded with encoding/json (nil is null).
func (w *Writer) Data(name string, data any) error {
	return w.data(name, "", data)
}

// DataWithID writes {"type":"data-<name>","id":…,"data":…}: a data part with
// an id. useChat replaces the message's data part of the same name and id,
// so writing it again updates it (a progress bar, a status).
func (w *Writer) DataWithID(name, id string, data any) error {
	if id == "" {
		return fmt.Errorf("%w: data-%s: empty id", ErrInvalid, name)
	}
	return w.data(name, id, data)
}

func (w *Writer) data(name, id string, data any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	typ := "data-" + name
	if err := w.check(typ); err != nil {
		return err
	}
	if name == "" {
		return fmt.Errorf("%w: data chunk with an empty name", ErrInvalid)
	}
	c := w.chunk(typ)
	c.optString("id", id)
	c.value("data", data)
	return w.emit(c, nil)
}

// MessageMetadata writes {"type":"message-metadata","messageMetadata":…}:
// metadata that useChat merges into the message's. It must not be nil.
func (w *Writer) MessageMetadata(metadata any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	const typ = "message-metadata"
	if err := w.check(typ); err != nil {
		return err
	}
	if metadata == nil {
		return fmt.Errorf("%w: %s: nil metadata", ErrInvalid, typ)
	}
	c := w.chunk(typ)
	c.value("messageMetadata", metadata)
	return w.emit(c, nil)
}

// Error writes {"type":"error","errorText":…}. It does not end the message
// for the Writer, but useChat ends its response at an error chunk (its
// status becomes "error"), so an Abort usually follows.
func (w *Writer) Error(errorText string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	const typ = "error"
	if err := w.check(typ); err != nil {
		return err
	}
	c := w.chunk(typ)
	c.str("errorText", errorText)
	return w.emit(c, nil)
}

// Finish writes {"type":"finish","finishReason":…}, the end of the message:
// no step, part or tool input may be open. finishReason is one of the
// Finish constants, or "" to leave it out (ai 5.0.0–5.0.91 have no
// finishReason field and refuse it). Every call after it returns ErrEnded.
func (w *Writer) Finish(finishReason string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	const typ = "finish"
	if err := w.check(typ); err != nil {
		return err
	}
	switch finishReason {
	case "", FinishStop, FinishLength, FinishContentFilter, FinishToolCalls, FinishError, FinishOther:
	default:
		return fmt.Errorf("%w: finish reason %q", ErrInvalid, finishReason)
	}
	if w.st.StepOpen {
		return fmt.Errorf("%w: finish while a step is open", ErrStepOrder)
	}
	if err := w.checkClosed(typ); err != nil {
		return err
	}
	c := w.chunk(typ)
	c.optString("finishReason", finishReason)
	return w.emit(c, func() { w.st.Ended = true })
}

// Abort writes {"type":"abort"}, with "reason" if reason is not empty, and
// ends the message whatever is open. The reason field is in the AI SDK's
// schema from ai 6.0.15 and in every ai 7; ai 6.0.0–6.0.14 and ai 5 (before
// 5.0.217) refuse it. Every call after it returns ErrEnded.
func (w *Writer) Abort(reason string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	const typ = "abort"
	if err := w.check(typ); err != nil {
		return err
	}
	c := w.chunk(typ)
	c.optString("reason", reason)
	return w.emit(c, func() { w.st.Ended = true })
}

// check refuses any chunk but start before Start, and any after the end.
func (w *Writer) check(typ string) error {
	if !w.st.Started {
		return fmt.Errorf("%w: cannot write %s before start", ErrNotStarted, typ)
	}
	if w.st.Ended {
		return fmt.Errorf("%w: cannot write %s", ErrEnded, typ)
	}
	return nil
}

// checkClosed refuses typ while a part is open or a tool input streams.
// The first in id order is named, so the error is the same every time.
func (w *Writer) checkClosed(typ string) error {
	for _, id := range sortedKeys(w.st.Parts) {
		if p := w.st.Parts[id]; p.Open {
			return fmt.Errorf("%w: %s while %s part %q is open", ErrPartOpen, typ, p.Kind, id)
		}
	}
	for _, id := range sortedKeys(w.st.Tools) {
		if w.st.Tools[id].Phase == phaseStreaming {
			return fmt.Errorf("%w: %s while the input of call %q is streaming", ErrToolOrder, typ, id)
		}
	}
	return nil
}

func nonEmpty(typ string, kv ...string) error {
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == "" {
			return fmt.Errorf("%w: %s: empty %s", ErrInvalid, typ, kv[i])
		}
	}
	return nil
}

// emit writes c as one chunk and, once it is written, applies its change to
// the state. If c could not be built or the ChunkWriter fails, the state is
// as it was.
func (w *Writer) emit(c *chunk, apply func()) error {
	if c.err != nil {
		return c.err
	}
	c.b.WriteByte('}')
	b := c.b.Bytes()
	n, err := w.cw.Write(b)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("uistream: write %s chunk: %w", c.typ, err)
	}
	if apply != nil {
		apply()
	}
	return nil
}

// Part is an open text or reasoning part of the message, as Writer.Text or
// Writer.Reasoning started it.
type Part struct {
	w    *Writer
	id   string
	kind string
}

// ID returns the part's id.
func (p *Part) ID() string { return p.id }

// Delta writes {"type":"text-delta","id":…,"delta":…} (reasoning-delta for
// a reasoning part): the next piece of the part's text.
func (p *Part) Delta(delta string) error {
	w := p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	typ := p.kind + "-delta"
	if err := p.check(typ); err != nil {
		return err
	}
	c := w.chunk(typ)
	c.str("id", p.id)
	c.str("delta", delta)
	return w.emit(c, nil)
}

// End writes {"type":"text-end","id":…} (reasoning-end for a reasoning
// part). Delta and End after it return ErrPartEnded.
func (p *Part) End() error {
	w := p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	typ := p.kind + "-end"
	if err := p.check(typ); err != nil {
		return err
	}
	c := w.chunk(typ)
	c.str("id", p.id)
	return w.emit(c, func() { w.st.Parts[p.id] = partState{Kind: p.kind} })
}

func (p *Part) check(typ string) error {
	if err := p.w.check(typ); err != nil {
		return err
	}
	if !p.w.st.Parts[p.id].Open {
		return fmt.Errorf("%w: %s for part %q after its %s-end", ErrPartEnded, typ, p.id, p.kind)
	}
	return nil
}

// chunk is a chunk being built: a JSON object, fields in the order added.
type chunk struct {
	w   *Writer
	typ string
	b   *bytes.Buffer
	err error
}

// chunk starts the chunk of type typ in the Writer's buffer.
func (w *Writer) chunk(typ string) *chunk {
	w.buf.Reset()
	c := &chunk{w: w, typ: typ, b: &w.buf}
	c.b.WriteByte('{')
	c.value("type", typ)
	return c
}

// str adds key with string value v.
func (c *chunk) str(key, v string) { c.value(key, v) }

// optString adds key with string value v, unless v is empty.
func (c *chunk) optString(key, v string) {
	if v != "" {
		c.value(key, v)
	}
}

// value adds key with v encoded by encoding/json, compact, HTML characters
// as they are.
func (c *chunk) value(key string, v any) {
	if c.err != nil {
		return
	}
	val := &c.w.val
	val.Reset()
	if err := c.w.enc.Encode(v); err != nil {
		c.err = fmt.Errorf("%w: %s: %s cannot be encoded as JSON: %w", ErrInvalid, c.typ, key, err)
		return
	}
	if c.b.Len() > 1 {
		c.b.WriteByte(',')
	}
	c.b.WriteByte('"')
	c.b.WriteString(key) // the schema's field names need no escaping
	c.b.WriteString(`":`)
	c.b.Write(bytes.TrimSuffix(val.Bytes(), []byte{'\n'}))
}

// State is a snapshot of a Writer's message: Writer.State returns it and
// Resume continues from it. It encodes as JSON (a step can return it, or a
// struct holding it), and its zero value is a message not yet started.
type State struct {
	s snapshot
}

// MarshalJSON encodes the State.
func (s State) MarshalJSON() ([]byte, error) {
	v := s.s
	v.V = stateVersion
	return json.Marshal(v)
}

// UnmarshalJSON decodes a State that MarshalJSON encoded.
func (s *State) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var v snapshot
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("uistream: decode State: %w", err)
	}
	if err := v.validate(); err != nil {
		return err
	}
	v.V = 0
	s.s = v
	return nil
}

// stateVersion is the version of State's encoding.
const stateVersion = 1

type snapshot struct {
	V         int                  `json:"v,omitempty"`
	MessageID string               `json:"messageId,omitempty"`
	Started   bool                 `json:"started,omitempty"`
	Ended     bool                 `json:"ended,omitempty"`
	StepOpen  bool                 `json:"stepOpen,omitempty"`
	NextAuto  int                  `json:"nextAuto,omitempty"` // the last number given to a part without an id
	Parts     map[string]partState `json:"parts,omitempty"`    // every text and reasoning part, by id
	Tools     map[string]toolCall  `json:"tools,omitempty"`    // every tool call, by id
}

type partState struct {
	Kind string `json:"kind"`
	Open bool   `json:"open,omitempty"`
}

type toolCall struct {
	Name  string `json:"name"`
	Phase string `json:"phase"`
}

func (s snapshot) clone() snapshot {
	s.Parts = maps.Clone(s.Parts)
	s.Tools = maps.Clone(s.Tools)
	return s
}

func (s *snapshot) setTool(id string, t toolCall) {
	if s.Tools == nil {
		s.Tools = make(map[string]toolCall)
	}
	s.Tools[id] = t
}

func (s *snapshot) setPhase(id, phase string) {
	t := s.Tools[id]
	t.Phase = phase
	s.Tools[id] = t
}

func (s *snapshot) validate() error {
	bad := func(what string, args ...any) error {
		return fmt.Errorf("uistream: decode State: "+what, args...)
	}
	if s.V != stateVersion {
		return bad("version %d, want %d", s.V, stateVersion)
	}
	if !s.Started && (s.Ended || s.StepOpen || s.MessageID != "" || len(s.Parts) > 0 || len(s.Tools) > 0) {
		return bad("a message not started has content")
	}
	if s.NextAuto < 0 {
		return bad("negative part number %d", s.NextAuto)
	}
	for id, p := range s.Parts {
		if p.Kind != kindText && p.Kind != kindReasoning {
			return bad("part %q of kind %q", id, p.Kind)
		}
	}
	for id, t := range s.Tools {
		switch t.Phase {
		case phaseStreaming, phaseAvailable, phaseOutput, phaseError:
		default:
			return bad("tool call %q in phase %q", id, t.Phase)
		}
		if id == "" || t.Name == "" {
			return bad("tool call %q of tool %q", id, t.Name)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
