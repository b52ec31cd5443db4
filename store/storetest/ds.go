package storetest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// testDS checks what the Durable Streams protocol needs of a store:
// CreateStream (options, forks), DeleteStream, TouchStream and the append
// options (producers, Stream-Seq, close, idempotency keys).
func testDS(t *testing.T, h harness) {
	t.Run("CreateStream", func(t *testing.T) { t.Parallel(); testCreateStream(t, h) })
	t.Run("Producer", func(t *testing.T) { t.Parallel(); testProducer(t, h) })
	t.Run("StreamSeq", func(t *testing.T) { t.Parallel(); testStreamSeq(t, h) })
	t.Run("CloseOptions", func(t *testing.T) { t.Parallel(); testCloseOptions(t, h) })
	t.Run("IdempotencyKey", func(t *testing.T) { t.Parallel(); testIdempotencyKey(t, h) })
	t.Run("Expiry", func(t *testing.T) { t.Parallel(); testExpiry(t, h) })
	t.Run("Fork", func(t *testing.T) { t.Parallel(); testFork(t, h) })
	t.Run("Delete", func(t *testing.T) { t.Parallel(); testDelete(t, h) })
	t.Run("AbortedIsReported", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := create(t, s, store.CreateStreamParams{Path: "a"})
		if res := appendOK(t, s, si.ID, "w", 1, 0, "a", "b"); res.Aborted {
			t.Fatal("a first append reported an abort")
		}
		if res := appendOK(t, s, si.ID, "w", 2, 0, "a"); res.Aborted {
			t.Fatal("an adopting retry reported an abort")
		}
		if res := appendOK(t, s, si.ID, "w", 2, 1, "X"); !res.Aborted {
			t.Fatal("a diverging retry reported no abort")
		}
	})
}

// t0 is the suite's clock for expiry tests: far from the store's own.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC)

func create(t *testing.T, s store.Full, p store.CreateStreamParams) *store.StreamInfo {
	t.Helper()
	si, created, err := s.CreateStream(ctx(t), &p)
	must(t, err)
	if !created {
		t.Fatalf("CreateStream(%q): not created", p.Path)
	}
	return si
}

func getStream(t *testing.T, s store.Full, id int64) *store.StreamInfo {
	t.Helper()
	si, err := s.GetStream(ctx(t), id)
	must(t, err)
	return si
}

// readLog reads the whole live view; unlike readAll it allows the offset
// holes a fork may have (the source's close record is not copied).
func readLog(t *testing.T, s store.Full, id int64) []stream.Record {
	t.Helper()
	var out []stream.Record
	from := int64(0)
	for {
		res, err := s.Read(ctx(t), &store.ReadParams{StreamID: id, From: from})
		must(t, err)
		for _, r := range res.Records {
			if r.Offset < from {
				t.Fatalf("read from %d: record at offset %d", from, r.Offset)
			}
			from = r.Offset + 1
		}
		out = append(out, res.Records...)
		if len(res.Records) == 0 {
			return out
		}
	}
}

func dataOf(log []stream.Record) []string {
	out := []string{}
	for _, r := range log {
		if r.Kind == stream.KindData {
			out = append(out, string(r.Data))
		}
	}
	return out
}

func producerAppend(t *testing.T, s store.Full, id int64, p stream.Producer, close bool, cs ...string) (*store.AppendResult, error) {
	t.Helper()
	return s.Append(ctx(t), &store.AppendParams{StreamID: id, Producer: &p, Close: close, Chunks: chunks(cs...)})
}

