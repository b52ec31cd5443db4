package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/delivery"
	"github.com/weirhq/weir/internal/pgtest"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/pgstore"
	"github.com/weirhq/weir/store/sqlitestore"
	"github.com/weirhq/weir/world"
)

// The World API over HTTP, on both stores: what the World package relies
// on, status by status.

// onEveryStoreWith runs f against a server with cfg on each store backend,
// in parallel.
func onEveryStoreWith(t *testing.T, cfg *Config, f func(t *testing.T, d *dsServer)) {
	onEveryStoreWrapped(t, cfg, nil, f)
}

// onEveryStoreWrapped is onEveryStoreWith, the server and its engine on
// wrap's store (if wrap is not nil): one that counts what it reads, say.
func onEveryStoreWrapped(t *testing.T, cfg *Config, wrap func(store.Full) store.Full, f func(t *testing.T, d *dsServer)) {
	on := func(t *testing.T, st store.Full) {
		if wrap != nil {
			st = wrap(st)
		}
		f(t, newDSServerOn(t, cfg, st))
	}
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "weir.db"), &sqlitestore.Config{Synchronous: "OFF"})
		if err != nil {
			t.Fatal(err)
		}
		on(t, st)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		st, err := pgstore.Open(context.Background(), pgtest.URL(), &pgstore.Config{Schema: pgtest.NewSchema(t), MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		on(t, st)
	})
}

// wcall sends method to path (from /v1/world/ on) with a body and headers.
func (d *dsServer) wcall(method, path string, body []byte, hdr ...string) *dsReply {
	d.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, d.ts.URL+"/v1/world/"+path, rd)
	if err != nil {
		d.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.ts.Client().Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatal(err)
	}
	return &dsReply{status: resp.StatusCode, h: resp.Header, body: b}
}

// ev posts an event; data is marshalled.
func (d *dsServer) ev(run string, typ world.EventType, corr string, data any) *dsReply {
	d.t.Helper()
	body := map[string]any{"eventType": typ}
	if corr != "" {
		body["correlationId"] = corr
	}
	if data != nil {
		body["eventData"] = data
	}
	b, _ := json.Marshal(body)
	return d.wcall("POST", "runs/"+run+"/events", b)
}

func decode[T any](t testing.TB, r *dsReply) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("reply %q: %v", r.body, err)
	}
	return v
}

// newWorldRun creates and starts a run, returning its id.
func (d *dsServer) newWorldRun(t *testing.T) string {
	t.Helper()
	rep := decode[worldEventReply](t, d.ev("-", world.RunCreated, "", map[string]any{
		"deploymentId": "dpl_test", "workflowName": "workflow//wf.ts//wf", "input": []any{1, 2}}).must(t, http.StatusOK))
	if rep.Run == nil || !strings.HasPrefix(rep.Run.RunID, "wrun_") || rep.Event == nil || rep.Event.EventType != world.RunCreated {
		t.Fatalf("run_created reply %+v", rep)
	}
	started := decode[worldEventReply](t, d.ev(rep.Run.RunID, world.RunStarted, "", nil).must(t, http.StatusOK))
	if started.Run.Status != world.Running || len(started.Events) != 2 {
		t.Fatalf("run_started reply %+v: want the run running and the whole log", started)
	}
	return rep.Run.RunID
}

