package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	neturl "net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/internal/hub"
	"github.com/weirhq/weir/store/internal/queue"
	"github.com/weirhq/weir/store/internal/sqlrow"
	"github.com/weirhq/weir/store/internal/tail"
	"github.com/weirhq/weir/world"
)

var _ store.Full = (*Store)(nil)

// ErrSchemaTooNew is returned by Open when the database's schema was migrated
// by a newer weir than this one.
var ErrSchemaTooNew = errors.New("pgstore: schema is newer than this build")

// DefaultSchema is the schema weir's tables live in unless Config.Schema says
// otherwise.
const DefaultSchema = "weir"

// Config configures a Store. The zero value is ready to use; nil means the
// zero value.
type Config struct {
	// Schema is the PostgreSQL schema holding weir's tables. Open creates it
	// and migrates it. Several weir deployments (or tests) may share one
	// database with a schema each. Defaults to "weir".
	Schema string
	// MaxConns is the size of the connection pool Open creates, unless the
	// URL sets pool_max_conns. Every process also holds one more connection
	// for LISTEN once it has waited on a stream or written one, and one for
	// renewing its runs' leases once it executes one (RenewLeases).
	// Defaults to 16.
	MaxConns int32
	// CacheWriters is how many writers' dedupe states (their live records'
	// offsets and digests) stay in memory. The database is the truth: an
	// entry is used only while its version matches the writer's row, and a
	// writer not in the cache is rebuilt from its stream's log. Defaults to
	// 4096.
	CacheWriters int
	// PollInterval is how often a Wait re-reads its stream while this
	// process's LISTEN connection is down (notifications may be lost).
	// Defaults to 500ms.
	PollInterval time.Duration
	// SafetyPollInterval is how often, while LISTEN works, every Wait
	// re-reads its stream anyway (one timer for all of them): the latency
	// a notification lost another way (a publisher's failed NOTIFY) costs.
	// Idle readers cost the database nothing else. Defaults to 10s.
	SafetyPollInterval time.Duration
	// NotifyInterval is the shortest time between two NOTIFYs this process
	// sends. Streams written meanwhile share the next one, so a busy process
	// sends at most one per interval. Defaults to 2ms.
	NotifyInterval time.Duration
	// MaxBatch is the most write operations one group commit applies in one
	// transaction. Defaults to 256.
	MaxBatch int
	// Committers is how many group commits may be in flight at once, each
	// on its own connection. Defaults to 2.
	Committers int
	// RetryFor is how long an operation is retried after an error that is
	// safe to retry: a lost connection, a server restart, a serialization
	// failure or deadlock. Defaults to 10s; a negative value disables
	// retries.
	RetryFor time.Duration
	// IdleInTransactionTimeout is the server's idle_in_transaction_session_timeout
	// for the store's connections: a process frozen (SIGSTOP, a debugger, a
	// VM paused) between the round trips of a transaction loses its
	// connection after it, and with it the row locks it holds, so that
	// another process can take its runs over once their leases expire.
	// Keep it below the engine's lease (weir.Config.LeaseTTL, 15s by
	// default). Defaults to 5s; a negative value leaves the server's
	// setting. A URL that sets idle_in_transaction_session_timeout wins.
	IdleInTransactionTimeout time.Duration
	// StatementTimeout is the server's statement_timeout for the store's
	// connections: no statement holds its locks longer, whatever happens to
	// the process that sent it. Defaults to 10s; a negative value leaves the
	// server's setting. A URL that sets statement_timeout wins.
	StatementTimeout time.Duration
	// ReadWindow is the most bytes of a stored batch (one append, up to 16
	// MiB) a read fetches at once; a read fetches windows of about its page
	// (ReadParams.MaxBytes), as its page needs them, from where the last
	// page left off. The driver reads a row whole, into a buffer it keeps
	// for the connection, so this bounds what a read costs beyond its page,
	// and what each pooled connection keeps. Defaults to 1 MiB less 1 KiB
	// (a row of it fits the driver's 1 MiB buffer).
	ReadWindow int
	// Now is the store's clock, for timestamps and leases. All processes on
	// one database should have synchronized clocks. Defaults to time.Now.
	Now func() time.Time
}

