package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// testConcurrency appends from many goroutines at once, to different streams
// and as different writers of one stream, retransmitting as it goes: every
// ack must match the log, and no chunk may be lost or doubled.
func testConcurrency(t *testing.T, h harness) {
	t.Run("ManyWritersManyStreams", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		const (
			nStreams = 4
			nWriters = 3 // step writers per stream, plus one anonymous
			nAppends = 12
			perAp    = 5
		)
		type key struct {
			stream int64
			writer string
		}
		var (
			mu   sync.Mutex
			acks = map[key][]stream.Ack{} // in seq order (anonymous: in request order)
			sent = map[key][]string{}
		)
		var ids []int64
		for i := range nStreams {
			ids = append(ids, openStream(t, s, fmt.Sprintf("s%d", i)).ID)
		}
		var wg sync.WaitGroup
		for _, id := range ids {
			for w := range nWriters + 1 {
				writer, attempt := fmt.Sprintf("w%d", w), int64(1)
				if w == nWriters {
					writer, attempt = "", 0
				}
				wg.Go(func() {
					k := key{id, writer}
					var mine []stream.Ack
					var data []string
					for a := range nAppends {
						var cs []string
						for c := range perAp {
							cs = append(cs, fmt.Sprintf("%d/%s/%d", id, writer, a*perAp+c))
						}
						seq := int64(0)
						if writer != "" {
							seq = int64(a * perAp)
						}
						p := &store.AppendParams{StreamID: id, Writer: writer, Attempt: attempt, FirstSeq: seq, Chunks: chunks(cs...)}
						res, err := s.Append(ctx(t), p)
						if err != nil {
							t.Errorf("append %v: %v", k, err)
							return
						}
						mine = append(mine, res.Acks...)
						data = append(data, cs...)
						// A writer's retransmit gets the same offsets back.
						if writer != "" && a%3 == 1 {
							again, err := s.Append(ctx(t), p)
							if err != nil {
								t.Errorf("retransmit %v: %v", k, err)
								return
							}
							for i, ack := range again.Acks {
								if ack.Outcome != stream.Retransmit || ack.Offset != res.Acks[i].Offset {
									t.Errorf("retransmit %v: ack %v, first ack %v", k, ack, res.Acks[i])
								}
							}
						}
					}
					mu.Lock()
					acks[k], sent[k] = mine, data
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		if t.Failed() {
			return
		}

		for _, id := range ids {
			si, err := s.GetStream(ctx(t), id)
			must(t, err)
			log := readAll(t, s, id)
			checkDense(t, log, si.NextOffset)
			if want := (nWriters + 1) * nAppends * perAp; len(log) != want {
				t.Fatalf("stream %d has %d records, want %d", id, len(log), want)
			}
			for w := range nWriters + 1 {
				writer := fmt.Sprintf("w%d", w)
				if w == nWriters {
					writer = ""
				}
				k := key{id, writer}
				for i, ack := range acks[k] {
					r := log[ack.Offset]
					if ack.Outcome != stream.Appended || string(r.Data) != sent[k][i] || r.Writer != writer ||
						writer != "" && r.Seq != int64(i) {
						t.Fatalf("stream %d writer %q chunk %d: ack %v, record %v", id, writer, i, ack, r)
					}
				}
			}
		}

		// Commit every writer at once; the committed view then holds every
		// chunk once, each writer's in seq order.
		for _, id := range ids {
			for w := range nWriters {
				wg.Go(func() {
					_, err := s.FinishWriter(ctx(t), &store.FinishWriterParams{StreamID: id, Writer: fmt.Sprintf("w%d", w), Attempt: 1, Commit: true})
					if err != nil {
						t.Error(err)
					}
				})
			}
		}
		wg.Wait()
		for _, id := range ids {
			got := committed(readAll(t, s, id))
			if len(got) != (nWriters+1)*nAppends*perAp {
				t.Fatalf("stream %d: committed view has %d chunks", id, len(got))
			}
			for w := range nWriters + 1 {
				writer := fmt.Sprintf("w%d", w)
				if w == nWriters {
					writer = ""
				}
				prefix := fmt.Sprintf("%d/%s/", id, writer)
				var mine []string
				for _, c := range got {
					if len(c) > len(prefix) && c[:len(prefix)] == prefix {
						mine = append(mine, c)
					}
				}
				if !slices.Equal(mine, sent[key{id, writer}]) {
					t.Fatalf("stream %d writer %q: committed %q, sent %q", id, writer, mine, sent[key{id, writer}])
				}
			}
		}
	})

	t.Run("FailuresStayAlone", func(t *testing.T) {
		t.Parallel()
		// Operations that fail, some after changing state (an Advance whose
		// commit succeeds on one stream and is fenced on the next), run at
		// once with operations that succeed, so that stores that share
		// transactions between callers mix them: each failure must undo
		// itself alone.
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		a := openRunStream(t, s, "r1", "a")
		b := openRunStream(t, s, "r1", "b")
		appendOK(t, s, a.ID, "split", 1, 0, "s0")
		appendOK(t, s, b.ID, "split", 2, 0, "s0")
		appendOK(t, s, a.ID, "good", 1, 0, "g0")
		const n = 20
		var wg sync.WaitGroup
		var goodAcks []stream.Ack
		var goodSent []string
		wg.Go(func() {
			for i := 1; i <= n; i++ {
				c := fmt.Sprintf("g%d", i)
				res, err := s.Append(ctx(t), &store.AppendParams{StreamID: a.ID, Writer: "good", Attempt: 1, FirstSeq: int64(i), Chunks: chunks(c)})
				if err != nil {
					t.Errorf("good append: %v", err)
					return
				}
				goodAcks, goodSent = append(goodAcks, res.Acks...), append(goodSent, c)
			}
		})
		wg.Go(func() {
			for i := range n {
				if _, err := s.Append(ctx(t), &store.AppendParams{StreamID: b.ID, Chunks: chunks(fmt.Sprintf("n%d", i))}); err != nil {
					t.Errorf("anonymous append: %v", err)
					return
				}
			}
		})
		wg.Go(func() {
			for range n {
				_, err := s.Append(ctx(t), &store.AppendParams{StreamID: a.ID, Writer: "good", Attempt: 1, Chunks: chunks("X")})
				if !errors.Is(err, stream.ErrConflict) {
					t.Errorf("conflicting append: err = %v", err)
				}
				_, err = s.Append(ctx(t), &store.AppendParams{StreamID: a.ID, Writer: "good", Attempt: 1, FirstSeq: 1 << 40, Chunks: chunks("X")})
				if !errors.Is(err, stream.ErrGap) {
					t.Errorf("gap append: err = %v", err)
				}
			}
		})
		wg.Go(func() {
			for range n {
				err := s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch,
					Events: []store.Event{{Type: store.EventStepCompleted, Name: "bad"}},
					Finish: &store.Finish{Writer: "split", Attempt: 1, Commit: true}})
				if !errors.Is(err, stream.ErrFenced) {
					t.Errorf("fenced Advance: err = %v", err)
				}
			}
		})
		wg.Go(func() {
			for range n {
				err := s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch,
					Events: []store.Event{{Type: store.EventStepStarted, Name: "ok"}}})
				if err != nil {
					t.Errorf("Advance: %v", err)
				}
			}
		})
		wg.Wait()
		if t.Failed() {
			return
		}
		evs, err := s.ListEvents(ctx(t), "r1", 0)
		must(t, err)
		if len(evs) != n {
			t.Fatalf("%d events, want %d", len(evs), n)
		}
		for i, e := range evs {
			if e.Seq != int64(i+1) || e.Name != "ok" {
				t.Fatalf("event %d = %+v", i, e)
			}
		}
		logA, logB := readAll(t, s, a.ID), readAll(t, s, b.ID)
		sa, err := s.GetStream(ctx(t), a.ID)
		must(t, err)
		sb, err := s.GetStream(ctx(t), b.ID)
		must(t, err)
		checkDense(t, logA, sa.NextOffset)
		checkDense(t, logB, sb.NextOffset)
		if len(logA) != 2+n || len(logB) != 1+n {
			t.Fatalf("stray records:\n a: %s\n b: %s", kinds(logA), kinds(logB))
		}
		for i, ack := range goodAcks {
			if r := logA[ack.Offset]; r.Writer != "good" || string(r.Data) != goodSent[i] {
				t.Fatalf("good chunk %d acked at %d, which holds %v", i, ack.Offset, r)
			}
		}
		// The state the failed Advances touched is intact.
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Finish: &store.Finish{Writer: "split", Attempt: 2, Commit: true}}))
		logA, logB = readAll(t, s, a.ID), readAll(t, s, b.ID)
		if got := kinds(logA[len(logA)-2:]); got != fmt.Sprintf("%d:abort{split a2 from 0} %d:commit{split a2 count 0} ", len(logA)-2, len(logA)-1) {
			t.Fatalf("stream a ends with %s", got)
		}
		if last := logB[len(logB)-1]; last.Kind != stream.KindCommit || last.Count() != 1 || last.Offset != int64(len(logB)-1) {
			t.Fatalf("stream b ends with %v", last)
		}
	})
}
