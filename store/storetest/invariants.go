package storetest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// testInvariants drives the engine's protocol (fence, append, retry, commit
// or abort in the step's Advance) through seeded random histories and checks
// the invariants of the stream contract at the end:
//
//  1. No duplicates: each (writer, seq) of a committed attempt is in the
//     committed view once, and nothing of a void record is.
//  2. No loss: every chunk acknowledged to an attempt that committed is in
//     the committed view, at the acknowledged offset.
//  3. Offsets are dense; none is reused (with Reopen: across restarts).
//  4. An append is all or nothing (appendErr checks the log after every
//     refused append).
//  5. The live view with aborts applied equals the committed view once
//     every writer has finished.
//  6. A fenced attempt adds no record once a newer one has begun.
func testInvariants(t *testing.T, h harness) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			t.Parallel()
			runHistory(t, h, seed)
		})
	}
}

type stepOutcome struct {
	committed bool
	out       [][]string     // per stream: the final attempt's chunks
	acks      [][]stream.Ack // per stream: their acks
}

func runHistory(t *testing.T, h harness, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	s := h.New(t)
	epoch := startRun(t, s, "r1")
	names := []string{"a", "b"}
	var ids []int64
	for _, n := range names {
		ids = append(ids, openRunStream(t, s, "r1", n).ID)
	}
	anon := make([][]string, len(ids))
	steps := map[string]*stepOutcome{}
	record := func(p store.AdvanceParams) {
		t.Helper()
		p.RunID, p.LeaseEpoch = "r1", epoch
		must(t, s.Advance(ctx(t), &p))
	}
	chunkN := 0
	fresh := func() string { chunkN++; return fmt.Sprintf("c%d", chunkN) }

	for step := 1; step <= 6; step++ {
		writer := fmt.Sprintf("step/%d", step)
		attempts := 1 + rng.IntN(3)
		commit := rng.IntN(5) > 0
		prev := make([][]string, len(ids))
		oc := &stepOutcome{committed: commit}
		for a := int64(1); a <= int64(attempts); a++ {
			record(store.AdvanceParams{
				Events: []store.Event{{Type: store.EventStepStarted, Op: int64(step), Attempt: a}},
				Fence:  &store.Fence{Writer: writer, Attempt: a},
			})
			last := a == int64(attempts)
			oc.out, oc.acks = make([][]string, len(ids)), make([][]stream.Ack, len(ids))
			for i, id := range ids {
				if a > 1 {
					// 6: the previous attempt is a zombie now.
					appendErr(t, s, id, writer, a-1, int64(len(prev[i])), stream.ErrFenced, "zombie")
				}
				// This attempt's output: the previous one again, or a
				// prefix of it followed by other bytes.
				var out []string
				if a > 1 && rng.IntN(2) == 0 {
					out = slices.Clone(prev[i])
				} else {
					out = slices.Clone(prev[i][:rng.IntN(len(prev[i])+1)])
					for range rng.IntN(6) {
						out = append(out, fresh())
					}
				}
				if !last {
					out = out[:rng.IntN(len(out)+1)] // fails part way
				}
				var acks []stream.Ack
				for seq := 0; seq < len(out); {
					n := min(1+rng.IntN(4), len(out)-seq)
					res := appendOK(t, s, id, writer, a, int64(seq), out[seq:seq+n]...)
					if rng.IntN(4) == 0 {
						// A lost reply: the same request again.
						again := appendOK(t, s, id, writer, a, int64(seq), out[seq:seq+n]...)
						for j := range again.Acks {
							if again.Acks[j].Offset != res.Acks[j].Offset || again.Acks[j].Outcome != stream.Retransmit {
								t.Fatalf("retransmit ack %v, first %v", again.Acks[j], res.Acks[j])
							}
						}
					}
					acks = append(acks, res.Acks...)
					seq += n
				}
				if rng.IntN(3) == 0 {
					anon[i] = append(anon[i], fresh())
					appendOK(t, s, id, "", 0, 0, anon[i][len(anon[i])-1])
				}
				prev[i], oc.out[i], oc.acks[i] = out, out, acks
			}
			if !last {
				record(store.AdvanceParams{Events: []store.Event{{Type: store.EventStepFailed, Op: int64(step), Attempt: a}}})
			}
		}
		ev := store.EventStepCompleted
		if !commit {
			ev = store.EventStepFailed
		}
		record(store.AdvanceParams{
			Events: []store.Event{{Type: ev, Op: int64(step), Attempt: int64(attempts), Final: !commit}},
			Finish: &store.Finish{Writer: writer, Attempt: int64(attempts), Commit: commit},
		})
		steps[writer] = oc
		if h.Harness.Reopen != nil && rng.IntN(3) == 0 {
			s = h.Reopen(t, s)
		}
	}
	record(store.AdvanceParams{Status: store.RunCompleted, CloseStreams: true})

	for i, id := range ids {
		si, err := s.GetStream(ctx(t), id)
		must(t, err)
		log := readAll(t, s, id)
		checkDense(t, log, si.NextOffset) // 3
		var view []stream.Record
		var c stream.Committed
		for j := range log {
			c.Push(&log[j], func(r *stream.Record) {
				if r.Kind == stream.KindData {
					view = append(view, *r)
				}
			})
		}
		byWriter := map[string][]stream.Record{}
		for _, r := range view {
			byWriter[r.Writer] = append(byWriter[r.Writer], r)
		}
		var gotAnon []string
		for _, r := range byWriter[""] {
			gotAnon = append(gotAnon, string(r.Data))
		}
		if !slices.Equal(gotAnon, anon[i]) {
			t.Fatalf("stream %s: anonymous chunks %q, want %q", names[i], gotAnon, anon[i])
		}
		for writer, oc := range steps {
			got := byWriter[writer]
			if !oc.committed {
				if len(got) > 0 {
					t.Fatalf("stream %s: aborted %s has %v in the committed view", names[i], writer, got)
				}
				continue
			}
			// 1 and 2: exactly the final attempt's chunks, once, in seq
			// order, at the offsets acknowledged to it.
			if len(got) != len(oc.out[i]) {
				t.Fatalf("stream %s: %s has %d committed chunks, want %d:\n%s", names[i], writer, len(got), len(oc.out[i]), kinds(log))
			}
			for q, r := range got {
				if r.Seq != int64(q) || string(r.Data) != oc.out[i][q] || r.Offset != oc.acks[i][q].Offset {
					t.Fatalf("stream %s: %s committed[%d] = %v, want seq %d %q at offset %d", names[i], writer, q, r, q, oc.out[i][q], oc.acks[i][q].Offset)
				}
			}
		}
		if len(view) != len(byWriter[""])+countCommitted(steps, i) {
			t.Fatalf("stream %s: committed view has stray records: %v", names[i], view)
		}
		// 5
		if live, comm := liveApplied(log), committed(log); !slices.Equal(live, comm) {
			t.Fatalf("stream %s: live view with aborts applied %q != committed view %q", names[i], live, comm)
		}
	}
}

func countCommitted(steps map[string]*stepOutcome, i int) int {
	n := 0
	for _, oc := range steps {
		if oc.committed {
			n += len(oc.out[i])
		}
	}
	return n
}
