package server

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
	"github.com/weirhq/weir/world"
)

// The World's streams. A World stream is a run stream of its World run
// (runs/<run>/<name>, readable with the Durable Streams protocol too), also
// known by its name, which the runtime makes globally unique. Writes take
// weir's extension headers: a step's writer is step/<stepId> at the
// attempt weir's own step_started gave, and may go on writing after the
// step completed (store.AppendParams.Late: v4 flushes a step's writes after
// it records the outcome). Reads address chunks by index in the view
// served, as the runtime does: the live view's index counts data records,
// the committed view's the chunks it holds.

func parseURL(s string) (*url.URL, error) { return url.Parse(s) }

// handleWorldWrite serves POST /v1/world/runs/{run}/streams/{name}:
// writeToStream and writeToStreamMulti.
func (s *Server) handleWorldWrite(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	wh, err := parseWriteHeaders(r.Header)
	if err != nil {
		httpError(w, err)
		return
	}
	switch {
	case wh.producer != nil || wh.commit || wh.abort || wh.streamSeq != "" || wh.close:
		httpError(w, fmt.Errorf("%w: a World stream write takes Weir-Writer, Weir-Attempt, Weir-Seq, Weir-Framing and Idempotency-Key only (a step's events commit and abort; POST …/close closes)", api.ErrBadRequest))
		return
	case wh.weir && (!strings.HasPrefix(wh.writer, "step/") || wh.attempt < 1):
		httpError(w, fmt.Errorf("%w: a World stream's writer is step/<stepId> at an attempt >= 1, or none", api.ErrBadRequest))
		return
	}
	ctx := r.Context()
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		s.rejected(err)
		httpError(w, err)
		return
	}
	if len(body) == 0 {
		httpError(w, fmt.Errorf("%w: empty body: a write needs bytes", api.ErrBadRequest))
		return
	}
	run, name := r.PathValue("run"), r.PathValue("name")
	ref, err := s.worldStreamRef(ctx, run, name)
	if err != nil {
		httpError(w, err)
		return
	}
	p := &store.AppendParams{StreamID: ref.id, Now: time.Now(), MaxBytes: limit(s.cfg.MaxStreamBytes)}
	if p.Chunks, err = bodyChunks(ref.contentType, wh, body); err != nil {
		s.rejected(err)
		httpError(w, err)
		return
	}
	if wh.weir {
		p.Writer, p.Attempt, p.FirstSeq, p.Late = wh.writer, wh.attempt, wh.seq, true
	}
	if wh.idemKey != "" {
		k := inflightKey{ref.id, wh.idemKey}
		if !s.ds.begin(k) {
			s.rejected(api.ErrInFlight)
			httpError(w, fmt.Errorf("%w: a request with this Idempotency-Key is still in flight", api.ErrInFlight))
			return
		}
		defer s.ds.end(k)
		p.IdempotencyKey, p.RequestDigest, p.KeyTTL = wh.idemKey, requestDigest(wh, body), s.cfg.IdempotencyTTL
	}
	res, err := s.store.Append(ctx, p)
	if ref.cached && (errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrGone)) {
		// The stream the cache named is gone (purged): look again.
		s.paths.drop(worldStreamKey(run, name), ref.id)
		if ref, err = s.worldStreamRef(ctx, run, name); err == nil {
			p.StreamID = ref.id
			res, err = s.store.Append(ctx, p)
		}
	}
	if err != nil {
		s.rejected(err)
		s.streamError(w, err) // the extension's headers: Weir-Expected-Seq, …
		return
	}
	if !res.Replayed && s.metrics != nil {
		s.metrics.streamAcks(res.Acks)
		if res.Aborted {
			s.metrics.streamAborted()
		}
	}
	if res.Replayed {
		w.Header().Set("Weir-Idempotent-Replay", "true")
	}
	rep := appendReply{Acks: make([]ackJSON, len(res.Acks)), NextOffset: formatOffset(res.NextOffset), Closed: res.Closed}
	for i, a := range res.Acks {
		rep.Acks[i] = ackJSON{Offset: a.Offset, Outcome: a.Outcome.String()}
	}
	s.writeWritten(w, http.StatusOK, rep)
}

