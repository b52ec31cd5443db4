package demo

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/weirhq/weir"
)

// AgentWorkflow is an agent's run with every kind of operation the UI
// shows: two searches in parallel writing to one stream (two writers), a
// drafting step that streams its answer and whose first attempt fails
// midway, a child run, and a hook waiting for a person's approval.
const AgentWorkflow = "demo.agent"

// The streams of demo.agent.
const (
	AgentNotes  = "notes"  // both searches write here, each its own writer
	AgentAnswer = "answer" // the draft, token by token
)

// AgentInput is the input of demo.agent.
type AgentInput struct {
	Topic string `json:"topic"`
	// Token is the approval hook's token; empty: minted.
	Token string `json:"token,omitempty"`
	// Flaky makes the draft's first attempt fail midway.
	Flaky bool `json:"flaky,omitempty"`
	// Sources are searched at once, a step each ("search <source>"): the
	// first one quick, the others slower. Empty: web and docs.
	Sources []string `json:"sources,omitempty"`
}

// The limits of demo.agent's input.
const (
	maxAgentTopic   = 200
	maxAgentSources = 4
)

// AgentOutput is its output.
type AgentOutput struct {
	Words    int             `json:"words"`
	Child    string          `json:"child"`
	Approved bool            `json:"approved"`
	Approval json.RawMessage `json:"approval,omitempty"`
}

// agentStatus is demo.agent's run event "status".
type agentStatus struct {
	Phase string `json:"phase"`
}

// agentOf is demo.agent, whose child is a run of tokensWF.
func agentOf(tokensWF *weir.Workflow[TokensInput, TokensOutput]) func(weir.Context, AgentInput) (AgentOutput, error) {
	return func(ctx weir.Context, in AgentInput) (AgentOutput, error) { return agent(ctx, tokensWF, in) }
}

func agent(ctx weir.Context, tokensWF *weir.Workflow[TokensInput, TokensOutput], in AgentInput) (AgentOutput, error) {
	if len(in.Sources) == 0 {
		in.Sources = []string{"web", "docs"}
	}
	if len(in.Topic) > maxAgentTopic || len(in.Sources) > maxAgentSources {
		return AgentOutput{}, weir.NonRetryable(fmt.Errorf("%w: a topic of at most %d bytes, at most %d sources", ErrDemoInput, maxAgentTopic, maxAgentSources))
	}
	for _, src := range in.Sources {
		if len(src) > maxAgentTopic {
			return AgentOutput{}, weir.NonRetryable(fmt.Errorf("%w: a source of %d bytes, the limit is %d", ErrDemoInput, len(src), maxAgentTopic))
		}
	}
	if err := weir.SetEvent(ctx, "status", agentStatus{Phase: "searching"}); err != nil {
		return AgentOutput{}, err
	}
	// A quick search and a slow one, at once, into one stream.
	search := func(where string, hits int, pause time.Duration) *weir.Future[int] {
		return weir.StepAsync(ctx, "search "+where, func(sc weir.StepContext) (int, error) {
			w := sc.Stream(AgentNotes)
			for i := range hits {
				if _, err := fmt.Fprintf(w, "%s hit %d for %q\n", where, i+1, in.Topic); err != nil {
					return 0, err
				}
				if err := pauseFor(sc, pause); err != nil {
					return 0, err
				}
			}
			return hits, nil
		})
	}
	searches := make([]*weir.Future[int], len(in.Sources))
	for i, src := range in.Sources {
		if i == 0 {
			searches[i] = search(src, 1, 10*time.Millisecond)
		} else {
			searches[i] = search(src, 4, 150*time.Millisecond)
		}
	}
	if _, err := weir.All(ctx, searches...); err != nil {
		return AgentOutput{}, err
	}
	if err := weir.SetEvent(ctx, "status", agentStatus{Phase: "drafting"}); err != nil {
		return AgentOutput{}, err
	}
	words, err := weir.Step(ctx, "draft", func(sc weir.StepContext) (int, error) {
		toks := Tokenize("Here is what I found about " + in.Topic + ": two sources agree, and one adds a caveat.")
		w := sc.Stream(AgentAnswer)
		for i, tok := range toks {
			if in.Flaky && sc.Attempt() == 1 && i == len(toks)/2 {
				return 0, ErrModelDropped
			}
			if _, err := w.WriteString(tok); err != nil {
				return 0, err
			}
			if err := pauseFor(sc, 40*time.Millisecond); err != nil {
				return 0, err
			}
		}
		return len(toks), nil
	}, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 3, InitialInterval: 300 * time.Millisecond}))
	if err != nil {
		return AgentOutput{}, err
	}
	child := weir.StartChild(ctx, tokensWF, TokensInput{Text: "a summary for the log", Delay: 30 * time.Millisecond}, nil)
	if _, err := child.Get(ctx); err != nil {
		return AgentOutput{}, err
	}
	h, err := weir.NewHook[json.RawMessage](ctx, in.Token)
	if err != nil {
		return AgentOutput{}, err
	}
	if err := weir.SetEvent(ctx, "status", agentStatus{Phase: "waiting for approval"}); err != nil {
		return AgentOutput{}, err
	}
	v, ok, err := h.ReceiveWithin(ctx, MaxApprovalWait)
	if err != nil {
		return AgentOutput{}, err
	}
	if err := weir.SetEvent(ctx, "status", agentStatus{Phase: "done"}); err != nil {
		return AgentOutput{}, err
	}
	return AgentOutput{Words: words, Child: child.ID, Approved: ok, Approval: v}, nil
}

// pauseFor waits d, or until the attempt is over.
func pauseFor(sc weir.StepContext, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-sc.Done():
		return sc.Err()
	}
}
