package uistream_test

import (
	"errors"
	"fmt"

	"github.com/weirhq/weir/uistream"
)

// chunkRecorder is a ChunkWriter that keeps each chunk. In a weir step, the
// ChunkWriter is the step's stream writer,
// sc.Stream("ui", weir.ContentType(uistream.ContentType)).
type chunkRecorder struct {
	chunks [][]byte
}

func (r *chunkRecorder) Write(p []byte) (int, error) {
	r.chunks = append(r.chunks, append([]byte(nil), p...))
	return len(p), nil
}

// A short answer with a tool call. The message id is fixed here; in a step,
// derive it from sc.StepID() so that a retry writes the same bytes.
func Example() {
	rec := &chunkRecorder{}
	ui := uistream.NewWriter(rec)
	check := func(err error) {
		if err != nil {
			panic(err)
		}
	}

	check(ui.Start("run-1/step/1", nil))

	// The model calls a tool, streaming its input.
	check(ui.StartStep())
	check(ui.ToolInputStart("call_1", "weather"))
	check(ui.ToolInputDelta("call_1", `{"city":"Oslo"}`))
	check(ui.ToolInputAvailable("call_1", "weather", map[string]string{"city": "Oslo"}))
	check(ui.ToolOutputAvailable("call_1", map[string]any{"tempC": -3}))
	check(ui.FinishStep())

	// The model answers with the tool's output.
	check(ui.StartStep())
	text, err := ui.Text("") // numbered: "text-1"
	check(err)
	check(text.Delta("It is -3 °C "))
	check(text.Delta("in Oslo."))
	check(text.End())

	// Out of order: refused, and nothing written.
	if err := text.Delta("more"); errors.Is(err, uistream.ErrPartEnded) {
		fmt.Println("refused:", err)
	}

	check(ui.FinishStep())
	check(ui.Finish(uistream.FinishStop))

	// One chunk, one record of the weir stream, per call.
	for _, c := range rec.chunks {
		fmt.Println(string(c))
	}

	// Output:
	// refused: uistream: the part has ended: text-delta for part "text-1" after its text-end
	// {"type":"start","messageId":"run-1/step/1"}
	// {"type":"start-step"}
	// {"type":"tool-input-start","toolCallId":"call_1","toolName":"weather"}
	// {"type":"tool-input-delta","toolCallId":"call_1","inputTextDelta":"{\"city\":\"Oslo\"}"}
	// {"type":"tool-input-available","toolCallId":"call_1","toolName":"weather","input":{"city":"Oslo"}}
	// {"type":"tool-output-available","toolCallId":"call_1","output":{"tempC":-3}}
	// {"type":"finish-step"}
	// {"type":"start-step"}
	// {"type":"text-start","id":"text-1"}
	// {"type":"text-delta","id":"text-1","delta":"It is -3 °C "}
	// {"type":"text-delta","id":"text-1","delta":"in Oslo."}
	// {"type":"text-end","id":"text-1"}
	// {"type":"finish-step"}
	// {"type":"finish","finishReason":"stop"}
}