// worldStreamKey is World stream name of run's key in the path cache: not a
// path any stream can have (a NUL is refused in paths).
func worldStreamKey(run, name string) string { return "\x00world\x00" + run + "\x00" + name }

// worldStreamRef is World stream name of run for a write: from the path
// cache (a World stream's id, run and content type never change), or opened
// (created if missing, checked to be run's) and cached. A health check's
// stream, which expires, is not cached.
func (s *Server) worldStreamRef(ctx context.Context, run, name string) (streamRef, error) {
	health := world.HealthCheckStream(name)
	if !health {
		if ref, ok := s.paths.get(worldStreamKey(run, name)); ok {
			return ref, nil
		}
	}
	info, made, err := s.openWorldStream(ctx, run, name)
	if err != nil {
		return streamRef{}, err
	}
	if made {
		// A follower of a name not written yet looks again; not at every
		// write of a health check's stream, which is opened at each
		// (red-team round eleven: 20 writes a second woke 1,000 followers
		// 20 times a second).
		s.worldOpened.wake()
	}
	if !health {
		s.paths.put(worldStreamKey(run, name), info)
	}
	return refOf(info), nil
}

// closeRequest is the optional body of POST …/streams/{name}/close: the step
// attempt that closes the stream, whose close then waits for its commit.
type closeRequest struct {
	StepID  string `json:"stepId,omitempty"`
	Attempt int64  `json:"attempt,omitempty"`
}

// handleWorldClose serves POST /v1/world/runs/{run}/streams/{name}/close:
// closeStream. 200 {"closed": true} when closed now; 202 {"closed": false}
// when the close waits for the step attempt's commit (a failed attempt's
// close is dropped: the next attempt closes again).
func (s *Server) handleWorldClose(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	body, err := readBody(w, r, 64<<10)
	if err != nil {
		httpError(w, err)
		return
	}
	var req closeRequest
	if len(body) > 0 {
		if err := requireJSON(r); err != nil {
			httpError(w, err)
			return
		}
		if err := decodeJSON(body, &req); err != nil {
			httpError(w, err)
			return
		}
	}
	if (req.StepID == "") != (req.Attempt == 0) || req.Attempt < 0 {
		httpError(w, fmt.Errorf("%w: stepId and attempt (>= 1) go together", api.ErrBadRequest))
		return
	}
	ctx := r.Context()
	run, name := r.PathValue("run"), r.PathValue("name")
	info, _, err := s.openWorldStream(ctx, run, name)
	if err != nil {
		httpError(w, err)
		return
	}
	var closed bool
	if world.HealthCheckStream(name) {
		_, err = s.store.CloseStream(ctx, info.ID)
		closed = err == nil
	} else {
		closed, err = s.store.WorldCloseStream(ctx, &store.WorldCloseParams{RunID: run, Name: name, StepID: req.StepID, Attempt: req.Attempt})
	}
	if err != nil {
		httpError(w, err)
		return
	}
	status := http.StatusOK
	if !closed && req.StepID != "" {
		status = http.StatusAccepted
	}
	s.writeWritten(w, status, map[string]bool{"closed": closed})
}

// handleWorldStreamNames serves GET /v1/world/runs/{run}/streams:
// listStreamsByRunId.
func (s *Server) handleWorldStreamNames(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		httpError(w, err)
		return
	}
	if err := s.worldRunExists(r.Context(), r.PathValue("run")); err != nil {
		httpError(w, err)
		return
	}
	// A run holds at most store.MaxRunWorldStreams: the list is charged
	// for them before it is read.
	h, ok := s.hold(w, streamListBytes)
	if !ok {
		return
	}
	names, err := s.store.WorldStreams(r.Context(), r.PathValue("run"))
	if err != nil {
		_ = h.to(0)
		httpError(w, err)
		return
	}
	if names == nil {
		names = []string{}
	}
	h.send(w, http.StatusOK, map[string][]string{"streams": names})
}

