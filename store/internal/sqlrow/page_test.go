package sqlrow

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// batch encodes n records from offset first: data of random sizes (some
// empty, some past a small window), an abort now and then, writers that
// change.
func batch(rng *rand.Rand, first int64, n int) []byte {
	recs := make([]stream.Record, n)
	for i := range recs {
		r := &recs[i]
		r.Offset, r.Writer, r.Attempt, r.Seq = first+int64(i), fmt.Sprintf("step/%d", rng.IntN(3)), int64(1+rng.IntN(2)), int64(i)
		if rng.IntN(8) == 0 {
			r.Kind = stream.KindAbort
			continue
		}
		r.Kind = stream.KindData
		r.Data = make([]byte, []int{0, 1, 7, 40, 300}[rng.IntN(5)])
		for j := range r.Data {
			r.Data[j] = byte(rng.IntN(256))
		}
		r.Digest = stream.Sum(r.Data)
	}
	return stream.EncodeBatch(nil, recs)
}

// A page fed a batch in windows of any size, from any offset and with any
// page bounds, holds what a page given the whole batch holds: the windows
// change what is fetched, never what is read. After says a page reads on
// only when it took the batch through and has room.
func TestFeedInWindowsIsAddWhole(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 3000 {
		const first = 100
		n := 1 + rng.IntN(12)
		data := batch(rng, first, n)
		head := int64(first + n + rng.IntN(2)) // a batch may follow
		p := (&store.ReadParams{StreamID: 1, From: first + int64(rng.IntN(n)), Limit: 1 + rng.IntN(n+1), MaxBytes: 1 + rng.IntN(700)}).WithDefaults()
		last := int64(first + n - 1)

		want := NewPage(p, head)
		if err := want.Add(data, first); err != nil {
			t.Fatal(err)
		}

		got := NewPage(p, head)
		win := 1 + rng.IntN(64)
		c := &Cursor{Off: first, Last: last, Size: int64(len(data))}
		c.Begin(p.From)
		for !c.Done() && !got.Full() {
			k := c.WindowLen(win, 1<<20, []int{win, len(data)}[rng.IntN(2)], p.From)
			end := min(int(c.Pos)+k, len(data))
			if err := got.Feed(c, data[c.Pos:end]); err != nil {
				t.Fatalf("trial %d: %v", trial, err)
			}
		}
		if !reflect.DeepEqual(got.Records, want.Records) || got.Bytes != want.Bytes {
			t.Fatalf("trial %d (from %d, limit %d, max %d, window %d): windows gave %d records, whole %d",
				trial, p.From, p.Limit, p.MaxBytes, win, len(got.Records), len(want.Records))
		}
		more := got.After(c)
		wantMore := c.Done() && !got.Full() && got.Bytes <= p.MaxBytes && last+1 < head
		if more != wantMore || (more && got.Last != last) {
			t.Fatalf("trial %d: After = %v, Last %d", trial, more, got.Last)
		}
	}
}
