package difftest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/world"
)

// The World's operations: events of every type on a few runs, steps, hooks
// and waits, their streams, and the queue. Ids the stores mint (event ids,
// leases) differ by backend and are left out of the outcomes; everything
// else must be equal.

var (
	// r1 is a Go run's id (diff_test.go's runs): a World event naming it
	// is refused alike (issue 21: it answered 500).
	worldRuns  = []string{"wrun_a", "wrun_b", "r1"}
	worldSteps = []string{"step_1", "step_2"}
	worldHooks = []string{"hook_1", "hook_2"}
	worldToks  = []string{"tok_1", "tok_2"}
	worldWaits = []string{"wait_1"}
	// The last two are refused alike: a dot segment, and a name that is
	// not UTF-8 (SQLite took both; PostgreSQL refused the second).
	worldNames = []string{"strm_1", "strm_2", "strm_1", "strm_2", "..", "strm_\xff"}
	worldMsgs  = []string{"msg_1", "msg_2", "msg_3", "msg_\r\nx"}
	worldTypes = []world.EventType{world.RunCreated, world.RunStarted, world.RunCompleted, world.RunFailed,
		world.RunCancelled, world.StepCreated, world.StepStarted, world.StepStarted, world.StepCompleted,
		world.StepFailed, world.StepRetrying, world.HookCreated, world.HookReceived, world.HookDisposed,
		world.WaitCreated, world.WaitCompleted}
)

func (g *gen) worldOp() *op {
	now := g.clk.Now()
	switch g.n(10) {
	case 0, 1, 2, 3:
		return g.worldEvent(now)
	case 4:
		run, name := g.pick(worldRuns), g.pick(worldNames)
		return &op{desc: fmt.Sprintf("WorldOpenStream %s %s", run, name), run: func(ctx context.Context, sd *side) string {
			si, err := sd.s.WorldOpenStream(ctx, run, name)
			sd.learn(si)
			return sd.showStream(si) + " " + sd.norm(err)
		}}
	case 5:
		run, name := g.pick(worldRuns), g.pick(worldNames)
		p := store.AppendParams{Writer: world.StepWriter(g.pick(worldSteps)), Attempt: int64(1 + g.n(2)),
			FirstSeq: int64(g.n(3)), Chunks: g.chunks(2), Late: true}
		path := store.RunStreamPath(run, name)
		return &op{desc: fmt.Sprintf("World append %s %+v", path, p), run: func(ctx context.Context, sd *side) string {
			q := p
			q.StreamID = sd.id(path)
			res, err := sd.s.Append(ctx, &q)
			return fmt.Sprintf("%+v %s", res, sd.norm(err))
		}}
	case 6:
		p := store.WorldCloseParams{RunID: g.pick(worldRuns), Name: g.pick(worldNames)}
		if g.chance(2) {
			p.StepID, p.Attempt = g.pick(worldSteps), int64(1+g.n(2))
		}
		return &op{desc: fmt.Sprintf("WorldCloseStream %+v", p), run: func(ctx context.Context, sd *side) string {
			closed, err := sd.s.WorldCloseStream(ctx, &p)
			return fmt.Sprintf("%v %s", closed, sd.norm(err))
		}}
	case 7, 8:
		return g.queueOp(now)
	default:
		return g.worldLook()
	}
}

