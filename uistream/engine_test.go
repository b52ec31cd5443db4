package uistream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/sqlitestore"
	"github.com/weirhq/weir/uistream"
)

// engine opens a real SQLite store in a fresh file and an engine on it,
// with the short polls and backoffs of weir's own tests.
func engine(t *testing.T) (*weir.Engine, store.Store) {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "weir.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	e, err := weir.New(s, &weir.Config{
		PollInterval: 10 * time.Millisecond,
		LeaseTTL:     500 * time.Millisecond,
		Retry:        weir.RetryPolicy{InitialInterval: 5 * time.Millisecond, MaxInterval: 20 * time.Millisecond},
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("close engine: %v", err)
		}
	})
	return e, s
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// read reads the whole stream name of run in one view.
func read(t *testing.T, e *weir.Engine, run, name string, view weir.View) []weir.StreamRecord {
	t.Helper()
	var out []weir.StreamRecord
	for r, err := range e.Read(testCtx(t), run, name, &weir.ReadOptions{View: view}) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func data(recs []weir.StreamRecord) []string {
	var out []string
	for _, r := range recs {
		if r.Kind == weir.KindData {
			out = append(out, string(r.Data))
		}
	}
	return out
}

func count(recs []weir.StreamRecord, k weir.Kind) int {
	n := 0
	for _, r := range recs {
		if r.Kind == k {
			n++
		}
	}
	return n
}

// errDropped is the simulated failure of a first attempt: the model's
// connection dropped midway through its answer.
var errDropped = errors.New("simulated failure: the connection to the model dropped")

// limited is a ChunkWriter that passes n chunks to w, then fails: where an
// attempt stops midway.
type limited struct {
	w uistream.ChunkWriter
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if l.n == 0 {
		return 0, errDropped
	}
	l.n--
	return l.w.Write(p)
}

// A step writes an answer through uistream over sc.Stream("ui", weir.ContentType(uistream.ContentType)); its first
// attempt fails after some chunks, its retry writes the same answer. weir
// adopts the retry's identical chunks: the committed view holds the answer's
// chunks once each, the first ones from attempt 1, and the live view has no
// abort. Every record is one chunk the AI SDK's schema accepts.
func TestEngineRetryIsAdopted(t *testing.T) {
	e, s := engine(t)
	const failAfter = 6
	var (
		mu       sync.Mutex
		attempts []int64
		msgIDs   []string
	)
	wf := weir.Register(e, "chat", func(ctx weir.Context, _ struct{}) (int, error) {
		return weir.Step(ctx, "answer", func(sc weir.StepContext) (int, error) {
			mu.Lock()
			attempts = append(attempts, sc.Attempt())
			msgIDs = append(msgIDs, sc.StepID())
			mu.Unlock()
			var cw uistream.ChunkWriter = sc.Stream("ui", weir.ContentType(uistream.ContentType))
			if sc.Attempt() == 1 {
				cw = &limited{w: cw, n: failAfter}
			}
			// The message id is the step's: the same on every attempt.
			if err := answer(uistream.NewWriter(cw), sc.StepID()); err != nil {
				return 0, err
			}
			return 1, nil
		}, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 3, InitialInterval: weir.NoWait}))
	})
	if err := e.Work(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h, err := wf.Start(testCtx(t), struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Result(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(attempts, []int64{1, 2}) || msgIDs[0] != msgIDs[1] {
		t.Fatalf("attempts %v with message ids %q, want 1 and 2 with one id", attempts, msgIDs)
	}

	// What one attempt writes, uninterrupted.
	want := &recorder{}
	if err := answer(uistream.NewWriter(want), msgIDs[0]); err != nil {
		t.Fatal(err)
	}
	committed := read(t, e, h.ID, "ui", weir.CommittedView)
	if got := data(committed); !slices.Equal(got, want.strings()) {
		t.Fatalf("committed view\n%q\nwant one attempt's chunks\n%q", got, want.strings())
	}
	seen := map[int64]bool{}
	for _, r := range committed {
		if r.Kind != weir.KindData {
			continue
		}
		if seen[r.Seq] {
			t.Fatalf("seq %d twice in the committed view", r.Seq)
		}
		seen[r.Seq] = true
		// Attempt 1 wrote the first chunks; attempt 2 adopted them.
		if wantAttempt := int64(1 + min(r.Seq/failAfter, 1)); r.Attempt != wantAttempt {
			t.Fatalf("seq %d from attempt %d, want %d", r.Seq, r.Attempt, wantAttempt)
		}
		checkSchema(t, string(r.Data))
	}
	live := read(t, e, h.ID, "ui", weir.LiveView)
	if got := data(live); !slices.Equal(got, want.strings()) {
		t.Fatalf("live view %q: want each chunk once", got)
	}
	if n := count(live, weir.KindAbort); n != 0 {
		t.Fatalf("%d aborts in the live view, want none", n)
	}

	// The stream is application/json: readers over HTTP get each chunk as
	// a JSON value.
	info, err := s.OpenStream(testCtx(t), &store.OpenStreamParams{RunID: h.ID, Name: "ui"})
	if err != nil {
		t.Fatal(err)
	}
	if info.ContentType != uistream.ContentType {
		t.Fatalf("run stream %q has content type %q", info.Path, info.ContentType)
	}
}

// A retry whose answer differs (a sampled model) is not adopted past the
// first difference: weir aborts the first attempt's chunks from there, and
// the committed view is exactly the retry's answer.
func TestEngineDivergentRetry(t *testing.T) {
	e, _ := engine(t)
	say := func(w *uistream.Writer, msgID, text string) error {
		if err := w.Start(msgID, nil); err != nil {
			return err
		}
		if err := w.StartStep(); err != nil {
			return err
		}
		p, err := w.Text("")
		if err != nil {
			return err
		}
		for _, word := range []string{"The answer ", "is ", text} {
			if err := p.Delta(word); err != nil {
				return err
			}
		}
		if err := p.End(); err != nil {
			return err
		}
		if err := w.FinishStep(); err != nil {
			return err
		}
		return w.Finish(uistream.FinishStop)
	}
	var msgID syncString
	wf := weir.Register(e, "chat", func(ctx weir.Context, _ struct{}) (int, error) {
		return weir.Step(ctx, "answer", func(sc weir.StepContext) (int, error) {
			id := msgID.set(sc.StepID())
			if sc.Attempt() == 1 {
				// All but the finish, then the failure.
				err := say(uistream.NewWriter(&limited{w: sc.Stream("ui", weir.ContentType(uistream.ContentType)), n: 8}), id, "forty-one.")
				if !errors.Is(err, errDropped) {
					return 0, errors.New("attempt 1 was not cut short")
				}
				return 0, err
			}
			return 1, say(uistream.NewWriter(sc.Stream("ui", weir.ContentType(uistream.ContentType))), id, "forty-two.")
		}, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 3, InitialInterval: weir.NoWait}))
	})
	if err := e.Work(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h, err := wf.Start(testCtx(t), struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Result(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	want := &recorder{}
	if err := say(uistream.NewWriter(want), msgID.get(), "forty-two."); err != nil {
		t.Fatal(err)
	}
	if got := data(read(t, e, h.ID, "ui", weir.CommittedView)); !slices.Equal(got, want.strings()) {
		t.Fatalf("committed view\n%q\nwant the retry's chunks\n%q", got, want.strings())
	}
	live := read(t, e, h.ID, "ui", weir.LiveView)
	// start, start-step, text-start, "The answer ", "is " are adopted;
	// attempt 1's chunks from its last delta (seq 5) on are aborted.
	var aborts []weir.StreamRecord
	for _, r := range live {
		if r.Kind == weir.KindAbort {
			aborts = append(aborts, r)
		}
	}
	if len(aborts) != 1 || aborts[0].FromSeq() != 5 {
		t.Fatalf("aborts %v, want one from seq 5 (the differing delta)", aborts)
	}
}

// A message across steps: a model step ends with a tool call and returns
// its State; a tool step resumes the message and writes the tool's output;
// a last model step answers. The committed view is the message one Writer
// would have written.
func TestEngineMessageAcrossSteps(t *testing.T) {
	e, _ := engine(t)
	type calls = func(w *uistream.Writer, msgID string) []func() error
	// answerCalls' groups, split between the steps.
	split := func(from, to int) calls {
		return func(w *uistream.Writer, msgID string) []func() error {
			c := answerCalls(w, msgID)
			return c[from:min(to, len(c))]
		}
	}
	const toolOutput = 7 // answerCalls' ToolOutputAvailable
	parts := []calls{split(0, toolOutput), split(toolOutput, toolOutput+1), split(toolOutput+1, 100)}
	var msgID syncString
	wf := weir.Register(e, "agent", func(ctx weir.Context, _ struct{}) (int, error) {
		var st uistream.State
		for i, p := range parts {
			var err error
			st, err = weir.Step(ctx, "part", func(sc weir.StepContext) (uistream.State, error) {
				w := uistream.Resume(sc.Stream("ui", weir.ContentType(uistream.ContentType)), st)
				id := w.MessageID()
				if i == 0 {
					id = msgID.set(sc.StepID())
				}
				for _, c := range p(w, id) {
					if err := c(); err != nil {
						return uistream.State{}, err
					}
				}
				return w.State(), nil
			})
			if err != nil {
				return 0, err
			}
		}
		return len(parts), nil
	})
	if err := e.Work(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h, err := wf.Start(testCtx(t), struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Result(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	want := &recorder{}
	if err := answer(uistream.NewWriter(want), msgID.get()); err != nil {
		t.Fatal(err)
	}
	committed := read(t, e, h.ID, "ui", weir.CommittedView)
	if got := data(committed); !slices.Equal(got, want.strings()) {
		t.Fatalf("committed view\n%q\nwant\n%q", got, want.strings())
	}
	writers := map[string]bool{}
	for _, r := range committed {
		if r.Kind == weir.KindData {
			writers[r.Writer] = true
			var v map[string]any
			if err := json.Unmarshal(r.Data, &v); err != nil {
				t.Fatalf("record %d: %v", r.Offset, err)
			}
		}
	}
	if len(writers) != len(parts) {
		t.Fatalf("written by %v, want one writer per step", writers)
	}
}

// syncString is a string a step sets and the test reads.
type syncString struct {
	mu sync.Mutex
	s  string
}

func (v *syncString) set(s string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.s = s
	return s
}

func (v *syncString) get() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.s
}

// A chunk over weir's record limit (a huge tool output) is refused by the
// stream writer, writes nothing and leaves the Writer as it was: the step
// writes a tool output error instead, and the message goes on.
func TestEngineChunkTooLarge(t *testing.T) {
	e, _ := engine(t)
	huge := strings.Repeat("x", store.MaxChunkSize)
	wf := weir.Register(e, "big", func(ctx weir.Context, _ struct{}) (string, error) {
		return weir.Step(ctx, "tool", func(sc weir.StepContext) (string, error) {
			w := uistream.NewWriter(sc.Stream("ui", weir.ContentType(uistream.ContentType)))
			if err := w.Start("m", nil); err != nil {
				return "", err
			}
			if err := w.ToolInputAvailable("c1", "dump", nil); err != nil {
				return "", err
			}
			err := w.ToolOutputAvailable("c1", huge)
			if !errors.Is(err, weir.ErrTooLarge) {
				return "", fmt.Errorf("huge output: %v, want ErrTooLarge", err)
			}
			if err := w.ToolOutputError("c1", "output too large"); err != nil {
				return "", err
			}
			return err.Error(), w.Finish("")
		})
	})
	if err := e.Work(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h, err := wf.Start(testCtx(t), struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := h.Result(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the huge output: %s", msg)
	want := []string{
		`{"type":"start","messageId":"m"}`,
		`{"type":"tool-input-available","toolCallId":"c1","toolName":"dump","input":null}`,
		`{"type":"tool-output-error","toolCallId":"c1","errorText":"output too large"}`,
		`{"type":"finish"}`,
	}
	if got := data(read(t, e, h.ID, "ui", weir.CommittedView)); !slices.Equal(got, want) {
		t.Fatalf("committed view %q, want %q", got, want)
	}
}
