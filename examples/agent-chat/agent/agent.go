// Package agent is the agent of examples/agent-chat: a weir workflow that
// answers one chat turn with a scripted model. The model streams its tokens
// as the AI SDK's UI message stream (package uistream), calls two tools that
// run in parallel, then streams its answer; it can be told to fail in the
// middle of its first call and to answer differently on the retry, so that
// a person watching in a browser sees weir's rewind.
package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/uistream"
)

// Workflow is the name of the turn workflow.
const Workflow = "agent-chat.turn"

// Stream is the run stream a turn writes its UI message chunks to.
const Stream = "ui"

// Message is one message of the conversation, as the page sends it.
type Message struct {
	Role string `json:"role"` // "user" or "assistant"
	Text string `json:"text"`
}

// Fail makes the model's first call fail after AfterTokens tokens of its
// first attempt. The retry then writes other tokens (a sampled model), or,
// with Same, the same ones (weir adopts them: the reader sees no change).
type Fail struct {
	AfterTokens int  `json:"afterTokens"`
	Same        bool `json:"same,omitempty"`
}

// Turn is the input of a turn: the conversation so far, its last message
// the user's.
type Turn struct {
	Messages []Message `json:"messages"`
	Fail     *Fail     `json:"fail,omitempty"`
}

// Answer is a turn's result: the text the assistant said.
type Answer struct {
	Text string `json:"text"`
}

// Limits of a turn's input: the page is anyone's.
const (
	MaxMessages    = 50
	MaxMessageText = 4000
)

// ErrInput is an input over the limits.
var ErrInput = errors.New("agent: bad turn")

// Check refuses a turn the agent does not take.
func (t *Turn) Check() error {
	switch {
	case len(t.Messages) == 0 || len(t.Messages) > MaxMessages:
		return fmt.Errorf("%w: 1 to %d messages", ErrInput, MaxMessages)
	case t.Messages[len(t.Messages)-1].Role != "user":
		return fmt.Errorf("%w: the last message is the user's", ErrInput)
	case t.Fail != nil && (t.Fail.AfterTokens < 0 || t.Fail.AfterTokens > 100):
		return fmt.Errorf("%w: fail after 0 to 100 tokens", ErrInput)
	}
	for _, m := range t.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return fmt.Errorf("%w: role %q", ErrInput, m.Role)
		}
		if len(m.Text) > MaxMessageText {
			return fmt.Errorf("%w: a message of %d bytes, the limit is %d", ErrInput, len(m.Text), MaxMessageText)
		}
	}
	return nil
}

// Config configures the agent.
type Config struct {
	// TokenDelay is how long the scripted model takes per token. Defaults
	// to 40ms; negative: none.
	TokenDelay time.Duration
	// RetryDelay is the wait before a failed model call is retried.
	// Defaults to 700ms, long enough to see the failed attempt's tokens.
	RetryDelay time.Duration
}

// Register registers the turn workflow on e.
func Register(e *weir.Engine, cfg *Config) *weir.Workflow[Turn, Answer] {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.TokenDelay == 0 {
		c.TokenDelay = 40 * time.Millisecond
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = 700 * time.Millisecond
	}
	return weir.Register(e, Workflow, func(ctx weir.Context, in Turn) (Answer, error) {
		return turn(ctx, &c, in)
	})
}

// ErrDropped is the scripted model's failure.
var ErrDropped = errors.New("the model's connection dropped")

