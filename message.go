package weir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/inbox"
	"github.com/weirhq/weir/store"
)

// Messages to a run, and its run events.
//
// A message is sent to a run id and a topic (Engine.Send, POST
// /v1/runs/{id}/messages/{topic}, weir runs send, or Send from another
// run's workflow): it is a message_received event in the run's log the
// moment it is acknowledged, whether or not the run asks for it yet, and
// the run takes it with Recv. Each topic is an inbox (package inbox): the
// n-th Recv of a topic takes its n-th message, in log order, on replay
// too. A run that ends leaves the messages it did not take in its log;
// its end records how many of each topic it took (Engine.Messages).
//
// A run event is a key's value the workflow publishes (SetEvent), exactly
// once on replay; clients read its latest value or wait for it
// (Engine.GetEvent, GET /v1/runs/{id}/events/{key}).

// MessageSent is the reply to a message: the run, the topic, the seq of
// the message's event in the run's log, and whether it was a duplicate.
type MessageSent = store.MessageSent

// RunEvent is a run event's latest value: its key, the value (JSON), the
// seq of the event that set it and when.
type RunEvent = store.RunEvent

// topic returns the inbox of a topic's messages.
func (x *execution) topic(name string) *inbox.Box {
	b := x.topics[name]
	if b == nil {
		if x.topics == nil {
			x.topics = map[string]*inbox.Box{}
		}
		b = &inbox.Box{}
		x.topics[name] = b
	}
	return b
}

// messagesTaken is the messages_taken event's data: how many messages of
// each topic the run took, for every topic whose messages it read; nil if
// none (a run that ended without one took none).
func (x *execution) messagesTaken() []byte {
	if len(x.topics) == 0 {
		return nil
	}
	m := make(map[string]int, len(x.topics))
	for name, b := range x.topics {
		m[name] = b.TakenCount()
	}
	out, _ := json.Marshal(m)
	return out
}

// NextMessage returns a Future of the next message sent to the run on
// topic, to race it against other operations with Select or wait for
// several at once. As with a hook's Next, the Future takes its message
// when it is taken (Get, or Select choosing it), in the order of the
// topic's messages; one never taken leaves its message for the next take.
// A bad topic name fails the Future.
func NextMessage[T any](ctx Context, topic string) *Future[T] {
	x := ctx.execution()
	f := &Future[T]{f: future{kind: opMessage, done: make(chan struct{})}}
	if err := store.CheckTopic("topic", topic); err != nil {
		f.f.err = NonRetryable(fmt.Errorf("weir: receive: %w", err))
		close(f.f.done)
		return f
	}
	x.receives = true
	f.f.box = x.topic(topic)
	f.f.hook = &opState{kind: opMessage, token: topic}
	f.f.take = func(payload []byte, index int) {
		if err := json.Unmarshal(payload, &f.val); err != nil {
			f.f.err = NonRetryable(fmt.Errorf("topic %q: decode message %d: %w", topic, index+1, err))
		}
	}
	return f
}

// Recv waits for the next message sent to the run on topic and returns it:
// the oldest one not taken, which may have come before the run asked.
// Recv takes no durable operation of its own: which message it gets
// follows from the log's order and the order of the run's takes, the same
// on replay.
func Recv[T any](ctx Context, topic string) (T, error) {
	return NextMessage[T](ctx, topic).Get(ctx)
}

// RecvWithin is Recv with a durable timeout: ok is false if no message
// came within d (the wait is a timer of the run's: it holds across
// restarts); the message that comes later is left for the next Recv.
func RecvWithin[T any](ctx Context, topic string, d time.Duration) (v T, ok bool, err error) {
	if d < 0 {
		return v, false, NonRetryable(fmt.Errorf("weir: receive on %q: negative timeout %v", topic, d))
	}
	next := NextMessage[T](ctx, topic)
	if next.f.err != nil {
		return v, false, next.f.err
	}
	if Select(ctx, next, NewTimer(ctx, d)) == 1 {
		return v, false, nil
	}
	v, err = next.Get(ctx)
	return v, err == nil, err
}

// sentJSON is what a message_sent event keeps of a Send.
type sentJSON struct {
	Topic string `json:"topic"`
	Seq   int64  `json:"seq,omitempty"`
	Code  string `json:"code,omitempty"` // a refusal's Weir-Error code
}

