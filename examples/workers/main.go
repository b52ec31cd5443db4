// Command workers is the second deployment shape: on one PostgreSQL
// database, any number of worker processes execute the workflows (package
// app) and any number of API/UI servers serve them, each process this one
// binary:
//
//	workers worker --store postgres://…                 # ×N: claim and execute runs
//	workers server --no-worker --store postgres://…     # ×M: the API, hooks, streams, UI
//
// A run started through any server is executed by one worker, once; a
// killed worker's runs are taken over by another when its lease expires,
// and its step's stream output is adopted, not repeated. docs/operations.md
// ("Deployment shapes") draws it.
package main

import (
	"github.com/weirhq/weir/examples/app"
	"github.com/weirhq/weir/weircli"
)

func main() {
	weircli.Main(&weircli.Config{Name: "workers", Register: app.Register})
}
