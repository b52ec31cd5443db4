package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/client"
)

// Slot handover across processes: FlowSlotRuns runs of bench.slot, each
// one step that holds a slot of a step limiter of concurrency 2 for
// FlowSlotHold, started at once through N `weir server` processes on one
// PostgreSQL database. The steps' own start and end instants (one machine,
// one clock) give what the limiter did: how busy its slots were between
// the first start and the last end (utilization), how long a freed slot
// stayed free while steps waited (handover), and the most steps in flight
// at once (never more than 2, or the bound did not hold).

// SlotWorkflow is the flow bench's step-limiter workflow in `weir server
// --bench-workflows`: one step that takes a slot of SlotInput.Limiter and
// holds it SlotInput.HoldMS.
const SlotWorkflow = "bench.slot"

// SlotInput is bench.slot's input.
type SlotInput struct {
	Limiter string `json:"limiter"`
	HoldMS  int    `json:"hold_ms"`
}

// SlotOutput is when the step's body ran (Unix nanoseconds, its process's
// clock), and where.
type SlotOutput struct {
	Start   int64 `json:"start"`
	End     int64 `json:"end"`
	PID     int   `json:"pid"`
	Attempt int64 `json:"attempt"`
}

// MaxSlotHold bounds bench.slot's hold: any client of the server may start
// it.
const MaxSlotHold = time.Second

// RegisterSlot registers bench.slot on e.
func RegisterSlot(e *weir.Engine) *weir.Workflow[SlotInput, SlotOutput] {
	pid := os.Getpid()
	return weir.Register(e, SlotWorkflow, func(ctx weir.Context, in SlotInput) (SlotOutput, error) {
		hold := time.Duration(in.HoldMS) * time.Millisecond
		if hold <= 0 || hold > MaxSlotHold || in.Limiter == "" {
			return SlotOutput{}, weir.NonRetryable(fmt.Errorf("bench.slot: a limiter and a hold of 1 to %d ms", MaxSlotHold.Milliseconds()))
		}
		return weir.Step(ctx, "call", func(sc weir.StepContext) (SlotOutput, error) {
			out := SlotOutput{Start: time.Now().UnixNano(), PID: pid, Attempt: sc.Attempt()}
			t := time.NewTimer(hold) // the provider's call
			defer t.Stop()
			select {
			case <-t.C:
			case <-sc.Done():
				return SlotOutput{}, context.Cause(sc)
			}
			out.End = time.Now().UnixNano()
			return out, nil
		}, weir.WithLimiter(in.Limiter, nil))
	})
}

// flowSlotLimiter is the step limiter bench.slot's runs share.
const flowSlotLimiter = "bench-flow-slot"

// slotStats is what the steps' instants say of a limiter of bound slots.
type slotStats struct {
	utilization        float64 // busy slot time ÷ (bound × the span)
	handoverP50        time.Duration
	handoverP99        time.Duration
	mostInFlight       int
	span               time.Duration
	retried, processes int
}

// measureSlots computes slotStats from the steps' outputs: a sweep of
// their starts and ends in time (an end before a start at one instant). A
// handover is the time from an end that freed a slot, while steps were
// left to start, to the next start (the earliest freed slot goes first).
func measureSlots(outs []SlotOutput, bound int) slotStats {
	type ev struct {
		at    int64
		start bool
	}
	evs := make([]ev, 0, 2*len(outs))
	var busy int64
	pids := map[int]bool{}
	st := slotStats{}
	for _, o := range outs {
		evs = append(evs, ev{o.Start, true}, ev{o.End, false})
		busy += o.End - o.Start
		pids[o.PID] = true
		if o.Attempt > 1 {
			st.retried++
		}
	}
	st.processes = len(pids)
	slices.SortFunc(evs, func(a, b ev) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		if a.start == b.start {
			return 0
		}
		if !a.start {
			return -1
		}
		return 1
	})
	if len(evs) == 0 {
		return st
	}
	var gaps []time.Duration
	var freed []int64 // when slots freed while steps were left to start
	in, started := 0, 0
	for _, e := range evs {
		if e.start {
			in++
			started++
			st.mostInFlight = max(st.mostInFlight, in)
			if len(freed) > 0 {
				gaps = append(gaps, time.Duration(e.at-freed[0]))
				freed = freed[1:]
			}
			continue
		}
		if started < len(outs) {
			freed = append(freed, e.at)
		}
		in--
	}
	st.span = time.Duration(evs[len(evs)-1].at - evs[0].at)
	if st.span > 0 {
		st.utilization = float64(busy) / (float64(bound) * float64(st.span))
	}
	slices.Sort(gaps)
	if n := len(gaps); n > 0 {
		st.handoverP50 = gaps[n/2]
		st.handoverP99 = gaps[min(n-1, n*99/100)]
	}
	return st
}

