// Package demo holds weir's own demo workflows: the ones `weir demo` runs
// and `weir server` registers, so a newcomer can watch a retried step stream
// without writing code.
package demo

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/weirhq/weir"
)

// TokensWorkflow is the name of the token-streaming workflow.
const TokensWorkflow = "demo.tokens"

// TokensStream is the stream the tokens go to.
const TokensStream = "tokens"

// StatusStream is the stream workflow code writes its status lines to.
const StatusStream = "status"

// TokensInput configures a run of the token workflow: a step that streams
// Text word by word, like an LLM, and whose first attempt fails midway.
type TokensInput struct {
	// Text is what the step streams, split into words.
	Text string `json:"text"`
	// RetryText, if set, is what attempts after the first stream instead:
	// a retry whose output differs (a sampled LLM, a clock).
	RetryText string `json:"retry_text,omitempty"`
	// FailAfter makes attempt 1 fail after this many tokens; 0: never.
	FailAfter int `json:"fail_after,omitempty"`
	// Delay is the pause after each token.
	Delay time.Duration `json:"delay,omitempty"`
}

// TokensOutput is the result of the token workflow.
type TokensOutput struct {
	Tokens   int   `json:"tokens"`
	Attempts int64 `json:"attempts"`
}

// ErrModelDropped is the simulated failure of attempt 1.
var ErrModelDropped = errors.New("simulated failure: the connection to the model dropped")

// Tokenize splits text into words that keep their leading space, so the
// tokens concatenate back to the text.
func Tokenize(text string) []string {
	var out []string
	for i, w := range strings.Fields(text) {
		if i > 0 {
			w = " " + w
		}
		out = append(out, w)
	}
	return out
}

// Register registers the demo workflows on e.
//
// It registers ApprovalWorkflow, ChatWorkflow and AgentWorkflow too.
func Register(e *weir.Engine) *weir.Workflow[TokensInput, TokensOutput] {
	weir.Register(e, ApprovalWorkflow, approve)
	weir.Register(e, ChatWorkflow, chat)
	wf := weir.Register(e, TokensWorkflow, tokens)
	weir.Register(e, AgentWorkflow, agentOf(wf))
	return wf
}

// ChatWorkflow is a conversation with a run: it takes the messages sent to
// it on ChatTopic (POST /v1/runs/{id}/messages/user, weir runs send RUN
// user --data '{"text":"hi"}'), answers each on the stream ChatStream
// token by token from a step, and publishes its state as the run event
// "status" (weir runs event RUN status). {"text":"bye"}, MaxChatTurns
// turns or a minute without a message ends it.
const ChatWorkflow = "demo.chat"

// ChatTopic is the topic demo.chat takes its messages from, and ChatStream
// the stream of its answers.
const (
	ChatTopic  = "user"
	ChatStream = "reply"
)

// MaxChatTurns bounds a demo.chat run.
const MaxChatTurns = 20

// ChatMessage is a message to demo.chat.
type ChatMessage struct {
	Text string `json:"text"`
}

// ChatStatus is demo.chat's run event "status".
type ChatStatus struct {
	State string `json:"state"` // "waiting", "answering" or "done"
	Turns int    `json:"turns"`
}

func chat(ctx weir.Context, _ json.RawMessage) (int, error) {
	turns := 0
	for turns < MaxChatTurns {
		if err := weir.SetEvent(ctx, "status", ChatStatus{State: "waiting", Turns: turns}); err != nil {
			return turns, err
		}
		m, ok, err := weir.RecvWithin[ChatMessage](ctx, ChatTopic, time.Minute)
		if err != nil || !ok || strings.TrimSpace(m.Text) == "bye" {
			break
		}
		turns++
		if err := weir.SetEvent(ctx, "status", ChatStatus{State: "answering", Turns: turns}); err != nil {
			return turns, err
		}
		text := m.Text
		if len(text) > MaxText {
			text = text[:MaxText]
		}
		if _, err := weir.Step(ctx, "answer", func(sc weir.StepContext) (int, error) {
			w := sc.Stream(ChatStream)
			toks := Tokenize("you said: " + text)
			for _, tok := range toks {
				if _, err := w.WriteString(tok); err != nil {
					return 0, err
				}
				time.Sleep(20 * time.Millisecond)
			}
			_, err := w.WriteString("\n")
			return len(toks), err
		}); err != nil {
			return turns, err
		}
	}
	return turns, weir.SetEvent(ctx, "status", ChatStatus{State: "done", Turns: turns})
}

// ApprovalWorkflow waits for a payload delivered to a hook (POST
// /v1/hooks/{token}, weir runs hook), for at most a minute, and writes
// what came to the stream ApprovalStream.
const ApprovalWorkflow = "demo.approval"

// ApprovalStream is the stream the approval is written to.
const ApprovalStream = "approval"

// ApprovalInput is the input of demo.approval.
type ApprovalInput struct {
	Token   string        `json:"token"`   // the hook's token; empty: minted (see the hook_created event)
	Timeout time.Duration `json:"timeout"` // nanoseconds; 0: MaxApprovalWait
}

