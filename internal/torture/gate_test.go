package torture

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/pgtest"
	"github.com/weirhq/weir/store"
)

// capability is one optional capability of a store: whether s has it, and
// its methods, each called through s (which has it) with arguments that
// change nothing.
type capability struct {
	has   func(s store.Store) bool
	calls map[string]func(ctx context.Context, s store.Store)
}

// optional is every optional capability the store package looks for by
// type (TestCapabilitiesListed holds it to the store package).
var optional = map[string]capability{
	"Counter": {
		has: func(s store.Store) bool { _, ok := s.(store.Counter); return ok },
		calls: map[string]func(context.Context, store.Store){
			"Counts": func(_ context.Context, s store.Store) { s.(store.Counter).Counts() },
		},
	},
	"LeaseRenewer": {
		has: func(s store.Store) bool { _, ok := s.(store.LeaseRenewer); return ok },
		calls: map[string]func(context.Context, store.Store){
			"RenewLeases": func(ctx context.Context, s store.Store) { _, _ = s.(store.LeaseRenewer).RenewLeases(ctx, nil) },
		},
	},
	"StepAppender": {
		has: func(s store.Store) bool { _, ok := s.(store.StepAppender); return ok },
		calls: map[string]func(context.Context, store.Store){
			// Refused by its Check: it writes nothing.
			"OpenAppend": func(ctx context.Context, s store.Store) {
				_, _ = s.(store.StepAppender).OpenAppend(ctx, &store.OpenAppendParams{})
			},
		},
	},
	"LogSizer": {
		has: func(s store.Store) bool { _, ok := s.(store.LogSizer); return ok },
		calls: map[string]func(context.Context, store.Store){
			"LogBytes": func(ctx context.Context, s store.Store) { _, _ = s.(store.LogSizer).LogBytes(ctx, "no-such-run") },
		},
	},
	"RunWatcher": {
		has: func(s store.Store) bool { _, ok := s.(store.RunWatcher); return ok },
		calls: map[string]func(context.Context, store.Store){
			"WatchRun": func(_ context.Context, s store.Store) {
				_, stop := s.(store.RunWatcher).WatchRun("no-such-run")
				stop()
			},
			"CreatedStream": func(_ context.Context, s store.Store) {
				_, _ = s.(store.RunWatcher).CreatedStream("no-such-run/stream")
			},
		},
	},
	"LimiterWatcher": {
		has: func(s store.Store) bool { _, ok := s.(store.LimiterWatcher); return ok },
		calls: map[string]func(context.Context, store.Store){
			"WatchLimiter": func(_ context.Context, s store.Store) {
				_, stop := s.(store.LimiterWatcher).WatchLimiter("l")
				stop()
			},
			"WatchLimiterLine": func(_ context.Context, s store.Store) {
				_, stop := s.(store.LimiterWatcher).WatchLimiterLine("l")
				stop()
			},
			"WatchSlot": func(_ context.Context, s store.Store) {
				_, stop := s.(store.LimiterWatcher).WatchSlot("l", "h")
				stop()
			},
		},
	},
	"WriterStatuses": {
		has: func(s store.Store) bool { _, ok := s.(store.WriterStatuses); return ok },
		calls: map[string]func(context.Context, store.Store){
			"WriterStatus": func(ctx context.Context, s store.Store) {
				_, _, _, _, _ = s.(store.WriterStatuses).WriterStatus(ctx, 1, "w")
			},
		},
	},
	"WorldSizer": {
		has: func(s store.Store) bool { _, ok := s.(store.WorldSizer); return ok },
		calls: map[string]func(context.Context, store.Store){
			"WorldItemSize": func(ctx context.Context, s store.Store) {
				_, _ = s.(store.WorldSizer).WorldItemSize(ctx, store.WorldItemRef{Kind: "run", ID: "no-such-run"})
			},
		},
	},
}

// The store a torture engine is given has each optional capability its
// real store has (an engine discovers them by type: through a wrapper
// that hides them it runs its fallbacks, not the production paths), and
// a frozen gate holds every call of them until it thaws.
func TestEngineGateCapabilities(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			dsn := "sqlite:" + filepath.Join(t.TempDir(), "gate.db")
			if kind == "postgres" {
				if !pgtest.Available() {
					t.Skipf("%s is set", pgtest.SQLiteOnlyEnv)
				}
				dsn = withSchema(pgtest.URL(), pgtest.NewSchema(t))
			}
			ctx := context.Background()
			raw, err := OpenStore(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			g := &gatedStore{Full: raw}
			es, err := g.forEngine()
			if err != nil {
				t.Fatal(err)
			}
			// The engine holds its store through store.Capable.
			if s := store.Capable(es); s != es {
				t.Fatalf("store.Capable wraps the engine's store again: %T", s)
			}
			for name, c := range optional {
				if c.has(raw) != c.has(es) {
					t.Errorf("%s: the %s store has it %v, its torture engine's store %v", name, kind, c.has(raw), c.has(es))
				}
			}
			if t.Failed() {
				return
			}
			for name, c := range optional {
				if !c.has(es) {
					continue
				}
				for method, call := range c.calls {
					g.freeze()
					done := make(chan struct{})
					go func() {
						defer close(done)
						call(ctx, es)
					}()
					waitBlocked(t, g, 1, done, name+"."+method)
					g.thaw()
					select {
					case <-done:
					case <-time.After(10 * time.Second):
						t.Fatalf("%s.%s did not return once thawed", name, method)
					}
				}
			}
		})
	}
}

// waitBlocked waits until n calls wait in g's pass, for 10 s at most; the
// call what fails at once if it returns (done) before: it passed the
// frozen gate.
func waitBlocked(t *testing.T, g *gatedStore, n int, done <-chan struct{}, what string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		k, more := g.blocked()
		if k >= n {
			return
		}
		select {
		case <-more:
		case <-done:
			t.Fatalf("%s returned while frozen", what)
		case <-deadline:
			t.Fatalf("%s: %d calls blocked at the frozen gate after 10 s, want %d", what, k, n)
		}
	}
}

// A store without the capabilities the gate forwards is refused, not
// given to an engine as one that has them.
func TestEngineGateRefusesLess(t *testing.T) {
	raw, err := OpenStore(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "gate.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	bare := struct{ store.Full }{raw} // store.Full alone: no optional capability
	if es, err := (&gatedStore{Full: bare}).forEngine(); err == nil {
		t.Fatalf("forEngine of a store without optional capabilities: %T, no error", es)
	}
}

// optional names every capability the store package looks for by type (each
// type it instantiates its as with), so that one added there fails this
// test until the gate forwards it and TestEngineGateCapabilities checks it.
func TestCapabilitiesListed(t *testing.T) {
	dir := filepath.Join("..", "..", "store")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ix, ok := n.(*ast.IndexExpr)
			if !ok {
				return true
			}
			if fn, ok := ix.X.(*ast.Ident); ok && fn.Name == "as" {
				if typ, ok := ix.Index.(*ast.Ident); ok {
					found[typ.Name] = true
				}
			}
			return true
		})
	}
	if len(found) == 0 {
		t.Fatal("no as[T] in the store package: how does it look for capabilities now?")
	}
	var missing, extra []string
	for n := range found {
		if _, ok := optional[n]; !ok {
			missing = append(missing, n)
		}
	}
	for n := range optional {
		if !found[n] {
			extra = append(extra, n)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("the store package looks for %v not listed here (add them to capabilities in worker.go, to engineGate and to optional); "+
			"listed here but no longer looked for: %v", missing, extra)
	}
}