func turn(ctx weir.Context, c *Config, in Turn) (Answer, error) {
	if err := in.Check(); err != nil {
		return Answer{}, weir.NonRetryable(err)
	}
	question := in.Messages[len(in.Messages)-1].Text
	city := cityOf(question)
	open := func(sc weir.StepContext) *weir.Writer {
		return sc.Stream(Stream, weir.ContentType(uistream.ContentType))
	}
	// The model's first call: it says what it will do and calls two tools.
	st, err := weir.Step(ctx, "model: plan", func(sc weir.StepContext) (uistream.State, error) {
		ui := uistream.NewWriter(open(sc))
		if err := ui.Start("msg-"+sc.RunID(), nil); err != nil {
			return uistream.State{}, err
		}
		if err := ui.StartStep(); err != nil {
			return uistream.State{}, err
		}
		text := "Let me look up the weather and the time in " + city + "."
		failing := in.Fail != nil && sc.Attempt() == 1
		if in.Fail != nil && !in.Fail.Same && sc.Attempt() > 1 {
			text = "Sure! I will check " + city + "'s weather and local time at once."
		}
		limit := -1
		if failing {
			limit = in.Fail.AfterTokens
		}
		if err := say(sc, c, ui, text, limit); err != nil {
			return uistream.State{}, err
		}
		if err := ui.ToolInputAvailable("call-weather", "weather", map[string]string{"city": city}); err != nil {
			return uistream.State{}, err
		}
		if err := ui.ToolInputAvailable("call-clock", "clock", map[string]string{"city": city}); err != nil {
			return uistream.State{}, err
		}
		if err := ui.FinishStep(); err != nil {
			return uistream.State{}, err
		}
		return ui.State(), nil
	}, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 3, InitialInterval: c.RetryDelay}))
	if err != nil {
		return Answer{}, err
	}

	// The two tools, in parallel: each writes its result to the message.
	tool := func(callID string, result func() string) func(weir.StepContext) (string, error) {
		return func(sc weir.StepContext) (string, error) {
			if err := pause(sc, 8*c.TokenDelay); err != nil {
				return "", err
			}
			out := result()
			ui := uistream.Resume(open(sc), st)
			return out, ui.ToolOutputAvailable(callID, map[string]string{"result": out})
		}
	}
	weather := weir.StepAsync(ctx, "tool: weather", tool("call-weather", func() string { return weatherIn(city) }))
	clock := weir.StepAsync(ctx, "tool: clock", tool("call-clock", func() string { return "14:05 local time" }))
	results, err := weir.All(ctx, weather, clock)
	if err != nil {
		return Answer{}, err
	}

	// The model's second call: the answer.
	answer := fmt.Sprintf("You asked: %q. In %s it is %s, and %s. Anything else?", clip(question, 200), city, results[0], results[1])
	if _, err := weir.Step(ctx, "model: answer", func(sc weir.StepContext) (int, error) {
		ui := uistream.Resume(open(sc), st)
		if err := ui.StartStep(); err != nil {
			return 0, err
		}
		if err := say(sc, c, ui, answer, -1); err != nil {
			return 0, err
		}
		if err := ui.FinishStep(); err != nil {
			return 0, err
		}
		return 0, ui.Finish(uistream.FinishStop)
	}, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 3, InitialInterval: c.RetryDelay})); err != nil {
		return Answer{}, err
	}
	return Answer{Text: answer}, nil
}

// say streams text as one text part, token by token; with limit >= 0 it
// fails after that many tokens, as a dropped model connection does.
func say(sc weir.StepContext, c *Config, ui *uistream.Writer, text string, limit int) error {
	part, err := ui.Text("")
	if err != nil {
		return err
	}
	for i, tok := range Tokens(text) {
		if i == limit {
			return ErrDropped
		}
		if err := pause(sc, c.TokenDelay); err != nil {
			return err
		}
		if err := part.Delta(tok); err != nil {
			return err
		}
	}
	return part.End()
}

// pause waits d, or until the attempt ends.
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Tokens splits text as a model streams it: words with their leading space.
func Tokens(text string) []string {
	var out []string
	for i, w := range strings.Split(text, " ") {
		if i > 0 {
			w = " " + w
		}
		out = append(out, w)
	}
	return out
}

// cityOf picks the city a question is about: the last capitalised word, or
// Lisbon.
func cityOf(q string) string {
	city := "Lisbon"
	for _, w := range strings.Fields(q) {
		w = strings.Trim(w, ".,;:!?\"'()")
		if len(w) > 1 && len(w) <= 40 && w[0] >= 'A' && w[0] <= 'Z' && w != "I" && w != "What" && w != "How" {
			city = w
		}
	}
	return city
}

// clip shortens s to n bytes at most, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func weatherIn(city string) string {
	temps := []string{"18°C and sunny", "11°C with light rain", "24°C and clear", "7°C and windy"}
	h := 0
	for _, r := range city {
		h = h*31 + int(r)
	}
	return temps[(h%len(temps)+len(temps))%len(temps)]
}
