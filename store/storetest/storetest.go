// Package storetest is the conformance suite every store.Store backend
// passes. A backend's test file calls [Run] once with a [Harness]; no backend
// keeps its own copy of a behaviour test.
//
// # Basics
//
// Each behaviour is a subtest with a fresh store of its own, and most run in
// parallel. Errors are checked with errors.Is against the sentinels of
// package store and package stream, never by message. The golden cases of
// the stream rules (testdata/stream-vectors.json, a copy of the design's
// file) run end to end through the store: acks, errors, the live log read
// back with Read, and the committed view.
//
// # Caveats
//
// With a Reopen hook the suite also checks what must survive a restart:
// writer state, fences and offsets. Without one those subtests are skipped.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// Harness gives the suite its stores.
type Harness struct {
	// New returns a fresh, empty store and arranges (t.Cleanup) for it to be
	// closed when t ends. The suite may close it first; closing twice must
	// be harmless.
	New func(t *testing.T) store.Store
	// Reopen closes s and opens the same database again, dropping every
	// in-memory state, and arranges for the new store to be closed when t
	// ends. Nil skips the restart tests.
	Reopen func(t *testing.T, s store.Store) store.Store
}

// harness is the Harness as the suite uses it: each store with every
// capability (store.Capable), those it lacks answering ErrUnsupported; the
// subtests of a capability the store lacks are skipped.
type harness struct{ Harness }

func (h harness) New(t *testing.T) store.Full { return store.Capable(h.Harness.New(t)) }

func (h harness) Reopen(t *testing.T, s store.Full) store.Full {
	return store.Capable(h.Harness.Reopen(t, s))
}

// need skips t unless the probe store has capability C.
func need[C any](t *testing.T, probe store.Store) {
	t.Helper()
	if _, ok := probe.(C); !ok {
		var c *C
		t.Skipf("the store has no %T", c)
	}
}

// Run runs the whole suite: the core's behaviours, and each optional
// capability's (store.Hooks, Messages, Standalone, Purger, WorldStore)
// when the store has it.
func Run(t *testing.T, hh Harness) {
	h := harness{hh}
	if h.Harness.New == nil {
		t.Fatal("storetest: Harness.New is nil")
	}
	probe := hh.New(t)
	t.Run("Runs", func(t *testing.T) { t.Parallel(); testRuns(t, h) })
	t.Run("Claims", func(t *testing.T) { t.Parallel(); testClaims(t, h) })
	t.Run("Advance", func(t *testing.T) { t.Parallel(); testRecord(t, h) })
	t.Run("Streams", func(t *testing.T) { t.Parallel(); testStreams(t, h) })
	t.Run("Append", func(t *testing.T) { t.Parallel(); testAppend(t, h) })
	t.Run("Read", func(t *testing.T) { t.Parallel(); testRead(t, h) })
	t.Run("Wait", func(t *testing.T) { t.Parallel(); testWait(t, h) })
	t.Run("Vectors", func(t *testing.T) { t.Parallel(); testVectors(t, h) })
	t.Run("Reopen", func(t *testing.T) { t.Parallel(); testReopen(t, h) })
	t.Run("Concurrency", func(t *testing.T) { t.Parallel(); testConcurrency(t, h) })
	t.Run("Invariants", func(t *testing.T) { t.Parallel(); testInvariants(t, h) })
	t.Run("DurableStreams", func(t *testing.T) { need[store.Standalone](t, probe); t.Parallel(); testDS(t, h) })
	t.Run("Purge", func(t *testing.T) { need[store.Purger](t, probe); t.Parallel(); testPurge(t, h) })
	t.Run("World", func(t *testing.T) { need[store.WorldStore](t, probe); t.Parallel(); testWorld(t, h) })
	t.Run("Quota", func(t *testing.T) { need[store.Standalone](t, probe); t.Parallel(); testQuota(t, h) })
	t.Run("Hooks", func(t *testing.T) { need[store.Hooks](t, probe); t.Parallel(); testHooks(t, h) })
	t.Run("Messages", func(t *testing.T) { need[store.Messages](t, probe); t.Parallel(); testMessages(t, h) })
	t.Run("Parent", func(t *testing.T) { need[store.Hooks](t, probe); t.Parallel(); testParent(t, h) })
	t.Run("Limits", func(t *testing.T) { t.Parallel(); testLimits(t, h) })
	t.Run("Queues", func(t *testing.T) { t.Parallel(); testQueues(t, h) })
	t.Run("Schedules", func(t *testing.T) { t.Parallel(); testSchedules(t, h) })
	t.Run("Versions", func(t *testing.T) { t.Parallel(); testVersions(t, h) })
	t.Run("Forks", func(t *testing.T) { t.Parallel(); testForks(t, h) })
	t.Run("OpenAppend", func(t *testing.T) { t.Parallel(); testOpenAppend(t, h) })
	t.Run("EventPages", func(t *testing.T) { t.Parallel(); testEventPages(t, h) })
	t.Run("Hostile", func(t *testing.T) { testHostile(t, h) })
	t.Run("ClosedStore", func(t *testing.T) { testClosedStore(t, h) })
}