func testCreateStream(t *testing.T, h harness) {
	t.Run("Options", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := create(t, s, store.CreateStreamParams{Path: "a", ContentType: "text/plain; charset=utf-8",
			Expiry: store.Expiry{TTL: 90 * time.Second, HasTTL: true}, Now: t0})
		if si.ID == 0 || si.Path != "a" || si.RunID != "" || si.ContentType != "text/plain; charset=utf-8" ||
			si.NextOffset != 0 || si.Closed || !si.Expiry.HasTTL || si.Expiry.TTL != 90*time.Second ||
			!si.Expiry.At.IsZero() || !si.LastAccess.Equal(t0) || si.Fork != nil || si.Forks != 0 || si.Deleted ||
			si.ClosedBy != nil || si.StreamSeq != "" {
			t.Fatalf("created %+v", si)
		}
		at := t0.Add(time.Hour + 123*time.Millisecond)
		b := create(t, s, store.CreateStreamParams{Path: "b", Expiry: store.Expiry{At: at}, Chunks: chunks("x", "y"), Closed: true})
		if b.ContentType != "application/octet-stream" || b.Expiry.HasTTL || !b.Expiry.At.Equal(at) || !b.Closed || b.NextOffset != 3 {
			t.Fatalf("created %+v", b)
		}
		if log := readAll(t, s, b.ID); len(log) != 3 || !slices.Equal(dataOf(log), []string{"x", "y"}) || log[2].Kind != stream.KindClose ||
			log[0].Writer != "" || log[0].Attempt != 0 {
			t.Fatalf("log %v", log)
		}
		zero := create(t, s, store.CreateStreamParams{Path: "zero", Expiry: store.Expiry{HasTTL: true}})
		if !zero.Expiry.HasTTL || zero.Expiry.TTL != 0 {
			t.Fatalf("TTL 0 = %+v", zero.Expiry)
		}
		// Existing: returned as it is, whatever the request.
		again, created, err := s.CreateStream(ctx(t), &store.CreateStreamParams{Path: "a", ContentType: "application/json", Closed: true})
		must(t, err)
		if created || again.ID != si.ID || again.ContentType != si.ContentType || again.Closed {
			t.Fatalf("second create: created %v %+v", created, again)
		}
		got := getStream(t, s, si.ID)
		if got.Expiry != si.Expiry || !got.LastAccess.Equal(t0) {
			t.Fatalf("GetStream = %+v", got)
		}
		byPath, err := s.OpenStream(ctx(t), &store.OpenStreamParams{Path: "b"})
		must(t, err)
		if byPath.ID != b.ID || !byPath.Expiry.At.Equal(at) {
			t.Fatalf("OpenStream = %+v", byPath)
		}
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		createRun(t, s, "r1")
		for _, p := range []store.CreateStreamParams{
			{},
			{Path: "runs/r1/out"},
			{Path: "neg", Expiry: store.Expiry{HasTTL: true, TTL: -time.Second}},
		} {
			_, _, err := s.CreateStream(ctx(t), &p)
			wantErr(t, err, store.ErrInvalid)
		}
		_, _, err := s.CreateStream(ctx(t), &store.CreateStreamParams{Path: "big", Chunks: [][]byte{make([]byte, store.MaxChunkSize+1)}})
		wantErr(t, err, store.ErrTooLarge)
		_, err = s.OpenStream(ctx(t), &store.OpenStreamParams{Path: "big"})
		wantErr(t, err, store.ErrNotFound)
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		var wg sync.WaitGroup
		var mu sync.Mutex
		ids := map[int64]int{}
		for range 8 {
			wg.Go(func() {
				si, created, err := s.CreateStream(ctx(t), &store.CreateStreamParams{Path: "race", Chunks: chunks("first")})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if created {
					ids[si.ID]++
				} else if _, ok := ids[si.ID]; !ok {
					ids[si.ID] = 0
				}
			})
		}
		wg.Wait()
		if len(ids) != 1 {
			t.Fatalf("streams: %v", ids)
		}
		for id, n := range ids {
			if n != 1 {
				t.Fatalf("%d creators", n)
			}
			if got := dataOf(readAll(t, s, id)); !slices.Equal(got, []string{"first"}) {
				t.Fatalf("data %q", got)
			}
		}
	})
}

func testProducer(t *testing.T, h harness) {
	t.Run("Rules", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := create(t, s, store.CreateStreamParams{Path: "p"})
		res, err := producerAppend(t, s, si.ID, stream.Producer{ID: "A", Epoch: 0, Seq: 0}, false, "a0")
		must(t, err)
		if res.Duplicate || res.ProducerEpoch != 0 || res.ProducerSeq != 0 || res.NextOffset != 1 || len(res.Acks) != 1 {
			t.Fatalf("first = %+v", res)
		}
		_, err = producerAppend(t, s, si.ID, stream.Producer{ID: "A", Epoch: 0, Seq: 1}, false, "a1")
		must(t, err)
		res, err = producerAppend(t, s, si.ID, stream.Producer{ID: "A", Epoch: 0, Seq: 0}, false, "other bytes")
		must(t, err)
		if !res.Duplicate || res.ProducerSeq != 1 || res.NextOffset != 2 || len(res.Acks) != 0 {
			t.Fatalf("duplicate = %+v", res)
		}
		_, err = producerAppend(t, s, si.ID, stream.Producer{ID: "A", Epoch: 0, Seq: 3}, false, "x")
		var ge *stream.ProducerGapError
		if !errors.As(err, &ge) || ge.Expected != 2 || ge.Received != 3 {
			t.Fatalf("gap: %v", err)
		}
		_, err = producerAppend(t, s, si.ID, stream.Producer{ID: "B", Epoch: 0, Seq: 1}, false, "x")
		wantErr(t, err, stream.ErrProducerGap)
		_, err = producerAppend(t, s, si.ID, stream.Producer{ID: "A", Epoch: 1, Seq: 1}, false, "x")
		wantErr(t, err, stream.ErrEpochSeq)
		_, err = producerAppend(t, s, si.ID, stream.Producer{ID: "A", Epoch: 1, Seq: 0}, false, "a1.0")
		must(t, err)
		_, err = producerAppend(t, s, si.ID, stream.Producer{ID: "A", Epoch: 0, Seq: 2}, false, "zombie")
		var se *stream.StaleEpochError
		if !errors.As(err, &se) || se.Current != 1 {
			t.Fatalf("stale: %v", err)
		}
		if got := dataOf(readAll(t, s, si.ID)); !slices.Equal(got, []string{"a0", "a1", "a1.0"}) {
			t.Fatalf("data %q", got)
		}
		// With a writer: refused.
		_, err = s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Writer: "w", Producer: &stream.Producer{ID: "A"}, Chunks: chunks("x")})
		wantErr(t, err, store.ErrInvalid)
	})

	t.Run("StateIsCommittedWithTheAppend", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := create(t, s, store.CreateStreamParams{Path: "p"})
		// A refused append (too large) leaves no producer state: seq 0 is
		// still the next.
		_, err := s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Producer: &stream.Producer{ID: "A"},
			Chunks: [][]byte{make([]byte, store.MaxChunkSize+1)}})
		wantErr(t, err, store.ErrTooLarge)
		// A Stream-Seq refusal neither.
		_, err = s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, StreamSeq: "5", Chunks: chunks("s5")})
		must(t, err)
		_, err = s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Producer: &stream.Producer{ID: "A"}, StreamSeq: "4", Chunks: chunks("x")})
		wantErr(t, err, stream.ErrStreamSeq)
		res, err := producerAppend(t, s, si.ID, stream.Producer{ID: "A"}, false, "a0")
		must(t, err)
		if res.Duplicate {
			t.Fatal("seq 0 after refused requests is a duplicate")
		}
	})

	t.Run("ConcurrentSameSeq", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := create(t, s, store.CreateStreamParams{Path: "p"})
		var wg sync.WaitGroup
		var mu sync.Mutex
		accepted := 0
		for range 8 {
			wg.Go(func() {
				res, err := producerAppend(t, s, si.ID, stream.Producer{ID: "A"}, false, "once")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if !res.Duplicate {
					accepted++
				}
			})
		}
		wg.Wait()
		if got := dataOf(readAll(t, s, si.ID)); accepted != 1 || !slices.Equal(got, []string{"once"}) {
			t.Fatalf("accepted %d, data %q", accepted, got)
		}
	})
}

