package server

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// This file parses what the Durable Streams handler reads from a request:
// offsets, headers, JSON bodies and u32be frames. Every parser is pure and
// fuzzed (ds_fuzz_test.go); each error wraps api.ErrBadRequest (400) and says in
// one line what was wrong.

// Durable Streams offsets are "%016d_%016d": the first part is always 0 here
// and the second is weir's record offset, so offsets are what the spec asks
// of them: opaque, unique, strictly increasing, and ordered as strings.
const (
	maxOffset   = 9_999_999_999_999_999 // 16 digits
	offsetLen   = 33
	zeroPrefix  = "0000000000000000_"
	maxStreamID = 1<<53 - 1 // producer epochs and seqs are JSON-safe integers
)

// formatOffset returns record offset n (at most maxOffset: a stream of 10^16
// records is beyond any store) as a Durable Streams offset.
func formatOffset(n int64) string {
	var b [offsetLen]byte
	copy(b[:], zeroPrefix)
	v := uint64(n)
	for i := offsetLen - 1; i >= len(zeroPrefix); i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return string(b[:])
}

// parseOffset parses a Durable Streams offset: digits, '_', digits, each
// part read as every integer in a query is (parseDigits: at most
// maxQueryDigits digits). A well-formed offset this server never minted (a
// first part other than 0, a second past maxOffset) is an error too: no
// stream has it.
func parseOffset(s string) (int64, error) {
	hi, lo, ok := strings.Cut(s, "_")
	if !ok || !allDigits(hi) || !allDigits(lo) {
		return 0, fmt.Errorf("%w: offset %q is not of the form <digits>_<digits>", api.ErrBadRequest, clip(s))
	}
	h, ok1 := parseDigits(hi, false)
	l, ok2 := parseDigits(lo, false)
	if !ok1 || !ok2 || h != 0 || l > maxOffset {
		return 0, fmt.Errorf("%w: offset %q does not exist on this server", api.ErrBadRequest, clip(s))
	}
	return l, nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseCanonicalUint parses a non-negative integer with no sign, no leading
// zeros and no decimals (the protocol's Stream-TTL and sub-offset syntax).
func parseCanonicalUint(name, s string, limit uint64) (uint64, error) {
	if !allDigits(s) || len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("%w: %s %q is not a non-negative integer without leading zeros", api.ErrBadRequest, name, clip(s))
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v > limit {
		return 0, fmt.Errorf("%w: %s %q is too large (at most %d)", api.ErrBadRequest, name, clip(s), limit)
	}
	return v, nil
}

// parseSeqNumber parses a producer epoch or seq, or a Weir-Attempt or
// Weir-Seq: digits only, at most 2^53-1 (leading zeros allowed).
func parseSeqNumber(name, s string) (int64, error) {
	if !allDigits(s) {
		return 0, fmt.Errorf("%w: %s %q is not a non-negative integer", api.ErrBadRequest, name, clip(s))
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v > maxStreamID {
		return 0, fmt.Errorf("%w: %s %q is larger than 2^53-1", api.ErrBadRequest, name, clip(s))
	}
	return int64(v), nil
}

// clip bounds a client's value quoted in an error, so a reply stays short.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// single returns the one value of header name: "" and false if absent, an
// error if it is sent more than once (conflicting values).
func single(h http.Header, name string) (string, bool, error) {
	vs := h.Values(name)
	switch len(vs) {
	case 0:
		return "", false, nil
	case 1:
		return vs[0], true, nil
	}
	return "", false, fmt.Errorf("%w: header %s is sent %d times", api.ErrBadRequest, name, len(vs))
}

// isTrue reports whether a boolean header is "true" (any case). The
// protocol's Stream-Closed treats every other value as absent.
func isTrue(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }

// parseBoolHeader parses one of weir's boolean headers: absent, "true" or
// "false"; anything else is an error (weir's own headers are strict).
func parseBoolHeader(h http.Header, name string) (bool, error) {
	v, ok, err := single(h, name)
	if err != nil || !ok {
		return false, err
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("%w: %s %q is neither true nor false", api.ErrBadRequest, name, clip(v))
}

// Content types. The stored value is the raw header; comparisons use the
// media type alone, lower-cased.

const defaultContentType = store.DefaultContentType

// mediaType returns ct's media type, lower-cased, parameters dropped; empty
// is application/octet-stream.
func mediaType(ct string) string {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	if mt == "" {
		return defaultContentType
	}
	return mt
}

// validContentType reports whether ct looks like type/subtype.
func validContentType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(mt)
	typ, sub, ok := strings.Cut(mt, "/")
	return ok && isToken(typ) && isToken(sub)
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$&-^_.+", c) >= 0) {
			return false
		}
	}
	return true
}

