package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/store"
)

// Live tails across processes.
//
// A process that commits records on a stream wakes its own waiters at once
// and hands the stream's id to its publisher, which sends them to the other
// processes with NOTIFY on the schema's channel: after the commit, in its own
// short transaction (a NOTIFY inside the write transaction would take the
// server's global notify lock and serialize every writer), at most one in
// flight and at most one per Config.NotifyInterval, each carrying every
// stream written since the last. Each process's listener holds one
// connection that LISTENs, and wakes the waiters of the streams it hears of.
// A waiter also re-reads its stream every Config.PollInterval, so a lost
// notification (a listener reconnecting, a publisher failing) costs latency,
// never data.

// maxPayload keeps a NOTIFY payload under the server's 8000-byte limit.
const maxPayload = 7000

// channel returns the NOTIFY channel of schema: one per schema, so that
// stores on different schemas of one database do not hear each other.
func channel(schema string) string {
	c := "weir_" + schema
	if len(c) > 63 { // the longest identifier
		sum := sha256.Sum256([]byte(schema))
		c = "weir_" + hex.EncodeToString(sum[:16])
	}
	return c
}

// head is what a wake tells a waiter of a stream: its next offset and
// whether it is closed, if known.
type head struct {
	id     int64
	next   int64
	closed bool
	known  bool
}

// wrote reports that the streams ids changed (records committed, deleted):
// their waiters look at them again.
func (s *Store) wrote(ids ...int64) {
	if len(ids) == 0 {
		return
	}
	hs := make([]head, len(ids))
	for i, id := range ids {
		hs[i] = head{id: id}
	}
	s.wroteHeads(hs)
}

// ids are the stream ids of hs.
func ids(hs []head) []int64 {
	out := make([]int64, len(hs))
	for i, h := range hs {
		out[i] = h.id
	}
	return out
}

// wroteHeads reports commits on streams whose new heads are known: a
// waiter, here or in another process, that sees its offset reached returns
// without a read.
func (s *Store) wroteHeads(hs []head) {
	if len(hs) == 0 {
		return
	}
	s.hub.WakeEach(ids(hs), func(i int) head { return hs[i] })
	s.pub.add(hs)
}

// publisher sends this process's writes to the others.
type publisher struct {
	s       *Store
	channel string
	mu      sync.Mutex
	pending map[int64]head
	kick    chan struct{}
}

func newPublisher(s *Store) *publisher {
	return &publisher{s: s, channel: channel(s.cfg.Schema), pending: make(map[int64]head), kick: make(chan struct{}, 1)}
}

func (p *publisher) add(hs []head) {
	p.mu.Lock()
	for _, h := range hs {
		if old, ok := p.pending[h.id]; ok {
			// Heads only grow; an unknown one makes the receiver look.
			h.known = h.known && old.known
			h.next, h.closed = max(h.next, old.next), h.closed || old.closed
		}
		p.pending[h.id] = h
	}
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// loop sends a NOTIFY as soon as something is pending, then waits
// NotifyInterval before the next, until the store closes.
func (p *publisher) loop() {
	var payloads []string
	for {
		select {
		case <-p.kick:
		case <-p.s.closing:
			return
		}
		for {
			p.mu.Lock()
			if len(p.pending) == 0 {
				p.mu.Unlock()
				break
			}
			payloads = payloads[:0]
			var b strings.Builder
			for _, h := range p.pending {
				if b.Len() > maxPayload {
					payloads = append(payloads, b.String())
					b.Reset()
				}
				if b.Len() > 0 {
					b.WriteByte(',')
				}
				b.WriteString(formatHead(h))
			}
			payloads = append(payloads, b.String())
			clear(p.pending)
			p.mu.Unlock()

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			// A failure is dropped: the waiters' polling covers it.
			_, _ = p.s.pool.Exec(ctx, `SELECT pg_notify($1, x) FROM unnest($2::text[]) x`, p.channel, payloads)
			cancel()
			select {
			case <-time.After(p.s.cfg.NotifyInterval):
			case <-p.s.closing:
				return
			}
		}
	}
}

// listener holds the connection that LISTENs for the other processes'
// writes. It starts with the first Wait.
type listener struct {
	s       *Store
	channel string
	once    sync.Once
	ready   chan struct{} // closed once the first LISTEN is in place
	up      atomic.Bool   // LISTEN is in place now: waiters need not poll
}

func newListener(s *Store) *listener {
	return &listener{s: s, channel: channel(s.cfg.Schema), ready: make(chan struct{})}
}

// ensure starts the listener if it is not running, and waits (briefly) for
// its LISTEN to be in place, so that a Wait that begins now hears of the
// writes that follow.
func (l *listener) ensure(ctx context.Context) {
	l.once.Do(func() {
		if !l.s.goBackground(l.loop) {
			close(l.ready)
		}
	})
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-l.ready:
	case <-t.C:
	case <-ctx.Done():
	case <-l.s.closing:
	}
}

