package weir_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/store"
)

// sendMsg sends msg to run on topic.
func sendMsg(t *testing.T, e *weir.Engine, run, topic, msg string, opts *weir.SendOptions) *weir.MessageSent {
	t.Helper()
	res, err := e.Send(testCtx(t), run, topic, json.RawMessage(msg), opts)
	if err != nil {
		t.Fatalf("send %s to %s on %q: %v", msg, run, topic, err)
	}
	return res
}

// Messages to a run: one sent before the run asks is kept for it, one sent
// while it waits (parked) wakes it, one sent twice with its key is taken
// once, one on a topic it never takes is left and reported at its end, and
// a message to an ended run is refused; replay takes the same.
func TestMessagesEarlyLateTwiceLeft(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.ParkAfter = 20 * time.Millisecond
		e := newEngine(t, s, cfg)
		early := make(chan struct{})
		var executions atomic.Int32
		wf := weir.Register(e, "inbox", func(ctx weir.Context, _ int) ([]string, error) {
			executions.Add(1)
			if _, err := weir.Step(ctx, "busy", func(sc weir.StepContext) (int, error) {
				select {
				case <-early:
				case <-sc.Done():
					return 0, context.Cause(sc)
				}
				return 0, nil
			}); err != nil {
				return nil, err
			}
			var got []string
			for range 2 {
				m, err := weir.Recv[string](ctx, "chat")
				if err != nil {
					return nil, err
				}
				got = append(got, m)
			}
			// The duplicate added nothing: no third message comes.
			if m, ok, err := weir.RecvWithin[string](ctx, "chat", 100*time.Millisecond); err != nil || ok {
				return nil, errors.New("a third message: " + m)
			}
			return got, nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		key := &weir.SendOptions{IdempotencyKey: "click-1"}
		first := sendMsg(t, e, h.ID, "chat", `"early"`, key)
		again := sendMsg(t, e, h.ID, "chat", `"early"`, key)
		if first.Duplicate || !again.Duplicate || again.Seq != first.Seq {
			t.Fatalf("sent twice: %+v then %+v", first, again)
		}
		if _, err := e.Send(testCtx(t), h.ID, "chat", json.RawMessage(`"other"`), key); !errors.Is(err, weir.ErrKeyReused) {
			t.Fatalf("a key reused with another message: %v", err)
		}
		sendMsg(t, e, h.ID, "elsewhere", `1`, nil)
		close(early)
		waitParked(t, s, h.ID)
		sendMsg(t, e, h.ID, "chat", `"late"`, nil)
		got, err := h.Result(testCtx(t))
		if err != nil || !slices.Equal(got, []string{"early", "late"}) {
			t.Fatalf("result %q %v", got, err)
		}
		if executions.Load() < 2 {
			t.Fatal("the run never parked while it waited for a message")
		}
		if _, err := e.Send(testCtx(t), h.ID, "chat", json.RawMessage(`"too late"`), nil); !errors.Is(err, store.ErrGone) {
			t.Fatalf("a message to an ended run: %v, want ErrGone", err)
		}
		if _, err := e.Send(testCtx(t), "nope", "chat", json.RawMessage(`1`), nil); !errors.Is(err, weir.ErrNotFound) {
			t.Fatalf("a message to an unknown run: %v", err)
		}
		ms, err := e.Messages(testCtx(t), h.ID)
		want := []weir.TopicMessages{{Topic: "chat", Received: 2, Taken: 2, Left: 0}, {Topic: "elsewhere", Received: 1, Taken: 0, Left: 1}}
		if err != nil || !slices.Equal(ms, want) {
			t.Fatalf("Messages: %+v %v, want %+v", ms, err, want)
		}
		if err := e.Replay(testCtx(t), h.ID); err != nil {
			t.Fatalf("replay: %v", err)
		}
	})
}

