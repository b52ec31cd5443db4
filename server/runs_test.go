package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/internal/demo"
	"github.com/weirhq/weir/store"
)

func TestStartGetAndResult(t *testing.T) {
	s := newTestServer(t, nil)
	r := s.do("POST", "/v1/runs", `{"workflow":"echo","input":{"a": [1, 2]}}`, "Content-Type", "application/json").want(t, http.StatusCreated)
	var run api.Run
	r.decode(t, &run)
	if run.ID == "" || run.Workflow != "echo" || string(run.Input) != `{"a":[1,2]}` {
		t.Fatalf("started %+v", run)
	}
	if loc := r.header.Get("Location"); loc != "/v1/runs/"+run.ID {
		t.Fatalf("Location %q", loc)
	}
	s.wait(run.ID)
	var got api.Run
	s.do("GET", "/v1/runs/"+run.ID, "").want(t, http.StatusOK).decode(t, &got)
	if got.Status != store.RunCompleted || string(got.Output) != `{"a":[1,2]}` {
		t.Fatalf("got %+v", got)
	}
	if got.CreatedAt.IsZero() || got.UpdatedAt.Before(got.CreatedAt) {
		t.Fatalf("times %v %v", got.CreatedAt, got.UpdatedAt)
	}
}

func TestStartWithIDReturnsTheExistingRun(t *testing.T) {
	s := newTestServer(t, nil)
	s.do("POST", "/v1/runs", `{"workflow":"echo","input":1,"id":"job-1"}`).want(t, http.StatusCreated)
	var again api.Run
	s.do("POST", "/v1/runs", `{"workflow":"echo","input":1,"id":"job-1"}`).want(t, http.StatusOK).decode(t, &again)
	if again.ID != "job-1" {
		t.Fatalf("id %q", again.ID)
	}
	// The same id for another workflow is a conflict.
	s.do("POST", "/v1/runs", `{"workflow":"block","id":"job-1"}`).want(t, http.StatusConflict)
}

func TestStartIdempotencyKey(t *testing.T) {
	s := newTestServer(t, nil)
	body := `{"workflow":"echo","input":{"q":"x"}}`
	var first, second api.Run
	s.do("POST", "/v1/runs", body, "Idempotency-Key", "k1").want(t, http.StatusCreated).decode(t, &first)
	// Whitespace is not a difference.
	s.do("POST", "/v1/runs", `{ "workflow": "echo", "input": { "q": "x" } }`, "Idempotency-Key", "k1").want(t, http.StatusOK).decode(t, &second)
	if first.ID != second.ID {
		t.Fatalf("same key, runs %s and %s", first.ID, second.ID)
	}
	r := s.do("POST", "/v1/runs", `{"workflow":"echo","input":{"q":"y"}}`, "Idempotency-Key", "k1").want(t, http.StatusUnprocessableEntity)
	if !strings.Contains(r.body, "another input") {
		t.Fatalf("reason %q", r.body)
	}
	s.do("POST", "/v1/runs", `{"workflow":"block"}`, "Idempotency-Key", "k1").want(t, http.StatusUnprocessableEntity)
	var other api.Run
	s.do("POST", "/v1/runs", body, "Idempotency-Key", "k2").want(t, http.StatusCreated).decode(t, &other)
	if other.ID == first.ID {
		t.Fatal("two keys, one run")
	}
	s.do("POST", "/v1/runs", `{"workflow":"echo","id":"x"}`, "Idempotency-Key", "k3").want(t, http.StatusBadRequest)
	s.do("POST", "/v1/runs", body, "Idempotency-Key", "a", "Idempotency-Key", "b").want(t, http.StatusBadRequest)
	s.do("POST", "/v1/runs", body, "Idempotency-Key", strings.Repeat("k", 300)).want(t, http.StatusBadRequest)
	// No input and null are the same body.
	s.do("POST", "/v1/runs", `{"workflow":"echo"}`, "Idempotency-Key", "k4").want(t, http.StatusCreated)
	s.do("POST", "/v1/runs", `{"workflow":"echo","input":null}`, "Idempotency-Key", "k4").want(t, http.StatusOK)
}

