// Command sdkonly is the smallest program on weir's SDK and its embedded
// store: TestSDKLinksOnlyWhatItUses builds it and checks that the World's
// rules, the server and PostgreSQL's driver are not in the binary.
package main

import (
	"context"
	"log"
	"os"
	"path/filepath"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store/sqlitestore"
)

func main() {
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(os.TempDir(), "sdkonly.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	e, err := weir.New(st, nil)
	if err != nil {
		log.Fatal(err)
	}
	w := weir.Register(e, "double", func(ctx weir.Context, n int) (int, error) {
		return weir.Step(ctx, "double", func(sc weir.StepContext) (int, error) {
			_, err := sc.Stream("out").Write([]byte("doubling"))
			return 2 * n, err
		})
	})
	if err := e.Work(ctx); err != nil {
		log.Fatal(err)
	}
	h, err := w.Start(ctx, 21, nil)
	if err != nil {
		log.Fatal(err)
	}
	n, err := h.Result(ctx)
	log.Println(n, err)
	_ = e.Close(ctx)
}
