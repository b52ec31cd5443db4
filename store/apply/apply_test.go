package apply

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// fixture: run "r" leased at epoch 1, its stream 1, standalone streams 2
// (with a 1h TTL) and 3.
func fixture() *memTx {
	m := newMemTx()
	m.runs["r"] = &Run{ID: "r", Epoch: 1, Owner: "w", Status: store.RunRunning}
	m.streams[1] = &Stream{ID: 1, RunID: "r"}
	m.streams[2] = &Stream{ID: 2, Expiry: store.Expiry{HasTTL: true, TTL: time.Hour}, LastAccess: t0}
	m.streams[3] = &Stream{ID: 3}
	return m
}

func chunks(s ...string) [][]byte {
	out := make([][]byte, len(s))
	for i, c := range s {
		out[i] = []byte(c)
	}
	return out
}

func app(p store.AppendParams) *store.AppendParams {
	if p.Now.IsZero() {
		p.Now = t0
	}
	return p.WithDefaults(func() time.Time { return t0 })
}

func mustAppend(t *testing.T, m *memTx, p store.AppendParams) *store.AppendResult {
	t.Helper()
	m.begin()
	res, err := Append(m, app(p))
	if err != nil {
		t.Fatalf("append %+v: %v", p, err)
	}
	return res
}

// The case found from outside (the rules-once issue): a producer's retry
// that carries an idempotency key saves the key, so the key then refuses
// another body. PostgreSQL's own copy of the rules returned before saving it.
func TestProducerDuplicateSavesItsKey(t *testing.T) {
	m := fixture()
	prod := &stream.Producer{ID: "p", Epoch: 0, Seq: 0}
	mustAppend(t, m, store.AppendParams{StreamID: 3, Chunks: chunks("a"), Producer: prod})
	res := mustAppend(t, m, store.AppendParams{StreamID: 3, Chunks: chunks("a"), Producer: prod,
		IdempotencyKey: "k", RequestDigest: []byte("d1")})
	if !res.Duplicate {
		t.Fatalf("producer retry: %+v, want a Duplicate", res)
	}
	m.begin()
	_, err := Append(m, app(store.AppendParams{StreamID: 3, Chunks: chunks("other"), IdempotencyKey: "k", RequestDigest: []byte("d2")}))
	if !errors.Is(err, store.ErrKeyReused) {
		t.Fatalf("other body with the key: err = %v, want ErrKeyReused", err)
	}
	if n := len(m.log[3]); n != 1 {
		t.Fatalf("log has %d records, want 1", n)
	}
}

// Every success saves its key, the closed-stream acknowledgements too.
func TestEverySuccessSavesItsKey(t *testing.T) {
	m := fixture()
	mustAppend(t, m, store.AppendParams{StreamID: 3, Close: true})
	res := mustAppend(t, m, store.AppendParams{StreamID: 3, Close: true, IdempotencyKey: "k", RequestDigest: []byte("d")})
	if !res.Closed || res.Replayed {
		t.Fatalf("close again: %+v", res)
	}
	again := mustAppend(t, m, store.AppendParams{StreamID: 3, Close: true, IdempotencyKey: "k", RequestDigest: []byte("d")})
	if !again.Replayed {
		t.Fatalf("the key was not saved: %+v", again)
	}
}

