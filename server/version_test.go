package server

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/api"
)

// POST /v1/runs with "version": the run is for that version (its JSON
// says so; a worker of another version would not claim it), and a version
// that is not printable text is 400 invalid_name with nothing started.
func TestStartForAVersion(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		js := []string{"Content-Type", "application/json"}
		weir.Register(d.e, "noop", func(ctx weir.Context, _ int) (int, error) { return 1, nil })
		var r api.Run
		if err := json.Unmarshal(d.send("POST", "/v1/runs", `{"workflow":"noop","id":"v","version":"canary-7"}`, js...).must(t, http.StatusCreated).body, &r); err != nil {
			t.Fatal(err)
		}
		if r.Version != "canary-7" {
			t.Fatalf("started %+v, want version canary-7", r)
		}
		d.send("POST", "/v1/runs", `{"workflow":"noop","id":"w","version":"a\u0000b"}`, js...).must(t, http.StatusBadRequest).header(t, "Weir-Error", "invalid_name")
		d.runsCall("GET", "/v1/runs/w").must(t, http.StatusNotFound)
	})
}