// A parked run is not replayed for messages it does not wait for: one on
// another topic, or any while it sleeps, stays in its log until its next
// look, and the message it waits for wakes it at once. (Before, every
// message woke the run and replayed its whole log: a sender could make a
// run with a large log burn CPU at will.)
func TestMessagesWakeOnlyWhatWaits(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.ParkAfter = 20 * time.Millisecond
		e := newEngine(t, s, cfg)
		var executions atomic.Int32
		wf := weir.Register(e, "picky", func(ctx weir.Context, _ int) ([]string, error) {
			executions.Add(1)
			a, err := weir.Recv[string](ctx, "chat")
			if err != nil {
				return nil, err
			}
			weir.Sleep(ctx, 2*time.Hour)
			return []string{a}, nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		asleep := func(when string) {
			t.Helper()
			r, err := s.GetRun(testCtx(t), h.ID)
			if err != nil {
				t.Fatal(err)
			}
			if r.LeaseOwner != "" || !r.WakeAt.After(time.Now().Add(time.Hour)) {
				t.Fatalf("%s: the run was woken: %+v", when, r)
			}
		}
		waitParked(t, s, h.ID)
		for i := range 20 {
			sendMsg(t, e, h.ID, "noise", `1`, nil)
			asleep(fmt.Sprintf("noise %d", i))
		}
		if n := executions.Load(); n != 1 {
			t.Fatalf("%d executions before the awaited message", n)
		}
		sendMsg(t, e, h.ID, "chat", `"hi"`, nil)
		waitParked(t, s, h.ID) // now asleep for two hours
		if n := executions.Load(); n != 2 {
			t.Fatalf("%d executions after the awaited message, want 2", n)
		}
		for i := range 5 {
			sendMsg(t, e, h.ID, "chat", `"more"`, nil)
			asleep(fmt.Sprintf("asleep, message %d", i))
		}
	})
}

