package stream_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"testing"

	"github.com/weirhq/weir/stream"
)

// The golden cases of semantics.md, copied from the design folder into
// testdata so the test does not depend on files outside the module.
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

// memStream is the smallest possible store: what every backend does, minus
// durability. It exists only to drive the rules in tests.
type memStream struct {
	head    stream.Head
	writers map[string]*stream.Writer
	log     []stream.Record
}

func (m *memStream) writer(id string, create bool) *stream.Writer {
	if id == "" {
		return nil
	}
	w := m.writers[id]
	if w == nil && create {
		w = &stream.Writer{ID: id}
		m.writers[id] = w
	}
	return w
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

func TestGoldenVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/stream-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vf vectorFile
	if err := json.Unmarshal(raw, &vf); err != nil {
		t.Fatal(err)
	}
	if len(vf.Cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range vf.Cases {
		t.Run(c.Name, func(t *testing.T) {
			m := &memStream{writers: map[string]*stream.Writer{}}
			for i, st := range c.Steps {
				var got any
				var err error
				switch st.Op.Op {
				case "append":
					chunks := make([][]byte, len(st.Op.Chunks))
					for j, s := range st.Op.Chunks {
						chunks[j] = []byte(s)
					}
					w := m.writer(st.Op.Writer, false)
					fresh := w == nil && st.Op.Writer != ""
					if fresh {
						w = &stream.Writer{ID: st.Op.Writer}
					}
					var acks []stream.Ack
					var recs []stream.Record
					acks, recs, err = stream.Append(&m.head, w, &stream.AppendRequest{Attempt: st.Op.Attempt, FirstSeq: st.Op.Seq, Chunks: chunks})
					if err == nil {
						if fresh {
							m.writers[w.ID] = w
						}
						m.log = append(m.log, recs...)
						var out []vectorAck
						for _, a := range acks {
							out = append(out, vectorAck{a.Offset, a.Outcome.String()})
						}
						got = out
					}
				case "commit", "abort":
					f := stream.Commit
					word := "committed"
					if st.Op.Op == "abort" {
						f, word = stream.Abort, "aborted"
					}
					var res stream.Result
					var recs []stream.Record
					res, recs, err = f(&m.head, m.writer(st.Op.Writer, false), st.Op.Attempt)
					if err == nil {
						m.log = append(m.log, recs...)
						got = word
						if res == stream.Already {
							got = "already_" + word
						}
					}
				case "close":
					_, recs := stream.Close(&m.head)
					m.log = append(m.log, recs...)
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
					t.Fatalf("step %d (%s): unexpected error %v", i, st.Op.Op, err)
				}
				gotJSON, _ := json.Marshal(got)
				var a, b any
				_ = json.Unmarshal(gotJSON, &a)
				_ = json.Unmarshal(st.Result, &b)
				if !reflect.DeepEqual(a, b) {
					t.Fatalf("step %d (%s): got %s, want %s", i, st.Op.Op, gotJSON, st.Result)
				}
			}
			checkLive(t, m.log, c.Live)
			checkCommitted(t, m.log, c.Committed)
		})
	}
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

func checkLive(t *testing.T, log []stream.Record, want []vectorRec) {
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
	}
}

func checkCommitted(t *testing.T, log []stream.Record, want []string) {
	t.Helper()
	got := []string{}
	var f stream.Committed
	for i := range log {
		f.Push(&log[i], func(r *stream.Record) {
			if r.Kind == stream.KindData {
				got = append(got, string(r.Data))
			}
		})
	}
	if want == nil {
		want = []string{}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("committed view = %q, want %q", got, want)
	}
}