func TestListRunsPagesAndFilters(t *testing.T) {
	s := newTestServer(t, nil)
	var ids []string
	for i := range 7 {
		wf := "echo"
		if i%3 == 2 {
			wf = "block"
		}
		ids = append(ids, s.start(fmt.Sprintf(`{"workflow":%q,"input":%d}`, wf, i)).ID)
	}
	// Pages of 3, newest first, until no cursor.
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("no end to the pages")
		}
		q := "/v1/runs?limit=3"
		if cursor != "" {
			q += "&before=" + cursor
		}
		var page api.RunList
		s.do("GET", q, "").want(t, http.StatusOK).decode(t, &page)
		for _, r := range page.Runs {
			got = append(got, r.ID)
		}
		if page.NextCursor == "" {
			if len(page.Runs) == 0 && pages > 0 {
				t.Fatal("a cursor led to an empty page")
			}
			break
		}
		cursor = page.NextCursor
	}
	if len(got) != len(ids) {
		t.Fatalf("listed %d runs, want %d", len(got), len(ids))
	}
	for i := range ids {
		if got[i] != ids[len(ids)-1-i] {
			t.Fatalf("order: got %v, started %v", got, ids)
		}
	}

	var blocks api.RunList
	s.do("GET", "/v1/runs?workflow=block", "").want(t, http.StatusOK).decode(t, &blocks)
	if len(blocks.Runs) != 2 || blocks.NextCursor != "" {
		t.Fatalf("workflow filter: %+v", blocks)
	}
	for _, id := range ids {
		if run, _ := s.e.GetRun(t.Context(), id); run.Workflow == "echo" {
			s.wait(id)
		}
	}
	var done api.RunList
	s.do("GET", "/v1/runs?status=completed&workflow=echo", "").want(t, http.StatusOK).decode(t, &done)
	if len(done.Runs) != 5 {
		t.Fatalf("status filter: %d runs", len(done.Runs))
	}
	var none api.RunList
	s.do("GET", "/v1/runs?workflow=nope", "").want(t, http.StatusOK).decode(t, &none)
	if none.Runs == nil || len(none.Runs) != 0 {
		t.Fatalf("empty list %+v: want runs: []", none)
	}
}

// GET /v1/runs searches by id prefix and creation time; bad values are 400.
func TestListRunsSearch(t *testing.T) {
	s := newTestServer(t, nil)
	var runs []api.Run
	for _, id := range []string{"order-1", "order-12", "invoice-1"} {
		runs = append(runs, s.start(fmt.Sprintf(`{"workflow":"echo","id":%q,"input":1}`, id)))
	}
	ids := func(q string) []string {
		var l api.RunList
		s.do("GET", "/v1/runs?"+q, "").want(t, http.StatusOK).decode(t, &l)
		var out []string
		for _, r := range l.Runs {
			out = append(out, r.ID)
		}
		return out
	}
	if got := ids("id_prefix=order-1"); !slices.Equal(got, []string{"order-12", "order-1"}) {
		t.Fatalf("id_prefix: %v", got)
	}
	since := url.QueryEscape(runs[1].CreatedAt.Format(time.RFC3339Nano))
	if got := ids("created_since=" + since); !slices.Equal(got, []string{"invoice-1", "order-12"}) {
		t.Fatalf("created_since: %v", got)
	}
	if got := ids("id_prefix=order&created_before=" + since); !slices.Equal(got, []string{"order-1"}) {
		t.Fatalf("created_before: %v", got)
	}
	for _, q := range []string{"created_since=yesterday", "created_before=2026-13-01T00:00:00Z",
		"created_since=" + since + "&created_before=" + since} {
		checkOneLine(t, s.do("GET", "/v1/runs?"+q, "").want(t, http.StatusBadRequest))
	}
}

func TestEventsStreamsAndWorkflows(t *testing.T) {
	s := newTestServer(t, nil)
	run := s.start(`{"workflow":"demo.tokens","input":{"text":"one two three","fail_after":1}}`)
	s.wait(run.ID)
	var evs api.EventList
	s.do("GET", "/v1/runs/"+run.ID+"/events", "").want(t, http.StatusOK).decode(t, &evs)
	var types []string
	for i, ev := range evs.Events {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
		types = append(types, string(ev.Type))
	}
	if types[0] != "run_started" || types[len(types)-1] != "run_completed" || !strings.Contains(strings.Join(types, " "), "step_failed") {
		t.Fatalf("events %v", types)
	}
	var tail api.EventList
	s.do("GET", fmt.Sprintf("/v1/runs/%s/events?after=%d", run.ID, len(evs.Events)-1), "").want(t, http.StatusOK).decode(t, &tail)
	if len(tail.Events) != 1 || tail.Events[0].Type != store.EventRunCompleted {
		t.Fatalf("after: %+v", tail)
	}

	var sl api.StreamList
	s.do("GET", "/v1/runs/"+run.ID+"/streams", "").want(t, http.StatusOK).decode(t, &sl)
	found := false
	for _, st := range sl.Streams {
		if st.Name == demo.TokensStream {
			found = true
			if !st.Closed || st.NextOffset < 3 || st.Path != "runs/"+run.ID+"/tokens" {
				t.Fatalf("stream %+v", st)
			}
		}
	}
	if !found {
		t.Fatalf("streams %+v", sl)
	}

	var wl api.WorkflowList
	s.do("GET", "/v1/workflows", "").want(t, http.StatusOK).decode(t, &wl)
	if strings.Join(wl.Workflows, ",") != "block,demo.agent,demo.approval,demo.chat,demo.tokens,echo" {
		t.Fatalf("workflows %v", wl.Workflows)
	}
}