// A run cancelled while parked ends without running its workflow again,
// and its end still counts the messages it took before: they were acted
// on, not left. (Before, the cancel's fast path counted none taken: torture
// seed 626822.)
func TestACancelledRunCountsWhatItTook(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		cfg := fastConfig()
		cfg.ParkAfter = 20 * time.Millisecond
		e := newEngine(t, s, cfg)
		wf := weir.Register(e, "taker", func(ctx weir.Context, _ int) (string, error) {
			a, err := weir.Recv[string](ctx, "chat")
			if err != nil {
				return "", err
			}
			weir.Sleep(ctx, 2*time.Hour)
			return a, nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		sendMsg(t, e, h.ID, "chat", `"hi"`, nil)
		sendMsg(t, e, h.ID, "chat", `"left"`, nil)
		waitParked(t, s, h.ID) // took "hi", asleep for two hours
		if err := e.Cancel(testCtx(t), h.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Result(testCtx(t)); !errors.Is(err, weir.ErrCancelled) {
			t.Fatalf("result: %v, want ErrCancelled", err)
		}
		ms, err := e.Messages(testCtx(t), h.ID)
		want := []weir.TopicMessages{{Topic: "chat", Received: 2, Taken: 1, Left: 1}}
		if err != nil || !slices.Equal(ms, want) {
			t.Fatalf("Messages: %+v %v, want %+v", ms, err, want)
		}
	})
}

// A workflow sends to another run: exactly once, though its worker is
// lost between the send and its next step and another engine replays it.
func TestSendFromAWorkflowOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		var lost atomic.Bool
		held := make(chan struct{}, 4)
		register := func(e *weir.Engine) (*weir.Workflow[int, []int], *weir.Workflow[string, int]) {
			recv := weir.Register(e, "receiver", func(ctx weir.Context, _ int) ([]int, error) {
				var got []int
				for range 2 {
					v, err := weir.Recv[int](ctx, "n")
					if err != nil {
						return nil, err
					}
					got = append(got, v)
				}
				return got, nil
			})
			send := weir.Register(e, "sender", func(ctx weir.Context, to string) (int, error) {
				if err := weir.Send(ctx, to, "n", 1); err != nil {
					return 0, err
				}
				if err := weir.Send(ctx, "no-such-run", "n", 1); !errors.Is(err, weir.ErrNotFound) {
					return 0, errors.New("a send to an unknown run did not fail as not found")
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
				return 0, weir.Send(ctx, to, "n", 2)
			})
			return recv, send
		}
		a := newEngine(t, s, nil)
		rwf, send := register(a)
		if err := a.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		r, err := rwf.Start(testCtx(t), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		sh, err := send.Start(testCtx(t), r.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		recv(t, held, "the sender's step")
		lost.Store(true)
		if err := a.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		b := newEngine(t, s, nil)
		recvB, sendB := register(b)
		if err := b.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if _, err := sendB.Handle(sh.ID).Result(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		got, err := recvB.Handle(r.ID).Result(testCtx(t))
		if err != nil || !slices.Equal(got, []int{1, 2}) {
			t.Fatalf("the receiver got %v %v, want [1 2], each once", got, err)
		}
		if n := len(hookEvents(t, s, r.ID, store.EventMessageReceived)); n != 2 {
			t.Fatalf("%d messages in the receiver's log, want 2", n)
		}
		if err := b.Replay(testCtx(t), sh.ID); err != nil {
			t.Fatalf("replay of the sender: %v", err)
		}
	})
}

// Run events: a client reads the latest value and waits for the next
// while the run sets them; a restart (another engine takes the run over)
// does not set one again; once the run ended, waiting for more ends.
func TestRunEventsWhileRunningAndAfterARestart(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		var lost atomic.Bool
		held := make(chan struct{}, 4)
		register := func(e *weir.Engine) *weir.Workflow[int, int] {
			return weir.Register(e, "progress", func(ctx weir.Context, _ int) (int, error) {
				if err := weir.SetEvent(ctx, "status", "started"); err != nil {
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
				if err := weir.SetEvent(ctx, "status", map[string]int{"done": 3}); err != nil {
					return 0, err
				}
				if err := weir.SetEvent(ctx, "bad/key", 1); !errors.Is(err, store.ErrInvalid) {
					return 0, errors.New("a bad key was not refused")
				}
				return 3, nil
			})
		}
		a := newEngine(t, s, nil)
		wf := register(a)
		if err := a.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h, err := wf.Start(testCtx(t), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := a.GetEvent(testCtx(t), h.ID, "status", &weir.GetEventOptions{Wait: true})
		if err != nil || string(ev.Value) != `"started"` {
			t.Fatalf("the first value: %+v %v", ev, err)
		}
		recv(t, held, "the step")
		if _, err := a.GetEvent(testCtx(t), h.ID, "nope", nil); !errors.Is(err, weir.ErrNotFound) {
			t.Fatalf("a key never set: %v", err)
		}
		next := make(chan *weir.RunEvent, 1)
		go func() {
			ev, err := a.GetEvent(testCtx(t), h.ID, "status", &weir.GetEventOptions{Wait: true, After: ev.Seq})
			if err != nil {
				t.Errorf("waiting for the next value: %v", err)
			}
			next <- ev
		}()
		lost.Store(true)
		if err := a.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		b := newEngine(t, s, nil)
		wf = register(b)
		if err := b.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if got := recv(t, next, "the next value"); got == nil || string(got.Value) != `{"done":3}` {
			t.Fatalf("the next value %+v", got)
		}
		if _, err := wf.Handle(h.ID).Result(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if n := len(hookEvents(t, s, h.ID, store.EventSet)); n != 2 {
			t.Fatalf("%d event_set events, want 2: a restart set one again", n)
		}
		last, err := b.GetEvent(testCtx(t), h.ID, "status", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.GetEvent(testCtx(t), h.ID, "status", &weir.GetEventOptions{Wait: true, After: last.Seq}); !errors.Is(err, weir.ErrNotFound) {
			t.Fatalf("waiting past the last value of an ended run: %v, want ErrNotFound", err)
		}
		evs, err := b.RunEvents(testCtx(t), h.ID)
		if err != nil || len(evs) != 1 || evs[0].Key != "status" {
			t.Fatalf("RunEvents %+v %v", evs, err)
		}
		if err := b.Replay(testCtx(t), h.ID); err != nil {
			t.Fatalf("replay: %v", err)
		}
	})
}

// Messages from another process: a worker process executes the run; this
// process sends to it, before the run asks (it sleeps first), twice with a
// key, and after it asks; on SQLite through the worker's HTTP API (one
// process holds the file), on PostgreSQL through this process's own
// engine on the same database. Once the run ended, a message is refused.
func TestMessagesFromAnotherProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			env, open := processStore(t, kind)
			if kind == "sqlite" {
				env = append(env, envWorkerHTTP+"=1")
			}
			w := startWorkerEnv(t, "inbox:3", env...)
			var send func(topic, msg, key string) (*weir.MessageSent, error)
			if kind == "sqlite" {
				var addr string
				w.waitFor(t, "the worker's HTTP address", func(l string) bool {
					addr, _ = strings.CutPrefix(l, "http ")
					return addr != l
				})
				c, err := client.New("http://"+addr, nil)
				if err != nil {
					t.Fatal(err)
				}
				send = func(topic, msg, key string) (*weir.MessageSent, error) {
					res, err := c.SendMessage(testCtx(t), "run-under-test", topic, json.RawMessage(msg), &client.SendOptions{IdempotencyKey: key})
					if err != nil {
						return nil, err
					}
					return &weir.MessageSent{RunID: res.RunID, Topic: res.Topic, Seq: res.Seq, Duplicate: res.Duplicate}, nil
				}
			} else {
				e := newEngine(t, open(), &weir.Config{NoWorker: true, Logger: testLogger()})
				send = func(topic, msg, key string) (*weir.MessageSent, error) {
					return e.Send(testCtx(t), "run-under-test", topic, json.RawMessage(msg), &weir.SendOptions{IdempotencyKey: key})
				}
			}
			w.waitFor(t, "the run to sleep", func(l string) bool { return l == "sleeping before it receives" })
			first, err := send("n", `1`, "k1")
			if err != nil {
				t.Fatal(err)
			}
			again, err := send("n", `1`, "k1")
			if err != nil || !again.Duplicate || again.Seq != first.Seq {
				t.Fatalf("sent twice: %+v, then %+v %v", first, again, err)
			}
			if _, err := send("n", `5`, "k1"); !errors.Is(err, weir.ErrKeyReused) {
				t.Fatalf("a key reused: %v", err)
			}
			if _, err := send("n", `10`, ""); err != nil {
				t.Fatal(err)
			}
			w.waitFor(t, "the second message taken", func(l string) bool { return l == "received 2" })
			if _, err := send("n", `100`, ""); err != nil {
				t.Fatal(err)
			}
			w.waitFor(t, "the run to end", func(l string) bool { return l == "done" })
			_ = w.cmd.Wait()
			s := open()
			r, err := s.GetRun(testCtx(t), "run-under-test")
			if err != nil || r.Status != store.RunCompleted || string(r.Output) != "111" {
				t.Fatalf("run %+v %v, want completed with 111: each message once", r, err)
			}
			e := newEngine(t, s, &weir.Config{NoWorker: true, Logger: testLogger()})
			if _, err := e.Send(testCtx(t), "run-under-test", "n", json.RawMessage(`1`), nil); !errors.Is(err, store.ErrGone) {
				t.Fatalf("a message to the ended run: %v, want ErrGone", err)
			}
		})
	}
}

