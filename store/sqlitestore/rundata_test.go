package sqlitestore

import (
	"regexp"
	"testing"
)

// withData reads a run's input and output, or their lengths, from
// run_data, and nothing else: not world_steps' columns, not a word that
// merely begins with input.
func TestWithData(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"id, input, output, error", "id, (SELECT d.input FROM run_data d WHERE d.seq = runs.seq), (SELECT d.output FROM run_data d WHERE d.seq = runs.seq), error"},
		{"length(input) + length(r.output)", "(SELECT length(d.input) FROM run_data d WHERE d.seq = runs.seq) + (SELECT length(d.output) FROM run_data d WHERE d.seq = runs.seq)"},
		{"r.input, inputs, my_output", "(SELECT d.input FROM run_data d WHERE d.seq = runs.seq), inputs, my_output"},
	} {
		if got := withData(c.in, "runs.seq"); got != c.want {
			t.Errorf("withData(%q):\n got %q\nwant %q", c.in, got, c.want)
		}
	}
	// Every column list reads its data through run_data alone.
	bare := regexp.MustCompile(`(^|[^.\w])(r\.)?(input|output)\b`)
	for name, cols := range map[string]string{"RunCols": runCols, "ListedRunCols": listedRunCols, "WorldRunCols": worldRunCols,
		"RunColsWithin": runColsWithin("?2", "length(error)")} {
		stripped := regexp.MustCompile(`\(SELECT (length\()?d\.(input|output)\)? FROM run_data d WHERE d\.seq = (runs|r)\.seq\)`).ReplaceAllString(cols, "DATA")
		if bare.MatchString(stripped) {
			t.Errorf("%s reads runs' own input or output: %s", name, cols)
		}
	}
}