func TestAppendOrder(t *testing.T) {
	prod := func(e, s int64) *stream.Producer { return &stream.Producer{ID: "p", Epoch: e, Seq: s} }
	for _, tc := range []struct {
		name  string
		setup func(m *memTx)
		p     store.AppendParams
		want  error
	}{
		{"unknown stream", nil, store.AppendParams{StreamID: 9, Chunks: chunks("a")}, store.ErrNotFound},
		{"soft-deleted before expired", func(m *memTx) {
			m.streams[2].Deleted = true
			m.streams[2].LastAccess = t0.Add(-2 * time.Hour)
		}, store.AppendParams{StreamID: 2, Chunks: chunks("a")}, store.ErrGone},
		{"expired", func(m *memTx) { m.streams[2].LastAccess = t0.Add(-time.Hour) },
			store.AppendParams{StreamID: 2, Chunks: chunks("a")}, store.ErrNotFound},
		{"key before closed", func(m *memTx) {
			m.streams[3].Head.Closed = true
			m.keys[StreamKey{3, "k"}] = &Key{Digest: []byte("x"), Result: EncodeResult(&store.AppendResult{NextOffset: 7}), ExpiresAt: t0.Add(time.Hour)}
		}, store.AppendParams{StreamID: 3, Chunks: chunks("a"), IdempotencyKey: "k", RequestDigest: []byte("y")}, store.ErrKeyReused},
		{"expired key is new", func(m *memTx) {
			m.keys[StreamKey{3, "k"}] = &Key{Digest: []byte("x"), ExpiresAt: t0}
		}, store.AppendParams{StreamID: 3, Chunks: chunks("a"), IdempotencyKey: "k", RequestDigest: []byte("y")}, nil},
		{"closed", func(m *memTx) { m.streams[3].Head.Closed = true },
			store.AppendParams{StreamID: 3, Chunks: chunks("a")}, stream.ErrClosed},
		{"closed: the closing producer's retry", func(m *memTx) {
			m.streams[3].Head.Closed = true
			m.streams[3].ClosedBy = prod(0, 3)
		}, store.AppendParams{StreamID: 3, Chunks: chunks("a"), Producer: prod(0, 3), Close: true}, nil},
		{"closed before producer", func(m *memTx) {
			m.streams[3].Head.Closed = true
			m.producers[StreamKey{3, "p"}] = stream.ProducerState{Epoch: 0, LastSeq: 5}
		}, store.AppendParams{StreamID: 3, Chunks: chunks("a"), Producer: prod(0, 2)}, stream.ErrClosed},
		{"producer gap", nil, store.AppendParams{StreamID: 3, Chunks: chunks("a"), Producer: prod(0, 1)}, stream.ErrProducerGap},
		{"producer before stream seq", func(m *memTx) { m.streams[3].StreamSeq = "9" },
			store.AppendParams{StreamID: 3, Chunks: chunks("a"), Producer: prod(0, 1), StreamSeq: "1"}, stream.ErrProducerGap},
		{"stream seq before chunks", func(m *memTx) { m.streams[3].StreamSeq = "9" },
			store.AppendParams{StreamID: 3, Chunks: chunks("a"), Writer: "w", Attempt: 1, FirstSeq: 5, StreamSeq: "1"}, stream.ErrStreamSeq},
		{"fence of a run stream's writer", func(m *memTx) { m.fences[RunWriter{"r", "step/1"}] = 2 },
			store.AppendParams{StreamID: 1, Chunks: chunks("a"), Writer: "step/1", Attempt: 1}, stream.ErrFenced},
		{"no fence on a standalone stream", func(m *memTx) { m.fences[RunWriter{"", "step/1"}] = 2 },
			store.AppendParams{StreamID: 3, Chunks: chunks("a"), Writer: "step/1", Attempt: 1}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := fixture()
			if tc.setup != nil {
				tc.setup(m)
			}
			before := m.snapshot()
			m.begin()
			_, err := Append(m, app(tc.p))
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if err != nil {
				if d := m.diff(before); d != "" || m.saves > 0 {
					t.Fatalf("a refused append changed state (%s) or saved (%d)", d, m.saves)
				}
			}
		})
	}
}