func testStreamSeq(t *testing.T, h harness) {
	s := h.New(t)
	si := create(t, s, store.CreateStreamParams{Path: "q"})
	for _, c := range []struct {
		seq string
		ok  bool
	}{{"2", true}, {"10", false}, {"2", false}, {"3", true}, {"", true}, {"30", true}} {
		_, err := s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, StreamSeq: c.seq, Chunks: chunks(c.seq)})
		if c.ok {
			must(t, err)
		} else {
			var se *stream.StreamSeqError
			if !errors.As(err, &se) || se.Got != c.seq {
				t.Fatalf("seq %q: err = %v", c.seq, err)
			}
		}
	}
	if got := getStream(t, s, si.ID).StreamSeq; got != "30" {
		t.Fatalf("StreamSeq = %q", got)
	}
}

func testCloseOptions(t *testing.T, h harness) {
	t.Run("CloseOnly", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := create(t, s, store.CreateStreamParams{Path: "c"})
		appendOK(t, s, si.ID, "", 0, 0, "a")
		for i := range 2 {
			res, err := s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Close: true})
			must(t, err)
			if !res.Closed || res.NextOffset != 2 || len(res.Acks) != 0 {
				t.Fatalf("close %d = %+v", i, res)
			}
		}
		if log := readAll(t, s, si.ID); len(log) != 2 || log[1].Kind != stream.KindClose {
			t.Fatalf("log %v", log)
		}
		_, err := s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Chunks: chunks("late"), Close: true})
		wantErr(t, err, stream.ErrClosed)
		_, err = producerAppend(t, s, si.ID, stream.Producer{ID: "P"}, true)
		wantErr(t, err, stream.ErrClosed)
	})

	t.Run("AppendAndCloseByProducer", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := create(t, s, store.CreateStreamParams{Path: "c"})
		res, err := producerAppend(t, s, si.ID, stream.Producer{ID: "P", Epoch: 0, Seq: 0}, true, "body-A")
		must(t, err)
		if !res.Closed || res.Duplicate || res.NextOffset != 2 || res.ProducerSeq != 0 {
			t.Fatalf("append and close = %+v", res)
		}
		got := getStream(t, s, si.ID)
		if !got.Closed || got.ClosedBy == nil || *got.ClosedBy != (stream.Producer{ID: "P", Epoch: 0, Seq: 0}) {
			t.Fatalf("closed stream = %+v", got)
		}
		// The closing request's retry, whatever its bytes, is acknowledged.
		res, err = producerAppend(t, s, si.ID, stream.Producer{ID: "P", Epoch: 0, Seq: 0}, true, "body-B")
		must(t, err)
		if !res.Duplicate || !res.Closed || res.NextOffset != 2 || res.ProducerSeq != 0 {
			t.Fatalf("retry = %+v", res)
		}
		for _, p := range []stream.Producer{{ID: "P", Epoch: 0, Seq: 1}, {ID: "Q"}} {
			_, err = producerAppend(t, s, si.ID, p, true, "x")
			wantErr(t, err, stream.ErrClosed)
		}
		if got := dataOf(readAll(t, s, si.ID)); !slices.Equal(got, []string{"body-A"}) {
			t.Fatalf("data %q", got)
		}
	})

	t.Run("ProducerCloseOnly", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := create(t, s, store.CreateStreamParams{Path: "c"})
		_, err := producerAppend(t, s, si.ID, stream.Producer{ID: "P"}, false, "a")
		must(t, err)
		res, err := producerAppend(t, s, si.ID, stream.Producer{ID: "P", Seq: 1}, true)
		must(t, err)
		if !res.Closed || res.Duplicate || res.ProducerSeq != 1 {
			t.Fatalf("close = %+v", res)
		}
		res, err = producerAppend(t, s, si.ID, stream.Producer{ID: "P", Seq: 1}, true)
		must(t, err)
		if !res.Closed || !res.Duplicate {
			t.Fatalf("close again = %+v", res)
		}
	})

	t.Run("WriterRetransmitAfterClose", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := create(t, s, store.CreateStreamParams{Path: "c"})
		appendOK(t, s, si.ID, "w", 1, 0, "a")
		_, err := s.FinishWriter(ctx(t), &store.FinishWriterParams{StreamID: si.ID, Writer: "w", Attempt: 1, Commit: true})
		must(t, err)
		res, err := s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Writer: "w", Attempt: 1, Chunks: chunks("a"), Close: true})
		must(t, err)
		if !res.Closed || len(res.Acks) != 1 || res.Acks[0].Outcome != stream.Retransmit {
			t.Fatalf("retransmit and close = %+v", res)
		}
		if log := readAll(t, s, si.ID); len(log) != 3 || log[2].Kind != stream.KindClose {
			t.Fatalf("log %v", log)
		}
	})
}