func TestWorldEventStatuses(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		run := d.newWorldRun(t)
		d.ev(run, world.StepCreated, "step_1", map[string]any{"stepName": "add", "input": []any{1}}).must(t, http.StatusOK)
		// Replays re-send step_created: a conflict, with its code.
		d.ev(run, world.StepCreated, "step_1", map[string]any{"stepName": "add"}).
			must(t, http.StatusConflict).header(t, "Weir-Error", "world_conflict")
		d.ev(run, world.StepStarted, "step_1", nil).must(t, http.StatusOK)
		d.ev(run, world.StepRetrying, "step_1", map[string]any{"error": "boom",
			"retryAfter": time.Now().Add(90 * time.Second).UTC()}).must(t, http.StatusOK)
		r := d.ev(run, world.StepStarted, "step_1", nil).must(t, http.StatusTooEarly).header(t, "Weir-Error", "too_early")
		if ra := r.h.Get("Retry-After"); ra != "90" && ra != "89" {
			t.Fatalf("Retry-After %q, want about 90", ra)
		}
		d.ev("wrun_nope", world.StepCreated, "s", map[string]any{"stepName": "x"}).
			must(t, http.StatusNotFound).header(t, "Weir-Error", "run_not_found")
		d.ev(run, world.StepCompleted, "step_nope", nil).must(t, http.StatusNotFound).header(t, "Weir-Error", "step_not_found")
		d.ev(run, world.HookReceived, "hook_nope", nil).must(t, http.StatusNotFound).header(t, "Weir-Error", "hook_not_found")
		d.ev(run, "run_exploded", "", nil).must(t, http.StatusBadRequest).header(t, "Weir-Error", "invalid_event")
		d.wcall("POST", "runs/"+run+"/events", []byte(`{"eventType":`)).must(t, http.StatusBadRequest)
		d.wcall("POST", "runs/"+run+"/events", []byte(`{"eventType":"run_started","extra":1}`)).must(t, http.StatusBadRequest)
		d.ev("-", world.RunStarted, "", nil).must(t, http.StatusBadRequest)
		// Refused before a byte of it is read: a client that asks first
		// (Expect: 100-continue) is told so, and sends nothing.
		big := bytes.Repeat([]byte("x"), 17<<20)
		req, _ := http.NewRequest("POST", d.ts.URL+"/v1/world/runs/"+run+"/events", bytes.NewReader(big))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Expect", "100-continue")
		cl := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 10 * time.Second}, Timeout: 30 * time.Second}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("an oversized event: %d", resp.StatusCode)
		}
		// Hostile hook tokens are refused before anything is stored.
		for _, tok := range []string{"a b", "../x", "x/y", "", strings.Repeat("t", 2000)} {
			d.ev(run, world.HookCreated, "hook_x", map[string]any{"token": tok}).must(t, http.StatusBadRequest)
		}
		d.ev(run, world.RunCompleted, "", map[string]any{"output": 3}).must(t, http.StatusOK)
		d.ev(run, world.RunCompleted, "", map[string]any{"output": 3}).must(t, http.StatusConflict)
		d.ev(run, world.RunStarted, "", nil).must(t, http.StatusGone).header(t, "Weir-Error", "run_expired")
		// Nothing refused was stored.
		page := decode[worldPage[world.Event]](t, d.wcall("GET", "runs/"+run+"/events", nil).must(t, http.StatusOK))
		var types []string
		for _, e := range page.Data {
			types = append(types, string(e.EventType))
		}
		want := []string{"run_created", "run_started", "step_created", "step_started", "step_retrying", "run_completed"}
		if !slices.Equal(types, want) {
			t.Fatalf("events %v, want %v", types, want)
		}
	})
}

