package weir_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/internal/pgtest"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/pgstore"
	"github.com/weirhq/weir/stream"
)

// The tests of issue 19's five cases and the field's sixth, each as it was
// found, on both stores.

// Case 1: two payloads acknowledged while a step runs, then Close and
// Receive: the workflow takes both, then ErrHookDisposed; a second engine
// that takes the run over (the first one's worker lost) replays the same.
func TestHookClosedWithPayloadsAcknowledged(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		delivered := make(chan struct{})
		after := make(chan int64, 4)
		var lost atomic.Bool           // the first engine is gone
		took := make(chan []string, 4) // what each execution took
		register := func(e *weir.Engine) *weir.Workflow[string, []string] {
			return weir.Register(e, "close-pending", func(ctx weir.Context, token string) ([]string, error) {
				h, err := weir.NewHook[string](ctx, token)
				if err != nil {
					return nil, err
				}
				if _, err := weir.Step(ctx, "busy", func(sc weir.StepContext) (int, error) {
					select {
					case <-delivered:
					case <-sc.Done():
						return 0, context.Cause(sc)
					}
					return 0, nil
				}); err != nil {
					return nil, err
				}
				h.Close(ctx)
				var got []string
				for {
					v, err := h.Receive(ctx)
					if errors.Is(err, weir.ErrHookDisposed) {
						break
					}
					if err != nil {
						return nil, err
					}
					got = append(got, v)
				}
				took <- got
				// A workflow write is recognised on replay only if it
				// writes the same bytes.
				if _, err := ctx.Stream("took").WriteString(strings.Join(got, ",")); err != nil {
					return nil, err
				}
				// The worker is lost here, on the first engine.
				if _, err := weir.Step(ctx, "after", func(sc weir.StepContext) (int, error) {
					after <- sc.Attempt()
					if !lost.Load() {
						<-sc.Done()
						return 0, context.Cause(sc)
					}
					return 0, nil
				}); err != nil {
					return nil, err
				}
				return got, nil
			})
		}
		a := newEngine(t, s, nil)
		wf := register(a)
		if err := a.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), "pending-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		deliverWhenReady(t, a, "pending-1", `"one"`, nil)
		deliverWhenReady(t, a, "pending-1", `"two"`, nil)
		close(delivered)
		if live := recv(t, took, "the first execution's takes"); !slices.Equal(live, []string{"one", "two"}) {
			t.Fatalf("the execution took %q, want both payloads acknowledged before Close", live)
		}
		recv(t, after, "the step after the takes")
		lost.Store(true)
		if err := a.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		b := newEngine(t, s, nil)
		wf = register(b)
		if err := b.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		got, err := wf.Handle(h.ID).Result(testCtx(t))
		if err != nil || !slices.Equal(got, []string{"one", "two"}) {
			t.Fatalf("result %q %v, want both payloads acknowledged before Close", got, err)
		}
		if err := b.Replay(testCtx(t), h.ID); err != nil {
			t.Fatalf("replay: %v", err)
		}
	})
}

// Case 2: two takers outstanding at once each take their own payload:
// All(h.Next(), h.Next()) gets the first two, and a Future made before a
// Receive is taken after it, so it gets the payload after Receive's.
func TestHookTakersOutstandingAtOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		wf := weir.Register(e, "takers", func(ctx weir.Context, token string) ([]string, error) {
			h, err := weir.NewHook[string](ctx, token)
			if err != nil {
				return nil, err
			}
			both, err := weir.All(ctx, h.Next(), h.Next())
			if err != nil {
				return nil, err
			}
			third, err := h.Receive(ctx)
			if err != nil {
				return nil, err
			}
			f := h.Next()
			fourth, err := h.Receive(ctx)
			if err != nil {
				return nil, err
			}
			fifth, err := f.Get(ctx)
			if err != nil {
				return nil, err
			}
			again, err := f.Get(ctx) // a Future got twice keeps what it took
			if err != nil || again != fifth {
				return nil, errors.New("a second Get took again")
			}
			return append(both, third, fourth, fifth), nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), "takers-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{`"one"`, `"two"`, `"three"`, `"four"`, `"five"`} {
			deliverWhenReady(t, e, "takers-1", p, nil)
		}
		got, err := h.Result(testCtx(t))
		if want := []string{"one", "two", "three", "four", "five"}; err != nil || !slices.Equal(got, want) {
			t.Fatalf("result %q %v, want %q", got, err, want)
		}
		if err := e.Replay(testCtx(t), h.ID); err != nil {
			t.Fatalf("replay: %v", err)
		}
	})
}