// chunkIter walks one view of a stream chunk by chunk: index is the next
// chunk's index in the view, off the next offset to read.
type chunkIter struct {
	st        store.Store
	id        int64
	committed *store.CommittedReader // nil: the live view
	off       int64
	index     int64
	closed    bool  // the view reached the close record
	head      int64 // the stream's next offset at the last read
	// maxBytes bounds the data of one read (store.ReadParams.MaxBytes),
	// and what the committed view holds of the records waiting for their
	// writers; 0: the store's default.
	maxBytes int
	marks    *chunkMarks // the server's; nil: none
	// piece is set when the last next returned one chunk larger than a
	// page, of which it holds the first piece (store.ReadParams.Pieces):
	// rest reads the others.
	piece *store.Piece
}

// rest gives f the data of chunk c after its first piece (it.piece), read
// a page at a time.
func (it *chunkIter) rest(ctx context.Context, c *stream.Record, f func([]byte) error) error {
	if it.piece == nil {
		return nil
	}
	return store.ReadPieces(ctx, it.st, it.id, c.Offset, it.piece.End(len(c.Data)), it.piece.Size, it.maxBytes, f)
}

// chunkIter is an iterator of a view of stream id from offset off, chunk
// index, reading pages of Config.ReadPageBytes, with the server's marks.
func (s *Server) chunkIter(id int64, view stream.View, off, index int64) *chunkIter {
	it := newChunkIter(s.store, id, view, off, index, s.cfg.ReadPageBytes)
	it.marks = &s.marks
	return it
}

func newChunkIter(st store.Store, id int64, view stream.View, off, index int64, maxBytes int) *chunkIter {
	it := &chunkIter{st: st, id: id, off: off, index: index, maxBytes: maxBytes}
	if view == stream.CommittedView {
		it.committed = store.NewCommittedReader(st, id, off, maxBytes)
		it.committed.Pieces = true
	}
	return it
}

// next returns the view's next chunks, up to limit, from one read of the
// store (the committed view: up to a page); none when the iterator is at
// the end of what the stream holds.
func (it *chunkIter) next(ctx context.Context, limit int) ([]stream.Record, error) {
	var out []stream.Record
	take := func(r *stream.Record) {
		switch r.Kind {
		case stream.KindData:
			out = append(out, *r)
			it.index++
		case stream.KindClose:
			it.closed = true
		}
	}
	it.piece = nil
	if it.closed {
		return nil, nil
	}
	if it.committed != nil {
		recs, piece, err := it.committed.Next(ctx, min(limit, store.DefaultReadLimit), it.maxBytes)
		if err != nil {
			return nil, err
		}
		it.piece = piece
		for i := range recs {
			take(&recs[i])
		}
		it.off = it.committed.Pos()
		it.head, _ = it.committed.Head()
		return out, nil
	}
	res, err := it.st.Read(ctx, &store.ReadParams{StreamID: it.id, From: it.off, Limit: min(limit, store.DefaultReadLimit), MaxBytes: it.maxBytes,
		Pieces: true})
	if err != nil {
		return nil, err
	}
	it.head, it.piece = res.NextOffset, res.Piece
	for i := range res.Records {
		it.off = res.Records[i].Offset + 1
		take(&res.Records[i])
	}
	return out, nil
}

// caughtUp reports that nothing more is in the view now.
func (it *chunkIter) caughtUp() bool {
	if it.committed != nil {
		return it.committed.CaughtUp()
	}
	return it.off >= it.head
}

// resume is where a later iterator picks up: the offset of the first chunk
// not yet taken, and its index.
func (it *chunkIter) resume() (off, index int64) {
	if it.committed != nil {
		return it.committed.NextOffset(), it.index
	}
	return it.off, it.index
}