func (g *gen) worldEvent(now time.Time) *op {
	typ := worldTypes[g.n(len(worldTypes))]
	req := world.Request{RunID: g.pick(worldRuns), Type: typ}
	var data any
	switch typ {
	case world.RunCreated:
		data = map[string]any{"deploymentId": "d", "workflowName": g.pick(workflows), "input": []int{g.n(9)}}
	case world.RunStarted:
		if g.chance(3) { // resilient start
			data = map[string]any{"deploymentId": "d", "workflowName": "wf1", "input": []int{}}
		}
	case world.RunCompleted:
		data = map[string]any{"output": g.n(9)}
	case world.RunFailed:
		data = map[string]any{"error": map[string]string{"message": "boom"}, "errorCode": "USER_ERROR"}
	case world.StepCreated:
		req.CorrelationID = g.pick(worldSteps)
		data = map[string]any{"stepName": "s", "input": []int{1}}
	case world.StepStarted, world.StepCompleted, world.StepFailed:
		req.CorrelationID = g.pick(worldSteps)
		data = map[string]any{"result": g.n(9), "error": "e"}
	case world.StepRetrying:
		req.CorrelationID = g.pick(worldSteps)
		data = map[string]any{"error": "e", "retryAfter": now.Add(time.Duration(g.n(3)) * time.Second)}
	case world.HookCreated:
		req.CorrelationID = g.pick(worldHooks)
		data = map[string]any{"token": g.pick(worldToks)}
	case world.HookReceived, world.HookDisposed:
		req.CorrelationID = g.pick(worldHooks)
	case world.WaitCreated:
		req.CorrelationID = g.pick(worldWaits)
		data = map[string]any{"resumeAt": now.Add(time.Second)}
	case world.WaitCompleted:
		req.CorrelationID = g.pick(worldWaits)
	}
	if data != nil {
		req.Data, _ = json.Marshal(data)
	}
	return &op{desc: fmt.Sprintf("WorldEvent %s %s %s %s", req.RunID, req.Type, req.CorrelationID, req.Data),
		run: func(ctx context.Context, sd *side) string {
			res, err := sd.s.WorldEvent(ctx, &store.WorldEventParams{Request: req})
			return showWorldResult(res) + " " + sd.norm(err)
		}}
}

func showWorldResult(r *store.WorldEventResult) string {
	if r == nil {
		return "-"
	}
	var b strings.Builder
	for _, e := range r.Events {
		fmt.Fprintf(&b, "%s", showWorldEvent(&e))
	}
	if r.Run != nil {
		fmt.Fprintf(&b, " run=%s", showWorldRun(r.Run))
	}
	if r.Step != nil {
		j, _ := json.Marshal(r.Step)
		fmt.Fprintf(&b, " step=%s closes=%v", j, r.Step.Closes)
	}
	if r.Hook != nil {
		fmt.Fprintf(&b, " hook=%+v", *r.Hook)
	}
	if r.Wait != nil {
		fmt.Fprintf(&b, " wait=%+v", *r.Wait)
	}
	return b.String()
}

func showWorldEvent(e *world.Event) string {
	return fmt.Sprintf("{%s #%d %s %s %s %v}", e.RunID, e.Slot, e.EventType, e.CorrelationID, e.EventData, e.CreatedAt)
}

func showWorldRun(r *world.Run) string {
	b, _ := json.Marshal(r)
	return fmt.Sprintf("%s events=%d", b, r.Events)
}

