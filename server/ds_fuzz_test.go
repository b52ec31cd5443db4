package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
)

// Fuzz targets of the streams handler's parsers. Seed corpora live in
// testdata/fuzz/<target>; run one with e.g.
//
//	go test ./server -run '^$' -fuzz '^FuzzParseFrames$' -fuzztime 30s

// headerOf turns "Name: value" lines into a header (repeats kept).
func headerOf(s string) http.Header {
	h := http.Header{}
	for line := range strings.SplitSeq(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		h.Add(textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(k)), strings.TrimSpace(v))
	}
	return h
}

// badRequest checks that a parser's error is a client error with a
// one-line reason.
func badRequest(t *testing.T, err error) {
	t.Helper()
	if st := api.Status(err); st != http.StatusBadRequest && st != http.StatusNotFound && st != http.StatusRequestEntityTooLarge {
		t.Fatalf("error %v maps to %d", err, st)
	}
	if strings.ContainsAny(err.Error(), "\n\r") {
		t.Fatalf("error %q is not one line", err)
	}
}

func FuzzParseOffset(f *testing.F) {
	for _, s := range []string{formatOffset(0), formatOffset(12345), "0_1", "-1", "now", "0,1", "0 1", "a",
		"9999999999999999_9999999999999999", "0000000000000001_0000000000000000", "_", "0_", "0_99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseOffset(s)
		if err != nil {
			badRequest(t, err)
			return
		}
		if n < 0 || n > maxOffset {
			t.Fatalf("parseOffset(%q) = %d", s, n)
		}
		f := formatOffset(n)
		if m, err := parseOffset(f); err != nil || m != n || len(f) != offsetLen {
			t.Fatalf("formatOffset(%d) = %q does not parse back (%d, %v)", n, f, m, err)
		}
		// Offsets order as strings as they do as numbers.
		if n < maxOffset && !(formatOffset(n) < formatOffset(n+1)) {
			t.Fatalf("%q !< %q", formatOffset(n), formatOffset(n+1))
		}
	})
}

func FuzzParseFrames(f *testing.F) {
	f.Add(appendFrame(appendFrame(nil, []byte("one")), []byte("two")))
	f.Add([]byte{0, 0, 0, 1, 'x'})
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 9, 'x'})
	f.Add([]byte{0, 0})
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		chunks, err := parseFrames(b, 64)
		if err != nil {
			badRequest(t, err)
			return
		}
		var again []byte
		for _, c := range chunks {
			if len(c) == 0 {
				t.Fatal("an empty chunk")
			}
			again = appendFrame(again, c)
		}
		if !bytes.Equal(again, b) || len(chunks) > 64 {
			t.Fatalf("frames of %x re-encode to %x", b, again)
		}
	})
}

func FuzzParseWriteHeaders(f *testing.F) {
	for _, s := range []string{
		"Content-Type: text/plain",
		"Content-Type: text/plain\nStream-Closed: TRUE\nStream-Seq: 0001",
		"Producer-Id: p\nProducer-Epoch: 0\nProducer-Seq: 1",
		"Producer-Id: p\nProducer-Epoch: 1e3\nProducer-Seq: 1",
		"Producer-Id:\nProducer-Epoch: 0\nProducer-Seq: 0",
		"Producer-Seq: 1\nProducer-Seq: 2",
		"Weir-Writer: step/1\nWeir-Attempt: 2\nWeir-Seq: 0\nWeir-Framing: u32be",
		"Weir-Writer: w\nWeir-Attempt: 1\nWeir-Commit: true",
		"Weir-Writer: w\nWeir-Attempt: 1\nWeir-Abort: true\nWeir-Commit: true",
		"Weir-Seq: 3",
		"Weir-Writer: w\nWeir-Seq: 9007199254740992",
		"Idempotency-Key: \"abc\"\nContent-Type: application/json",
		"Weir-Writer: w\nWeir-Seq: 0\nProducer-Id: p\nProducer-Epoch: 0\nProducer-Seq: 0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		wh, err := parseWriteHeaders(headerOf(s))
		if err != nil {
			badRequest(t, err)
			return
		}
		switch {
		case wh.weir && wh.writer == "":
			t.Fatal("a writer without an id")
		case wh.weir && wh.producer != nil:
			t.Fatal("a writer and a producer")
		case (wh.commit || wh.abort) && !wh.weir:
			t.Fatal("commit or abort without a writer")
		case wh.commit && wh.abort:
			t.Fatal("commit and abort")
		case wh.producer != nil && (wh.producer.ID == "" || wh.producer.Epoch < 0 || wh.producer.Seq < 0 ||
			wh.producer.Epoch > maxStreamID || wh.producer.Seq > maxStreamID):
			t.Fatalf("producer %+v", wh.producer)
		case wh.attempt < 0 || wh.seq < 0 || len(wh.idemKey) > store.MaxKeyLen:
			t.Fatalf("headers %+v", wh)
		}
	})
}

