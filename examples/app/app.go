// Package app is the workflows the deployment-shape examples run
// (examples/onebox, examples/workers): what a Go team writes, and
// registers with weircli.Config.Register.
package app

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/weirhq/weir"
)

// Approval is the payload a person delivers to an answer's hook.
type Approval struct {
	OK bool `json:"ok"`
}

// Register registers the workflows on e:
//
//   - "answer": a step that streams 50 tokens to the stream "tokens" and
//     fails once midway (its retry adopts what the first attempt wrote, so
//     a reader sees each token once), two steps run at once, and a hook,
//     "approve-<run id>", the run waits on until someone delivers to it;
//   - "summarize": one step whose output names the process that ran it,
//     to see which worker executed a run;
//   - "research": a step that streams 20 tokens, 50 ms apart, and fails
//     once at the fifth (long enough to kill a worker during its next
//     attempt), a child run of "summarize", and the hook
//     "approve-<run id>": every kind of span a trace of a run holds;
//   - "limited": one step that takes a slot of the limiter "app.llm"
//     (create it first: weir limiters set app.llm --concurrency 2), holds
//     it for the input's milliseconds and writes to its stream "spans"
//     when it began and ended, to check the limit from the outside;
//   - "greet": a step "hello", then a second step, "plain", or, in code
//     of application version v2 (WEIR_APP_VERSION, standing in for a
//     second build), "polite" behind weir.Patched(ctx, "polite"), then the
//     hook "approve-<run id>"; its output is that step's, and the pid
//     that ran it;
//   - "pipeline": the workflow's code writes "head" to the stream "out",
//     step "one" writes "one-a" and "one-b", the code writes "mid", step
//     "two" writes ten tokens 40 ms apart, the code writes "tail". v1's
//     step "two" has a bug: it fails for good at its third token; v2's
//     runs through. A v1 run fails; its fork from "two" onto v2 keeps
//     "head" to "mid" and runs "two" with the fixed code.
func Register(e *weir.Engine) error {
	weir.Register(e, "answer", answer)
	sum := weir.Register(e, "summarize", summarize)
	weir.Register(e, "research", func(ctx weir.Context, topic string) (string, error) { return research(ctx, sum, topic) })
	weir.Register(e, "limited", limited)
	weir.Register(e, "greet", greet)
	weir.Register(e, "pipeline", pipeline)
	return nil
}

func pipeline(ctx weir.Context, _ struct{}) (string, error) {
	out := ctx.Stream("out")
	if _, err := out.WriteString("head"); err != nil {
		return "", err
	}
	if _, err := weir.Step(ctx, "one", func(sc weir.StepContext) (int, error) {
		w := sc.Stream("out")
		for _, s := range []string{"one-a", "one-b"} {
			if _, err := w.WriteString(s); err != nil {
				return 0, err
			}
		}
		return os.Getpid(), nil
	}); err != nil {
		return "", err
	}
	if _, err := out.WriteString("mid"); err != nil {
		return "", err
	}
	by, err := weir.Step(ctx, "two", func(sc weir.StepContext) (string, error) {
		w := sc.Stream("out")
		for i := range 10 {
			if i == 2 && !v2 {
				return "", weir.NonRetryable(errors.New("v1's bug"))
			}
			if _, err := fmt.Fprintf(w, "two-%d", i); err != nil {
				return "", err
			}
			select {
			case <-time.After(40 * time.Millisecond):
			case <-sc.Done():
				return "", sc.Err()
			}
		}
		return fmt.Sprintf("two by pid %d", os.Getpid()), nil
	})
	if err != nil {
		return "", err
	}
	_, err = out.WriteString("tail")
	return by, err
}

