package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// testForks: a fork of a run keeps its log before the fork point and, on
// each stream, the kept steps' committed chunks and the workflow writer's
// chunks below its mark, committed and renumbered, and the workflow
// writer's state (its chunks come back as retransmits); a resume makes a
// failed run pending again, reopens its streams and revives the failed
// step's writer. Refusals change nothing.
func testForks(t *testing.T, h harness) {
	raw := h.Harness.New(t)
	if _, ok := raw.(store.Forks); !ok {
		t.Skip("the store has no forks")
	}
	s := store.Capable(raw)
	f := s
	run, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "src", Workflow: "wf", Owner: "w", LeaseTTL: time.Minute, Version: "v1"})
	must(t, err)
	adv := func(p store.AdvanceParams) {
		t.Helper()
		p.RunID, p.LeaseEpoch = run.ID, run.LeaseEpoch
		must(t, s.Advance(ctx(t), &p))
	}
	si, err := s.OpenStream(ctx(t), &store.OpenStreamParams{RunID: "src", Name: "out", Create: true})
	must(t, err)
	app := func(writer string, attempt, seq int64, chunks ...string) *store.AppendResult {
		t.Helper()
		p := &store.AppendParams{StreamID: si.ID, Writer: writer, Attempt: attempt, FirstSeq: seq}
		for _, c := range chunks {
			p.Chunks = append(p.Chunks, []byte(c))
		}
		res, err := s.Append(ctx(t), p)
		must(t, err)
		return res
	}
	adv(store.AdvanceParams{Events: []store.Event{{Type: store.EventRunStarted}, {Type: store.EventStreamMark, Op: 1, Data: []byte(`{"out":1}`)},
		{Type: store.EventStepStarted, Op: 1, Name: "a", Attempt: 1}}, Fence: &store.Fence{Writer: "step/1", Attempt: 1}})
	app("workflow", 0, 0, "w0")
	app("step/1", 1, 0, "x")
	adv(store.AdvanceParams{Events: []store.Event{{Type: store.EventStepFailed, Op: 1, Name: "a", Attempt: 1, Error: "flaky"},
		{Type: store.EventStepStarted, Op: 1, Name: "a", Attempt: 2}}, Fence: &store.Fence{Writer: "step/1", Attempt: 2}})
	app("step/1", 2, 0, "a")
	adv(store.AdvanceParams{Events: []store.Event{{Type: store.EventStepCompleted, Op: 1, Name: "a", Attempt: 2}},
		Finish: &store.Finish{Writer: "step/1", Attempt: 2, Commit: true}})
	app("workflow", 0, 1, "w1")
	adv(store.AdvanceParams{Events: []store.Event{{Type: store.EventStreamMark, Op: 2, Data: []byte(`{"out":2}`)},
		{Type: store.EventStepStarted, Op: 2, Name: "b", Attempt: 1}}, Fence: &store.Fence{Writer: "step/2", Attempt: 1}})
	app("step/2", 1, 0, "b")
	app("workflow", 0, 2, "w2")
	adv(store.AdvanceParams{Events: []store.Event{{Type: store.EventStepFailed, Op: 2, Name: "b", Attempt: 1, Error: "broken", Final: true},
		{Type: store.EventRunFailed, Error: "broken"}}, Finish: &store.Finish{Writer: "step/2", Attempt: 1}, Status: store.RunFailed, Error: "broken", CloseStreams: true})

	srcEvents, err := s.ListEvents(ctx(t), "src", 0)
	must(t, err)
	srcRecs := readAll(t, s, si.ID)

	// Refusals: nothing made, nothing changed.
	for _, p := range []store.ForkRunParams{{Source: "src", ID: "f", Op: 4}, {Source: "src", ID: "f", Step: "zz"}, {Source: "src", ID: "src", Op: 1}} {
		if _, _, err := f.ForkRun(ctx(t), &p); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("fork %+v: %v, want ErrInvalid", p, err)
		}
	}
	if _, _, err := f.ForkRun(ctx(t), &store.ForkRunParams{Source: "nosuch", ID: "f", Op: 1}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("fork of an unknown run: %v", err)
	}
	if _, err := s.GetRun(ctx(t), "f"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused fork made run f: %v", err)
	}

	fork, created, err := f.ForkRun(ctx(t), &store.ForkRunParams{Source: "src", ID: "f", Step: "b"})
	must(t, err)
	if !created || fork.Status != store.RunPending || fork.Workflow != "wf" || fork.Version != "v1" || fork.LeaseOwner != "" {
		t.Fatalf("fork: created %v %+v", created, fork)
	}
	evs, err := s.ListEvents(ctx(t), "f", 0)
	must(t, err)
	var types []store.EventType
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("fork's event %d has seq %d", i, ev.Seq)
		}
		types = append(types, ev.Type)
	}
	want := []store.EventType{store.EventRunStarted, store.EventStreamMark, store.EventStepStarted, store.EventStepFailed,
		store.EventStepStarted, store.EventStepCompleted, store.EventRunForked}
	if !slices.Equal(types, want) || evs[len(evs)-1].Name != "src" {
		t.Fatalf("fork's log %v, want %v", types, want)
	}
	streams, err := s.ListStreams(ctx(t), "f")
	must(t, err)
	if len(streams) != 1 || streams[0].Name != "out" || streams[0].Closed || streams[0].NextOffset != 3 {
		t.Fatalf("fork's streams %+v", streams)
	}
	fs := streams[0].ID
	var data []string
	for _, r := range readAll(t, s, fs) {
		if r.Kind != stream.KindData || r.Attempt != 0 {
			t.Fatalf("fork's record %+v: want committed data only", r)
		}
		data = append(data, string(r.Data))
	}
	if !slices.Equal(data, []string{"w0", "a", "w1"}) {
		t.Fatalf("fork's chunks %q", data)
	}
	// The workflow's replay in the fork sends its chunks again.
	res, err := s.Append(ctx(t), &store.AppendParams{StreamID: fs, Writer: "workflow", Chunks: [][]byte{[]byte("w0"), []byte("w1"), []byte("w2'")}})
	must(t, err)
	if o := []stream.Outcome{res.Acks[0].Outcome, res.Acks[1].Outcome, res.Acks[2].Outcome}; !slices.Equal(o, []stream.Outcome{stream.Retransmit, stream.Retransmit, stream.Appended}) {
		t.Fatalf("workflow writer in the fork: %v", o)
	}
	// Retried: the same fork; another fork with its id: a conflict.
	if again, created, err := f.ForkRun(ctx(t), &store.ForkRunParams{Source: "src", ID: "f", Op: 2}); err != nil || created || again.ID != "f" {
		t.Fatalf("the fork again: %v %v %v", again, created, err)
	}
	if _, _, err := f.ForkRun(ctx(t), &store.ForkRunParams{Source: "src", ID: "f", Op: 1}); !errors.Is(err, store.ErrRunConflict) {
		t.Fatalf("another fork with its id: %v", err)
	}
	// The source is as it was.
	if got, err := s.ListEvents(ctx(t), "src", 0); err != nil || len(got) != len(srcEvents) {
		t.Fatalf("source's log after the fork: %d events, %v", len(got), err)
	}
	if got := readAll(t, s, si.ID); len(got) != len(srcRecs) {
		t.Fatalf("source's stream after the fork: %d records, want %d", len(got), len(srcRecs))
	}

	// Resume: refused while the fork is pending, then the failed source.
	if _, err := f.ResumeRun(ctx(t), &store.ResumeRunParams{ID: "f"}); !errors.Is(err, store.ErrNotResumable) {
		t.Fatalf("resume of a pending run: %v", err)
	}
	r, err := f.ResumeRun(ctx(t), &store.ResumeRunParams{ID: "src"})
	must(t, err)
	if r.Status != store.RunPending || r.Error != "" || r.Output != nil || r.LeaseOwner != "" {
		t.Fatalf("resumed: %+v", r)
	}
	if again, err := f.ResumeRun(ctx(t), &store.ResumeRunParams{ID: "src"}); err != nil || again.Status != store.RunPending {
		t.Fatalf("a retried resume: %v %v", again, err)
	}
	evs, err = s.ListEvents(ctx(t), "src", 0)
	must(t, err)
	if last := evs[len(evs)-1]; last.Type != store.EventRunResumed || string(last.Data) != `{"from":"failed","ops":[2]}` {
		t.Fatalf("resume's event %+v %s", last, last.Data)
	}
	info, err := s.GetStream(ctx(t), si.ID)
	must(t, err)
	recs := readAll(t, s, si.ID)
	if info.Closed || recs[len(recs)-1].Kind != stream.KindReopen || recs[len(recs)-2].Kind != stream.KindClose {
		t.Fatalf("resumed stream: closed %v, ends %v", info.Closed, recs[len(recs)-1])
	}
	claimed, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: "w2", Limit: 5, LeaseTTL: time.Minute, Workflows: []string{"wf"}})
	must(t, err)
	var ids []string
	for _, c := range claimed {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"f", "src"}) {
		t.Fatalf("claimable after fork and resume: %v", ids)
	}
	// The failed step's writer takes its next attempt.
	res, err = s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Writer: "step/2", Attempt: 2, Chunks: [][]byte{[]byte("b2")}})
	must(t, err)
	if res.Acks[0].Outcome != stream.Appended {
		t.Fatalf("the revived writer: %v", res.Acks[0].Outcome)
	}

	// At once: eight resumes of a failed run are one resume, eight forks
	// with one id one fork.
	r2, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "src2", Workflow: "wf", Owner: "w", LeaseTTL: time.Minute})
	must(t, err)
	si2, err := s.OpenStream(ctx(t), &store.OpenStreamParams{RunID: "src2", Name: "out", Create: true})
	must(t, err)
	must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "src2", LeaseEpoch: r2.LeaseEpoch,
		Events: []store.Event{{Type: store.EventRunStarted}, {Type: store.EventStepStarted, Op: 1, Name: "a", Attempt: 1}}, Fence: &store.Fence{Writer: "step/1", Attempt: 1}}))
	_, err = s.Append(ctx(t), &store.AppendParams{StreamID: si2.ID, Writer: "step/1", Attempt: 1, Chunks: [][]byte{[]byte("x")}})
	must(t, err)
	must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "src2", LeaseEpoch: r2.LeaseEpoch,
		Events: []store.Event{{Type: store.EventStepFailed, Op: 1, Name: "a", Attempt: 1, Final: true}, {Type: store.EventRunFailed}},
		Finish: &store.Finish{Writer: "step/1", Attempt: 1}, Status: store.RunFailed, Error: "x", CloseStreams: true}))
	const n = 8
	errs := make(chan error, 2*n)
	for range n {
		go func() {
			_, err := f.ResumeRun(ctx(t), &store.ResumeRunParams{ID: "src2"})
			errs <- err
		}()
		go func() {
			r, _, err := f.ForkRun(ctx(t), &store.ForkRunParams{Source: "src", ID: "f2", Op: 1})
			if err == nil && r.ID != "f2" {
				err = fmt.Errorf("fork f2 returned run %s", r.ID)
			}
			errs <- err
		}()
	}
	for range 2 * n {
		if err := <-errs; err != nil {
			t.Fatalf("a resume or fork at once: %v", err)
		}
	}
	evs, err = s.ListEvents(ctx(t), "src2", 0)
	must(t, err)
	resumes := 0
	for _, e := range evs {
		if e.Type == store.EventRunResumed {
			resumes++
		}
	}
	reopens := 0
	for _, r := range readAll(t, s, si2.ID) {
		if r.Kind == stream.KindReopen {
			reopens++
		}
	}
	if resumes != 1 || reopens != 1 {
		t.Fatalf("eight resumes at once: %d run_resumed, %d reopens; want one each", resumes, reopens)
	}
}
