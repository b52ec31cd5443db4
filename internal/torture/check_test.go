package torture

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/sqlitestore"
	"github.com/weirhq/weir/stream"
)

// tamperStore serves a doctored live view: the checker must notice.
type tamperStore struct {
	store.Full
	tamper func([]stream.Record) []stream.Record
}

func (t *tamperStore) Read(ctx context.Context, p *store.ReadParams) (*store.ReadResult, error) {
	all, last, err := ReadLive(ctx, t.Full, p.StreamID)
	if err != nil {
		return nil, err
	}
	all = t.tamper(all)
	res := &store.ReadResult{NextOffset: int64(len(all)), Closed: last.Closed}
	for _, r := range all {
		if r.Offset >= p.From && len(res.Records) < max(p.Limit, 1) {
			res.Records = append(res.Records, r)
		}
	}
	if len(all) > 0 {
		res.NextOffset = all[len(all)-1].Offset + 1
	}
	return res, nil
}

func renumber(rs []stream.Record) []stream.Record {
	for i := range rs {
		rs[i].Offset = int64(i)
	}
	return rs
}

// The checker catches planted violations: a duplicate, a missing chunk, a
// gap in offsets, other bytes, a zombie's record after a newer attempt's.
func TestCheckerCatchesPlantedViolations(t *testing.T) {
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "weir.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := ProducerSpec{Path: "torture/plant/p", Writers: 2, Count: 6, MinLen: 1, MaxLen: 40, Seed: 42}
	info, err := s.OpenStream(ctx, &store.OpenStreamParams{Path: p.Path, Create: true})
	if err != nil {
		t.Fatal(err)
	}
	for w := range p.Writers {
		var chunks [][]byte
		for seq := range p.Count {
			chunks = append(chunks, Chunk(p.Seed, int64(w), "prod", seq, 0, p.MinLen, p.MaxLen))
		}
		if _, err := s.Append(ctx, &store.AppendParams{StreamID: info.ID, Writer: producerWriter(w), Chunks: chunks}); err != nil {
			t.Fatal(err)
		}
	}
	// A writer with attempts, committed: a zombie record can be planted.
	for a := int64(1); a <= 2; a++ {
		if _, err := s.Append(ctx, &store.AppendParams{StreamID: info.ID, Writer: "ext", Attempt: a, Chunks: [][]byte{[]byte{'a', byte(a)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.FinishWriter(ctx, &store.FinishWriterParams{StreamID: info.ID, Writer: "ext", Attempt: 2, Commit: true}); err != nil {
		t.Fatal(err)
	}
	trial := &Trial{Producers: []ProducerSpec{p}}
	check := func(tamper func([]stream.Record) []stream.Record) []Violation {
		t.Helper()
		var st store.Full = s
		if tamper != nil {
			st = &tamperStore{Full: s, tamper: tamper}
		}
		c := &checker{s: st}
		want := map[string][][]byte{"ext": {{'a', 2}}}
		for w := range p.Writers {
			for seq := range p.Count {
				want[producerWriter(w)] = append(want[producerWriter(w)], Chunk(p.Seed, int64(w), "prod", seq, 0, p.MinLen, p.MaxLen))
			}
		}
		if _, _, err := c.checkStream(ctx, info, want, false, func(string) (string, bool) { return "", false }, map[string]bool{"ext": true}); err != nil {
			t.Fatal(err)
		}
		return c.out
	}
	if v := check(nil); len(v) > 0 {
		t.Fatalf("untouched stream: %v", v)
	}
	if v, _, err := Check(ctx, s, &Trial{Producers: trial.Producers[:0]}); err != nil || len(v) > 0 {
		t.Fatalf("empty trial: %v %v", v, err)
	}
	cases := []struct {
		name, inv string
		tamper    func([]stream.Record) []stream.Record
	}{
		{"duplicate", "1", func(rs []stream.Record) []stream.Record {
			return renumber(slices.Insert(rs, 3, rs[2]))
		}},
		{"missing chunk", "2", func(rs []stream.Record) []stream.Record {
			return renumber(slices.Delete(rs, 4, 5))
		}},
		{"gap", "3", func(rs []stream.Record) []stream.Record {
			return slices.Delete(rs, 4, 5)
		}},
		{"other bytes", "content", func(rs []stream.Record) []stream.Record {
			rs[1].Data = append([]byte{'x'}, rs[1].Data...)
			rs[1].Digest = stream.Sum(rs[1].Data)
			return rs
		}},
		{"zombie record", "6", func(rs []stream.Record) []stream.Record {
			z := stream.Record{Kind: stream.KindData, Writer: "ext", Attempt: 1, Seq: 1, Data: []byte("z")}
			z.Digest = stream.Sum(z.Data)
			n := len(rs)
			return renumber(slices.Insert(rs, n-1, z))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := check(tc.tamper)
			var got []string
			for _, x := range v {
				got = append(got, x.Invariant)
			}
			if !slices.Contains(got, tc.inv) {
				t.Fatalf("planted %s: want a violation of %s, got %v", tc.name, tc.inv, v)
			}
			t.Logf("caught: %v", v[0])
		})
	}
}

// The limit checks count what overlaps: touching spans do not, nested and
// crossing ones do.
func TestMostAtOnce(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, int64(ms)*int64(time.Millisecond)) }
	span := func(a, b int) []edge { return []edge{{at(a), +1}, {at(b), -1}} }
	for _, tc := range []struct {
		name  string
		spans [][2]int
		want  int
	}{
		{"none", nil, 0},
		{"one", [][2]int{{0, 10}}, 1},
		{"touching", [][2]int{{0, 10}, {10, 20}, {20, 30}}, 1},
		{"crossing", [][2]int{{0, 10}, {5, 15}}, 2},
		{"nested", [][2]int{{0, 100}, {10, 20}, {15, 18}, {30, 40}}, 3},
		{"apart", [][2]int{{0, 1}, {2, 3}, {4, 5}}, 1},
	} {
		var edges []edge
		for _, s := range tc.spans {
			edges = append(edges, span(s[0], s[1])...)
		}
		if got, _ := mostAtOnce(edges); got != tc.want {
			t.Errorf("%s: %d at once, want %d", tc.name, got, tc.want)
		}
	}
	if _, ok := parseAttemptSpan("r1 3 2 100 50"); ok {
		t.Error("a span that ends before it starts was read")
	}
	if a, ok := parseAttemptSpan("r1 3 2 100 150"); !ok || a.run != "r1" || a.op != 3 || a.attempt != 2 || a.end.Sub(a.start) != 50 {
		t.Errorf("parseAttemptSpan: %+v %v", a, ok)
	}
}