// WithDefaults returns a copy of c with every unset field at its default.
func (c *Config) WithDefaults() *Config {
	out := Config{}
	if c != nil {
		out = *c
	}
	if out.Schema == "" {
		out.Schema = DefaultSchema
	}
	if out.MaxConns == 0 {
		out.MaxConns = 16
	}
	if out.CacheWriters == 0 {
		out.CacheWriters = 4096
	}
	if out.SafetyPollInterval == 0 {
		out.SafetyPollInterval = 10 * time.Second
	}
	if out.PollInterval == 0 {
		out.PollInterval = 500 * time.Millisecond
	}
	if out.NotifyInterval == 0 {
		out.NotifyInterval = 2 * time.Millisecond
	}
	if out.MaxBatch == 0 {
		out.MaxBatch = 256
	}
	if out.Committers == 0 {
		out.Committers = 2
	}
	if out.RetryFor == 0 {
		out.RetryFor = 10 * time.Second
	}
	if out.IdleInTransactionTimeout == 0 {
		out.IdleInTransactionTimeout = 5 * time.Second
	}
	if out.StatementTimeout == 0 {
		out.StatementTimeout = 10 * time.Second
	}
	if out.ReadWindow == 0 {
		out.ReadWindow = sqlrow.DefaultWindow
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return &out
}

func (c *Config) validate() error {
	if c.MaxConns < 0 || c.CacheWriters < 0 || c.PollInterval < 0 || c.SafetyPollInterval < 0 || c.NotifyInterval < 0 || c.MaxBatch < 0 || c.Committers < 0 || c.ReadWindow < 0 {
		return fmt.Errorf("%w: negative config value", store.ErrInvalid)
	}
	if len(c.Schema) > 50 {
		return fmt.Errorf("%w: schema name %q is longer than 50 bytes", store.ErrInvalid, c.Schema)
	}
	return nil
}

// Store is the PostgreSQL store. It is safe for concurrent use, and any
// number of Stores, in any number of processes, may share one database.
type Store struct {
	pool    *pgxpool.Pool
	ownPool bool
	cfg     *Config
	q       *queries
	writers *writerCache
	hub     hub.Hub[head]     // wakes Waits: a wake tells the head if known
	runs    hub.Hub[struct{}] // wakes WatchRun, by store.RunKey
	pub     *publisher
	lis     *listener
	renew   renewer // the connection leases are renewed on (leases.go)

	keysSaved atomic.Int64 // idempotency keys saved: expired ones are purged every 256

	stats      struct{ groups, ops, headReads, notifies atomic.Int64 }
	count      *counter         // pgx's tracer on a pool Open made (counts.go)
	ops        *queue.Queue[op] // to the committers
	committers sync.WaitGroup
	// smallGroups is held by the committer whose group of small ops is in
	// flight: they take turns (committer.go).
	smallGroups sync.Mutex

	hints sqlrow.Hints // where read pages that ended inside a batch left off
	tail  *tail.Cache  // newest records of followed streams, as this process committed them (heads.go)
	known knownHeads   // the newest head heard of, by stream (heads.go)
	// created are the run streams this process made while their runs
	// were watched (CreatedStream).
	created tail.Created

	streamRunsMu sync.Mutex
	streamRuns   map[int64]string // stream id -> its run ("" standalone): never changes

	mu      sync.Mutex
	closed  bool
	closing chan struct{} // closed by Close
	bg      sync.WaitGroup

	ids world.ULIDs // the World's run and event ids
}

// Open connects to the database at url (a postgres:// URL or a key=value
// connection string, as pgx parses them), migrates cfg.Schema to the current
// version and returns a Store that owns its connection pool.
//
// A URL may name the schema with a schema parameter
// (postgres://host/db?schema=weir_staging), which Open removes before
// connecting; cfg.Schema, if set, wins.
func Open(ctx context.Context, url string, cfg *Config) (*Store, error) {
	url, schema, err := schemaParam(url)
	if err != nil {
		return nil, err
	}
	if schema != "" && (cfg == nil || cfg.Schema == "") {
		c := Config{}
		if cfg != nil {
			c = *cfg
		}
		c.Schema = schema
		cfg = &c
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%w: database url: %v", store.ErrInvalid, err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		pc.MaxConns = cfg.MaxConns
	}
	for k, v := range cfg.sessionSettings() {
		if _, ok := pc.ConnConfig.RuntimeParams[k]; !ok {
			pc.ConnConfig.RuntimeParams[k] = v
		}
	}
	cnt := &counter{}
	if pc.ConnConfig.Tracer == nil {
		pc.ConnConfig.Tracer = cnt
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open: %w", interpretError(err))
	}
	s, err := newStore(ctx, pool, cfg, cnt)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownPool = true
	return s, nil
}

// sessionSettings are the settings Open gives its connections, unless the
// URL sets them. Every statement of the store is a lookup by key, through an
// index, driven by a few keys. Generic plans save a planning per execution
// (custom plans, PostgreSQL's default for the first executions and for good
// when array parameters make them look cheaper, cost a fifth of the
// server's time); without seq scans and hash or merge joins, a generic plan
// made while the tables were small (just after the migration) stays an
// index lookup once they are large, instead of scanning them.
var sessionSettings = map[string]string{
	"plan_cache_mode":  "force_generic_plan",
	"enable_seqscan":   "off",
	"enable_hashjoin":  "off",
	"enable_mergejoin": "off",
}

// sessionSettings are sessionSettings with the timeouts of c.
func (c *Config) sessionSettings() map[string]string {
	out := maps.Clone(sessionSettings)
	for k, d := range map[string]time.Duration{
		"idle_in_transaction_session_timeout": c.IdleInTransactionTimeout,
		"statement_timeout":                   c.StatementTimeout,
	} {
		if d > 0 {
			out[k] = strconv.FormatInt(max(d.Milliseconds(), 1), 10)
		}
	}
	return out
}

// schemaParam removes the schema parameter from a postgres:// URL.
func schemaParam(raw string) (string, string, error) {
	if !strings.HasPrefix(raw, "postgres://") && !strings.HasPrefix(raw, "postgresql://") {
		return raw, "", nil
	}
	u, err := neturl.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("%w: database url: %v", store.ErrInvalid, err)
	}
	q := u.Query()
	schema := q.Get("schema")
	if !q.Has("schema") {
		return raw, "", nil
	}
	q.Del("schema")
	u.RawQuery = q.Encode()
	return u.String(), schema, nil
}