func limited(ctx weir.Context, ms int) (string, error) {
	return weir.Step(ctx, "call", func(sc weir.StepContext) (string, error) {
		w := sc.Stream("spans")
		if _, err := fmt.Fprintf(w, "start %d\n", time.Now().UnixNano()); err != nil {
			return "", err
		}
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-sc.Done():
			return "", sc.Err()
		}
		_, err := fmt.Fprintf(w, "end %d\n", time.Now().UnixNano())
		return fmt.Sprintf("by pid %d", os.Getpid()), err
	}, weir.WithLimiter("app.llm", nil))
}

func research(ctx weir.Context, sum *weir.Workflow[string, string], topic string) (string, error) {
	n, err := weir.Step(ctx, "draft", func(sc weir.StepContext) (int, error) {
		w := sc.Stream("draft")
		for i := range 20 {
			if _, err := fmt.Fprintf(w, "%s%02d ", topic, i); err != nil {
				return 0, err
			}
			if i == 4 && sc.Attempt() == 1 {
				return 0, errors.New("the model's connection dropped")
			}
			select {
			case <-time.After(50 * time.Millisecond):
			case <-sc.Done():
				return 0, sc.Err()
			}
		}
		return 20, nil
	}, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 5, InitialInterval: 100 * time.Millisecond}))
	if err != nil {
		return "", err
	}
	summary, err := weir.StartChild(ctx, sum, fmt.Sprintf("%d tokens on %s", n, topic), nil).Get(ctx)
	if err != nil {
		return "", err
	}
	h, err := weir.NewHook[Approval](ctx, "approve-"+ctx.RunID())
	if err != nil {
		return "", err
	}
	ok, err := h.Receive(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s: %d tokens, summary %q, approved=%v", topic, n, summary, ok.OK), nil
}

func answer(ctx weir.Context, q string) (string, error) {
	n, err := weir.Step(ctx, "think", func(sc weir.StepContext) (int, error) {
		w := sc.Stream("tokens")
		for i := range 50 {
			if _, err := fmt.Fprintf(w, "t%02d ", i); err != nil {
				return 0, err
			}
			if i == 24 && sc.Attempt() == 1 {
				return 0, errors.New("the model's connection dropped")
			}
		}
		return 50, nil
	})
	if err != nil {
		return "", err
	}
	search := weir.StepAsync(ctx, "search", func(weir.StepContext) (string, error) { return "found", nil })
	rank := weir.StepAsync(ctx, "rank", func(weir.StepContext) (string, error) { return "ranked", nil })
	both, err := weir.All(ctx, search, rank)
	if err != nil {
		return "", err
	}
	h, err := weir.NewHook[Approval](ctx, "approve-"+ctx.RunID())
	if err != nil {
		return "", err
	}
	ok, err := h.Receive(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s: %d tokens, %s, approved=%v", q, n, strings.Join(both, "+"), ok.OK), nil
}

func summarize(ctx weir.Context, doc string) (string, error) {
	return weir.Step(ctx, "summarize", func(weir.StepContext) (string, error) {
		return fmt.Sprintf("%d words, by pid %d", len(strings.Fields(doc)), os.Getpid()), nil
	})
}

// v2 is whether this process runs the code of application version v2: the
// test's stand-in for a second build of the program.
var v2 = os.Getenv("WEIR_APP_VERSION") == "v2"

func greet(ctx weir.Context, name string) (string, error) {
	if _, err := weir.Step(ctx, "hello", func(weir.StepContext) (string, error) { return "hello " + name, nil }); err != nil {
		return "", err
	}
	second := "plain"
	if v2 && weir.Patched(ctx, "polite") {
		second = "polite"
	}
	out, err := weir.Step(ctx, second, func(weir.StepContext) (string, error) {
		return fmt.Sprintf("%s by pid %d", second, os.Getpid()), nil
	})
	if err != nil {
		return "", err
	}
	h, err := weir.NewHook[bool](ctx, "approve-"+ctx.RunID())
	if err != nil {
		return "", err
	}
	if _, err := h.Receive(ctx); err != nil {
		return "", err
	}
	return out, nil
}
