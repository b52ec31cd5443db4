package storetest

import (
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
func testConcurrency(t *testing.T, h Harness) {
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
}
