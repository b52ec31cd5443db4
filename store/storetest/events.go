package storetest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
)

// testEventPages: a run's log read a page at a time (ListEventsPage):
// every event once, in order, pages bounded by their count and their bytes
// (the first event whatever its size), More true until the last.
func testEventPages(t *testing.T, h harness) {
	s := h.New(t)
	run, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "log", Workflow: "wf", Owner: "w", LeaseTTL: time.Minute})
	must(t, err)
	big := bytes.Repeat([]byte("x"), 100<<10)
	var evs []store.Event
	for i := range 30 {
		e := store.Event{Type: store.EventMessageReceived, Name: "t", Data: big[:(i%3)*(50<<10)]}
		evs = append(evs, e)
	}
	must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "log", LeaseEpoch: run.LeaseEpoch, Events: evs}))
	page := func(after int64, limit, maxBytes int) *store.EventPage {
		t.Helper()
		p, err := s.ListEventsPage(ctx(t), &store.ListEventsParams{RunID: "log", After: after, Limit: limit, MaxBytes: maxBytes})
		must(t, err)
		return p
	}
	if p := page(0, 7, 0); len(p.Events) != 7 || !p.More || p.Events[0].Seq != 1 || p.Events[6].Seq != 7 {
		t.Fatalf("7 events: %d, more %v", len(p.Events), p.More)
	}
	// Sizes 0, 50, 100, 0, 50 … KiB: a page of 120 KiB holds events
	// beginning within it.
	if p := page(0, 100, 120<<10); len(p.Events) != 3 || !p.More {
		t.Fatalf("120 KiB: %d events, more %v", len(p.Events), p.More)
	}
	// An event larger than the page comes alone.
	if p := page(2, 100, 1); len(p.Events) != 1 || p.Events[0].Seq != 3 || len(p.Events[0].Data) != 100<<10 {
		t.Fatalf("a large event: %+v", p)
	}
	var seqs []int64
	after := int64(0)
	for n := 0; ; n++ {
		p := page(after, 4, 150<<10)
		size := 0
		for i, e := range p.Events {
			seqs = append(seqs, e.Seq)
			if i > 0 && size >= 150<<10 {
				t.Fatalf("page after %d: event %d begins past the page's bytes", after, e.Seq)
			}
			size += len(e.Data)
		}
		if len(p.Events) == 0 || len(p.Events) > 4 {
			t.Fatalf("page after %d: %d events", after, len(p.Events))
		}
		after = p.Events[len(p.Events)-1].Seq
		if !p.More {
			break
		}
		if n > 30 {
			t.Fatal("pages without end")
		}
	}
	for i, seq := range seqs {
		if seq != int64(i+1) {
			t.Fatalf("pages gave seqs %v", seqs)
		}
	}
	if len(seqs) != 30 {
		t.Fatalf("%d events in pages, want 30", len(seqs))
	}
	if p := page(30, 10, 0); len(p.Events) != 0 || p.More {
		t.Fatalf("after the end: %+v", p)
	}
	if _, err := s.ListEventsPage(ctx(t), &store.ListEventsParams{RunID: "nope"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unknown run: %v", err)
	}
	// The log's bytes, told without reading it (store.LogSizer): the
	// 30 events hold 10 × (0 + 50 + 100) KiB.
	if ls, ok := store.LogSizerOf(s); ok {
		n, err := ls.LogBytes(ctx(t), "log")
		must(t, err)
		if n != 10*150<<10 {
			t.Fatalf("LogBytes: %d, want %d", n, 10*150<<10)
		}
		if n, err := ls.LogBytes(ctx(t), "nope"); err != nil || n != 0 {
			t.Fatalf("LogBytes of no run: %d %v", n, err)
		}
		// A run's input counts too: a fork copies it.
		if _, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "input", Workflow: "wf", Input: make([]byte, 70<<10)}); err != nil {
			t.Fatal(err)
		}
		if n, err := ls.LogBytes(ctx(t), "input"); err != nil || n != 70<<10 {
			t.Fatalf("LogBytes of a run with a 70 KiB input and no events: %d %v", n, err)
		}
		// And its output: a reply carries it.
		r, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "output", Workflow: "wf", Input: make([]byte, 10<<10), Owner: "w", LeaseTTL: time.Minute})
		must(t, err)
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "output", LeaseEpoch: r.LeaseEpoch, Status: store.RunCompleted, Output: make([]byte, 60<<10),
			Events: []store.Event{{Type: store.EventRunCompleted}}}))
		if n, err := ls.LogBytes(ctx(t), "output"); err != nil || n != 70<<10 {
			t.Fatalf("LogBytes of a run with a 10 KiB input, a 60 KiB output and no event data: %d %v", n, err)
		}
	}
	for _, p := range []store.ListEventsParams{{RunID: "log", Limit: store.MaxEventPage + 1}, {RunID: "log", MaxBytes: store.MaxEventPageBytes + 1}, {RunID: "log", After: -1}, {RunID: ""}} {
		if _, err := s.ListEventsPage(ctx(t), &p); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("%+v: %v, want ErrInvalid", p, err)
		}
	}
	// An outline (DataOf): the data of one type alone, the others' neither
	// carried nor counted in the page's bytes, so the 30 messages of up to
	// 100 KiB fit in one page of 1 KiB; the one limit_waiting keeps its.
	must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "log", LeaseEpoch: run.LeaseEpoch,
		Events: []store.Event{{Type: store.EventLimitWaiting, Op: 1, Name: "call", Attempt: 1, Data: []byte(`{"limiter":"llm"}`)}}}))
	outline, err := s.ListEventsPage(ctx(t), &store.ListEventsParams{RunID: "log", Limit: 100, MaxBytes: 1 << 10, DataOf: store.EventLimitWaiting})
	must(t, err)
	if len(outline.Events) != 31 || outline.More {
		t.Fatalf("an outline of 31 events in 1 KiB: %d events, more %v", len(outline.Events), outline.More)
	}
	for _, e := range outline.Events {
		if e.Type == store.EventLimitWaiting && string(e.Data) != `{"limiter":"llm"}` || e.Type != store.EventLimitWaiting && e.Data != nil {
			t.Fatalf("outline event %d (%s): data %.40q", e.Seq, e.Type, e.Data)
		}
	}
	if got := outline.Events[30]; got.Name != "call" || got.Op != 1 || got.Attempt != 1 {
		t.Fatalf("the outline's limit_waiting: %+v", got)
	}
}
