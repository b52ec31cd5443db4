package weir_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/internal/pgtest"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/pgstore"
	"github.com/weirhq/weir/store/sqlitestore"
	"github.com/weirhq/weir/stream"
)

// openStore opens a real SQLite store in a fresh file.
func openStore(t testing.TB) (*sqlitestore.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "weir.db")
	s, err := sqlitestore.Open(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

// fastConfig keeps tests quick: short polls, leases and backoffs.
func fastConfig() *weir.Config {
	return &weir.Config{
		PollInterval: 10 * time.Millisecond,
		LeaseTTL:     500 * time.Millisecond,
		Retry:        weir.RetryPolicy{InitialInterval: 5 * time.Millisecond, MaxInterval: 20 * time.Millisecond},
		Logger:       testLogger(),
	}
}

func newEngine(t testing.TB, s store.Full, cfg *weir.Config) *weir.Engine {
	t.Helper()
	if cfg == nil {
		cfg = fastConfig()
	}
	e, err := weir.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("close engine: %v", err)
		}
	})
	return e
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// readAll reads a whole stream in one view, without following.
func readAll(t testing.TB, e *weir.Engine, run, name string, view weir.View) []weir.StreamRecord {
	t.Helper()
	var out []weir.StreamRecord
	for r, err := range e.Read(testCtx(t), run, name, &weir.ReadOptions{View: view}) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func dataOf(recs []weir.StreamRecord) []string {
	var out []string
	for _, r := range recs {
		if r.Kind == stream.KindData {
			out = append(out, string(r.Data))
		}
	}
	return out
}

func kinds(recs []weir.StreamRecord, k stream.Kind) []weir.StreamRecord {
	var out []weir.StreamRecord
	for _, r := range recs {
		if r.Kind == k {
			out = append(out, r)
		}
	}
	return out
}

// checkDense asserts invariant 3 on a full live read: offsets 0, 1, 2 ….
func checkDense(t testing.TB, recs []weir.StreamRecord) {
	t.Helper()
	for i, r := range recs {
		if r.Offset != int64(i) {
			t.Fatalf("record %d has offset %d: offsets are not dense", i, r.Offset)
		}
	}
}

// checkNoDuplicates asserts invariant 1 on a committed read: each (writer,
// seq) once.
func checkNoDuplicates(t testing.TB, recs []weir.StreamRecord) {
	t.Helper()
	type key struct {
		w string
		s int64
	}
	seen := map[key]int64{}
	for _, r := range recs {
		if r.Kind != stream.KindData || r.Writer == "" {
			continue
		}
		k := key{r.Writer, r.Seq}
		if o, dup := seen[k]; dup {
			t.Fatalf("committed view has %s seq %d twice (offsets %d and %d)", r.Writer, r.Seq, o, r.Offset)
		}
		seen[k] = r.Offset
	}
}

// faultStore is the real store with failures injected around it: it is how
// the tests cut a connection after the database committed but before the
// caller heard, or before the request reached it.
type faultStore struct {
	store.Full
	mu sync.Mutex
	// appendFault, if set, is asked before and after every Append.
	appendFault func(call int, committed bool) error
	appends     int
	renewFault  atomic.Bool
}

var errInjected = errors.New("injected fault: connection reset")

func (f *faultStore) Append(ctx context.Context, p *store.AppendParams) (*store.AppendResult, error) {
	f.mu.Lock()
	f.appends++
	call, fault := f.appends, f.appendFault
	f.mu.Unlock()
	if fault != nil {
		if err := fault(call, false); err != nil {
			return nil, err
		}
	}
	res, err := f.Full.Append(ctx, p)
	if err == nil && fault != nil {
		if ferr := fault(call, true); ferr != nil {
			return nil, ferr
		}
	}
	return res, err
}

func (f *faultStore) RenewLease(ctx context.Context, p *store.RenewLeaseParams) (bool, error) {
	if f.renewFault.Load() {
		// The worker believes it renewed; the database never heard. This is a
		// zombie: a paused process or a partition, not a crash.
		return false, nil
	}
	return f.Full.RenewLease(ctx, p)
}

// eachStore runs f as a subtest on each real backend: a fresh SQLite file,
// and a fresh schema on the PostgreSQL server the tests use (an
// unreachable server fails the test; it never skips it).
func eachStore(t *testing.T, f func(t *testing.T, s store.Full)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		s, _ := openStore(t)
		f(t, s)
	})
	t.Run("postgres", func(t *testing.T) {
		f(t, openPG(t))
	})
}

// openPG opens the PostgreSQL store in a fresh schema.
func openPG(t testing.TB) store.Full {
	t.Helper()
	s, err := pgstore.Open(context.Background(), pgtest.URL(), &pgstore.Config{Schema: pgtest.NewSchema(t), MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitFor polls cond every few milliseconds until it holds, or fails the
// test with what after d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// testLogger discards the engine's logs, unless WEIR_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("WEIR_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// recv receives from ch, or fails the test with what after 10s.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing within 10s", what)
		panic("unreachable")
	}
}