func TestWorldReads(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		run := d.newWorldRun(t)
		for _, s := range []string{"step_a", "step_b", "step_c"} {
			d.ev(run, world.StepCreated, s, map[string]any{"stepName": "add", "input": []any{"secret"}}).must(t, http.StatusOK)
		}
		d.ev(run, world.HookCreated, "hook_1", map[string]any{"token": "tok-1", "metadata": map[string]any{"m": 1}}).must(t, http.StatusOK)
		// events.list, paged: cursor and hasMore.
		var n int
		cursor := ""
		for {
			q := "runs/" + run + "/events?limit=2"
			if cursor != "" {
				q += "&cursor=" + cursor
			}
			p := decode[worldPage[world.Event]](t, d.wcall("GET", q, nil).must(t, http.StatusOK))
			n += len(p.Data)
			if !p.HasMore {
				break
			}
			cursor = *p.Cursor
		}
		if n != 6 {
			t.Fatalf("%d events paged, want 6", n)
		}
		// resolveData=none leaves the payloads out.
		steps := decode[worldPage[world.Step]](t, d.wcall("GET", "runs/"+run+"/steps?resolveData=none", nil).must(t, http.StatusOK))
		if len(steps.Data) != 3 || steps.Data[0].Input != nil {
			t.Fatalf("steps with resolveData=none: %s", d.wcall("GET", "runs/"+run+"/steps?resolveData=none", nil).body)
		}
		ev := decode[worldPage[world.Event]](t, d.wcall("GET", "events?correlationId=step_b&resolveData=none", nil).must(t, http.StatusOK))
		if len(ev.Data) != 1 || strings.Contains(string(ev.Data[0].EventData), "secret") {
			t.Fatalf("by correlation, none: %+v", ev.Data)
		}
		st := decode[world.Step](t, d.wcall("GET", "steps/step_b", nil).must(t, http.StatusOK))
		if st.RunID != run || string(st.Input) != `["secret"]` {
			t.Fatalf("steps.get: %+v", st)
		}
		d.wcall("GET", "runs/"+run+"/steps/step_nope", nil).must(t, http.StatusNotFound)
		h := decode[world.Hook](t, d.wcall("GET", "hooks?token=tok-1", nil).must(t, http.StatusOK))
		if h.HookID != "hook_1" || string(h.Metadata) != `{"m":1}` {
			t.Fatalf("hooks.getByToken: %+v", h)
		}
		d.wcall("GET", "hooks?token=nope", nil).must(t, http.StatusNotFound).header(t, "Weir-Error", "hook_not_found")
		d.wcall("GET", "hooks/hook_1", nil).must(t, http.StatusOK)
		hooks := decode[worldPage[world.Hook]](t, d.wcall("GET", "hooks?runId="+run, nil).must(t, http.StatusOK))
		if len(hooks.Data) != 1 {
			t.Fatalf("hooks.list: %+v", hooks)
		}
		runs := decode[worldPage[world.Run]](t, d.wcall("GET", "runs?status=running", nil).must(t, http.StatusOK))
		if len(runs.Data) != 1 || runs.Data[0].RunID != run {
			t.Fatalf("runs.list: %+v", runs)
		}
		got := decode[world.Run](t, d.wcall("GET", "runs/"+run, nil).must(t, http.StatusOK))
		if got.WorkflowName != "workflow//wf.ts//wf" || string(got.Input) != "[1,2]" {
			t.Fatalf("runs.get: %+v", got)
		}
		d.wcall("GET", "runs/wrun_nope", nil).must(t, http.StatusNotFound).header(t, "Weir-Error", "run_not_found")
		d.wcall("GET", "runs?limit=0", nil).must(t, http.StatusBadRequest)
		d.wcall("GET", "runs?sortOrder=sideways", nil).must(t, http.StatusBadRequest)
		d.wcall("GET", "runs/"+run+"/events?cursor=zzz", nil).must(t, http.StatusBadRequest)
		// A World run is a run of the runs API too, of kind world.
		r := decode[map[string]any](t, d.runsCall("GET", "/v1/runs/"+run).must(t, http.StatusOK))
		if r["kind"] != "world" {
			t.Fatalf("GET /v1/runs/%s: %v", run, r)
		}
	})
}

// wwrite writes chunks to a World stream as step/<step> at attempt from
// seq (anonymous if step is empty).
func (d *dsServer) wwrite(run, name, step string, attempt, seq int64, chunks ...string) *dsReply {
	d.t.Helper()
	var body []byte
	for _, c := range chunks {
		body = appendFrame(body, []byte(c))
	}
	hdr := []string{"Content-Type", "application/octet-stream", "Weir-Framing", "u32be"}
	if step != "" {
		hdr = append(hdr, "Weir-Writer", "step/"+step, "Weir-Attempt", itoa(attempt), "Weir-Seq", itoa(seq))
	}
	return d.wcall("POST", "runs/"+run+"/streams/"+name, body, hdr...)
}