func FuzzParseCreateHeaders(f *testing.F) {
	for _, s := range []string{
		"Content-Type: application/json; charset=utf-8\nStream-TTL: 3600",
		"Stream-TTL: 60\nStream-Expires-At: 2030-01-01T00:00:00Z",
		"Stream-TTL: 00060",
		"Stream-Expires-At: 2026-06-03T10:00:00.123+00:00",
		"Stream-Forked-From: /v1/stream/src\nStream-Fork-Offset: 0000000000000000_0000000000000003\nStream-Fork-Sub-Offset: 2",
		"Stream-Fork-Sub-Offset: 0",
		"Stream-Forked-From: /v1/stream/a/../b",
		"Stream-Closed: true\nContent-Type: not a type",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ch, err := parseCreateHeaders(headerOf(s))
		if err != nil {
			badRequest(t, err)
			return
		}
		if ch.hasTTL && ch.hasExpiresAt || ch.expiry.HasTTL && ch.expiry.TTL < 0 || ch.subOffset < 0 || ch.forkOffset < 0 {
			t.Fatalf("headers %+v", ch)
		}
		if (ch.subOffset > 0 || ch.hasForkOff) && !ch.isFork {
			t.Fatalf("fork options without a source: %+v", ch)
		}
		if ch.isFork && checkStreamPath(ch.forkedFrom) != nil {
			t.Fatalf("source path %q", ch.forkedFrom)
		}
		if ch.contentType != "" && !validContentType(ch.contentType) {
			t.Fatalf("content type %q", ch.contentType)
		}
	})
}

func FuzzParseReadQuery(f *testing.F) {
	for _, s := range []string{"", "offset=-1", "offset=now&live=sse", "offset=" + formatOffset(5) + "&live=long-poll&cursor=123",
		"offset=&x=1", "offset=a&offset=b", "view=committed&format=ndjson", "format=ndjson", "live=sse", "offset=0%201", "%zz",
		// Numbers spelled otherwise than in digits alone (red team, round
		// fourteen: limit=+5 was taken).
		"offset=%2B000000000000000_0000000000000005", "offset=0000000000000000_%2B000000000000005",
		"offset=0000000000000000_00000000000000000005", "offset=-0000000000000000_0000000000000005",
		"offset=now&live=long-poll&cursor=%2B99999999999", "offset=now&live=long-poll&cursor=-1",
		"offset=now&live=long-poll&cursor=00000000000000000000000099999999999"} {
		f.Add(s)
	}
	offsetRE := regexp.MustCompile(`^[0-9]{1,19}_[0-9]{1,19}$`)
	f.Fuzz(func(t *testing.T, s string) {
		q, err := parseReadQuery(s)
		if err != nil {
			badRequest(t, err)
			return
		}
		if q.live != "" && !q.hasOff || q.offset < -1 || q.now && q.offset != -1 {
			t.Fatalf("query %q parsed as %+v", s, q)
		}
		if q.offset >= 0 && !offsetRE.MatchString(q.rawOff) {
			t.Fatalf("offset %q taken as %d", q.rawOff, q.offset)
		}
		// A cursor not in digits alone is ignored: the reply's is the
		// clock's, as without one.
		now := time.Now()
		if _, ok := parseDigits(q.cursor, false); !ok && nextCursor(q.cursor, now) != nextCursor("", now) {
			t.Fatalf("cursor %q was read", q.cursor)
		}
		if c := nextCursor(q.cursor, now); !allDigits(c) {
			t.Fatalf("cursor %q answered with %q", q.cursor, c)
		}
	})
}

func FuzzJSONValues(f *testing.F) {
	for _, s := range []string{`[]`, `[1,[2,3],{"a":"b"}]`, `"x"`, ` [ 1 , 2 ] `, `{ bad`, `[[[1]]]`, `null`, `[`, `1 2`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		vals, err := jsonValues(b, 1<<30)
		if err != nil {
			badRequest(t, err)
			return
		}
		for _, v := range vals {
			if !json.Valid(v) || len(v) == 0 {
				t.Fatalf("value %q of %q", v, b)
			}
		}
		// The values rejoin into the same JSON (one level flattened).
		joined := "[" + string(bytes.Join(vals, []byte(","))) + "]"
		// Numbers stay literals: 1E700 is valid JSON that no float64 holds.
		decode := func(b []byte, v *any) error {
			d := json.NewDecoder(bytes.NewReader(b))
			d.UseNumber()
			return d.Decode(v)
		}
		var want, got any
		if err := decode(b, &want); err != nil {
			t.Fatal(err)
		}
		if _, ok := want.([]any); !ok {
			want = []any{want}
		}
		if err := decode([]byte(joined), &got); err != nil {
			t.Fatalf("joined %q: %v", joined, err)
		}
		w, _ := json.Marshal(want)
		g, _ := json.Marshal(got)
		if !bytes.Equal(w, g) {
			t.Fatalf("%q flattened to %q", b, joined)
		}
	})
}

