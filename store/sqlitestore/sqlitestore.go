package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/internal/hub"
	"github.com/weirhq/weir/store/internal/queue"
	"github.com/weirhq/weir/store/internal/sqlrow"
	"github.com/weirhq/weir/store/internal/tail"
	"github.com/weirhq/weir/world"
)

var _ store.Full = (*Store)(nil)

// ErrInUse is returned by Open when another Store, in this process or
// another, has the database open: the store keeps stream and writer state in
// memory and trusts it, so only one may write the file.
var ErrInUse = errors.New("sqlitestore: database is in use by another store")

// Config configures a Store. The zero value is ready to use; nil means the
// zero value.
type Config struct {
	// Synchronous is SQLite's synchronous setting: "FULL" fsyncs every commit,
	// so an acknowledged write survives a power loss; "NORMAL" does not sync
	// WAL commits (the last ones may be lost on power loss, the file stays
	// consistent); "OFF" hands syncing to the OS; "EXTRA" also syncs the
	// directory. Defaults to "FULL".
	Synchronous string
	// BusyTimeout is how long a connection waits on a lock held by another
	// connection, such as a reader finishing a checkpoint. Defaults to 5s.
	BusyTimeout time.Duration
	// MaxBatch is the most write operations committed in one transaction
	// (sharing one fsync). Defaults to 256.
	MaxBatch int
	// CacheWriters is how many writers' dedupe states (with their live
	// records' offsets and digests) stay in memory. A writer not in the cache
	// is rebuilt from its stream's log on its next write. Defaults to 4096.
	CacheWriters int
	// CacheStreams is how many stream heads (and run fences) stay in memory.
	// Defaults to 16384.
	CacheStreams int
	// ReadConns is the number of read connections. Defaults to 4.
	ReadConns int
	// ReadWindow is the most bytes of a stored batch (one append, up to 16
	// MiB) a read fetches at once; a read fetches windows of about its page
	// (ReadParams.MaxBytes), as its page needs them, from where the last
	// page left off. The driver copies what a row holds into a buffer of
	// its own, so this bounds what a read allocates beyond its page.
	// Defaults to 1 MiB less 1 KiB.
	ReadWindow int
	// Now is the store's clock, for timestamps and leases. Defaults to
	// time.Now.
	Now func() time.Time
}

// WithDefaults returns a copy of c with every unset field at its default.
func (c *Config) WithDefaults() *Config {
	out := Config{}
	if c != nil {
		out = *c
	}
	if out.Synchronous == "" {
		out.Synchronous = "FULL"
	}
	if out.BusyTimeout == 0 {
		out.BusyTimeout = 5 * time.Second
	}
	if out.MaxBatch == 0 {
		out.MaxBatch = 256
	}
	if out.CacheWriters == 0 {
		out.CacheWriters = 4096
	}
	if out.CacheStreams == 0 {
		out.CacheStreams = 16384
	}
	if out.ReadConns == 0 {
		out.ReadConns = 4
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
	switch strings.ToUpper(c.Synchronous) {
	case "OFF", "NORMAL", "FULL", "EXTRA":
	default:
		return fmt.Errorf("%w: synchronous %q is not OFF, NORMAL, FULL or EXTRA", store.ErrInvalid, c.Synchronous)
	}
	if c.BusyTimeout < 0 || c.MaxBatch < 0 || c.CacheWriters < 0 || c.CacheStreams < 0 || c.ReadConns < 0 || c.ReadWindow < 0 {
		return fmt.Errorf("%w: negative config value", store.ErrInvalid)
	}
	return nil
}

// Store is the SQLite store. It is safe for concurrent use.
type Store struct {
	path string
	lock *os.File // held while open: see lockFile
	cfg  *Config
	wdb  *sql.DB   // holds the one write connection
	conn *sql.Conn // the write connection, used only by the committer
	rdb  *sql.DB   // read connections
	w    *wstmts   // statements prepared on conn
	r    *rstmts   // statements prepared on rdb

	ops       *queue.Queue[*op] // to the committer
	mu        sync.RWMutex
	closed    bool
	closing   chan struct{} // closed by Close: wakes waiters
	committed chan struct{} // closed when the committer has exited

	notify hub.Hub[struct{}] // wakes Waits after commits
	runs   hub.Hub[struct{}] // wakes WatchRun, by store.RunKey
	// created are the run streams made while their runs were watched
	// (CreatedStream).
	created tail.Created
	tail    *tail.Cache  // newest records of followed streams (package tail)
	hints   sqlrow.Hints // where read pages that ended inside a batch left off
	c       *committer   // owned by the committer goroutine
	ids     world.ULIDs  // the World's event ids

	// counts are the committer's transactions and the writes they applied
	// (Counts).
	counts struct{ commits, ops atomic.Int64 }
}

// Counts returns the committer's transactions and writes since the store
// opened (store.Counter): each group commit is one commit; SQLite has no
// statements to send or round trips to wait for.
func (s *Store) Counts() store.Counts {
	c, o := s.counts.commits.Load(), s.counts.ops.Load()
	return store.Counts{Commits: c, Groups: c, GroupOps: o}
}

// Open opens or creates the database at path and migrates it to the current
// schema.
func Open(ctx context.Context, path string, cfg *Config) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, fmt.Errorf("%w: empty path", store.ErrInvalid)
	}
	s := &Store{
		path:      path,
		cfg:       cfg,
		ops:       queue.New[*op](cfg.MaxBatch),
		closing:   make(chan struct{}),
		committed: make(chan struct{}),
		tail:      tail.New(1024),
	}
	s.ids.Time = cfg.Now
	if err := s.open(ctx, path); err != nil {
		s.closeDBs()
		return nil, fmt.Errorf("open %s: %w", path, translate(err))
	}
	s.c = newCommitter(s)
	go s.c.loop()
	return s, nil
}

