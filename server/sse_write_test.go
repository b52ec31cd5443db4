package server

import (
	"bytes"
	"encoding/base64"
	"testing"

	"github.com/weirhq/weir/stream"
)

// oneEvent is the data event as written before events were streamed: the
// payload built whole, then split into lines.
func oneEvent(contentType string, ndjson bool, recs []stream.Record) string {
	var p []byte
	switch {
	case ndjson:
		p = bytes.TrimSuffix(ndjsonBody(contentType, recs), []byte("\n"))
	case isJSONType(contentType):
		p = append(p, '[')
		for i := range recs {
			if i > 0 {
				p = append(p, ',')
			}
			p = append(p, recs[i].Data...)
		}
		p = append(p, ']')
	default:
		for i := range recs {
			p = append(p, recs[i].Data...)
		}
		if !isTextType(contentType) {
			p = base64.StdEncoding.AppendEncode(nil, p)
		}
	}
	var buf bytes.Buffer
	writeSSEEvent(&buf, "data", p)
	return buf.String()
}

// A data event written from the records, as they go, is the event built
// whole: line ends split across records (a CR ending one, a LF beginning
// the next) included, and base64 across records' bytes.
func TestSSEDataStreamed(t *testing.T) {
	recs := func(ds ...string) []stream.Record {
		out := make([]stream.Record, len(ds))
		for i, d := range ds {
			out[i] = stream.Record{Kind: stream.KindData, Offset: int64(i), Writer: "w", Data: []byte(d)}
		}
		return out
	}
	for _, c := range [][]stream.Record{
		recs("a"),
		recs("a\r", "\nb", "c\r", "d", "\n", "\r\n", "\r"),
		recs("x", "yz", "\xff\x00\x01", "1234", "5"),
		recs(`{"a":1}`, `"b\nc"`, `[1,2]`),
		append(recs("one", "two"), stream.Record{Kind: stream.KindCommit, Offset: 2, Writer: "w", Seq: 1}),
		recs(string(bytes.Repeat([]byte("0123456789\r\n"), 10000))),
	} {
		for _, ct := range []string{"text/plain", "application/octet-stream", "application/json"} {
			for _, ndjson := range []bool{false, true} {
				var buf bytes.Buffer
				writeSSEData(&buf, ct, ndjson, c)
				if want := oneEvent(ct, ndjson, c); buf.String() != want {
					t.Fatalf("%s ndjson %v %q:\n got %q\nwant %q", ct, ndjson, c, buf.String(), want)
				}
			}
		}
	}
}

// FuzzSSEEventPieces checks that a payload written in two pieces is the
// event of the whole payload.
func FuzzSSEEventPieces(f *testing.F) {
	for _, s := range []string{"plain", "a\r\nb", "a\r", "\r\n\r\n", "x\ny\rz"} {
		for cut := range len(s) + 1 {
			f.Add([]byte(s), uint8(cut))
		}
	}
	f.Fuzz(func(t *testing.T, p []byte, cut uint8) {
		k := min(int(cut), len(p))
		var whole, pieces bytes.Buffer
		writeSSEEvent(&whole, "data", p)
		e := sseEvent{w: &pieces}
		e.begin("data")
		_, _ = e.Write(p[:k])
		_, _ = e.Write(p[k:])
		e.end()
		if whole.String() != pieces.String() {
			t.Fatalf("%q cut at %d: %q, whole %q", p, k, pieces.String(), whole.String())
		}
	})
}