func testIdempotencyKey(t *testing.T, h harness) {
	t.Run("Replay", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := create(t, s, store.CreateStreamParams{Path: "k"})
		p := store.AppendParams{StreamID: si.ID, Chunks: chunks("a", "b"), IdempotencyKey: "k1", RequestDigest: []byte("d1")}
		first, err := s.Append(ctx(t), &p)
		must(t, err)
		appendOK(t, s, si.ID, "", 0, 0, "c")
		again, err := s.Append(ctx(t), &p)
		must(t, err)
		if !again.Replayed || first.Replayed || !slices.Equal(again.Acks, first.Acks) || again.NextOffset != first.NextOffset {
			t.Fatalf("first %+v, again %+v", first, again)
		}
		if got := dataOf(readAll(t, s, si.ID)); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("data %q", got)
		}
		other := p
		other.RequestDigest = []byte("d2")
		_, err = s.Append(ctx(t), &other)
		wantErr(t, err, store.ErrKeyReused)
		// Keys are per stream.
		si2 := create(t, s, store.CreateStreamParams{Path: "k2"})
		other.StreamID = si2.ID
		res, err := s.Append(ctx(t), &other)
		must(t, err)
		if res.Replayed {
			t.Fatal("a key replayed on another stream")
		}
		// A refused request leaves no key.
		fail := store.AppendParams{StreamID: si.ID, StreamSeq: "1", Chunks: chunks("x"), IdempotencyKey: "k3", RequestDigest: []byte("d3")}
		must2(t, s, &store.AppendParams{StreamID: si.ID, StreamSeq: "5", Chunks: chunks("s5")})
		_, err = s.Append(ctx(t), &fail)
		wantErr(t, err, stream.ErrStreamSeq)
		fail.StreamSeq = "6"
		res, err = s.Append(ctx(t), &fail)
		must(t, err)
		if res.Replayed {
			t.Fatal("a refused request's key replayed")
		}
	})

	// The drift the rules-once issue found from outside: a producer's
	// retry that carries a key is a success, so it saves the key, and the
	// key then refuses another body (PostgreSQL appended it).
	t.Run("ProducerDuplicateSavesTheKey", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := create(t, s, store.CreateStreamParams{Path: "k"})
		prod := &stream.Producer{ID: "p", Epoch: 0, Seq: 0}
		must2(t, s, &store.AppendParams{StreamID: si.ID, Chunks: chunks("a"), Producer: prod})
		res, err := s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Chunks: chunks("a"), Producer: prod,
			IdempotencyKey: "k", RequestDigest: []byte("d1")})
		must(t, err)
		if !res.Duplicate {
			t.Fatalf("the producer's retry: %+v, want a Duplicate", res)
		}
		_, err = s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Chunks: chunks("other"),
			IdempotencyKey: "k", RequestDigest: []byte("d2")})
		wantErr(t, err, store.ErrKeyReused)
		if got := dataOf(readAll(t, s, si.ID)); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("data %q, want [a]", got)
		}
	})

	// So does a close alone on a closed stream, acknowledged without a
	// record.
	t.Run("CloseOnClosedSavesTheKey", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := create(t, s, store.CreateStreamParams{Path: "k", Closed: true})
		p := store.AppendParams{StreamID: si.ID, Close: true, IdempotencyKey: "k", RequestDigest: []byte("d1")}
		first, err := s.Append(ctx(t), &p)
		must(t, err)
		again, err := s.Append(ctx(t), &p)
		must(t, err)
		if first.Replayed || !again.Replayed || !again.Closed {
			t.Fatalf("first %+v, again %+v", first, again)
		}
	})

	t.Run("Expires", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := create(t, s, store.CreateStreamParams{Path: "k", Now: t0})
		p := store.AppendParams{StreamID: si.ID, Chunks: chunks("a"), IdempotencyKey: "k", RequestDigest: []byte("d"),
			KeyTTL: time.Minute, Now: t0}
		_, err := s.Append(ctx(t), &p)
		must(t, err)
		p.Now = t0.Add(59 * time.Second)
		res, err := s.Append(ctx(t), &p)
		must(t, err)
		if !res.Replayed {
			t.Fatal("not replayed within its TTL")
		}
		p.Now = t0.Add(time.Minute)
		res, err = s.Append(ctx(t), &p)
		must(t, err)
		if res.Replayed {
			t.Fatal("replayed after its TTL")
		}
		if got := dataOf(readAll(t, s, si.ID)); !slices.Equal(got, []string{"a", "a"}) {
			t.Fatalf("data %q", got)
		}
	})

	t.Run("ReplaysDuplicatesAndCloses", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := create(t, s, store.CreateStreamParams{Path: "k"})
		p := store.AppendParams{StreamID: si.ID, Producer: &stream.Producer{ID: "P", Epoch: 2}, Close: true,
			Chunks: chunks("z"), IdempotencyKey: "k", RequestDigest: []byte("d")}
		first, err := s.Append(ctx(t), &p)
		must(t, err)
		again, err := s.Append(ctx(t), &p)
		must(t, err)
		if !again.Replayed || !again.Closed || again.ProducerEpoch != 2 || again.NextOffset != first.NextOffset || again.Duplicate {
			t.Fatalf("again = %+v", again)
		}
	})
}

func must2(t *testing.T, s store.Full, p *store.AppendParams) {
	t.Helper()
	_, err := s.Append(ctx(t), p)
	must(t, err)
}

