package torture

import (
	"context"
	"errors"
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
	if _, ok := parseAttemptSpan("r1 3 2 4 100 50"); ok {
		t.Error("a span that ends before it starts was read")
	}
	if _, ok := parseAttemptSpan("r1 3 2 100 150"); ok {
		t.Error("a span without its execution's epoch was read")
	}
	if a, ok := parseAttemptSpan("r1 3 2 4 100 150"); !ok || a.run != "r1" || a.op != 3 || a.attempt != 2 || a.epoch != 4 || a.end.Sub(a.start) != 50 {
		t.Errorf("parseAttemptSpan: %+v %v", a, ok)
	}
}

// An execution that lost its run's lease as its limited attempt began (its
// engine frozen past its leases, or its run parking lined as a slot was
// handed to the attempt) ran the attempt's code with its start refused,
// and its slot lapsed or was given back while that code ran on; the next
// execution ran the attempt again, under the same number, and the log
// holds that one's outcome. The checker counts the run the log holds (its
// start's writer's epoch), not the zombie's, which overlapped another
// attempt's slot (seed 7103); and still catches an overlap of the runs
// the log holds, or of runs whose start's writer is not known.
func TestCheckLimiterCountsTheLoggedExecution(t *testing.T) {
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "weir.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const ttl = time.Minute
	step := func(typ store.EventType, op, attempt int64) store.Event {
		return store.Event{Type: typ, Op: op, Name: "lstep", Attempt: attempt}
	}
	// Run a: execution 1 runs op 2 attempt 1 and parks before the
	// attempt's start is durable; its start is then refused. Execution 2
	// runs the attempt again and logs it.
	if _, _, err := s.CreateRun(ctx, &store.CreateRunParams{ID: "a", Workflow: WorkflowName, Owner: "w", LeaseTTL: ttl}); err != nil {
		t.Fatal(err)
	}
	if err := s.Advance(ctx, &store.AdvanceParams{RunID: "a", LeaseEpoch: 1, Release: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Advance(ctx, &store.AdvanceParams{RunID: "a", LeaseEpoch: 1,
		Events: []store.Event{step(store.EventStepStarted, 2, 1)}}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("the zombie's start: %v, want %v", err, store.ErrLeaseLost)
	}
	runs, err := s.ClaimRuns(ctx, &store.ClaimRunsParams{Owner: "w", Limit: 1, LeaseTTL: ttl})
	if err != nil || len(runs) != 1 || runs[0].ID != "a" || runs[0].LeaseEpoch != 2 {
		t.Fatalf("claim: %v %v", runs, err)
	}
	if err := s.Advance(ctx, &store.AdvanceParams{RunID: "a", LeaseEpoch: 2,
		Events: []store.Event{step(store.EventStepStarted, 2, 1), step(store.EventStepCompleted, 2, 1)}}); err != nil {
		t.Fatal(err)
	}
	// Run b: op 1 attempt 1, run once, given the slot the zombie's
	// execution gave back.
	if _, _, err := s.CreateRun(ctx, &store.CreateRunParams{ID: "b", Workflow: WorkflowName, Owner: "w", LeaseTTL: ttl}); err != nil {
		t.Fatal(err)
	}
	if err := s.Advance(ctx, &store.AdvanceParams{RunID: "b", LeaseEpoch: 1,
		Events: []store.Event{step(store.EventStepStarted, 1, 1), step(store.EventStepCompleted, 1, 1)}}); err != nil {
		t.Fatal(err)
	}

	at := func(ms int) time.Time { return time.Unix(0, int64(ms)*int64(time.Millisecond)) }
	span := func(run string, op, attempt, epoch int64, from, to int) attemptSpan {
		return attemptSpan{attemptKey{run, op, attempt}, epoch, at(from), at(to)}
	}
	zombie := span("a", 2, 1, 1, 0, 11)
	logged := span("a", 2, 1, 2, 100, 110)
	other := span("b", 1, 1, 1, 2, 50)
	check := func(limited []attemptSpan, started ...string) []Violation {
		t.Helper()
		tr := &Trial{Prefix: "t", Limiter: 1, Runs: []RunSpec{{ID: "a"}, {ID: "b"}}, limited: limited}
		for _, l := range started {
			if !tr.noteStarted(l) {
				t.Fatalf("noteStarted(%q) refused", l)
			}
		}
		c := &checker{s: s}
		if err := c.checkLimiter(ctx, tr); err != nil {
			t.Fatal(err)
		}
		return c.out
	}
	// The zombie's span is reported first (it ended first), as in the
	// failing trial.
	all := []attemptSpan{zombie, other, logged}
	if v := check(all, "a 2 1 2", "b 1 1 1"); len(v) > 0 {
		t.Fatalf("the zombie's run of a/2/1 was counted: %v", v)
	}
	// Had the zombie's execution's start been the log's, its span would
	// be the attempt's, over b's: caught.
	if v := check(all, "a 2 1 1", "b 1 1 1"); len(v) != 1 || v[0].Invariant != "limiter" {
		t.Fatalf("an overlap of logged runs: %v, want a limiter violation", v)
	}
	// A start whose writer no worker reported (its record's answer lost)
	// may be either run's: both count.
	if v := check(all, "b 1 1 1"); len(v) != 1 || v[0].Invariant != "limiter" {
		t.Fatalf("a start of no known writer: %v, want a limiter violation", v)
	}
	// The logged run overlapping b is caught, the zombie's span aside.
	late := span("b", 1, 1, 1, 105, 120)
	if v := check([]attemptSpan{zombie, late, logged}, "a 2 1 2", "b 1 1 1"); len(v) != 1 || v[0].Invariant != "limiter" {
		t.Fatalf("logged runs overlapping: %v, want a limiter violation", v)
	}
	// An attempt whose outcome is not in the log counts in no run.
	if v := check([]attemptSpan{span("a", 3, 1, 2, 0, 60), other}, "a 3 1 2", "b 1 1 1"); len(v) > 0 {
		t.Fatalf("an attempt without an outcome was counted: %v", v)
	}
}