// Case 3: a step whose last allowed attempt times out after writing fails
// with its *TimeoutError, live and after a replay on another engine; its
// output is aborted; its zombie's late write fails at once; and the run,
// with its sibling's running attempt, goes on (no release, no rerun).
func TestLastAttemptTimesOutAfterWriting(t *testing.T) {
	for _, kind := range []string{"start-to-close", "heartbeat"} {
		t.Run(kind, func(t *testing.T) {
			eachStore(t, func(t *testing.T, s store.Full) {
				var siblingAttempts atomic.Int32
				late := make(chan error, 4)
				var lost atomic.Bool
				wrote := make(chan struct{}, 4)
				register := func(e *weir.Engine) *weir.Workflow[string, string] {
					return weir.Register(e, "last-timeout", func(ctx weir.Context, _ string) (string, error) {
						sibling := weir.StepAsync(ctx, "sibling", func(sc weir.StepContext) (int, error) {
							siblingAttempts.Add(1)
							w := sc.Stream("out")
							for i := range 20 {
								if _, err := fmt.Fprintf(w, "sib %d", i); err != nil {
									return 0, err
								}
								time.Sleep(10 * time.Millisecond)
							}
							return 20, nil
						})
						// On a loaded machine the timeout may strike during
						// the first flush: that is the late write failing.
						opt := weir.WithTimeout(60 * time.Millisecond)
						if kind == "heartbeat" {
							opt = weir.WithHeartbeatTimeout(60 * time.Millisecond)
						}
						_, err := weir.Step(ctx, "slow", func(sc weir.StepContext) (int, error) {
							w := sc.Stream("out")
							if _, err := w.WriteString(fmt.Sprintf("slow attempt %d", sc.Attempt())); err != nil {
								late <- err
								return 0, err
							}
							if err := w.Flush(); err != nil {
								late <- err
								return 0, err
							}
							wrote <- struct{}{}
							time.Sleep(300 * time.Millisecond) // deaf to its context
							_, err := w.WriteString("late")
							late <- err
							return 1, nil
						}, opt, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 2}))
						why := "other"
						var se *weir.StepError
						if errors.Is(err, weir.ErrStepTimeout) && errors.As(err, &se) && se.Attempt == 2 {
							why = "timeout"
						}
						// Recognised on replay only if replay decides the same.
						if _, err := ctx.Stream("why").WriteString(why); err != nil {
							return "", err
						}
						if _, err := sibling.Get(ctx); err != nil {
							return "", err
						}
						if _, err := weir.Step(ctx, "hold", func(sc weir.StepContext) (int, error) {
							if !lost.Load() {
								<-sc.Done()
								return 0, context.Cause(sc)
							}
							return 0, nil
						}); err != nil {
							return "", err
						}
						return why, nil
					})
				}
				a := newEngine(t, s, nil)
				wf := register(a)
				if err := a.Work(testCtx(t)); err != nil {
					t.Fatal(err)
				}
				h, err := wf.Start(testCtx(t), "", nil)
				if err != nil {
					t.Fatal(err)
				}
				for range 2 {
					if err := recv(t, late, "a timed-out attempt's late write"); err == nil || !errors.Is(err, weir.ErrStepTimeout) && !errors.Is(err, weir.ErrFenced) {
						t.Fatalf("a timed-out attempt's late write: %v, want its timeout or ErrFenced", err)
					}
				}
				waitFor(t, 10*time.Second, "the why stream", func() bool {
					return len(dataOf(readAll(t, a, h.ID, "why", weir.LiveView))) == 1
				})
				if got := dataOf(readAll(t, a, h.ID, "why", weir.LiveView)); got[0] != "timeout" {
					t.Fatalf("the live execution saw %q, want the step's timeout", got)
				}
				lost.Store(true)
				if err := a.Close(testCtx(t)); err != nil {
					t.Fatal(err)
				}
				b := newEngine(t, s, nil)
				wf = register(b)
				if err := b.Work(testCtx(t)); err != nil {
					t.Fatal(err)
				}
				why, err := wf.Handle(h.ID).Result(testCtx(t))
				if err != nil || why != "timeout" {
					t.Fatalf("result %q %v, want timeout", why, err)
				}
				if n := siblingAttempts.Load(); n != 1 {
					t.Fatalf("the sibling ran %d attempts, want 1: its running attempt was thrown away", n)
				}
				var final []store.Event
				for _, ev := range hookEvents(t, s, h.ID, store.EventStepFailed) {
					if ev.Final {
						final = append(final, ev)
					}
					if strings.Contains(ev.Error, "worker lost") {
						t.Fatalf("a step failed as worker lost: %+v", ev)
					}
				}
				if len(final) != 1 || final[0].Name != "slow" || !strings.Contains(final[0].Error, "timed out") {
					t.Fatalf("final failures %+v, want slow's timeout", final)
				}
				committed := dataOf(readAll(t, b, h.ID, "out", weir.CommittedView))
				if len(committed) != 20 || slices.ContainsFunc(committed, func(c string) bool { return strings.HasPrefix(c, "slow") }) {
					t.Fatalf("committed view %q: want the sibling's 20 chunks only", committed)
				}
				live := readAll(t, b, h.ID, "out", weir.LiveView)
				if slices.Contains(dataOf(live), "late") {
					t.Fatal("a late write of a timed-out attempt is in the live view")
				}
				if err := b.Replay(testCtx(t), h.ID); err != nil {
					t.Fatalf("replay: %v", err)
				}
			})
		})
	}
}