func testExpiry(t *testing.T, h harness) {
	t.Run("Expired", func(t *testing.T) {
		t.Parallel()
		si := store.StreamInfo{LastAccess: t0, Expiry: store.Expiry{HasTTL: true, TTL: 2 * time.Second}}
		if si.Expired(t0.Add(2*time.Second-time.Millisecond)) || !si.Expired(t0.Add(2*time.Second)) {
			t.Fatal("TTL expiry is not exact")
		}
		si = store.StreamInfo{LastAccess: t0, Expiry: store.Expiry{At: t0.Add(time.Second)}}
		if si.Expired(t0.Add(999*time.Millisecond)) || !si.Expired(t0.Add(time.Second)) {
			t.Fatal("absolute expiry is not exact")
		}
		if (&store.StreamInfo{}).Expired(t0) {
			t.Fatal("no expiry expired")
		}
	})

	t.Run("AppendsRenewTouchRenewsExpiredRefuses", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := create(t, s, store.CreateStreamParams{Path: "ttl", Expiry: store.Expiry{HasTTL: true, TTL: 2 * time.Second}, Now: t0})
		_, err := s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Chunks: chunks("a"), Now: t0.Add(1500 * time.Millisecond)})
		must(t, err)
		if got := getStream(t, s, si.ID).LastAccess; !got.Equal(t0.Add(1500 * time.Millisecond)) {
			t.Fatalf("LastAccess after append = %v", got)
		}
		must(t, s.TouchStream(ctx(t), &store.TouchStreamParams{ID: si.ID, At: t0.Add(3 * time.Second)}))
		must(t, s.TouchStream(ctx(t), &store.TouchStreamParams{ID: si.ID, At: t0.Add(2 * time.Second)})) // never backwards
		if got := getStream(t, s, si.ID).LastAccess; !got.Equal(t0.Add(3 * time.Second)) {
			t.Fatalf("LastAccess after touch = %v", got)
		}
		_, err = s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Chunks: chunks("late"), Now: t0.Add(5 * time.Second)})
		wantErr(t, err, store.ErrNotFound)
		wantErr(t, s.TouchStream(ctx(t), &store.TouchStreamParams{ID: si.ID + 1000}), store.ErrNotFound)
		// Without a TTL, touching changes nothing.
		plain := create(t, s, store.CreateStreamParams{Path: "plain", Now: t0})
		must(t, s.TouchStream(ctx(t), &store.TouchStreamParams{ID: plain.ID, At: t0.Add(time.Hour)}))
		if got := getStream(t, s, plain.ID).LastAccess; !got.Equal(t0) {
			t.Fatalf("LastAccess without TTL = %v", got)
		}
		abs := create(t, s, store.CreateStreamParams{Path: "abs", Expiry: store.Expiry{At: t0.Add(time.Second)}, Now: t0})
		_, err = s.Append(ctx(t), &store.AppendParams{StreamID: abs.ID, Chunks: chunks("a"), Now: t0.Add(time.Second)})
		wantErr(t, err, store.ErrNotFound)
	})

	t.Run("DeleteIfExpired", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := create(t, s, store.CreateStreamParams{Path: "ttl", Expiry: store.Expiry{HasTTL: true, TTL: time.Second}, Now: t0})
		res, err := s.DeleteStream(ctx(t), &store.DeleteStreamParams{ID: si.ID, IfExpiredAt: t0.Add(999 * time.Millisecond)})
		must(t, err)
		if res != store.DeleteKept {
			t.Fatalf("not yet expired: %v", res)
		}
		res, err = s.DeleteStream(ctx(t), &store.DeleteStreamParams{ID: si.ID, IfExpiredAt: t0.Add(time.Second)})
		must(t, err)
		if res != store.DeleteFull {
			t.Fatalf("expired: %v", res)
		}
		_, err = s.GetStream(ctx(t), si.ID)
		wantErr(t, err, store.ErrNotFound)
	})
}

