package uistream_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/weirhq/weir/uistream"
)

// recorder is a ChunkWriter that keeps each chunk.
type recorder struct {
	mu     sync.Mutex
	chunks [][]byte
	fail   error // if set, Write fails with it and keeps nothing
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return 0, r.fail
	}
	r.chunks = append(r.chunks, bytes.Clone(p))
	return len(p), nil
}

func (r *recorder) strings() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.chunks))
	for i, c := range r.chunks {
		out[i] = string(c)
	}
	return out
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.chunks)
}

// field is one field of a chunk in the AI SDK's schema.
type field struct {
	required bool
	kind     string // "string", "boolean", "unknown" (any JSON value) or "finishReason"
}

// uiMessageChunkSchema is the AI SDK's uiMessageChunkSchema, for the chunk
// types a Writer writes: each type's fields, with whether they are required
// and what they hold. "type" is implied.
//
// Source: github.com/vercel/ai, packages/ai/src/ui-message-stream/
// ui-message-chunks.ts, read at tags ai@6.0.264 (commit 526e8a54d6bf) and
// ai@7.0.77 (commit ed857f50f112), checked against ai@6.0.0 and ai@7.0.0.
// These chunks have the same fields in ai 6 and 7, except where noted. Both
// majors also have fields a Writer never writes (providerMetadata,
// providerExecuted, toolMetadata, dynamic, title, preliminary, transient),
// listed so that the check below knows them. ai@6.0.0–6.0.230 and
// ai@7.0.0–7.0.31 declare every chunk with z.strictObject (a field not
// listed fails validation), later releases with z.looseObject; a Writer
// must write only these fields either way.
var uiMessageChunkSchema = map[string]map[string]field{
	"start": {
		"messageId":       {false, "string"},
		"messageMetadata": {false, "unknown"},
	},
	"start-step":  {},
	"finish-step": {},
	"text-start": {
		"id":               {true, "string"},
		"providerMetadata": {false, "unknown"},
	},
	"text-delta": {
		"id":               {true, "string"},
		"delta":            {true, "string"},
		"providerMetadata": {false, "unknown"},
	},
	"text-end": {
		"id":               {true, "string"},
		"providerMetadata": {false, "unknown"},
	},
	"reasoning-start": {
		"id":               {true, "string"},
		"providerMetadata": {false, "unknown"},
	},
	"reasoning-delta": {
		"id":               {true, "string"},
		"delta":            {true, "string"},
		"providerMetadata": {false, "unknown"},
	},
	"reasoning-end": {
		"id":               {true, "string"},
		"providerMetadata": {false, "unknown"},
	},
	"tool-input-start": {
		"toolCallId":       {true, "string"},
		"toolName":         {true, "string"},
		"providerExecuted": {false, "boolean"},
		"providerMetadata": {false, "unknown"}, // from ai 6.0.x after 6.0.0
		"toolMetadata":     {false, "unknown"}, // likewise
		"dynamic":          {false, "boolean"},
		"title":            {false, "string"},
	},
	"tool-input-delta": {
		"toolCallId":     {true, "string"},
		"inputTextDelta": {true, "string"},
	},
	"tool-input-available": {
		"toolCallId":       {true, "string"},
		"toolName":         {true, "string"},
		"input":            {true, "unknown"},
		"providerExecuted": {false, "boolean"},
		"providerMetadata": {false, "unknown"},
		"toolMetadata":     {false, "unknown"},
		"dynamic":          {false, "boolean"},
		"title":            {false, "string"},
	},
	"tool-output-available": {
		"toolCallId":       {true, "string"},
		"output":           {true, "unknown"},
		"providerExecuted": {false, "boolean"},
		"providerMetadata": {false, "unknown"},
		"toolMetadata":     {false, "unknown"},
		"dynamic":          {false, "boolean"},
		"preliminary":      {false, "boolean"},
	},
	"tool-output-error": {
		"toolCallId":       {true, "string"},
		"errorText":        {true, "string"},
		"providerExecuted": {false, "boolean"},
		"providerMetadata": {false, "unknown"},
		"toolMetadata":     {false, "unknown"},
		"dynamic":          {false, "boolean"},
	},
	// data-<name>: matched by prefix.
	"data-*": {
		"id":        {false, "string"},
		"data":      {true, "unknown"},
		"transient": {false, "boolean"},
	},
	"message-metadata": {
		"messageMetadata": {true, "unknown"},
	},
	"finish": {
		"finishReason":    {false, "finishReason"},
		"messageMetadata": {false, "unknown"},
	},
	"error": {
		"errorText": {true, "string"},
	},
	"abort": {
		"reason": {false, "string"}, // ai 6.0.15 and later, every ai 7
	},
}

