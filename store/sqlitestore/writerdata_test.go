package sqlitestore_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/sqlitestore"
	"github.com/weirhq/weir/world"
)

// A start, a fork or a resume that refuses, or finds what it was to make,
// reads no run's data and no log's payloads with the writer held: SQLite
// has one writer, and a run with a 15 MiB input and 15 messages of 1 MiB
// held it 40–180 ms for each, every other client's writes waiting (red
// team, round nineteen). A reply that carries a run's data reads it after
// the commit, on a read connection.
func TestRefusalsReadNoRunDataInTheWriter(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "weir.db"))
	ctx := t.Context()
	input := bytes.Repeat([]byte("i"), 2<<20)
	payload := bytes.Repeat([]byte("m"), 256<<10)
	// A live run: leased, with messages in its log.
	live, _, err := s.CreateRun(ctx, &store.CreateRunParams{ID: "live", Workflow: "wf", Input: input, Owner: "w", LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Advance(ctx, &store.AdvanceParams{RunID: "live", LeaseEpoch: live.LeaseEpoch, Events: []store.Event{{Type: store.EventRunStarted},
		{Type: store.EventStepStarted, Op: 1, Name: "a", Attempt: 1}, {Type: store.EventStepCompleted, Op: 1, Name: "a", Attempt: 1}}}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := s.SendMessage(ctx, &store.SendMessageParams{RunID: "live", Topic: "t", Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	// A queued run with a dedupe key.
	if err := s.SetLimiter(ctx, &limit.Config{Name: "q", Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	if _, created, err := s.CreateRun(ctx, &store.CreateRunParams{ID: "d1", Workflow: "wf", Queue: "q", Dedupe: "k", Input: input}); err != nil || !created {
		t.Fatalf("queued d1: created %v, %v", created, err)
	}

	none := func(what string, fn func() error) {
		t.Helper()
		before := s.WriterDataRead()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		// The outline keeps a stream mark's and a run_forked's data: a
		// few bytes.
		if n := s.WriterDataRead() - before; n > 64 {
			t.Errorf("%s: the writer read %d bytes of run data and payloads", what, n)
		}
	}
	hasInput := func(what string, r *store.Run, want []byte) error {
		if r == nil || !bytes.Equal(r.Input, want) {
			return errors.New(what + ": the reply lacks the run's input")
		}
		return nil
	}
	none("a resume of a live run", func() error {
		if _, err := s.ResumeRun(ctx, &store.ResumeRunParams{ID: "live"}); !errors.Is(err, store.ErrNotResumable) {
			return errors.Join(errors.New("want ErrNotResumable"), err)
		}
		return nil
	})
	none("a fork from past the log", func() error {
		if _, _, err := s.ForkRun(ctx, &store.ForkRunParams{Source: "live", ID: "f", Op: 99}); !errors.Is(err, store.ErrInvalid) {
			return errors.Join(errors.New("want ErrInvalid"), err)
		}
		return nil
	})
	none("a fork from a step it has not", func() error {
		if _, _, err := s.ForkRun(ctx, &store.ForkRunParams{Source: "live", ID: "f", Step: "zz"}); !errors.Is(err, store.ErrInvalid) {
			return errors.Join(errors.New("want ErrInvalid"), err)
		}
		return nil
	})
	none("a dedupe hit", func() error {
		r, created, err := s.CreateRun(ctx, &store.CreateRunParams{ID: "d2", Workflow: "wf", Queue: "q", Dedupe: "k"})
		if err != nil || created || r.ID != "d1" {
			return errors.Join(errors.New("want d1 found"), err)
		}
		return hasInput("a dedupe hit", r, input)
	})
	folded := []byte(`"folded"`)
	none("a debounced fold", func() error {
		r, created, err := s.CreateRun(ctx, &store.CreateRunParams{ID: "d3", Workflow: "wf", Queue: "q", Dedupe: "k", Debounce: time.Minute, Input: folded})
		if err != nil || created || r.ID != "d1" {
			return errors.Join(errors.New("want d1 folded"), err)
		}
		return hasInput("a debounced fold", r, folded)
	})
	none("a queued start naming a run", func() error {
		r, created, err := s.CreateRun(ctx, &store.CreateRunParams{ID: "live", Workflow: "wf", Queue: "q"})
		if err != nil || created {
			return errors.Join(errors.New("want live found"), err)
		}
		return hasInput("a queued start naming a run", r, input)
	})
	// A fork made reads the log it copies; its retry reads none.
	if _, created, err := s.ForkRun(ctx, &store.ForkRunParams{Source: "live", ID: "f", Op: 2}); err != nil || !created {
		t.Fatalf("fork: created %v, %v", created, err)
	}
	none("a retried fork", func() error {
		r, created, err := s.ForkRun(ctx, &store.ForkRunParams{Source: "live", ID: "f", Op: 2})
		if err != nil || created {
			return errors.Join(errors.New("want f found"), err)
		}
		return hasInput("a retried fork", r, input)
	})
	// A resume made reads no payload either: it plans on the log's outline.
	failRun(t, s, "live", live.LeaseEpoch)
	none("a resume", func() error {
		r, err := s.ResumeRun(ctx, &store.ResumeRunParams{ID: "live"})
		if err != nil || r.Status != store.RunPending {
			return errors.Join(errors.New("want live pending"), err)
		}
		return hasInput("a resume", r, input)
	})
}

// failRun fails run id, leased at epoch.
func failRun(t *testing.T, s *sqlitestore.Store, id string, epoch int64) {
	t.Helper()
	if err := s.Advance(t.Context(), &store.AdvanceParams{RunID: id, LeaseEpoch: epoch,
		Events: []store.Event{{Type: store.EventRunFailed, Error: "boom"}}, Status: store.RunFailed, Error: "boom"}); err != nil {
		t.Fatal(err)
	}
}

// A World event reads the run's head in the writer, not its input and
// output (red team, round nineteen audit: a step's event on a run with a
// 15 MiB input held the writer 17-21 ms); a reply that carries the run
// reads them after the commit.
func TestWorldEventsReadNoRunDataInTheWriter(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "weir.db"))
	input := `"` + strings.Repeat("i", 2<<20) + `"`
	ev := func(typ world.EventType, corr, data string) *store.WorldEventResult {
		t.Helper()
		res, err := s.WorldEvent(t.Context(), &store.WorldEventParams{Request: world.Request{RunID: "wrun_big", Type: typ,
			CorrelationID: corr, Data: json.RawMessage(data)}})
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		return res
	}
	ev(world.RunCreated, "", `{"deploymentId":"d","workflowName":"wf","input":`+input+`}`)
	before := s.WriterDataRead()
	if res := ev(world.RunStarted, "", ""); string(res.Run.Input) != input {
		t.Fatalf("run_started: the reply's run has %d bytes of input, want %d", len(res.Run.Input), len(input))
	}
	ev(world.StepCreated, "step_1", `{"stepName":"s","input":[1]}`)
	ev(world.StepStarted, "step_1", "")
	ev(world.StepCompleted, "step_1", `{"result":1}`)
	ev(world.HookCreated, "hook_1", `{"token":"tok"}`)
	ev(world.WaitCreated, "wait_1", `{"resumeAt":"2000-01-01T00:00:00Z"}`)
	if res := ev(world.RunCompleted, "", `{"output":2}`); string(res.Run.Input) != input || string(res.Run.Output) != "2" {
		t.Fatalf("run_completed: the reply's run has %d bytes of input, output %s", len(res.Run.Input), res.Run.Output)
	}
	if n := s.WriterDataRead() - before; n != 0 {
		t.Errorf("World events: the writer read %d bytes of run data", n)
	}
}

// BenchmarkWorldStepEvent is a step's event (a step_created refused as a
// conflict: nothing grows) on a World run with a 15 MiB input.
func BenchmarkWorldStepEvent(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "weir.db"))
	input := `"` + strings.Repeat("i", 15<<20) + `"`
	for _, r := range []world.Request{
		{RunID: "wrun_big", Type: world.RunCreated, Data: json.RawMessage(`{"deploymentId":"d","workflowName":"wf","input":` + input + `}`)},
		{RunID: "wrun_big", Type: world.StepCreated, CorrelationID: "step_1", Data: json.RawMessage(`{"stepName":"s","input":[1]}`)},
	} {
		if _, err := s.WorldEvent(b.Context(), &store.WorldEventParams{Request: r}); err != nil {
			b.Fatal(err)
		}
	}
	p := &store.WorldEventParams{Request: world.Request{RunID: "wrun_big", Type: world.StepCreated, CorrelationID: "step_1",
		Data: json.RawMessage(`{"stepName":"s","input":[1]}`)}}
	for b.Loop() {
		if _, err := s.WorldEvent(b.Context(), p); !errors.Is(err, world.ErrConflict) {
			b.Fatal(err)
		}
	}
}

// An admission from a queue reads no admitted run's data with the writer
// held, as a claim does not: the engine's poll admits up to its limit of
// runs, each of which may carry a 15 MiB input (red team, round nineteen
// audit). The admitted runs come back with their input, read after the
// commit; a run admitted at its start, with the input it was given.
func TestAdmissionReadsNoRunDataInTheWriter(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "weir.db"))
	ctx := t.Context()
	input := bytes.Repeat([]byte("i"), 2<<20)
	if err := s.SetLimiter(ctx, &limit.Config{Name: "q", Concurrency: 4}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, created, err := s.CreateRun(ctx, &store.CreateRunParams{ID: id, Workflow: "wf", Queue: "q", Input: input}); err != nil || !created {
			t.Fatalf("queued %s: created %v, %v", id, created, err)
		}
	}
	before := s.WriterDataRead()
	runs, err := s.AdmitRuns(ctx, &store.AdmitRunsParams{Owner: "w", Limit: 8, LeaseTTL: time.Hour})
	if err != nil || len(runs) != 3 {
		t.Fatalf("admitted %d runs, %v", len(runs), err)
	}
	if n := s.WriterDataRead() - before; n > 0 {
		t.Errorf("an admission of 3 runs: the writer read %d bytes of run data", n)
	}
	for _, r := range runs {
		if !bytes.Equal(r.Input, input) || r.Status != store.RunRunning || r.LeaseOwner != "w" {
			t.Errorf("admitted %s: %s, leased to %q, %d bytes of input", r.ID, r.Status, r.LeaseOwner, len(r.Input))
		}
	}

	// Admitted at its start: the queue has room and no line.
	before = s.WriterDataRead()
	r, created, err := s.CreateRun(ctx, &store.CreateRunParams{ID: "d", Workflow: "wf", Queue: "q", Input: input, Owner: "w", LeaseTTL: time.Hour})
	if err != nil || !created || r.Status != store.RunRunning {
		t.Fatalf("start admitted at once: created %v, %+v, %v", created, r, err)
	}
	if n := s.WriterDataRead() - before; n > 0 {
		t.Errorf("a start admitted at once: the writer read %d bytes of run data", n)
	}
	if !bytes.Equal(r.Input, input) {
		t.Errorf("a start admitted at once: %d bytes of input in its reply, want %d", len(r.Input), len(input))
	}
}
