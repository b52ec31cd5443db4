package weircli_test

import (
	"context"
	"os"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/weircli"
)

// Your program is weir: its main registers its workflows and hands the
// command line to weircli, so that `myapp server` executes and serves
// them (the runs, hooks and streams APIs, the UI, /metrics), `myapp
// worker` executes them beside API servers on PostgreSQL, and `myapp runs`
// and `myapp stream` talk to a server. A real main calls
// weircli.Main(cfg); this example runs `myapp help`.
func ExampleRun() {
	cfg := &weircli.Config{Name: "myapp", Register: func(e *weir.Engine) error {
		weir.Register(e, "greet", func(ctx weir.Context, name string) (string, error) {
			return "hello, " + name, nil
		})
		return nil
	}}
	weircli.Run(context.Background(), cfg, []string{"help"}, os.Stdout, os.Stderr)
	// Output:
	// myapp — its workflows, on weir.
	//
	// Usage:
	//   myapp server [--addr A] [--store sqlite:PATH] [--token T]
	//                                    execute the runs, serve the runs API and every stream over HTTP
	//   myapp worker --store postgres://…
	//                                    execute the runs beside API servers (server --no-worker)
	//   myapp runs ls|show|start|watch|cancel
	//                                    the runs of a server; watch shows one's progress live
	//   myapp runs hook|send|event        deliver to a run's hook, send it a message, read its run events
	//   myapp stream tail|cat|ls          read a run's stream from a server; list the standalone streams
	//   myapp limiters ls|show|set        the limiters steps take slots of: concurrency, rate, token budget
	//   myapp schedules ls|show|set|pause|resume|rm
	//                                    schedules: a run of a workflow at each tick of a cron spec or interval
	//   myapp version                     print the version
	//
	// 'myapp COMMAND -h' tells more.
}