// New returns a Store on pool, migrating cfg.Schema to the current version.
// The caller keeps the pool: Close leaves it open. cfg.MaxConns is ignored.
// Open gives its connections the settings that keep the store's plans cheap
// and index-driven (plan_cache_mode, enable_seqscan, enable_hashjoin,
// enable_mergejoin: see sessionSettings) and the timeouts that free a frozen
// process's locks (Config.IdleInTransactionTimeout, StatementTimeout); a
// pool given to New should have them too.
func New(ctx context.Context, pool *pgxpool.Pool, cfg *Config) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", store.ErrInvalid)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return newStore(ctx, pool, cfg, &counter{})
}

func newStore(ctx context.Context, pool *pgxpool.Pool, cfg *Config, cnt *counter) (*Store, error) {
	s := &Store{
		count:   cnt,
		tail:    tail.New(1024),
		pool:    pool,
		cfg:     cfg,
		q:       newQueries(cfg.Schema),
		writers: newWriterCache(cfg.CacheWriters),
		closing: make(chan struct{}),
	}
	s.ids.Time = cfg.Now
	// Migrations are safe to retry: each runs in one transaction.
	err := s.do(ctx, true, func(ctx context.Context, _ *try) error { return migrate(ctx, pool, cfg.Schema) })
	if err != nil {
		return nil, fmt.Errorf("open: migrate schema %q: %w", cfg.Schema, err)
	}
	s.pub = newPublisher(s)
	s.lis = newListener(s)
	s.bg.Add(1)
	go func() { defer s.bg.Done(); s.pub.loop() }()
	s.ops = queue.New[op](cfg.MaxBatch)
	s.streamRuns = make(map[int64]string)
	for range cfg.Committers {
		s.committers.Add(1)
		go func() { defer s.committers.Done(); s.committer() }()
	}
	return s, nil
}

