package torture

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// Violation is a broken invariant.
type Violation struct {
	Invariant string // "1".."6" of semantics.md, or "state", "content", "log"
	Where     string // run or stream
	Msg       string
}

func (v Violation) String() string {
	return fmt.Sprintf("invariant %s at %s: %s", v.Invariant, v.Where, v.Msg)
}

type checker struct {
	s store.Full
	// lost: a fault struck that can take a worker away mid-step, so a
	// last attempt may end without an outcome ("worker lost").
	lost  bool
	out   []Violation
	stats Stats
	// bound is how long a run may take to end after its cancel or
	// deadline, and a parent to hear of its child's end (Trial.endBound).
	bound time.Duration
	// base is a server.Server on s ("http://…/v1/stream/"): every stream is
	// also read over HTTP. Empty: not.
	base string
}

// Stats counts what a check read.
type Stats struct {
	Runs, Completed, Failed int
	Steps, Attempts         int
	Streams, Records        int
	Committed, Aborts       int
	Bytes                   int64
	// HTTP stream writers checked, by kind, and the chunks acknowledged to
	// weir writers that were checked against the stream.
	HTTPStreams, HTTPWeir, HTTPIdem, HTTPProducer, HTTPAcks int
	// The agent operations checked: steps run at once (in groups), hooks
	// and their payloads, attempts timed out.
	Parallel, Hooks, Payloads, TimedOut int
	// The agent shapes (agent.go): hooks taken by several takers, hooks
	// closed with payloads pending, steps failed for good by their
	// timeout, runs cancelled and ended by their deadline over steps deaf
	// to their context, child runs.
	Takers, ClosedHooks, TimeoutFinal, Cancelled, Deadlines, Children int
	// Messages to runs: in the logs, taken, and left at the runs' ends.
	Messages, MessagesTaken, MessagesLeft int
	// Runs started in their trial's queue and held to its slots.
	Queued int
	// Limited steps' attempts whose outcome is in the log, held to their
	// trial's limiter.
	Limited int
	// What the workers reported of lined parking (lineseats.go): parks
	// lined, the runs parked so, the parks while the workflow waited for
	// steps on goroutines of their own, runs claimed lined; and the
	// limiter changes they made while the runs ran.
	LinedParks, LinedRuns, LinedAsyncParks, LinedClaims, LimiterChanges int
	// Forks made and checked, fork points refused (rightly), and resumes
	// of failed forks.
	Forks, ForksRefused, Resumes int
}

func (s *Stats) add(o Stats) {
	s.Runs += o.Runs
	s.Completed += o.Completed
	s.Failed += o.Failed
	s.Steps += o.Steps
	s.Attempts += o.Attempts
	s.Streams += o.Streams
	s.Records += o.Records
	s.Committed += o.Committed
	s.Aborts += o.Aborts
	s.Bytes += o.Bytes
	s.HTTPStreams += o.HTTPStreams
	s.HTTPWeir += o.HTTPWeir
	s.HTTPIdem += o.HTTPIdem
	s.HTTPProducer += o.HTTPProducer
	s.HTTPAcks += o.HTTPAcks
	s.Parallel += o.Parallel
	s.Hooks += o.Hooks
	s.Payloads += o.Payloads
	s.TimedOut += o.TimedOut
	s.Takers += o.Takers
	s.ClosedHooks += o.ClosedHooks
	s.TimeoutFinal += o.TimeoutFinal
	s.Cancelled += o.Cancelled
	s.Deadlines += o.Deadlines
	s.Children += o.Children
	s.Messages += o.Messages
	s.MessagesTaken += o.MessagesTaken
	s.MessagesLeft += o.MessagesLeft
	s.Queued += o.Queued
	s.Limited += o.Limited
	s.LinedParks += o.LinedParks
	s.LinedRuns += o.LinedRuns
	s.LinedAsyncParks += o.LinedAsyncParks
	s.LinedClaims += o.LinedClaims
	s.LimiterChanges += o.LimiterChanges
	s.Forks += o.Forks
	s.ForksRefused += o.ForksRefused
	s.Resumes += o.Resumes
}

func (c *checker) fail(inv, where, format string, args ...any) {
	if len(c.out) < 50 {
		c.out = append(c.out, Violation{inv, where, fmt.Sprintf(format, args...)})
	}
}

// Check reads back everything trial t wrote and checks it: every run ended
// in the state its plan and its log call for; every stream, in both views,
// against semantics.md's invariants and the bytes the seed says the
// successful attempts wrote.
func Check(ctx context.Context, s store.Full, t *Trial) ([]Violation, Stats, error) {
	return check(ctx, s, t, "")
}