// ctx is the context of the suite's calls: the test's own, so a hung store
// call ends with the test.
func ctx(t *testing.T) context.Context { return t.Context() }

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("err = %v, want %v", err, target)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// owner and ttl are the suite's worker identity and lease.
const (
	owner = "worker-1"
	ttl   = time.Hour
)

// createRun creates run id of workflow "wf".
func createRun(t *testing.T, s store.Full, id string) *store.Run {
	t.Helper()
	r, created, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: id, Workflow: "wf"})
	must(t, err)
	if !created {
		t.Fatalf("run %q already existed", id)
	}
	return r
}

// startRun creates run id and claims it; every other run of s must be leased
// or finished already. It returns the lease epoch.
func startRun(t *testing.T, s store.Full, id string) int64 {
	t.Helper()
	createRun(t, s, id)
	runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 1, LeaseTTL: ttl})
	must(t, err)
	if len(runs) != 1 || runs[0].ID != id {
		t.Fatalf("claimed %v, want run %q", runIDs(runs), id)
	}
	return runs[0].LeaseEpoch
}

func runIDs(runs []*store.Run) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.ID
	}
	return out
}

func openStream(t *testing.T, s store.Full, path string) *store.StreamInfo {
	t.Helper()
	si, err := s.OpenStream(ctx(t), &store.OpenStreamParams{Path: path, Create: true})
	must(t, err)
	return si
}

func openRunStream(t *testing.T, s store.Full, run, name string) *store.StreamInfo {
	t.Helper()
	si, err := s.OpenStream(ctx(t), &store.OpenStreamParams{RunID: run, Name: name, Create: true})
	must(t, err)
	return si
}