// streamRun returns the run of stream id ("" for a standalone stream), if
// this process has seen the stream.
func (s *Store) streamRun(id int64) (string, bool) {
	s.streamRunsMu.Lock()
	defer s.streamRunsMu.Unlock()
	run, ok := s.streamRuns[id]
	return run, ok
}

func (s *Store) setStreamRun(id int64, run string) {
	s.streamRunsMu.Lock()
	defer s.streamRunsMu.Unlock()
	if len(s.streamRuns) >= 1<<16 {
		clear(s.streamRuns) // a stream's run never changes: any entry may go
	}
	s.streamRuns[id] = run
}

// Pool returns the store's connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Schema returns the schema the store's tables are in.
func (s *Store) Schema() string { return s.cfg.Schema }

// Close stops the store's background work and, if Open created the pool,
// closes it. Operations after Close return store.ErrClosedStore; closing twice
// is a no-op.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.closeOps() // the writes queued finish first
	close(s.closing)
	s.bg.Wait()
	s.renew.close()
	if s.ownPool {
		s.pool.Close()
	}
	return nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// goBackground runs f in a goroutine that Close waits for, unless the store
// is closed.
func (s *Store) goBackground(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.bg.Add(1)
	go func() { defer s.bg.Done(); f() }()
	return true
}

// Error is a failure of PostgreSQL or of the connection to it, not of the
// caller's request. The store has already retried it if that was safe, for
// up to Config.RetryFor.
type Error struct {
	// Code is the SQLSTATE, empty for a connection failure.
	Code string
	// Retryable reports that the same operation may succeed later: the
	// connection was lost, the server restarted, or a transaction lost a
	// serialization race.
	Retryable bool
	// Unknown reports that the connection was lost after the commit was sent:
	// the operation may or may not have been written.
	Unknown bool
	msg     string
}

func (e *Error) Error() string { return "postgres: " + e.msg }

// Temporary reports whether retrying may succeed (e.Retryable).
func (e *Error) Temporary() bool { return e.Retryable }

// try is one attempt of an operation: it records whether the commit was sent,
// which decides whether a failure may have written anything.
type try struct {
	n          int  // 0 for the first attempt
	committing bool // the commit (or a write in autocommit) was sent
}

// retryable reports whether err may go away if the whole transaction is run
// again: a lost or refused connection, a server shutting down, a
// serialization failure or deadlock (the server rolled back).
func retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var re *retryError
	if errors.As(err, &re) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", "40P01", // serialization failure, deadlock
			"57P01", "57P02", "57P03", // admin shutdown, crash shutdown, cannot connect now
			"53300", // too many connections
			"55P03": // lock not available
			return true
		}
		return strings.HasPrefix(pe.Code, "08") // connection exception
	}
	if errors.Is(err, puddle.ErrClosedPool) {
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return pgconn.SafeToRetry(err) || errors.As(err, &ce) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, net.ErrClosed)
}

// committedUnknown reports whether a failure of an attempt that sent its
// commit leaves the outcome unknown: a server error means the server
// processed the commit and refused it (nothing written), but a lost
// connection or a shutdown may have come after the commit was durable.
func committedUnknown(err error, t *try) bool {
	if !t.committing {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "57P") || strings.HasPrefix(pe.Code, "08")
	}
	return !pgconn.SafeToRetry(err)
}

