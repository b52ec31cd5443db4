package sqlitestore_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/sqlitestore"
	"github.com/weirhq/weir/stream"
)

// The benchmarks append 100-byte chunks in requests of 1000, as the SDK's
// writer batches them, with durable commits (the default synchronous=FULL),
// and report chunks/s.
const (
	chunkSize = 100
	perAppend = 1000
	perStep   = 100 // appends per writer before it commits: 100,000 chunks
)

func benchChunks(tag string) [][]byte {
	out := make([][]byte, perAppend)
	for i := range out {
		c := make([]byte, chunkSize)
		copy(c, fmt.Sprintf("%s chunk %06d ", tag, i))
		for j := 24; j < chunkSize; j++ {
			c[j] = byte('a' + (i+j)%26)
		}
		out[i] = c
	}
	return out
}

func benchStream(b *testing.B) (*sqlitestore.Store, int64) {
	b.Helper()
	s := open(b, filepath.Join(b.TempDir(), "bench.db"))
	si, err := s.OpenStream(b.Context(), &store.OpenStreamParams{Path: "bench", Create: true})
	if err != nil {
		b.Fatal(err)
	}
	return s, si.ID
}

func reportChunks(b *testing.B, appends int) {
	b.ReportMetric(float64(appends*perAppend)/b.Elapsed().Seconds(), "chunks/s")
	b.SetBytes(perAppend * chunkSize)
}

// BenchmarkAppendWriter is a step writer's appends: each step writes 100,000
// chunks and commits.
func BenchmarkAppendWriter(b *testing.B) {
	s, id := benchStream(b)
	cs := benchChunks("w")
	n := 0
	for b.Loop() {
		step, i := n/perStep, n%perStep
		writer := fmt.Sprintf("step/%d", step)
		_, err := s.Append(b.Context(), &store.AppendParams{StreamID: id, Writer: writer, Attempt: 1,
			FirstSeq: int64(i * perAppend), Chunks: cs})
		if err != nil {
			b.Fatal(err)
		}
		if i == perStep-1 {
			_, err := s.FinishWriter(b.Context(), &store.FinishWriterParams{StreamID: id, Writer: writer, Attempt: 1, Commit: true})
			if err != nil {
				b.Fatal(err)
			}
		}
		n++
	}
	reportChunks(b, n)
}

