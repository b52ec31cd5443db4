package server

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/weirhq/weir/api"
)

// An error reply carries its row's status and wire code (api.Errors), and
// a one-line reason; an error the table does not know is a 500 that says
// nothing of its cause.
func TestErrorRepliesCarryTheirCode(t *testing.T) {
	for _, row := range api.Errors {
		w := httptest.NewRecorder()
		httpError(w, fmt.Errorf("doing it: %w: because\nreasons", row.Err))
		if w.Code != row.Status || w.Header().Get(api.ErrorHeader) != row.Code {
			t.Errorf("%v: %d %q, want %d %q", row.Err, w.Code, w.Header().Get(api.ErrorHeader), row.Status, row.Code)
		}
		if body := w.Body.String(); strings.Count(body, "\n") != 1 || !strings.Contains(body, row.Err.Error()) {
			t.Errorf("%v: body %q", row.Err, body)
		}
	}
	w := httptest.NewRecorder()
	httpError(w, fmt.Errorf("the disk at /secret/path failed"))
	if w.Code != 500 || w.Header().Get(api.ErrorHeader) != "internal" || strings.Contains(w.Body.String(), "secret") {
		t.Errorf("internal: %d %q %q", w.Code, w.Header().Get(api.ErrorHeader), w.Body.String())
	}
}
