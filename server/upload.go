package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
)

// Request bodies: their pace and the upload budget.
//
// A body must keep coming: a read waits at most bodyIdleTimeout for bytes,
// and past that grace the body must average Config.MinUploadRate, else the
// connection's read fails and the request ends (400).
//
// The upload budget (Config.MaxUploadBytes) bounds the memory of the bodies
// being received. A body is charged when its handler reads it: after the
// Host, the Origin and the token were checked, so a request refused, or one
// whose handler never reads its body (a GET that declares a Content-Length
// and sends nothing), holds nothing of it. It is charged what it holds in
// memory:
//
//   - a body that says its length is read into one buffer of that size,
//     charged in full before it is allocated; one the budget cannot take
//     is refused at once (503, Retry-After), unread;
//   - a body still coming at the end of the grace (bodyIdleTimeout after
//     its first read) gives back what it has not sent: what came is moved
//     to a buffer of its size, and the rest is read in blocks, each charged
//     before it is read; a block the budget cannot take ends the request
//     (503). A slow client holds what it sent, not what it announced, so
//     trickled uploads cannot keep the budget from the others (16 at 2 KiB/s
//     held 256 MiB for as long as they trickled);
//   - a body of unknown length (chunked) is read in blocks the same way;
//   - blocks are joined once, at the end, into one buffer of their size,
//     charged beside them until they are let go (the join waits for room at
//     most bodyIdleTimeout).

// bodyIdleTimeout is how long a request body may stall between two reads
// before the connection's read fails, and the grace before a body must
// keep to Config.MinUploadRate and before a body still coming gives back
// the budget it has not filled. A variable for tests.
var bodyIdleTimeout = 30 * time.Second

// bodyBlock is the largest block a body is read in when it is not read
// into one buffer of its size.
const bodyBlock = 1 << 20

// testHookReadingBody, if set (by tests only), runs when a handler begins
// to read a request's body.
var testHookReadingBody func()

// uploadBudget is the bytes of request bodies held (Config.MaxUploadBytes).
type uploadBudget struct {
	mu    sync.Mutex
	used  int64
	max   int64
	freed chan struct{} // closed, and replaced, when bytes are given back
}

func newUploadBudget(max int64) *uploadBudget {
	return &uploadBudget{max: max, freed: make(chan struct{})}
}

// take charges n bytes if they fit.
func (b *uploadBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

// force charges n bytes, past the limit if it must (a committed write's
// reply: replyHold.sendWritten).
func (b *uploadBudget) force(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used += n
}

// give returns n bytes.
func (b *uploadBudget) give(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	close(b.freed)
	b.freed = make(chan struct{})
}

// await charges n bytes, waiting for room until deadline.
func (b *uploadBudget) await(n int64, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		b.mu.Lock()
		if b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return true
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-t.C:
			return false
		}
	}
}

// inUse is the bytes charged now.
func (b *uploadBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// busy is the refusal of a body the budget cannot take.
func (b *uploadBudget) busy(n int64) error {
	return fmt.Errorf("%w: %d bytes of request bodies are being received, the budget is %d, and this body needs %d more: send it again shortly",
		api.ErrBusy, b.inUse(), b.max, n)
}

// upload is one request body's share of the budget.
type upload struct {
	b     *uploadBudget
	held  int64
	first time.Time // its first charge: the grace begins
}

func (u *upload) charge(n int64) error {
	if u == nil {
		return nil
	}
	if u.first.IsZero() {
		u.first = time.Now()
	}
	if !u.b.take(n) {
		return u.b.busy(n)
	}
	u.held += n
	return nil
}

// chargeWait charges n bytes, waiting for room at most bodyIdleTimeout.
func (u *upload) chargeWait(n int64) error {
	if u == nil {
		return nil
	}
	if !u.b.await(n, time.Now().Add(bodyIdleTimeout)) {
		return u.b.busy(n)
	}
	u.held += n
	return nil
}

// keep gives back all but n of what u holds.
func (u *upload) keep(n int64) {
	if u == nil || n >= u.held {
		return
	}
	u.b.give(u.held - n)
	u.held = n
}

// giveBack returns n bytes of what u holds.
func (u *upload) giveBack(n int64) {
	if u != nil {
		u.keep(u.held - n)
	}
}

// graceOver reports a body still being read at the end of its grace.
func (u *upload) graceOver() bool {
	return u != nil && !u.first.IsZero() && time.Since(u.first) > bodyIdleTimeout
}

// release gives back everything: the request ended.
func (u *upload) release() { u.keep(0) }

// guardBody holds r's body to a pace (see above) and gives it its share of
// the upload budget, charged as its handler reads it (readBody); the
// returned func gives back what it holds when the request ends.
func (s *Server) guardBody(w http.ResponseWriter, r *http.Request) (release func()) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return func() {}
	}
	rc := http.NewResponseController(w)
	start := time.Now()
	// Armed now, so that a body the handler never reads (a refused
	// request) cannot hold the server's drain of it either.
	_ = rc.SetReadDeadline(start.Add(bodyIdleTimeout))
	u := &upload{b: s.uploads}
	r.Body = &idleBody{ReadCloser: r.Body, rc: rc, start: start, minRate: s.cfg.MinUploadRate, upload: u}
	return u.release
}

type idleBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	done    bool
	start   time.Time
	read    int64
	minRate int64
	upload  *upload
}

// deadline is the next read's: bodyIdleTimeout from now, and no later than
// the grace plus the time the bytes read so far earn at the minimum rate.
func (b *idleBody) deadline() time.Time {
	d := time.Now().Add(bodyIdleTimeout)
	if earned := b.start.Add(bodyIdleTimeout + time.Duration(b.read*int64(time.Second)/max(b.minRate, 1))); earned.Before(d) {
		d = earned
	}
	return d
}

func (b *idleBody) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	_ = b.rc.SetReadDeadline(b.deadline())
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	switch {
	case err == io.EOF:
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case err != nil:
		// A stalled or broken body: leave the deadline passed, so that
		// the server's own attempt to drain the rest fails at once and it
		// closes the connection after the reply.
		b.done = true
		_ = b.rc.SetReadDeadline(time.Now())
	}
	return n, err
}

// uploadOf is r's share of the budget; nil for a request the server did
// not guard (a handler called directly).
func uploadOf(r *http.Request) *upload {
	if b, ok := r.Body.(*idleBody); ok {
		return b.upload
	}
	return nil
}

// readBody reads r's body up to limit bytes: 413 beyond it, 503 when the
// upload budget cannot take it (above). A body that says its length is
// read into one buffer of exactly that size, allocated once, unless it is
// still coming at the end of its grace; one that does not in blocks that
// grow to bodyBlock, joined at the end into one buffer of its size.
// (io.ReadAll grew its buffer by appending: up to twice a body kept, and
// the garbage of every size before.)
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	refuseUnread := func() {
		w.Header().Set("Connection", "close")
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
	if r.ContentLength > limit {
		refuseUnread()
		return nil, fmt.Errorf("%w: body of %d bytes, the limit is %d", store.ErrTooLarge, r.ContentLength, limit)
	}
	u := uploadOf(r)
	if testHookReadingBody != nil {
		testHookReadingBody()
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	var (
		b   []byte
		err error
	)
	if r.ContentLength >= 0 {
		if err := u.charge(r.ContentLength); err != nil {
			refuseUnread()
			return nil, err
		}
		b, err = readExact(body, u, r.ContentLength)
	} else {
		b, err = readBlocks(body, u, nil, -1)
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, fmt.Errorf("%w: body over the limit of %d bytes", store.ErrTooLarge, limit)
	case errors.Is(err, api.ErrBusy):
		refuseUnread()
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w: reading the body: %v", api.ErrBadRequest, err)
	}
	return b, nil
}

// readExact reads a body of n bytes, charged to u, into one buffer of its
// size; at the end of the grace, what has come moves to a block of its
// size and the rest is read by readBlocks.
func readExact(r io.Reader, u *upload, n int64) ([]byte, error) {
	b := make([]byte, n)
	k := 0
	for k < len(b) {
		if u.graceOver() {
			got := append([]byte(nil), b[:k]...)
			b = nil
			u.keep(int64(k))
			return readBlocks(r, u, [][]byte{got}, n-int64(k))
		}
		m, err := r.Read(b[k:])
		k += m
		if err == io.EOF && k < len(b) {
			return nil, io.ErrUnexpectedEOF
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
	}
	return b, nil
}

// readBlocks reads r to its end (rest bytes more, -1: unknown) after the
// blocks already read, in blocks of 4 KiB growing to bodyBlock, each
// charged to u before it is read, and returns the bytes in one buffer of
// their size (the one block, for a body that fits it).
func readBlocks(r io.Reader, u *upload, blocks [][]byte, rest int64) ([]byte, error) {
	n := 0
	for _, b := range blocks {
		n += len(b)
	}
	for size := 4 << 10; ; size = min(2*size, bodyBlock) {
		if rest >= 0 {
			// The last block ends where the body says it does, and the
			// one after it (empty) reads the end.
			size = int(min(int64(size), max(rest, 1)))
		}
		if err := u.charge(int64(size)); err != nil {
			return nil, err
		}
		blk := make([]byte, size)
		k := 0
		var err error
		for k < size && err == nil {
			var m int
			m, err = r.Read(blk[k:])
			k += m
		}
		n += k
		if rest >= 0 {
			rest -= int64(k)
		}
		if k > 0 {
			blocks = append(blocks, blk[:k])
		}
		u.giveBack(int64(size - k)) // what the block did not fill
		switch {
		case err == io.EOF && rest > 0:
			return nil, io.ErrUnexpectedEOF
		case err == io.EOF:
			if len(blocks) == 1 {
				return blocks[0], nil
			}
			// The join is charged beside the blocks until they go.
			if err := u.chargeWait(int64(n)); err != nil {
				return nil, err
			}
			out := make([]byte, 0, n)
			for i, b := range blocks {
				out = append(out, b...)
				blocks[i] = nil
			}
			u.keep(int64(n))
			return out, nil
		case err != nil:
			return nil, err // a body cut short included (io.ErrUnexpectedEOF)
		}
	}
}