func TestCancel(t *testing.T) {
	s := newTestServer(t, nil)
	run := s.start(`{"workflow":"block"}`)
	var got api.Run
	s.do("POST", "/v1/runs/"+run.ID+"/cancel", "").want(t, http.StatusAccepted).decode(t, &got)
	if !got.CancelRequested {
		t.Fatalf("after cancel: %+v", got)
	}
	if end := s.wait(run.ID); end.Status != store.RunCancelled {
		t.Fatalf("status %s", end.Status)
	}
	s.do("POST", "/v1/runs/"+run.ID+"/cancel", "").want(t, http.StatusOK).decode(t, &got)
	if got.Status != store.RunCancelled {
		t.Fatalf("status %s", got.Status)
	}
}

func TestUnknownThings(t *testing.T) {
	s := newTestServer(t, nil)
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/v1/runs/nope", "", 404},
		{"GET", "/v1/runs/nope/events", "", 404},
		{"GET", "/v1/runs/nope/streams", "", 404},
		{"POST", "/v1/runs/nope/cancel", "", 404},
		{"POST", "/v1/runs", `{"workflow":"nope"}`, 404},
		{"GET", "/v1/nothing", "", 404},
		{"GET", "/", "", 404},
		{"GET", "/v1/runs/a/b/c", "", 404},
		{"DELETE", "/v1/runs", "", 405},
		{"PUT", "/v1/runs/x", "", 405},
		{"GET", "/v1/runs/x/cancel", "", 405},
		{"POST", "/v1/workflows", "", 405},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			r := s.do(c.method, c.path, c.body).want(t, c.status)
			if c.status == 405 && r.header.Get("Allow") == "" {
				t.Fatal("405 without Allow")
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	s := newTestServer(t, &Config{MaxBodyBytes: 1 << 10})
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		reason                   string
	}{
		{"empty body", "POST", "/v1/runs", "", 400, "empty body"},
		{"malformed JSON", "POST", "/v1/runs", `{"workflow":`, 400, "malformed JSON"},
		{"not an object", "POST", "/v1/runs", `[1,2]`, 400, "want a JSON object"},
		{"workflow not a string", "POST", "/v1/runs", `{"workflow":12}`, 400, `field "workflow"`},
		{"id not a string", "POST", "/v1/runs", `{"workflow":"echo","id":true}`, 400, `field "id"`},
		{"unknown field", "POST", "/v1/runs", `{"workflow":"echo","inptu":1}`, 400, "unknown field"},
		{"trailing data", "POST", "/v1/runs", `{"workflow":"echo"} {}`, 400, "after the JSON object"},
		{"no workflow", "POST", "/v1/runs", `{"input":1}`, 400, "workflow"},
		{"bad run id", "POST", "/v1/runs", `{"workflow":"echo","id":"a/b"}`, 400, "run id"},
		{"dot run id", "POST", "/v1/runs", `{"workflow":"echo","id":".."}`, 400, "run id"},
		{"long run id", "POST", "/v1/runs", `{"workflow":"echo","id":"` + strings.Repeat("a", 200) + `"}`, 400, "run id"},
		// A schedule's tick run, taken before its tick (and the other
		// prefixes weir mints).
		{"a tick's run id", "POST", "/v1/runs", `{"workflow":"echo","id":"sched:nightly:20261207T000000.000Z"}`, 400, "prefix"},
		{"an idempotency key's run id", "POST", "/v1/runs", `{"workflow":"echo","id":"idem_00112233445566778899aabbccddeeff"}`, 400, "prefix"},
		{"a World run's id", "POST", "/v1/runs", `{"workflow":"echo","id":"wrun_01J0000000000000000000000"}`, 400, "prefix"},
		{"huge body", "POST", "/v1/runs", `{"workflow":"echo","input":"` + strings.Repeat("x", 2000) + `"}`, 413, "limit"},
		{"query on start", "POST", "/v1/runs?x=1", `{"workflow":"echo"}`, 400, "unknown query parameter"},
		{"limit not a number", "GET", "/v1/runs?limit=abc", "", 400, "limit"},
		{"limit zero", "GET", "/v1/runs?limit=0", "", 400, "limit"},
		{"limit too big", "GET", "/v1/runs?limit=100000", "", 400, "limit"},
		{"bad status", "GET", "/v1/runs?status=done", "", 400, "status"},
		{"unknown param", "GET", "/v1/runs?sort=asc", "", 400, "unknown query parameter"},
		{"repeated param", "GET", "/v1/runs?limit=1&limit=2", "", 400, "2 times"},
		{"malformed query", "GET", "/v1/runs?limit=%zz", "", 400, "malformed query"},
		{"unknown cursor", "GET", "/v1/runs?before=nope", "", 400, "names no run"},
		{"bad after", "GET", "/v1/runs/x/events?after=-1", "", 400, "after"},
		{"param on get", "GET", "/v1/runs/x?verbose=1", "", 400, "takes none"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := s.do(c.method, c.path, c.body, "Content-Type", "application/json").want(t, c.status)
			if !strings.Contains(r.body, c.reason) {
				t.Fatalf("reason %q does not say %q", r.body, c.reason)
			}
		})
	}
}

