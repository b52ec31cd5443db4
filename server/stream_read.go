package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// Reads.
//
// A GET reads from an offset, in one of two views and two formats:
//   - view=committed (the default of raw reads): the data of committed
//     writers only, each chunk once; the next offset a reader gets is the
//     last stable offset (stream.Committed);
//   - view=live: every data record as written, the default of format=ndjson;
//   - format=raw (the default): the data bytes alone, as any Durable Streams
//     client expects them (a JSON stream's values as one array);
//   - format=ndjson: one JSON object per record, every kind (data, abort,
//     commit, close), for readers that apply aborts themselves.
//
// A raw live reader cannot be told to drop bytes it already got: in the live
// modes (long-poll, SSE), reaching an abort record ends the read with an
// error (409 / an "error" event) naming the abort, so the reader re-reads.

// streamWriteTimeout is how long writing one reply (or one SSE flush) may
// block on a client that does not read before the response ends. A variable
// for tests.
var streamWriteTimeout = 30 * time.Second

// dsReader reads pages of one view of a stream from an offset on. It keeps
// the committed view's state between pages, so a live reader's pages join
// up exactly.
type dsReader struct {
	st          store.Store
	id          int64
	ndjson      bool
	stopAtAbort bool                   // raw live view in a live mode: an abort ends the read
	pos         int64                  // the next offset of the live view to read
	committed   *store.CommittedReader // the committed view; nil: live
}

// dsPage is one page of a read.
type dsPage struct {
	recs     []stream.Record // to send: data records (raw), every record (ndjson)
	bytes    int
	next     int64 // where the reader resumes
	head     int64 // the stream's next offset when read
	upToDate bool  // the page reaches the end of what the view has now
	closed   bool  // ... and the stream is closed: nothing will follow
	abort    *stream.Record
	// piece is set when recs is one record larger than the page, of which
	// recs[0].Data is the first piece (store.ReadParams.Pieces); rest gives
	// the others to f, read a page at a time as they are written, so that
	// the record is never held whole.
	piece *store.Piece
	rest  func(f func([]byte) error) error
}

// setPiece makes pg the first piece of its record, whose rest rd reads.
func (rd *dsReader) setPiece(ctx context.Context, pg *dsPage, piece *store.Piece, maxBytes int) {
	r := pg.recs[0]
	pg.piece = piece
	pg.rest = func(f func([]byte) error) error {
		return store.ReadPieces(ctx, rd.st, rd.id, r.Offset, piece.End(len(r.Data)), piece.Size, maxBytes, f)
	}
}

// size is the data bytes of pg's records, a piece's record whole.
func (pg *dsPage) size() int {
	if pg.piece != nil {
		return int(pg.piece.Size)
	}
	return pg.bytes
}

// maxPageRecords bounds the records of a page: a record costs a reader
// about 100 bytes beside its data, so a page of 256 KiB of one-byte
// records would hold 27 MB.
const maxPageRecords = store.DefaultReadLimit

// newReader returns a reader of q's view of stream id from offset from,
// that holds about hold bytes of data (the committed view's records
// waiting for their writers: store.CommittedReader).
func newReader(st store.Store, id int64, q *readQuery, from int64, hold int) *dsReader {
	rd := &dsReader{st: st, id: id, ndjson: q.ndjson, pos: from}
	if q.view == stream.CommittedView {
		rd.committed = store.NewCommittedReader(st, id, from, hold)
		rd.committed.Pieces = true
	} else {
		rd.stopAtAbort = !q.ndjson && q.live != ""
	}
	return rd
}

// read returns the next page, of about maxBytes of data at most.
func (rd *dsReader) read(ctx context.Context, maxBytes int) (*dsPage, error) {
	if rd.committed != nil {
		return rd.readCommitted(ctx, maxBytes)
	}
	pg := &dsPage{}
	take := func(r *stream.Record) bool {
		if !rd.ndjson && r.Kind != stream.KindData {
			return true // raw readers get data only
		}
		if len(pg.recs) >= maxPageRecords || len(pg.recs) > 0 && pg.bytes+len(r.Data) > maxBytes {
			return false
		}
		pg.recs = append(pg.recs, *r)
		pg.bytes += len(r.Data)
		return true
	}
	full, closed := false, false
	for !full {
		// Past the first read, only what is left of the page: a page read
		// whole, to learn that its first record does not fit, would be held
		// beside the page while the reply is written.
		mb := maxBytes
		if len(pg.recs) > 0 {
			mb = max(maxBytes-pg.bytes, 1)
		}
		res, err := rd.st.Read(ctx, &store.ReadParams{StreamID: rd.id, From: rd.pos, MaxBytes: mb, Pieces: true})
		if err != nil {
			return nil, err
		}
		pg.head, closed = res.NextOffset, res.Closed
		if res.Piece != nil {
			// A record larger than the page: the next page's alone, or
			// this one, a piece at a time.
			full = true
			if len(pg.recs) == 0 {
				pg.recs, pg.bytes = res.Records, len(res.Records[0].Data)
				rd.pos = res.Records[0].Offset + 1
				rd.setPiece(ctx, pg, res.Piece, maxBytes)
			}
			break
		}
		for i := range res.Records {
			r := &res.Records[i]
			if r.Kind == stream.KindAbort && rd.stopAtAbort {
				full = true
				if len(pg.recs) == 0 {
					rd.pos = r.Offset + 1
					a := *r
					pg.abort = &a
				}
				break
			}
			if full = !take(r); full {
				break
			}
			rd.pos = r.Offset + 1
		}
		if !full && rd.pos >= res.NextOffset {
			pg.upToDate = true
			break
		}
	}
	pg.next = rd.pos
	pg.closed = pg.upToDate && closed && rd.pos >= pg.head
	return pg, nil
}