// wread reads a World stream from index in a view, and reports whether
// the body ended with the EOF frame.
func (d *dsServer) wread(name, query string) ([]string, bool) {
	d.t.Helper()
	r := d.wcall("GET", "streams/"+name+"?"+query, nil).must(d.t, http.StatusOK)
	return frames(d.t, r.body)
}

func frames(t testing.TB, b []byte) ([]string, bool) {
	t.Helper()
	var out []string
	for len(b) > 0 {
		if len(b) < 4 {
			t.Fatalf("truncated frame: %q", b)
		}
		n := binary.BigEndian.Uint32(b)
		b = b[4:]
		if n == frameEOF {
			if len(b) > 0 {
				t.Fatalf("bytes after the EOF frame: %q", b)
			}
			return out, true
		}
		out = append(out, string(b[:n]))
		b = b[n:]
	}
	return out, false
}

func TestWorldStreamsExactlyOnce(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		run := d.newWorldRun(t)
		d.ev(run, world.StepCreated, "step_a", map[string]any{"stepName": "a"}).must(t, http.StatusOK)
		d.ev(run, world.StepStarted, "step_a", nil).must(t, http.StatusOK)
		d.wwrite(run, "strm_out", "step_a", 1, 0, "A0", "A1", "A2").must(t, http.StatusOK)
		d.ev(run, world.StepRetrying, "step_a", map[string]any{"error": "x"}).must(t, http.StatusOK)
		d.ev(run, world.StepStarted, "step_a", nil).must(t, http.StatusOK)
		// The zombie attempt 1 is fenced; attempt 2's identical chunks are
		// adopted; a page re-sent after a lost reply adds nothing.
		d.wwrite(run, "strm_out", "step_a", 1, 3, "late").must(t, http.StatusForbidden)
		rep := decode[appendReply](t, d.wwrite(run, "strm_out", "step_a", 2, 0, "A0", "A1", "A2").must(t, http.StatusOK))
		if outcomes(rep.Acks) != "0:adopted 1:adopted 2:adopted" {
			t.Fatalf("attempt 2: %v", outcomes(rep.Acks))
		}
		rep = decode[appendReply](t, d.wwrite(run, "strm_out", "step_a", 2, 0, "A0", "A1", "A2").must(t, http.StatusOK))
		if outcomes(rep.Acks) != "0:retransmit 1:retransmit 2:retransmit" {
			t.Fatalf("re-sent page: %v", outcomes(rep.Acks))
		}
		if got, _ := d.wread("strm_out", "view=committed"); len(got) != 0 {
			t.Fatalf("committed before step_completed: %v", got)
		}
		d.ev(run, world.StepCompleted, "step_a", map[string]any{"result": 1}).must(t, http.StatusOK)
		// A write that arrives after the outcome (v4 flushes late) joins
		// the committed view at once.
		d.wwrite(run, "strm_out", "step_a", 2, 3, "A3").must(t, http.StatusOK)
		// Anonymous writes, de-duplicated by Idempotency-Key on retry.
		body := appendFrame(nil, []byte("anon"))
		hdr := []string{"Content-Type", "application/octet-stream", "Weir-Framing", "u32be", "Idempotency-Key", "k1"}
		d.wcall("POST", "runs/"+run+"/streams/strm_out", body, hdr...).must(t, http.StatusOK)
		d.wcall("POST", "runs/"+run+"/streams/strm_out", body, hdr...).must(t, http.StatusOK).header(t, "Weir-Idempotent-Replay", "true")
		want := []string{"A0", "A1", "A2", "A3", "anon"}
		for _, view := range []string{"live", "committed"} {
			got, eof := d.wread("strm_out", "view="+view)
			if !slices.Equal(got, want) || eof {
				t.Fatalf("%s view %v (eof %v), want %v", view, got, eof, want)
			}
			from, _ := d.wread("strm_out", "view="+view+"&index=3")
			if !slices.Equal(from, want[3:]) {
				t.Fatalf("%s view from index 3: %v", view, from)
			}
			tail, _ := d.wread("strm_out", "view="+view+"&index=-2")
			if !slices.Equal(tail, want[3:]) {
				t.Fatalf("%s view from index -2: %v", view, tail)
			}
		}
		info := decode[map[string]any](t, d.wcall("GET", "streams/strm_out/info", nil).must(t, http.StatusOK))
		if info["tailIndex"] != float64(4) || info["done"] != false {
			t.Fatalf("info %v", info)
		}
		// getStreamChunks, paged.
		var chunks []string
		cursor := ""
		for {
			q := "streams/strm_out/chunks?limit=2"
			if cursor != "" {
				q += "&cursor=" + cursor
			}
			page := decode[struct {
				Data []struct {
					Index int64 `json:"index"`
					Data  struct {
						Type string `json:"__type"`
						Data []byte `json:"data"`
					} `json:"data"`
				} `json:"data"`
				Cursor  *string `json:"cursor"`
				HasMore bool    `json:"hasMore"`
			}](t, d.wcall("GET", q, nil).must(t, http.StatusOK))
			for _, c := range page.Data {
				if c.Index != int64(len(chunks)) || c.Data.Type != "Uint8Array" {
					t.Fatalf("chunk %+v at %d", c, len(chunks))
				}
				chunks = append(chunks, string(c.Data.Data))
			}
			if !page.HasMore {
				break
			}
			cursor = *page.Cursor
		}
		if !slices.Equal(chunks, want) {
			t.Fatalf("chunks %v", chunks)
		}
		// The stream is a run stream of the Durable Streams protocol too.
		if got := d.call("GET", "runs/"+run+"/strm_out", nil).must(t, http.StatusOK).String(); got != strings.Join(want, "") {
			t.Fatalf("DS read %q", got)
		}
		// Bad writes.
		d.wwrite(run, "strm_out", "", 0, 0, "x").must(t, http.StatusOK) // anonymous without a key is allowed
		d.wcall("POST", "runs/"+run+"/streams/strm_out", []byte("x"), "Weir-Writer", "workflow", "Weir-Attempt", "1", "Weir-Seq", "0").
			must(t, http.StatusBadRequest)
		d.wcall("POST", "runs/"+run+"/streams/bad%20name", []byte("x")).must(t, http.StatusBadRequest)
		other := d.newWorldRun(t)
		d.wwrite(other, "strm_out", "", 0, 0, "x").must(t, http.StatusConflict)
		d.wwrite("wrun_nope", "strm_new", "", 0, 0, "x").must(t, http.StatusNotFound)
	})
}