func TestAppendRenewsTTLAndRecordsTheClosingProducer(t *testing.T) {
	m := fixture()
	p := &stream.Producer{ID: "p", Epoch: 1, Seq: 0}
	res := mustAppend(t, m, store.AppendParams{StreamID: 2, Chunks: chunks("a", "b"), Producer: p, Close: true,
		StreamSeq: "s1", Now: t0.Add(time.Minute)})
	st := m.streams[2]
	if !res.Closed || res.NextOffset != 3 || st.LastAccess != t0.Add(time.Minute) || *st.ClosedBy != *p || st.StreamSeq != "s1" {
		t.Fatalf("res %+v, stream %+v", res, st)
	}
	if ps := m.producers[StreamKey{2, "p"}]; ps != (stream.ProducerState{Epoch: 1, LastSeq: 0}) {
		t.Fatalf("producer %+v", ps)
	}
}

func leased(p store.AdvanceParams) *store.AdvanceParams {
	p.RunID, p.LeaseEpoch = "r", 1
	return &p
}

func TestRecordLease(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(r *Run)
		msg   string
	}{
		{"epoch", func(r *Run) { r.Epoch = 2 }, `lease lost: run "r" is at lease epoch 2, not 1`},
		{"terminal", func(r *Run) { r.Status = store.RunCompleted }, `lease lost: run "r" is completed`},
		{"released", func(r *Run) { r.Owner = "" }, `lease lost: run "r"'s lease was released`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := fixture()
			tc.setup(m.runs["r"])
			before := m.snapshot()
			m.begin()
			err := Advance(m, leased(store.AdvanceParams{Events: []store.Event{{Type: store.EventRunStarted}}}), t0)
			if !errors.Is(err, store.ErrLeaseLost) || err.Error() != tc.msg {
				t.Fatalf("err = %v, want %q", err, tc.msg)
			}
			if d := m.diff(before); d != "" || m.saves > 0 {
				t.Fatalf("changed %s, saves %d", d, m.saves)
			}
		})
	}
}

// A finish that one stream refuses refuses the whole Advance, and nothing
// of it is written, though other streams would have taken it.
func TestRecordFinishRefusedOnOneStreamChangesNothing(t *testing.T) {
	m := fixture()
	m.streams[4] = &Stream{ID: 4, RunID: "r"}
	w := "step/1"
	mustAppend(t, m, store.AppendParams{StreamID: 1, Writer: w, Attempt: 1, Chunks: chunks("a")})
	mustAppend(t, m, store.AppendParams{StreamID: 4, Writer: w, Attempt: 1, Chunks: chunks("b")})
	m.streams[4].Head.Closed = true // closed under the writer: it cannot commit there
	before := m.snapshot()
	m.begin()
	err := Advance(m, leased(store.AdvanceParams{
		Events: []store.Event{{Type: store.EventStepCompleted, Op: 1}},
		Fence:  &store.Fence{Writer: w, Attempt: 1},
		Finish: &store.Finish{Writer: w, Attempt: 1, Commit: true},
	}), t0)
	if !errors.Is(err, stream.ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", err)
	}
	if d := m.diff(before); d != "" || m.saves > 0 {
		t.Fatalf("changed %s, saves %d", d, m.saves)
	}
}

// An Advance's finish is decided against the fence as it was, and the fence
// it raises comes after: an attempt that fails for good is aborted and
// fenced off at once, even from the streams it never wrote on (issue 19's
// third case: a last attempt that timed out after writing). A finish
// below the fence as it was is refused.
func TestRecordFinishesThenFences(t *testing.T) {
	m := fixture()
	w := "step/1"
	mustAppend(t, m, store.AppendParams{StreamID: 1, Writer: w, Attempt: 2, Chunks: chunks("a")})
	m.begin()
	if err := Advance(m, leased(store.AdvanceParams{
		Fence:  &store.Fence{Writer: w, Attempt: 3},
		Finish: &store.Finish{Writer: w, Attempt: 2},
	}), t0); err != nil {
		t.Fatal(err)
	}
	if m.fences[RunWriter{"r", w}] != 3 {
		t.Fatalf("fence %d, want 3", m.fences[RunWriter{"r", w}])
	}
	if last := m.log[1][len(m.log[1])-1]; last.Kind != stream.KindAbort || last.Attempt != 2 {
		t.Fatalf("last record %v, want the abort of attempt 2", last)
	}
	// The zombie of attempt 2 is refused on a stream it never wrote on.
	m.streams[4] = &Stream{ID: 4, RunID: "r"}
	if _, err := Append(m, app(store.AppendParams{StreamID: 4, Writer: w, Attempt: 2, Chunks: chunks("late")})); !errors.Is(err, stream.ErrFenced) {
		t.Fatalf("a late append of the fenced attempt elsewhere: %v, want ErrFenced", err)
	}
	m.begin()
	err := Advance(m, leased(store.AdvanceParams{Finish: &store.Finish{Writer: w, Attempt: 2, Commit: true}}), t0)
	var fe *stream.FencedError
	if !errors.As(err, &fe) || fe.Current != 3 {
		t.Fatalf("a finish below the fence: %v, want fenced at 3", err)
	}
}