// readCommitted returns the committed view's next page.
func (rd *dsReader) readCommitted(ctx context.Context, maxBytes int) (*dsPage, error) {
	recs, piece, err := rd.committed.Next(ctx, maxPageRecords, maxBytes)
	if err != nil {
		return nil, err
	}
	pg := &dsPage{}
	for _, r := range recs {
		if rd.ndjson || r.Kind == stream.KindData { // raw readers get data only
			pg.recs = append(pg.recs, r)
			pg.bytes += len(r.Data)
		}
	}
	if piece != nil {
		rd.setPiece(ctx, pg, piece, maxBytes)
	}
	head, closed := rd.committed.Head()
	pg.head, pg.next, pg.upToDate = head, rd.committed.NextOffset(), rd.committed.CaughtUp()
	pg.closed = pg.upToDate && closed && rd.committed.Pos() >= head
	rd.pos = rd.committed.Pos()
	return pg, nil
}

// handleRead serves GET: catch-up, long-poll and SSE.
func (s *Server) handleRead(w http.ResponseWriter, r *http.Request, path string) {
	release, err := s.reader()
	if err != nil {
		s.streamError(w, err)
		return
	}
	defer release()
	ctx := r.Context()
	now := s.now()
	q, err := parseReadQuery(r.URL.RawQuery)
	if err != nil {
		s.streamError(w, err)
		return
	}
	// A live read of a run's stream watches the run before it looks, so
	// that the stream's creation after the look still wakes it.
	watch := s.watchRunStream(path, q.live != "")
	defer watch.stop()
	info, err := s.lookup(ctx, path, now)
	if errors.Is(err, store.ErrNotFound) && q.live != "" {
		info, err = s.awaitRunStream(ctx, path, err, watch)
		if info == nil && err == nil {
			// Not written yet: the reader polls again from the start.
			w.Header().Set("Stream-Next-Offset", formatOffset(0))
			w.Header().Set("Stream-Up-To-Date", "true")
			w.Header().Set("Stream-Cursor", nextCursor(q.cursor, time.Now()))
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	if err != nil {
		s.streamError(w, err)
		return
	}
	if info.Expiry.HasTTL {
		// Reads renew the sliding TTL, live ones when they begin.
		if err := s.store.TouchStream(ctx, &store.TouchStreamParams{ID: info.ID, At: now}); err != nil {
			s.streamError(w, err)
			return
		}
	}
	from := max(q.offset, 0)
	if q.now {
		from = info.NextOffset
	}
	if from > info.NextOffset {
		s.streamError(w, fmt.Errorf("%w: offset %s is past the stream's end %s", api.ErrBadRequest, formatOffset(from), formatOffset(info.NextOffset)))
		return
	}
	rd := newReader(s.store, info.ID, q, from, s.cfg.ReadPageBytes)
	switch q.live {
	case "long-poll":
		s.longPoll(w, r, info, q, rd)
	case "sse":
		s.serveSSE(w, r, info, q, rd)
	default:
		s.catchUp(w, r, info, q, rd)
	}
}

// runStreamWatch is a live reader's watch of the run whose stream it
// reads (store.RunWatcher): changed is closed when a stream of the run is
// created or the run ends. Without a watcher (or for a standalone stream),
// changed is nil.
type runStreamWatch struct {
	run     string
	changed <-chan struct{}
	cancel  func()
	w       store.RunWatcher
}

func (w *runStreamWatch) stop() {
	if w.cancel != nil {
		w.cancel()
		w.cancel = nil
	}
}

// again watches anew, after a wake.
func (w *runStreamWatch) again() {
	w.stop()
	if w.w != nil {
		w.changed, w.cancel = w.w.WatchRun(w.run)
	}
}

// watchRunStream watches the run of path, if path is a run's stream and
// live says the reader will wait for it.
func (s *Server) watchRunStream(path string, live bool) *runStreamWatch {
	run, _, ok := strings.Cut(strings.TrimPrefix(path, runsPrefix), "/")
	w := &runStreamWatch{run: run}
	if !live || !ok || !strings.HasPrefix(path, runsPrefix) {
		return w
	}
	if rw, ok := store.WatcherOf(s.store); ok {
		w.w = rw
		w.changed, w.cancel = rw.WatchRun(run)
	}
	return w
}

// lookSpacing is the least time between two looks of a wait woken by a
// change: a wake says that something of the run changed (or, for a World
// follower, that this server opened a World stream), not that it is what
// the reader waits for, and a burst of them must not cost every waiting
// reader a look apiece (red-team round eleven: 1,000 readers of a run's
// streams not written yet and 1,000 World streams made in it cost 13 s of
// CPU, 12 ms a creation). The first wake after a quiet while looks at once.
const lookSpacing = 100 * time.Millisecond

// spaced waits, if the last look was less than lookSpacing before, for
// the rest of it; false if ctx ended first.
func spaced(ctx context.Context, last time.Time) bool {
	d := lookSpacing - time.Since(last)
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// runWatchFallback is how often a wait for a run's stream looks again
// while it has a watch: a change the store does not report (a run ended by
// a purge, say) costs this much latency.
const runWatchFallback = time.Second

// awaitRunStream waits for a run's stream that a live reader asked for
// before the run wrote it (a page starts a run and follows its stream at
// once), while the run goes on, up to Config.LongPollTimeout: woken by w
// (the stream's creation, the run's end) where the store watches runs,
// else polling as Engine.Read does. The caller looked once already (after
// w began). It returns the stream once it exists; nil, nil when the wait
// timed out (or the server drains); notFound when path is no run's stream,
// the run is unknown, or it ended without writing the stream.
func (s *Server) awaitRunStream(ctx context.Context, path string, notFound error, w *runStreamWatch) (*store.StreamInfo, error) {
	if !strings.HasPrefix(path, runsPrefix) || !strings.Contains(strings.TrimPrefix(path, runsPrefix), "/") {
		return nil, notFound
	}
	deadline := time.Now().Add(s.cfg.LongPollTimeout)
	delay := 2 * time.Millisecond
	looked := true // by the caller
	lastLook := time.Now()
	timedOut := false
	for {
		if !looked {
			// Woken by the stream's creation in this process, most likely:
			// the stream as it made it, else a lookup.
			if w.w != nil {
				if info, ok := w.w.CreatedStream(path); ok {
					return info, nil
				}
			}
			if !spaced(ctx, lastLook) {
				return nil, ctx.Err()
			}
			lastLook = time.Now()
			info, err := s.lookup(ctx, path, s.now())
			if !errors.Is(err, store.ErrNotFound) {
				return info, err
			}
		}
		looked = false
		// A run this process executes exists and has not ended, or its
		// end wakes the watch: only a run elsewhere is looked up (and
		// every run once the watch's fallback timer fired).
		var rs *store.Run
		var err error
		if w.changed != nil && !timedOut && s.e.Executing(w.run) {
			rs = &store.Run{Status: store.RunRunning}
		} else if rs, _, err = s.store.GetRunWithin(ctx, w.run, 0); errors.Is(err, store.ErrNotFound) {
			return nil, notFound
		} else if err != nil {
			return nil, err
		}
		timedOut = false
		if rs.Status.Terminal() {
			// The stream may have come with the run's end: one more look.
			info, err := s.lookup(ctx, path, s.now())
			if !errors.Is(err, store.ErrNotFound) {
				return info, err
			}
			return nil, fmt.Errorf("%w: run %s ended without writing this stream", store.ErrNotFound, clip(w.run))
		}
		wait := delay
		if w.changed != nil {
			wait = runWatchFallback
		}
		wait = min(wait, time.Until(deadline))
		if wait <= 0 || s.draining() {
			return nil, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-s.drained.Done():
			t.Stop()
			return nil, nil
		case <-w.changed: // nil without a watcher: never
			w.again()
		case <-t.C:
			timedOut = true
		}
		t.Stop()
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// catchUp serves a plain GET: one page from the offset.
func (s *Server) catchUp(w http.ResponseWriter, r *http.Request, info *store.StreamInfo, q *readQuery, rd *dsReader) {
	var pg *dsPage
	if q.now {
		// Nothing before the tail: the page is empty and up to date.
		pg = &dsPage{next: info.NextOffset, head: info.NextOffset, upToDate: true, closed: info.Closed}
	} else {
		var err error
		if pg, err = rd.read(r.Context(), s.cfg.ReadPageBytes); err != nil {
			s.streamError(w, err)
			return
		}
	}
	h := w.Header()
	if q.now {
		h.Set("Cache-Control", "no-store")
	} else {
		start := "-1"
		if q.hasOff {
			start = q.rawOff
		}
		etag := fmt.Sprintf(`"%d:%s:%s:%s`, info.ID, viewTag(q), start, formatOffset(pg.next))
		if pg.closed {
			etag += ":c"
		}
		etag += `"`
		h.Set("ETag", etag)
		if etagMatches(r.Header.Get("If-None-Match"), etag) {
			s.pageHeaders(h, info, q, pg)
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	s.writePage(w, info, q, pg, http.StatusOK)
}

func viewTag(q *readQuery) string {
	t := "l"
	if q.view == stream.CommittedView {
		t = "c"
	}
	if q.ndjson {
		t += "n"
	}
	return t
}

// etagMatches reports whether an If-None-Match header names etag.
func etagMatches(inm, etag string) bool {
	if inm == "" {
		return false
	}
	for part := range strings.SplitSeq(inm, ",") {
		part = strings.TrimPrefix(strings.TrimSpace(part), "W/")
		if part == etag || part == "*" {
			return true
		}
	}
	return false
}

// pageHeaders sets the headers of a page reply.
func (s *Server) pageHeaders(h http.Header, info *store.StreamInfo, q *readQuery, pg *dsPage) {
	if q.ndjson {
		h.Set("Content-Type", "application/x-ndjson")
		h.Set("Weir-Data-Encoding", dataEncoding(info.ContentType))
	} else {
		h.Set("Content-Type", info.ContentType)
		attachActive(h, info.ContentType)
	}
	h.Set("Stream-Next-Offset", formatOffset(pg.next))
	if pg.upToDate {
		h.Set("Stream-Up-To-Date", "true")
	}
	if pg.closed {
		h.Set("Stream-Closed", "true")
	}
}

// writePage writes a page as the reply body, with a write deadline. A raw
// page is written from the records themselves, as the socket takes it: the
// page the store read is the only copy held while a client is slow to
// read. An ndjson page is encoded first (its length is the reply's), and
// the records let go.
func (s *Server) writePage(w http.ResponseWriter, info *store.StreamInfo, q *readQuery, pg *dsPage, status int) {
	s.pageHeaders(w.Header(), info, q, pg)
	if pg.piece != nil {
		writePiecePage(w, info, q, pg, status)
		return
	}
	var body []byte
	n := 0
	if q.ndjson {
		body = ndjsonBody(info.ContentType, pg.recs)
		pg.recs = nil
		n = len(body)
	} else {
		n = pageLen(info.ContentType, pg.recs)
	}
	w.Header().Set("Content-Length", strconv.Itoa(n))
	w.WriteHeader(status)
	if n == 0 {
		return
	}
	defer writeDeadline(w)()
	if body != nil {
		_, _ = w.Write(body)
		return
	}
	_ = writePageData(w, info.ContentType, pg.recs)
}

// writePiecePage writes a page that is one record larger than a page, a
// piece at a time, each write under its own deadline. A raw page says its
// length; an ndjson one is chunked (its base64 is known as it is written).
// A store error midway aborts the reply: the client sees it cut, never a
// record short.
func writePiecePage(w http.ResponseWriter, info *store.StreamInfo, q *readQuery, pg *dsPage, status int) {
	if !q.ndjson {
		n := pg.size()
		if isJSONType(info.ContentType) {
			n += 2
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
	}
	w.WriteHeader(status)
	rc := http.NewResponseController(w)
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	out := writeFunc(func(b []byte) error {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		_, err := w.Write(b)
		return err
	})
	if err := writePiece(out, info.ContentType, q.ndjson, false, true, pg); err != nil {
		panic(http.ErrAbortHandler)
	}
}

// writeDeadline bounds the writes that follow, so a client that never reads
// cannot hold the handler, and returns the func that lifts the deadline
// again (it would otherwise outlive the request on a kept-alive connection).
func writeDeadline(w http.ResponseWriter) func() {
	rc := http.NewResponseController(w)
	if rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout)) != nil {
		return func() {}
	}
	return func() { _ = rc.SetWriteDeadline(time.Time{}) }
}

// ndjsonBody is a page's ndjson lines.
func ndjsonBody(contentType string, recs []stream.Record) []byte {
	enc := dataEncoding(contentType)
	var b []byte
	for i := range recs {
		b = appendNDJSON(b, &recs[i], enc)
	}
	return b
}

// pageLen is the length of a raw page's body: a JSON stream's values as one
// array, or the data bytes.
func pageLen(contentType string, recs []stream.Record) int {
	n := 0
	for i := range recs {
		n += len(recs[i].Data)
	}
	if isJSONType(contentType) {
		n += 2 + max(len(recs)-1, 0) // [ , ]
	}
	return n
}

// writePageData writes a raw page's body (pageLen bytes) to w, from the
// records' data.
func writePageData(w io.Writer, contentType string, recs []stream.Record) error {
	json := isJSONType(contentType)
	if json {
		if _, err := io.WriteString(w, "["); err != nil {
			return err
		}
	}
	for i := range recs {
		if json && i > 0 {
			if _, err := io.WriteString(w, ","); err != nil {
				return err
			}
		}
		if _, err := w.Write(recs[i].Data); err != nil {
			return err
		}
	}
	if json {
		_, err := io.WriteString(w, "]")
		return err
	}
	return nil
}

// dataEncoding is how format=ndjson carries a stream's data: "json" (the
// value itself), "text" (a string) or "base64" (a string).
func dataEncoding(contentType string) string {
	switch {
	case isJSONType(contentType):
		return "json"
	case isTextType(contentType):
		return "text"
	}
	return "base64"
}

// appendNDJSON appends one record as a line of JSON:
//
//	{"offset":3,"next_offset":"…","kind":"data","writer":"step/1","attempt":2,"seq":0,"data":…}
//	{"offset":4,"next_offset":"…","kind":"abort","writer":"step/1","attempt":2,"from":1}
//	{"offset":5,"next_offset":"…","kind":"commit","writer":"step/1","attempt":2,"count":1}
//	{"offset":6,"next_offset":"…","kind":"close"}
//
// A data record of a text stream that is not UTF-8, or of a JSON stream that
// is not JSON, is sent in base64 with "encoding":"base64".
func appendNDJSON(b []byte, r *stream.Record, enc string) []byte {
	b = appendNDJSONHead(b, r)
	switch r.Kind {
	case stream.KindData:
		switch {
		case enc == "json" && json.Valid(r.Data):
			b = append(b, compact(r.Data)...)
		case enc == "text" && utf8.Valid(r.Data):
			s, _ := json.Marshal(string(r.Data))
			b = append(b, s...)
		default:
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, r.Data)
			b = append(b, '"')
			if enc != "base64" {
				b = append(b, `,"encoding":"base64"`...)
			}
		}
	case stream.KindAbort:
		b = append(b, `,"from":`...)
		b = strconv.AppendInt(b, r.FromSeq(), 10)
	case stream.KindCommit:
		b = append(b, `,"count":`...)
		b = strconv.AppendInt(b, r.Count(), 10)
	}
	return append(b, "}\n"...)
}

// appendNDJSONHead appends a record's line up to its data: for a data
// record, up to and with "data":.
func appendNDJSONHead(b []byte, r *stream.Record) []byte {
	b = append(b, `{"offset":`...)
	b = strconv.AppendInt(b, r.Offset, 10)
	b = append(b, `,"next_offset":"`...)
	b = append(b, formatOffset(r.Offset+1)...)
	b = append(b, `","kind":"`...)
	b = append(b, r.Kind.String()...)
	b = append(b, '"')
	if r.Kind != stream.KindClose && r.Kind != stream.KindReopen {
		b = append(b, `,"writer":`...)
		w, _ := json.Marshal(r.Writer)
		b = append(b, w...)
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, r.Attempt, 10)
	}
	if r.Kind == stream.KindData {
		b = append(b, `,"seq":`...)
		b = strconv.AppendInt(b, r.Seq, 10)
		b = append(b, `,"data":`...)
	}
	return b
}

// writeFunc is an io.Writer of a func.
type writeFunc func([]byte) error

func (f writeFunc) Write(p []byte) (int, error) {
	if err := f(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// piecesUTF8 reports whether the data of pg's record (larger than a page:
// its first piece, and the rest read as it goes) is UTF-8.
func piecesUTF8(pg *dsPage) (bool, error) {
	var carry []byte
	valid := true
	check := func(b []byte) error {
		if !valid {
			return nil
		}
		b = append(carry, b...)
		n := fullRunes(b)
		valid = utf8.Valid(b[:n])
		carry = append(carry[:0], b[n:]...)
		return nil
	}
	_ = check(pg.recs[0].Data)
	if err := pg.rest(check); err != nil {
		return false, err
	}
	return valid && len(carry) == 0, nil
}

// fullRunes is the length of b without the start of a rune cut at its end
// (at most 3 bytes): where a piece of UTF-8 may be split.
func fullRunes(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

// jsonStringWriter writes UTF-8 text as the inside of a JSON string, as
// json.Marshal escapes it, in pieces split anywhere: a rune cut at the end
// of a piece waits for the next.
type jsonStringWriter struct {
	w     io.Writer
	carry []byte
}

func (j *jsonStringWriter) Write(p []byte) (int, error) {
	n := len(p)
	if len(j.carry) > 0 {
		// The rune the last piece cut: completed from this one's first
		// bytes.
		k := 0
		for k < len(p) && k < 3 && !utf8.FullRune(append(j.carry, p[:k]...)) {
			k++
		}
		b := append(j.carry, p[:k]...)
		if !utf8.FullRune(b) {
			j.carry = b
			return n, nil
		}
		if err := j.escape(b); err != nil {
			return 0, err
		}
		j.carry, p = j.carry[:0], p[k:]
	}
	full := fullRunes(p)
	// In windows of a few KiB, so that what is escaped at once is small
	// whatever the piece.
	for len(p[:full]) > 0 {
		w := min(full, 4<<10)
		w = fullRunes(p[:w])
		if w == 0 {
			w = min(full, 4)
		}
		if err := j.escape(p[:w]); err != nil {
			return 0, err
		}
		p, full = p[w:], full-w
	}
	j.carry = append(j.carry, p...)
	return n, nil
}

func (j *jsonStringWriter) escape(b []byte) error {
	q, _ := json.Marshal(string(b))
	_, err := j.w.Write(q[1 : len(q)-1])
	return err
}

// writePiece writes one record larger than a page as a page of it is
// written (recs[0], a page's piece, and the rest read as it goes): a raw
// page's body (the value of a JSON stream in [ ]; the bytes), an SSE data
// event's payload (sse: a binary stream's bytes in base64), or its ndjson
// line (lineEnd: with its newline). In ndjson, the data of a JSON stream
// is the value itself (appends are checked JSON); of a text stream a
// string if it is UTF-8 (piecesUTF8), else base64 with "encoding":"base64";
// of any other stream base64.
func writePiece(w io.Writer, contentType string, ndjson, sse, lineEnd bool, pg *dsPage) error {
	r := &pg.recs[0]
	data := func(w io.Writer, b64 bool) error {
		var enc io.WriteCloser
		if b64 {
			enc = base64.NewEncoder(base64.StdEncoding, w)
			w = enc
		}
		if _, err := w.Write(r.Data); err != nil {
			return err
		}
		if err := pg.rest(func(b []byte) error { _, err := w.Write(b); return err }); err != nil {
			return err
		}
		if enc != nil {
			return enc.Close()
		}
		return nil
	}
	str := func(s string) error { _, err := io.WriteString(w, s); return err }
	switch {
	case ndjson:
		enc := dataEncoding(contentType)
		if _, err := w.Write(appendNDJSONHead(nil, r)); err != nil {
			return err
		}
		text := false
		if enc == "text" {
			// A text record goes as a string if it is UTF-8, as a
			// smaller one does: read once through to know (the cost of
			// a record this large), then written a piece at a time.
			var err error
			if text, err = piecesUTF8(pg); err != nil {
				return err
			}
		}
		switch {
		case enc == "json":
			if err := data(w, false); err != nil {
				return err
			}
		case text:
			if err := str(`"`); err != nil {
				return err
			}
			if err := data(&jsonStringWriter{w: w}, false); err != nil {
				return err
			}
			if err := str(`"`); err != nil {
				return err
			}
		default:
			tail := `"`
			if enc != "base64" {
				tail += `,"encoding":"base64"`
			}
			if err := str(`"`); err != nil {
				return err
			}
			if err := data(w, true); err != nil {
				return err
			}
			if err := str(tail); err != nil {
				return err
			}
		}
		if lineEnd {
			return str("}\n")
		}
		return str("}")
	case isJSONType(contentType):
		if err := str("["); err != nil {
			return err
		}
		if err := data(w, false); err != nil {
			return err
		}
		return str("]")
	}
	return data(w, sse && !isTextType(contentType))
}

// cursorEpoch and cursorInterval are the protocol's cursor clock.
var cursorEpoch = time.Date(2024, 10, 9, 0, 0, 0, 0, time.UTC)

const cursorInterval = 20 * time.Second

// nextCursor returns the Stream-Cursor for a live response: the current
// interval, or a value past the client's if it echoed one at or beyond it
// (so that CDN-collapsed requests move on).
func nextCursor(client string, now time.Time) string {
	interval := int64(now.Sub(cursorEpoch) / cursorInterval)
	// A cursor not in digits alone ("+9…") is not one this server sent:
	// it is ignored, as an unreadable one is, not refused (a client only
	// echoes what it got).
	if c, ok := parseDigits(client, false); ok && c >= interval && c < 1<<62 {
		jitter := 1 + rand.Int64N(3600) // seconds
		return strconv.FormatInt(c+max(1, (jitter+19)/20), 10)
	}
	return strconv.FormatInt(interval, 10)
}

// longPoll serves live=long-poll: data at once if there is some, else wait
// up to Config.LongPollTimeout for some: 200 with it, 204 on timeout or
// when the stream closes.
func (s *Server) longPoll(w http.ResponseWriter, r *http.Request, info *store.StreamInfo, q *readQuery, rd *dsReader) {
	if s.metrics != nil {
		s.metrics.readerOpened(readerLongPoll)
		defer s.metrics.readerClosed(readerLongPoll)
	}
	ctx := r.Context()
	deadline := time.Now().Add(s.cfg.LongPollTimeout)
	h := w.Header()
	next := rd.pos // where the client resumes if the server drains
	for {
		pg, err := rd.read(ctx, s.cfg.ReadPageBytes)
		if err != nil {
			switch {
			case ctx.Err() != nil && !s.draining():
				return // the client left
			case ctx.Err() != nil:
				h.Set("Stream-Next-Offset", formatOffset(next))
				h.Set("Stream-Cursor", nextCursor(q.cursor, time.Now()))
				w.WriteHeader(http.StatusNoContent)
			default:
				s.streamError(w, err)
			}
			return
		}
		next = pg.next
		if pg.abort != nil {
			h.Set("Weir-Aborted-At", formatOffset(pg.abort.Offset))
			h.Set("Stream-Next-Offset", formatOffset(pg.next))
			s.streamError(w, fmt.Errorf("%w: the abort record at offset %d voids data of writer %q that this live reader already got: re-read (view=committed or format=ndjson never see voided bytes)",
				api.ErrConflict, pg.abort.Offset, pg.abort.Writer))
			return
		}
		if len(pg.recs) > 0 {
			h.Set("Stream-Cursor", nextCursor(q.cursor, time.Now()))
			s.writePage(w, info, q, pg, http.StatusOK)
			return
		}
		if pg.closed {
			s.pageHeaders(h, info, q, pg)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if pg.upToDate {
			wctx, cancel := context.WithDeadline(ctx, deadline)
			err = s.store.Wait(wctx, info.ID, rd.pos)
			cancel()
		}
		switch {
		case err == nil:
			continue
		case ctx.Err() != nil && !s.draining():
			return // the client left
		case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
			// Timed out (or the server drains): the client polls again from
			// the same offset.
			pg.upToDate = true
			s.pageHeaders(h, info, q, pg)
			h.Set("Stream-Cursor", nextCursor(q.cursor, time.Now()))
			w.WriteHeader(http.StatusNoContent)
			return
		default:
			s.streamError(w, err)
			return
		}
	}
}

// draining reports whether Drain was called.
func (s *Server) draining() bool { return s.drained != nil && s.drained.Err() != nil }

// sseControl is the JSON of a control event.
type sseControl struct {
	StreamNextOffset string `json:"streamNextOffset"`
	StreamCursor     string `json:"streamCursor,omitempty"`
	UpToDate         bool   `json:"upToDate,omitempty"`
	StreamClosed     bool   `json:"streamClosed,omitempty"`
}

// serveSSE serves live=sse: a data event per page, each followed by a
// control event, until the stream closes, the client leaves, or
// Config.SSEMaxDuration passes. A comment line keeps an idle connection
// alive every Config.LongPollTimeout.
func (s *Server) serveSSE(w http.ResponseWriter, r *http.Request, info *store.StreamInfo, q *readQuery, rd *dsReader) {
	if s.metrics != nil {
		s.metrics.readerOpened(readerSSE)
		defer s.metrics.readerClosed(readerSSE)
	}
	ctx := r.Context()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	switch {
	case q.ndjson:
		h.Set("Weir-Data-Encoding", dataEncoding(info.ContentType))
	case !isTextType(info.ContentType):
		h.Set("Stream-SSE-Data-Encoding", "base64")
	}
	w.WriteHeader(http.StatusOK)
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	// Events are written as they are encoded, through a buffer of
	// sseBufferSize (the page the store read is the only copy of its data
	// held while the client is slow to read), under a deadline armed before
	// each round of them. The buffer goes back to the pool after each
	// round, so a reader waiting for data holds neither it nor its last
	// page.
	var bw *bufio.Writer
	start := func() *bufio.Writer {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		bw = sseBuffers.Get().(*bufio.Writer)
		bw.Reset(w)
		return bw
	}
	flush := func() bool {
		err := bw.Flush()
		if err == nil {
			err = rc.Flush()
		}
		bw.Reset(nil)
		sseBuffers.Put(bw)
		bw = nil
		return err == nil
	}
	start()
	if !flush() {
		return
	}
	end := time.Now().Add(s.cfg.SSEMaxDuration)
	for first := true; ; first = false {
		pg, err := rd.read(ctx, s.cfg.ReadPageBytes)
		if err != nil {
			if ctx.Err() == nil {
				writeSSEError(start(), err.Error(), nil)
				flush()
			}
			return
		}
		control := len(pg.recs) > 0 || first || pg.closed
		if control || pg.abort != nil {
			out := start()
			switch {
			case pg.piece != nil:
				// One record larger than a page, a piece at a time, the
				// write deadline armed again for each.
				e := sseEvent{w: out}
				e.begin("data")
				tick := writeFunc(func(b []byte) error {
					_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
					_, _ = e.Write(b)
					return nil
				})
				if err := writePiece(tick, info.ContentType, q.ndjson, true, false, pg); err != nil {
					panic(http.ErrAbortHandler) // never an event cut short as if whole
				}
				e.end()
				pg.recs = nil
			case len(pg.recs) > 0:
				writeSSEData(out, info.ContentType, q.ndjson, pg.recs)
				pg.recs = nil
			}
			if control {
				c := sseControl{StreamNextOffset: formatOffset(pg.next), UpToDate: pg.upToDate, StreamClosed: pg.closed}
				if !pg.closed {
					c.StreamCursor = nextCursor(q.cursor, time.Now())
				}
				b, _ := json.Marshal(c)
				writeSSEEvent(out, "control", b)
			}
			if pg.abort != nil {
				writeSSEError(out, fmt.Sprintf("the abort record at offset %d voids data of writer %q that this live reader already got: re-read", pg.abort.Offset, pg.abort.Writer), pg.abort)
			}
			if !flush() {
				return
			}
		}
		if pg.closed || pg.abort != nil {
			return
		}
		if !pg.upToDate {
			continue
		}
		wait := min(s.cfg.LongPollTimeout, time.Until(end))
		if wait <= 0 {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		err = s.store.Wait(wctx, info.ID, rd.pos)
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return
		case errors.Is(err, context.DeadlineExceeded):
			if !time.Now().Before(end) {
				return
			}
			_, _ = start().WriteString(":\n\n") // keep-alive
			if !flush() {
				return
			}
		default:
			writeSSEError(start(), err.Error(), nil)
			flush()
			return
		}
	}
}

// sseBufferSize is the buffer SSE events are written through: what a reader
// holds besides its page while the client is slow to read.
const sseBufferSize = 32 << 10

var sseBuffers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, sseBufferSize) }}

// sseSink is where events are written: a bufio.Writer, or a bytes.Buffer.
type sseSink interface {
	io.Writer
	io.StringWriter
	io.ByteWriter
}

// sseEvent writes one event's payload as it comes, in pieces: each line of
// it (split at CR, LF and CRLF, a CRLF split across two pieces included)
// becomes a data: line, so no payload can forge an event.
type sseEvent struct {
	w      sseSink
	skipLF bool // the last byte was a CR: a LF now ends the same line
}

func (e *sseEvent) begin(event string) {
	_, _ = e.w.WriteString("event: ")
	_, _ = e.w.WriteString(event)
	_, _ = e.w.WriteString("\ndata:")
}

func (e *sseEvent) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if e.skipLF {
			e.skipLF = false
			if p[0] == '\n' {
				p = p[1:]
				continue
			}
		}
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			_, _ = e.w.Write(p)
			break
		}
		_, _ = e.w.Write(p[:i])
		_, _ = e.w.WriteString("\ndata:")
		e.skipLF = p[i] == '\r'
		p = p[i+1:]
	}
	return n, nil
}

func (e *sseEvent) end() { _, _ = e.w.WriteString("\n\n") }

// writeSSEEvent writes one event: each line of the payload (split at CR,
// LF and CRLF) becomes a data: line, so no payload can forge an event.
func writeSSEEvent(w sseSink, event string, payload []byte) {
	e := sseEvent{w: w}
	e.begin(event)
	_, _ = e.Write(payload)
	e.end()
}

// writeSSEData writes a page's data event from the records, as it goes: a
// JSON stream's values as one array, a text stream's bytes, a binary
// stream's bytes in base64 (one string per event, so each event decodes
// alone), or ndjson lines.
func writeSSEData(w sseSink, contentType string, ndjson bool, recs []stream.Record) {
	e := sseEvent{w: w}
	e.begin("data")
	switch {
	case ndjson:
		enc := dataEncoding(contentType)
		var line []byte // one record's, reused
		for i := range recs {
			line = appendNDJSON(line[:0], &recs[i], enc)
			if i == len(recs)-1 {
				line = line[:len(line)-1] // the event's end ends the last line
			}
			_, _ = e.Write(line)
			if cap(line) > sseBufferSize {
				line = nil // a large record's: not kept for the small ones
			}
		}
	case isJSONType(contentType):
		_, _ = e.Write([]byte{'['})
		for i := range recs {
			if i > 0 {
				_, _ = e.Write([]byte{','})
			}
			_, _ = e.Write(recs[i].Data)
		}
		_, _ = e.Write([]byte{']'})
	case !isTextType(contentType):
		b64 := base64.NewEncoder(base64.StdEncoding, &e)
		for i := range recs {
			_, _ = b64.Write(recs[i].Data)
		}
		_ = b64.Close()
	default:
		for i := range recs {
			_, _ = e.Write(recs[i].Data)
		}
	}
	e.end()
}

// writeSSEError writes an "error" event: the read ends after it.
func writeSSEError(buf sseSink, msg string, abort *stream.Record) {
	e := struct {
		Error     string `json:"error"`
		AbortedAt string `json:"abortedAt,omitempty"`
		Next      string `json:"streamNextOffset,omitempty"`
	}{Error: msg}
	if abort != nil {
		e.AbortedAt, e.Next = formatOffset(abort.Offset), formatOffset(abort.Offset+1)
	}
	b, _ := json.Marshal(e)
	writeSSEEvent(buf, "error", b)
}
