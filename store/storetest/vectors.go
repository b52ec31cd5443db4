package storetest

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// vectorsJSON is a copy of the design's golden cases (stream-vectors.json),
// embedded so the suite runs from any backend's package directory.
//
//go:embed testdata/stream-vectors.json
var vectorsJSON []byte

type vectorFile struct {
	Cases []vectorCase `json:"cases"`
}

type vectorCase struct {
	Name      string       `json:"name"`
	Steps     []vectorStep `json:"steps"`
	Live      []vectorRec  `json:"live"`
	Committed []string     `json:"committed"`
}

type vectorStep struct {
	Op struct {
		Op      string   `json:"op"`
		Writer  string   `json:"writer"`
		Attempt int64    `json:"attempt"`
		Seq     int64    `json:"seq"`
		Chunks  []string `json:"chunks"`
	} `json:"op"`
	Result json.RawMessage  `json:"result"`
	Error  string           `json:"error"`
	Detail map[string]int64 `json:"detail"`
}

type vectorRec struct {
	Kind    string `json:"kind"`
	Writer  string `json:"writer"`
	Attempt int64  `json:"attempt"`
	Seq     int64  `json:"seq"`
	FromSeq int64  `json:"fromSeq"`
	Count   int64  `json:"count"`
	Data    string `json:"data"`
	Offset  int64  `json:"offset"`
}

type vectorAck struct {
	Offset  int64  `json:"offset"`
	Outcome string `json:"outcome"`
}

func loadVectors(t *testing.T) []vectorCase {
	t.Helper()
	var vf vectorFile
	if err := json.Unmarshal(vectorsJSON, &vf); err != nil {
		t.Fatalf("stream-vectors.json: %v", err)
	}
	if len(vf.Cases) == 0 {
		t.Fatal("stream-vectors.json has no cases")
	}
	return vf.Cases
}

// testVectors runs every golden case through the store: on a standalone
// stream, on a run stream, and (with a Reopen hook) reopening the store
// before every step, so each piece of writer state must come back from disk.
func testVectors(t *testing.T, h harness) {
	cases := loadVectors(t)
	for _, mode := range []string{"standalone", "run stream", "reopen every step"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			if mode == "reopen every step" && h.Harness.Reopen == nil {
				t.Skip("no Reopen hook")
			}
			for _, c := range cases {
				t.Run(c.Name, func(t *testing.T) {
					t.Parallel()
					s := h.New(t)
					var si *store.StreamInfo
					if mode == "run stream" {
						startRun(t, s, "r1")
						si = openRunStream(t, s, "r1", "out")
					} else {
						si = openStream(t, s, "out")
					}
					reopen := func() {
						if mode == "reopen every step" {
							s = h.Reopen(t, s)
						}
					}
					runVector(t, &s, si.ID, &c, reopen)
				})
			}
		})
	}
}

