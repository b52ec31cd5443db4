// Command weir runs weir's demo, its server, and a client of that server:
// weir's command line (package weircli) with weir's own commands and
// workflows.
package main

import "github.com/weirhq/weir/weircli"

// version and commit are set by a release build (scripts/dist.sh: -ldflags
// -X main.version=… -X main.commit=…).
var version, commit = "dev", ""

func main() {
	weircli.Main(&weircli.Config{Name: "weir", Builtin: true, Version: version, Commit: commit})
}