// deafStep is a step function that writes a chunk, then ignores its
// context until release is closed, then writes again and reports that
// write's error on late.
func deafStep(wrote chan<- struct{}, release <-chan struct{}, late chan<- error) func(weir.StepContext) (int, error) {
	return func(sc weir.StepContext) (int, error) {
		w := sc.Stream("out")
		if _, err := w.WriteString("deaf"); err != nil {
			return 0, err
		}
		if err := w.Flush(); err != nil {
			return 0, err
		}
		wrote <- struct{}{}
		<-release
		_, err := w.WriteString("late")
		late <- err
		return 1, nil
	}
}

// Case 4: a run deadline and a cancel end the run while a step ignores its
// context, inline or on its own goroutine: the attempt is abandoned, its
// output aborted, its late write refused, and it is counted as lingering
// until it returns.
func TestDeadlineAndCancelOverADeafStep(t *testing.T) {
	for _, how := range []string{"deadline", "cancel"} {
		for _, inline := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/inline=%v", how, inline), func(t *testing.T) {
				eachStore(t, func(t *testing.T, s store.Full) {
					wrote, release, late := make(chan struct{}, 1), make(chan struct{}), make(chan error, 1)
					defer func() {
						select {
						case <-release:
						default:
							close(release)
						}
					}()
					e := newEngine(t, s, nil)
					var opts []weir.WorkflowOption
					if how == "deadline" {
						opts = append(opts, weir.WithRunTimeout(400*time.Millisecond))
					}
					wf := weir.Register(e, "deaf", func(ctx weir.Context, _ int) (int, error) {
						if inline {
							return weir.Step(ctx, "deaf", deafStep(wrote, release, late))
						}
						return weir.StepAsync(ctx, "deaf", deafStep(wrote, release, late)).Get(ctx)
					}, opts...)
					if err := e.Work(testCtx(t)); err != nil {
						t.Fatal(err)
					}
					h, err := wf.Start(testCtx(t), 0, nil)
					if err != nil {
						t.Fatal(err)
					}
					recv(t, wrote, "the deaf step's first write")
					if how == "cancel" {
						if err := e.Cancel(testCtx(t), h.ID); err != nil {
							t.Fatal(err)
						}
					}
					// The run ends while the step's function has not returned.
					_, err = h.Result(testCtx(t))
					want := weir.ErrCancelled
					if how == "deadline" {
						want = weir.ErrRunTimeout
					}
					if !errors.Is(err, want) {
						t.Fatalf("result error %v, want %v", err, want)
					}
					if n := e.Stats().LingeringAttempts; n != 1 {
						t.Fatalf("lingering attempts %d, want 1", n)
					}
					if got := dataOf(readAll(t, e, h.ID, "out", weir.CommittedView)); len(got) != 0 {
						t.Fatalf("committed view %q, want nothing of the abandoned attempt", got)
					}
					live := readAll(t, e, h.ID, "out", weir.LiveView)
					if len(kinds(live, stream.KindAbort)) != 1 {
						t.Fatalf("live view %v: want the attempt's chunk aborted", live)
					}
					close(release)
					if err := recv(t, late, "the abandoned attempt's late write"); err == nil {
						t.Fatal("the abandoned attempt's late write was accepted")
					}
					waitFor(t, 5*time.Second, "the abandoned attempt to be counted as returned", func() bool {
						return e.Stats().LingeringAttempts == 0
					})
					if e.Stats().AbandonedAttempts != 1 {
						t.Fatalf("abandoned attempts %d, want 1", e.Stats().AbandonedAttempts)
					}
				})
			})
		}
	}
}