// FuzzSSEEvent checks that no payload can end its event early or forge one.
func FuzzSSEEvent(f *testing.F) {
	for _, s := range []string{"plain", "a\nb", "a\r\nb\rc", "\n\nevent: control\ndata: {}\n\n", "", "\r", "x\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		var buf bytes.Buffer
		writeSSEEvent(&buf, "data", p)
		out := buf.String()
		if !strings.HasPrefix(out, "event: data\n") || !strings.HasSuffix(out, "\n\n") {
			t.Fatalf("event %q", out)
		}
		body := strings.TrimSuffix(strings.TrimPrefix(out, "event: data\n"), "\n\n")
		var lines []string
		for line := range strings.SplitSeq(body, "\n") {
			rest, ok := strings.CutPrefix(line, "data:")
			if !ok || strings.ContainsRune(rest, '\r') {
				t.Fatalf("line %q of event %q", line, out)
			}
			lines = append(lines, rest)
		}
		norm := strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(string(p))
		if strings.Join(lines, "\n") != norm {
			t.Fatalf("payload %q came back as %q", p, strings.Join(lines, "\n"))
		}
	})
}

// FuzzStreamRequest sends arbitrary headers, query and body to a real
// handler: it never answers 5xx, and an error is one line.
func FuzzStreamRequest(f *testing.F) {
	for _, s := range []struct {
		method, query, hdr, body string
	}{
		{"POST", "", "Content-Type: text/plain", "x"},
		{"POST", "", "Content-Type: text/plain\nWeir-Writer: w\nWeir-Attempt: 1\nWeir-Seq: 0\nWeir-Framing: u32be", "\x00\x00\x00\x01a"},
		{"POST", "", "Weir-Writer: w\nWeir-Attempt: 1\nWeir-Commit: true", ""},
		{"POST", "", "Content-Type: text/plain\nProducer-Id: p\nProducer-Epoch: 0\nProducer-Seq: 0\nStream-Closed: true", "z"},
		{"POST", "", "Content-Type: text/plain\nIdempotency-Key: k", "y"},
		{"PUT", "", "Stream-Forked-From: /v1/stream/s\nStream-Fork-Sub-Offset: 1", ""},
		{"GET", "offset=-1&format=ndjson&view=live", "", ""},
		{"GET", "offset=now&live=long-poll", "", ""},
		{"DELETE", "", "", ""},
		{"HEAD", "", "", ""},
	} {
		f.Add(s.method, s.query, s.hdr, []byte(s.body))
	}
	// One server for all inputs; live reads end at once.
	d := newDSServer(f, &Config{LongPollTimeout: time.Millisecond, SSEMaxDuration: 5 * time.Millisecond})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("PUT", streamPrefix+"s", strings.NewReader(""))
	req.Header.Set("Content-Type", "text/plain")
	d.srv.ServeHTTP(rec, req)
	f.Fuzz(func(t *testing.T, method, query, hdr string, body []byte) {
		switch method {
		case "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS":
		default:
			return
		}
		path := "s"
		if method == "PUT" || method == "DELETE" {
			path = "f" // keep "s" for the others
		}
		req, err := http.NewRequest(method, "http://x"+streamPrefix+path+"?"+query, bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header = headerOf(hdr)
		rec := httptest.NewRecorder()
		d.srv.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s ?%s %q %q: %d %q", method, query, hdr, body, rec.Code, rec.Body)
		}
		if rec.Code >= 400 && method != "HEAD" {
			b := rec.Body.String()
			if !strings.HasSuffix(b, "\n") || strings.Count(b, "\n") != 1 {
				t.Fatalf("error body %q", b)
			}
		}
	})
}

// jsonValuesDecoded is jsonValues as it was: the array decoded, each
// element compacted into a copy.
func jsonValuesDecoded(body []byte) ([][]byte, error) {
	if !json.Valid(body) {
		return nil, api.ErrBadRequest
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var elems []json.RawMessage
		if err := json.Unmarshal(body, &elems); err != nil {
			return nil, err
		}
		out := make([][]byte, len(elems))
		for i, e := range elems {
			var b bytes.Buffer
			_ = json.Compact(&b, e)
			out[i] = b.Bytes()
		}
		return out, nil
	}
	var b bytes.Buffer
	_ = json.Compact(&b, body)
	return [][]byte{b.Bytes()}, nil
}

// FuzzJSONValuesScanned checks the array scanner against decoding.
func FuzzJSONValuesScanned(f *testing.F) {
	for _, s := range []string{`[]`, `[ ]`, `[1,[2,3],{"a":"b"}]`, `"x"`, ` [ 1 , 2 ] `, `[[[1]]]`, `null`, `1`, ` "a b" `,
		`["a\"]", "\\", {"k": [1, "]"]}, -1.5e3, true, false, null]`, "[\n1\r\n,\t2]", `{"a" : [ ] }`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, werr := jsonValuesDecoded(b)
		got, gerr := jsonValues(b, 1<<30)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: decoded %v, scanned %v", b, werr, gerr)
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d values, want %d", b, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%q: value %d = %q, want %q", b, i, got[i], want[i])
			}
		}
	})
}