// BenchmarkAppendPlain is anonymous appends of the same chunks: the baseline
// the writer rules are measured against.
func BenchmarkAppendPlain(b *testing.B) {
	s, id := benchStream(b)
	cs := benchChunks("p")
	n := 0
	for b.Loop() {
		if _, err := s.Append(b.Context(), &store.AppendParams{StreamID: id, Chunks: cs}); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportChunks(b, n)
}

// BenchmarkAdopt is retry attempts re-emitting the 100,000 chunks attempt 1
// wrote: every chunk is adopted, no record is written.
func BenchmarkAdopt(b *testing.B) {
	s, id := benchStream(b)
	batches := make([][][]byte, perStep)
	for i := range batches {
		batches[i] = benchChunks(fmt.Sprintf("a%03d", i))
		_, err := s.Append(b.Context(), &store.AppendParams{StreamID: id, Writer: "step/1", Attempt: 1,
			FirstSeq: int64(i * perAppend), Chunks: batches[i]})
		if err != nil {
			b.Fatal(err)
		}
	}
	n := 0
	for b.Loop() {
		attempt, i := int64(2+n/perStep), n%perStep
		res, err := s.Append(b.Context(), &store.AppendParams{StreamID: id, Writer: "step/1", Attempt: attempt,
			FirstSeq: int64(i * perAppend), Chunks: batches[i]})
		if err != nil {
			b.Fatal(err)
		}
		if res.NextOffset != perStep*perAppend {
			b.Fatalf("attempt %d appended: next offset %d", attempt, res.NextOffset)
		}
		n++
	}
	reportChunks(b, n)
}

// BenchmarkAppendConcurrent is 16 step writers on 16 streams at once: their
// appends share transactions and fsyncs.
func BenchmarkAppendConcurrent(b *testing.B) {
	const writers = 16
	s := open(b, filepath.Join(b.TempDir(), "bench.db"))
	ids := make([]int64, writers)
	for i := range ids {
		si, err := s.OpenStream(b.Context(), &store.OpenStreamParams{Path: fmt.Sprintf("bench/%d", i), Create: true})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = si.ID
	}
	cs := benchChunks("c")
	var left atomic.Int64
	left.Store(int64(b.N))
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			for seq := int64(0); left.Add(-1) >= 0; seq += perAppend {
				_, err := s.Append(b.Context(), &store.AppendParams{StreamID: id, Writer: "step/1", Attempt: 1,
					FirstSeq: seq, Chunks: cs})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	reportChunks(b, b.N)
}

// BenchmarkAdoptCold is the first append of a retry after a restart: the
// writer's 100,000 live records are rebuilt from the log, then adopted.
func BenchmarkAdoptCold(b *testing.B) {
	path := filepath.Join(b.TempDir(), "bench.db")
	s, err := sqlitestore.Open(b.Context(), path, nil)
	if err != nil {
		b.Fatal(err)
	}
	si, err := s.OpenStream(b.Context(), &store.OpenStreamParams{Path: "bench", Create: true})
	if err != nil {
		b.Fatal(err)
	}
	first := benchChunks("a000")
	for i := range perStep {
		cs := first
		if i > 0 {
			cs = benchChunks(fmt.Sprintf("a%03d", i))
		}
		_, err := s.Append(b.Context(), &store.AppendParams{StreamID: si.ID, Writer: "step/1", Attempt: 1,
			FirstSeq: int64(i * perAppend), Chunks: cs})
		if err != nil {
			b.Fatal(err)
		}
	}
	attempt := int64(1)
	for b.Loop() {
		b.StopTimer()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		if s, err = sqlitestore.Open(b.Context(), path, nil); err != nil {
			b.Fatal(err)
		}
		attempt++
		b.StartTimer()
		res, err := s.Append(b.Context(), &store.AppendParams{StreamID: si.ID, Writer: "step/1", Attempt: attempt, Chunks: first})
		if err != nil {
			b.Fatal(err)
		}
		if res.Acks[0].Outcome != stream.Adopted {
			b.Fatalf("ack %v", res.Acks[0])
		}
	}
	b.StopTimer()
	s.Close()
}

// BenchmarkRead reads a 100,000-chunk stream from the start, in pages of
// 1000 records.
func BenchmarkRead(b *testing.B) {
	s, id := benchStream(b)
	cs := benchChunks("r")
	for range perStep {
		if _, err := s.Append(b.Context(), &store.AppendParams{StreamID: id, Chunks: cs}); err != nil {
			b.Fatal(err)
		}
	}
	n := 0
	for b.Loop() {
		for from := int64(0); from < perStep*perAppend; {
			res, err := s.Read(b.Context(), &store.ReadParams{StreamID: id, From: from})
			if err != nil {
				b.Fatal(err)
			}
			from += int64(len(res.Records))
		}
		n++
	}
	b.ReportMetric(float64(n*perStep*perAppend)/b.Elapsed().Seconds(), "chunks/s")
}

// BenchmarkReadPages reads a 16 MiB stream of 1 MiB appends of 64 KiB
// chunks in the server's pages (256 KiB), as a reader that reads on does:
// each page fetches a window of about a page from where the last ended.
// An op is the 64 pages: ~630 KB allocated a page (was 1.8 MB: the 1 MiB
// append whole, and more), 380 µs a page (was 940 µs) on a 2-core machine.
func BenchmarkReadPages(b *testing.B) {
	s, id := benchStream(b)
	chunk := make([]byte, 64<<10)
	cs := make([][]byte, 16)
	for i := range cs {
		cs[i] = chunk
	}
	for range 16 {
		if _, err := s.Append(b.Context(), &store.AppendParams{StreamID: id, Chunks: cs}); err != nil {
			b.Fatal(err)
		}
	}
	pages := 0
	b.ReportAllocs()
	for b.Loop() {
		for from := int64(0); from < 256; {
			res, err := s.Read(b.Context(), &store.ReadParams{StreamID: id, From: from, MaxBytes: 256 << 10})
			if err != nil {
				b.Fatal(err)
			}
			from += int64(len(res.Records))
			pages++
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(pages), "ns/page")
	b.ReportMetric(float64(pages)*256*1024/(1<<20)/b.Elapsed().Seconds(), "MiB/s")
}

// BenchmarkClaimPastLargeInputs is a worker's claim poll while 20 runs of
// 15 MiB inputs are leased to another worker: none is claimable, and the
// poll reads each one's lease. With the input amid the run's columns it
// walked every input's overflow pages (migration 18).
func BenchmarkClaimPastLargeInputs(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "bench.db"))
	input := make([]byte, 15<<20)
	for i := range 20 {
		if _, _, err := s.CreateRun(b.Context(), &store.CreateRunParams{ID: fmt.Sprintf("big%d", i), Workflow: "wf",
			Input: input, Owner: "other", LeaseTTL: time.Hour}); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		runs, err := s.ClaimRuns(b.Context(), &store.ClaimRunsParams{Owner: "me", Limit: 10, LeaseTTL: time.Minute})
		if err != nil || len(runs) != 0 {
			b.Fatalf("claimed %d, %v", len(runs), err)
		}
	}
}

// BenchmarkMessageToALargeRun is a message sent to a run with a 15 MiB
// input: it is counted in the run's inbox, an UPDATE of its row. With the
// input in the row, SQLite read and rewrote it whole at each (red team,
// round sixteen: 50–70 ms a message); its data lives apart now
// (migration 18).
func BenchmarkMessageToALargeRun(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "bench.db"))
	if _, _, err := s.CreateRun(b.Context(), &store.CreateRunParams{ID: "big", Workflow: "wf", Input: make([]byte, 15<<20)}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.SendMessage(b.Context(), &store.SendMessageParams{RunID: "big", Topic: "t", Payload: []byte(`{"x":1}`)}); err != nil {
			b.Fatal(err)
		}
	}
}