func testFork(t *testing.T, h harness) {
	t.Run("Copy", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		src := create(t, s, store.CreateStreamParams{Path: "src", ContentType: "text/plain", Chunks: chunks("A", "B")})
		appendOK(t, s, src.ID, "", 0, 0, "C")
		fork := create(t, s, store.CreateStreamParams{Path: "fork", ContentType: "text/plain", Fork: &store.ForkParams{SourceID: src.ID, Offset: 2}})
		if fork.NextOffset != 2 || fork.Fork == nil || *fork.Fork != (store.ForkInfo{SourceID: src.ID, SourcePath: "src", Offset: 2}) {
			t.Fatalf("fork = %+v %+v", fork, fork.Fork)
		}
		if got := dataOf(readLog(t, s, fork.ID)); !slices.Equal(got, []string{"A", "B"}) {
			t.Fatalf("fork data %q", got)
		}
		if got := getStream(t, s, src.ID); got.Forks != 1 {
			t.Fatalf("source forks = %d", got.Forks)
		}
		// Appends on either side are the other's business no more.
		appendOK(t, s, src.ID, "", 0, 0, "D")
		res := appendOK(t, s, fork.ID, "", 0, 0, "X")
		if res.Acks[0].Offset != 2 {
			t.Fatalf("fork append at %d", res.Acks[0].Offset)
		}
		if got := dataOf(readLog(t, s, fork.ID)); !slices.Equal(got, []string{"A", "B", "X"}) {
			t.Fatalf("fork data %q", got)
		}
		if got := dataOf(readLog(t, s, src.ID)); !slices.Equal(got, []string{"A", "B", "C", "D"}) {
			t.Fatalf("source data %q", got)
		}
		// Defaults: the source's next offset; forks of forks.
		whole := create(t, s, store.CreateStreamParams{Path: "whole", Fork: &store.ForkParams{SourceID: fork.ID, Offset: -1}})
		if whole.NextOffset != 3 || whole.Fork.Offset != 3 {
			t.Fatalf("fork at the tail = %+v", whole)
		}
		if got := dataOf(readLog(t, s, whole.ID)); !slices.Equal(got, []string{"A", "B", "X"}) {
			t.Fatalf("fork of fork %q", got)
		}
		empty := create(t, s, store.CreateStreamParams{Path: "empty", Fork: &store.ForkParams{SourceID: src.ID, Offset: 0}, Chunks: chunks("own")})
		if got := dataOf(readLog(t, s, empty.ID)); !slices.Equal(got, []string{"own"}) {
			t.Fatalf("fork at 0 %q", got)
		}
	})

	t.Run("ClosedSourceForksOpen", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		src := create(t, s, store.CreateStreamParams{Path: "src", Chunks: chunks("A"), Closed: true})
		fork := create(t, s, store.CreateStreamParams{Path: "fork", Fork: &store.ForkParams{SourceID: src.ID, Offset: -1}})
		if fork.Closed || fork.NextOffset != src.NextOffset {
			t.Fatalf("fork of a closed stream = %+v", fork)
		}
		res := appendOK(t, s, fork.ID, "", 0, 0, "B")
		if res.Acks[0].Offset != src.NextOffset {
			t.Fatalf("append at %d", res.Acks[0].Offset)
		}
		log := readLog(t, s, fork.ID)
		if got := dataOf(log); !slices.Equal(got, []string{"A", "B"}) {
			t.Fatalf("data %q", got)
		}
		for _, r := range log {
			if r.Kind == stream.KindClose {
				t.Fatalf("the close record was copied: %v", log)
			}
		}
		// A sub-offset into a closed stream's last record works too.
		sub := create(t, s, store.CreateStreamParams{Path: "sub", Fork: &store.ForkParams{SourceID: src.ID, Offset: 0, SubOffset: 1}})
		if got := dataOf(readLog(t, s, sub.ID)); !slices.Equal(got, []string{"A"}) || sub.Closed {
			t.Fatalf("sub %q %+v", got, sub)
		}
	})

	t.Run("SubOffset", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		src := create(t, s, store.CreateStreamParams{Path: "src", Chunks: chunks("first")})
		appendOK(t, s, src.ID, "", 0, 0, "second", "third")
		bytes := create(t, s, store.CreateStreamParams{Path: "b", Fork: &store.ForkParams{SourceID: src.ID, Offset: 1, SubOffset: 3}, Chunks: chunks("XY")})
		if bytes.NextOffset != 3 {
			t.Fatalf("next offset %d", bytes.NextOffset)
		}
		log := readLog(t, s, bytes.ID)
		if got := dataOf(log); !slices.Equal(got, []string{"first", "sec", "XY"}) || log[1].Offset != 1 || log[1].Digest != stream.Sum([]byte("sec")) {
			t.Fatalf("byte sub-offset: %v", log)
		}
		whole := create(t, s, store.CreateStreamParams{Path: "w", Fork: &store.ForkParams{SourceID: src.ID, Offset: 1, SubOffset: 6}})
		if got := dataOf(readLog(t, s, whole.ID)); !slices.Equal(got, []string{"first", "second"}) {
			t.Fatalf("sub-offset = length: %q", got)
		}
		recs := create(t, s, store.CreateStreamParams{Path: "r", Fork: &store.ForkParams{SourceID: src.ID, Offset: 0, SubOffset: 2, SubRecords: true}})
		if got := dataOf(readLog(t, s, recs.ID)); !slices.Equal(got, []string{"first", "second"}) || recs.NextOffset != 2 {
			t.Fatalf("record sub-offset: %q next %d", got, recs.NextOffset)
		}
		if recs.Fork.Offset != 0 || recs.Fork.SubOffset != 2 {
			t.Fatalf("fork info %+v", recs.Fork)
		}
		for _, fp := range []store.ForkParams{
			{SourceID: src.ID, Offset: 1, SubOffset: 7},
			{SourceID: src.ID, Offset: 0, SubOffset: 4, SubRecords: true},
			{SourceID: src.ID, Offset: -1, SubOffset: 1},
			{SourceID: src.ID, Offset: 4},
		} {
			_, _, err := s.CreateStream(ctx(t), &store.CreateStreamParams{Path: "bad", Fork: &fp})
			wantErr(t, err, store.ErrInvalid)
		}
		_, err := s.OpenStream(ctx(t), &store.OpenStreamParams{Path: "bad"})
		wantErr(t, err, store.ErrNotFound)
		if got := getStream(t, s, src.ID); got.Forks != 3 {
			t.Fatalf("refused forks took references: %d", got.Forks)
		}
	})

	t.Run("OpenWritersNeverCommitInTheFork", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		src := create(t, s, store.CreateStreamParams{Path: "src"})
		appendOK(t, s, src.ID, "done", 1, 0, "d0")
		_, err := s.FinishWriter(ctx(t), &store.FinishWriterParams{StreamID: src.ID, Writer: "done", Attempt: 1, Commit: true})
		must(t, err)
		appendOK(t, s, src.ID, "open", 1, 0, "o0", "o1")
		appendOK(t, s, src.ID, "", 0, 0, "anon")
		fork := create(t, s, store.CreateStreamParams{Path: "fork", Fork: &store.ForkParams{SourceID: src.ID, Offset: -1}})
		// The writer commits on the source after the fork: its data is in
		// the source's committed view only.
		_, err = s.FinishWriter(ctx(t), &store.FinishWriterParams{StreamID: src.ID, Writer: "open", Attempt: 1, Commit: true})
		must(t, err)
		if got := committed(readLog(t, s, src.ID)); !slices.Equal(got, []string{"d0", "o0", "o1", "anon"}) {
			t.Fatalf("source committed %q", got)
		}
		flog := readLog(t, s, fork.ID)
		if got := committed(flog); !slices.Equal(got, []string{"d0", "anon"}) {
			t.Fatalf("fork committed %q (%v)", got, flog)
		}
		if last := flog[len(flog)-1]; last.Kind != stream.KindAbort || last.Writer != "open" || last.FromSeq() != 0 || last.Offset != 5 || fork.NextOffset != 6 {
			t.Fatalf("fork log %v", flog)
		}
		// The same writer on the fork starts afresh: nothing of the copy is
		// adopted or counted.
		_, err = s.FinishWriter(ctx(t), &store.FinishWriterParams{StreamID: fork.ID, Writer: "done", Attempt: 1, Commit: true})
		wantErr(t, err, stream.ErrUnknownWriter)
		res := appendOK(t, s, fork.ID, "open", 2, 0, "o0")
		if res.Acks[0].Outcome != stream.Appended {
			t.Fatalf("fork writer adopted a copied record: %v", res.Acks)
		}
	})

	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		_, _, err := s.CreateStream(ctx(t), &store.CreateStreamParams{Path: "f", Fork: &store.ForkParams{SourceID: 12345}})
		wantErr(t, err, store.ErrNotFound)
		src := create(t, s, store.CreateStreamParams{Path: "src"})
		create(t, s, store.CreateStreamParams{Path: "f1", Fork: &store.ForkParams{SourceID: src.ID, Offset: -1}})
		res, err := s.DeleteStream(ctx(t), &store.DeleteStreamParams{ID: src.ID})
		must(t, err)
		if res != store.DeleteSoft {
			t.Fatalf("delete a forked source: %v", res)
		}
		_, _, err = s.CreateStream(ctx(t), &store.CreateStreamParams{Path: "f2", Fork: &store.ForkParams{SourceID: src.ID, Offset: -1}})
		wantErr(t, err, store.ErrGone)
	})
}