// Send sends v (JSON) to run runID on topic as the run's next durable
// operation: exactly once, on replay too (its idempotency key is this
// run's id and the op; the send is recorded in this run's log). It
// returns an error matching ErrNotFound for an unknown run, store.ErrGone
// for one that ended, store.ErrInvalid or ErrTooLarge for a bad topic or
// message; the same on replay.
func Send(ctx Context, runID, topic string, v any) error {
	x := ctx.execution()
	op, st := x.nextOp()
	if st != nil && st.kind != opSend {
		x.leave(exitNonDeterminism, &NonDeterminismError{Op: op, Recorded: st.describe(), Replayed: "a message to run " + runID})
	}
	if st != nil {
		return sentErr(st)
	}
	if x.readOnly {
		x.leave(exitFrontier, nil)
	}
	payload, err := json.Marshal(v)
	if err != nil {
		return NonRetryable(fmt.Errorf("weir: send to run %s: encode: %w", runID, err))
	}
	x.settle()
	c, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), 30*time.Second)
	defer cancel()
	p := &store.SendMessageParams{RunID: runID, Topic: topic, Payload: payload,
		IdempotencyKey: "weir/" + x.run.ID + "/" + strconv.FormatInt(op, 10), RequestDigest: digestOf(append([]byte(topic+"\x00"), payload...))}
	res, err := x.e.store.SendMessage(c, p)
	sj := sentJSON{Topic: topic}
	ev := store.Event{Type: store.EventMessageSent, Op: op, Name: runID}
	switch {
	case err == nil:
		sj.Seq = res.Seq
	case errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrGone) || errors.Is(err, store.ErrInvalid) ||
		errors.Is(err, store.ErrTooLarge) || errors.Is(err, store.ErrKeyReused):
		// A refusal is the send's outcome: recorded, so replay returns it.
		e, _ := api.Lookup(err)
		sj.Code, ev.Error = e.Code, err.Error()
	default:
		x.storeFailed(err)
	}
	ev.Data, _ = json.Marshal(sj)
	st = &opState{kind: opSend, child: runID, errMsg: ev.Error, output: ev.Data}
	x.ops[op] = st
	x.record(&store.AdvanceParams{Events: []store.Event{ev}})
	if err == nil && !res.Duplicate {
		x.e.hookDelivered(runID)
		x.e.nudge()
	}
	return sentErr(st)
}

// sentErr is a recorded Send's error, nil if it was sent.
func sentErr(st *opState) error {
	if st.errMsg == "" {
		return nil
	}
	var sj sentJSON
	_ = json.Unmarshal(st.output, &sj)
	if e, ok := api.ByCode(sj.Code); ok {
		return fmt.Errorf("weir: send to run %s: %w: %s", st.child, e.Err, st.errMsg)
	}
	return fmt.Errorf("weir: send to run %s: %s", st.child, st.errMsg)
}

// SetEvent publishes v (JSON) as run event key's value, as the run's next
// durable operation: written once, on replay too. Clients read the latest
// value or wait for one (Engine.GetEvent, GET /v1/runs/{id}/events/{key},
// weir runs event). Returns store.ErrInvalid for a bad key, ErrTooLarge
// for a value over 1 MiB.
func SetEvent(ctx Context, key string, v any) error {
	x := ctx.execution()
	op, st := x.nextOp()
	if st != nil {
		if st.kind != opEvent || st.name != key {
			x.leave(exitNonDeterminism, &NonDeterminismError{Op: op, Recorded: st.describe(), Replayed: fmt.Sprintf("run event %q", key)})
		}
		return nil
	}
	if x.readOnly {
		x.leave(exitFrontier, nil)
	}
	if err := store.CheckTopic("run event key", key); err != nil {
		return NonRetryable(fmt.Errorf("weir: set event: %w", err))
	}
	value, err := json.Marshal(v)
	if err != nil {
		return NonRetryable(fmt.Errorf("weir: set event %q: encode: %w", key, err))
	}
	if len(value) > store.MaxEventValue {
		return NonRetryable(fmt.Errorf("weir: set event %q: %w: a value of %d bytes, the limit is %d", key, ErrTooLarge, len(value), store.MaxEventValue))
	}
	x.ops[op] = &opState{kind: opEvent, name: key}
	x.record(&store.AdvanceParams{Events: []store.Event{{Type: store.EventSet, Op: op, Name: key, Data: value}}})
	x.e.eventSet(x.run.ID)
	return nil
}