// check is Check; with base (a server's "http://…/v1/stream/"), every
// stream is read over HTTP too.
func check(ctx context.Context, s store.Full, t *Trial, base string) ([]Violation, Stats, error) {
	c := &checker{s: s, base: base, bound: t.endBound(), lost: t.workersLost > 0}
	for i := range t.Runs {
		if err := c.checkRun(ctx, &t.Runs[i]); err != nil {
			return c.out, c.stats, err
		}
	}
	if err := c.checkQueue(ctx, t); err != nil {
		return c.out, c.stats, err
	}
	if err := c.checkLimiter(ctx, t); err != nil {
		return c.out, c.stats, err
	}
	if err := c.checkForks(ctx, t); err != nil {
		return c.out, c.stats, err
	}
	for i := range t.Producers {
		if err := c.checkProducer(ctx, &t.Producers[i]); err != nil {
			return c.out, c.stats, err
		}
	}
	for i := range t.HTTPStreams {
		if err := c.checkHTTPStream(ctx, t, &t.HTTPStreams[i]); err != nil {
			return c.out, c.stats, err
		}
	}
	return c.out, c.stats, nil
}

// expectation is what each writer's committed output on a stream must be.
type expectation map[string]map[string][][]byte // stream -> writer -> chunks

func (e expectation) add(streamName, writer string, chunk []byte) {
	if e[streamName] == nil {
		e[streamName] = map[string][][]byte{}
	}
	e[streamName][writer] = append(e[streamName][writer], chunk)
}

func (e expectation) touch(streamName, writer string) {
	if e[streamName] == nil {
		e[streamName] = map[string][][]byte{}
	}
	if _, ok := e[streamName][writer]; !ok {
		e[streamName][writer] = [][]byte{}
	}
}

type opLog struct {
	started   []int64
	startedAt time.Time // the last step_started's time
	completed int64     // attempt; 0: none
	final     bool
	finalErr  string
	fired     bool
	failed    []int64
	hooks     int      // hook_created events
	payloads  [][]byte // hook_received events' data, in log order
	disposed  int      // hook_disposed events
	// afterDispose counts hook_received events after the hook_disposed.
	afterDispose int
	child        string    // child_started: the child's id
	endAt        time.Time // a child's end: its hook_received's time
}

// endBound is how long the checker lets a run take to end after its
// cancel or its deadline, and a parent to hear of its child's end: a few
// lease periods, plus time for each planned fault (a stopped worker, a
// restarting database).
func (t *Trial) endBound() time.Duration {
	return 8*time.Second + time.Duration(len(t.Faults))*4*time.Second
}

// ended returns a run's terminal event's time (zero: none).
func ended(events []store.Event) time.Time {
	for i := len(events) - 1; i >= 0; i-- {
		switch events[i].Type {
		case store.EventRunCompleted, store.EventRunFailed, store.EventRunCancelled:
			return events[i].At
		}
	}
	return time.Time{}
}

// checkQueue holds the trial's queued runs to its concurrency: each run's
// span from its execution's first event to its end lies inside its hold of a slot
// (admitted before it ran, the slot given back only once it ended), so at
// no instant may more of those spans overlap than the queue has slots.
// Every queued run must have been admitted and have ended.
func (c *checker) checkQueue(ctx context.Context, t *Trial) error {
	if t.Queue == 0 {
		return nil
	}
	var edges []edge
	for _, rs := range t.Runs {
		if !rs.Queued {
			continue
		}
		run, err := c.s.GetRun(ctx, rs.ID)
		if err != nil {
			return fmt.Errorf("queue: %w", err)
		}
		if run.Queue != t.QueueName() || run.Queued {
			c.fail("queue", rs.ID, "the run is in queue %q, queued %v: want admitted from %q", run.Queue, run.Queued, t.QueueName())
			continue
		}
		evs, err := c.s.ListEvents(ctx, rs.ID, 0)
		if err != nil {
			return fmt.Errorf("queue: %w", err)
		}
		end := ended(evs)
		// Messages reach a run's log while it waits in its queue: its
		// span begins with the first event an execution of it wrote.
		first := slices.IndexFunc(evs, func(e store.Event) bool { return e.Type != store.EventMessageReceived })
		if first < 0 || end.IsZero() {
			continue // checkRun reports a run that did not end
		}
		edges = append(edges, edge{evs[first].At, +1}, edge{end, -1})
		c.stats.Queued++
	}
	if n, at := mostAtOnce(edges); n > t.Queue {
		c.fail("queue", t.QueueName(), "%d queued runs ran at once at %v; the queue has %d slots", n, at, t.Queue)
	}
	return nil
}