// finishReasons is the finish chunk's finishReason enum, the same in ai 6
// and 7.
var finishReasons = []string{"stop", "length", "content-filter", "tool-calls", "error", "other"}

// checkSchema fails the test unless chunk is one compact JSON object that
// uiMessageChunkSchema accepts, with "type" its first field.
func checkSchema(t *testing.T, chunk string) {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(chunk)); err != nil || buf.String() != chunk {
		t.Fatalf("chunk %s is not compact JSON (%v)", chunk, err)
	}
	if !strings.HasPrefix(chunk, `{"type":"`) {
		t.Fatalf("chunk %s does not start with its type", chunk)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(chunk), &m); err != nil {
		t.Fatalf("chunk %s: %v", chunk, err)
	}
	typ, _ := m["type"].(string)
	key := typ
	if strings.HasPrefix(typ, "data-") && len(typ) > len("data-") {
		key = "data-*"
	}
	fields, ok := uiMessageChunkSchema[key]
	if !ok {
		t.Fatalf("chunk %s: type %q is not in the schema", chunk, typ)
	}
	for name, f := range fields {
		v, has := m[name]
		if f.required && !has {
			t.Fatalf("chunk %s lacks its required field %q", chunk, name)
		}
		if !has {
			continue
		}
		switch f.kind {
		case "string":
			if _, ok := v.(string); !ok {
				t.Fatalf("chunk %s: %q is not a string", chunk, name)
			}
		case "boolean":
			if _, ok := v.(bool); !ok {
				t.Fatalf("chunk %s: %q is not a boolean", chunk, name)
			}
		case "finishReason":
			if s, _ := v.(string); !slices.Contains(finishReasons, s) {
				t.Fatalf("chunk %s: %q is not a finish reason", chunk, name)
			}
		}
	}
	for name := range m {
		if _, known := fields[name]; !known && name != "type" {
			t.Fatalf("chunk %s: field %q is not in the schema of %q (a strict schema refuses it)", chunk, name, typ)
		}
	}
}

