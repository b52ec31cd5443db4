package runwait

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
)

func TestOf(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	now := at(10_000)
	leased := func(r store.Run) *store.Run { r.LeaseOwner, r.LeaseExpires = "w1", now.Add(time.Minute); return &r }
	running := store.Run{ID: "r", Status: store.RunRunning, CreatedAt: t0, UpdatedAt: at(100)}
	started := store.Event{Type: store.EventRunStarted, At: at(1)}
	step := func(op, attempt int64, ms int) store.Event {
		return store.Event{Type: store.EventStepStarted, Op: op, Name: "think", Attempt: attempt, At: at(ms)}
	}
	cases := []struct {
		name   string
		run    *store.Run
		events []store.Event
		hooks  []*store.HookInfo
		want   []Wait
	}{
		{name: "ended", run: &store.Run{Status: store.RunCompleted}},
		{name: "pending", run: &store.Run{Status: store.RunPending, CreatedAt: t0},
			want: []Wait{{Kind: Worker, Since: t0}}},
		{name: "pending, due later", run: &store.Run{Status: store.RunPending, CreatedAt: t0, WakeAt: now.Add(time.Hour)},
			want: []Wait{{Kind: Scheduled, Since: t0, Until: now.Add(time.Hour)}}},
		{name: "pending, was due", run: &store.Run{Status: store.RunPending, CreatedAt: t0, WakeAt: at(500)},
			want: []Wait{{Kind: Worker, Since: at(500)}}},
		{name: "a step runs", run: leased(running), events: []store.Event{started, step(1, 1, 5)},
			want: []Wait{{Kind: Step, Name: "think", Op: 1, Attempt: 1, Since: at(5)}}},
		{name: "its worker died", run: &store.Run{Status: store.RunRunning, CreatedAt: t0, UpdatedAt: at(100), LeaseOwner: "w1", LeaseExpires: at(9000)},
			events: []store.Event{started, step(1, 1, 5)},
			want:   []Wait{{Kind: Worker, Since: at(9000)}, {Kind: Step, Name: "think", Op: 1, Attempt: 1, Since: at(5)}}},
		{name: "a step done, workflow code runs", run: leased(running),
			events: []store.Event{started, step(1, 1, 5), {Type: store.EventStepCompleted, Op: 1, Attempt: 1, At: at(9)}}},
		{name: "backoff", run: &store.Run{Status: store.RunRunning, CreatedAt: t0, UpdatedAt: at(20), WakeAt: at(10_150)},
			events: []store.Event{started, step(1, 1, 5), {Type: store.EventStepFailed, Op: 1, Name: "think", Attempt: 1, At: at(20), WakeAt: at(10_150), Error: "boom"}},
			want:   []Wait{{Kind: Retry, Name: "think", Op: 1, Attempt: 1, Since: at(20), Until: at(10_150)}}},
		{name: "the retry runs", run: leased(running),
			events: []store.Event{started, step(1, 1, 5), {Type: store.EventStepFailed, Op: 1, Name: "think", Attempt: 1, At: at(20), WakeAt: at(170)}, step(1, 2, 170)},
			want:   []Wait{{Kind: Step, Name: "think", Op: 1, Attempt: 2, Since: at(170)}}},
		{name: "failed for good", run: leased(running),
			events: []store.Event{started, step(1, 1, 5), {Type: store.EventStepFailed, Op: 1, Name: "think", Attempt: 1, At: at(20), Final: true}}},
		{name: "a timer", run: &store.Run{Status: store.RunRunning, CreatedAt: t0, UpdatedAt: at(30), WakeAt: at(60_000)},
			events: []store.Event{started, {Type: store.EventSleepScheduled, Op: 1, At: at(30), WakeAt: at(60_000)}},
			want:   []Wait{{Kind: Timer, Op: 1, Since: at(30), Until: at(60_000)}}},
		{name: "a timer fired", run: leased(running),
			events: []store.Event{started, {Type: store.EventSleepScheduled, Op: 1, At: at(30), WakeAt: at(60)}, {Type: store.EventSleepFired, Op: 1, At: at(61)}}},
		{name: "a hook, no timeout", run: &store.Run{Status: store.RunRunning, CreatedAt: t0, UpdatedAt: at(40), WakeAt: now.Add(100 * 365 * 24 * time.Hour)},
			events: []store.Event{started, {Type: store.EventHookCreated, Op: 1, Name: "tok", At: at(40)}},
			hooks:  []*store.HookInfo{{Token: "tok", Op: 1}},
			want:   []Wait{{Kind: Hook, Name: "tok", Op: 1, Since: at(40)}}},
		{name: "a hook with a timeout, a payload taken", run: &store.Run{Status: store.RunRunning, CreatedAt: t0, UpdatedAt: at(40), WakeAt: at(70_000)},
			events: []store.Event{started, {Type: store.EventHookCreated, Op: 1, Name: "tok", At: at(40)}, {Type: store.EventHookReceived, Op: 1, Name: "tok", At: at(50)},
				{Type: store.EventSleepScheduled, Op: 2, At: at(51), WakeAt: at(70_000)}},
			hooks: []*store.HookInfo{{Token: "tok", Op: 1, Received: 1}},
			want:  []Wait{{Kind: Hook, Name: "tok", Op: 1, Since: at(50), Until: at(70_000)}}},
		{name: "a hook gone on from, awaited again", run: &store.Run{Status: store.RunRunning, CreatedAt: t0, UpdatedAt: at(90), WakeAt: now.Add(200 * 365 * 24 * time.Hour)},
			events: []store.Event{started, {Type: store.EventHookCreated, Op: 1, Name: "tok", At: at(40)}, {Type: store.EventHookReceived, Op: 1, Name: "tok", At: at(50)},
				step(2, 1, 60), {Type: store.EventStepCompleted, Op: 2, Attempt: 1, At: at(90)}},
			hooks: []*store.HookInfo{{Token: "tok", Op: 1, Received: 1}},
			want:  []Wait{{Kind: Hook, Name: "tok", Op: 1, Since: at(50)}}},
		{name: "a hook gone on from, a step runs", run: leased(running),
			events: []store.Event{started, {Type: store.EventHookCreated, Op: 1, Name: "tok", At: at(40)}, {Type: store.EventHookReceived, Op: 1, Name: "tok", At: at(50)},
				step(2, 1, 60)},
			hooks: []*store.HookInfo{{Token: "tok", Op: 1, Received: 1}},
			want:  []Wait{{Kind: Step, Name: "think", Op: 2, Attempt: 1, Since: at(60)}}},
		{name: "the timeout lost, a step runs", run: leased(running),
			events: []store.Event{started, {Type: store.EventHookCreated, Op: 1, Name: "tok", At: at(40)}, {Type: store.EventSleepScheduled, Op: 2, At: at(41), WakeAt: at(70_000)},
				{Type: store.EventHookReceived, Op: 1, Name: "tok", At: at(50)}, {Type: store.EventSelected, Op: 3, At: at(51)}, step(4, 1, 60)},
			hooks: []*store.HookInfo{{Token: "tok", Op: 1, Received: 1}},
			want:  []Wait{{Kind: Step, Name: "think", Op: 4, Attempt: 1, Since: at(60)}}},
		{name: "waiting for a limiter", run: leased(running),
			events: []store.Event{started, {Type: store.EventLimitWaiting, Op: 1, Name: "think", Attempt: 1, At: at(5), Data: []byte(`{"limiter":"openai","reason":"rate"}`)}},
			want:   []Wait{{Kind: Limiter, Name: "think", Op: 1, Attempt: 1, Since: at(5), Limit: "openai", Ahead: -1}}},
		{name: "the limiter let it go", run: leased(running),
			events: []store.Event{started, {Type: store.EventLimitWaiting, Op: 1, Name: "think", Attempt: 1, At: at(5), Data: []byte(`{"limiter":"openai"}`)}, step(1, 1, 9)},
			want:   []Wait{{Kind: Step, Name: "think", Op: 1, Attempt: 1, Since: at(9)}}},
		{name: "a hook disposed", run: leased(running),
			events: []store.Event{started, {Type: store.EventHookCreated, Op: 1, Name: "tok", At: at(40)}, {Type: store.EventHookDisposed, Op: 1, Name: "tok", At: at(50)}},
			hooks:  []*store.HookInfo{{Token: "tok", Op: 1, Disposed: true}}},
		{name: "a child", run: &store.Run{Status: store.RunRunning, CreatedAt: t0, UpdatedAt: at(40), WakeAt: at(70_000)},
			events: []store.Event{started, {Type: store.EventHookCreated, Op: 2, Name: "child_x", At: at(40)}, {Type: store.EventChildStarted, Op: 2, Name: "r-2", At: at(41)}},
			hooks:  []*store.HookInfo{{Token: "child_x", Op: 2}},
			want:   []Wait{{Kind: Child, Name: "r-2", Op: 2, Since: at(41)}}},
		{name: "a child ended", run: leased(running),
			events: []store.Event{started, {Type: store.EventHookCreated, Op: 2, Name: "child_x", At: at(40)}, {Type: store.EventChildStarted, Op: 2, Name: "r-2", At: at(41)},
				{Type: store.EventHookReceived, Op: 2, Name: "child_x", At: at(90)}},
			hooks: []*store.HookInfo{{Token: "child_x", Op: 2, Received: 1}}},
		{name: "parallel steps after a hook", run: leased(running),
			events: []store.Event{started, {Type: store.EventHookCreated, Op: 1, Name: "tok", At: at(2)}, step(2, 1, 3), step(3, 1, 4)},
			hooks:  []*store.HookInfo{{Token: "tok", Op: 1}},
			want: []Wait{{Kind: Hook, Name: "tok", Op: 1, Since: at(2)},
				{Kind: Step, Name: "think", Op: 2, Attempt: 1, Since: at(3)}, {Kind: Step, Name: "think", Op: 3, Attempt: 1, Since: at(4)}}},
		{name: "a hook, then a run event, then its timeout", run: &store.Run{Status: store.RunRunning, CreatedAt: t0, UpdatedAt: at(40), WakeAt: at(70_000)},
			events: []store.Event{started, {Type: store.EventHookCreated, Op: 1, Name: "tok", At: at(40)}, {Type: store.EventSet, Op: 2, Name: "status", At: at(41)},
				{Type: store.EventSleepScheduled, Op: 3, At: at(42), WakeAt: at(70_000)}},
			hooks: []*store.HookInfo{{Token: "tok", Op: 1}},
			want:  []Wait{{Kind: Hook, Name: "tok", Op: 1, Since: at(40), Until: at(70_000)}}},
		{name: "parked for a message", run: &store.Run{Status: store.RunRunning, CreatedAt: t0, UpdatedAt: at(80), WakeAt: at(60_000)},
			events: []store.Event{started, {Type: store.EventMessagesTaken, At: at(70)}},
			want:   []Wait{{Kind: Park, Since: at(80), Until: at(60_000)}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Of(c.run, c.events, c.hooks, now)
			if !reflect.DeepEqual(got, c.want) && (len(got) != 0 || len(c.want) != 0) {
				t.Errorf("Of:\n got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	until := time.Date(2026, 12, 2, 12, 0, 1, 500e6, time.UTC)
	for _, c := range []struct {
		w    Wait
		want string
	}{
		{Wait{Kind: Worker}, "a worker to claim it"},
		{Wait{Kind: Worker, Name: "v1"}, `a worker of version "v1" to claim it`},
		{Wait{Kind: Step, Name: "think", Attempt: 2}, `step "think", attempt 2, running`},
		{Wait{Kind: Retry, Name: "think", Attempt: 1, Until: until}, `the retry of step "think" after attempt 1 failed, until 2026-12-02T12:00:01.5Z`},
		{Wait{Kind: Hook, Name: "approve"}, `a payload for hook "approve"`},
		{Wait{Kind: Child, Name: "r-2"}, "child run r-2 to end"},
		{Wait{Kind: Limiter, Name: "think", Attempt: 1, Limit: "openai", Ahead: 3}, `step "think", attempt 1, waiting for the limiter "openai": 3 ahead`},
	} {
		if got := c.w.String(); !strings.HasPrefix(got, c.want) {
			t.Errorf("%+v: %q, want it to begin %q", c.w, got, c.want)
		}
	}
	if got := Summary([]Wait{{Kind: Timer}, {Kind: Hook, Name: "h"}}); got != `a timer; a payload for hook "h"` {
		t.Errorf("Summary: %q", got)
	}
}