// Case 5: the worker of a child run dies right after the child's end
// commits: the parent's log has the end all the same (it is written in
// the same transaction), so the parked parent is claimable at once, and
// the next worker finishes it without waiting for its look at its
// children (a minute).
func TestChildEndReachesItsParentWhenItsWorkerDies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			env, open := processStore(t, kind)
			w := startWorkerEnv(t, "parentchild:21", append(env, envWorkerDieAfterChild+"=1")...)
			w.waitFor(t, "the child's end", func(l string) bool { return l == "child ended; dying" })
			_ = w.cmd.Wait()
			s := open()
			evs, err := s.ListEvents(testCtx(t), "run-under-test", 0)
			if err != nil {
				t.Fatal(err)
			}
			var childOp int64
			ended := false
			for _, ev := range evs {
				switch {
				case ev.Type == store.EventChildStarted:
					childOp = ev.Op
				case ev.Type == store.EventHookReceived && ev.Op == childOp && childOp != 0:
					ended = true
				}
			}
			if !ended {
				t.Fatalf("the child's worker died after its end, and the parent's log has no end of it: %+v", evs)
			}
			r, err := s.GetRun(testCtx(t), "run-under-test")
			if err != nil {
				t.Fatal(err)
			}
			if r.LeaseOwner == "" && r.WakeAt.After(time.Now().Add(5*time.Second)) {
				t.Fatalf("the parked parent sleeps until %v with its child's end in its log", r.WakeAt)
			}
			if kind == "sqlite" {
				s.Close() // one process at a time on a SQLite file
			}
			w2 := startWorkerEnv(t, "", env...)
			w2.waitFor(t, "the parent to finish", func(l string) bool { return l == "done" })
			_ = w2.cmd.Wait()
			if kind == "sqlite" {
				s = open()
			}
			if r, err := s.GetRun(testCtx(t), "run-under-test"); err != nil || r.Status != store.RunCompleted || string(r.Output) != "42" {
				t.Fatalf("parent %+v %v, want completed with 42", r, err)
			}
		})
	}
}

// errAway is a store error that passes: a database restarting.
type errAway struct{}

func (errAway) Error() string   { return "the database is restarting (injected)" }
func (errAway) Temporary() bool { return true }

// awayStore fails every read a client makes while away is set, as a
// client's store does while its database restarts.
type awayStore struct {
	store.Full
	away  atomic.Bool
	fails atomic.Int64
}

func (a *awayStore) fail() error {
	if a.away.Load() {
		a.fails.Add(1)
		return errAway{}
	}
	return nil
}

func (a *awayStore) GetRun(ctx context.Context, id string) (*store.Run, error) {
	if err := a.fail(); err != nil {
		return nil, err
	}
	return a.Full.GetRun(ctx, id)
}

func (a *awayStore) ListEvents(ctx context.Context, id string, after int64) ([]store.Event, error) {
	if err := a.fail(); err != nil {
		return nil, err
	}
	return a.Full.ListEvents(ctx, id, after)
}

func (a *awayStore) OpenStream(ctx context.Context, p *store.OpenStreamParams) (*store.StreamInfo, error) {
	if err := a.fail(); err != nil {
		return nil, err
	}
	return a.Full.OpenStream(ctx, p)
}

func (a *awayStore) Read(ctx context.Context, p *store.ReadParams) (*store.ReadResult, error) {
	if err := a.fail(); err != nil {
		return nil, err
	}
	return a.Full.Read(ctx, p)
}

func (a *awayStore) Wait(ctx context.Context, id int64, next int64) error {
	if err := a.fail(); err != nil {
		return err
	}
	return a.Full.Wait(ctx, id, next)
}