func TestRecordWritesInOrder(t *testing.T) {
	m := fixture()
	w := "step/1"
	mustAppend(t, m, store.AppendParams{StreamID: 1, Writer: w, Attempt: 1, Chunks: chunks("a", "b")})
	m.begin()
	err := Advance(m, leased(store.AdvanceParams{
		Events:       []store.Event{{Type: store.EventStepCompleted, Op: 1}, {Type: store.EventRunCompleted, At: t0.Add(time.Second)}},
		Fence:        &store.Fence{Writer: w, Attempt: 1},
		Finish:       &store.Finish{Writer: w, Attempt: 1, Commit: true},
		Status:       store.RunCompleted,
		Output:       []byte("42"),
		CloseStreams: true,
	}), t0)
	if err != nil {
		t.Fatal(err)
	}
	kinds := []stream.Kind{}
	for _, r := range m.log[1] {
		kinds = append(kinds, r.Kind)
	}
	if !slices.Equal(kinds, []stream.Kind{stream.KindData, stream.KindData, stream.KindCommit, stream.KindClose}) {
		t.Fatalf("log kinds %v", kinds)
	}
	evs := m.events["r"]
	if len(evs) != 2 || evs[0].Seq != 1 || !evs[0].At.Equal(t0) || evs[1].Seq != 2 || !evs[1].At.Equal(t0.Add(time.Second)) {
		t.Fatalf("events %+v", evs)
	}
	c := m.changes["r"][0]
	if c.Status != store.RunCompleted || !c.Release || !c.Ended || string(c.Output) != "42" || m.runs["r"].Owner != "" {
		t.Fatalf("change %+v, run %+v", c, m.runs["r"])
	}
	if m.fences[RunWriter{"r", w}] != 1 {
		t.Fatal("fence not raised")
	}
}

func TestDeleteAndRelease(t *testing.T) {
	st := &Stream{ID: 1, Forks: 1}
	if res, err := Delete(st, &store.DeleteStreamParams{ID: 1}); res != store.DeleteSoft || err != nil || !st.Deleted {
		t.Fatalf("with a fork: %v %v %+v", res, err, st)
	}
	if _, err := Delete(st, &store.DeleteStreamParams{ID: 1}); !errors.Is(err, store.ErrGone) {
		t.Fatalf("again: %v", err)
	}
	if res, _ := Delete(st, &store.DeleteStreamParams{ID: 1, IfExpiredAt: t0}); res != store.DeleteKept {
		t.Fatalf("lazy expiry of a soft-deleted stream: %v", res)
	}
	if !Release(st) || st.Forks != 0 {
		t.Fatalf("release of the last fork of a soft-deleted source: %+v", st)
	}
	if _, err := Delete(&Stream{ID: 2, RunID: "r"}, &store.DeleteStreamParams{ID: 2}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("a run's stream: %v", err)
	}
	exp := &Stream{ID: 3, Expiry: store.Expiry{At: t0}}
	if res, _ := Delete(exp, &store.DeleteStreamParams{ID: 3, IfExpiredAt: t0.Add(-1)}); res != store.DeleteKept {
		t.Fatal("deleted before it expired")
	}
	if res, _ := Delete(exp, &store.DeleteStreamParams{ID: 3, IfExpiredAt: t0}); res != store.DeleteFull {
		t.Fatal("kept when expired")
	}
}

