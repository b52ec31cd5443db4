package weircli

import (
	"flag"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/internal/bench"
)

// benchWorkflows adds --bench-workflows to `weir server`'s flags and
// returns what registers them when it is set: bench.emit, the workflow
// `weir bench scale` starts in the server processes it runs. It is off by
// default: the workflow has no use but measuring, and although its input is
// bounded (bench.MaxEmitBytes a run), any client that may start runs could
// have it write that much into the store.
func benchWorkflows(fs *flag.FlagSet) func(e *weir.Engine) {
	on := fs.Bool("bench-workflows", false, "also register bench.emit (a step writing {\"chunks\":K,\"size\":S} to the run stream \"out\"), the workflow of `weir bench scale`, and bench.slot (a step holding a slot of {\"limiter\":L} for {\"hold_ms\":H}, at most 1000), of `weir bench flow`")
	return func(e *weir.Engine) {
		if *on {
			bench.RegisterEmit(e)
			bench.RegisterSlot(e)
		}
	}
}