func testDelete(t *testing.T, h harness) {
	t.Run("Full", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := create(t, s, store.CreateStreamParams{Path: "d", Chunks: chunks("a")})
		_, err := producerAppend(t, s, si.ID, stream.Producer{ID: "P"}, false, "b")
		must(t, err)
		must2(t, s, &store.AppendParams{StreamID: si.ID, Chunks: chunks("c"), IdempotencyKey: "k", RequestDigest: []byte("d")})
		waited := make(chan error, 1)
		go func() { waited <- s.Wait(ctx(t), si.ID, 100) }()
		time.Sleep(10 * time.Millisecond)
		res, err := s.DeleteStream(ctx(t), &store.DeleteStreamParams{ID: si.ID})
		must(t, err)
		if res != store.DeleteFull {
			t.Fatalf("delete = %v", res)
		}
		select {
		case err := <-waited:
			wantErr(t, err, store.ErrNotFound)
		case <-time.After(5 * time.Second):
			t.Fatal("Wait did not return after a delete")
		}
		_, err = s.GetStream(ctx(t), si.ID)
		wantErr(t, err, store.ErrNotFound)
		_, err = s.DeleteStream(ctx(t), &store.DeleteStreamParams{ID: si.ID})
		wantErr(t, err, store.ErrNotFound)
		_, err = s.Read(ctx(t), &store.ReadParams{StreamID: si.ID})
		wantErr(t, err, store.ErrNotFound)
		// The path is free again; nothing of the old stream shows, and the
		// id is new (as it is after a restart).
		again := create(t, s, store.CreateStreamParams{Path: "d"})
		if again.ID == si.ID || again.NextOffset != 0 {
			t.Fatalf("recreated %+v (old id %d)", again, si.ID)
		}
		res2, err := producerAppend(t, s, again.ID, stream.Producer{ID: "P"}, false, "new")
		must(t, err)
		if res2.Duplicate {
			t.Fatal("producer state survived the delete")
		}
		r3, err := s.Append(ctx(t), &store.AppendParams{StreamID: again.ID, Chunks: chunks("c"), IdempotencyKey: "k", RequestDigest: []byte("d")})
		must(t, err)
		if r3.Replayed {
			t.Fatal("idempotency key survived the delete")
		}
		if got := dataOf(readAll(t, s, again.ID)); !slices.Equal(got, []string{"new", "c"}) {
			t.Fatalf("data %q", got)
		}
		last := create(t, s, store.CreateStreamParams{Path: "e"})
		_, err = s.DeleteStream(ctx(t), &store.DeleteStreamParams{ID: last.ID})
		must(t, err)
		next := create(t, s, store.CreateStreamParams{Path: "e"})
		if next.ID <= last.ID {
			t.Fatalf("the newest stream's id %d was given again (%d)", last.ID, next.ID)
		}
		createRun(t, s, "r1")
		rs := openRunStream(t, s, "r1", "out")
		_, err = s.DeleteStream(ctx(t), &store.DeleteStreamParams{ID: rs.ID})
		wantErr(t, err, store.ErrInvalid)
	})

	t.Run("SoftAndCascade", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		l0 := create(t, s, store.CreateStreamParams{Path: "l0", Chunks: chunks("A")})
		l1 := create(t, s, store.CreateStreamParams{Path: "l1", Fork: &store.ForkParams{SourceID: l0.ID, Offset: -1}, Chunks: chunks("B")})
		l2 := create(t, s, store.CreateStreamParams{Path: "l2", Fork: &store.ForkParams{SourceID: l1.ID, Offset: -1}, Chunks: chunks("C")})
		for _, id := range []int64{l0.ID, l1.ID} {
			res, err := s.DeleteStream(ctx(t), &store.DeleteStreamParams{ID: id})
			must(t, err)
			if res != store.DeleteSoft {
				t.Fatalf("delete %d = %v", id, res)
			}
			got := getStream(t, s, id)
			if !got.Deleted || got.Forks != 1 {
				t.Fatalf("soft-deleted = %+v", got)
			}
			_, err = s.DeleteStream(ctx(t), &store.DeleteStreamParams{ID: id})
			wantErr(t, err, store.ErrGone)
			_, err = s.Append(ctx(t), &store.AppendParams{StreamID: id, Chunks: chunks("x")})
			wantErr(t, err, store.ErrGone)
			res, err = s.DeleteStream(ctx(t), &store.DeleteStreamParams{ID: id, IfExpiredAt: t0})
			must(t, err)
			if res != store.DeleteKept {
				t.Fatalf("expiry of a soft-deleted stream = %v", res)
			}
		}
		// The soft-deleted streams still hold their records for whoever
		// reads them by id; forks have their own copy anyway.
		if got := dataOf(readLog(t, s, l2.ID)); !slices.Equal(got, []string{"A", "B", "C"}) {
			t.Fatalf("l2 %q", got)
		}
		res, err := s.DeleteStream(ctx(t), &store.DeleteStreamParams{ID: l2.ID})
		must(t, err)
		if res != store.DeleteFull {
			t.Fatalf("delete l2 = %v", res)
		}
		for _, id := range []int64{l2.ID, l1.ID, l0.ID} {
			_, err := s.GetStream(ctx(t), id)
			wantErr(t, err, store.ErrNotFound)
		}
	})

	t.Run("ForksOfALiveSource", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		src := create(t, s, store.CreateStreamParams{Path: "src", Chunks: chunks("alive")})
		var forks []int64
		for _, p := range []string{"f1", "f2"} {
			forks = append(forks, create(t, s, store.CreateStreamParams{Path: p, Fork: &store.ForkParams{SourceID: src.ID, Offset: -1}}).ID)
		}
		if got := getStream(t, s, src.ID).Forks; got != 2 {
			t.Fatalf("forks = %d", got)
		}
		for _, id := range forks {
			_, err := s.DeleteStream(ctx(t), &store.DeleteStreamParams{ID: id})
			must(t, err)
		}
		got := getStream(t, s, src.ID)
		if got.Forks != 0 || got.Deleted {
			t.Fatalf("source = %+v", got)
		}
		res, err := s.DeleteStream(ctx(t), &store.DeleteStreamParams{ID: src.ID})
		must(t, err)
		if res != store.DeleteFull {
			t.Fatalf("delete = %v", res)
		}
	})
}