func TestForkPoint(t *testing.T) {
	src := &Stream{ID: 1, Head: stream.Head{NextOffset: 5}}
	for _, tc := range []struct {
		off  int64
		want int64
		err  error
	}{{-1, 5, nil}, {0, 0, nil}, {5, 5, nil}, {6, 0, store.ErrInvalid}} {
		got, err := ForkPoint(src, &store.ForkParams{Offset: tc.off})
		if got != tc.want || !errors.Is(err, tc.err) && !(err == nil && tc.err == nil) {
			t.Errorf("ForkPoint(%d) = %d, %v; want %d, %v", tc.off, got, err, tc.want, tc.err)
		}
	}
	src.Deleted = true
	if _, err := ForkPoint(src, &store.ForkParams{Offset: 0}); !errors.Is(err, store.ErrGone) {
		t.Fatalf("deleted source: %v", err)
	}
}

func TestKeyResultRoundTrip(t *testing.T) {
	res := &store.AppendResult{Acks: []stream.Ack{{Offset: 3, Outcome: stream.Adopted}}, NextOffset: 4, Aborted: true,
		Closed: true, Duplicate: true, ProducerEpoch: 2, ProducerSeq: 9}
	got, err := DecodeResult(EncodeResult(res))
	if err != nil {
		t.Fatal(err)
	}
	res.Replayed = true
	if fmt.Sprint(got) != fmt.Sprint(res) {
		t.Fatalf("got %+v, want %+v", got, res)
	}
}

// A save that fails fails the request with the save's error, whatever it
// was doing: a backend rolls it back.
func TestSaveFailuresReachTheCaller(t *testing.T) {
	for n := 1; n <= 6; n++ {
		m := fixture()
		m.failAt = n
		m.begin()
		err := Advance(m, leased(store.AdvanceParams{
			Events: []store.Event{{Type: store.EventStepStarted, Op: 1}},
			Fence:  &store.Fence{Writer: "step/1", Attempt: 1}, CloseStreams: true, Status: store.RunCompleted,
		}), t0)
		if n <= m.saves && !errors.Is(err, errInjected) {
			t.Fatalf("save %d failed: err = %v", n, err)
		}
	}
}

// TestProperties runs random requests on random state and holds the rules
// to their contracts: every load is one the request's Reads list (so a
// backend that reads ahead reads enough), a refused request changed nothing
// and saved nothing, and the logs stay dense (memTx panics otherwise).
func TestProperties(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 50
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { property(t, uint64(seed)) })
	}
}