// seek skips to chunk index n of the view (a negative n counts from the
// tail), or to the end if the view has fewer: from the furthest mark of
// the view at or before n (chunkMarks), else from the start. It returns
// the index asked for, counted from the tail if negative: past the end,
// the chunks up to it that come later are not the reader's.
func (it *chunkIter) seek(ctx context.Context, n int64) (int64, error) {
	if n < 0 {
		tail, _, err := it.count(ctx)
		if err != nil {
			return 0, err
		}
		n = max(0, tail+n)
	}
	if m, ok := it.marks.get(it.id, viewOf(it), n); ok && m.index > it.index {
		*it = *it.at(m.off, m.index)
	}
	last := it.index
	for it.index < n {
		cs, err := it.next(ctx, int(min(n-it.index, 1000)))
		if err != nil {
			return 0, err
		}
		if it.index-last >= markEvery {
			off, index := it.resume()
			it.marks.put(it.id, viewOf(it), chunkMark{off: off, index: index})
			last = it.index
		}
		if len(cs) == 0 && (it.caughtUp() || it.closed) {
			return n, nil
		}
	}
	return n, nil
}

// at is a new iterator of the same view from offset off, chunk index.
func (it *chunkIter) at(off, index int64) *chunkIter {
	c := newChunkIter(it.st, it.id, viewOf(it), off, index, it.maxBytes)
	c.marks = it.marks
	return c
}

func viewOf(it *chunkIter) stream.View {
	if it.committed != nil {
		return stream.CommittedView
	}
	return stream.Live
}

// count walks the view on from its furthest mark: how many chunks it holds
// now, and whether it is done (closed). The mark moves to where it ended.
func (it *chunkIter) count(ctx context.Context) (int64, bool, error) {
	c := it.at(0, 0)
	if m, ok := it.marks.get(it.id, viewOf(it), math.MaxInt64); ok {
		c = it.at(m.off, m.index)
	}
	last := c.index
	for {
		cs, err := c.next(ctx, 1000)
		if err != nil {
			return 0, false, err
		}
		if c.index-last >= markEvery && !c.closed {
			off, index := c.resume()
			it.marks.put(it.id, viewOf(it), chunkMark{off: off, index: index})
			last = c.index
		}
		if c.closed || len(cs) == 0 && c.caughtUp() {
			if !c.closed {
				off, index := c.resume()
				it.marks.put(it.id, viewOf(it), chunkMark{off: off, index: index})
			}
			return c.index, c.closed, nil
		}
	}
}

// chunkMarks remembers, per stream and view, resume points of walks of
// the view (an offset and the chunk index there): one every markEvery
// chunks a walk passes, and where each walk ended. So a World reader's
// count (getStreamInfo) walks only what came since the last, and its seek
// (readFromStream from an index, before the tail or counted from it)
// walks at most markEvery chunks from the mark at or before its index,
// not the view from its start (red-team round eight: every read of chunk
// 999,990 of a million-chunk stream walked it whole, 1.6 s on SQLite and
// 6.4 s on PostgreSQL). Records are never rewritten and stream ids never
// reused, so a mark stays true. A nil *chunkMarks remembers nothing.
type chunkMarks struct {
	mu sync.Mutex
	m  map[markKey][]chunkMark // by index
}

type markKey struct {
	id   int64
	view stream.View
}

type chunkMark struct{ off, index int64 }

// markEvery is how many chunks a walk passes between the marks it leaves.
const markEvery = 4096

// maxMarks bounds the views whose marks are kept; beyond, an arbitrary
// one's go. maxViewMarks bounds one view's: when full, every other one
// goes (the spacing doubles), the last kept.
const (
	maxMarks     = 4096
	maxViewMarks = 64
)

// get returns view v of stream id's furthest mark at or before chunk
// index n.
func (m *chunkMarks) get(id int64, v stream.View, n int64) (chunkMark, bool) {
	if m == nil {
		return chunkMark{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ms := m.m[markKey{id, v}]
	i := sort.Search(len(ms), func(i int) bool { return ms[i].index > n })
	if i == 0 {
		return chunkMark{}, false
	}
	return ms[i-1], true
}

func (m *chunkMarks) put(id int64, v stream.View, mark chunkMark) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = make(map[markKey][]chunkMark)
	}
	k := markKey{id, v}
	ms, ok := m.m[k]
	if !ok && len(m.m) >= maxMarks {
		for k := range m.m {
			delete(m.m, k)
			break
		}
	}
	i, found := slices.BinarySearchFunc(ms, mark.index, func(c chunkMark, n int64) int { return cmp.Compare(c.index, n) })
	if found {
		return
	}
	ms = slices.Insert(ms, i, mark)
	if len(ms) > maxViewMarks {
		thin := ms[:0:0]
		for j := range ms {
			if j%2 == 1 || j == len(ms)-1 {
				thin = append(thin, ms[j])
			}
		}
		ms = thin
	}
	m.m[k] = ms
}

