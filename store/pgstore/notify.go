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

// A process sends nothing when no other process listens: most
// deployments have one process on a database, and a NOTIFY is a statement
// and a transaction of its own. It publishes unless it knows no one else
// listens: its own LISTEN connection is up (a process that publishes starts
// it), a look at PostgreSQL's sessions made since found none whose last
// statement was this channel's LISTEN (othersCheck, repeated every
// othersCheck), and no listener has said "hello" since. A listener says
// hello on the channel before its LISTEN, so a process that comes later is
// heard by every listening one at once (they publish for othersTTL after,
// renewed by each look that finds it); one that was there before is found
// by the look. A listener wakes its waiters once more helloGrace after its
// LISTEN: a commit made before the others heard its hello, and so not
// published, is read then; past that, a commit not published costs its
// readers SafetyPollInterval, as a lost notification does.

// maxPayload keeps a NOTIFY payload under the server's 8000-byte limit.
const maxPayload = 7000

const (
	helloPayload = "hello"
	othersTTL    = 30 * time.Second
	othersCheck  = 10 * time.Second
	helloGrace   = 500 * time.Millisecond
)

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
	s.heard(hs)
	s.hub.WakeEach(ids(hs), func(i int) head { return hs[i] })
	s.pub.add(hs)
}

// heard records heads before their waiters wake (heads.go): a stream
// changed in a way the heads do not say (deleted, purged, copied into)
// loses its cached records and its known head.
func (s *Store) heard(hs []head) {
	var changed []int64
	for _, h := range hs {
		if !h.known {
			changed = append(changed, h.id)
		}
	}
	if len(changed) > 0 {
		s.tail.Apply(nil, changed, nil)
	}
	s.known.see(hs...)
}

// publisher sends this process's writes to the others.
type publisher struct {
	s           *Store
	channel     string
	othersUntil atomic.Int64 // unix nanos until which another process listens, as last heard
	quietSince  atomic.Int64 // unix nanos of the last look that found no other listener
	mu          sync.Mutex
	pending     map[int64]head
	runs        map[int64]bool // store.RunKey of runs whose watchers wake
	kick        chan struct{}
}

func newPublisher(s *Store) *publisher {
	return &publisher{s: s, channel: channel(s.cfg.Schema), pending: make(map[int64]head), runs: make(map[int64]bool), kick: make(chan struct{}, 1)}
}

// heardOthers records that another process listens (its hello, or the
// check).
func (p *publisher) heardOthers() { p.othersUntil.Store(time.Now().Add(othersTTL).UnixNano()) }

// others reports whether another process may listen, looking if it must.
// Publisher only.
func (p *publisher) others() bool {
	if time.Now().UnixNano() < p.othersUntil.Load() {
		return true
	}
	up := p.s.lis.upSince.Load()
	if up == 0 {
		// Not listening: hellos go unheard. Listen, and publish meanwhile.
		p.s.lis.start()
		return true
	}
	if p.quietSince.Load() < up {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		p.checkOthers(ctx)
		cancel()
	}
	return time.Now().UnixNano() < p.othersUntil.Load() || p.quietSince.Load() < up
}

// checkOthers looks for another process's listener: a session of this
// database whose last statement was this channel's LISTEN (or whose
// statements this role may not see).
func (p *publisher) checkOthers(ctx context.Context) {
	at := time.Now().UnixNano()
	var pids []uint32
	err := p.s.pool.QueryRow(ctx, `SELECT COALESCE(array_agg(pid), '{}') FROM pg_stat_activity WHERE datname = current_database()
		AND backend_type = 'client backend' AND (query = $1 OR query = '<insufficient privilege>')`,
		"LISTEN "+pgx.Identifier{p.channel}.Sanitize()).Scan(&pids)
	// This process's own LISTEN session is known (its pid stored) before
	// its LISTEN runs, so read after the look it is never taken for another.
	own := p.s.lis.pid.Load()
	found := false
	for _, pid := range pids {
		found = found || pid != own
	}
	if err != nil || found {
		p.heardOthers() // an error: publish, as before
		return
	}
	p.quietSince.Store(at)
}

