package weir_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store/sqlitestore"
)

// exampleEngine opens an engine on a fresh SQLite file, with short polls
// and backoffs so that the examples run in milliseconds, and returns it
// with the function that closes it.
func exampleEngine() (*weir.Engine, func()) {
	dir, err := os.MkdirTemp("", "weir-example")
	if err != nil {
		log.Fatal(err)
	}
	st, err := sqlitestore.Open(context.Background(), filepath.Join(dir, "weir.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	e, err := weir.New(st, &weir.Config{
		PollInterval: 5 * time.Millisecond,
		Retry:        weir.RetryPolicy{InitialInterval: time.Millisecond},
	})
	if err != nil {
		log.Fatal(err)
	}
	return e, func() {
		_ = e.Close(context.Background())
		_ = st.Close()
		_ = os.RemoveAll(dir)
	}
}

// A step streams its output as it works; the step's outcome and its
// stream commit together, so a committed reader sees the tokens of the
// step that succeeded, once.
func ExampleStep() {
	e, done := exampleEngine()
	defer done()
	answer := weir.Register(e, "answer", func(ctx weir.Context, q string) (int, error) {
		return weir.Step(ctx, "think", func(sc weir.StepContext) (int, error) {
			w := sc.Stream("tokens")
			for _, tok := range []string{"the ", "answer ", "is ", "42"} {
				if _, err := w.Write([]byte(tok)); err != nil {
					return 0, err
				}
			}
			return 42, nil
		})
	})
	ctx := context.Background()
	if err := e.Work(ctx); err != nil {
		log.Fatal(err)
	}
	h, err := answer.Start(ctx, "meaning of life?", nil)
	if err != nil {
		log.Fatal(err)
	}
	n, err := h.Result(ctx)
	if err != nil {
		log.Fatal(err)
	}
	var text strings.Builder
	for r, err := range e.Read(ctx, h.ID, "tokens", &weir.ReadOptions{View: weir.CommittedView}) {
		if err != nil {
			log.Fatal(err)
		}
		text.Write(r.Data)
	}
	fmt.Println(n, text.String())
	// Output: 42 the answer is 42
}

// A step that fails is retried under its policy; the retry that writes the
// same bytes adopts them, so a reader sees each chunk once.
func ExampleWithRetry() {
	e, done := exampleEngine()
	defer done()
	flaky := weir.Register(e, "flaky", func(ctx weir.Context, _ struct{}) (string, error) {
		return weir.Step(ctx, "call", func(sc weir.StepContext) (string, error) {
			fmt.Fprint(sc.Stream("log"), "calling; ")
			if sc.Attempt() < 3 {
				return "", errors.New("503 from the provider")
			}
			return fmt.Sprintf("ok on attempt %d", sc.Attempt()), nil
		}, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 5, InitialInterval: time.Millisecond}))
	})
	ctx := context.Background()
	if err := e.Work(ctx); err != nil {
		log.Fatal(err)
	}
	h, err := flaky.Start(ctx, struct{}{}, nil)
	if err != nil {
		log.Fatal(err)
	}
	out, err := h.Result(ctx)
	fmt.Println(out, err)
	for r, err := range e.Read(ctx, h.ID, "log", &weir.ReadOptions{View: weir.CommittedView}) {
		if err != nil {
			log.Fatal(err)
		}
		if r.Kind == weir.KindData {
			fmt.Printf("%q\n", r.Data)
		}
	}
	// Output:
	// ok on attempt 3 <nil>
	// "calling; "
}