// SendOptions are optional settings of a message.
type SendOptions struct {
	// IdempotencyKey makes the message idempotent: sent again with the
	// same key, topic and payload, it is answered as the first time
	// (Duplicate) and adds nothing; with another, it is ErrKeyReused. A
	// key may not begin with "weir/", the prefix of the keys of the
	// messages runs send (names.ReservedMessageKeyPrefix).
	IdempotencyKey string
}

// Send sends payload (JSON, at most 1 MiB) to run runID on topic. It
// returns once the message is in the run's log, whether or not the run
// waits for it yet (it takes it with Recv). Returns ErrNotFound for an
// unknown run, an error matching store.ErrGone for a run that ended,
// ErrKeyReused, ErrTooLarge, and store.ErrInvalid for a bad topic or a
// payload that is not JSON.
func (e *Engine) Send(ctx context.Context, runID, topic string, payload json.RawMessage, opts *SendOptions) (*MessageSent, error) {
	if len(payload) > store.MaxMessagePayload {
		return nil, fmt.Errorf("send to run %s: %w: a message of %d bytes, the limit is %d", runID, store.ErrTooLarge, len(payload), store.MaxMessagePayload)
	}
	if !json.Valid(payload) {
		return nil, fmt.Errorf("send to run %s: %w: the message is not JSON", runID, store.ErrInvalid)
	}
	p := &store.SendMessageParams{RunID: runID, Topic: topic, Payload: payload}
	if opts != nil && opts.IdempotencyKey != "" {
		if err := store.CheckMessageKey(opts.IdempotencyKey); err != nil {
			return nil, fmt.Errorf("send to run %s: %w", runID, err)
		}
		p.IdempotencyKey = opts.IdempotencyKey
		p.RequestDigest = digestOf(append([]byte(topic+"\x00"), payload...))
	}
	res, err := e.store.SendMessage(ctx, p)
	if err != nil {
		return nil, err
	}
	if !res.Duplicate {
		e.hookDelivered(runID) // the run, if it runs here, reads its log
	}
	e.nudge()
	return res, nil
}

// TopicMessages is what a run's log says of one topic's messages: how
// many came (Received), and, once the run ended, how many it took and
// left untaken (Taken, Left; -1 before).
type TopicMessages = api.TopicMessages

// Messages returns what run runID's log says of the messages sent to it,
// by topic: how many came, and, once the run ended, how many it took and
// left. Returns ErrNotFound for an unknown run.
func (e *Engine) Messages(ctx context.Context, runID string) ([]TopicMessages, error) {
	if _, err := e.runHead(ctx, runID); err != nil {
		return nil, err
	}
	// Counted by the store from the events' heads: up to 16 MiB of
	// messages are not read to count them.
	c, err := e.store.CountMessages(ctx, runID)
	if errors.Is(err, store.ErrUnsupported) {
		return []TopicMessages{}, nil // a store without messages has none
	}
	if err != nil {
		return nil, err
	}
	return messagesOf(c), nil
}

// messagesOf reads a log's messages by topic.
func messagesOf(c *store.MessageCounts) []TopicMessages {
	out := make([]TopicMessages, 0, len(c.Topics))
	for _, tc := range c.Topics {
		t := TopicMessages{Topic: tc.Topic, Received: tc.Received, Taken: -1, Left: -1}
		if c.Ended {
			// A run that ended without messages_taken read none of its
			// messages (they came after it last looked): it took none.
			t.Taken = c.Taken[tc.Topic]
			t.Left = t.Received - t.Taken
		}
		out = append(out, t)
	}
	return out
}

// GetEventOptions are optional settings of GetEvent.
type GetEventOptions struct {
	// Wait waits until the key has a value newer than After (or the run
	// ends without one, ErrNotFound; or ctx ends).
	Wait bool
	// After, with Wait, is the seq of the value the caller has (0: none):
	// GetEvent returns the next one.
	After int64
}