// checkLimiter holds the trial's limited steps to its limiter's
// concurrency: each attempt's own span around its code lies inside its
// slot (after the grant, before the release), so at no instant may more of
// them overlap than the limiter has slots. Only attempts whose outcome is
// in their run's log count: a zombie's (its process stopped past its
// leases, its outcome refused) ran on after its slot lapsed, which is what
// a lease means. And of an attempt's spans, only the execution's whose
// start of it is in the log: an execution that lost its lease before the
// start was durable (a frozen engine's, one whose run parked as the
// attempt began) is a zombie too, its slot given back or lapsed, and the
// next execution runs the attempt again under the same number. A start
// whose writer the workers did not report (its record's answer lost) may
// be any of its spans': they all count.
func (c *checker) checkLimiter(ctx context.Context, t *Trial) error {
	if t.Limiter == 0 {
		return nil
	}
	c.stats.LinedParks, c.stats.LinedRuns, c.stats.LinedAsyncParks = t.lined.parks, len(t.lined.parked), t.lined.asyncParks
	c.stats.LinedClaims, c.stats.LimiterChanges = t.lined.claims, t.lined.changes
	logged := map[attemptKey]bool{}
	for _, rs := range t.Runs {
		evs, err := c.s.ListEvents(ctx, rs.ID, 0)
		if err != nil {
			return fmt.Errorf("limiter: %w", err)
		}
		for _, e := range evs {
			if e.Type == store.EventStepCompleted || e.Type == store.EventStepFailed {
				logged[attemptKey{rs.ID, e.Op, e.Attempt}] = true
			}
		}
	}
	var edges []edge
	var counted []attemptSpan
	for _, a := range t.limited {
		if !logged[a.attemptKey] {
			continue
		}
		if by, ok := t.started[a.attemptKey]; ok && !slices.Contains(by, a.epoch) {
			continue // another execution's run of the attempt is the log's
		}
		edges = append(edges, edge{a.start, +1}, edge{a.end, -1})
		counted = append(counted, a)
		c.stats.Limited++
	}
	if n, at := mostAtOnce(edges); n > t.Limiter {
		// Which attempts: where to look in the workers' logs.
		var which []string
		for _, a := range counted {
			if !a.start.After(at) && a.end.After(at) {
				which = append(which, fmt.Sprintf("%s op %d attempt %d epoch %d (%s from %s)",
					a.run, a.op, a.attempt, a.epoch, a.end.Sub(a.start).Round(time.Millisecond), a.start.Format("15:04:05.000000")))
			}
		}
		c.fail("limiter", t.LimiterName(), "%d limited attempts ran at once at %v; the limiter has %d slots: %s",
			n, at, t.Limiter, strings.Join(which, ", "))
	}
	return nil
}

// edge is a span's start (+1) or end (-1).
type edge struct {
	at    time.Time
	delta int
}

// mostAtOnce is the largest number of spans open at one instant, and the
// first instant it was reached. An end and a start at the same instant do
// not overlap.
func mostAtOnce(edges []edge) (int, time.Time) {
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	in, most := 0, 0
	var at time.Time
	for _, e := range edges {
		if in += e.delta; in > most {
			most, at = in, e.at
		}
	}
	return most, at
}

func stepWriterID(op int64) string { return "step/" + strconv.FormatInt(op, 10) }