// ApprovalOutput is its output.
type ApprovalOutput struct {
	Token    string          `json:"token"`
	Approved bool            `json:"approved"` // a payload came in time
	Payload  json.RawMessage `json:"payload,omitempty"`
}

// MaxApprovalWait bounds demo.approval's wait: a client chooses it.
const MaxApprovalWait = time.Minute

func approve(ctx weir.Context, in ApprovalInput) (ApprovalOutput, error) {
	if in.Timeout < 0 || in.Timeout > MaxApprovalWait {
		return ApprovalOutput{}, weir.NonRetryable(fmt.Errorf("%w: timeout %v: 0 to %v", ErrDemoInput, in.Timeout, MaxApprovalWait))
	}
	if in.Timeout == 0 {
		in.Timeout = MaxApprovalWait
	}
	h, err := weir.NewHook[json.RawMessage](ctx, in.Token)
	if err != nil {
		return ApprovalOutput{}, err
	}
	// Two notices go out at once (parallel steps, one stream), then the
	// run waits for the answer.
	var notes []*weir.Future[string]
	for _, to := range []string{"email", "chat"} {
		notes = append(notes, weir.StepAsync(ctx, "notify "+to, func(sc weir.StepContext) (string, error) {
			time.Sleep(50 * time.Millisecond)
			msg := "asked by " + to + " to POST /v1/hooks/" + h.Token() + "\n"
			_, err := sc.Stream(ApprovalStream).WriteString(msg)
			return msg, err
		}))
	}
	if _, err := weir.All(ctx, notes...); err != nil {
		return ApprovalOutput{}, err
	}
	v, ok, err := h.ReceiveWithin(ctx, in.Timeout)
	if err != nil {
		return ApprovalOutput{}, err
	}
	out := ApprovalOutput{Token: h.Token(), Approved: ok, Payload: v}
	note := "no answer within " + in.Timeout.String()
	if ok {
		note = "received " + string(v)
	}
	if _, err := ctx.Stream(ApprovalStream).Write([]byte(note)); err != nil {
		return out, err
	}
	return out, nil
}

// The demo's input limits: a client chooses its input, and weir server
// registers the demo, so no input may hold a run slot for long.
const (
	MaxText  = 16 << 10        // bytes of Text and of RetryText
	MaxDelay = time.Second     // the pause after each token
	MaxRun   = 2 * time.Minute // tokens × delay
)

// ErrDemoInput is an input over the demo's limits.
var ErrDemoInput = errors.New("demo.tokens: input over the limits")

// Check refuses an input over the limits.
func (in TokensInput) Check() error {
	switch {
	case len(in.Text) > MaxText || len(in.RetryText) > MaxText:
		return fmt.Errorf("%w: text of %d bytes, the limit is %d", ErrDemoInput, max(len(in.Text), len(in.RetryText)), MaxText)
	case in.Delay < 0 || in.Delay > MaxDelay:
		return fmt.Errorf("%w: delay %v: 0 to %v", ErrDemoInput, in.Delay, MaxDelay)
	case in.FailAfter < 0:
		return fmt.Errorf("%w: fail_after %d", ErrDemoInput, in.FailAfter)
	}
	n := max(len(Tokenize(in.Text)), len(Tokenize(in.RetryText)))
	if d := time.Duration(n) * in.Delay; d > MaxRun {
		return fmt.Errorf("%w: %d tokens with a delay of %v take %v, the limit is %v", ErrDemoInput, n, in.Delay, d, MaxRun)
	}
	return nil
}

func tokens(ctx weir.Context, in TokensInput) (TokensOutput, error) {
	if err := in.Check(); err != nil {
		return TokensOutput{}, err
	}
	type result struct {
		Tokens  int   `json:"tokens"`
		Attempt int64 `json:"attempt"`
	}
	r, err := weir.Step(ctx, "generate", func(sc weir.StepContext) (result, error) {
		text := in.Text
		if sc.Attempt() > 1 && in.RetryText != "" {
			text = in.RetryText
		}
		out := sc.Stream(TokensStream)
		toks := Tokenize(text)
		for i, tok := range toks {
			if sc.Attempt() == 1 && in.FailAfter > 0 && i == in.FailAfter {
				return result{}, ErrModelDropped
			}
			if _, err := out.WriteString(tok); err != nil {
				return result{}, err
			}
			if in.Delay > 0 {
				select {
				case <-time.After(in.Delay):
				case <-sc.Done():
					return result{}, sc.Err()
				}
			}
		}
		return result{Tokens: len(toks), Attempt: sc.Attempt()}, nil
	}, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 3, InitialInterval: 150 * time.Millisecond}))
	if err != nil {
		return TokensOutput{}, err
	}
	if _, err := ctx.Stream(StatusStream).WriteString(fmt.Sprintf("generated %d tokens in %d attempts", r.Tokens, r.Attempt)); err != nil {
		return TokensOutput{}, err
	}
	return TokensOutput{Tokens: r.Tokens, Attempts: r.Attempt}, nil
}