// Wait is in notify.go.

// do runs fn until it succeeds, fails for good, or RetryFor has passed.
// idempotent says fn may be run again even if an earlier attempt may have
// committed (its outcome is unknown): fn then finds out what happened, or
// doing it twice does no harm.
func (s *Store) do(ctx context.Context, idempotent bool, fn func(ctx context.Context, t *try) error) error {
	start := time.Now()
	backoff := 10 * time.Millisecond
	for n := 0; ; n++ {
		if s.isClosed() {
			return store.ErrClosedStore
		}
		t := &try{n: n}
		err := fn(ctx, t)
		if err == nil {
			return nil
		}
		unknown := committedUnknown(err, t)
		if !retryable(err) || unknown && !idempotent || ctx.Err() != nil || s.cfg.RetryFor < 0 ||
			time.Since(start)+backoff > s.cfg.RetryFor {
			return s.interpret(err, unknown)
		}
		timer := time.NewTimer(backoff + rand.N(backoff/2))
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-s.closing:
			timer.Stop()
			return store.ErrClosedStore
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// interpret translates err with interpretError, and reports a pool closed by
// Close as store.ErrClosedStore.
func (s *Store) interpret(err error, unknown bool) error {
	err = interpretError(err)
	var e *Error
	if errors.As(err, &e) {
		e.Unknown = unknown
		if s.isClosed() {
			return store.ErrClosedStore
		}
	}
	return err
}

// interpretError is the one place driver errors become the store's: no pgx,
// pgconn or puddle type reaches a caller. Errors of the store's and the stream
// rules' own kinds, and a context's, pass through.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		// Keep what the store wrapped it in ("run %q: …").
		if msg := strings.TrimSuffix(err.Error(), pgx.ErrNoRows.Error()); msg != "" {
			return fmt.Errorf("%s%w", msg, store.ErrNotFound)
		}
		return store.ErrNotFound
	}
	if errors.Is(err, puddle.ErrClosedPool) {
		return store.ErrClosedStore
	}
	// pgconn wraps a context's error in its own types: keep only the context's.
	if errors.Is(err, context.Canceled) {
		return context.Canceled
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		msg := pe.Message + " (SQLSTATE " + pe.Code + ")"
		if s := err.Error(); strings.HasSuffix(s, pe.Error()) {
			msg = strings.TrimSuffix(s, pe.Error()) + msg
		}
		if strings.HasPrefix(pe.Code, "22") {
			// Class 22, data exception: input PostgreSQL cannot hold (a NUL
			// byte in text, an invalid encoding, a number out of range).
			return fmt.Errorf("%w: %s", store.ErrInvalid, msg)
		}
		return &Error{Code: pe.Code, Retryable: retryable(err), msg: msg}
	}
	if fromDriver(err) {
		return &Error{Retryable: retryable(err), msg: err.Error()}
	}
	return err
}

// fromDriver reports whether err's chain holds a type of the driver (or of
// the network below it): such errors become an *Error.
func fromDriver(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) || retryable(err) {
		return true
	}
	for _, e := range chain(err) {
		t := reflect.TypeOf(e)
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if strings.HasPrefix(t.PkgPath(), "github.com/jackc/") {
			return true
		}
	}
	return false
}

// chain lists err and every error it wraps.
func chain(err error) []error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		if e == nil || len(out) > 64 {
			return
		}
		out = append(out, e)
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		}
	}
	walk(err)
	return out
}

// retryError is an error of this package that a new attempt cures: a row
// changed between two statements of an operation.
type retryError struct{ msg string }

func (e *retryError) Error() string { return e.msg }

// newToken returns a random token identifying one write, so that its retry
// can tell whether it committed. Never 0, the columns' default.
func newToken() int64 {
	for {
		if t := int64(rand.Uint64() >> 1); t != 0 {
			return t
		}
	}
}