func (c *checker) checkRun(ctx context.Context, rs *RunSpec) error {
	run, err := c.s.GetRun(ctx, rs.ID)
	if err != nil {
		return fmt.Errorf("run %s: %w", rs.ID, err)
	}
	where := "run " + rs.ID
	events, err := c.s.ListEvents(ctx, rs.ID, 0)
	if err != nil {
		return fmt.Errorf("events of %s: %w", rs.ID, err)
	}
	ops := map[int64]*opLog{}
	msgs := map[string][][]byte{} // topic -> its messages, in log order
	var taken map[string]int      // the run's end: messages taken by topic
	for i, ev := range events {
		if ev.Seq != int64(i+1) {
			c.fail("log", where, "event %d has seq %d: the log is not dense", i, ev.Seq)
		}
		switch ev.Type {
		case store.EventMessageReceived:
			msgs[ev.Name] = append(msgs[ev.Name], ev.Data)
		case store.EventMessagesTaken:
			if err := json.Unmarshal(ev.Data, &taken); err != nil {
				c.fail("message", where, "messages_taken %q: %v", ev.Data, err)
			}
		}
		if ev.Op == 0 {
			continue
		}
		o := ops[ev.Op]
		if o == nil {
			o = &opLog{}
			ops[ev.Op] = o
		}
		switch ev.Type {
		case store.EventStepStarted:
			c.stats.Attempts++
			o.started = append(o.started, ev.Attempt)
			o.startedAt = ev.At
		case store.EventStepCompleted:
			if o.completed != 0 || o.final {
				c.fail("log", where, "op %d has a second outcome: completed at attempt %d", ev.Op, ev.Attempt)
			}
			o.completed = ev.Attempt
		case store.EventStepFailed:
			if o.completed != 0 || o.final {
				c.fail("log", where, "op %d has an outcome after its final one: failed at attempt %d", ev.Op, ev.Attempt)
			}
			o.failed = append(o.failed, ev.Attempt)
			if ev.Final {
				o.final, o.finalErr = true, ev.Error
			}
		case store.EventSleepFired:
			o.fired = true
		case store.EventHookCreated:
			o.hooks++
		case store.EventHookReceived:
			if o.disposed > 0 {
				o.afterDispose++
			}
			o.payloads = append(o.payloads, ev.Data)
			o.endAt = ev.At
		case store.EventHookDisposed:
			o.disposed++
		case store.EventChildStarted:
			o.child = ev.Name
		}
	}
	endAt := ended(events)

	// Walk the plan: what must the log and the streams hold?
	exp := expectation{}
	wfIdx := map[string]int{}
	stopped := false
	cancelled := false // the walk reached an ItemCancel
	deadline := rs.Workflow == WorkflowDeadline
	if deadline {
		c.stats.Deadlines++
		if endAt.IsZero() {
			c.fail("deadline", where, "the run has no end")
		} else if over := endAt.Sub(run.CreatedAt.Add(DeadlineMillis * time.Millisecond)); over > c.bound {
			c.fail("deadline", where, "the run ended %v after its deadline, more than the %v allowed", over.Round(time.Millisecond), c.bound)
		}
	}
	// A group's steps all run (its workflow waits for each): a failure in
	// it stops the run once the group is over.
	stopAfterGroup := false
	for idx := range rs.Items {
		it := &rs.Items[idx]
		o := ops[it.Op]
		if stopAfterGroup && (it.Group == 0 || it.Group != rs.Items[idx-1].Group) {
			stopped, stopAfterGroup = true, false
		}
		if stopped {
			if it.Op != 0 && o != nil {
				c.fail("state", where, "op %d has events after the run's workflow returned an error", it.Op)
			}
			continue
		}
		if deadline && it.Kind == ItemStep || it.Kind == ItemHang {
			// The deadline may interrupt any step of a deadline run.
			if o == nil || o.completed == 0 {
				if o != nil && o.final && !strings.Contains(o.finalErr, weir.ErrRunTimeout.Error()) {
					c.fail("deadline", where, "step %s (op %d) failed for good with %q, not the run's deadline", it.Name, it.Op, o.finalErr)
				}
				if o != nil {
					exp.touch("s0", stepWriterID(it.Op))
				}
				stopped = true
				continue
			}
		}
		switch it.Kind {
		case ItemHang:
			c.fail("deadline", where, "step %s (op %d) completed: it hangs until the run's deadline", it.Name, it.Op)
		case ItemCancel:
			c.stats.Cancelled++
			cancelled, stopped = true, true
			w := stepWriterID(it.Op)
			exp.touch("s0", w)
			switch {
			case o == nil || len(o.started) == 0:
				// Cancelled before its start was durable: nothing to check.
			case o.completed != 0:
				c.fail("cancel", where, "step %s (op %d) completed: it hangs until its run is cancelled", it.Name, it.Op)
			case !o.final || !strings.Contains(o.finalErr, weir.ErrCancelled.Error()):
				c.fail("cancel", where, "step %s (op %d) ended with %q (final %v), want the run's cancel", it.Name, it.Op, o.finalErr, o.final)
			case !endAt.IsZero() && endAt.Sub(o.startedAt) > c.bound:
				c.fail("cancel", where, "the run ended %v after the cancelling attempt began, more than the %v allowed", endAt.Sub(o.startedAt).Round(time.Millisecond), c.bound)
			}
		case ItemChild:
			c.stats.Children++
			ch := it.Child
			cw := "child " + ch.ID
			switch {
			case o == nil || o.child != ch.ID:
				c.fail("child", where, "op %d: no child_started for %s (%+v)", it.Op, ch.ID, o)
				stopped = true
				continue
			case len(o.payloads) != 1:
				c.fail("child", where, "op %d: %d ends of child %s in the log, want 1", it.Op, len(o.payloads), ch.ID)
			}
			cev, err := c.s.ListEvents(ctx, ch.ID, 0)
			if err != nil {
				return fmt.Errorf("events of child %s: %w", ch.ID, err)
			}
			if cend := ended(cev); cend.IsZero() {
				c.fail("child", cw, "the child run has no end, yet its parent heard of one")
			} else if late := o.endAt.Sub(cend); len(o.payloads) > 0 && late > c.bound {
				c.fail("child", cw, "its parent heard of its end %v after it, more than the %v allowed", late.Round(time.Millisecond), c.bound)
			}
			if err := c.checkRun(ctx, ch); err != nil {
				return err
			}
			exp.add(HookStream, weir.WorkflowWriterID, []byte(fmt.Sprintf("child %s ok", ch.ID)))
		case ItemRecv:
			// The run took the first Payloads messages of its topic, each
			// once, in log order, and left the others.
			got := len(msgs[it.Topic])
			if got < it.Payloads {
				c.fail("message", where, "topic %s: %d messages in the log, but the run took %d", it.Topic, got, it.Payloads)
			}
			if run.Status.Terminal() && taken[it.Topic] != it.Payloads {
				c.fail("message", where, "topic %s: the run's end says it took %d messages, want %d (taken %v)", it.Topic, taken[it.Topic], it.Payloads, taken)
			}
			for k := range it.Payloads {
				exp.add(HookStream, weir.WorkflowWriterID, []byte(fmt.Sprintf("%s %d", it.Topic, k)))
			}
		case ItemWFWrite:
			for j := range it.Count {
				exp.add(it.Stream, weir.WorkflowWriterID, Chunk(rs.Seed, wfOp(idx), it.Stream, j, 0, it.MinLen, it.MaxLen))
				wfIdx[it.Stream]++
			}
		case ItemSleep:
			if o == nil || !o.fired {
				c.fail("state", where, "sleep at op %d never fired", it.Op)
			}
		case ItemHook:
			// Each payload is in the log once, and taken once, in log
			// order: the stream holds what the takers took, as they took
			// it. A hook closed early has its payloads taken all the same.
			token := HookToken(rs, it.Op)
			c.stats.Hooks++
			if len(it.Takers) > 0 {
				c.stats.Takers++
			}
			if it.CloseEarly {
				c.stats.ClosedHooks++
			}
			if o != nil {
				c.stats.Payloads += len(o.payloads)
			}
			switch {
			case o == nil || o.hooks != 1:
				c.fail("hook", where, "hook %s at op %d: %v hook_created events, want 1", token, it.Op, o)
				stopped = true
			case len(o.payloads) != it.Payloads:
				c.fail("hook", where, "hook %s: %d payloads in the log, want each of %d once", token, len(o.payloads), it.Payloads)
			default:
				for k, p := range o.payloads {
					if string(p) != strconv.Itoa(k) {
						c.fail("hook", where, "hook %s: payload %d is %q, want %d", token, k, p, k)
					}
				}
			}
			if o != nil && it.CloseEarly && (o.disposed != 1 || o.afterDispose > 0) {
				c.fail("hook", where, "hook %s: %d hook_disposed events (want 1), %d payloads after it (want 0)", token, o.disposed, o.afterDispose)
			}
			for k := range it.Payloads {
				exp.add(HookStream, weir.WorkflowWriterID, []byte(fmt.Sprintf("%s %d", token, k)))
			}
		case ItemStep:
			w := stepWriterID(it.Op)
			if it.Group != 0 {
				c.stats.Parallel++
			}
			if o != nil && it.HangUpTo > 0 {
				for _, a := range o.failed {
					if a <= int64(it.HangUpTo) {
						c.stats.TimedOut++
					}
				}
			}
			for i := range it.Outputs {
				exp.touch(it.Outputs[i].Stream, w)
			}
			switch {
			case o == nil || (o.completed == 0 && !o.final):
				c.fail("state", where, "step %s (op %d) has no outcome", it.Name, it.Op)
				stopped = true
			case o.completed != 0:
				a := o.completed
				if it.failsAt(a) {
					c.fail("state", where, "step %s (op %d) completed at attempt %d, but its plan fails it there", it.Name, it.Op, a)
				}
				for i := range it.Outputs {
					out := &it.Outputs[i]
					for seq := range it.CountOn(out, a) {
						exp.add(out.Stream, w, Chunk(rs.Seed, it.Op, out.Stream, seq, it.variant(a), out.MinLen, out.MaxLen))
					}
				}
			default: // failed for good
				if !it.failsForGood() {
					c.fail("state", where, "step %s (op %d) failed for good though its plan lets it succeed: %s", it.Name, it.Op, o.finalErr)
				}
				if !it.Final && it.failsForGood() {
					// Its last allowed attempt hung past its timeout: the
					// step's error is that timeout.
					c.stats.TimeoutFinal++
					if !strings.Contains(o.finalErr, "timed out") && !(c.lost && strings.Contains(o.finalErr, "worker lost")) {
						c.fail("timeout", where, "step %s (op %d) failed for good with %q: want its last attempt's timeout", it.Name, it.Op, o.finalErr)
					}
				}
				if !rs.ContinueOnFail {
					if it.Group != 0 {
						stopAfterGroup = true
					} else {
						stopped = true
					}
				}
			}
			if o != nil && o.completed != 0 && !slices.Contains(o.started, o.completed) {
				c.fail("log", where, "step %s completed at attempt %d with no start recorded", it.Name, o.completed)
			}
		}
	}
	c.stats.Runs++
	switch run.Status {
	case store.RunCompleted:
		c.stats.Completed++
	case store.RunFailed:
		c.stats.Failed++
	}
	for _, o := range ops {
		if o.completed != 0 || o.final {
			c.stats.Steps++
		}
	}
	// Every message acknowledged is in the log once, in the order it was
	// sent (k after k-1); once the run ended, each is taken or left.
	for _, it := range rs.Items {
		if it.Kind != ItemRecv {
			continue
		}
		ms := msgs[it.Topic]
		if len(ms) > it.Payloads+it.Extra {
			c.fail("message", where, "topic %s: %d messages in the log, %d were sent", it.Topic, len(ms), it.Payloads+it.Extra)
		}
		for k, m := range ms {
			if string(m) != strconv.Itoa(k) {
				c.fail("message", where, "topic %s: message %d is %q, want %d: each once, in order", it.Topic, k, m, k)
				break
			}
		}
		c.stats.Messages += len(ms)
		if run.Status.Terminal() && len(ms) > 0 {
			// No messages_taken: the run read none of them (they came
			// after its last look), and took none.
			c.stats.MessagesTaken += taken[it.Topic]
			c.stats.MessagesLeft += len(ms) - taken[it.Topic]
		}
	}
	want := store.RunCompleted
	switch {
	case cancelled:
		want = store.RunCancelled
	case stopped || stopAfterGroup || deadline:
		want = store.RunFailed
	}
	if run.Status != want {
		c.fail("state", where, "run is %s (%s), want %s", run.Status, run.Error, want)
	}
	if deadline && !strings.Contains(run.Error, weir.ErrRunTimeout.Error()) {
		c.fail("deadline", where, "the run failed with %q, not its deadline", run.Error)
	}

	infos, err := c.s.ListStreams(ctx, rs.ID)
	if err != nil {
		return fmt.Errorf("streams of %s: %w", rs.ID, err)
	}
	seen := map[string]bool{}
	for _, info := range infos {
		seen[info.Name] = true
		wantByWriter := exp[info.Name]
		if _, _, err := c.checkStream(ctx, info, wantByWriter, run.Status.Terminal(), func(writer string) (string, bool) {
			// Which attempt did the log commit this writer at, if a step?
			if !strings.HasPrefix(writer, "step/") {
				return "", false
			}
			op, _ := strconv.ParseInt(strings.TrimPrefix(writer, "step/"), 10, 64)
			if o := ops[op]; o != nil && o.completed != 0 {
				return strconv.FormatInt(o.completed, 10), true
			}
			return "", true
		}, nondetWriters(rs)); err != nil {
			return err
		}
	}
	for name, ws := range exp {
		if seen[name] {
			continue
		}
		for w, chunks := range ws {
			if len(chunks) > 0 {
				c.fail("2", where, "stream %q does not exist, but %s committed %d chunks to it", name, w, len(chunks))
			}
		}
	}
	return nil
}

