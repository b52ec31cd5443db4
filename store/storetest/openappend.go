package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// testOpenAppend: a step writer's first batch creates its stream and
// records its attempt's start in one transaction, all or nothing; an
// existing stream gets the start alone; a fenced attempt, a lost lease or
// a run that does not exist writes nothing; concurrent open-appends of one
// stream make one stream.
func testOpenAppend(t *testing.T, h harness) {
	raw := h.Harness.New(t)
	sa, ok := store.StepAppenderOf(raw)
	if !ok {
		t.Skip("the store has no StepAppender")
	}
	s := store.Capable(raw)
	run, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "oa", Workflow: "wf", Owner: "w", LeaseTTL: time.Minute})
	must(t, err)
	start := func(op, attempt int64) *store.AdvanceParams {
		return &store.AdvanceParams{RunID: "oa", LeaseEpoch: run.LeaseEpoch,
			Events: []store.Event{{Type: store.EventStepStarted, Op: op, Name: "s", Attempt: attempt}},
			Fence:  &store.Fence{Writer: fmt.Sprintf("step/%d", op), Attempt: attempt}}
	}
	chunks := func(cs ...string) [][]byte {
		var out [][]byte
		for _, c := range cs {
			out = append(out, []byte(c))
		}
		return out
	}
	steps := func() []int64 {
		t.Helper()
		evs, err := s.ListEvents(ctx(t), "oa", 0)
		must(t, err)
		var out []int64
		for _, e := range evs {
			if e.Type == store.EventStepStarted {
				out = append(out, e.Op*100+e.Attempt)
			}
		}
		return out
	}

	t.Run("creates and appends with the start", func(t *testing.T) {
		res, err := sa.OpenAppend(ctx(t), &store.OpenAppendParams{RunID: "oa", Name: "out", ContentType: "text/plain", Start: start(1, 1),
			Append: store.AppendParams{Writer: "step/1", Attempt: 1, Chunks: chunks("a", "b")}})
		must(t, err)
		if !res.Created || res.Append == nil || len(res.Append.Acks) != 2 || res.Append.NextOffset != 2 || res.Stream.ContentType != "text/plain" {
			t.Fatalf("result %+v (append %+v)", res, res.Append)
		}
		si, err := s.OpenStream(ctx(t), &store.OpenStreamParams{RunID: "oa", Name: "out"})
		must(t, err)
		if si.ID != res.Stream.ID || si.NextOffset != 2 {
			t.Fatalf("stream %+v, want id %d at 2", si, res.Stream.ID)
		}
		if got := steps(); fmt.Sprint(got) != "[101]" {
			t.Fatalf("starts %v, want [101]", got)
		}
		// The writer goes on by id; its outcome commits both batches.
		_, err = s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Writer: "step/1", Attempt: 1, FirstSeq: 2, Chunks: chunks("c")})
		must(t, err)
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "oa", LeaseEpoch: run.LeaseEpoch,
			Events: []store.Event{{Type: store.EventStepCompleted, Op: 1, Name: "s", Attempt: 1}},
			Finish: &store.Finish{Writer: "step/1", Attempt: 1, Commit: true}}))
		if got := committed(readAll(t, s, si.ID)); fmt.Sprint(got) != "[a b c]" {
			t.Fatalf("committed view %q", got)
		}
	})

	t.Run("an existing stream gets the start alone", func(t *testing.T) {
		res, err := sa.OpenAppend(ctx(t), &store.OpenAppendParams{RunID: "oa", Name: "out", Start: start(2, 1),
			Append: store.AppendParams{Writer: "step/2", Attempt: 1, Chunks: chunks("x")}})
		must(t, err)
		if res.Created || res.Append != nil || res.Stream.NextOffset != 4 {
			t.Fatalf("result %+v: want the existing stream at 4, nothing appended", res)
		}
		if got := steps(); fmt.Sprint(got) != "[101 201]" {
			t.Fatalf("starts %v, want [101 201]", got)
		}
	})

	t.Run("refusals write nothing", func(t *testing.T) {
		// A fenced attempt: the start would leave the fence above it.
		must(t, s.Advance(ctx(t), start(3, 2)))
		_, err := sa.OpenAppend(ctx(t), &store.OpenAppendParams{RunID: "oa", Name: "f", Start: start(3, 1),
			Append: store.AppendParams{Writer: "step/3", Attempt: 1, Chunks: chunks("z")}})
		var fe *stream.FencedError
		if !errors.As(err, &fe) {
			t.Fatalf("a fenced attempt: %v, want *stream.FencedError", err)
		}
		// A lost lease.
		stale := start(4, 1)
		stale.LeaseEpoch--
		if _, err := sa.OpenAppend(ctx(t), &store.OpenAppendParams{RunID: "oa", Name: "g", Start: stale,
			Append: store.AppendParams{Writer: "step/4", Attempt: 1, Chunks: chunks("z")}}); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("a lost lease: %v, want ErrLeaseLost", err)
		}
		for _, name := range []string{"f", "g"} {
			if _, err := s.OpenStream(ctx(t), &store.OpenStreamParams{RunID: "oa", Name: name}); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("stream %q after a refusal: %v, want none", name, err)
			}
		}
		if got := steps(); fmt.Sprint(got) != "[101 201 302]" {
			t.Fatalf("starts %v, want [101 201 302]: a refused start is not recorded", got)
		}
		if _, err := sa.OpenAppend(ctx(t), &store.OpenAppendParams{RunID: "nope", Name: "x",
			Append: store.AppendParams{Writer: "step/1", Attempt: 1, Chunks: chunks("z")}}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an unknown run: %v, want ErrNotFound", err)
		}
		for _, p := range []*store.OpenAppendParams{
			{RunID: "oa", Name: "h", Append: store.AppendParams{Chunks: chunks("anonymous")}},
			{RunID: "oa", Name: "h", Append: store.AppendParams{Writer: "step/5", Attempt: 1}},
			{Name: "h", Append: store.AppendParams{Writer: "step/5", Attempt: 1, Chunks: chunks("z")}},
			{RunID: "oa", Name: "h", Start: &store.AdvanceParams{RunID: "other"}, Append: store.AppendParams{Writer: "step/5", Attempt: 1, Chunks: chunks("z")}},
			{RunID: "oa", Name: "h", Start: &store.AdvanceParams{RunID: "oa", Status: store.RunCompleted}, Append: store.AppendParams{Writer: "step/5", Attempt: 1, Chunks: chunks("z")}},
		} {
			if _, err := sa.OpenAppend(ctx(t), p); !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("%+v: %v, want ErrInvalid", p, err)
			}
		}
	})

	t.Run("with the record that follows", func(t *testing.T) {
		// A step that returned before its writer sent: its start, its
		// chunks, its completion and their commit, in one transaction.
		then := func(op int64, epoch int64) *store.AdvanceParams {
			return &store.AdvanceParams{RunID: "oa", LeaseEpoch: epoch,
				Events: []store.Event{{Type: store.EventStepStarted, Op: op, Name: "s", Attempt: 1}, {Type: store.EventStepCompleted, Op: op, Name: "s", Attempt: 1}},
				Finish: &store.Finish{Writer: fmt.Sprintf("step/%d", op), Attempt: 1, Commit: true}}
		}
		res, err := sa.OpenAppend(ctx(t), &store.OpenAppendParams{RunID: "oa", Name: "then", Then: then(6, run.LeaseEpoch),
			Append: store.AppendParams{Writer: "step/6", Attempt: 1, Chunks: chunks("p", "q")}})
		must(t, err)
		if !res.Created || res.Append == nil || len(res.Append.Acks) != 2 {
			t.Fatalf("result %+v", res)
		}
		if got := committed(readAll(t, s, res.Stream.ID)); fmt.Sprint(got) != "[p q]" {
			t.Fatalf("committed view %q: the record's commit did not cover the chunks", got)
		}
		// An existing stream: the chunks by id, then the record.
		res, err = sa.OpenAppend(ctx(t), &store.OpenAppendParams{RunID: "oa", Name: "then", Then: then(7, run.LeaseEpoch),
			Append: store.AppendParams{Writer: "step/7", Attempt: 1, Chunks: chunks("r")}})
		must(t, err)
		if res.Created || res.Append == nil {
			t.Fatalf("an existing stream: %+v, want the chunks appended by id", res)
		}
		if got := committed(readAll(t, s, res.Stream.ID)); fmt.Sprint(got) != "[p q r]" {
			t.Fatalf("committed view %q", got)
		}
		// A record the rules refuse (a lost lease) takes the chunks and
		// the stream with it.
		before := len(steps())
		if _, err := sa.OpenAppend(ctx(t), &store.OpenAppendParams{RunID: "oa", Name: "lost", Then: then(8, run.LeaseEpoch-1),
			Append: store.AppendParams{Writer: "step/8", Attempt: 1, Chunks: chunks("z")}}); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("a lost lease: %v, want ErrLeaseLost", err)
		}
		if _, err := s.OpenStream(ctx(t), &store.OpenStreamParams{RunID: "oa", Name: "lost"}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the stream of a refused record: %v, want none", err)
		}
		if _, err := sa.OpenAppend(ctx(t), &store.OpenAppendParams{RunID: "oa", Name: "then", Then: then(9, run.LeaseEpoch-1),
			Append: store.AppendParams{Writer: "step/9", Attempt: 1, Chunks: chunks("z")}}); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("a lost lease on an existing stream: %v, want ErrLeaseLost", err)
		}
		if got := committed(readAll(t, s, res.Stream.ID)); fmt.Sprint(got) != "[p q r]" {
			t.Fatalf("committed view %q after refusals", got)
		}
		if n := len(readAll(t, s, res.Stream.ID)); n != 5 {
			t.Fatalf("%d records after refusals, want 5: p q commit r commit", n)
		}
		if got := len(steps()); got != before {
			t.Fatalf("%d starts after refused records, want %d", got, before)
		}
		if _, err := sa.OpenAppend(ctx(t), &store.OpenAppendParams{RunID: "oa", Name: "x", Start: start(10, 1), Then: then(10, run.LeaseEpoch),
			Append: store.AppendParams{Writer: "step/10", Attempt: 1, Chunks: chunks("z")}}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("a start and a then: %v, want ErrInvalid", err)
		}
	})

	t.Run("concurrent open-appends make one stream", func(t *testing.T) {
		const n = 8
		var wg sync.WaitGroup
		res := make([]*store.OpenAppendResult, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				res[i], errs[i] = sa.OpenAppend(ctx(t), &store.OpenAppendParams{RunID: "oa", Name: "many",
					Append: store.AppendParams{Writer: fmt.Sprintf("step/%d", 10+i), Attempt: 1, Chunks: chunks(fmt.Sprint(i))}})
			})
		}
		wg.Wait()
		created, id := 0, int64(0)
		for i := range n {
			must(t, errs[i])
			if id != 0 && res[i].Stream.ID != id {
				t.Fatalf("two streams: %d and %d", id, res[i].Stream.ID)
			}
			id = res[i].Stream.ID
			if res[i].Created {
				created++
			}
		}
		if created != 1 {
			t.Fatalf("%d open-appends created the stream, want 1", created)
		}
		if got := readAll(t, s, id); len(got) != 1 {
			t.Fatalf("%d records, want the creator's one", len(got))
		}
	})
}
