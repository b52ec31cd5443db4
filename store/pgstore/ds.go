package pgstore

import (
	"context"
	"errors"

	"github.com/weirhq/weir/store"
)

var errTODO = errors.New("pgstore: not implemented yet")

// CreateStream is not implemented yet.
func (s *Store) CreateStream(ctx context.Context, p *store.CreateStreamParams) (*store.StreamInfo, bool, error) {
	return nil, false, errTODO
}

// DeleteStream is not implemented yet.
func (s *Store) DeleteStream(ctx context.Context, p *store.DeleteStreamParams) (store.DeleteResult, error) {
	return 0, errTODO
}

// TouchStream is not implemented yet.
func (s *Store) TouchStream(ctx context.Context, p *store.TouchStreamParams) error {
	return errTODO
}
