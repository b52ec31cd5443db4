package storetest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
)

// testMessages checks messages to a run (SendMessage) and run events (a
// Advance's event_set events, GetRunEvent, ListRunEvents,
// ListRunEventsPage).
func testMessages(t *testing.T, h harness) {
	t.Run("SendKeepsMessagesInTheLog", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		send := func(p store.SendMessageParams) (*store.MessageSent, error) {
			return s.SendMessage(ctx(t), &p)
		}
		first, err := send(store.SendMessageParams{RunID: "r1", Topic: "chat", Payload: []byte(`"hi"`), IdempotencyKey: "k", RequestDigest: []byte("d")})
		must(t, err)
		again, err := send(store.SendMessageParams{RunID: "r1", Topic: "chat", Payload: []byte(`"hi"`), IdempotencyKey: "k", RequestDigest: []byte("d")})
		must(t, err)
		if first.Duplicate || !again.Duplicate || again.Seq != first.Seq || first.Topic != "chat" || first.RunID != "r1" {
			t.Fatalf("sent %+v, then again %+v", first, again)
		}
		_, err = send(store.SendMessageParams{RunID: "r1", Topic: "chat", Payload: []byte(`"other"`), IdempotencyKey: "k", RequestDigest: []byte("other")})
		wantErr(t, err, store.ErrKeyReused)
		second, err := send(store.SendMessageParams{RunID: "r1", Topic: "other", Payload: []byte(`2`)})
		must(t, err)
		evs, err := s.ListEvents(ctx(t), "r1", 0)
		must(t, err)
		var got []string
		for _, e := range evs {
			if e.Type == store.EventMessageReceived {
				got = append(got, fmt.Sprintf("%d %s %s op%d", e.Seq, e.Name, e.Data, e.Op))
			}
		}
		if want := []string{fmt.Sprintf("%d chat \"hi\" op0", first.Seq), fmt.Sprintf("%d other 2 op0", second.Seq)}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("message events %q, want %q", got, want)
		}
		// A parked run is claimable at once.
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Release: true, WakeAt: time.Now().Add(24 * time.Hour)}))
		_, err = send(store.SendMessageParams{RunID: "r1", Topic: "chat", Payload: []byte(`3`)})
		must(t, err)
		runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 1, LeaseTTL: ttl})
		must(t, err)
		if len(runs) != 1 {
			t.Fatal("a message did not wake the parked run")
		}
		// The run ends: it takes no more, but a message sent again with
		// its key still gets its first reply.
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: runs[0].LeaseEpoch, Status: store.RunCompleted}))
		_, err = send(store.SendMessageParams{RunID: "r1", Topic: "chat", Payload: []byte(`4`)})
		wantErr(t, err, store.ErrGone)
		again, err = send(store.SendMessageParams{RunID: "r1", Topic: "chat", Payload: []byte(`"hi"`), IdempotencyKey: "k", RequestDigest: []byte("d")})
		if err != nil || !again.Duplicate {
			t.Fatalf("sent again after the end: %+v %v", again, err)
		}
	})

	t.Run("MessagesWakeWhatWaits", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "w")
		claim := func() []*store.Run {
			runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 1, LeaseTTL: ttl})
			must(t, err)
			return runs
		}
		send := func(topic string) {
			_, err := s.SendMessage(ctx(t), &store.SendMessageParams{RunID: "w", Topic: topic, Payload: []byte(`1`)})
			must(t, err)
		}
		// Parked waiting for topic a: a message on b waits in the log.
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "w", LeaseEpoch: epoch, Release: true, WakeAt: time.Now().Add(24 * time.Hour),
			Awaits: &store.Awaits{Topics: []string{"a", "a b"}}}))
		send("b")
		send("a b c")
		if runs := claim(); len(runs) != 0 {
			t.Fatal("a message on a topic the run does not wait for woke it")
		}
		send("a")
		runs := claim()
		if len(runs) != 1 {
			t.Fatal("a message on the topic the run waits for did not wake it")
		}
		// Asleep (Awaits{}): no message wakes it. (Released without a
		// word, nil, every one does: SendKeepsMessagesInTheLog.)
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "w", LeaseEpoch: runs[0].LeaseEpoch, Release: true, WakeAt: time.Now().Add(24 * time.Hour),
			Awaits: &store.Awaits{}, SeenEvents: 3, CheckSeen: true}))
		send("a")
		if runs := claim(); len(runs) != 0 {
			t.Fatal("a message woke a sleeping run")
		}
		ev, err := s.ListEvents(ctx(t), "w", 0)
		must(t, err)
		if len(ev) != 4 {
			t.Fatalf("%d events, want the 4 messages", len(ev))
		}
	})

	t.Run("AParkAfterAnEmptyLookWakesForAMessageSentMeanwhile", func(t *testing.T) {
		// The worker read the log and found nothing (SeenEvents 0); a
		// message came while it still held the lease, which wakes nobody;
		// then it parks waiting for that topic. The store compares the log
		// with what the worker saw, 0 included, and wakes the run at once.
		t.Parallel()
		s := h.New(t)
		claim := func() []*store.Run {
			runs, err := s.ClaimRuns(ctx(t), &store.ClaimRunsParams{Owner: owner, Limit: 1, LeaseTTL: ttl})
			must(t, err)
			return runs
		}
		far := time.Now().Add(24 * time.Hour)
		epoch := startRun(t, s, "e")
		evs, err := s.ListEvents(ctx(t), "e", 0)
		must(t, err)
		if len(evs) != 0 {
			t.Fatalf("a new run's log has %d events", len(evs))
		}
		_, err = s.SendMessage(ctx(t), &store.SendMessageParams{RunID: "e", Topic: "a", Payload: []byte(`1`)})
		must(t, err)
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "e", LeaseEpoch: epoch, Release: true, WakeAt: far,
			Awaits: &store.Awaits{Topics: []string{"a"}}, CheckSeen: true}))
		runs := claim()
		if len(runs) != 1 {
			t.Fatal("a run that parked having seen an empty log stayed parked with a message it waits for in it")
		}
		// Having seen that message, it parks again: nothing is unseen.
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "e", LeaseEpoch: runs[0].LeaseEpoch, Release: true, WakeAt: far,
			Awaits: &store.Awaits{Topics: []string{"a"}}, SeenEvents: 1, CheckSeen: true}))
		if runs := claim(); len(runs) != 0 {
			t.Fatal("a run parked with its whole log seen was claimable")
		}
	})

	t.Run("SendBoundedPerRun", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		startRun(t, s, "full")
		payload := []byte(`"` + strings.Repeat("x", store.MaxMessagePayload-2) + `"`)
		for i := range store.MaxRunMessageBytes / store.MaxMessagePayload {
			if _, err := s.SendMessage(ctx(t), &store.SendMessageParams{RunID: "full", Topic: "t", Payload: payload}); err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
		_, err := s.SendMessage(ctx(t), &store.SendMessageParams{RunID: "full", Topic: "t", Payload: []byte(`1`)})
		wantErr(t, err, store.ErrQuota)
		evs, err := s.ListEvents(ctx(t), "full", 0)
		must(t, err)
		if n := len(evs); n != store.MaxRunMessageBytes/store.MaxMessagePayload {
			t.Fatalf("%d events after the refused message", n)
		}
	})

	t.Run("HookPayloadsShareTheBound", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "hk")
		must(t, s.CreateHook(ctx(t), &store.HookParams{RunID: "hk", LeaseEpoch: epoch, Token: "hk-tok", Op: 1}))
		must(t, s.CreateHook(ctx(t), &store.HookParams{RunID: "hk", LeaseEpoch: epoch, Token: "hk-child", Op: 2}))
		payload := []byte(`"` + strings.Repeat("x", store.MaxHookPayload-2) + `"`)
		half := store.MaxRunMessageBytes / store.MaxMessagePayload / 2
		for i := range half {
			if _, err := s.DeliverHook(ctx(t), &store.DeliverHookParams{Token: "hk-tok", Payload: payload}); err != nil {
				t.Fatalf("payload %d: %v", i, err)
			}
			if _, err := s.SendMessage(ctx(t), &store.SendMessageParams{RunID: "hk", Topic: "t", Payload: payload}); err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
		_, err := s.DeliverHook(ctx(t), &store.DeliverHookParams{Token: "hk-tok", Payload: []byte(`1`)})
		wantErr(t, err, store.ErrQuota)
		_, err = s.SendMessage(ctx(t), &store.SendMessageParams{RunID: "hk", Topic: "t", Payload: []byte(`1`)})
		wantErr(t, err, store.ErrQuota)
		// A child's end (OnlyFirst) is the engine's: never refused.
		if _, err := s.DeliverHook(ctx(t), &store.DeliverHookParams{Token: "hk-child", Payload: []byte(`{"status":"completed"}`), OnlyFirst: true}); err != nil {
			t.Fatalf("a child's end to a full run: %v", err)
		}
		evs, err := s.ListEvents(ctx(t), "hk", 0)
		must(t, err)
		if want := 2 + 2*half + 1; len(evs) != want { // two hook_created
			t.Fatalf("%d events, want %d", len(evs), want)
		}
	})

	t.Run("ForkCountsTheInboxItCopies", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		f, ok := s.(store.Forks)
		if !ok {
			t.Skip("the store has no forks")
		}
		run, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "fsrc", Workflow: "wf", Owner: owner, LeaseTTL: ttl})
		must(t, err)
		adv := func(p store.AdvanceParams) {
			t.Helper()
			p.RunID, p.LeaseEpoch = run.ID, run.LeaseEpoch
			must(t, s.Advance(ctx(t), &p))
		}
		adv(store.AdvanceParams{Events: []store.Event{{Type: store.EventRunStarted}}})
		payload := []byte(`"` + strings.Repeat("x", store.MaxMessagePayload-2) + `"`)
		copied := store.MaxRunMessageBytes/store.MaxMessagePayload - 1
		for i := range copied {
			if _, err := s.SendMessage(ctx(t), &store.SendMessageParams{RunID: "fsrc", Topic: "t", Payload: payload}); err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
		adv(store.AdvanceParams{Events: []store.Event{{Type: store.EventStepStarted, Op: 1, Name: "a", Attempt: 1}}, Fence: &store.Fence{Writer: "step/1", Attempt: 1}})
		adv(store.AdvanceParams{Events: []store.Event{{Type: store.EventStepCompleted, Op: 1, Name: "a", Attempt: 1, Data: []byte(`1`)}},
			Finish: &store.Finish{Writer: "step/1", Attempt: 1, Commit: true}})
		if _, _, err := f.ForkRun(ctx(t), &store.ForkRunParams{Source: "fsrc", ID: "fcopy", Op: 1}); err != nil {
			t.Fatal(err)
		}
		// The fork holds the 15 MiB it copied: one more 1 MiB message, no more.
		if _, err := s.SendMessage(ctx(t), &store.SendMessageParams{RunID: "fcopy", Topic: "t", Payload: payload}); err != nil {
			t.Fatalf("the fork's first message: %v", err)
		}
		_, err = s.SendMessage(ctx(t), &store.SendMessageParams{RunID: "fcopy", Topic: "t", Payload: payload})
		wantErr(t, err, store.ErrQuota)
	})

	t.Run("SendBadInput", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		startRun(t, s, "r1")
		for _, tc := range []struct {
			p    store.SendMessageParams
			want error
		}{
			{store.SendMessageParams{RunID: "nope", Topic: "t", Payload: []byte(`1`)}, store.ErrNotFound},
			{store.SendMessageParams{RunID: "r1", Topic: "", Payload: []byte(`1`)}, store.ErrInvalid},
			{store.SendMessageParams{RunID: "r1", Topic: "a/b", Payload: []byte(`1`)}, store.ErrInvalid},
			{store.SendMessageParams{RunID: "r1", Topic: "t\xff", Payload: []byte(`1`)}, store.ErrInvalid},
			{store.SendMessageParams{RunID: "r1", Topic: string(make([]byte, store.MaxTopicLen+1)), Payload: []byte(`1`)}, store.ErrInvalid},
			{store.SendMessageParams{RunID: "r1", Topic: "t", Payload: make([]byte, store.MaxMessagePayload+1)}, store.ErrTooLarge},
			{store.SendMessageParams{RunID: "", Topic: "t", Payload: []byte(`1`)}, store.ErrInvalid},
		} {
			_, err := s.SendMessage(ctx(t), &tc.p)
			wantErr(t, err, tc.want)
		}
		evs, err := s.ListEvents(ctx(t), "r1", 0)
		must(t, err)
		for _, e := range evs {
			if e.Type == store.EventMessageReceived {
				t.Fatalf("a refused message was recorded: %+v", e)
			}
		}
	})

	t.Run("RunEventsKeepTheLatestValue", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		_, err := s.GetRunEvent(ctx(t), "r1", "status")
		wantErr(t, err, store.ErrNotFound)
		_, err = s.GetRunEvent(ctx(t), "nope", "status")
		wantErr(t, err, store.ErrNotFound)
		_, err = s.GetRunEvent(ctx(t), "r1", "a/b")
		wantErr(t, err, store.ErrInvalid)
		set := func(evs ...store.Event) {
			t.Helper()
			must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Events: evs}))
		}
		set(store.Event{Type: store.EventSet, Op: 1, Name: "status", Data: []byte(`"started"`)},
			store.Event{Type: store.EventSet, Op: 2, Name: "status", Data: []byte(`"half"`)},
			store.Event{Type: store.EventSet, Op: 3, Name: "answer", Data: []byte(`42`)})
		ev, err := s.GetRunEvent(ctx(t), "r1", "status")
		must(t, err)
		if string(ev.Value) != `"half"` || ev.Key != "status" || ev.RunID != "r1" || ev.Seq == 0 || ev.At.IsZero() {
			t.Fatalf("status %+v, want the later value of its record", ev)
		}
		set(store.Event{Type: store.EventSet, Op: 4, Name: "status", Data: []byte(`"done"`)})
		ev2, err := s.GetRunEvent(ctx(t), "r1", "status")
		must(t, err)
		if string(ev2.Value) != `"done"` || ev2.Seq <= ev.Seq {
			t.Fatalf("status %+v after a later record", ev2)
		}
		list, err := s.ListRunEvents(ctx(t), "r1")
		must(t, err)
		if len(list) != 2 || list[0].Key != "answer" || list[1].Key != "status" || string(list[1].Value) != `"done"` {
			t.Fatalf("run events %+v", list)
		}
		// A refused Advance sets nothing.
		err = s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch + 1, Events: []store.Event{{Type: store.EventSet, Op: 5, Name: "status", Data: []byte(`"zombie"`)}}})
		wantErr(t, err, store.ErrLeaseLost)
		if ev, _ := s.GetRunEvent(ctx(t), "r1", "status"); string(ev.Value) != `"done"` {
			t.Fatalf("a refused Advance set %s", ev.Value)
		}
		err = s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Events: []store.Event{{Type: store.EventSet, Op: 5, Name: "", Data: []byte(`1`)}}})
		wantErr(t, err, store.ErrInvalid)
		// Purged with the run; its id may come back with none.
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Status: store.RunCompleted}))
		_, err = s.SendMessage(ctx(t), &store.SendMessageParams{RunID: "r1", Topic: "t", Payload: []byte(`1`), IdempotencyKey: "k"})
		wantErr(t, err, store.ErrGone)
		n, err := s.PurgeRuns(ctx(t), &store.PurgeRunsParams{Before: time.Now().Add(time.Hour)})
		must(t, err)
		if n != 1 {
			t.Fatalf("purged %d runs", n)
		}
		startRun(t, s, "r1")
		if list, err := s.ListRunEvents(ctx(t), "r1"); err != nil || len(list) != 0 {
			t.Fatalf("a purged run's events came back: %+v %v", list, err)
		}
	})

	// A page of run events lists keys in the order of their bytes, each
	// with its value's size and, up to store.MaxInlineEventValue bytes,
	// the value; a larger value is elided (GetRunEvent has it), so that a
	// run's keys of 1 MiB are listed without reading them.
	t.Run("CountMessages", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "c")
		// What a replay of the log says (the engine's rule before the
		// store counted): CountMessages must say the same.
		fromLog := func() *store.MessageCounts {
			t.Helper()
			evs, err := s.ListEvents(ctx(t), "c", 0)
			must(t, err)
			c := &store.MessageCounts{}
			at := map[string]int{}
			for _, ev := range evs {
				switch ev.Type {
				case store.EventMessageReceived:
					if i, ok := at[ev.Name]; ok {
						c.Topics[i].Received++
						continue
					}
					at[ev.Name] = len(c.Topics)
					c.Topics = append(c.Topics, store.TopicCount{Topic: ev.Name, Received: 1})
				case store.EventMessagesTaken:
					if c.Taken == nil {
						c.Taken = map[string]int{}
					}
					must(t, json.Unmarshal(ev.Data, &c.Taken))
				case store.EventRunCompleted, store.EventRunFailed, store.EventRunCancelled:
					c.Ended = true
				}
			}
			return c
		}
		check := func(want *store.MessageCounts) {
			t.Helper()
			got, err := s.CountMessages(ctx(t), "c")
			must(t, err)
			if len(got.Topics) == 0 && len(want.Topics) == 0 {
				got.Topics, want.Topics = nil, nil
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("CountMessages %+v, want %+v", got, want)
			}
			if log := fromLog(); !reflect.DeepEqual(got, log) {
				t.Fatalf("CountMessages %+v, the log says %+v", got, log)
			}
		}
		check(&store.MessageCounts{})
		// Topics in the order of their first messages, among events of
		// other types named alike; payloads up to the bound.
		big := []byte(`"` + strings.Repeat("m", store.MaxMessagePayload-2) + `"`)
		for i, topic := range []string{"b", "a", "b", "b", "é"} {
			if i == 2 {
				must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "c", LeaseEpoch: epoch, Events: []store.Event{
					{Type: store.EventStepCompleted, Op: 1, Name: "a", Data: []byte(`1`)},
					{Type: store.EventSet, Op: 2, Name: "b", Data: []byte(`2`)},
				}}))
			}
			_, err := s.SendMessage(ctx(t), &store.SendMessageParams{RunID: "c", Topic: topic, Payload: big})
			must(t, err)
		}
		check(&store.MessageCounts{Topics: []store.TopicCount{{Topic: "b", Received: 3}, {Topic: "a", Received: 1}, {Topic: "é", Received: 1}}})
		// The end, with what the run took.
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "c", LeaseEpoch: epoch, Status: store.RunCompleted, Events: []store.Event{
			{Type: store.EventMessagesTaken, Data: []byte(`{"b":2,"a":1}`)},
			{Type: store.EventRunCompleted},
		}}))
		check(&store.MessageCounts{
			Topics: []store.TopicCount{{Topic: "b", Received: 3}, {Topic: "a", Received: 1}, {Topic: "é", Received: 1}},
			Ended:  true, Taken: map[string]int{"b": 2, "a": 1},
		})
		// An end without messages_taken: the run took none.
		e2 := startRun(t, s, "d")
		_, err := s.SendMessage(ctx(t), &store.SendMessageParams{RunID: "d", Topic: "x", Payload: []byte(`1`)})
		must(t, err)
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "d", LeaseEpoch: e2, Status: store.RunFailed, Error: "boom",
			Events: []store.Event{{Type: store.EventRunFailed, Error: "boom"}}}))
		got, err := s.CountMessages(ctx(t), "d")
		must(t, err)
		if want := (&store.MessageCounts{Topics: []store.TopicCount{{Topic: "x", Received: 1}}, Ended: true}); !reflect.DeepEqual(got, want) {
			t.Fatalf("CountMessages of a failed run %+v, want %+v", got, want)
		}
		_, err = s.CountMessages(ctx(t), "nope")
		wantErr(t, err, store.ErrNotFound)
		_, err = s.CountMessages(ctx(t), "")
		wantErr(t, err, store.ErrInvalid)
	})

	t.Run("RunEventPages", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		epoch := startRun(t, s, "r1")
		str := func(n int) []byte { return []byte(`"` + strings.Repeat("v", n-2) + `"`) }
		values := map[string][]byte{
			"a":      []byte(`1`),
			"B":      str(store.MaxInlineEventValue),     // inline: at the bound
			"c":      str(store.MaxInlineEventValue + 1), // elided: past it
			"big":    str(store.MaxEventValue),
			"\u00e9": []byte(`"e"`), // after every ASCII key by its bytes
			"Z":      []byte(`null`),
		}
		var evs []store.Event
		for k, v := range values {
			evs = append(evs, store.Event{Type: store.EventSet, Op: int64(len(evs) + 1), Name: k, Data: v})
		}
		must(t, s.Advance(ctx(t), &store.AdvanceParams{RunID: "r1", LeaseEpoch: epoch, Events: evs}))
		want := []string{"B", "Z", "a", "big", "c", "\u00e9"}
		var got []string
		p := &store.ListRunEventsParams{RunID: "r1", Limit: 4}
		for pages := 0; ; pages++ {
			if pages > len(want) {
				t.Fatalf("pages never end: %v", got)
			}
			page, err := s.ListRunEventsPage(ctx(t), p)
			must(t, err)
			for _, ev := range page.Events {
				got = append(got, ev.Key)
				v := values[ev.Key]
				if ev.RunID != "r1" || ev.Seq == 0 || ev.At.IsZero() || ev.Size != len(v) {
					t.Fatalf("run event %q: %+v, want a value of %d bytes", ev.Key, ev, len(v))
				}
				if elided := len(v) > store.MaxInlineEventValue; ev.Elided != elided || elided && ev.Value != nil || !elided && string(ev.Value) != string(v) {
					t.Fatalf("run event %q of %d bytes: elided %v with %d bytes", ev.Key, len(v), ev.Elided, len(ev.Value))
				}
				if full, err := s.GetRunEvent(ctx(t), "r1", ev.Key); err != nil || string(full.Value) != string(v) || full.Elided || full.Size != len(v) || full.Seq != ev.Seq {
					t.Fatalf("GetRunEvent %q: %d bytes, elided %v, %v", ev.Key, len(full.Value), full.Elided, err)
				}
			}
			if !page.More {
				break
			}
			if len(page.Events) != p.Limit {
				t.Fatalf("a page of %d of %d run events says more follow", len(page.Events), p.Limit)
			}
			p.After = page.Events[len(page.Events)-1].Key
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("pages listed %q, want %q", got, want)
		}
		// A page that ends at the last key says none follow.
		page, err := s.ListRunEventsPage(ctx(t), &store.ListRunEventsParams{RunID: "r1", Limit: len(want)})
		must(t, err)
		if len(page.Events) != len(want) || page.More {
			t.Fatalf("a page of every key: %d keys, more %v", len(page.Events), page.More)
		}
		page, err = s.ListRunEventsPage(ctx(t), &store.ListRunEventsParams{RunID: "r1", After: "\u00e9"})
		must(t, err)
		if len(page.Events) != 0 || page.More {
			t.Fatalf("a page after the last key: %+v", page)
		}
		// A run that set none has an empty page; an unknown run has none.
		startRun(t, s, "r2")
		page, err = s.ListRunEventsPage(ctx(t), &store.ListRunEventsParams{RunID: "r2"})
		must(t, err)
		if len(page.Events) != 0 || page.More {
			t.Fatalf("a run without run events: %+v", page)
		}
		_, err = s.ListRunEventsPage(ctx(t), &store.ListRunEventsParams{RunID: "nope"})
		wantErr(t, err, store.ErrNotFound)
		for _, p := range []store.ListRunEventsParams{
			{RunID: ""},
			{RunID: "r1", Limit: -1},
			{RunID: "r1", Limit: store.MaxRunEventPage + 1},
			{RunID: "r1", After: "a/b"},
			{RunID: "r1", After: "a\x00"},
		} {
			_, err := s.ListRunEventsPage(ctx(t), &p)
			wantErr(t, err, store.ErrInvalid)
		}
	})
}