func TestWorldFailedStepAndDeferredClose(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		run := d.newWorldRun(t)
		d.ev(run, world.StepCreated, "step_f", map[string]any{"stepName": "f"}).must(t, http.StatusOK)
		d.ev(run, world.StepStarted, "step_f", nil).must(t, http.StatusOK)
		d.wwrite(run, "strm_s", "step_f", 1, 0, "F0", "F1").must(t, http.StatusOK)
		d.ev(run, world.StepFailed, "step_f", map[string]any{"error": "fatal"}).must(t, http.StatusOK)
		d.ev(run, world.StepCreated, "step_c", map[string]any{"stepName": "c"}).must(t, http.StatusOK)
		d.ev(run, world.StepStarted, "step_c", nil).must(t, http.StatusOK)
		d.wwrite(run, "strm_s", "step_c", 1, 0, "end").must(t, http.StatusOK)
		// A follow read waits for what comes.
		type result struct {
			frames []string
			eof    bool
		}
		done := make(chan result, 1)
		go func() {
			r := d.wcall("GET", "streams/strm_s?view=committed&follow=true", nil)
			f, eof := frames(t, r.body)
			done <- result{f, eof}
		}()
		d.wcall("POST", "runs/"+run+"/streams/strm_s/close", []byte(`{"stepId":"step_c","attempt":1}`)).must(t, http.StatusAccepted)
		if info := decode[map[string]any](t, d.wcall("GET", "streams/strm_s/info", nil)); info["done"] != false {
			t.Fatalf("closed before the step's commit: %v", info)
		}
		d.ev(run, world.StepCompleted, "step_c", map[string]any{"result": 1}).must(t, http.StatusOK)
		select {
		case r := <-done:
			if !slices.Equal(r.frames, []string{"end"}) || !r.eof {
				t.Fatalf("follow read %v eof %v, want [end] and the EOF", r.frames, r.eof)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the follow read did not end within 10s of the close")
		}
		live, eof := d.wread("strm_s", "view=live")
		if !slices.Equal(live, []string{"F0", "F1", "end"}) || !eof {
			t.Fatalf("live view %v eof %v", live, eof)
		}
		if info := decode[map[string]any](t, d.wcall("GET", "streams/strm_s/info?view=committed", nil)); info["tailIndex"] != float64(0) || info["done"] != true {
			t.Fatalf("committed info %v", info)
		}
		names := decode[map[string][]string](t, d.wcall("GET", "runs/"+run+"/streams", nil).must(t, http.StatusOK))
		if !slices.Equal(names["streams"], []string{"strm_s"}) {
			t.Fatalf("streams %v", names)
		}
		// Unknown streams: empty, not done.
		if info := decode[map[string]any](t, d.wcall("GET", "streams/strm_never/info", nil)); info["tailIndex"] != float64(-1) {
			t.Fatalf("info of an unknown stream %v", info)
		}
	})
}

