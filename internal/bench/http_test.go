package bench

import (
	"context"
	"testing"
	"time"
)

// TestHTTPWorkload runs http small, on a fresh SQLite store: it checks the
// figures it reports, not their values.
func TestHTTPWorkload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs, err := Run(ctx, Config{Requests: 40, Clients: 3}, []string{"http"})
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	if r.Ops != 40 || r.OpsPerSec <= 0 || r.BaselineOpsPerSec <= 0 || r.Ratio <= 0 || r.TargetMet == nil {
		t.Fatalf("result %+v", r)
	}
	for _, k := range []string{"fsync_ms", "noop_request_ms", "bound_req_per_s", "ratio_to_bound", "clients",
		"concurrent_req_per_s", "concurrent_ratio", "concurrent_noop_req_per_s", "store_append_ms", "store_bound_req_per_s"} {
		if r.Extra[k] <= 0 {
			t.Errorf("extra %s = %v", k, r.Extra[k])
		}
	}
	if r.Extra["clients"] != 3 {
		t.Errorf("clients %v, want 3", r.Extra["clients"])
	}
}
