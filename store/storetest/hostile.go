package storetest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// testHostile sends every method ids, paths, names and writers that no
// backend can store as they are (invalid UTF-8, a NUL byte, too long): each
// is store.ErrInvalid, before any query, and changes nothing.
func testHostile(t *testing.T, h harness) {
	t.Parallel()
	s := h.New(t)
	epoch := startRun(t, s, "r")
	si := openStream(t, s, "s")
	long := strings.Repeat("x", store.MaxIDLen+1)
	for _, bad := range []string{"ab\xffcd", "a\x00b", long} {
		calls := map[string]func() error{
			"CreateRun id": func() error {
				_, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: bad, Workflow: "wf"})
				return err
			},
			"CreateRun workflow": func() error {
				_, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "new", Workflow: bad})
				return err
			},
			"CreateRun owner": func() error {
				_, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "new", Workflow: "wf", Owner: bad, LeaseTTL: time.Minute})
				return err
			},
			"GetRun":        func() error { _, err := s.GetRun(ctx(t), bad); return err },
			"ListEvents":    func() error { _, err := s.ListEvents(ctx(t), bad, 0); return err },
			"RequestCancel": func() error { return s.RequestCancel(ctx(t), bad) },
			"ListStreams":   func() error { _, err := s.ListStreams(ctx(t), bad); return err },
			"ListRuns workflow": func() error {
				_, err := s.ListRuns(ctx(t), &store.ListRunsParams{Workflow: bad})
				return err
			},
			"ListRuns id prefix": func() error {
				_, err := s.ListRuns(ctx(t), &store.ListRunsParams{IDPrefix: bad})
				return err
			},
			"ListRuns cursor": func() error {
				_, err := s.ListRuns(ctx(t), &store.ListRunsParams{Before: bad})
				return err
			},
			"ClaimRuns owner": func() error {
				_, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: bad, Limit: 1, LeaseTTL: ttl})
				return err
			},
			"ClaimRuns workflows": func() error {
				_, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 1, LeaseTTL: ttl, Workflows: []string{bad}})
				return err
			},
			"RenewLease": func() error {
				_, err := s.RenewLease(ctx(t), &store.RenewLeaseParams{RunID: bad, LeaseEpoch: 1, LeaseTTL: ttl})
				return err
			},
			"Advance run": func() error {
				return s.Advance(ctx(t), &store.AdvanceParams{RunID: bad, LeaseEpoch: epoch})
			},
			"Advance event name": func() error {
				return s.Advance(ctx(t), &store.AdvanceParams{RunID: "r", LeaseEpoch: epoch,
					Events: []store.Event{{Type: store.EventStepStarted, Name: bad}}})
			},
			"Advance fence writer": func() error {
				return s.Advance(ctx(t), &store.AdvanceParams{RunID: "r", LeaseEpoch: epoch,
					Fence: &store.Fence{Writer: bad + strings.Repeat("y", stream.MaxWriterLen), Attempt: 1}})
			},
			"OpenStream path": func() error {
				_, err := s.OpenStream(ctx(t), &store.OpenStreamParams{Path: bad + strings.Repeat("p", store.MaxPathLen), Create: true})
				return err
			},
			"OpenStream run stream name": func() error {
				_, err := s.OpenStream(ctx(t), &store.OpenStreamParams{RunID: "r", Name: bad, Create: true})
				return err
			},
			"CreateStream path": func() error {
				_, _, err := s.CreateStream(ctx(t), &store.CreateStreamParams{Path: bad + strings.Repeat("p", store.MaxPathLen)})
				return err
			},
			"CreateStream content type": func() error {
				_, _, err := s.CreateStream(ctx(t), &store.CreateStreamParams{Path: "new", ContentType: bad[:min(len(bad), 8)] + "\x00"})
				return err
			},
		}
		if len(bad) <= store.MaxIDLen {
			// Texts without a length limit of their own beyond the
			// request's: only their bytes are refused.
			for name, f := range map[string]func() error{
				"Advance event error": func() error {
					return s.Advance(ctx(t), &store.AdvanceParams{RunID: "r", LeaseEpoch: epoch,
						Events: []store.Event{{Type: store.EventStepFailed, Error: bad}}})
				},
				"Append writer": func() error {
					_, err := s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Writer: bad, Attempt: 1, Chunks: chunks("a")})
					return err
				},
				"Append producer": func() error {
					_, err := s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Producer: &stream.Producer{ID: bad}, Chunks: chunks("a")})
					return err
				},
				"Append key": func() error {
					_, err := s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, IdempotencyKey: bad, Chunks: chunks("a")})
					return err
				},
				"Append stream seq": func() error {
					_, err := s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, StreamSeq: bad, Chunks: chunks("a")})
					return err
				},
				"FinishWriter": func() error {
					_, err := s.FinishWriter(ctx(t), &store.FinishWriterParams{StreamID: si.ID, Writer: bad, Attempt: 1})
					return err
				},
			} {
				calls[name] = f
			}
		}
		for name, call := range calls {
			if err := call(); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("%s(%.20q…): err = %v, want ErrInvalid", name, bad, err)
			}
		}
	}
	// Nothing changed.
	runs, err := s.ListRuns(ctx(t), &store.ListRunsParams{})
	must(t, err)
	if len(runs) != 1 {
		t.Fatalf("runs %v, want [r]", runIDs(runs))
	}
	evs, err := s.ListEvents(ctx(t), "r", 0)
	must(t, err)
	if len(evs) != 0 {
		t.Fatalf("events %+v, want none", evs)
	}
	if log := readAll(t, s, si.ID); len(log) != 0 {
		t.Fatalf("log %v, want none", log)
	}
}

