package apply

import (
	"slices"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
)

// memMigrate holds runs for MigrateRuns' rule.
type memMigrate map[string]*store.Run

func (m memMigrate) RunsOfVersion(version string, ids []string) ([]*store.Run, error) {
	var out []*store.Run
	for _, r := range m {
		if r.Version == version && (ids == nil || slices.Contains(ids, r.ID)) && !r.Status.Terminal() {
			out = append(out, r)
		}
	}
	return out, nil
}

func (m memMigrate) SetRunVersion(id, version string, _ time.Time) error {
	m[id].Version = version
	return nil
}

// Only Go runs in flight move; World runs (the app's code) and ended runs
// stay; the moved ones come back by id.
func TestMigrateRuns(t *testing.T) {
	m := memMigrate{
		"b": {ID: "b", Version: "v1", Status: store.RunRunning},
		"a": {ID: "a", Version: "v1", Status: store.RunPending},
		"w": {ID: "w", Version: "v1", Status: store.RunRunning, Kind: store.KindWorld},
		"d": {ID: "d", Version: "v1", Status: store.RunCompleted},
		"o": {ID: "o", Version: "v0", Status: store.RunPending},
	}
	got, err := MigrateRuns(m, &store.MigrateRunsParams{From: "v1", To: "v2"}, time.Now())
	if err != nil || !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("moved %v, %v", got, err)
	}
	for id, want := range map[string]string{"a": "v2", "b": "v2", "w": "v1", "d": "v1", "o": "v0"} {
		if m[id].Version != want {
			t.Errorf("run %s: version %q, want %q", id, m[id].Version, want)
		}
	}
}
