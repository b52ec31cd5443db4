//lint:file-ignore SA4006 the docs' fragments reassign err between calls without checking it, to keep them short

package doccheck_test

// The Go snippets of README.md, docs/operations.md and docs/protocol.md,
// compiled against the real packages (go vet and go test build this file).
// Each is the text between its "snippet:" and "end snippet" lines, with the
// declarations it needs around it; TestSnippets fails if a doc's copy
// differs. None of these functions is called.

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/demo"
	"github.com/weirhq/weir/store/pgstore"
	"github.com/weirhq/weir/store/sqlitestore"
	"github.com/weirhq/weir/weircli"
)

// The snippets' functions are never called: this makes them used.
var _ = []any{
	readmeSDK, readmeAgents, main,
	operationsPostgres, operationsLimiter, operationsSchedule, operationsPatch,
	protocolClient,
}

// README.md, "The SDK in one screen".
func readmeSDK(ctx context.Context) {
	callTheModel := func(ctx context.Context, q string) []string { return []string{q} }

	// snippet:readme-sdk
	s, err := sqlitestore.Open(ctx, "weir.db", nil) // one file, durable commits
	e, err := weir.New(s, nil)

	answer := weir.Register(e, "answer", func(ctx weir.Context, q string) (int, error) {
		return weir.Step(ctx, "generate", func(sc weir.StepContext) (int, error) {
			out := sc.Stream("tokens")                // writer "step/1", whatever the attempt
			for _, tok := range callTheModel(sc, q) { // may fail midway: the step is retried
				out.WriteString(tok)
			}
			return 42, nil
		}, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 5}))
	})

	e.Work(ctx) // claim and execute runs
	h, err := answer.Start(ctx, "meaning of life?", &weir.StartOptions{ID: "question-1"})

	// Follow the stream live (each chunk once), or ask for CommittedView:
	for rec, err := range e.Read(ctx, h.ID, "tokens", &weir.ReadOptions{Follow: true}) {
		if err != nil {
			break // ctx ended, or no such run
		}
		fmt.Print(string(rec.Data))
	}
	n, err := h.Result(ctx)
	// end snippet
	_, _ = n, err
}

// README.md, the agents' operations.
type (
	Approval struct{ OK bool }
	Message  struct{ Text string }
	Status   struct{ Turns int }
)

func readmeAgents(ctx weir.Context, id, doc string, n int, summarize *weir.Workflow[string, string]) error {
	search := func(sc weir.StepContext) (string, error) { return "", nil }
	lookup := func(sc weir.StepContext) (string, error) { return "", nil }

	// snippet:readme-agents
	// Tools in parallel: each step its own writer on "tokens"; each commits or aborts alone.
	a := weir.StepAsync(ctx, "search", search, weir.WithTimeout(30*time.Second))
	b := weir.StepAsync(ctx, "lookup", lookup, weir.WithHeartbeatTimeout(5*time.Second))
	results, err := weir.All(ctx, a, b)

	// A person's approval, or 24 hours (the run parks meanwhile, holding nothing).
	h, _ := weir.NewHook[Approval](ctx, "order-"+id)        // POST /v1/hooks/order-42, weir runs hook
	approval, ok, err := h.ReceiveWithin(ctx, 24*time.Hour) // ok: it came in time

	// A child run of another workflow, with a deterministic id; cancelling the parent cancels it.
	sum, err := weir.StartChild(ctx, summarize, doc, nil).Get(ctx)

	// Messages to the run (POST /v1/runs/{id}/messages/user, weir runs send), kept in its log
	// even before it asks, each taken once; and a status clients read or wait for.
	msg, err := weir.Recv[Message](ctx, "user")
	weir.SetEvent(ctx, "status", Status{Turns: n}) // GET /v1/runs/{id}/events/status?wait=30s
	// end snippet
	_, _, _, _, _ = results, approval, ok, sum, msg
	return err
}

// README.md, "Your workflows behind weir's server".
func answer(ctx weir.Context, q string) (int, error) { return 42, nil }

// snippet:readme-weircli
func main() {
	weircli.Main(&weircli.Config{Name: "myapp", Register: func(e *weir.Engine) error {
		weir.Register(e, "answer", answer)
		return nil
	}})
}

// end snippet

// docs/operations.md, "Running on PostgreSQL".
func operationsPostgres(ctx context.Context, url string) {
	// snippet:operations-postgres
	s, err := pgstore.Open(ctx, url, &pgstore.Config{Schema: "weir"}) // or open.Open(ctx, url)
	e, err := weir.New(s, &weir.Config{Retention: 30 * 24 * time.Hour})
	// end snippet
	_, _ = e, err
}

// docs/operations.md, "Limiters: flow control for steps".
type modelReply struct {
	Text  string
	Usage struct{ TotalTokens int64 }
}

func callModel(ctx context.Context, prompt string) (modelReply, error) { return modelReply{}, nil }

func operationsLimiter(ctx weir.Context, prompt, tenant string) (string, error) {
	// snippet:operations-limiter
	out, err := weir.Step(ctx, "answer", func(sc weir.StepContext) (string, error) {
		resp, err := callModel(sc, prompt)
		weir.ChargeLimiter(sc, resp.Usage.TotalTokens) // charged to the budget when the attempt ends
		return resp.Text, err
	}, weir.WithLimiter("openai", &weir.LimitOptions{Key: tenant, Priority: 0}))
	// end snippet
	return out, err
}

// docs/operations.md, "Schedules".
type ReportInput struct{ Days int }

func report(ctx weir.Context, in ReportInput) (string, error) { return "", nil }

func operationsSchedule(ctx context.Context, e *weir.Engine) {
	// snippet:operations-schedule
	wf := weir.Register(e, "report", report)
	wf.Schedule(ctx, "nightly", "0 3 * * *", ReportInput{Days: 1}, &weir.ScheduleOptions{TZ: "Europe/Paris"})
	// end snippet
}

// docs/operations.md, "Versioned deploys" (patches).
func draftSmall(sc weir.StepContext) (string, error) { return "", nil }
func draftLarge(sc weir.StepContext) (string, error) { return "", nil }

func operationsPatch(ctx weir.Context) (string, error) {
	var out string
	var err error
	// snippet:operations-patch
	if weir.Patched(ctx, "cheaper-model") {
		out, err = weir.Step(ctx, "draft", draftSmall)
	} else {
		out, err = weir.Step(ctx, "draft", draftLarge) // runs that began before the deploy
	}
	// end snippet
	return out, err
}

// docs/protocol.md, "The CLI and the Go client".
func protocolClient(ctx context.Context) error {
	// snippet:protocol-client
	c, _ := client.New("http://127.0.0.1:4437", &client.Options{Token: os.Getenv("WEIR_TOKEN")})
	run, _, err := c.Start(ctx, "demo.tokens", demo.TokensInput{Text: "hello there"}, &client.StartOptions{IdempotencyKey: "greeting-1"})
	if err != nil {
		return err
	}
	for rec, err := range c.Read(ctx, run.ID, "tokens", &client.ReadOptions{Follow: true, View: weir.CommittedView}) {
		if err != nil {
			return err
		}
		fmt.Print(string(rec.Data)) // a later read resumes after it with ReadOptions{Offset: rec.NextOffset}
	}
	// end snippet
	return nil
}