func chunks(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// appendOK appends and fails the test on error.
func appendOK(t *testing.T, s store.Full, id int64, writer string, attempt, seq int64, cs ...string) *store.AppendResult {
	t.Helper()
	res, err := s.Append(ctx(t), &store.AppendParams{StreamID: id, Writer: writer, Attempt: attempt, FirstSeq: seq, Chunks: chunks(cs...)})
	if err != nil {
		t.Fatalf("append %s a%d s%d %q: %v", writer, attempt, seq, cs, err)
	}
	if len(res.Acks) != len(cs) {
		t.Fatalf("append: %d acks for %d chunks", len(res.Acks), len(cs))
	}
	return res
}

// appendErr appends, expects an error matching target, and checks that the
// log did not change.
func appendErr(t *testing.T, s store.Full, id int64, writer string, attempt, seq int64, target error, cs ...string) error {
	t.Helper()
	before := readAll(t, s, id)
	_, err := s.Append(ctx(t), &store.AppendParams{StreamID: id, Writer: writer, Attempt: attempt, FirstSeq: seq, Chunks: chunks(cs...)})
	if !errors.Is(err, target) {
		t.Fatalf("append %s a%d s%d %q: err = %v, want %v", writer, attempt, seq, cs, err, target)
	}
	if after := readAll(t, s, id); !slices.EqualFunc(before, after, sameRecord) {
		t.Fatalf("a failed append changed the log:\n before %v\n after  %v", before, after)
	}
	return err
}

// readAll reads the whole live view, in pages of limit records (0: the
// store's default), checking that the pages join up.
func readAllLimit(t *testing.T, s store.Full, id int64, limit int) []stream.Record {
	t.Helper()
	var out []stream.Record
	from := int64(0)
	for {
		res, err := s.Read(ctx(t), &store.ReadParams{StreamID: id, From: from, Limit: limit})
		must(t, err)
		for _, r := range res.Records {
			if r.Offset != from {
				t.Fatalf("read from %d: record at offset %d, want %d", from, r.Offset, from)
			}
			from++
		}
		out = append(out, res.Records...)
		if from == res.NextOffset {
			return out
		}
		if len(res.Records) == 0 {
			t.Fatalf("read from %d: no records before next offset %d", from, res.NextOffset)
		}
	}
}

func readAll(t *testing.T, s store.Full, id int64) []stream.Record {
	t.Helper()
	return readAllLimit(t, s, id, 0)
}

func sameRecord(a, b stream.Record) bool {
	return a.Offset == b.Offset && a.Kind == b.Kind && a.Writer == b.Writer && a.Attempt == b.Attempt &&
		a.Seq == b.Seq && a.Digest == b.Digest && string(a.Data) == string(b.Data)
}

// committed returns the data of the committed view of log, which must start
// at offset 0.
func committed(log []stream.Record) []string {
	out := []string{}
	var c stream.Committed
	for i := range log {
		c.Push(&log[i], func(r *stream.Record) {
			if r.Kind == stream.KindData {
				out = append(out, string(r.Data))
			}
		})
	}
	return out
}

// committedRead reads the committed view of stream id with a
// store.CommittedReader holding hold bytes, in pages of limit records.
func committedRead(t *testing.T, s store.Full, id int64, hold, limit int) []string {
	t.Helper()
	out := []string{}
	cr := store.NewCommittedReader(s, id, 0, hold)
	for {
		recs, _, err := cr.Next(ctx(t), limit, 1)
		must(t, err)
		if limit > 0 && len(recs) > limit {
			t.Fatalf("a page of %d records for a limit of %d", len(recs), limit)
		}
		for _, r := range recs {
			if r.Kind == stream.KindData {
				out = append(out, string(r.Data))
			}
		}
		if len(recs) == 0 && cr.CaughtUp() {
			return out
		}
	}
}

// liveApplied returns the data of log with every voided record removed: the
// live view as a reader that applies aborts sees it.
func liveApplied(log []stream.Record) []string {
	var v stream.Voids
	void := map[int64]bool{}
	for i := range log {
		for _, off := range v.Push(&log[i]) {
			void[off] = true
		}
	}
	out := []string{}
	for _, r := range log {
		if r.Kind == stream.KindData && !void[r.Offset] {
			out = append(out, string(r.Data))
		}
	}
	return out
}

// checkDense checks that log holds offsets 0..n-1 and n is next.
func checkDense(t *testing.T, log []stream.Record, next int64) {
	t.Helper()
	for i, r := range log {
		if r.Offset != int64(i) {
			t.Fatalf("record %d has offset %d", i, r.Offset)
		}
	}
	if int64(len(log)) != next {
		t.Fatalf("log has %d records, next offset is %d", len(log), next)
	}
}

func kinds(log []stream.Record) string {
	s := ""
	for _, r := range log {
		s += fmt.Sprintf("%v ", r)
	}
	return s
}