func (g *gen) queueOp(now time.Time) *op {
	switch g.n(4) {
	case 0:
		p := store.EnqueueParams{ID: g.pick(worldMsgs), QueueName: "__wkf_workflow_" + g.pick(workflows) + g.pick([]string{"", "", "", "\n"}),
			Payload: json.RawMessage(`{"runId":"wrun_a"}`), Target: "http://app", RunID: g.pick(worldRuns),
			Delay: time.Duration(g.n(3)) * time.Second, Now: now}
		if g.chance(2) {
			p.IdempotencyKey = g.pick([]string{"k1", "k2"})
		}
		return &op{desc: fmt.Sprintf("Enqueue %+v", p), run: func(ctx context.Context, sd *side) string {
			m, created, err := sd.s.Enqueue(ctx, &p)
			return fmt.Sprintf("%s created=%v %s", showMessage(m), created, sd.norm(err))
		}}
	case 1:
		p := store.ClaimMessagesParams{Owner: g.pick([]string{"o1", "o2"}), Limit: 1 + g.n(2),
			Lease: time.Duration(1+g.n(5)) * time.Second, Now: now}
		return &op{desc: fmt.Sprintf("ClaimMessages %+v", p), run: func(ctx context.Context, sd *side) string {
			ms, err := sd.s.ClaimMessages(ctx, &p)
			var b strings.Builder
			for _, m := range ms {
				sd.leases[m.ID] = m.Lease
				b.WriteString(showMessage(m))
			}
			return b.String() + " " + sd.norm(err)
		}}
	case 2:
		id := g.pick(worldMsgs)
		p := store.SettleParams{ID: id, DeliverAt: now.Add(time.Duration(g.n(3)) * time.Second), Now: now, LastError: "x"}
		switch g.n(5) {
		case 0:
			p.Done = true
		case 1:
			p.Dead = true
		case 2:
			p.Failed = true
		case 3:
			p.Back = true // put back undelivered: failures and attempt kept
		}
		stale := g.chance(5)
		return &op{desc: fmt.Sprintf("SettleMessage %+v stale=%v", p, stale), run: func(ctx context.Context, sd *side) string {
			q := p
			q.Lease = sd.leases[id]
			if stale {
				q.Lease = "lse_stale"
			}
			return sd.norm(sd.s.SettleMessage(ctx, &q))
		}}
	default:
		state := g.pick([]string{"pending", "dead"})
		redeliver := g.chance(3)
		id := g.pick(worldMsgs)
		return &op{desc: fmt.Sprintf("Messages %s (redeliver %s first: %v)", state, id, redeliver), run: func(ctx context.Context, sd *side) string {
			var out strings.Builder
			if redeliver {
				out.WriteString(sd.norm(sd.s.RedeliverMessage(ctx, id)) + " ")
			}
			ms, err := sd.s.Messages(ctx, &store.MessagesParams{State: state})
			for _, m := range ms {
				out.WriteString(showMessage(m))
			}
			due, err2 := sd.s.NextMessageDue(ctx)
			return fmt.Sprintf("%s %s due=%v %s", out.String(), sd.norm(err), due, sd.norm(err2))
		}}
	}
}

func showMessage(m *store.Message) string {
	if m == nil {
		return "-"
	}
	c := *m
	c.Lease = ""
	return fmt.Sprintf("%+v", c)
}

func (g *gen) worldLook() *op {
	run := g.pick(worldRuns)
	switch g.n(4) {
	case 0:
		return &op{desc: "WorldRun " + run, run: func(ctx context.Context, sd *side) string {
			r, err := sd.s.WorldRun(ctx, run)
			if r == nil {
				return sd.norm(err)
			}
			return showWorldRun(r) + " " + sd.norm(err)
		}}
	case 1:
		p := store.WorldListParams{RunID: run, Limit: g.n(4), Desc: g.chance(2)}
		if g.chance(3) {
			p.RunID, p.CorrelationID = "", g.pick(worldSteps)
		}
		return &op{desc: fmt.Sprintf("WorldEvents %+v", p), run: func(ctx context.Context, sd *side) string {
			page, err := sd.s.WorldEvents(ctx, &p)
			if page == nil {
				return sd.norm(err)
			}
			var b strings.Builder
			for _, e := range page.Data {
				b.WriteString(showWorldEvent(&e))
			}
			return fmt.Sprintf("%s more=%v %s", b.String(), page.NextCursor != "", sd.norm(err))
		}}
	case 2:
		p := store.WorldListParams{RunID: run}
		if g.chance(2) {
			p.RunID = ""
		}
		return &op{desc: fmt.Sprintf("WorldHooks %+v", p), run: func(ctx context.Context, sd *side) string {
			page, err := sd.s.WorldHooks(ctx, &p)
			if page == nil {
				return sd.norm(err)
			}
			return fmt.Sprintf("%+v %s", page.Data, sd.norm(err))
		}}
	default:
		return &op{desc: "WorldSteps and WorldStreams " + run, run: func(ctx context.Context, sd *side) string {
			page, err := sd.s.WorldSteps(ctx, &store.WorldListParams{RunID: run})
			names, err2 := sd.s.WorldStreams(ctx, run)
			if page == nil {
				return sd.norm(err)
			}
			j, _ := json.Marshal(page.Data)
			return fmt.Sprintf("%s %s %v %s", j, sd.norm(err), names, sd.norm(err2))
		}}
	}
}
