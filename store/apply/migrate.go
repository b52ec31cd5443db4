package apply

import (
	"slices"
	"time"

	"github.com/weirhq/weir/store"
)

// MigrateTx is what MigrateRuns needs of a transaction.
type MigrateTx interface {
	// RunsOfVersion returns the pending and running runs that started on
	// version (those of ids, if not nil), locked for the transaction.
	RunsOfVersion(version string, ids []string) ([]*store.Run, error)
	// SetRunVersion sets run id's application version.
	SetRunVersion(id, version string, now time.Time) error
}

// MigrateRuns applies a MigrateRuns call (p checked): the runs in flight of
// p.From move to p.To, but for World runs, whose code is the app's and
// which no Go worker claims. It returns the runs it moved, by id.
func MigrateRuns(tx MigrateTx, p *store.MigrateRunsParams, now time.Time) ([]string, error) {
	runs, err := tx.RunsOfVersion(p.From, p.RunIDs)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range runs {
		if r.Kind != "" || r.Status.Terminal() {
			continue
		}
		if err := tx.SetRunVersion(r.ID, p.To, now); err != nil {
			return nil, err
		}
		out = append(out, r.ID)
	}
	slices.Sort(out)
	return out, nil
}