// GetEvent returns run event key's latest value in run runID. Without
// Wait, a key never set is ErrNotFound; with it, GetEvent waits for a
// value (newer than opts.After), riding out a store that is away, until
// ctx ends or the run ends without one (ErrNotFound). Returns ErrNotFound
// for an unknown run.
func (e *Engine) GetEvent(ctx context.Context, runID, key string, opts *GetEventOptions) (*RunEvent, error) {
	var o GetEventOptions
	if opts != nil {
		o = *opts
	}
	delay := 10 * time.Millisecond
	var watched <-chan struct{} // a store that says when the run changed
	stopWatch := func() {}
	defer func() { stopWatch() }()
	rw, watches := store.WatcherOf(e.store)
	if o.Wait {
		defer e.eventWaiters(runID, -1)
		e.eventWaiters(runID, 1)
	}
	for {
		ch := e.eventChan(runID)
		if watches && o.Wait {
			// Watched before the look, so that a value set between the
			// look and the wait still wakes it.
			stopWatch()
			watched, stopWatch = rw.WatchRun(runID)
		}
		ev, err := e.store.GetRunEvent(ctx, runID, key)
		switch {
		case err == nil && (!o.Wait || ev.Seq > o.After):
			return ev, nil
		case err != nil && !errors.Is(err, store.ErrNotFound) && !(o.Wait && transient(err)):
			return nil, err
		case err != nil && !o.Wait:
			return nil, err
		case err != nil && errors.Is(err, store.ErrNotFound):
			r, rerr := e.runHead(ctx, runID)
			if rerr != nil && !transient(rerr) {
				return nil, rerr
			}
			if rerr == nil && r.Status.Terminal() {
				// Its last value may have come with its end.
				if ev, err := e.store.GetRunEvent(ctx, runID, key); err == nil && ev.Seq > o.After {
					return ev, nil
				}
				return nil, fmt.Errorf("run %s ended (%s) without setting event %q: %w", runID, r.Status, key, store.ErrNotFound)
			}
		case err == nil:
			// Not newer than After yet; a run that ended sets no more.
			if r, rerr := e.runHead(ctx, runID); rerr == nil && r.Status.Terminal() {
				if ev, err := e.store.GetRunEvent(ctx, runID, key); err == nil && ev.Seq > o.After {
					return ev, nil
				}
				return nil, fmt.Errorf("run %s ended (%s) with no event %q after seq %d: %w", runID, r.Status, key, o.After, store.ErrNotFound)
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-ch:
		case <-watched:
		case <-t.C:
		}
		t.Stop()
		// A store that watches wakes the wait (a value set or the run's
		// end, by any process): its timer is only a safety net.
		if watched != nil {
			delay = min(2*delay, 5*time.Second)
		} else {
			delay = min(2*delay, 250*time.Millisecond)
		}
	}
}

// RunEvents returns run runID's run events' latest values, by key. Returns
// ErrNotFound for an unknown run.
func (e *Engine) RunEvents(ctx context.Context, runID string) ([]*RunEvent, error) {
	if _, err := e.runHead(ctx, runID); err != nil {
		return nil, err
	}
	return e.store.ListRunEvents(ctx, runID)
}

// eventWaits are a run's GetEvent waiters here: how many, and the channel
// the next run event set here closes.
type eventWaits struct {
	n  int
	ch chan struct{}
}

// eventWaiters counts a waiter of run in (+1) or out (-1); the last one
// out forgets the run.
func (e *Engine) eventWaiters(run string, d int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.events == nil {
		e.events = map[string]*eventWaits{}
	}
	w := e.events[run]
	if w == nil {
		w = &eventWaits{ch: make(chan struct{})}
		e.events[run] = w
	}
	if w.n += d; w.n <= 0 {
		delete(e.events, run)
	}
}

// eventChan returns a channel closed when a run event of run is set here
// (nil, never closed, if nobody waits).
func (e *Engine) eventChan(run string) <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if w := e.events[run]; w != nil {
		return w.ch
	}
	return nil
}

// eventSet wakes the GetEvent waiters of run here.
func (e *Engine) eventSet(run string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if w := e.events[run]; w != nil {
		close(w.ch)
		w.ch = make(chan struct{})
	}
}