func property(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	m := fixture()
	m.streams[4] = &Stream{ID: 4, RunID: "r"}
	writers := []string{"step/1", "step/2", "workflow"}
	now := t0
	pick := func(n int) int { return rng.IntN(n) }
	for i := range 200 {
		now = now.Add(time.Duration(pick(3)) * 20 * time.Minute)
		var reads Reads
		var err error
		var desc string
		before := m.snapshot()
		m.begin()
		switch pick(4) {
		case 0, 1:
			p := store.AppendParams{StreamID: int64(1 + pick(4)), Now: now}
			for range pick(3) {
				p.Chunks = append(p.Chunks, []byte{byte('a' + pick(3))})
			}
			switch pick(3) {
			case 0:
				p.Writer = writers[pick(len(writers))]
				p.Attempt, p.FirstSeq = int64(pick(4)), int64(pick(3))
			case 1:
				p.Producer = &stream.Producer{ID: "p", Epoch: int64(pick(2)), Seq: int64(pick(3))}
			}
			if pick(3) == 0 {
				p.IdempotencyKey, p.RequestDigest = fmt.Sprint("k", pick(2)), []byte{byte(pick(2))}
			}
			if pick(4) == 0 {
				p.StreamSeq = fmt.Sprint(pick(10))
			}
			p.Close = pick(8) == 0
			if p.Check() != nil {
				continue
			}
			desc = fmt.Sprintf("append %+v", p)
			run := m.streams[p.StreamID].RunID
			reads.AppendReads(&p, run)
			_, err = Append(m, p.WithDefaults(func() time.Time { return now }))
		case 2:
			p := store.AdvanceParams{RunID: "r", LeaseEpoch: int64(1 + pick(2)/1)}
			if pick(2) == 0 {
				p.Events = []store.Event{{Type: store.EventStepStarted, Op: int64(pick(3))}}
			}
			w := writers[pick(2)]
			if pick(2) == 0 {
				p.Fence = &store.Fence{Writer: w, Attempt: int64(1 + pick(3))}
			}
			if pick(2) == 0 {
				p.Finish = &store.Finish{Writer: w, Attempt: int64(1 + pick(3)), Commit: pick(2) == 0}
			}
			p.CloseStreams = pick(10) == 0
			desc = fmt.Sprintf("record %+v fence %+v finish %+v", p, p.Fence, p.Finish)
			reads.AdvanceReads(&p)
			err = Advance(m, &p, now)
		case 3:
			if pick(2) == 0 {
				id := int64(1 + pick(4))
				p := store.FinishWriterParams{StreamID: id, Writer: writers[pick(2)], Attempt: int64(pick(4)), Commit: pick(2) == 0}
				desc = fmt.Sprintf("finish %+v", p)
				reads.FinishReads(&p, m.streams[id].RunID)
				_, err = Finish(m, &p)
			} else {
				id := int64(1 + pick(4))
				desc = fmt.Sprintf("close %d", id)
				reads.CloseReads(id)
				_, err = Close(m, id)
			}
		}
		if miss := unlisted(m, &m.loads, &reads); miss != "" {
			t.Fatalf("op %d, %s: loaded %s, which its Reads do not list", i, desc, miss)
		}
		if err != nil {
			if d := m.diff(before); d != "" || m.saves > 0 {
				t.Fatalf("op %d, %s: refused (%v) but changed %s, saved %d", i, desc, err, d, m.saves)
			}
		}
	}
}

// unlisted returns a load of got that want does not list, "" if none.
func unlisted(m *memTx, got, want *Reads) string {
	for _, id := range got.Streams {
		if !slices.Contains(want.Streams, id) {
			return fmt.Sprintf("stream %d", id)
		}
	}
	for _, r := range got.Runs {
		if !slices.Contains(want.Runs, r) {
			return fmt.Sprintf("run %q", r)
		}
	}
	for _, r := range got.RunStreams {
		if !slices.Contains(want.RunStreams, r) {
			return fmt.Sprintf("the streams of run %q", r)
		}
	}
	for _, w := range got.Writers {
		run := m.streams[w.Stream].RunID
		if !slices.Contains(want.Writers, w) && !slices.Contains(want.RunWriters, RunWriter{run, w.Writer}) {
			return fmt.Sprintf("writer %+v", w)
		}
	}
	for _, w := range got.RunWriters {
		if !slices.Contains(want.RunWriters, w) {
			return fmt.Sprintf("the writer %+v on its run's streams", w)
		}
	}
	for _, f := range got.Fences {
		if !slices.Contains(want.Fences, f) {
			return fmt.Sprintf("fence %+v", f)
		}
	}
	for _, k := range got.Producers {
		if !slices.Contains(want.Producers, k) {
			return fmt.Sprintf("producer %+v", k)
		}
	}
	for _, k := range got.Keys {
		if !slices.Contains(want.Keys, k) {
			return fmt.Sprintf("key %+v", k)
		}
	}
	return ""
}