// Steps started with StepAsync run at once; All waits for them and
// returns their results in order.
func ExampleStepAsync() {
	e, done := exampleEngine()
	defer done()
	research := weir.Register(e, "research", func(ctx weir.Context, topic string) (string, error) {
		web := weir.StepAsync(ctx, "search the web", func(weir.StepContext) (string, error) { return "3 pages", nil })
		docs := weir.StepAsync(ctx, "search the docs", func(weir.StepContext) (string, error) { return "2 documents", nil })
		found, err := weir.All(ctx, web, docs)
		if err != nil {
			return "", err
		}
		return topic + ": " + strings.Join(found, " and "), nil
	})
	ctx := context.Background()
	if err := e.Work(ctx); err != nil {
		log.Fatal(err)
	}
	h, err := research.Start(ctx, "durable streams", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(h.Result(ctx))
	// Output: durable streams: 3 pages and 2 documents <nil>
}

// A run waits on a hook, durably (it may park and leave its worker), until
// someone delivers a payload to its token: Engine.DeliverHook here,
// POST /v1/hooks/{token} or `weir runs hook` through the server.
func ExampleNewHook() {
	e, done := exampleEngine()
	defer done()
	type approval struct {
		By string `json:"by"`
	}
	order := weir.Register(e, "order", func(ctx weir.Context, id string) (string, error) {
		h, err := weir.NewHook[approval](ctx, "approve-"+id)
		if err != nil {
			return "", err
		}
		a, err := h.Receive(ctx)
		if err != nil {
			return "", err
		}
		return "order " + id + " approved by " + a.By, nil
	})
	ctx := context.Background()
	if err := e.Work(ctx); err != nil {
		log.Fatal(err)
	}
	h, err := order.Start(ctx, "42", nil)
	if err != nil {
		log.Fatal(err)
	}
	// The hook exists once the run reaches it; until then a delivery is
	// ErrNotFound.
	for {
		_, err := e.DeliverHook(ctx, "approve-42", json.RawMessage(`{"by":"ada"}`), nil)
		if err == nil {
			break
		}
		if !errors.Is(err, weir.ErrNotFound) {
			log.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Println(h.Result(ctx))
	// Output: order 42 approved by ada <nil>
}

// A workflow starts a child run and waits for its result; the child is a
// run of its own (its own log, streams and retries) that any worker of its
// workflow executes.
func ExampleStartChild() {
	e, done := exampleEngine()
	defer done()
	summarize := weir.Register(e, "summarize", func(ctx weir.Context, doc string) (string, error) {
		return weir.Step(ctx, "summarize", func(weir.StepContext) (string, error) {
			return strings.ToUpper(doc[:1]) + doc[1:] + ".", nil
		})
	})
	report := weir.Register(e, "report", func(ctx weir.Context, docs []string) ([]string, error) {
		var children []*weir.Future[string]
		for _, d := range docs {
			children = append(children, &weir.StartChild(ctx, summarize, d, nil).Future)
		}
		return weir.All(ctx, children...)
	})
	ctx := context.Background()
	if err := e.Work(ctx); err != nil {
		log.Fatal(err)
	}
	h, err := report.Start(ctx, []string{"first doc", "second doc"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(h.Result(ctx))
	// Output: [First doc. Second doc.] <nil>
}

// A reader of the live view sees a step's chunks as they are written. When
// a retry writes other bytes, the stream gets one abort record that voids
// the failed attempt's chunks past the first difference; with ApplyAborts
// the reader is told which chunks it already showed are void, and what it
// shows after applying them is the committed view.
func ExampleEngine_Read() {
	e, done := exampleEngine()
	defer done()
	wf := weir.Register(e, "answer", func(ctx weir.Context, _ struct{}) (string, error) {
		return weir.Step(ctx, "generate", func(sc weir.StepContext) (string, error) {
			w := sc.Stream("tokens")
			toks := []string{"the ", "answer ", "is ", "41"}
			if sc.Attempt() > 1 {
				toks = []string{"the ", "answer ", "is ", "42"}
			}
			for i, tok := range toks {
				if _, err := w.Write([]byte(tok)); err != nil {
					return "", err
				}
				if sc.Attempt() == 1 && i == 3 {
					return "", errors.New("the connection dropped")
				}
			}
			return "done", nil
		})
	})
	ctx := context.Background()
	if err := e.Work(ctx); err != nil {
		log.Fatal(err)
	}
	h, err := wf.Start(ctx, struct{}{}, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := h.Result(ctx); err != nil {
		log.Fatal(err)
	}
	var shown []string // what a person watching sees, chunk by chunk
	at := map[int64]int{}
	for r, err := range e.Read(ctx, h.ID, "tokens", &weir.ReadOptions{ApplyAborts: true}) {
		if err != nil {
			log.Fatal(err)
		}
		switch r.Kind {
		case weir.KindData:
			at[r.Offset] = len(shown)
			shown = append(shown, string(r.Data))
		case weir.KindAbort:
			for _, off := range r.Voided {
				shown[at[off]] = ""
			}
			fmt.Printf("abort: %d chunk(s) void\n", len(r.Voided))
		}
	}
	fmt.Printf("%q\n", strings.Join(shown, ""))
	// Output:
	// abort: 1 chunk(s) void
	// "the answer is 42"
}

// A run fails at its third step; once the bug is fixed, a fork from that
// step replays the first two without running them again, and its stream
// begins with their output, once. Resume instead runs the failed run
// itself again, with its id.
func ExampleEngine_Fork() {
	e, done := exampleEngine()
	defer done()
	fixed := false
	calls := 0
	wf := weir.Register(e, "agent", func(ctx weir.Context, _ struct{}) (string, error) {
		for _, name := range []string{"plan", "search", "write"} {
			if _, err := weir.Step(ctx, name, func(sc weir.StepContext) (int, error) {
				calls++
				if name == "write" && !fixed {
					return 0, weir.NonRetryable(errors.New("a bug"))
				}
				_, err := sc.Stream("out").Write([]byte(name + " "))
				return 0, err
			}); err != nil {
				return "", err
			}
		}
		return "done", nil
	})
	ctx := context.Background()
	if err := e.Work(ctx); err != nil {
		log.Fatal(err)
	}
	h, err := wf.Start(ctx, struct{}{}, &weir.StartOptions{ID: "run-1"})
	if err != nil {
		log.Fatal(err)
	}
	_, err = h.Result(ctx)
	fmt.Println("run-1:", err != nil, "after", calls, "calls")

	fixed = true
	fork, err := e.Fork(ctx, "run-1", weir.ForkOptions{ID: "run-2", Step: "write"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := e.Wait(ctx, fork.ID); err != nil {
		log.Fatal(err)
	}
	var out strings.Builder
	for r, err := range e.Read(ctx, fork.ID, "out", &weir.ReadOptions{View: weir.CommittedView}) {
		if err != nil {
			log.Fatal(err)
		}
		out.Write(r.Data)
	}
	fmt.Printf("run-2: %q after %d calls\n", out.String(), calls)
	// Output:
	// run-1: true after 3 calls
	// run-2: "plan search write " after 4 calls
}

// A step takes a slot of a limiter shared by every process on the store
// (its concurrency, its rate, its cost budget per period), waiting in its
// line fairly by tenant and priority. The workflow declares the limiters
// its steps name, so Work refuses to start without them rather than fail
// runs later.
func ExampleWithLimiter() {
	e, done := exampleEngine()
	defer done()
	ctx := context.Background()
	wf := weir.Register(e, "summarize", func(ctx weir.Context, doc string) (string, error) {
		return weir.Step(ctx, "llm", func(sc weir.StepContext) (string, error) {
			weir.ChargeLimiter(sc, int64(len(doc))) // the tokens the call used
			return "summary of " + doc, nil
		}, weir.WithLimiter("openai", &weir.LimitOptions{Key: "tenant-a"}))
	}, weir.UsesLimiters("openai"))
	if err := e.Work(ctx); err != nil {
		fmt.Println("work:", errors.Is(err, weir.ErrNotFound))
	}
	if err := e.SetLimiter(ctx, limit.Config{Name: "openai", Concurrency: 4}); err != nil {
		log.Fatal(err)
	}
	if err := e.Work(ctx); err != nil {
		log.Fatal(err)
	}
	h, err := wf.Start(ctx, "the report", nil)
	if err != nil {
		log.Fatal(err)
	}
	out, err := h.Result(ctx)
	fmt.Println(out, err)
	// Output:
	// work: true
	// summary of the report <nil>
}