// worldStream returns the stream a World name names, and the view asked
// for (?view=live|committed; live by default).
func (s *Server) worldStream(r *http.Request, q map[string][]string) (*store.StreamInfo, stream.View, error) {
	v, ok := stream.ParseView(first(q, "view"))
	if !ok {
		return nil, 0, fmt.Errorf("%w: view %q: want live or committed", api.ErrBadRequest, clip(first(q, "view")))
	}
	name := r.PathValue("name")
	if err := world.StreamName(name); err != nil {
		return nil, 0, err
	}
	info, err := s.lookupWorldStream(r.Context(), name)
	return info, v, err
}

// frameEOF ends a World read's body: the stream is closed and the reader
// has every chunk. A body that ends without it was cut (a deadline, a
// drain): the reader asks again from the index it reached.
const frameEOF = 0xFFFFFFFF

// broadcast wakes every waiter at once, and costs nothing without one.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next wake.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// wake closes the channel of the waiters so far.
func (b *broadcast) wake() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

// A follower of a World stream not written yet looks for it after
// missingStreamPoll, then twice as long each time, up to
// missingStreamPollMax.
const (
	missingStreamPoll    = 50 * time.Millisecond
	missingStreamPollMax = time.Second
)

// handleWorldRead serves GET /v1/world/streams/{name}?index=N&view=&follow=:
// readFromStream. The body is the view's chunks from index N, each as its
// length (4 bytes, big-endian) then its bytes, and frameEOF once the stream
// is closed. With follow=true the response waits for new chunks (up to
// Config.SSEMaxDuration, then ends without frameEOF); an unknown stream is
// then waited for too, as world-local's reader does for a stream not yet
// written.
func (s *Server) handleWorldRead(w http.ResponseWriter, r *http.Request) {
	release, err := s.reader()
	if err != nil {
		w.Header().Set("Retry-After", "1")
		httpError(w, err)
		return
	}
	defer release()
	q, err := parseQuery(r, "index", "view", "follow")
	if err != nil {
		httpError(w, err)
		return
	}
	var index int64
	if v := first(q, "index"); v != "" {
		// A negative index counts from the stream's end.
		if index, err = queryInt("index", v, math.MinInt64, math.MaxInt64); err != nil {
			httpError(w, err)
			return
		}
	}
	follow := first(q, "follow") == "true"
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.SSEMaxDuration)
	defer cancel()
	info, view, err := s.worldStream(r, q)
	lastLook := time.Now()
	for wait := missingStreamPoll; follow && errors.Is(err, store.ErrNotFound) && ctx.Err() == nil; wait = min(2*wait, missingStreamPollMax) {
		// Not written yet: look again when this server opens a World
		// stream for a write, or after a while (another server may have),
		// sooner at first. (A World stream's name does not say its run,
		// whose watchers a creation wakes.) Backing off bounds what
		// followers of names never written cost, a look a second each:
		// red-team round eight had 64 of them look 640 times a second for
		// a minute.
		opened := s.worldOpened.wait()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-opened:
			// A burst of World streams opened costs a follower a look a
			// spacing (lookSpacing), not one each.
			spaced(ctx, lastLook)
		}
		t.Stop()
		lastLook = time.Now()
		info, view, err = s.worldStream(r, q)
	}
	if err != nil {
		if ctx.Err() != nil && r.Context().Err() == nil {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.WriteHeader(http.StatusOK) // nothing yet: the reader asks again
			return
		}
		httpError(w, err)
		return
	}
	it := s.chunkIter(info.ID, view, 0, 0)
	from, err := it.seek(ctx, index)
	if err != nil {
		httpError(w, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Weir-Index", strconv.FormatInt(max(it.index, from), 10))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	rc := http.NewResponseController(w)
	// A reader holds a page (Config.ReadPageBytes) of chunks, written from
	// the chunks themselves as the socket takes them.
	var frame [4]byte
	for {
		cs, err := it.next(ctx, 256)
		if err != nil {
			return // the reader asks again from its index
		}
		if first := it.index - int64(len(cs)); first < from {
			// Asked from past the end: the chunks written since up to
			// the index asked for are not the reader's (red team, round
			// nine: they came labelled from that index).
			cs = cs[min(int64(len(cs)), from-first):]
		}
		got := len(cs) > 0
		if got || it.closed {
			_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			for _, c := range cs {
				size := int64(len(c.Data))
				if it.piece != nil {
					size = it.piece.Size
				}
				binary.BigEndian.PutUint32(frame[:], uint32(size))
				if _, err := w.Write(frame[:]); err != nil {
					return
				}
				if _, err := w.Write(c.Data); err != nil {
					return
				}
				// A chunk larger than a page, the rest of it a piece at a
				// time; cut midway, the body ends without frameEOF and the
				// reader asks again from this chunk's index.
				err := it.rest(ctx, &c, func(b []byte) error {
					_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
					_, err := w.Write(b)
					return err
				})
				if err != nil {
					panic(http.ErrAbortHandler)
				}
			}
			if it.closed {
				binary.BigEndian.PutUint32(frame[:], frameEOF)
				if _, err := w.Write(frame[:]); err != nil {
					return
				}
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if it.closed {
			return
		}
		if got || !it.caughtUp() {
			continue
		}
		if !follow || s.draining() {
			return
		}
		if err := s.store.Wait(ctx, info.ID, it.off); err != nil {
			return
		}
	}
}

// handleWorldInfo serves GET /v1/world/streams/{name}/info?view=:
// getStreamInfo, {tailIndex, done}.
func (s *Server) handleWorldInfo(w http.ResponseWriter, r *http.Request) {
	release, err := s.reader()
	if err != nil {
		httpError(w, err)
		return
	}
	defer release()
	q, err := parseQuery(r, "view")
	if err != nil {
		httpError(w, err)
		return
	}
	info, view, err := s.worldStream(r, q)
	if errors.Is(err, store.ErrNotFound) {
		// Never written: empty, not done (world-local's answer).
		s.writeJSON(w, http.StatusOK, map[string]any{"tailIndex": -1, "done": false})
		return
	}
	if err != nil {
		httpError(w, err)
		return
	}
	n, done, err := s.chunkIter(info.ID, view, 0, 0).count(r.Context())
	if err != nil {
		httpError(w, err)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"tailIndex": n - 1, "done": done})
}

// chunkCursor is a getStreamChunks cursor: where the next page begins.
type chunkCursor struct {
	Index  int64 `json:"i"`
	Offset int64 `json:"o"`
}

// handleWorldChunks serves GET /v1/world/streams/{name}/chunks?view=&limit=&cursor=:
// getStreamChunks, {data: [{index, data}], cursor, hasMore, done}.
//
// A page holds at most limit chunks and about Config.ReadPageBytes of their
// data (one larger chunk alone): the rest is the next page's.
func (s *Server) handleWorldChunks(w http.ResponseWriter, r *http.Request) {
	release, err := s.reader()
	if err != nil {
		httpError(w, err)
		return
	}
	defer release()
	q, err := parseQuery(r, "view", "limit", "cursor")
	if err != nil {
		httpError(w, err)
		return
	}
	limit := 100
	if v := first(q, "limit"); v != "" {
		if limit, err = queryCount("limit", v, 1, maxWorldPage); err != nil {
			httpError(w, err)
			return
		}
	}
	var cur chunkCursor
	if v := first(q, "cursor"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		// An index or offset no stream reaches is forged: refused before
		// it can overflow (red team, round eight: i = 2^63-1 came back as
		// -2^63).
		if err != nil || json.Unmarshal(b, &cur) != nil || cur.Index < 0 || cur.Offset < 0 || cur.Index >= math.MaxInt64/2 || cur.Offset >= math.MaxInt64/2 {
			httpError(w, fmt.Errorf("%w: cursor %q", api.ErrBadRequest, clip(v)))
			return
		}
	}
	type chunkJSON struct {
		Index int64        `json:"index"`
		Data  taggedBinary `json:"data"`
	}
	out := struct {
		Data    []chunkJSON `json:"data"`
		Cursor  *string     `json:"cursor"`
		HasMore bool        `json:"hasMore"`
		Done    bool        `json:"done"`
	}{Data: []chunkJSON{}}
	info, view, err := s.worldStream(r, q)
	if errors.Is(err, store.ErrNotFound) {
		s.writeJSON(w, http.StatusOK, out)
		return
	}
	if err != nil {
		httpError(w, err)
		return
	}
	// One read is a page: at most limit chunks and a page of their data
	// (the committed view's reader fills it), or one larger chunk alone,
	// whose data is read a piece at a time as the reply is written.
	it := s.chunkIter(info.ID, view, cur.Offset, cur.Index)
	var big *stream.Record // the page's chunk larger than a page
	for len(out.Data) == 0 && !it.closed {
		cs, err := it.next(r.Context(), limit)
		if err != nil {
			httpError(w, err)
			return
		}
		for i, c := range cs {
			out.Data = append(out.Data, chunkJSON{Index: it.index - int64(len(cs)-i), Data: taggedBinary(c.Data)})
		}
		if it.piece != nil {
			big = &cs[0]
		}
		if len(cs) == 0 && it.caughtUp() {
			break
		}
	}
	// Peek: is there more, or the close, right after this page?
	off, index := it.resume()
	if !it.closed {
		peek := s.chunkIter(info.ID, view, off, index)
		for {
			cs, err := peek.next(r.Context(), 1)
			if err != nil {
				httpError(w, err)
				return
			}
			if len(cs) > 0 || peek.closed || peek.caughtUp() {
				out.HasMore = len(cs) > 0
				it.closed = peek.closed && len(cs) == 0
				break
			}
		}
	}
	out.Done = it.closed
	if out.HasMore {
		b, _ := json.Marshal(chunkCursor{Index: index, Offset: off})
		c := base64.RawURLEncoding.EncodeToString(b)
		out.Cursor = &c
	}
	if big == nil {
		s.writeJSON(w, http.StatusOK, out)
		return
	}
	// The one chunk larger than a page: the reply is written as its data
	// is read, in base64, each write under its own deadline; a store
	// error midway aborts it (the client sees it cut).
	tail, _ := json.Marshal(struct {
		Cursor  *string `json:"cursor"`
		HasMore bool    `json:"hasMore"`
		Done    bool    `json:"done"`
	}{out.Cursor, out.HasMore, out.Done})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	bw := writeFunc(func(b []byte) error {
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, err := w.Write(b)
		return err
	})
	enc := base64.NewEncoder(base64.StdEncoding, bw)
	err = func() error {
		head := fmt.Sprintf(`{"data":[{"index":%d,"data":{"__type":"Uint8Array","data":"`, out.Data[0].Index)
		if _, err := io.WriteString(bw, head); err != nil {
			return err
		}
		if _, err := enc.Write(big.Data); err != nil {
			return err
		}
		if err := it.rest(r.Context(), big, func(b []byte) error { _, err := enc.Write(b); return err }); err != nil {
			return err
		}
		if err := enc.Close(); err != nil {
			return err
		}
		_, err := io.WriteString(bw, `"}}],`+string(tail[1:])+"\n")
		return err
	}()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
}

// taggedBinary is bytes as the World's JSON tags them:
// {"__type":"Uint8Array","data":"<base64>"}.
type taggedBinary []byte

// MarshalJSON implements json.Marshaler.
func (b taggedBinary) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Type string `json:"__type"`
		Data string `json:"data"`
	}{"Uint8Array", base64.StdEncoding.EncodeToString(b)})
}