var testWorldSecret = []byte("0123456789abcdef-world")

func TestWorldQueueAndCancel(t *testing.T) {
	t.Run("no delivery", func(t *testing.T) {
		d := newDSServer(t, nil)
		d.wcall("POST", "queue", []byte(`{"queueName":"__wkf_workflow_w","payload":{},"target":"http://127.0.0.1:1"}`)).
			must(t, http.StatusServiceUnavailable).header(t, "Weir-Error", "no_delivery")
	})
	onEveryStoreWith(t, &Config{WorldDelivery: true, WorldSecret: testWorldSecret}, func(t *testing.T, d *dsServer) {
		run := d.newWorldRun(t)
		body := `{"queueName":"__wkf_workflow_workflow//wf.ts//wf","payload":{"runId":"` + run + `"},"target":"http://127.0.0.1:3999","idempotencyKey":"k",` +
			`"targetSignature":"` + delivery.SignTarget(testWorldSecret, "http://127.0.0.1:3999") + `"}`
		m1 := decode[map[string]string](t, d.wcall("POST", "queue", []byte(body)).must(t, http.StatusOK))
		m2 := decode[map[string]string](t, d.wcall("POST", "queue", []byte(body)).must(t, http.StatusOK))
		if !strings.HasPrefix(m1["messageId"], "msg_") || m1["messageId"] != m2["messageId"] {
			t.Fatalf("the key did not de-duplicate: %v %v", m1, m2)
		}
		for _, bad := range []string{
			`{"queueName":"nope","payload":{},"target":"http://x"}`,
			`{"queueName":"__wkf_step_s","payload":{},"target":"file:///etc"}`,
			`{"queueName":"__wkf_step_s","payload":{},"target":"http://u:p@x"}`,
			`{"queueName":"__wkf_step_s","payload":{},"target":"http://x","delaySeconds":-1}`,
			`{"queueName":"__wkf_step_s","target":"http://x"}`,
		} {
			d.wcall("POST", "queue", []byte(bad)).must(t, http.StatusBadRequest)
		}
		ms := decode[struct {
			Messages []messageJSON `json:"messages"`
		}](t, d.wcall("GET", "queue?state=pending", nil).must(t, http.StatusOK))
		if len(ms.Messages) != 1 || ms.Messages[0].RunID != run {
			t.Fatalf("pending %+v", ms)
		}
		d.wcall("POST", "queue/msg_nope/redeliver", nil).must(t, http.StatusNotFound)
		// A cancel from weir: run_cancelled, and the run's workflow
		// message to the app it last heard from.
		d.ev(run, world.HookCreated, "hook_1", map[string]any{"token": "tok-c"}).must(t, http.StatusOK)
		d.runsCall("POST", "/v1/runs/"+run+"/cancel").must(t, http.StatusAccepted)
		got := decode[world.Run](t, d.wcall("GET", "runs/"+run, nil))
		if got.Status != world.Cancelled {
			t.Fatalf("after cancel: %+v", got)
		}
		d.wcall("GET", "hooks?token=tok-c", nil).must(t, http.StatusNotFound)
		ms = decode[struct {
			Messages []messageJSON `json:"messages"`
		}](t, d.wcall("GET", "queue?state=pending", nil))
		if len(ms.Messages) != 2 || ms.Messages[1].Target != "http://127.0.0.1:3999" {
			t.Fatalf("after cancel, pending %+v", ms)
		}
		// Idempotent: 200, and no second run_cancelled in the log.
		d.wcall("POST", "runs/"+run+"/cancel", nil).must(t, http.StatusOK)
		d.ev(run, world.RunCancelled, "", nil).must(t, http.StatusOK)
		evs := decode[struct {
			Data []world.Event `json:"data"`
		}](t, d.wcall("GET", "runs/"+run+"/events?limit=1000", nil).must(t, http.StatusOK))
		n := 0
		for _, e := range evs.Data {
			if e.EventType == world.RunCancelled {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d run_cancelled events after three cancels, want 1", n)
		}
	})
}

// `workflow health` writes a stream for a run id it made up, closes it and
// reads it back: a health check's stream needs no run, on both stores.
// (Before, weir refused the write, "run not found", and the check timed
// out after 30 s.)
func TestWorldHealthCheckStream(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		name := world.HealthCheckPrefix + "01JZ0000000000000000000000"
		fake := "wrun_01JZ0000000000000000000001"
		body := appendFrame(nil, []byte(`{"healthy":true}`))
		hdr := []string{"Content-Type", "application/octet-stream", "Weir-Framing", "u32be", "Idempotency-Key", "h1"}
		opened := d.srv.worldOpened.wait()
		d.wcall("POST", "runs/"+fake+"/streams/"+name, body, hdr...).must(t, http.StatusOK)
		select {
		case <-opened:
		default:
			t.Fatal("the health check's stream was made: followers of names not written yet were not woken")
		}
		// Written again (every write opens it): no follower is woken
		// (red-team round eleven: 20 writes a second woke 1,000 followers
		// 20 times a second).
		opened = d.srv.worldOpened.wait()
		d.wcall("POST", "runs/"+fake+"/streams/"+name, body, hdr...).must(t, http.StatusOK).header(t, "Weir-Idempotent-Replay", "true")
		select {
		case <-opened:
			t.Fatal("a write to a health check's stream made already woke the followers of names not written yet")
		default:
		}
		d.wcall("POST", "runs/"+fake+"/streams/"+name+"/close", []byte(`{}`), "Content-Type", "application/json").must(t, http.StatusOK)
		got, eof := d.wread(name, "index=0")
		if !slices.Equal(got, []string{`{"healthy":true}`}) || !eof {
			t.Fatalf("the health check reads %q (eof %v)", got, eof)
		}
		info := decode[map[string]any](t, d.wcall("GET", "streams/"+name+"/info", nil).must(t, http.StatusOK))
		if info["tailIndex"] != float64(0) || info["done"] != true {
			t.Fatalf("info %v", info)
		}
		// Other names still need their run.
		d.wcall("POST", "runs/"+fake+"/streams/strm_x", body, hdr[:4]...).must(t, http.StatusNotFound)
	})
}