// testClosedStore: after Close every operation returns ErrClosedStore, and
// so does a Wait that began before it.
func testClosedStore(t *testing.T, h harness) {
	t.Parallel()
	s := h.New(t)
	si := openStream(t, s, "s")
	waiting := make(chan struct{})
	waited := make(chan error, 1)
	go func() { waited <- s.Wait(&doneProbe{Context: ctx(t), called: waiting}, si.ID, 0) }()
	// The Wait asks for its context's Done channel when it blocks (or
	// queries): it began. Either way it must end with ErrClosedStore.
	select {
	case <-waiting:
	case <-ctx(t).Done():
		t.Fatal("Wait never looked at its context")
	}
	must(t, s.Close())
	select {
	case err := <-waited:
		wantErr(t, err, store.ErrClosedStore)
	case <-ctx(t).Done():
		t.Fatal("a Wait blocked at Close did not return")
	}
	_, err := s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Chunks: chunks("x")})
	wantErr(t, err, store.ErrClosedStore)
	_, err = s.Read(ctx(t), &store.ReadParams{StreamID: si.ID})
	wantErr(t, err, store.ErrClosedStore)
	_, err = s.GetRun(ctx(t), "r")
	wantErr(t, err, store.ErrClosedStore)
	_, _, err = s.CreateRun(ctx(t), &store.CreateRunParams{ID: "r", Workflow: "wf"})
	wantErr(t, err, store.ErrClosedStore)
	_, err = s.SendMessage(ctx(t), &store.SendMessageParams{RunID: "r", Topic: "t", Payload: []byte(`1`)})
	wantErr(t, err, store.ErrClosedStore)
	_, err = s.GetRunEvent(ctx(t), "r", "k")
	wantErr(t, err, store.ErrClosedStore)
	_, err = s.ListRunEvents(ctx(t), "r")
	wantErr(t, err, store.ErrClosedStore)
	_, err = s.ListRunEventsPage(ctx(t), &store.ListRunEventsParams{RunID: "r"})
	wantErr(t, err, store.ErrClosedStore)
	_, err = s.CountMessages(ctx(t), "r")
	wantErr(t, err, store.ErrClosedStore)
	must(t, s.Close()) // twice is harmless
}

// doneProbe is a context that reports the first call of Done.
type doneProbe struct {
	context.Context
	called chan struct{}
	once   sync.Once
}

func (c *doneProbe) Done() <-chan struct{} {
	c.once.Do(func() { close(c.called) })
	return c.Context.Done()
}
