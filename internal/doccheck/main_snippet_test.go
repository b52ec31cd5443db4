package doccheck

// docs/operations.md's func main, "Deployment shapes". README.md has a func
// main too (in snippets_test.go, package doccheck_test): each needs a
// package of its own, so this one is in package doccheck. Never called.

import (
	"github.com/weirhq/weir"
	"github.com/weirhq/weir/weircli"
)

var answer *weir.Workflow[string, int]

func answerWorkflow(ctx weir.Context, q string) (int, error) { return len(q), nil }

// snippet:operations-weircli
func main() {
	weircli.Main(&weircli.Config{Name: "myapp", Register: func(e *weir.Engine) error {
		answer = weir.Register(e, "answer", answerWorkflow)
		return nil
	}})
}

// end snippet

// main is never called: this makes it used.
var _ = main