// addRuns sends the wakes of the watchers of runs (store.RunKey).
func (p *publisher) addRuns(keys []int64) {
	p.mu.Lock()
	for _, k := range keys {
		p.runs[k] = true
	}
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
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
	check := time.NewTicker(othersCheck)
	defer check.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	p.checkOthers(ctx)
	cancel()
	for {
		select {
		case <-p.kick:
		case <-check.C:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			p.checkOthers(ctx)
			cancel()
			continue
		case <-p.s.closing:
			return
		}
		for {
			p.mu.Lock()
			if len(p.pending) == 0 && len(p.runs) == 0 {
				p.mu.Unlock()
				break
			}
			if !p.others() {
				// No one else listens: this process's waiters were woken
				// already.
				clear(p.pending)
				clear(p.runs)
				p.mu.Unlock()
				break
			}
			payloads = payloads[:0]
			var b strings.Builder
			add := func(f string) {
				if b.Len() > maxPayload {
					payloads = append(payloads, b.String())
					b.Reset()
				}
				if b.Len() > 0 {
					b.WriteByte(',')
				}
				b.WriteString(f)
			}
			for _, h := range p.pending {
				add(formatHead(h))
			}
			for k := range p.runs {
				add(formatRun(k))
			}
			payloads = append(payloads, b.String())
			clear(p.pending)
			clear(p.runs)
			p.mu.Unlock()

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			// A failure is dropped: the waiters' polling covers it.
			p.s.stats.notifies.Add(1)
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
	pid     atomic.Uint32 // the LISTEN connection's backend, 0 if none
	upSince atomic.Int64  // unix nanos since its LISTEN is in place, 0 if it is not
	once    sync.Once
	ready   chan struct{} // closed once the first LISTEN is in place
	up      atomic.Bool   // LISTEN is in place now: waiters need not poll
}

func newListener(s *Store) *listener {
	return &listener{s: s, channel: channel(s.cfg.Schema), ready: make(chan struct{})}
}

// start starts the listener if it is not running.
func (l *listener) start() {
	l.once.Do(func() {
		if !l.s.goBackground(l.loop) {
			close(l.ready)
		}
	})
}

// ensure starts the listener if it is not running, and waits (briefly) for
// its LISTEN to be in place, so that a Wait that begins now hears of the
// writes that follow.
func (l *listener) ensure(ctx context.Context) {
	l.start()
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
				l.s.runs.WakeAll()
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
		l.s.runs.WakeAll()
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
	// Known before the LISTEN, so that this process's own look never
	// takes this session for another process's.
	own := conn.PgConn().PID()
	l.pid.Store(own)
	defer l.pid.Store(0)
	// The hello before the LISTEN: the LISTEN stays this session's last
	// statement, which the others' checks look for.
	if _, err := conn.Exec(ctx, "SELECT pg_notify($1, $2)", l.channel, helloPayload); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		return err
	}
	l.upSince.Store(time.Now().UnixNano())
	defer l.upSince.Store(0)
	listening()
	grace := time.AfterFunc(helloGrace, func() {
		// Commits made before the others heard the hello were not sent.
		l.s.hub.WakeAll()
		l.s.runs.WakeAll()
	})
	defer grace.Stop()
	// Anything sent before the LISTEN was missed: the heads heard of are
	// no longer the newest, and every waiter looks again.
	l.s.known.forgetAll()
	l.up.Store(true)
	defer l.up.Store(false)
	l.s.hub.WakeAll()
	l.s.runs.WakeAll()
	var hs []head
	var runs []int64
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Payload == helloPayload {
			if n.PID != own {
				l.s.pub.heardOthers()
			}
			continue
		}
		hs, runs = hs[:0], runs[:0]
		for f := range strings.SplitSeq(n.Payload, ",") {
			if k, ok := parseRun(f); ok {
				runs = append(runs, k)
			} else if h, ok := parseHead(f); ok {
				hs = append(hs, h)
			}
		}
		l.s.runs.WakeEach(runs, func(int) struct{} { return struct{}{} })
		l.s.heard(hs)
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

// formatRun is a run's wake as a notification carries it: "r" and its
// store.RunKey. A process that knows no such entry skips it (parseHead
// refuses it).
func formatRun(key int64) string { return "r" + strconv.FormatInt(key, 10) }

func parseRun(f string) (int64, bool) {
	k, ok := strings.CutPrefix(f, "r")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(k, 10, 64)
	return n, err == nil
}

// wakeRuns wakes the watchers of runs, here and in the other processes.
func (s *Store) wakeRuns(runs []string) {
	if len(runs) == 0 {
		return
	}
	keys := make([]int64, len(runs))
	for i, r := range runs {
		keys[i] = store.RunKey(r)
	}
	s.runs.WakeEach(keys, func(int) struct{} { return struct{}{} })
	s.pub.addRuns(keys)
}

// WatchRun is store.RunWatcher's: a stream of run created, a run event
// set, or the run ended, by this process or (through notifications)
// another.
func (s *Store) WatchRun(run string) (<-chan struct{}, func()) {
	s.lis.ensure(context.Background())
	k := store.RunKey(run)
	w := s.runs.Subscribe(k)
	return w.C, func() { s.runs.Unsubscribe(k, w) }
}

// CreatedStream is store.RunWatcher's: a run stream this process created
// while its run was watched, with the newest head it heard of.
func (s *Store) CreatedStream(path string) (*store.StreamInfo, bool) {
	si, ok := s.created.Get(path)
	if !ok {
		return nil, false
	}
	if h, ok := s.known.get(si.ID); ok && h.next >= si.NextOffset {
		si.NextOffset, si.Closed = h.next, h.closed
	}
	return si, true
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
		// The head this process heard of last is the newest while LISTEN
		// works: a commit after it wakes us (heads.go).
		h, ok := s.known.get(id)
		n, closed := h.next, h.closed
		if !ok || !s.lis.up.Load() {
			s.stats.headReads.Add(1)
			err := s.do(ctx, true, func(ctx context.Context, _ *try) error {
				return s.pool.QueryRow(ctx, s.q.head, id).Scan(&n, &closed)
			})
			if err != nil {
				s.hub.Unsubscribe(id, w)
				return fmt.Errorf("wait stream %d: %w", id, err)
			}
			s.known.see(head{id: id, next: n, closed: closed, known: true})
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