// flowSlotRound runs FlowSlotRuns of bench.slot through the servers kids
// and reports what measureSlots says, as extras named with n.
func flowSlotRound(ctx context.Context, v *env, kids []*child, n int, r *Result) error {
	c := v.cfg
	cls := make([]*client.Client, len(kids))
	for i, k := range kids {
		var err error
		if cls[i], err = client.New(k.url, nil); err != nil {
			return err
		}
	}
	if _, err := cls[0].SetLimiter(ctx, &api.Limiter{Name: flowSlotLimiter, Concurrency: 2}); err != nil {
		return err
	}
	in := SlotInput{Limiter: flowSlotLimiter, HoldMS: int(c.FlowSlotHold.Milliseconds())}
	v.prog.phase(fmt.Sprintf("slot handover (N=%d): %d steps of %v on a limit of 2", n, c.FlowSlotRuns, c.FlowSlotHold))
	wctx, cancel := context.WithTimeout(ctx, c.ScaleTimeout)
	defer cancel()
	outs := make([]SlotOutput, c.FlowSlotRuns)
	// Every run is started before any is awaited, so that the line forms
	// in every process at once.
	ids := make([]string, c.FlowSlotRuns)
	for i := range ids {
		ids[i] = fmt.Sprintf("slot-n%d-%04d", n, i)
		if _, _, err := cls[i%len(cls)].Start(wctx, SlotWorkflow, in, &client.StartOptions{ID: ids[i]}); err != nil {
			return fmt.Errorf("start %s: %w", ids[i], err)
		}
	}
	// Awaited one at a time: the steps' own instants are the figures,
	// and a hundred clients polling at once would take the two cores'
	// time from the servers being measured.
	err := each(wctx, len(ids), 1, func(ctx context.Context, i int) error {
		run, err := cls[i%len(cls)].Wait(ctx, ids[i])
		if err != nil {
			return err
		}
		if run.Status != "completed" {
			return fmt.Errorf("run %s ended %s: %s", ids[i], run.Status, run.Error)
		}
		if err := json.Unmarshal(run.Output, &outs[i]); err != nil {
			return fmt.Errorf("run %s's output: %w", ids[i], err)
		}
		v.prog.add(1)
		return nil
	})
	if err != nil {
		return err
	}
	st := measureSlots(outs, 2)
	r.extra(fmt.Sprintf("slot_utilization_pct_n%d", n), 100*st.utilization)
	r.extra(fmt.Sprintf("slot_handover_p50_ms_n%d", n), float64(st.handoverP50.Microseconds())/1000)
	r.extra(fmt.Sprintf("slot_handover_p99_ms_n%d", n), float64(st.handoverP99.Microseconds())/1000)
	r.extra(fmt.Sprintf("slot_most_in_flight_n%d", n), float64(st.mostInFlight))
	r.extra(fmt.Sprintf("slot_processes_n%d", n), float64(st.processes))
	r.extra(fmt.Sprintf("slot_retried_n%d", n), float64(st.retried))
	if st.mostInFlight > 2 {
		r.Notes = append(r.Notes, fmt.Sprintf("THE STEP LIMIT DID NOT HOLD (N=%d): %d steps in flight at once, the limit is 2", n, st.mostInFlight))
	}
	if n == 3 {
		r.target("3 processes sharing a step limit of 2 keep its slots ≥ 90 % busy", st.utilization >= 0.9)
	}
	return nil
}