// nondetWriters lists the step writers whose attempts write other bytes.
func nondetWriters(rs *RunSpec) map[string]bool {
	m := map[string]bool{}
	for _, it := range rs.Items {
		if it.Kind == ItemStep && (it.Nondet || it.Final) || it.Kind == ItemCancel || it.Kind == ItemHang {
			m[stepWriterID(it.Op)] = true
		}
	}
	return m
}

// ReadLive reads a stream's whole live view.
func ReadLive(ctx context.Context, s store.Full, id int64) ([]stream.Record, *store.ReadResult, error) {
	var out []stream.Record
	var last *store.ReadResult
	for {
		res, err := s.Read(ctx, &store.ReadParams{StreamID: id, From: int64(len(out)), Limit: 500})
		if err != nil {
			return nil, nil, err
		}
		last = res
		if len(res.Records) == 0 {
			return out, last, nil
		}
		for _, r := range res.Records {
			r.Data = bytes.Clone(r.Data)
			out = append(out, r)
		}
	}
}

type liveEntry struct {
	rec   *stream.Record
	state uint8 // 0 open, 1 committed, 2 void
}

// checkStream checks one stream. want maps each writer the plan knows to
// its committed chunks (nil map: only writers found are checked for
// duplicates and density). commitAttempt says at which attempt the log
// completed a step writer. relaxed lists writers whose live view may hold
// aborts and rewritten seqs. Anonymous data (writer "") is left to the
// caller when want has "" (with any value). It returns the live view and
// the committed data, for the caller's own checks (nil when the offsets
// are not dense).
func (c *checker) checkStream(ctx context.Context, info *store.StreamInfo, want map[string][][]byte, mustClose bool,
	commitAttempt func(string) (string, bool), relaxed map[string]bool) ([]stream.Record, []*stream.Record, error) {
	where := "stream " + info.Path
	live, res, err := ReadLive(ctx, c.s, info.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", info.Path, err)
	}
	// Invariant 3: dense offsets.
	for i := range live {
		if live[i].Offset != int64(i) {
			c.fail("3", where, "record %d has offset %d", i, live[i].Offset)
			return nil, nil, nil
		}
	}
	c.stats.Streams++
	c.stats.Records += len(live)
	if res.NextOffset != int64(len(live)) {
		c.fail("3", where, "next offset %d after %d records", res.NextOffset, len(live))
	}

	// An independent model of the rules' effect on the live view.
	entries := make([]liveEntry, len(live))
	open := map[string][]int{}    // writer -> indexes of its open data
	maxAtt := map[string]int64{}  // writer -> newest attempt seen (invariant 6)
	commits := map[string]int64{} // writer -> committed attempt
	liveSeqs := map[string]map[int64]int{}
	aborted := map[string]bool{}
	closed := false
	for i := range live {
		r := &live[i]
		entries[i].rec = r
		if closed {
			c.fail("4", where, "%v after the close record", r)
		}
		if r.Kind != stream.KindClose && r.Kind != stream.KindData || r.Kind == stream.KindData && r.Attempt > 0 {
			if r.Attempt < maxAtt[r.Writer] {
				c.fail("6", where, "%v after attempt %d of %s began", r, maxAtt[r.Writer], r.Writer)
			}
			maxAtt[r.Writer] = max(maxAtt[r.Writer], r.Attempt)
		}
		switch r.Kind {
		case stream.KindData:
			if r.Digest != stream.Sum(r.Data) {
				c.fail("content", where, "%v: digest does not match its bytes", r)
			}
			if liveSeqs[r.Writer] == nil {
				liveSeqs[r.Writer] = map[int64]int{}
			}
			liveSeqs[r.Writer][r.Seq]++
			if r.Attempt == 0 {
				entries[i].state = 1
				continue
			}
			if r.Writer == weir.WorkflowWriterID {
				c.fail("content", where, "%v: workflow writes are attempt 0", r)
			}
			open[r.Writer] = append(open[r.Writer], i)
		case stream.KindAbort:
			c.stats.Aborts++
			aborted[r.Writer] = true
			keep := open[r.Writer][:0]
			for _, j := range open[r.Writer] {
				if entries[j].rec.Seq >= r.FromSeq() {
					entries[j].state = 2
				} else {
					keep = append(keep, j)
				}
			}
			open[r.Writer] = keep
		case stream.KindCommit:
			if _, dup := commits[r.Writer]; dup {
				c.fail("1", where, "%v: %s committed twice", r, r.Writer)
			}
			commits[r.Writer] = r.Attempt
			for _, j := range open[r.Writer] {
				if entries[j].rec.Seq < r.Count() {
					entries[j].state = 1
				} else {
					entries[j].state = 2
				}
			}
			delete(open, r.Writer)
		case stream.KindClose:
			closed = true
			for w, l := range open {
				for _, j := range l {
					entries[j].state = 2
				}
				delete(open, w)
			}
		}
	}
	if mustClose && (!closed || !res.Closed) {
		c.fail("state", where, "the run ended but the stream is not closed")
	}
	var model []*stream.Record
	for i := range entries {
		if entries[i].state == 1 {
			model = append(model, entries[i].rec)
		}
	}

	// The library's committed filter, and the reader users call.
	var filtered []*stream.Record
	var f stream.Committed
	for i := range live {
		f.Push(&live[i], func(r *stream.Record) {
			if r.Kind == stream.KindData {
				cp := *r
				filtered = append(filtered, &cp)
			}
		})
	}
	var read []*stream.Record
	for r, err := range readPath(ctx, c.s, info.Path, &weir.ReadOptions{View: weir.CommittedView, PageSize: 97}) {
		if err != nil {
			return nil, nil, fmt.Errorf("committed read of %s: %w", info.Path, err)
		}
		if r.Kind == stream.KindData {
			cp := r.Record
			read = append(read, &cp)
		}
	}
	// Invariant 5: the live view with its aborts applied is the committed view.
	if d := diffRecs(model, read); d != "" {
		c.fail("5", where, "live view with aborts applied differs from the committed read: %s", d)
	}
	if d := diffRecs(model, filtered); d != "" {
		c.fail("5", where, "live view with aborts applied differs from stream.Committed: %s", d)
	}
	// Over HTTP, both views are what the store holds.
	if c.base != "" {
		if err := c.checkHTTPViews(ctx, info, live, read, res.Closed); err != nil {
			return nil, nil, err
		}
	}

	// Invariants 1 and 2, and content: per writer, the committed view is
	// exactly the chunks the successful attempt wrote, seqs 0..n-1 once each.
	got := map[string][]*stream.Record{}
	for _, r := range read {
		c.stats.Committed++
		c.stats.Bytes += int64(len(r.Data))
		got[r.Writer] = append(got[r.Writer], r)
	}
	for w, recs := range got {
		if _, known := want[w]; !known {
			c.fail("content", where, "writer %q the plan does not know committed %d chunks", w, len(recs))
		}
	}
	for w, chunks := range want {
		if w == "" {
			continue // the caller's
		}
		recs := got[w]
		for i, r := range recs {
			if r.Seq != int64(i) {
				c.fail("1", where, "committed view of %s: chunk %d has seq %d (duplicate or gap)", w, i, r.Seq)
				break
			}
		}
		if len(recs) != len(chunks) {
			inv := "2"
			if len(recs) > len(chunks) {
				inv = "1"
			}
			c.fail(inv, where, "committed view has %d chunks of %s, want %d", len(recs), w, len(chunks))
		}
		for i := range min(len(recs), len(chunks)) {
			if !bytes.Equal(recs[i].Data, chunks[i]) {
				c.fail("content", where, "committed chunk %d of %s (offset %d, attempt %d) has other bytes than the successful attempt wrote (%d vs %d bytes)",
					i, w, recs[i].Offset, recs[i].Attempt, len(recs[i].Data), len(chunks[i]))
				break
			}
		}
		// The log and the stream agree on the attempt that committed.
		if a, isStep := commitAttempt(w); isStep {
			ca, committed := commits[w]
			switch {
			case a == "" && committed:
				c.fail("log", where, "%s committed on the stream at attempt %d, but the log has no completion", w, ca)
			case a != "" && len(liveSeqs[w]) > 0 && (!committed || strconv.FormatInt(ca, 10) != a):
				c.fail("log", where, "the log completed %s at attempt %s, the stream committed attempt %d (committed %v)", w, a, ca, committed)
			}
		}
		// Deterministic output and workflow writes: each chunk once in the
		// live view too, never aborted.
		if !relaxed[w] && (len(chunks) > 0 || w == weir.WorkflowWriterID) {
			if aborted[w] {
				c.fail("1", where, "%s writes the same bytes on every attempt, yet the live view has an abort of it", w)
			}
			for seq, n := range liveSeqs[w] {
				if n > 1 {
					c.fail("1", where, "live view has seq %d of %s %d times; identical retries must be adopted", seq, w, n)
					break
				}
			}
		}
	}
	return live, read, nil
}