// Case 6: Handle.Result, Engine.Wait and a following reader ride out a
// store that is away (its database restarting) until their own contexts
// end: they answer once it is back, and the reader yields each chunk once.
func TestWaitsRideOutAStoreThatIsAway(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		release := make(chan struct{})
		started := make(chan struct{}, 1)
		register := func(e *weir.Engine) *weir.Workflow[int, int] {
			return weir.Register(e, "away", func(ctx weir.Context, n int) (int, error) {
				return weir.Step(ctx, "emit", func(sc weir.StepContext) (int, error) {
					w := sc.Stream("out")
					if _, err := w.WriteString("c0"); err != nil {
						return 0, err
					}
					if err := w.Flush(); err != nil {
						return 0, err
					}
					started <- struct{}{}
					<-release
					for i := 1; i < n; i++ {
						if _, err := fmt.Fprintf(w, "c%d", i); err != nil {
							return 0, err
						}
					}
					return n, nil
				})
			})
		}
		worker := newEngine(t, s, nil)
		register(worker)
		if err := worker.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		away := &awayStore{Full: s}
		client := newEngine(t, away, &weir.Config{NoWorker: true, Logger: testLogger()})
		h, err := register(client).Start(testCtx(t), 20, nil)
		if err != nil {
			t.Fatal(err)
		}
		recv(t, started, "the step's start")
		type result struct {
			n   int
			err error
		}
		results, waits := make(chan result, 1), make(chan result, 1)
		read := make(chan []string, 1)
		go func() {
			n, err := h.Result(testCtx(t))
			results <- result{n, err}
		}()
		go func() {
			r, err := client.Wait(testCtx(t), h.ID)
			n := 0
			if r != nil {
				n = len(r.Output)
			}
			waits <- result{n, err}
		}()
		go func() {
			var got []string
			for r, err := range client.Read(testCtx(t), h.ID, "out", &weir.ReadOptions{View: weir.CommittedView, Follow: true}) {
				if err != nil {
					got = append(got, "error: "+err.Error())
					break
				}
				if r.Kind == stream.KindData {
					got = append(got, string(r.Data))
				}
			}
			read <- got
		}()
		away.away.Store(true)
		waitFor(t, 10*time.Second, "the client's reads to fail", func() bool { return away.fails.Load() >= 3 })
		close(release)
		if _, err := worker.Wait(testCtx(t), h.ID); err != nil {
			t.Fatal(err)
		}
		// Nothing gave up while the store was away.
		select {
		case r := <-results:
			t.Fatalf("Result returned while the store was away: %d, %v", r.n, r.err)
		case r := <-waits:
			t.Fatalf("Wait returned while the store was away: %v", r.err)
		case got := <-read:
			t.Fatalf("the following reader ended while the store was away: %q", got)
		default:
		}
		away.away.Store(false)
		if r := recv(t, results, "Result"); r.err != nil || r.n != 20 {
			t.Fatalf("Result = %d, %v; want 20", r.n, r.err)
		}
		if r := recv(t, waits, "Wait"); r.err != nil || r.n == 0 {
			t.Fatalf("Wait: %v (output %d bytes)", r.err, r.n)
		}
		got := recv(t, read, "the following reader")
		want := make([]string, 20)
		for i := range want {
			want[i] = fmt.Sprintf("c%d", i)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("the following reader got %q, want each chunk once", got)
		}
	})
}