func TestMetricsCountRunsAndRequests(t *testing.T) {
	s := newTestServer(t, nil)
	run := s.start(`{"workflow":"echo","input":1}`)
	s.wait(run.ID)
	s.do("GET", "/v1/runs/nope", "")
	s.srv.metrics.streamAcks(nil)
	s.srv.metrics.streamAppend(outcomeAdopted, 3)
	s.srv.metrics.streamAborted()
	s.srv.metrics.streamFenced()
	s.srv.metrics.streamRejected("gap")
	s.srv.metrics.readerOpened(readerSSE)
	// The run's end is committed before its engine lets go of it, so the
	// executing gauge reaches 0 a moment after wait returns.
	var r *reply
	eventually(t, "the engine to let go of the finished run", func() bool {
		r = s.do("GET", "/metrics", "").want(t, http.StatusOK)
		return strings.Contains(r.body, "weir_engine_runs_executing 0\n")
	})
	for _, want := range []string{
		"weir_runs_started_total 1\n",
		"weir_runs_completed_total 1\n",
		`weir_run_events_total{type="run_completed"} 1` + "\n",
		`weir_run_events_total{type="run_started"} 1` + "\n",
		"weir_hook_deliveries_refused_total 0\n",
		"weir_messages_refused_total 0\n",
		"weir_engine_attempts_lingering 0\n",
		"weir_engine_attempts_abandoned_total 0\n",
		"weir_engine_runs_executing 0\n",
		`weir_http_requests_total{route="runs",code="201"} 1` + "\n",
		`weir_http_requests_total{route="runs",code="404"} 1` + "\n",
		`weir_stream_chunks_total{outcome="adopted"} 3` + "\n",
		`weir_stream_chunks_total{outcome="appended"} 0` + "\n",
		"weir_stream_aborts_total 1\n",
		"weir_stream_fenced_total 1\n",
		`weir_stream_rejected_total{reason="gap"} 1` + "\n",
		`weir_stream_open_readers{mode="sse"} 1` + "\n",
		`weir_stream_open_readers{mode="long-poll"} 0` + "\n",
		`weir_http_request_duration_seconds_count{route="runs"}`,
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	checkExposition(t, r.body)
}

// A fork, a retry and a resume are held by the log they read before the
// store reads it (ten times its bytes for a fork or a retry, twice for a
// resume, at most the whole replies' budget): at a budget that cannot take
// them they are 503 busy and make nothing; a log past the budget is
// served alone. (Red-team round ten: 16 concurrent forks of a run with a
// full 16 MiB inbox took a PostgreSQL server past 2 GB, held by nothing.)
func TestForksAreHeldByTheLogTheyRead(t *testing.T) {
	s := newTestServer(t, &Config{MaxReplyBytes: 32 << 20})
	run := s.start(`{"workflow":"block"}`)
	msg := `"` + strings.Repeat("x", 1<<20-16) + `"`
	for range 2 {
		s.do("POST", "/v1/runs/"+run.ID+"/messages/t", msg).want(t, http.StatusOK)
	}
	eventually(t, "the run's first step started", func() bool {
		evs, err := s.e.Store().ListEvents(t.Context(), run.ID, 0)
		return err == nil && slices.ContainsFunc(evs, func(ev store.Event) bool { return ev.Type == store.EventStepStarted })
	})
	// 2 MiB of log: a fork holds 20 MiB, a resume 4 MiB.
	if !s.srv.replies.take(16 << 20) {
		t.Fatal("the budget")
	}
	r := s.do("POST", "/v1/runs/"+run.ID+"/fork", `{"id":"f1","op":1}`).want(t, http.StatusServiceUnavailable)
	if r.header.Get(api.ErrorHeader) != "busy" {
		t.Fatalf("a fork the budget cannot take: %q %q", r.header.Get(api.ErrorHeader), r.body)
	}
	s.do("POST", "/v1/runs/"+run.ID+"/retry", `{"step":"wait"}`).want(t, http.StatusServiceUnavailable)
	s.do("GET", "/v1/runs/f1", "").want(t, http.StatusNotFound)
	// A resume's 4 MiB fit beside the 16 held (a running run: 409).
	s.do("POST", "/v1/runs/"+run.ID+"/resume", "").want(t, http.StatusConflict)
	s.srv.replies.give(16 << 20)
	s.do("POST", "/v1/runs/"+run.ID+"/fork", `{"id":"f1","op":1}`).want(t, http.StatusCreated)
	if n := s.srv.replies.inUse(); n != 0 {
		t.Fatalf("%d bytes of the budget held after the fork", n)
	}
	// A fork again onto a fork that exists (the same id and point) reads
	// that fork's log too: held by both (red-team round eleven: a small
	// source's hold let forks onto a fork with a full inbox through).
	src := s.start(`{"workflow":"block"}`)
	eventually(t, "the source's first step started", func() bool {
		evs, err := s.e.Store().ListEvents(t.Context(), src.ID, 0)
		return err == nil && slices.ContainsFunc(evs, func(ev store.Event) bool { return ev.Type == store.EventStepStarted })
	})
	s.do("POST", "/v1/runs/"+src.ID+"/fork", `{"id":"f3","op":1}`).want(t, http.StatusCreated)
	for range 2 {
		s.do("POST", "/v1/runs/f3/messages/t", msg).want(t, http.StatusOK)
	}
	if !s.srv.replies.take(16 << 20) {
		t.Fatal("the budget")
	}
	s.do("POST", "/v1/runs/"+src.ID+"/fork", `{"id":"f3","op":1}`).want(t, http.StatusServiceUnavailable)
	s.srv.replies.give(16 << 20)
	s.do("POST", "/v1/runs/"+src.ID+"/fork", `{"id":"f3","op":1}`).want(t, http.StatusCreated)
	// A log whose reads pass the whole budget is served when nothing else
	// is held.
	small := newTestServer(t, &Config{MaxReplyBytes: 8 << 20})
	run = small.start(`{"workflow":"block"}`)
	for range 2 {
		small.do("POST", "/v1/runs/"+run.ID+"/messages/t", msg).want(t, http.StatusOK)
	}
	small.do("POST", "/v1/runs/"+run.ID+"/fork", `{"id":"f2","op":1}`).want(t, http.StatusCreated)
}

// What a fork, a retry or a resume would refuse is refused before it holds
// the replies' budget for the log it would read: with the budget all but
// taken, the refusals are 400, 404 and 409, not 503 busy, and nothing is
// held (red team, round twenty: refused forks of a run of 10,000 messages,
// one client in a loop, held the budget and 79 % of other clients' reads
// were 503; on SQLite each read the log's outline in the writer).
func TestRefusalsComeBeforeTheLogsHold(t *testing.T) {
	s := newTestServer(t, &Config{MaxReplyBytes: 32 << 20})
	run := s.start(`{"workflow":"block"}`)
	msg := `"` + strings.Repeat("x", 1<<20-16) + `"`
	for range 2 {
		s.do("POST", "/v1/runs/"+run.ID+"/messages/t", msg).want(t, http.StatusOK)
	}
	if !s.srv.replies.take(30 << 20) {
		t.Fatal("the budget")
	}
	defer s.srv.replies.give(30 << 20)
	for _, c := range []struct {
		path, body string
		code       int
	}{
		{"/fork", `{"id":"f1","op":99}`, http.StatusBadRequest},
		{"/fork", `{"id":"f1","step":"nope"}`, http.StatusBadRequest},
		{"/retry", `{}`, http.StatusBadRequest}, // it did not fail
		{"/resume", ``, http.StatusConflict},    // it runs
	} {
		r := s.do("POST", "/v1/runs/"+run.ID+c.path, c.body).want(t, c.code)
		if r.header.Get(api.ErrorHeader) == "busy" {
			t.Fatalf("%s %s: busy", c.path, c.body)
		}
	}
	s.do("POST", "/v1/runs/nope/fork", `{"op":1}`).want(t, http.StatusNotFound)
	s.do("GET", "/v1/runs/f1", "").want(t, http.StatusNotFound)
	if n := s.srv.replies.inUse(); n != 30<<20 {
		t.Fatalf("%d bytes of the budget held after the refusals, want the %d taken", n, 30<<20)
	}
	// A fork that would be made is still held by its log.
	s.do("POST", "/v1/runs/"+run.ID+"/fork", `{"id":"f1","op":1}`).want(t, http.StatusServiceUnavailable)
}

// Fork, retry and resume over HTTP: a cancelled run resumes (202) and is
// cancelled again; a resume of a running run is 409; forks and retries
// are 201 with the new run; bad fork points are 400 and make nothing.
func TestForkRetryResume(t *testing.T) {
	s := newTestServer(t, nil)
	run := s.start(`{"workflow":"block"}`)
	s.do("POST", "/v1/runs/"+run.ID+"/cancel", "").want(t, http.StatusAccepted)
	if end := s.wait(run.ID); end.Status != store.RunCancelled {
		t.Fatalf("status %s", end.Status)
	}
	var got api.Run
	s.do("POST", "/v1/runs/"+run.ID+"/resume", "").want(t, http.StatusAccepted).decode(t, &got)
	if got.ID != run.ID || got.Status != store.RunPending {
		t.Fatalf("resumed: %+v", got)
	}
	// Its step must have started again before the second cancel, or no
	// step's failure ends the run and a bare retry has nothing to start
	// from (CI caught the cancel landing between the claim and the step).
	eventually(t, "the resumed run's step started again", func() bool {
		evs, err := s.e.Store().ListEvents(t.Context(), run.ID, 0)
		if err != nil {
			return false
		}
		resumed := false
		for _, ev := range evs {
			switch {
			case ev.Type == store.EventRunResumed:
				resumed = true
			case resumed && ev.Type == store.EventStepStarted:
				return true
			}
		}
		return false
	})
	s.do("POST", "/v1/runs/"+run.ID+"/resume", "").want(t, http.StatusConflict)
	// A resume takes no options: a fork's are refused, not ignored.
	s.do("POST", "/v1/runs/"+run.ID+"/resume", `{"id":"wrun_x"}`).want(t, http.StatusBadRequest)
	s.do("POST", "/v1/runs/"+run.ID+"/resume", `{}`).want(t, http.StatusConflict)
	s.do("POST", "/v1/runs/"+run.ID+"/cancel", "").want(t, http.StatusAccepted)
	s.wait(run.ID)

	s.do("POST", "/v1/runs/"+run.ID+"/fork", `{"op":3}`).want(t, http.StatusBadRequest)
	s.do("POST", "/v1/runs/"+run.ID+"/fork", `{"id":"f1","op":1,"step":"wait"}`).want(t, http.StatusBadRequest)
	s.do("POST", "/v1/runs/"+run.ID+"/fork", `{"op":1,"input":"nope`).want(t, http.StatusBadRequest)
	s.do("POST", "/v1/runs/nope/fork", `{"op":1}`).want(t, http.StatusNotFound)
	s.do("POST", "/v1/runs/"+run.ID+"/fork", `{"id":"f1","op":1}`, "Content-Type", "text/plain").want(t, http.StatusUnsupportedMediaType)
	// A fork's id is a client's run id: inside another run's streams, past
	// the length, or weir's own prefix, it is refused and nothing is made.
	for _, id := range []string{"../x", run.ID + "/spoof", strings.Repeat("x", 129), "sched:n:20261207T000000.000Z", "a b", `f\u0000`} {
		r := s.do("POST", "/v1/runs/"+run.ID+"/fork", `{"id":"`+id+`","op":1}`).want(t, http.StatusBadRequest)
		if r.header.Get(api.ErrorHeader) != "invalid_name" {
			t.Fatalf("fork id %q: %s %q", id, r.header.Get(api.ErrorHeader), r.body)
		}
	}
	if list, err := s.e.Store().ListRuns(t.Context(), &store.ListRunsParams{Limit: 100}); err != nil || len(list) != 1 {
		t.Fatalf("after refused forks: %d runs, %v", len(list), err)
	}
	if r := s.do("GET", "/v1/runs/f1", ""); r.status != http.StatusNotFound {
		t.Fatalf("a refused fork made run f1: %d", r.status)
	}
	s.do("POST", "/v1/runs/"+run.ID+"/fork", `{"id":"f1","op":1}`).want(t, http.StatusCreated).decode(t, &got)
	if got.ID != "f1" || got.Workflow != "block" {
		t.Fatalf("fork: %+v", got)
	}
	s.do("POST", "/v1/runs/"+run.ID+"/fork", `{"id":"f1","op":2}`).want(t, http.StatusConflict)
	s.do("POST", "/v1/runs/"+run.ID+"/retry", `{}`).want(t, http.StatusCreated).decode(t, &got)
	if got.ID == run.ID || got.Workflow != "block" {
		t.Fatalf("retry: %+v", got)
	}
	s.do("POST", "/v1/runs/"+run.ID+"/retry", `{"step":"nope"}`).want(t, http.StatusBadRequest)
	for _, id := range []string{"f1", got.ID} {
		s.do("POST", "/v1/runs/"+id+"/cancel", "")
		s.wait(id)
	}
}

// A write's reply (start, a start that finds the run, cancel, fork, retry,
// resume) carries no input or output over store.MaxListedValue: it is
// built from the run the write read, before any room was made for it, and
// its client may read it slowly (red-team round five: 25 stalled cancels of
// a run of 15 MiB held 1 GB). GET /v1/runs/{id} has them.
func TestWriteRepliesElideLargeValues(t *testing.T) {
	s := newTestServer(t, nil)
	big := strings.Repeat("<", store.MaxListedValue+1)
	body := `{"workflow":"echo","id":"big-1","input":"` + big + `"}`
	var got api.Run
	s.do("POST", "/v1/runs", body).want(t, http.StatusCreated).decode(t, &got)
	if !got.Elided || got.Input != nil || got.ID != "big-1" {
		t.Fatalf("start: elided %v, %d bytes of input", got.Elided, len(got.Input))
	}
	if end := s.wait("big-1"); end.Status != store.RunCompleted {
		t.Fatalf("status %s", end.Status)
	}
	s.do("POST", "/v1/runs", body).want(t, http.StatusOK).decode(t, &got)
	if !got.Elided || got.Input != nil || got.Output != nil {
		t.Fatalf("a start of the existing run: elided %v, input %d, output %d bytes", got.Elided, len(got.Input), len(got.Output))
	}
	s.do("POST", "/v1/runs/big-1/cancel", "").want(t, http.StatusOK).decode(t, &got)
	if !got.Elided || got.Input != nil || got.Output != nil || got.Status != store.RunCompleted {
		t.Fatalf("cancel: %+v", got)
	}
	s.do("POST", "/v1/runs/big-1/fork", `{"id":"big-2","op":1}`).want(t, http.StatusCreated).decode(t, &got)
	if !got.Elided || got.Input != nil || got.ID != "big-2" {
		t.Fatalf("fork: elided %v, %d bytes of input", got.Elided, len(got.Input))
	}
	s.wait("big-2")
	var whole api.Run // decoded afresh: a reply without "elided" leaves the field as it was
	s.do("GET", "/v1/runs/big-1", "").want(t, http.StatusOK).decode(t, &whole)
	var in, out string
	if whole.Elided || json.Unmarshal(whole.Input, &in) != nil || json.Unmarshal(whole.Output, &out) != nil || in != big || out != big {
		t.Fatalf("GET: elided %v, input %d, output %d bytes", whole.Elided, len(whole.Input), len(whole.Output))
	}
	// A small run's reply is whole.
	var small api.Run
	s.do("POST", "/v1/runs", `{"workflow":"echo","id":"small-1","input":"hi"}`).want(t, http.StatusCreated).decode(t, &small)
	if small.Elided || string(small.Input) != `"hi"` {
		t.Fatalf("a small start: %+v", small)
	}
}

// A page of GET /v1/runs is bounded as sent, not by its rows' bytes: a
// value that is not JSON is sent as a string, six times its size in
// control bytes, so 200 listed runs of 4 KiB such inputs (4.8 MB as JSON)
// come in pages of at most 4 MiB, each naming the next, every run once.
// And a page is charged before it is read: a server whose replies'
// budget cannot take a page of 1,000 refuses it (503 busy) and serves a
// smaller one.
func TestRunsPagesBoundedAsSent(t *testing.T) {
	s := newTestServer(t, nil)
	in := []byte(strings.Repeat("\x01", store.MaxListedValue))
	for i := range 200 {
		if _, _, err := s.srv.store.CreateRun(context.Background(), &store.CreateRunParams{ID: fmt.Sprintf("ctl-%03d", i), Workflow: "unserved", Input: in}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	pages, cursor := 0, ""
	for {
		path := "/v1/runs?workflow=unserved&limit=1000"
		if cursor != "" {
			path += "&before=" + cursor
		}
		r := s.do("GET", path, "").want(t, http.StatusOK)
		if len(r.body) > maxRunsPageBytes+maxListedRunJSON {
			t.Fatalf("a page of %d bytes", len(r.body))
		}
		var page api.RunList
		r.decode(t, &page)
		for _, run := range page.Runs {
			if seen[run.ID] {
				t.Fatalf("run %s on two pages", run.ID)
			}
			seen[run.ID] = true
		}
		pages++
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if len(seen) != 200 || pages < 2 {
		t.Fatalf("%d runs in %d pages, want 200 in two or more", len(seen), pages)
	}

	small := newTestServer(t, &Config{MaxReplyBytes: 16 << 20})
	if r := small.do("GET", "/v1/runs?limit=1000", "").want(t, http.StatusServiceUnavailable); r.header.Get("Weir-Error") != "busy" {
		t.Fatalf("a page the budget cannot take: %v", r.header)
	}
	small.do("GET", "/v1/runs?limit=50", "").want(t, http.StatusOK)
}

// POST /v1/runs/migrate's reply is bounded, on both stores: it says how
// many runs moved, lists the first api.MaxMigratedListed of them by id
// and says that more moved. (Red team, round fourteen: it listed every run
// it moved, however many.)
func TestMigrateReplyIsBounded(t *testing.T) {
	onEveryStore(t, func(t *testing.T, d *dsServer) {
		ctx := t.Context()
		// Runs no worker claims, past the bound by one.
		var ids []string
		for i := range api.MaxMigratedListed + 1 {
			id := fmt.Sprintf("m-%05d", i)
			if _, _, err := d.st.CreateRun(ctx, &store.CreateRunParams{ID: id, Workflow: "wf", Version: "v1"}); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		js := []string{"Content-Type", "application/json"}
		// Decoded field by field, so that a reply without them fails.
		var got struct {
			Count    int      `json:"count"`
			Migrated []string `json:"migrated"`
			More     bool     `json:"more"`
		}
		r := d.send("POST", "/v1/runs/migrate", `{"from":"v1","to":"v2"}`, js...).must(t, http.StatusOK)
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Fatal(err)
		}
		if got.Count != len(ids) || !got.More || !slices.Equal(got.Migrated, ids[:api.MaxMigratedListed]) {
			t.Fatalf("migrated %d, more %v, %d listed (%d bytes), want %d, more, the first %d", got.Count, got.More, len(got.Migrated), len(r.body), len(ids), api.MaxMigratedListed)
		}
		// The run past the list moved too.
		last, err := d.st.GetRun(ctx, ids[len(ids)-1])
		if err != nil || last.Version != "v2" {
			t.Fatalf("the run not listed: %+v, %v", last, err)
		}
		// Under the bound, every run is listed and none more.
		got.More = false
		r = d.send("POST", "/v1/runs/migrate", `{"from":"v2","to":"v3","runs":["m-00003","m-00001","nope"]}`, js...).must(t, http.StatusOK)
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Fatal(err)
		}
		if got.Count != 2 || got.More || !slices.Equal(got.Migrated, []string{"m-00001", "m-00003"}) {
			t.Fatalf("migrated %+v, want 2: m-00001 m-00003", got)
		}
		// None: an empty list, not null.
		r = d.send("POST", "/v1/runs/migrate", `{"from":"v9","to":"v3"}`, js...).must(t, http.StatusOK)
		if want := `{"count":0,"migrated":[]}`; strings.TrimSpace(string(r.body)) != want {
			t.Fatalf("migrating none: %s, want %s", r.body, want)
		}
	})
}