func isJSONType(ct string) bool { return mediaType(ct) == "application/json" }

// isTextType reports whether SSE carries ct's bytes as text (else base64).
func isTextType(ct string) bool {
	mt := mediaType(ct)
	return strings.HasPrefix(mt, "text/") || mt == "application/json"
}

// jsonValues splits a JSON body into its values, each compacted: a top-level
// array is flattened one level (each element is one value), anything else
// is one value. An empty array gives none. The values alias body where they
// are compact already (a body of values without spaces is not copied).
//
// More than max values is store.ErrTooLarge, found while counting: the
// slice of values is allocated once the count is known to be within max, so
// a body of millions of tiny values costs its scan, not a slice header each
// (a 16 MiB [0,0,…] grew the server by 650-900 MB before it was refused).
func jsonValues(body []byte, max int) ([][]byte, error) {
	if !json.Valid(body) {
		return nil, fmt.Errorf("%w: the body is not valid JSON", api.ErrBadRequest)
	}
	v := bytes.Trim(body, " \t\r\n")
	if v[0] != '[' {
		return [][]byte{compact(v)}, nil
	}
	// A valid array: its elements are found by scanning, without decoding;
	// counted first, then taken.
	n := 0
	for i := 1; ; n++ {
		i = skipJSONSpace(v, i)
		if v[i] == ']' {
			break // [] or [ ] or the end
		}
		if n == max {
			return nil, fmt.Errorf("%w: more than %d values in one append, the limit is %d", store.ErrTooLarge, max, max)
		}
		i = skipJSONSpace(v, skipJSONValue(v, i))
		if v[i] == ']' {
			n++
			break
		}
		i++ // ,
	}
	if n == 0 {
		return nil, nil
	}
	out := make([][]byte, 0, n)
	for i := 1; len(out) < n; {
		i = skipJSONSpace(v, i)
		start := i
		i = skipJSONValue(v, i)
		out = append(out, compact(v[start:i:i]))
		i = skipJSONSpace(v, i) + 1 // past , or ]
	}
	return out, nil
}

func skipJSONSpace(v []byte, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == '\r' || v[i] == '\n') {
		i++
	}
	return i
}

