// Command onebox is the first deployment shape: one process on SQLite that
// executes its own workflows (package app) and serves them — the runs,
// hooks and streams APIs, the UI and /metrics — because it is weir's
// command line with the program's workflows registered (package weircli).
//
//	go run ./examples/onebox server --store sqlite:./onebox.db
//	go run ./examples/onebox runs start answer '"why?"'
//	go run ./examples/onebox stream tail RUN tokens
//	go run ./examples/onebox runs hook approve-RUN --data '{"ok":true}'
//
// docs/operations.md ("Deployment shapes") draws it.
package main

import (
	"github.com/weirhq/weir/examples/app"
	"github.com/weirhq/weir/weircli"
)

func main() {
	weircli.Main(&weircli.Config{Name: "onebox", Register: app.Register})
}
