package stream_test

import (
	"fmt"
	"testing"

	"github.com/weirhq/weir/stream"
)

const (
	benchChunks    = 1000
	benchChunkSize = 100
)

func benchRequest(attempt int64) *stream.AppendRequest {
	chunks := make([][]byte, benchChunks)
	for i := range chunks {
		c := make([]byte, benchChunkSize)
		copy(c, fmt.Sprintf("chunk %d", i))
		chunks[i] = c
	}
	return &stream.AppendRequest{Attempt: attempt, Chunks: chunks}
}

// reportChunks reports chunks/s for loops that handle chunks per iteration.
func reportChunks(b *testing.B, iters, chunks int) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(iters*chunks)/s, "chunks/s")
	}
}

// BenchmarkAppendNew: one request of 1000 chunks of 100 B by a fresh writer.
func BenchmarkAppendNew(b *testing.B) {
	req := benchRequest(1)
	var h stream.Head
	b.SetBytes(benchChunks * benchChunkSize)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		w := &stream.Writer{ID: "step/1"}
		if _, _, err := stream.Append(&h, w, req); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportChunks(b, n, benchChunks)
}

// BenchmarkAppendAdopt: attempt 2 re-emits the 1000 chunks attempt 1 wrote:
// every chunk is adopted, no record is written.
func BenchmarkAppendAdopt(b *testing.B) {
	var h stream.Head
	w := &stream.Writer{ID: "step/1"}
	if _, _, err := stream.Append(&h, w, benchRequest(1)); err != nil {
		b.Fatal(err)
	}
	req := benchRequest(2)
	b.SetBytes(benchChunks * benchChunkSize)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		w.Attempt, w.Next, w.Diverged = 1, benchChunks, false // adoption leaves Live as it is
		_, recs, err := stream.Append(&h, w, req)
		if err != nil || len(recs) != 0 {
			b.Fatal(err, len(recs))
		}
		n++
	}
	reportChunks(b, n, benchChunks)
}

// BenchmarkAppendAnonymous: the baseline, 1000 anonymous chunks.
func BenchmarkAppendAnonymous(b *testing.B) {
	req := benchRequest(0)
	var h stream.Head
	b.SetBytes(benchChunks * benchChunkSize)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if _, _, err := stream.Append(&h, nil, req); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportChunks(b, n, benchChunks)
}

// benchLog: 10 step writers interleaving 100 chunks each in pages of 10,
// one retried with a divergence, anonymous chunks between, then the commits
// and a close. The commits come last, so the filter queues everything.
func benchLog(b *testing.B) ([]stream.Record, int) {
	m := newTStream()
	do := func(o rop) {
		if r := m.do(o); r.err != nil {
			b.Fatalf("%v: %v", o, r.err)
		}
	}
	page := func(w string, a, s int64, tag string) rop {
		o := app(w, a, s)
		for i := range 10 {
			o.chunks = append(o.chunks, fmt.Sprintf("%s %s %d", w, tag, s+int64(i)))
		}
		return o
	}
	for p := range int64(10) {
		for w := range 10 {
			do(page(fmt.Sprintf("step/%d", w), 1, p*10, "v1"))
		}
		do(anon("anonymous"))
	}
	for p := range int64(10) {
		tag := "v1"
		if p >= 5 {
			tag = "v2"
		}
		do(page("step/0", 2, p*10, tag))
	}
	for w := range 10 {
		a := int64(1)
		if w == 0 {
			a = 2
		}
		do(commit(fmt.Sprintf("step/%d", w), a))
	}
	do(closeOp())
	data := 0
	for _, r := range m.log {
		if r.Kind == stream.KindData {
			data++
		}
	}
	return m.log, data
}

// BenchmarkCommittedFilter pushes a whole live log through the committed
// view; chunks/s counts data records pushed.
func BenchmarkCommittedFilter(b *testing.B) {
	log, data := benchLog(b)
	b.ReportAllocs()
	n, out := 0, 0
	for b.Loop() {
		var f stream.Committed
		out = 0
		for i := range log {
			f.Push(&log[i], func(*stream.Record) { out++ })
		}
		n++
	}
	if out != 10*100+10+1 {
		b.Fatalf("released %d records", out)
	}
	reportChunks(b, n, data)
}

// BenchmarkEncodeDecode encodes 1000 data records of 100 B as one batch and
// decodes them back, reusing the buffers.
func BenchmarkEncodeDecode(b *testing.B) {
	var h stream.Head
	_, recs, err := stream.Append(&h, &stream.Writer{ID: "step/1"}, benchRequest(1))
	if err != nil {
		b.Fatal(err)
	}
	var buf []byte
	var dst []stream.Record
	b.SetBytes(benchChunks * benchChunkSize)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		buf = stream.EncodeBatch(buf[:0], recs)
		dst, err = stream.DecodeBatch(dst[:0], buf, 0, 0)
		if err != nil || len(dst) != benchChunks {
			b.Fatal(err, len(dst))
		}
		n++
	}
	reportChunks(b, n, benchChunks)
}

// BenchmarkCommittedFilterManyWriters: n step writers write one chunk each,
// then commit in order. Every commit releases one record; ns/chunk should
// not grow with n.
func BenchmarkCommittedFilterManyWriters(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var log []stream.Record
			for i := range n {
				log = append(log, stream.Record{Offset: int64(i), Kind: stream.KindData, Writer: fmt.Sprint(i), Attempt: 1, Data: []byte("x")})
			}
			for i := range n {
				log = append(log, stream.Record{Offset: int64(n + i), Kind: stream.KindCommit, Writer: fmt.Sprint(i), Attempt: 1, Seq: 1})
			}
			b.ReportAllocs()
			iters := 0
			for b.Loop() {
				var f stream.Committed
				out := 0
				for i := range log {
					f.Push(&log[i], func(*stream.Record) { out++ })
				}
				if out != n {
					b.Fatalf("released %d", out)
				}
				iters++
			}
			reportChunks(b, iters, n)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(iters*n), "ns/chunk")
		})
	}
}