// A cancel from weir (POST /v1/world/runs/{run}/cancel, and the runs API's
// cancel of a World run) answers the run without an input over
// store.MaxListedValue (red-team round five: stalled cancels of an ended
// run of 15 MiB held their replies whole); GET has it.
func TestWorldCancelReplyElidesLargeValues(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		big := strings.Repeat("<", store.MaxListedValue+1)
		rep := decode[worldEventReply](t, d.ev("-", world.RunCreated, "", map[string]any{
			"deploymentId": "dpl_test", "workflowName": "workflow//wf.ts//wf", "input": big}).must(t, http.StatusOK))
		run := rep.Run.RunID
		got := decode[world.Run](t, d.wcall("POST", "runs/"+run+"/cancel", nil).must(t, http.StatusAccepted))
		if got.Status != world.Cancelled || got.Input != nil {
			t.Fatalf("cancel: %s, %d bytes of input", got.Status, len(got.Input))
		}
		got = decode[world.Run](t, d.wcall("POST", "runs/"+run+"/cancel", nil).must(t, http.StatusOK))
		if got.Input != nil {
			t.Fatalf("a cancel of the cancelled run: %d bytes of input", len(got.Input))
		}
		var r api.Run
		if err := json.Unmarshal(d.runsCall("POST", "/v1/runs/"+run+"/cancel").must(t, http.StatusOK).body, &r); err != nil {
			t.Fatal(err)
		}
		if !r.Elided || r.Input != nil {
			t.Fatalf("the runs API's cancel: elided %v, %d bytes of input", r.Elided, len(r.Input))
		}
		got = decode[world.Run](t, d.wcall("GET", "runs/"+run, nil).must(t, http.StatusOK))
		var in string
		if err := json.Unmarshal(got.Input, &in); err != nil || in != big {
			t.Fatalf("GET: %d bytes of input, %v", len(got.Input), err)
		}
	})
}