func diffRecs(a, b []*stream.Record) string {
	for i := range min(len(a), len(b)) {
		if a[i].Offset != b[i].Offset || !bytes.Equal(a[i].Data, b[i].Data) {
			return fmt.Sprintf("record %d: %v vs %v", i, a[i], b[i])
		}
	}
	if len(a) != len(b) {
		return fmt.Sprintf("%d vs %d records", len(a), len(b))
	}
	return ""
}

func (c *checker) checkProducer(ctx context.Context, p *ProducerSpec) error {
	info, err := c.s.OpenStream(ctx, &store.OpenStreamParams{Path: p.Path})
	if err != nil {
		return fmt.Errorf("producer stream %s: %w", p.Path, err)
	}
	want := map[string][][]byte{}
	relaxed := map[string]bool{}
	for w := range p.Writers {
		for seq := range p.Count {
			want[producerWriter(w)] = append(want[producerWriter(w)], Chunk(p.Seed, int64(w), "prod", seq, 0, p.MinLen, p.MaxLen))
		}
	}
	_, _, err = c.checkStream(ctx, info, want, false, func(string) (string, bool) { return "", false }, relaxed)
	return err
}

// readPath reads the stream at path through an engine that executes
// nothing (weir.Engine.ReadPath).
func readPath(ctx context.Context, s store.Store, path string, opts *weir.ReadOptions) iter.Seq2[weir.StreamRecord, error] {
	return func(yield func(weir.StreamRecord, error) bool) {
		e, err := weir.New(s, &weir.Config{NoWorker: true})
		if err != nil {
			yield(weir.StreamRecord{}, err)
			return
		}
		defer e.Close(context.WithoutCancel(ctx))
		for r, err := range e.ReadPath(ctx, path, opts) {
			if !yield(r, err) {
				return
			}
		}
	}
}