func (l *listener) loop() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The safety poll: one timer for every waiter of this process.
	go func() {
		t := time.NewTicker(l.s.cfg.SafetyPollInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				l.s.hub.WakeAll()
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		select {
		case <-l.s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	var readyOnce sync.Once
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		err := l.listen(ctx, func() {
			readyOnce.Do(func() { close(l.ready) })
			backoff = 10 * time.Millisecond
		})
		_ = err
		// Whatever was sent while we were not listening is lost: every
		// waiter re-reads its stream.
		l.s.hub.WakeAll()
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(2*backoff, time.Second)
	}
}

// listen connects, LISTENs and wakes waiters until the connection fails or
// ctx ends.
func (l *listener) listen(ctx context.Context, listening func()) error {
	conn, err := pgx.ConnectConfig(ctx, l.s.pool.Config().ConnConfig)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		return err
	}
	listening()
	l.up.Store(true)
	defer l.up.Store(false)
	l.s.hub.WakeAll() // anything sent before the LISTEN was missed
	var hs []head
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		hs = hs[:0]
		for f := range strings.SplitSeq(n.Payload, ",") {
			if h, ok := parseHead(f); ok {
				hs = append(hs, h)
			}
		}
		l.s.hub.WakeEach(ids(hs), func(i int) head { return hs[i] })
	}
}

// formatHead is a head as a notification carries it: "id", "id:next" or
// "id:next:c" (closed).
func formatHead(h head) string {
	s := strconv.FormatInt(h.id, 10)
	if !h.known {
		return s
	}
	s += ":" + strconv.FormatInt(h.next, 10)
	if h.closed {
		s += ":c"
	}
	return s
}

func parseHead(f string) (head, bool) {
	idS, rest, hasNext := strings.Cut(f, ":")
	id, err := strconv.ParseInt(idS, 10, 64)
	if err != nil {
		return head{}, false
	}
	h := head{id: id}
	if hasNext {
		nextS, c, _ := strings.Cut(rest, ":")
		if next, err := strconv.ParseInt(nextS, 10, 64); err == nil {
			h.next, h.closed, h.known = next, c == "c", true
		}
	}
	return h, true
}

// Wait blocks until stream id has a record at offset >= next or is closed.
func (s *Store) Wait(ctx context.Context, id int64, next int64) error {
	if s.isClosed() {
		return store.ErrClosedStore
	}
	s.lis.ensure(ctx)
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		// Subscribe before looking, so that a write between the look and
		// the wait still wakes us.
		w := s.hub.Subscribe(id)
		var n int64
		var closed bool
		s.stats.headReads.Add(1)
		err := s.do(ctx, true, func(ctx context.Context, _ *try) error {
			return s.pool.QueryRow(ctx, s.q.head, id).Scan(&n, &closed)
		})
		if err != nil {
			s.hub.Unsubscribe(id, w)
			return fmt.Errorf("wait stream %d: %w", id, err)
		}
		if n > next || closed {
			s.hub.Unsubscribe(id, w)
			return nil
		}
		// While LISTEN works, notifications (and the listener's shared
		// safety poll) wake us; only without it does each waiter poll.
		poll := s.cfg.PollInterval
		if s.lis.up.Load() {
			poll = time.Hour
		}
		if t == nil {
			t = time.NewTimer(poll)
		} else {
			t.Reset(poll)
		}
		select {
		case <-w.C:
			// A commit told us its head: no need to look.
			if hd := w.Value; hd.known && (hd.next > next || hd.closed) {
				s.hub.Unsubscribe(id, w)
				return nil
			}
		case <-t.C:
		case <-ctx.Done():
			s.hub.Unsubscribe(id, w)
			return ctx.Err()
		case <-s.closing:
			s.hub.Unsubscribe(id, w)
			return store.ErrClosedStore
		}
		s.hub.Unsubscribe(id, w)
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
	}
}