// The dead letters /metrics counts: at most maxDeadBytes of their payloads
// are read (and at most once per deadFresh for every scrape; red-team
// round five: 71 scrapes of a store keeping 16 dead letters of 15 MiB took
// a server past 1.4 GB).
func TestDeadLetterMetricIsBounded(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		ctx := t.Context()
		payload := []byte(`"` + strings.Repeat("x", 3<<20) + `"`)
		for i := range 4 {
			id := fmt.Sprintf("msg_01DEADLETTER00000000000%03d", i)
			if _, _, err := d.st.Enqueue(ctx, &store.EnqueueParams{ID: id, QueueName: "__wkf_step_s", Payload: payload, Target: "http://127.0.0.1:9"}); err != nil {
				t.Fatal(err)
			}
		}
		ms, err := d.st.ClaimMessages(ctx, &store.ClaimMessagesParams{Owner: "test", Limit: 10, Lease: time.Minute})
		if err != nil || len(ms) != 4 {
			t.Fatalf("claimed %d, %v", len(ms), err)
		}
		for _, m := range ms {
			if err := d.st.SettleMessage(ctx, &store.SettleParams{ID: m.ID, Lease: m.Lease, Dead: true, LastError: "refused"}); err != nil {
				t.Fatal(err)
			}
		}
		scrape := func() string {
			m := string(d.runsCall("GET", "/metrics").must(t, http.StatusOK).body)
			i := strings.Index(m, "\nweir_world_dead_letters ")
			if i < 0 {
				t.Fatalf("/metrics has no weir_world_dead_letters")
			}
			return strings.Fields(m[i+1:])[1]
		}
		// 4 × 3 MiB: the count stops at 4 MiB of payloads (a list's page),
		// a lower bound.
		if got := scrape(); got != "1" {
			t.Fatalf("dead letters counted %s, want 1 (4 MiB of 3 MiB payloads)", got)
		}
	})
}

// A World path id with a control byte or bad UTF-8 is refused before any
// store reads for it, with the World's code, the same on both stores
// (PostgreSQL answered a NUL with its driver's words: red team, round
// seven).
func TestWorldPathIDsCheckedFirst(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		for _, path := range []string{"runs/wrun_%00", "runs/wrun_%FF/events", "runs/wrun_a/events/evnt_%00", "steps/step_%C0%80", "hooks/hook_%00", "runs/wrun_%01/steps"} {
			r := d.wcall("GET", path, nil).must(t, http.StatusBadRequest)
			r.header(t, "Weir-Error", "invalid_event")
		}
		r := d.wcall("POST", "runs/wrun_%00/cancel", nil).must(t, http.StatusBadRequest)
		r.header(t, "Weir-Error", "invalid_event")
	})
}