// runVector runs one case on stream id of *sp; reopen may replace *sp.
func runVector(t *testing.T, sp *store.Full, id int64, c *vectorCase, reopen func()) {
	t.Helper()
	for i, st := range c.Steps {
		reopen()
		s := *sp
		var got any
		var err error
		switch st.Op.Op {
		case "append":
			var res *store.AppendResult
			res, err = s.Append(ctx(t), &store.AppendParams{StreamID: id, Writer: st.Op.Writer, Attempt: st.Op.Attempt,
				FirstSeq: st.Op.Seq, Chunks: chunks(st.Op.Chunks...)})
			if err == nil {
				acks := []vectorAck{}
				for _, a := range res.Acks {
					acks = append(acks, vectorAck{Offset: a.Offset, Outcome: a.Outcome.String()})
				}
				got = acks
			}
		case "commit", "abort":
			var res stream.Result
			res, err = s.FinishWriter(ctx(t), &store.FinishWriterParams{StreamID: id, Writer: st.Op.Writer,
				Attempt: st.Op.Attempt, Commit: st.Op.Op == "commit"})
			if err == nil {
				word := map[bool]string{true: "committed", false: "aborted"}[st.Op.Op == "commit"]
				if res == stream.Already {
					word = "already_" + word
				}
				got = word
			}
		case "close":
			// The vectors answer "closed" to a second close too; the store
			// says Already, which the CloseStream test checks.
			_, err = s.CloseStream(ctx(t), id)
			got = "closed"
		default:
			t.Fatalf("step %d: unknown op %q", i, st.Op.Op)
		}
		if st.Error != "" {
			if err == nil {
				t.Fatalf("step %d (%s): got %v, want error %s", i, st.Op.Op, got, st.Error)
			}
			if k := errKind(err); k != st.Error {
				t.Fatalf("step %d: error %v is %s, want %s", i, err, k, st.Error)
			}
			checkDetail(t, i, err, st.Detail)
			continue
		}
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, st.Op.Op, err)
		}
		gotJSON, _ := json.Marshal(got)
		var a, b any
		_ = json.Unmarshal(gotJSON, &a)
		_ = json.Unmarshal(st.Result, &b)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("step %d (%s): got %s, want %s", i, st.Op.Op, gotJSON, st.Result)
		}
	}
	reopen()
	s := *sp
	log := readAll(t, s, id)
	checkVectorLive(t, log, c.Live)
	want := c.Committed
	if want == nil {
		want = []string{}
	}
	if got := committed(log); !slices.Equal(got, want) {
		t.Fatalf("committed view = %q, want %q", got, want)
	}
	// The same view through a CommittedReader that holds 1 byte of the
	// data of records waiting for their writers: it reads them again.
	for _, limit := range []int{1, 2, 0} {
		if got := committedRead(t, s, id, 1, limit); !slices.Equal(got, want) {
			t.Fatalf("committed view through a CommittedReader holding 1 byte, pages of %d = %q, want %q", limit, got, want)
		}
	}
	// Reading from every offset gives the log's tail.
	for from := int64(0); from < int64(len(log)); from++ {
		res, err := s.Read(ctx(t), &store.ReadParams{StreamID: id, From: from})
		must(t, err)
		if !slices.EqualFunc(res.Records, log[from:], sameRecord) {
			t.Fatalf("read from %d = %v, want %v", from, res.Records, log[from:])
		}
	}
}

func errKind(err error) string {
	switch {
	case errors.Is(err, stream.ErrFenced):
		return "fenced"
	case errors.Is(err, stream.ErrGap):
		return "gap"
	case errors.Is(err, stream.ErrConflict):
		return "conflict"
	case errors.Is(err, stream.ErrClosed):
		return "closed"
	case errors.Is(err, stream.ErrWriterFinished):
		return "writer_finished"
	case errors.Is(err, stream.ErrUnknownWriter):
		return "unknown_writer"
	}
	return fmt.Sprintf("unexpected(%v)", err)
}

func checkDetail(t *testing.T, step int, err error, detail map[string]int64) {
	t.Helper()
	for k, v := range detail {
		var got int64
		var fe *stream.FencedError
		var ge *stream.GapError
		var ce *stream.ConflictError
		switch {
		case k == "current_attempt" && errors.As(err, &fe):
			got = fe.Current
		case k == "expected_seq" && errors.As(err, &ge):
			got = ge.Expected
		case k == "seq" && errors.As(err, &ce):
			got = ce.Seq
		default:
			t.Fatalf("step %d: error %v carries no %s", step, err, k)
		}
		if got != v {
			t.Fatalf("step %d: %s = %d, want %d", step, k, got, v)
		}
	}
}

func checkVectorLive(t *testing.T, log []stream.Record, want []vectorRec) {
	t.Helper()
	if len(log) != len(want) {
		t.Fatalf("live log has %d records, want %d:\n got %v", len(log), len(want), log)
	}
	for i, w := range want {
		r := log[i]
		kind, _ := stream.ParseKind(w.Kind)
		seq := w.Seq
		switch kind {
		case stream.KindAbort:
			seq = w.FromSeq
		case stream.KindCommit:
			seq = w.Count
		}
		if r.Offset != w.Offset || r.Kind != kind || r.Writer != w.Writer || r.Attempt != w.Attempt || r.Seq != seq || string(r.Data) != w.Data {
			t.Fatalf("live[%d] = %v, want %+v", i, r, w)
		}
		if kind == stream.KindData && r.Digest != stream.Sum(r.Data) {
			t.Fatalf("live[%d] digest %s, want %s", i, r.Digest, stream.Sum(r.Data))
		}
	}
}