func (s *Store) open(ctx context.Context, path string) error {
	var err error
	if s.lock, err = lockFile(path); err != nil {
		return err
	}
	// A file: URI so that any byte of the path survives (the driver splits
	// plain names at the first '?').
	name := "file:" + (&url.URL{Path: path}).EscapedPath()
	busy := fmt.Sprintf("_pragma=busy_timeout(%d)", s.cfg.BusyTimeout.Milliseconds())
	if s.wdb, err = sql.Open("sqlite", name+"?"+busy); err != nil {
		return err
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	if s.conn, err = s.wdb.Conn(ctx); err != nil {
		return err
	}
	for _, p := range []string{
		`PRAGMA journal_mode = WAL`,
		`PRAGMA synchronous = ` + strings.ToUpper(s.cfg.Synchronous),
		`PRAGMA foreign_keys = ON`,
	} {
		if _, err := s.conn.ExecContext(ctx, p); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	var mode string
	if err := s.conn.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal mode is %s, not wal", mode)
	}
	if err := migrate(ctx, s.conn); err != nil {
		return err
	}
	if s.w, err = prepareWrite(ctx, s.conn); err != nil {
		return err
	}

	// query_only: a read connection can never write behind the committer's
	// back, which the caches rely on.
	if s.rdb, err = sql.Open("sqlite", name+"?"+busy+"&_pragma=query_only(1)"); err != nil {
		return err
	}
	s.rdb.SetMaxOpenConns(s.cfg.ReadConns)
	s.rdb.SetMaxIdleConns(s.cfg.ReadConns)
	s.rdb.SetConnMaxLifetime(0)
	if s.r, err = prepareRead(ctx, s.rdb); err != nil {
		return err
	}
	return nil
}

// Path returns the path the store was opened with.
func (s *Store) Path() string { return s.path }

// Close waits for queued writes to finish and closes the database. Operations
// after Close return store.ErrClosedStore; closing twice is a no-op.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.ops.Close()
	s.mu.Unlock()
	<-s.committed
	if err := s.closeDBs(); err != nil {
		return fmt.Errorf("close: %w", translate(err))
	}
	return nil
}

func (s *Store) closeDBs() error {
	var errs []error
	if s.c != nil {
		for _, st := range s.c.stmts {
			errs = append(errs, st.Close())
		}
	}
	if s.w != nil {
		errs = append(errs, s.w.close())
	}
	if s.r != nil {
		errs = append(errs, s.r.close())
	}
	if s.conn != nil {
		errs = append(errs, s.conn.Close())
	}
	if s.wdb != nil {
		errs = append(errs, s.wdb.Close())
	}
	if s.rdb != nil {
		errs = append(errs, s.rdb.Close())
	}
	if s.lock != nil {
		errs = append(errs, s.lock.Close()) // releases the lock
	}
	return errors.Join(errs...)
}

func (s *Store) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}

// readErr translates an error of the read path, where a Close racing the
// read surfaces as the driver's "database is closed".
func (s *Store) readErr(err error) error {
	if err != nil && s.isClosed() && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return store.ErrClosedStore
	}
	return translate(err)
}

// translate is the one place driver errors become the store's: no
// *sqlite.Error reaches a caller. Errors that are already the store's or the
// stream rules' pass through.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	if errors.Is(err, sql.ErrConnDone) {
		return store.ErrClosedStore
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		return &Error{Code: se.Code(), msg: se.Error()}
	}
	return err
}

// Error is a failure of the SQLite engine itself (I/O, disk full, a corrupt
// file, a lock held by another process), not of the caller's request.
type Error struct {
	// Code is SQLite's extended result code.
	Code int
	msg  string
}

func (e *Error) Error() string { return "sqlite: " + e.msg }

// Temporary reports whether retrying may succeed: the error is a lock that
// another connection held for longer than Config.BusyTimeout. (Every backend's
// errors answer Temporary; package api's Retryable asks it.)
func (e *Error) Temporary() bool {
	c := e.Code & 0xff
	return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
}
