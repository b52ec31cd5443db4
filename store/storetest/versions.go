package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
)

// testVersions: a run keeps the application version it started on; claims
// and admissions take only the runs of the versions they name; MigrateRuns
// moves the runs in flight of one version to another, and no other.
func testVersions(t *testing.T, h harness) {
	s := h.Harness.New(t)
	create := func(id, version string, p store.CreateRunParams) *store.Run {
		t.Helper()
		p.ID, p.Workflow, p.Version = id, "wf", version
		r, _, err := s.CreateRun(ctx(t), &p)
		must(t, err)
		if r.Version != version {
			t.Fatalf("run %s: version %q, want %q", id, r.Version, version)
		}
		return r
	}
	create("v1-a", "v1", store.CreateRunParams{})
	create("v2-a", "v2", store.CreateRunParams{})
	create("none", "", store.CreateRunParams{})
	soon := time.Now().Add(time.Second)
	claim := func(versions []string) []string {
		t.Helper()
		rs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: "w", Limit: 10, LeaseTTL: time.Minute, Versions: versions, Now: soon})
		must(t, err)
		var ids []string
		for _, r := range rs {
			ids = append(ids, r.ID)
		}
		slices.Sort(ids)
		return ids
	}
	if got := claim([]string{"v2"}); !slices.Equal(got, []string{"v2-a"}) {
		t.Fatalf("a claim of v2: %v", got)
	}
	if got := claim([]string{"", "v3"}); !slices.Equal(got, []string{"none"}) {
		t.Fatalf("a claim of unversioned and v3: %v", got)
	}
	got, err := s.GetRun(ctx(t), "v1-a")
	must(t, err)
	if got.Version != "v1" || got.Status != store.RunPending {
		t.Fatalf("v1-a after claims of other versions: %+v", got)
	}
	// Moved knowingly: v1's runs in flight go to v2 (only those named, if
	// named); ended runs stay as they were.
	create("v1-b", "v1", store.CreateRunParams{})
	create("v1-done", "v1", store.CreateRunParams{})
	done, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: "w", Limit: 10, LeaseTTL: time.Minute, Versions: []string{"v1"}, Now: soon})
	must(t, err)
	for _, r := range done {
		if r.ID == "v1-done" {
			must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: r.ID, LeaseEpoch: r.LeaseEpoch, Status: store.RunCompleted, Output: []byte(`1`),
				Events: []store.Event{{Type: store.EventRunCompleted}}}))
		}
	}
	moved, err := s.MigrateRuns(ctx(t), &store.MigrateRunsParams{From: "v1", To: "v2", RunIDs: []string{"v1-b"}})
	must(t, err)
	if !slices.Equal(moved, []string{"v1-b"}) {
		t.Fatalf("migrate v1-b: %v", moved)
	}
	moved, err = s.MigrateRuns(ctx(t), &store.MigrateRunsParams{From: "v1", To: "v2"})
	must(t, err)
	if !slices.Equal(moved, []string{"v1-a"}) {
		t.Fatalf("migrate v1's runs in flight: %v (v1-done ended, v1-b moved already)", moved)
	}
	if r, err := s.GetRun(ctx(t), "v1-done"); err != nil || r.Version != "v1" {
		t.Fatalf("an ended run was migrated: %+v %v", r, err)
	}
	for _, bad := range []store.MigrateRunsParams{{From: "v1", To: "v1"}, {From: "v1", To: string(make([]byte, store.MaxVersionLen+1))}, {From: "v1", To: "v2", RunIDs: []string{""}}} {
		_, err := s.MigrateRuns(ctx(t), &bad)
		wantErr(t, err, store.ErrInvalid)
	}
	_, _, err = s.CreateRun(ctx(t), &store.CreateRunParams{ID: "x", Workflow: "wf", Version: string(make([]byte, store.MaxVersionLen+1))})
	wantErr(t, err, store.ErrInvalid)

	// Queued runs: an admission takes only the versions it names.
	l, ok := s.(store.Limits)
	if !ok {
		return
	}
	must(t, l.SetLimiter(ctx(t), &limit.Config{Name: "vq", Concurrency: 10}))
	create("q-v1", "v1", store.CreateRunParams{Queue: "vq"})
	create("q-v2", "v2", store.CreateRunParams{Queue: "vq"})
	rs, err := l.AdmitRuns(ctx(t), &store.AdmitRunsParams{Owner: "w", Limit: 10, LeaseTTL: time.Minute, Versions: []string{"v2"}, Now: soon})
	must(t, err)
	if len(rs) != 1 || rs[0].ID != "q-v2" {
		t.Fatalf("an admission of v2: %+v", rs)
	}
}