// Case 6 as it was found: PostgreSQL restarts while a run streams, and
// Handle.Result, Engine.Wait and a following reader of its committed view
// ride it out. It restarts the server: the caller opts in
// (pgtest.RestartEnv; CI does).
func TestWaitsRideOutAPostgresRestart(t *testing.T) {
	if pgtest.RestartCommand() == nil {
		t.Skipf("restarts PostgreSQL: set %s=1 (pg_ctlcluster, as root) or to a command that does", pgtest.RestartEnv)
	}
	schema := pgtest.NewSchema(t)
	open := func(retryFor time.Duration) store.Full {
		s, err := pgstore.Open(context.Background(), pgtest.URL(), &pgstore.Config{Schema: schema, MaxConns: 4, RetryFor: retryFor})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	cfg := fastConfig()
	cfg.LeaseTTL = 2 * time.Second
	worker := newEngine(t, open(0), cfg)
	// The waits are a client's, another process's as it were: they poll,
	// and its store retries a failed call for 100ms, not 10s, so that the
	// restart here outlasts that as the one found (11s) outlasted 10s.
	e := newEngine(t, open(100*time.Millisecond), &weir.Config{NoWorker: true, Logger: testLogger()})
	const n = 60
	register := func(e *weir.Engine) *weir.Workflow[int, int] {
		return weir.Register(e, "restart", func(ctx weir.Context, _ int) (int, error) {
			return weir.Step(ctx, "emit", func(sc weir.StepContext) (int, error) {
				w := sc.Stream("out")
				for i := range n {
					if _, err := fmt.Fprintf(w, "c%02d", i); err != nil {
						return 0, err
					}
					if err := w.Flush(); err != nil {
						return 0, err
					}
					time.Sleep(50 * time.Millisecond)
				}
				return n, nil
			}, weir.WithRetry(weir.RetryPolicy{MaxAttempts: 10}))
		})
	}
	register(worker)
	wf := register(e)
	if err := worker.Work(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h, err := wf.Start(ctx, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		n   int
		err error
	}
	results, waits := make(chan result, 1), make(chan error, 1)
	read := make(chan []string, 1)
	go func() { n, err := h.Result(ctx); results <- result{n, err} }()
	go func() { _, err := e.Wait(ctx, h.ID); waits <- err }()
	go func() {
		var got []string
		for r, err := range e.Read(ctx, h.ID, "out", &weir.ReadOptions{View: weir.CommittedView, Follow: true, WaitForRun: time.Second}) {
			if err != nil {
				got = append(got, "error: "+err.Error())
				break
			}
			if r.Kind == stream.KindData {
				got = append(got, string(r.Data))
			}
		}
		read <- got
	}()
	waitFor(t, 20*time.Second, "the step to stream", func() bool {
		return len(dataOf(readAll(t, e, h.ID, "out", weir.LiveView))) >= 10
	})
	pgtest.Restart(t)
	r := <-results
	if r.err != nil || r.n != n {
		t.Fatalf("Result across the restart: %d, %v", r.n, r.err)
	}
	if err := <-waits; err != nil {
		t.Fatalf("Wait across the restart: %v", err)
	}
	got := <-read
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("c%02d", i)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the following reader across the restart got %q", got)
	}
}

// With more StepAsync steps than StepConcurrency, the steps get their slots in
// the order the workflow started them: which run first is the same on
// every run, not the scheduler's choice.
func TestStepSlotsGoInOrder(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.StepConcurrency = 1
		e := newEngine(t, s, cfg)
		var mu sync.Mutex
		var order []int
		wf := weir.Register(e, "slots", func(ctx weir.Context, _ int) (int, error) {
			var fs []*weir.Future[int]
			for i := range 12 {
				fs = append(fs, weir.StepAsync(ctx, "part", func(sc weir.StepContext) (int, error) {
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					time.Sleep(time.Millisecond)
					return i, nil
				}))
			}
			_, err := weir.All(ctx, fs...)
			return len(fs), err
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			order = nil
			h, err := wf.Start(testCtx(t), 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.Result(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			if !slices.IsSorted(order) {
				t.Fatalf("the steps ran in the order %v, not the one they were started in", order)
			}
		}
	})
}

// Item 7: a sender ends a Hook.Each loop by closing the hook with its last
// delivery (or alone); Engine.Hooks and Engine.Children list what a run
// made, from outside it.
func TestSenderClosesAHookAndEachEnds(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		child := weir.Register(e, "kid", func(ctx weir.Context, n int) (int, error) { return n + 1, nil })
		wf := weir.Register(e, "each", func(ctx weir.Context, token string) ([]int, error) {
			c := weir.StartChild(ctx, child, 1, nil)
			if _, err := c.Get(ctx); err != nil {
				return nil, err
			}
			h, err := weir.NewHook[int](ctx, token)
			if err != nil {
				return nil, err
			}
			var got []int
			for v, err := range h.Each(ctx) {
				if err != nil {
					return nil, err
				}
				got = append(got, v)
			}
			if _, err := h.Receive(ctx); !errors.Is(err, weir.ErrHookDisposed) {
				return nil, fmt.Errorf("a take after the sender's close: %v", err)
			}
			return got, nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		for _, last := range []string{"with", "alone"} {
			token := "each-" + last
			h, err := wf.Start(testCtx(t), token, nil)
			if err != nil {
				t.Fatal(err)
			}
			deliverWhenReady(t, e, token, `1`, nil)
			deliverWhenReady(t, e, token, `2`, nil)
			var res *weir.HookDelivery
			if last == "with" {
				res, err = e.DeliverHook(testCtx(t), token, []byte(`3`), &weir.DeliverOptions{Close: true, IdempotencyKey: "last"})
			} else {
				res, err = e.CloseHook(testCtx(t), token, &weir.DeliverOptions{IdempotencyKey: "last"})
			}
			if err != nil || !res.Closed {
				t.Fatalf("closing delivery: %+v %v", res, err)
			}
			if again, err := e.CloseHook(testCtx(t), token, &weir.DeliverOptions{IdempotencyKey: "last"}); last == "alone" && (err != nil || !again.Duplicate) {
				t.Fatalf("the close sent again: %+v %v", again, err)
			}
			if _, err := e.DeliverHook(testCtx(t), token, []byte(`4`), nil); !errors.Is(err, store.ErrGone) {
				t.Fatalf("a delivery after the sender's close: %v, want ErrGone", err)
			}
			got, err := h.Result(testCtx(t))
			want := []int{1, 2}
			if last == "with" {
				want = append(want, 3)
			}
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("%s: result %v %v, want %v", last, got, err, want)
			}
			if err := e.Replay(testCtx(t), h.ID); err != nil {
				t.Fatalf("replay: %v", err)
			}
			hooks, err := e.Hooks(testCtx(t), h.ID)
			if err != nil || len(hooks) != 2 || hooks[1].Token != token || !hooks[1].Disposed || hooks[1].Received != int64(len(want)) {
				t.Fatalf("Hooks: %+v %v", hooks, err)
			}
			kids, err := e.Children(testCtx(t), h.ID)
			if err != nil || len(kids) != 1 || kids[0] != h.ID+"-1" {
				t.Fatalf("Children: %v %v", kids, err)
			}
		}
		if _, err := e.Hooks(testCtx(t), "nope"); !errors.Is(err, weir.ErrNotFound) {
			t.Fatalf("Hooks of an unknown run: %v", err)
		}
	})
}

// childFirstStore holds an Advance that starts a child (child_started) until
// the child has ended: the child's end is then in its parent's log before
// its start.
type childFirstStore struct{ store.Full }

func (c *childFirstStore) Advance(ctx context.Context, p *store.AdvanceParams) error {
	for _, ev := range p.Events {
		if ev.Type != store.EventChildStarted {
			continue
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if r, err := c.GetRun(ctx, ev.Name); err == nil && r.Status.Terminal() {
				break
			}
			if time.Now().After(deadline) {
				return errors.New("the child did not end within 10s")
			}
			time.Sleep(time.Millisecond)
		}
	}
	return c.Full.Advance(ctx, p)
}

// A child that ends before its parent recorded its start: the end is in
// the parent's log before child_started, and a replay of the parent (its
// worker lost, another engine takes over) still takes it.
func TestChildEndBeforeItsStartInTheLog(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		var lost atomic.Bool
		held := make(chan struct{}, 4)
		register := func(e *weir.Engine) *weir.Workflow[int, int] {
			kid := weir.Register(e, "quick", func(ctx weir.Context, n int) (int, error) { return n * 2, nil })
			return weir.Register(e, "parent", func(ctx weir.Context, n int) (int, error) {
				v, err := weir.StartChild(ctx, kid, n, nil).Get(ctx)
				if err != nil {
					return 0, err
				}
				if _, err := weir.Step(ctx, "hold", func(sc weir.StepContext) (int, error) {
					held <- struct{}{}
					if !lost.Load() {
						<-sc.Done()
						return 0, context.Cause(sc)
					}
					return 0, nil
				}); err != nil {
					return 0, err
				}
				return v, nil
			})
		}
		a := newEngine(t, &childFirstStore{Full: s}, nil)
		wf := register(a)
		if err := a.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), 21, nil)
		if err != nil {
			t.Fatal(err)
		}
		recv(t, held, "the parent's step after its child")
		lost.Store(true)
		if err := a.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		var received, started int64
		for _, ev := range hookEvents(t, s, h.ID, store.EventHookReceived) {
			received = ev.Seq
		}
		for _, ev := range hookEvents(t, s, h.ID, store.EventChildStarted) {
			started = ev.Seq
		}
		if received == 0 || received > started {
			t.Fatalf("the child's end (event %d) is not before its start (event %d): the test did not make the order it tests", received, started)
		}
		b := newEngine(t, s, nil)
		wf = register(b)
		if err := b.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if v, err := wf.Handle(h.ID).Result(testCtx(t)); err != nil || v != 42 {
			t.Fatalf("the parent's result after a replay: %d %v, want 42", v, err)
		}
	})
}
