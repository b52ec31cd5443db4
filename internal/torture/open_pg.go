package torture

import (
	"context"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/pgstore"
)

func init() {
	openPostgres = func(ctx context.Context, url string) (store.Full, error) {
		return pgstore.Open(ctx, url, nil)
	}
}