// A client's message key may not begin with "weir/": that is where the
// keys of the messages runs send live (weir/SENDER/OP), predictable from
// the sender's log, and a key planted there first with another body
// failed the sender's send as a reused key (red team, round fifteen).
func TestAClientCannotPlantARunsSendKey(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		recvWF := weir.Register(e, "receiver", func(ctx weir.Context, _ int) (int, error) {
			return weir.Recv[int](ctx, "n")
		})
		gate := make(chan struct{})
		sendWF := weir.Register(e, "sender", func(ctx weir.Context, to string) (int, error) {
			if _, err := weir.Step(ctx, "wait", func(sc weir.StepContext) (int, error) {
				<-gate
				return 0, nil
			}); err != nil {
				return 0, err
			}
			return 0, weir.Send(ctx, to, "n", 7)
		})
		must(t, e.Work(testCtx(t)))
		r, err := recvWF.Start(testCtx(t), 0, nil)
		must(t, err)
		sh, err := sendWF.Start(testCtx(t), r.ID, nil)
		must(t, err)
		for _, key := range []string{"weir/" + sh.ID + "/2", "weir/" + sh.ID + "/1", "weir/x"} {
			if _, err := e.Send(testCtx(t), r.ID, "n", json.RawMessage(`666`), &weir.SendOptions{IdempotencyKey: key}); !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("a client's key %q: %v, want ErrInvalid", key, err)
			}
		}
		close(gate)
		if _, err := sh.Result(testCtx(t)); err != nil {
			t.Fatalf("the sender: %v", err)
		}
		if got, err := r.Result(testCtx(t)); err != nil || got != 7 {
			t.Fatalf("the receiver got %d, %v; want 7", got, err)
		}
		// Keys that merely look alike are the client's. (On a topic the
		// run does not take: a message on "n" would end it, and the next
		// send would find it ended.)
		r2, err := recvWF.Start(testCtx(t), 0, nil)
		must(t, err)
		sendMsg(t, e, r2.ID, "aside", `1`, &weir.SendOptions{IdempotencyKey: "WEIR/x"})
		sendMsg(t, e, r2.ID, "aside", `1`, &weir.SendOptions{IdempotencyKey: "weir-x"})
	})
}