// testDSReopen checks that the Durable Streams state survives a restart.
func testDSReopen(t *testing.T, h harness) {
	s := h.New(t)
	si := create(t, s, store.CreateStreamParams{Path: "r", ContentType: "application/json",
		Expiry: store.Expiry{TTL: time.Hour, HasTTL: true}, Now: t0})
	_, err := producerAppend(t, s, si.ID, stream.Producer{ID: "P", Epoch: 1}, false, "a")
	must(t, err)
	must2(t, s, &store.AppendParams{StreamID: si.ID, StreamSeq: "007", Chunks: chunks("b"), Now: t0.Add(time.Minute),
		IdempotencyKey: "k", RequestDigest: []byte("d")})
	fork := create(t, s, store.CreateStreamParams{Path: "f", Fork: &store.ForkParams{SourceID: si.ID, Offset: 1}})
	_, err = s.DeleteStream(ctx(t), &store.DeleteStreamParams{ID: si.ID})
	must(t, err)
	closed := create(t, s, store.CreateStreamParams{Path: "c"})
	_, err = producerAppend(t, s, closed.ID, stream.Producer{ID: "Q", Seq: 0}, true, "z")
	must(t, err)
	gone := create(t, s, store.CreateStreamParams{Path: "g"})
	_, err = s.DeleteStream(ctx(t), &store.DeleteStreamParams{ID: gone.ID})
	must(t, err)

	s = h.Reopen(t, s)
	got := getStream(t, s, si.ID)
	if !got.Deleted || got.Forks != 1 || got.StreamSeq != "007" || !got.LastAccess.Equal(t0.Add(time.Minute)) ||
		got.Expiry != si.Expiry || got.ContentType != "application/json" {
		t.Fatalf("after reopen %+v", got)
	}
	_, err = s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Chunks: chunks("x")})
	wantErr(t, err, store.ErrGone)
	f := getStream(t, s, fork.ID)
	if f.Fork == nil || f.Fork.SourceID != si.ID || f.Fork.SourcePath != "r" || f.Fork.Offset != 1 {
		t.Fatalf("fork after reopen %+v", f)
	}
	res, err := producerAppend(t, s, closed.ID, stream.Producer{ID: "Q", Seq: 0}, true, "z")
	must(t, err)
	if !res.Duplicate {
		t.Fatalf("closing retry after reopen = %+v", res)
	}
	next := create(t, s, store.CreateStreamParams{Path: "new"})
	if next.ID <= gone.ID {
		t.Fatalf("a deleted stream's id came back after reopen: %d <= %d", next.ID, gone.ID)
	}
	// Deleting the fork now deletes the soft-deleted source too.
	_, err = s.DeleteStream(ctx(t), &store.DeleteStreamParams{ID: fork.ID})
	must(t, err)
	_, err = s.GetStream(ctx(t), si.ID)
	wantErr(t, err, store.ErrNotFound)
}