// started returns a Writer on a new recorder, with its message started.
func started(t *testing.T) (*uistream.Writer, *recorder) {
	t.Helper()
	rec := &recorder{}
	w := uistream.NewWriter(rec)
	if err := w.Start("msg-1", nil); err != nil {
		t.Fatal(err)
	}
	return w, rec
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustPart(t *testing.T) func(*uistream.Part, error) *uistream.Part {
	return func(p *uistream.Part, err error) *uistream.Part {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// Each call writes the one chunk the AI SDK's schema describes, byte for byte.
func TestChunkShapes(t *testing.T) {
	type weather struct {
		City  string  `json:"city"`
		TempC float64 `json:"tempC"`
	}
	cases := []struct {
		name  string
		fresh bool // a Writer not started
		setup func(t *testing.T, w *uistream.Writer)
		call  func(w *uistream.Writer) error
		want  string
	}{
		{name: "start", fresh: true,
			call: func(w *uistream.Writer) error { return w.Start("msg-1", nil) },
			want: `{"type":"start","messageId":"msg-1"}`},
		{name: "start with metadata", fresh: true,
			call: func(w *uistream.Writer) error {
				return w.Start("run-7/step/1", map[string]any{"model": "m", "createdAt": 0})
			},
			want: `{"type":"start","messageId":"run-7/step/1","messageMetadata":{"createdAt":0,"model":"m"}}`},
		{name: "start without an id", fresh: true,
			call: func(w *uistream.Writer) error { return w.Start("", nil) },
			want: `{"type":"start"}`},
		{name: "start-step",
			call: func(w *uistream.Writer) error { return w.StartStep() },
			want: `{"type":"start-step"}`},
		{name: "finish-step",
			setup: func(t *testing.T, w *uistream.Writer) { must(t, w.StartStep()) },
			call:  func(w *uistream.Writer) error { return w.FinishStep() },
			want:  `{"type":"finish-step"}`},
		{name: "text-start",
			call: func(w *uistream.Writer) error { _, err := w.Text("t1"); return err },
			want: `{"type":"text-start","id":"t1"}`},
		{name: "text-start numbered",
			call: func(w *uistream.Writer) error { _, err := w.Text(""); return err },
			want: `{"type":"text-start","id":"text-1"}`},
		{name: "text-delta",
			call: func(w *uistream.Writer) error {
				p, err := w.Text("t1")
				if err != nil {
					return err
				}
				return p.Delta("Hel")
			},
			want: `{"type":"text-delta","id":"t1","delta":"Hel"}`},
		{name: "text-delta unescaped HTML, escaped control characters",
			call: func(w *uistream.Writer) error {
				p, err := w.Text("t1")
				if err != nil {
					return err
				}
				return p.Delta("<b>a & b</b>\n\"é\"")
			},
			want: `{"type":"text-delta","id":"t1","delta":"<b>a & b</b>\n\"é\""}`},
		{name: "text-end",
			call: func(w *uistream.Writer) error {
				p, err := w.Text("t1")
				if err != nil {
					return err
				}
				return p.End()
			},
			want: `{"type":"text-end","id":"t1"}`},
		{name: "reasoning-start numbered after a text",
			setup: func(t *testing.T, w *uistream.Writer) { mustPart(t)(w.Text("")) },
			call:  func(w *uistream.Writer) error { _, err := w.Reasoning(""); return err },
			want:  `{"type":"reasoning-start","id":"reasoning-2"}`},
		{name: "reasoning-delta",
			call: func(w *uistream.Writer) error {
				p, err := w.Reasoning("r1")
				if err != nil {
					return err
				}
				return p.Delta("thinking")
			},
			want: `{"type":"reasoning-delta","id":"r1","delta":"thinking"}`},
		{name: "reasoning-end",
			call: func(w *uistream.Writer) error {
				p, err := w.Reasoning("r1")
				if err != nil {
					return err
				}
				return p.End()
			},
			want: `{"type":"reasoning-end","id":"r1"}`},
		{name: "tool-input-start",
			call: func(w *uistream.Writer) error { return w.ToolInputStart("c1", "search") },
			want: `{"type":"tool-input-start","toolCallId":"c1","toolName":"search"}`},
		{name: "tool-input-delta",
			setup: func(t *testing.T, w *uistream.Writer) { must(t, w.ToolInputStart("c1", "search")) },
			call:  func(w *uistream.Writer) error { return w.ToolInputDelta("c1", `{"q":`) },
			want:  `{"type":"tool-input-delta","toolCallId":"c1","inputTextDelta":"{\"q\":"}`},
		{name: "tool-input-available after its start",
			setup: func(t *testing.T, w *uistream.Writer) { must(t, w.ToolInputStart("c1", "search")) },
			call: func(w *uistream.Writer) error {
				return w.ToolInputAvailable("c1", "search", map[string]string{"q": "weir"})
			},
			want: `{"type":"tool-input-available","toolCallId":"c1","toolName":"search","input":{"q":"weir"}}`},
		{name: "tool-input-available alone, raw JSON compacted",
			call: func(w *uistream.Writer) error {
				return w.ToolInputAvailable("c1", "search", json.RawMessage(`{ "q" : "weir" }`))
			},
			want: `{"type":"tool-input-available","toolCallId":"c1","toolName":"search","input":{"q":"weir"}}`},
		{name: "tool-input-available nil input",
			call: func(w *uistream.Writer) error { return w.ToolInputAvailable("c1", "now", nil) },
			want: `{"type":"tool-input-available","toolCallId":"c1","toolName":"now","input":null}`},
		{name: "tool-output-available",
			setup: func(t *testing.T, w *uistream.Writer) { must(t, w.ToolInputAvailable("c1", "weather", nil)) },
			call: func(w *uistream.Writer) error {
				return w.ToolOutputAvailable("c1", weather{City: "Oslo", TempC: -3.5})
			},
			want: `{"type":"tool-output-available","toolCallId":"c1","output":{"city":"Oslo","tempC":-3.5}}`},
		{name: "tool-output-available nil output",
			setup: func(t *testing.T, w *uistream.Writer) { must(t, w.ToolInputAvailable("c1", "x", nil)) },
			call:  func(w *uistream.Writer) error { return w.ToolOutputAvailable("c1", nil) },
			want:  `{"type":"tool-output-available","toolCallId":"c1","output":null}`},
		{name: "tool-output-error",
			setup: func(t *testing.T, w *uistream.Writer) { must(t, w.ToolInputAvailable("c1", "x", 1)) },
			call:  func(w *uistream.Writer) error { return w.ToolOutputError("c1", "timed out") },
			want:  `{"type":"tool-output-error","toolCallId":"c1","errorText":"timed out"}`},
		{name: "data",
			call: func(w *uistream.Writer) error { return w.Data("weather", []int{1, 2}) },
			want: `{"type":"data-weather","data":[1,2]}`},
		{name: "data with id",
			call: func(w *uistream.Writer) error { return w.DataWithID("progress", "p1", 0.5) },
			want: `{"type":"data-progress","id":"p1","data":0.5}`},
		{name: "data nil",
			call: func(w *uistream.Writer) error { return w.Data("ping", nil) },
			want: `{"type":"data-ping","data":null}`},
		{name: "message-metadata",
			call: func(w *uistream.Writer) error { return w.MessageMetadata(map[string]int{"tokens": 12}) },
			want: `{"type":"message-metadata","messageMetadata":{"tokens":12}}`},
		{name: "error",
			call: func(w *uistream.Writer) error { return w.Error("model unavailable") },
			want: `{"type":"error","errorText":"model unavailable"}`},
		{name: "finish",
			call: func(w *uistream.Writer) error { return w.Finish("") },
			want: `{"type":"finish"}`},
		{name: "finish with a reason",
			call: func(w *uistream.Writer) error { return w.Finish(uistream.FinishToolCalls) },
			want: `{"type":"finish","finishReason":"tool-calls"}`},
		{name: "abort",
			call: func(w *uistream.Writer) error { return w.Abort("") },
			want: `{"type":"abort"}`},
		{name: "abort with a reason",
			call: func(w *uistream.Writer) error { return w.Abort("user left") },
			want: `{"type":"abort","reason":"user left"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			w := uistream.NewWriter(rec)
			if !tc.fresh {
				must(t, w.Start("msg-1", nil))
			}
			if tc.setup != nil {
				tc.setup(t, w)
			}
			before := rec.len()
			if err := tc.call(w); err != nil {
				t.Fatal(err)
			}
			got := rec.strings()[before:]
			if strings.Contains(tc.want, `-delta","id"`) || strings.Contains(tc.want, `-end","id"`) {
				got = got[1:] // the part's start, written by the call too
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("wrote %q\nwant %q", got, tc.want)
			}
			for _, c := range rec.strings() {
				checkSchema(t, c)
			}
		})
	}
	// Every finish reason is the schema's.
	for _, r := range []string{uistream.FinishStop, uistream.FinishLength, uistream.FinishContentFilter,
		uistream.FinishToolCalls, uistream.FinishError, uistream.FinishOther} {
		w, rec := started(t)
		must(t, w.Finish(r))
		checkSchema(t, rec.strings()[1])
	}
}

// A call out of order, or with a bad argument, returns its error, writes
// nothing and leaves the Writer as it was.
func TestOrderErrors(t *testing.T) {
	// A setup prepares the Writer; the parts it starts are kept by id.
	type parts = map[string]*uistream.Part
	type setup func(t *testing.T, w *uistream.Writer, ps parts)
	type call func(w *uistream.Writer, ps parts) error
	var (
		text = func(id string) setup {
			return func(t *testing.T, w *uistream.Writer, ps parts) { ps[id] = mustPart(t)(w.Text(id)) }
		}
		end = func(id string) setup {
			return func(t *testing.T, w *uistream.Writer, ps parts) { must(t, ps[id].End()) }
		}
		do = func(f func(w *uistream.Writer) error) setup {
			return func(t *testing.T, w *uistream.Writer, _ parts) { must(t, f(w)) }
		}
		stepOpen    = do(func(w *uistream.Writer) error { return w.StartStep() })
		toolStarted = do(func(w *uistream.Writer) error { return w.ToolInputStart("c1", "search") })
		toolInput   = do(func(w *uistream.Writer) error { return w.ToolInputAvailable("c1", "search", nil) })
		toolOutput  = do(func(w *uistream.Writer) error { return w.ToolOutputAvailable("c1", "ok") })
		finished    = do(func(w *uistream.Writer) error { return w.Finish(uistream.FinishStop) })
		aborted     = do(func(w *uistream.Writer) error { return w.Abort("") })
	)
	on := func(f func(w *uistream.Writer) error) call {
		return func(w *uistream.Writer, _ parts) error { return f(w) }
	}
	delta := func(id string) call {
		return func(_ *uistream.Writer, ps parts) error { return ps[id].Delta("x") }
	}
	lookup := func(id string) call {
		return func(w *uistream.Writer, _ parts) error { _, err := w.Part(id); return err }
	}
	newText := func(id string) call {
		return func(w *uistream.Writer, _ parts) error { _, err := w.Text(id); return err }
	}
	cases := []struct {
		name  string
		fresh bool // not started
		setup []setup
		call  call
		want  error
	}{
		{"text before start", true, nil, newText(""), uistream.ErrNotStarted},
		{"step before start", true, nil, on(func(w *uistream.Writer) error { return w.StartStep() }), uistream.ErrNotStarted},
		{"tool before start", true, nil, on(func(w *uistream.Writer) error { return w.ToolInputStart("c1", "x") }), uistream.ErrNotStarted},
		{"finish before start", true, nil, on(func(w *uistream.Writer) error { return w.Finish("") }), uistream.ErrNotStarted},
		{"error before start", true, nil, on(func(w *uistream.Writer) error { return w.Error("x") }), uistream.ErrNotStarted},
		{"start twice", false, nil, on(func(w *uistream.Writer) error { return w.Start("again", nil) }), uistream.ErrAlreadyStarted},
		{"start after finish", false, []setup{finished}, on(func(w *uistream.Writer) error { return w.Start("again", nil) }), uistream.ErrAlreadyStarted},
		{"text after finish", false, []setup{finished}, newText(""), uistream.ErrEnded},
		{"data after finish", false, []setup{finished}, on(func(w *uistream.Writer) error { return w.Data("x", 1) }), uistream.ErrEnded},
		{"finish twice", false, []setup{finished}, on(func(w *uistream.Writer) error { return w.Finish("") }), uistream.ErrEnded},
		{"error after abort", false, []setup{aborted}, on(func(w *uistream.Writer) error { return w.Error("x") }), uistream.ErrEnded},
		{"abort twice", false, []setup{aborted}, on(func(w *uistream.Writer) error { return w.Abort("") }), uistream.ErrEnded},
		{"delta after abort", false, []setup{text("t1"), aborted}, delta("t1"), uistream.ErrEnded},
		{"start-step twice", false, []setup{stepOpen}, on(func(w *uistream.Writer) error { return w.StartStep() }), uistream.ErrStepOrder},
		{"finish-step without a step", false, nil, on(func(w *uistream.Writer) error { return w.FinishStep() }), uistream.ErrStepOrder},
		{"finish with a step open", false, []setup{stepOpen}, on(func(w *uistream.Writer) error { return w.Finish("") }), uistream.ErrStepOrder},
		{"finish-step with a text open", false, []setup{stepOpen, text("t1")}, on(func(w *uistream.Writer) error { return w.FinishStep() }), uistream.ErrPartOpen},
		{"finish with a text open", false, []setup{text("t1")}, on(func(w *uistream.Writer) error { return w.Finish("") }), uistream.ErrPartOpen},
		{"delta after end", false, []setup{text("t1"), end("t1")}, delta("t1"), uistream.ErrPartEnded},
		{"end after end", false, []setup{text("t1"), end("t1")}, func(_ *uistream.Writer, ps parts) error { return ps["t1"].End() }, uistream.ErrPartEnded},
		{"lookup of an ended part", false, []setup{text("t1"), end("t1")}, lookup("t1"), uistream.ErrUnknownPart},
		{"lookup of an unknown part", false, nil, lookup("t1"), uistream.ErrUnknownPart},
		{"text id reused while open", false, []setup{text("t1")}, newText("t1"), uistream.ErrDuplicateID},
		{"text id reused after end", false, []setup{text("t1"), end("t1")}, newText("t1"), uistream.ErrDuplicateID},
		{"reasoning with a text's id", false, []setup{text("t1")}, on(func(w *uistream.Writer) error { _, err := w.Reasoning("t1"); return err }), uistream.ErrDuplicateID},
		{"tool call id reused", false, []setup{toolInput, toolOutput}, on(func(w *uistream.Writer) error { return w.ToolInputStart("c1", "search") }), uistream.ErrDuplicateID},
		{"tool delta without start", false, nil, on(func(w *uistream.Writer) error { return w.ToolInputDelta("c1", "{") }), uistream.ErrToolOrder},
		{"tool delta after input", false, []setup{toolStarted, toolInput}, on(func(w *uistream.Writer) error { return w.ToolInputDelta("c1", "{") }), uistream.ErrToolOrder},
		{"tool output before any input", false, nil, on(func(w *uistream.Writer) error { return w.ToolOutputAvailable("c1", 1) }), uistream.ErrToolOrder},
		{"tool output while input streams", false, []setup{toolStarted}, on(func(w *uistream.Writer) error { return w.ToolOutputAvailable("c1", 1) }), uistream.ErrToolOrder},
		{"tool output error before input", false, nil, on(func(w *uistream.Writer) error { return w.ToolOutputError("c1", "x") }), uistream.ErrToolOrder},
		{"tool output twice", false, []setup{toolInput, toolOutput}, on(func(w *uistream.Writer) error { return w.ToolOutputAvailable("c1", 2) }), uistream.ErrToolOrder},
		{"tool output error after output", false, []setup{toolInput, toolOutput}, on(func(w *uistream.Writer) error { return w.ToolOutputError("c1", "x") }), uistream.ErrToolOrder},
		{"tool input twice", false, []setup{toolInput}, on(func(w *uistream.Writer) error { return w.ToolInputAvailable("c1", "search", nil) }), uistream.ErrToolOrder},
		{"finish-step while a tool input streams", false, []setup{stepOpen, toolStarted}, on(func(w *uistream.Writer) error { return w.FinishStep() }), uistream.ErrToolOrder},
		{"finish while a tool input streams", false, []setup{toolStarted}, on(func(w *uistream.Writer) error { return w.Finish("") }), uistream.ErrToolOrder},
		{"tool name differs from its start", false, []setup{toolStarted}, on(func(w *uistream.Writer) error { return w.ToolInputAvailable("c1", "fetch", nil) }), uistream.ErrInvalid},
		{"empty tool call id", false, nil, on(func(w *uistream.Writer) error { return w.ToolInputStart("", "search") }), uistream.ErrInvalid},
		{"empty tool name", false, nil, on(func(w *uistream.Writer) error { return w.ToolInputAvailable("c1", "", nil) }), uistream.ErrInvalid},
		{"empty data name", false, nil, on(func(w *uistream.Writer) error { return w.Data("", 1) }), uistream.ErrInvalid},
		{"empty data id", false, nil, on(func(w *uistream.Writer) error { return w.DataWithID("x", "", 1) }), uistream.ErrInvalid},
		{"unknown finish reason", false, nil, on(func(w *uistream.Writer) error { return w.Finish("done") }), uistream.ErrInvalid},
		{"nil message metadata", false, nil, on(func(w *uistream.Writer) error { return w.MessageMetadata(nil) }), uistream.ErrInvalid},
		{"data not JSON", false, nil, on(func(w *uistream.Writer) error { return w.Data("x", make(chan int)) }), uistream.ErrInvalid},
		{"output not JSON", false, []setup{toolInput}, on(func(w *uistream.Writer) error { return w.ToolOutputAvailable("c1", math.NaN()) }), uistream.ErrInvalid},
		{"metadata not JSON", true, nil, on(func(w *uistream.Writer) error { return w.Start("m", func() {}) }), uistream.ErrInvalid},
		{"raw input not JSON", false, nil, on(func(w *uistream.Writer) error {
			return w.ToolInputAvailable("c1", "search", json.RawMessage(`{"q":`))
		}), uistream.ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			w := uistream.NewWriter(rec)
			if !tc.fresh {
				must(t, w.Start("msg-1", nil))
			}
			ps := parts{}
			for _, s := range tc.setup {
				s(t, w, ps)
			}
			before, state := rec.strings(), stateJSON(t, w)
			err := tc.call(w, ps)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if after := rec.strings(); !slices.Equal(after, before) {
				t.Fatalf("a refused call wrote %q", after[len(before):])
			}
			if got := stateJSON(t, w); got != state {
				t.Fatalf("a refused call changed the state from %s to %s", state, got)
			}
		})
	}
}

func stateJSON(t *testing.T, w *uistream.Writer) string {
	t.Helper()
	b, err := json.Marshal(w.State())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A failing ChunkWriter's error is returned, and the Writer is as it was:
// the call can be made again.
func TestChunkWriterError(t *testing.T) {
	w, rec := started(t)
	p := mustPart(t)(w.Text(""))
	boom := errors.New("boom")
	rec.fail = boom
	if err := p.End(); !errors.Is(err, boom) {
		t.Fatalf("End: %v, want the ChunkWriter's error", err)
	}
	if _, err := w.Text(""); !errors.Is(err, boom) {
		t.Fatalf("Text: %v", err)
	}
	rec.fail = nil
	must(t, p.End())
	q := mustPart(t)(w.Text(""))
	if q.ID() != "text-2" {
		t.Fatalf("the failed Text took a number: %q", q.ID())
	}
	// A short write without an error is an error.
	sw := uistream.NewWriter(shortWriter{})
	if err := sw.Start("m", nil); !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("short write: %v", err)
	}
}

type shortWriter struct{}

func (shortWriter) Write(p []byte) (int, error) { return len(p) - 1, nil }

// answer writes a short answer with reasoning, a streamed tool call, its
// output, a second step and data, as an agent would.
func answer(w *uistream.Writer, messageID string) error {
	for _, s := range answerCalls(w, messageID) {
		if err := s(); err != nil {
			return err
		}
	}
	return nil
}

// answerCalls are answer's calls, each a group that opens no part it does
// not end. Its maps have many keys, so that an encoding that followed map
// order would show.
func answerCalls(w *uistream.Writer, messageID string) []func() error {
	input := map[string]any{}
	for i := range 20 {
		input[fmt.Sprintf("k%02d", i)] = i
	}
	return []func() error{
		func() error { return w.Start(messageID, map[string]any{"model": "demo", "b": 1, "a": 2}) },
		w.StartStep,
		func() error {
			r, err := w.Reasoning("")
			if err != nil {
				return err
			}
			if err := r.Delta("The user wants the weather."); err != nil {
				return err
			}
			return r.End()
		},
		func() error { return w.ToolInputStart("call_1", "weather") },
		func() error { return w.ToolInputDelta("call_1", `{"city":`) },
		func() error { return w.ToolInputDelta("call_1", `"Oslo"}`) },
		func() error { return w.ToolInputAvailable("call_1", "weather", map[string]string{"city": "Oslo"}) },
		func() error { return w.ToolOutputAvailable("call_1", input) },
		w.FinishStep,
		w.StartStep,
		func() error {
			t, err := w.Text("")
			if err != nil {
				return err
			}
			for _, d := range []string{"It is ", "-3 °C ", "in Oslo."} {
				if err := t.Delta(d); err != nil {
					return err
				}
			}
			return t.End()
		},
		func() error { return w.DataWithID("sources", "s1", []string{"met.no"}) },
		w.FinishStep,
		func() error { return w.MessageMetadata(map[string]int{"outputTokens": 9, "inputTokens": 30}) },
		func() error { return w.Finish(uistream.FinishStop) },
	}
}

// The same calls write the same bytes, every time: what weir needs to adopt
// a retry's chunks.
func TestDeterministic(t *testing.T) {
	var first []string
	for i := range 50 {
		rec := &recorder{}
		if err := answer(uistream.NewWriter(rec), "run-1/step/1"); err != nil {
			t.Fatal(err)
		}
		got := rec.strings()
		if i == 0 {
			first = got
			for _, c := range got {
				checkSchema(t, c)
			}
			continue
		}
		if !slices.Equal(got, first) {
			t.Fatalf("run %d wrote\n%q\nrun 0\n%q", i, got, first)
		}
	}
	// The map keys are sorted; the part ids are numbered in call order.
	for _, want := range []string{
		`{"type":"start","messageId":"run-1/step/1","messageMetadata":{"a":2,"b":1,"model":"demo"}}`,
		`{"type":"reasoning-start","id":"reasoning-1"}`,
		`{"type":"text-start","id":"text-2"}`,
		`{"type":"message-metadata","messageMetadata":{"inputTokens":30,"outputTokens":9}}`,
	} {
		if !slices.Contains(first, want) {
			t.Fatalf("no chunk %s in %q", want, first)
		}
	}
}

// A Writer made by Resume from another's State writes what that one would
// have written, and a State survives a JSON round trip (as a step result
// does).
func TestResume(t *testing.T) {
	whole := &recorder{}
	if err := answer(uistream.NewWriter(whole), "m"); err != nil {
		t.Fatal(err)
	}
	n := len(answerCalls(uistream.NewWriter(&recorder{}), "m"))
	for k := 0; k <= n; k++ {
		first := &recorder{}
		w := uistream.NewWriter(first)
		for _, c := range answerCalls(w, "m")[:k] {
			must(t, c())
		}
		b, err := json.Marshal(w.State())
		if err != nil {
			t.Fatal(err)
		}
		var st uistream.State
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("k=%d: %s: %v", k, b, err)
		}
		rest := &recorder{}
		w2 := uistream.Resume(rest, st)
		if w2.MessageID() != w.MessageID() {
			t.Fatalf("k=%d: message id %q, want %q", k, w2.MessageID(), w.MessageID())
		}
		for _, c := range answerCalls(w2, "m")[k:] {
			must(t, c())
		}
		if got := append(first.strings(), rest.strings()...); !slices.Equal(got, whole.strings()) {
			t.Fatalf("k=%d: wrote\n%q\nwant\n%q", k, got, whole.strings())
		}
		if k == n {
			// The resumed Writer of an ended message refuses more.
			if err := w2.Data("x", 1); !errors.Is(err, uistream.ErrEnded) {
				t.Fatalf("after the end: %v", err)
			}
		}
	}

	// An open part is taken up again by Part; ids stay unique.
	first, rest := &recorder{}, &recorder{}
	w := uistream.NewWriter(first)
	must(t, w.Start("m", nil))
	p := mustPart(t)(w.Text(""))
	must(t, p.Delta("Hel"))
	must(t, w.ToolInputStart("c1", "search"))
	w2 := uistream.Resume(rest, w.State())
	q, err := w2.Part(p.ID())
	if err != nil {
		t.Fatal(err)
	}
	must(t, q.Delta("lo"))
	if err := w2.Finish(""); !errors.Is(err, uistream.ErrPartOpen) {
		t.Fatalf("finish with the part open: %v", err)
	}
	must(t, q.End())
	if _, err := w2.Text(p.ID()); !errors.Is(err, uistream.ErrDuplicateID) {
		t.Fatalf("reused id: %v", err)
	}
	if r := mustPart(t)(w2.Reasoning("")); r.ID() != "reasoning-2" {
		t.Fatalf("numbering restarted: %q", r.ID())
	}
	must(t, w2.ToolInputDelta("c1", "{}"))
	want := []string{
		`{"type":"text-delta","id":"text-1","delta":"lo"}`,
		`{"type":"text-end","id":"text-1"}`,
		`{"type":"reasoning-start","id":"reasoning-2"}`,
		`{"type":"tool-input-delta","toolCallId":"c1","inputTextDelta":"{}"}`,
	}
	if got := rest.strings(); !slices.Equal(got, want) {
		t.Fatalf("resumed Writer wrote %q, want %q", got, want)
	}
	// The earlier Writer is not affected by the resumed one.
	if err := p.Delta("!"); err != nil {
		t.Fatal(err)
	}
}

func roundTrip(t *testing.T, s uistream.State) uistream.State {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out uistream.State
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return out
}

// A zero State is a new message; a State that is not one Writer.State made
// is refused.
func TestStateJSON(t *testing.T) {
	b, err := json.Marshal(uistream.State{})
	if err != nil || string(b) != `{"v":1}` {
		t.Fatalf("zero State: %s %v", b, err)
	}
	rec := &recorder{}
	w := uistream.Resume(rec, roundTrip(t, uistream.State{}))
	if _, err := w.Text(""); !errors.Is(err, uistream.ErrNotStarted) {
		t.Fatalf("zero State: %v", err)
	}
	// In a struct, as a step's result would hold it; null leaves it zero.
	var res struct {
		UI uistream.State `json:"ui"`
	}
	if err := json.Unmarshal([]byte(`{"ui":null}`), &res); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		`{}`, `{"v":2}`, `[]`,
		`{"v":1,"ended":true}`,
		`{"v":1,"started":true,"parts":{"p":{"kind":"image"}}}`,
		`{"v":1,"started":true,"tools":{"c1":{"name":"x","phase":"done"}}}`,
		`{"v":1,"started":true,"tools":{"c1":{"name":"","phase":"input-available"}}}`,
		`{"v":1,"started":true,"nextAuto":-1}`,
	} {
		var st uistream.State
		if err := json.Unmarshal([]byte(bad), &st); err == nil {
			t.Fatalf("State %s accepted", bad)
		}
	}
}

// Calls from several goroutines each write whole chunks (go test -race).
func TestConcurrentCalls(t *testing.T) {
	w, rec := started(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := w.Text(fmt.Sprintf("g%d", g))
			if err != nil {
				t.Error(err)
				return
			}
			for i := range 20 {
				if err := p.Delta(fmt.Sprint(i)); err != nil {
					t.Error(err)
				}
				if err := w.Data("tick", i); err != nil {
					t.Error(err)
				}
			}
			if err := p.End(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	must(t, w.Finish(""))
	chunks := rec.strings()
	if len(chunks) != 1+8*(2+40)+1 {
		t.Fatalf("%d chunks", len(chunks))
	}
	for _, c := range chunks {
		checkSchema(t, c)
	}
}
