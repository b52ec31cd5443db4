package bench

import (
	"testing"
	"time"
)

// measureSlots reads a limiter's work from its steps' instants: four steps
// of 10 on a bound of 2, the second pair starting 1 and 3 after the first
// pair's ends, make 40 of busy time over a span of 23 (87 %), handovers of
// 1 and 3, two in flight at most; a third step at once is seen.
func TestMeasureSlots(t *testing.T) {
	ms := func(d int) int64 { return int64(time.Duration(d) * time.Millisecond) }
	outs := []SlotOutput{
		{Start: ms(0), End: ms(10), PID: 1, Attempt: 1},
		{Start: ms(0), End: ms(10), PID: 2, Attempt: 1},
		{Start: ms(11), End: ms(21), PID: 1, Attempt: 2},
		{Start: ms(13), End: ms(23), PID: 3, Attempt: 1},
	}
	st := measureSlots(outs, 2)
	if st.mostInFlight != 2 || st.processes != 3 || st.retried != 1 || st.span != 23*time.Millisecond {
		t.Fatalf("%+v", st)
	}
	if got := st.utilization; got < 0.869 || got > 0.870 {
		t.Fatalf("utilization %v, want 40/46", got)
	}
	if st.handoverP50 != 3*time.Millisecond || st.handoverP99 != 3*time.Millisecond {
		t.Fatalf("handovers p50 %v p99 %v, want 3ms (of 1ms and 3ms)", st.handoverP50, st.handoverP99)
	}
	outs = append(outs, SlotOutput{Start: ms(5), End: ms(6), PID: 1})
	if st := measureSlots(outs, 2); st.mostInFlight != 3 {
		t.Fatalf("three at once: %+v", st)
	}
}