// skipJSONString returns the index past the string that begins at v[i].
func skipJSONString(v []byte, i int) int {
	for i++; i < len(v); i++ {
		switch v[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipJSONValue returns the index past the value that begins at v[i], in
// valid JSON.
func skipJSONValue(v []byte, i int) int {
	switch v[i] {
	case '"':
		return skipJSONString(v, i)
	case '[', '{':
		depth := 0
		for i < len(v) {
			switch v[i] {
			case '"':
				i = skipJSONString(v, i)
				continue
			case '[', '{':
				depth++
			case ']', '}':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(v) && !strings.ContainsRune(",]} \t\r\n", rune(v[i])) {
		i++
	}
	return i
}

// compact is the valid JSON value v without insignificant spaces: v itself
// if it has none.
func compact(v []byte) []byte {
	spaced := false
	for i := 0; i < len(v) && !spaced; i++ {
		switch v[i] {
		case '"':
			i = skipJSONString(v, i) - 1
		case ' ', '\t', '\r', '\n':
			spaced = true
		}
	}
	if !spaced {
		return v
	}
	var b bytes.Buffer
	b.Grow(len(v))
	if err := json.Compact(&b, v); err != nil {
		return bytes.TrimSpace(v) // json.Valid passed: cannot happen
	}
	return b.Bytes()
}

// parseFrames splits a Weir-Framing: u32be body: each chunk is its length as
// 4 big-endian bytes, then its bytes. An empty chunk, a truncated frame or
// more than max chunks is an error.
func parseFrames(body []byte, max int) ([][]byte, error) {
	var out [][]byte
	for off := 0; off < len(body); {
		if len(body)-off < 4 {
			return nil, fmt.Errorf("%w: truncated frame header at byte %d", api.ErrBadRequest, off)
		}
		n := binary.BigEndian.Uint32(body[off:])
		off += 4
		if n == 0 {
			return nil, fmt.Errorf("%w: empty chunk in frame %d", api.ErrBadRequest, len(out))
		}
		if uint64(len(body)-off) < uint64(n) {
			return nil, fmt.Errorf("%w: frame %d declares %d bytes, %d remain", api.ErrBadRequest, len(out), n, len(body)-off)
		}
		if len(out) == max {
			return nil, fmt.Errorf("%w: more than %d chunks in one request", store.ErrTooLarge, max)
		}
		out = append(out, body[off:off+int(n):off+int(n)])
		off += int(n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no frames", api.ErrBadRequest)
	}
	return out, nil
}

// appendFrame appends chunk c in u32be framing (for clients and tests).
func appendFrame(b, c []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(c)))
	return append(b, c...)
}

// writeHeaders are the headers of a POST that decide what it does.
type writeHeaders struct {
	contentType string
	hasCT       bool
	close       bool // Stream-Closed: true
	streamSeq   string
	producer    *stream.Producer
	// weir's extension
	weir     bool // Weir-Writer is present
	writer   string
	attempt  int64
	seq      int64
	framed   bool // Weir-Framing: u32be
	commit   bool // Weir-Commit: true
	abort    bool // Weir-Abort: true
	idemKey  string
	hasCheck bool // any Weir-* header at all
}

// parseWriteHeaders parses and cross-checks a POST's headers.
func parseWriteHeaders(h http.Header) (*writeHeaders, error) {
	wh := &writeHeaders{}
	var err error
	var v string
	if v, wh.hasCT, err = single(h, "Content-Type"); err != nil {
		return nil, err
	}
	wh.contentType = v
	if v, _, err = single(h, "Stream-Closed"); err != nil {
		return nil, err
	}
	wh.close = isTrue(v)
	if wh.streamSeq, _, err = single(h, "Stream-Seq"); err != nil {
		return nil, err
	}
	if len(wh.streamSeq) > store.MaxKeyLen {
		return nil, fmt.Errorf("%w: Stream-Seq of %d bytes, the limit is %d", api.ErrBadRequest, len(wh.streamSeq), store.MaxKeyLen)
	}

	// The idempotent producer: all three headers or none.
	id, hasID, err := single(h, "Producer-Id")
	if err != nil {
		return nil, err
	}
	ep, hasEp, err := single(h, "Producer-Epoch")
	if err != nil {
		return nil, err
	}
	sq, hasSq, err := single(h, "Producer-Seq")
	if err != nil {
		return nil, err
	}
	if hasID || hasEp || hasSq {
		if !hasID || !hasEp || !hasSq {
			return nil, fmt.Errorf("%w: Producer-Id, Producer-Epoch and Producer-Seq go together", api.ErrBadRequest)
		}
		if id == "" || len(id) > store.MaxKeyLen {
			return nil, fmt.Errorf("%w: Producer-Id must have 1 to %d bytes", api.ErrBadRequest, store.MaxKeyLen)
		}
		p := &stream.Producer{ID: id}
		if p.Epoch, err = parseSeqNumber("Producer-Epoch", ep); err != nil {
			return nil, err
		}
		if p.Seq, err = parseSeqNumber("Producer-Seq", sq); err != nil {
			return nil, err
		}
		wh.producer = p
	}

	// weir's extension.
	writer, hasWriter, err := single(h, "Weir-Writer")
	if err != nil {
		return nil, err
	}
	att, hasAtt, err := single(h, "Weir-Attempt")
	if err != nil {
		return nil, err
	}
	seq, hasSeq, err := single(h, "Weir-Seq")
	if err != nil {
		return nil, err
	}
	framing, hasFraming, err := single(h, "Weir-Framing")
	if err != nil {
		return nil, err
	}
	if wh.commit, err = parseBoolHeader(h, "Weir-Commit"); err != nil {
		return nil, err
	}
	if wh.abort, err = parseBoolHeader(h, "Weir-Abort"); err != nil {
		return nil, err
	}
	if wh.idemKey, _, err = single(h, "Idempotency-Key"); err != nil {
		return nil, err
	}
	wh.idemKey = unquoteKey(wh.idemKey)
	if len(wh.idemKey) > store.MaxKeyLen {
		return nil, fmt.Errorf("%w: Idempotency-Key of %d bytes, the limit is %d", api.ErrBadRequest, len(wh.idemKey), store.MaxKeyLen)
	}
	if hasFraming {
		if !strings.EqualFold(strings.TrimSpace(framing), "u32be") {
			return nil, fmt.Errorf("%w: Weir-Framing %q: the only framing is u32be", api.ErrBadRequest, clip(framing))
		}
		wh.framed = true
	}
	wh.hasCheck = hasWriter || hasAtt || hasSeq || hasFraming || wh.commit || wh.abort
	if hasAtt && !hasWriter || hasSeq && !hasWriter {
		return nil, fmt.Errorf("%w: Weir-Attempt and Weir-Seq need Weir-Writer", api.ErrBadRequest)
	}
	if hasWriter {
		if writer == "" || len(writer) > stream.MaxWriterLen {
			return nil, fmt.Errorf("%w: Weir-Writer must have 1 to %d bytes", api.ErrBadRequest, stream.MaxWriterLen)
		}
		wh.weir, wh.writer = true, writer
		if hasAtt {
			if wh.attempt, err = parseSeqNumber("Weir-Attempt", att); err != nil {
				return nil, err
			}
		}
		if hasSeq {
			if wh.seq, err = parseSeqNumber("Weir-Seq", seq); err != nil {
				return nil, err
			}
		}
	}
	switch {
	case wh.weir && wh.producer != nil:
		return nil, fmt.Errorf("%w: Weir-Writer and Producer-Id are two ways to deduplicate: send one", api.ErrBadRequest)
	case wh.commit && wh.abort:
		return nil, fmt.Errorf("%w: Weir-Commit and Weir-Abort together", api.ErrBadRequest)
	case (wh.commit || wh.abort) && (!hasWriter || !hasAtt):
		return nil, fmt.Errorf("%w: Weir-Commit and Weir-Abort need Weir-Writer and Weir-Attempt", api.ErrBadRequest)
	case (wh.commit || wh.abort) && (hasSeq || hasFraming || wh.close || wh.streamSeq != ""):
		return nil, fmt.Errorf("%w: Weir-Commit and Weir-Abort take no Weir-Seq, Weir-Framing, Stream-Closed or Stream-Seq", api.ErrBadRequest)
	case wh.weir && !wh.commit && !wh.abort && !hasSeq:
		return nil, fmt.Errorf("%w: an append with Weir-Writer needs Weir-Seq (the seq of its first chunk)", api.ErrBadRequest)
	}
	return wh, nil
}

// unquoteKey accepts an Idempotency-Key as the IETF draft sends it (a
// quoted string) or bare.
func unquoteKey(k string) string {
	k = strings.TrimSpace(k)
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		return k[1 : len(k)-1]
	}
	return k
}

// createHeaders are the headers of a PUT.
type createHeaders struct {
	contentType  string // raw; "" when absent or not type/subtype
	expiry       store.Expiry
	hasTTL       bool
	hasExpiresAt bool
	closed       bool
	forkedFrom   string // the source's stream path (prefix stripped); "" if none
	isFork       bool
	forkOffset   int64
	hasForkOff   bool
	subOffset    int64
}

// maxTTLSeconds keeps a TTL within time.Duration.
const maxTTLSeconds = uint64(1<<63-1) / uint64(time.Second)

// parseCreateHeaders parses and cross-checks a PUT's headers, in the
// protocol's order of checks.
func parseCreateHeaders(h http.Header) (*createHeaders, error) {
	ch := &createHeaders{}
	ttl, hasTTL, err := single(h, "Stream-TTL")
	if err != nil {
		return nil, err
	}
	exp, hasExp, err := single(h, "Stream-Expires-At")
	if err != nil {
		return nil, err
	}
	if hasTTL && hasExp {
		return nil, fmt.Errorf("%w: Stream-TTL and Stream-Expires-At together", api.ErrBadRequest)
	}
	if hasTTL {
		v, err := parseCanonicalUint("Stream-TTL", ttl, maxTTLSeconds)
		if err != nil {
			return nil, err
		}
		ch.hasTTL = true
		ch.expiry = store.Expiry{HasTTL: true, TTL: time.Duration(v) * time.Second}
	}
	if hasExp {
		at, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(exp))
		if err != nil {
			return nil, fmt.Errorf("%w: Stream-Expires-At %q is not an RFC 3339 time", api.ErrBadRequest, clip(exp))
		}
		if at.Before(store.MinExpiresAt) {
			// The zero time, 0001-01-01, is the store's "no expiry":
			// refused as 1969 is, not taken as never (red team, round
			// eight).
			return nil, fmt.Errorf("%w: Stream-Expires-At %q: want a time between %s and %s", api.ErrBadRequest, clip(exp),
				store.MinExpiresAt.Format(time.RFC3339), store.MaxExpiresAt.Format(time.RFC3339))
		}
		ch.hasExpiresAt = true
		ch.expiry = store.Expiry{At: at.UTC()}
	}
	from, hasFrom, err := single(h, "Stream-Forked-From")
	if err != nil {
		return nil, err
	}
	off, hasOff, err := single(h, "Stream-Fork-Offset")
	if err != nil {
		return nil, err
	}
	if hasOff {
		if ch.forkOffset, err = parseOffset(off); err != nil {
			return nil, err
		}
		ch.hasForkOff = true
	}
	sub, hasSub, err := single(h, "Stream-Fork-Sub-Offset")
	if err != nil {
		return nil, err
	}
	if hasSub {
		if !hasFrom {
			return nil, fmt.Errorf("%w: Stream-Fork-Sub-Offset needs Stream-Forked-From", api.ErrBadRequest)
		}
		v, err := parseCanonicalUint("Stream-Fork-Sub-Offset", sub, maxStreamID)
		if err != nil {
			return nil, err
		}
		ch.subOffset = int64(v)
	}
	if hasOff && !hasFrom {
		return nil, fmt.Errorf("%w: Stream-Fork-Offset needs Stream-Forked-From", api.ErrBadRequest)
	}
	if hasFrom {
		p, ok := strings.CutPrefix(strings.TrimSpace(from), streamPrefix)
		if !ok {
			p = strings.TrimPrefix(strings.TrimSpace(from), "/")
		}
		if err := checkStreamPath(p); err != nil {
			return nil, fmt.Errorf("Stream-Forked-From: %w", err)
		}
		ch.forkedFrom, ch.isFork = p, true
	}
	ct, _, err := single(h, "Content-Type")
	if err != nil {
		return nil, err
	}
	if validContentType(ct) {
		ch.contentType = strings.TrimSpace(ct)
	}
	v, _, err := single(h, "Stream-Closed")
	if err != nil {
		return nil, err
	}
	ch.closed = isTrue(v)
	return ch, nil
}

// maxPathLen bounds a stream path.
const maxPathLen = 1024

// checkStreamPath checks a stream path (the URL path after /v1/stream/): not
// empty, no empty, "." or ".." segment, no control characters.
func checkStreamPath(p string) error {
	if p == "" {
		return fmt.Errorf("%w: empty stream path", store.ErrNotFound)
	}
	if len(p) > maxPathLen {
		return fmt.Errorf("%w: stream path of %d bytes, the limit is %d", api.ErrBadRequest, len(p), maxPathLen)
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 0x20 || p[i] == 0x7f {
			return fmt.Errorf("%w: control character in the stream path", api.ErrBadRequest)
		}
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: stream path %q has an empty, . or .. segment", api.ErrBadRequest, clip(p))
		}
	}
	return nil
}

// readQuery is a GET's query.
type readQuery struct {
	offset  int64 // record offset; -1: the start (also when absent); see now
	now     bool  // offset=now: the tail
	rawOff  string
	hasOff  bool
	live    string // "", "long-poll", "sse"
	cursor  string
	view    stream.View
	ndjson  bool
	hasView bool
}

// parseReadQuery parses a GET's query string. Unknown parameters are
// ignored; a known one sent twice, an empty offset, or a malformed query is
// an error.
func parseReadQuery(raw string) (*readQuery, error) {
	q := &readQuery{offset: -1, view: stream.CommittedView}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: malformed query: %v", api.ErrBadRequest, err)
	}
	one := func(k string) (string, bool, error) {
		vs, ok := vals[k]
		if !ok {
			return "", false, nil
		}
		if len(vs) > 1 {
			return "", false, fmt.Errorf("%w: query parameter %s is given %d times", api.ErrBadRequest, k, len(vs))
		}
		return vs[0], true, nil
	}
	off, hasOff, err := one("offset")
	if err != nil {
		return nil, err
	}
	if hasOff {
		q.hasOff, q.rawOff = true, off
		switch off {
		case "":
			return nil, fmt.Errorf("%w: empty offset", api.ErrBadRequest)
		case "-1":
		case "now":
			q.now = true
		default:
			if q.offset, err = parseOffset(off); err != nil {
				return nil, err
			}
		}
	}
	live, _, err := one("live")
	if err != nil {
		return nil, err
	}
	switch live {
	case "", "long-poll", "sse":
		q.live = live
	default:
		return nil, fmt.Errorf("%w: live=%q: the modes are long-poll and sse", api.ErrBadRequest, clip(live))
	}
	if q.live != "" && !hasOff {
		return nil, fmt.Errorf("%w: live=%s needs an offset", api.ErrBadRequest, q.live)
	}
	if q.cursor, _, err = one("cursor"); err != nil {
		return nil, err
	}
	view, hasView, err := one("view")
	if err != nil {
		return nil, err
	}
	if hasView {
		v, ok := stream.ParseView(view)
		if !ok || view == "" {
			return nil, fmt.Errorf("%w: view=%q: the views are committed and live", api.ErrBadRequest, clip(view))
		}
		q.view, q.hasView = v, true
	}
	format, _, err := one("format")
	if err != nil {
		return nil, err
	}
	switch format {
	case "", "raw":
	case "ndjson":
		q.ndjson = true
		if !hasView {
			q.view = stream.Live // framed readers see every record
		}
	default:
		return nil, fmt.Errorf("%w: format=%q: the formats are raw and ndjson", api.ErrBadRequest, clip(format))
	}
	return q, nil
}
