package delivery_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/delivery"
	"github.com/weirhq/weir/internal/pgtest"
	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/pgstore"
	"github.com/weirhq/weir/store/sqlitestore"
)

var secret = []byte("0123456789abcdef-test-secret")

// onEveryStore runs f on a fresh store of each backend.
func onEveryStore(t *testing.T, f func(t *testing.T, st store.Full)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		st, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "weir.db"), &sqlitestore.Config{Synchronous: "OFF"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		f(t, st)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		st, err := pgstore.Open(t.Context(), pgtest.URL(), &pgstore.Config{Schema: pgtest.NewSchema(t), MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		f(t, st)
	})
}

// delivered is one request the app got.
type delivered struct {
	path, queue, id string
	attempt         int64
	body            string
	sigErr          error
	traceparent     string
}

// app is an app's two routes: each request is verified, reported on got,
// and answered by reply (nil: 200 {}).
type app struct {
	srv   *httptest.Server
	got   chan delivered
	mu    sync.Mutex
	reply func(n int, d delivered) (int, string)
	n     int
}

func newApp(t *testing.T, reply func(n int, d delivered) (int, string)) *app {
	a := &app{got: make(chan delivered, 100), reply: reply}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		att, _ := strconv.ParseInt(r.Header.Get("x-vqs-message-attempt"), 10, 64)
		d := delivered{path: r.URL.Path, queue: r.Header.Get("x-vqs-queue-name"), id: r.Header.Get("x-vqs-message-id"),
			attempt: att, body: string(body), traceparent: r.Header.Get("traceparent")}
		d.sigErr = delivery.Verify(secret, time.Now(), r.Header.Get(delivery.SignatureHeader), d.queue, d.id, d.attempt, body)
		a.mu.Lock()
		a.n++
		n := a.n
		a.mu.Unlock()
		code, rep := 200, "{}"
		if a.reply != nil {
			code, rep = a.reply(n, d)
		}
		a.got <- d
		if strings.HasPrefix(rep, "<") {
			w.Header().Set("Content-Type", "text/html")
		} else {
			w.Header().Set("Content-Type", "application/json") // the World's handler's
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, rep)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// worldReply answers a delivery as the World's handler does: JSON.
func worldReply(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"ok":true}`)
}

// next waits for the app's next delivery.
func (a *app) next(t *testing.T) delivered {
	t.Helper()
	select {
	case d := <-a.got:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("waited 10s for a delivery")
		return delivered{}
	}
}

type outcomes struct {
	mu  sync.Mutex
	out []string
	ch  chan string
}

func (o *outcomes) observe(outcome string, _ time.Duration) {
	o.mu.Lock()
	o.out = append(o.out, outcome)
	o.mu.Unlock()
	o.ch <- outcome
}

func (o *outcomes) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-o.ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("waited 10s for a delivery's outcome")
		return ""
	}
}

// start runs a deliverer on st until the test ends.
func start(t *testing.T, st store.Full, cfg delivery.Config) *outcomes {
	t.Helper()
	o := &outcomes{ch: make(chan string, 100)}
	cfg.Store, cfg.Secret, cfg.Observe = st, secret, o.observe
	if cfg.Backoff == nil {
		cfg.Backoff = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}
	}
	d, err := delivery.New(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the deliverer did not stop within 10s")
		}
	})
	return o
}

func enqueue(t *testing.T, st store.Full, id, queue, target string, delay time.Duration) {
	t.Helper()
	_, _, err := st.Enqueue(t.Context(), &store.EnqueueParams{ID: id, QueueName: queue, Payload: json.RawMessage(`{"runId":"wrun_1"}`),
		Target: target, RunID: "wrun_1", Delay: delay})
	if err != nil {
		t.Fatal(err)
	}
}

func pending(t *testing.T, st store.Full, state string) []*store.Message {
	t.Helper()
	ms, err := st.Messages(t.Context(), &store.MessagesParams{State: state})
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func TestDeliversSignedToTheRoute(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st store.Full) {
		a := newApp(t, nil)
		o := start(t, st, delivery.Config{})
		enqueue(t, st, "msg_flow", "__wkf_workflow_wf", a.srv.URL, 0)
		enqueue(t, st, "msg_step", "__ns1_wkf_step_add", a.srv.URL+"/", 0)
		got := map[string]delivered{}
		for range 2 {
			d := a.next(t)
			got[d.id] = d
		}
		if d := got["msg_flow"]; d.path != "/.well-known/workflow/v1/flow" || d.queue != "__wkf_workflow_wf" || d.attempt != 1 ||
			d.body != `{"runId":"wrun_1"}` || d.sigErr != nil {
			t.Fatalf("flow delivery %+v", d)
		}
		if d := got["msg_step"]; d.path != "/.well-known/workflow/v1/step" || d.sigErr != nil {
			t.Fatalf("step delivery %+v", d)
		}
		o.next(t)
		o.next(t)
		if ms := pending(t, st, "pending"); len(ms) != 0 {
			t.Fatalf("pending after delivery: %+v", ms)
		}
	})
}

func TestTimeoutSecondsRedeliversTheSameMessage(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st store.Full) {
		a := newApp(t, func(n int, d delivered) (int, string) {
			if n == 1 {
				return 200, `{"timeoutSeconds":0}`
			}
			return 200, `{}`
		})
		o := start(t, st, delivery.Config{})
		enqueue(t, st, "msg_1", "__wkf_workflow_wf", a.srv.URL, 0)
		first, second := a.next(t), a.next(t)
		if first.id != second.id || first.attempt != 1 || second.attempt != 2 {
			t.Fatalf("deliveries %+v then %+v: want one id, attempts 1 and 2", first, second)
		}
		if got := []string{o.next(t), o.next(t)}; got[0] != "rescheduled" || got[1] != "delivered" {
			t.Fatalf("outcomes %v", got)
		}
	})
}

func TestFailuresBackOffThenSucceed(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st store.Full) {
		a := newApp(t, func(n int, d delivered) (int, string) {
			if n <= 2 {
				return 500, "boom"
			}
			return 204, ""
		})
		o := start(t, st, delivery.Config{})
		enqueue(t, st, "msg_1", "__wkf_workflow_wf", a.srv.URL, 0)
		for i := range 3 {
			if d := a.next(t); d.attempt != int64(i+1) {
				t.Fatalf("delivery %d has attempt %d", i+1, d.attempt)
			}
		}
		if got := []string{o.next(t), o.next(t), o.next(t)}; fmt.Sprint(got) != "[failed failed delivered]" {
			t.Fatalf("outcomes %v", got)
		}
	})
}

func TestDeadLetteredAfterMaxFailures(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st store.Full) {
		a := newApp(t, func(int, delivered) (int, string) { return 503, "down" })
		o := start(t, st, delivery.Config{MaxFailures: 3})
		enqueue(t, st, "msg_1", "__wkf_workflow_wf", a.srv.URL, 0)
		if got := []string{o.next(t), o.next(t), o.next(t)}; fmt.Sprint(got) != "[failed failed dead]" {
			t.Fatalf("outcomes %v", got)
		}
		dead := pending(t, st, "dead")
		if len(dead) != 1 || dead[0].ID != "msg_1" || dead[0].Failures != 3 || dead[0].LastError != "HTTP 503" {
			t.Fatalf("dead letters %+v", dead)
		}
		for range 3 {
			a.next(t)
		}
		// A redelivery sends it again.
		if err := st.RedeliverMessage(t.Context(), "msg_1"); err != nil {
			t.Fatal(err)
		}
		if d := a.next(t); d.id != "msg_1" || d.attempt != 4 {
			t.Fatalf("redelivered %+v", d)
		}
	})
}

// A run's second workflow message, claimed beside its first and put back
// (one delivery of a run at a time), keeps its failures and its attempt
// count: to an app that refuses every delivery, each of the two is sent
// three times, attempts 1, 2, 3, and dead-lettered. Before, a put back
// cleared the message's failures (it was never dead-lettered while the
// first kept being claimed beside it) and counted as an attempt.
func TestAPutBackMessageKeepsItsFailures(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st store.Full) {
		a := newApp(t, func(int, delivered) (int, string) { return 503, "down" })
		enqueue(t, st, "msg_1", "__wkf_workflow_wf", a.srv.URL, 0)
		enqueue(t, st, "msg_2", "__wkf_workflow_wf", a.srv.URL, 0)
		o := start(t, st, delivery.Config{MaxFailures: 3})
		var got []string
		for len(got) < 6 {
			got = append(got, o.next(t))
		}
		slices.Sort(got)
		if fmt.Sprint(got) != "[dead dead failed failed failed failed]" {
			t.Fatalf("outcomes %v", got)
		}
		attempts := map[string][]int64{}
		for range 6 {
			d := a.next(t)
			attempts[d.id] = append(attempts[d.id], d.attempt)
		}
		if fmt.Sprint(attempts) != "map[msg_1:[1 2 3] msg_2:[1 2 3]]" {
			t.Fatalf("attempts sent %v, want 1, 2, 3 of each", attempts)
		}
		dead := pending(t, st, "dead")
		if len(dead) != 2 || dead[0].Failures != 3 || dead[1].Failures != 3 {
			t.Fatalf("dead letters %+v", dead)
		}
	})
}

func TestAppDownMessagesWait(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st store.Full) {
		// A target nothing listens on: connection refused, retried.
		down := httptest.NewServer(http.NotFoundHandler())
		url := down.URL
		down.Close()
		o := start(t, st, delivery.Config{})
		enqueue(t, st, "msg_1", "__wkf_workflow_wf", url, 0)
		if got := o.next(t); got != "failed" {
			t.Fatalf("outcome %q", got)
		}
		ms := pending(t, st, "pending")
		if len(ms) != 1 || ms[0].Failures < 1 || ms[0].LastError == "" {
			t.Fatalf("the message after a refused connection: %+v", ms)
		}
	})
}

func TestADeadDeliverersLeaseEnds(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st store.Full) {
		a := newApp(t, nil)
		enqueue(t, st, "msg_1", "__wkf_workflow_wf", a.srv.URL, 0)
		// A deliverer claims it and dies without settling.
		ms, err := st.ClaimMessages(t.Context(), &store.ClaimMessagesParams{Owner: "ghost", Limit: 1, Lease: 300 * time.Millisecond})
		if err != nil || len(ms) != 1 {
			t.Fatalf("claim: %v %v", ms, err)
		}
		start(t, st, delivery.Config{PollInterval: 50 * time.Millisecond})
		if d := a.next(t); d.id != "msg_1" || d.attempt != 2 {
			t.Fatalf("after the lease: %+v", d)
		}
	})
}

func TestShutdownMakesTheMessageDueAgain(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st store.Full) {
		release := make(chan struct{})
		inApp := make(chan struct{}, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inApp <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		defer srv.Close()
		defer close(release)
		cfg := delivery.Config{Store: st, Secret: secret}
		d, err := delivery.New(&cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = d.Run(ctx) }()
		enqueue(t, st, "msg_1", "__wkf_workflow_wf", srv.URL, 0)
		select {
		case <-inApp:
		case <-time.After(10 * time.Second):
			t.Fatal("waited 10s for the delivery")
		}
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return within 10s of its context's end")
		}
		ms := pending(t, st, "pending")
		if len(ms) != 1 || ms[0].Lease != "" || ms[0].Failures != 0 || ms[0].DeliverAt.After(time.Now()) {
			t.Fatalf("after the shutdown: %+v", ms)
		}
		if due, err := st.NextMessageDue(t.Context()); err != nil || due.After(time.Now()) {
			t.Fatalf("next due %v %v: want now", due, err)
		}
	})
}

func TestVerify(t *testing.T) {
	now := time.Now()
	body := []byte(`{"runId":"r"}`)
	sig := delivery.Sign(secret, now, "__wkf_workflow_wf", "msg_1", 2, body)
	if err := delivery.Verify(secret, now, sig, "__wkf_workflow_wf", "msg_1", 2, body); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		sig, queue, id string
		attempt        int64
		body           []byte
		at             time.Time
	}{
		"other body":    {sig, "__wkf_workflow_wf", "msg_1", 2, []byte(`{}`), now},
		"other queue":   {sig, "__wkf_step_wf", "msg_1", 2, body, now},
		"other id":      {sig, "__wkf_workflow_wf", "msg_2", 2, body, now},
		"other attempt": {sig, "__wkf_workflow_wf", "msg_1", 3, body, now},
		"stale":         {sig, "__wkf_workflow_wf", "msg_1", 2, body, now.Add(6 * time.Minute)},
		"unsigned":      {"", "__wkf_workflow_wf", "msg_1", 2, body, now},
		"malformed":     {"t=x,v1=", "__wkf_workflow_wf", "msg_1", 2, body, now},
		"other secret":  {delivery.Sign([]byte("another secret of 16+ bytes"), now, "__wkf_workflow_wf", "msg_1", 2, body), "__wkf_workflow_wf", "msg_1", 2, body, now},
	} {
		if err := delivery.Verify(secret, c.at, c.sig, c.queue, c.id, c.attempt, c.body); !errors.Is(err, delivery.ErrSignature) {
			t.Errorf("%s: Verify = %v, want ErrSignature", name, err)
		}
	}
}

func TestConfigIsChecked(t *testing.T) {
	for name, c := range map[string]delivery.Config{
		"no store":     {Secret: secret},
		"short secret": {Store: nilStore{}, Secret: []byte("short")},
		"bad backoff":  {Store: nilStore{}, Secret: secret, Backoff: []time.Duration{0}},
	} {
		if _, err := delivery.New(&c); !errors.Is(err, delivery.ErrConfig) {
			t.Errorf("%s: New = %v, want ErrConfig", name, err)
		}
	}
}

// nilStore is only ever handed to New, which must refuse the config first.
type nilStore struct{ store.WorldStore }

// TestSignVector pins the signature the World package checks: the same
// vector is in js/world/test/queue.test.ts.
func TestSignVector(t *testing.T) {
	got := delivery.Sign([]byte("0123456789abcdef-test-secret"), time.Unix(1764583200, 0), "__wkf_step_step//add",
		"msg_01JZ0000000000000000000000", 3, []byte(`{"workflowRunId":"wrun_1","stepId":"step_1"}`))
	if want := "t=1764583200,v1=07a6aab843a86bab3830011e61b8c3743043f92e9c5451712778498c0e24c21a"; got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

func TestARunsWorkflowMessagesAreSerializedAndCoalesced(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st store.Full) {
		release := make(chan struct{})
		var mu sync.Mutex
		inFlight, maxInFlight, flows := 0, 0, 0
		entered := make(chan struct{}, 10)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			inFlight++
			flows++
			maxInFlight = max(maxInFlight, inFlight)
			first := flows == 1
			mu.Unlock()
			entered <- struct{}{}
			if first {
				<-release
			}
			mu.Lock()
			inFlight--
			mu.Unlock()
			worldReply(w)
		}))
		defer srv.Close()
		o := start(t, st, delivery.Config{})
		enqueue(t, st, "msg_1", "__wkf_workflow_wf", srv.URL, 0)
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("waited 10s for the first delivery")
		}
		// Four more wake-ups while the first replay runs: none is delivered
		// beside it; the first after it replays once, and makes the rest
		// redundant.
		for i := 2; i <= 5; i++ {
			enqueue(t, st, fmt.Sprintf("msg_%d", i), "__wkf_workflow_wf", srv.URL, 0)
		}
		close(release)
		var got []string
		for len(got) < 5 {
			got = append(got, o.next(t))
		}
		slices.Sort(got)
		if fmt.Sprint(got) != "[coalesced coalesced coalesced delivered delivered]" {
			t.Fatalf("outcomes %v", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if maxInFlight != 1 || flows != 2 {
			t.Fatalf("%d deliveries, at most %d at once: want 2, one at a time", flows, maxInFlight)
		}
		if ms := pending(t, st, "pending"); len(ms) != 0 {
			t.Fatalf("pending after: %+v", ms)
		}
	})
}

// On PostgreSQL any number of weir servers share the queue: two
// deliverers on one schema deliver each message once.
// twoPostgresStores are two stores, with pools of their own, on one fresh
// schema: two servers on one database.
func twoPostgresStores(t *testing.T) (store.Full, store.Full) {
	schema := pgtest.NewSchema(t)
	open := func() store.Full {
		st, err := pgstore.Open(t.Context(), pgtest.URL(), &pgstore.Config{Schema: schema, MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	return open(), open()
}

func TestTwoDeliverersShareThePostgresQueue(t *testing.T) {
	a, b := twoPostgresStores(t)
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("x-vqs-message-id")]++
		mu.Unlock()
		worldReply(w)
	}))
	defer srv.Close()
	oa := start(t, a, delivery.Config{Owner: "a"})
	ob := start(t, b, delivery.Config{Owner: "b"})
	const n = 40
	for i := range n {
		// Step messages: delivered in parallel, not one per run.
		_, _, err := a.Enqueue(t.Context(), &store.EnqueueParams{ID: fmt.Sprintf("msg_%02d", i), QueueName: "__wkf_step_s",
			Payload: json.RawMessage(`{}`), Target: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
	}
	byOwner := map[string]int{}
	for range n {
		select {
		case <-oa.ch:
			byOwner["a"]++
		case <-ob.ch:
			byOwner["b"]++
		case <-time.After(10 * time.Second):
			t.Fatalf("waited 10s for deliveries: %v so far", byOwner)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Fatalf("%d messages delivered, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("message %s delivered %d times", id, c)
		}
	}
	if byOwner["b"] == 0 {
		t.Logf("every delivery went to deliverer a (%v): NOTIFY woke a first each time", byOwner)
	}
}

// A target that hangs holds MaxPerTarget deliveries and no more: the other
// targets' messages are delivered meanwhile. (Before, a hung target's
// messages took every slot, and every other target waited up to Timeout,
// 15 minutes by default.)
func TestAHungTargetDoesNotStallTheOthers(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st store.Full) {
		release := make(chan struct{})
		var hung sync.WaitGroup
		var inHung, most int
		var mu sync.Mutex
		stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hung.Add(1)
			defer hung.Done()
			mu.Lock()
			inHung++
			most = max(most, inHung)
			mu.Unlock()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			mu.Lock()
			inHung--
			mu.Unlock()
		}))
		t.Cleanup(func() { close(release); hung.Wait(); stuck.Close() })
		ok := newApp(t, nil)
		start(t, st, delivery.Config{Concurrency: 8, MaxPerTarget: 3, PollInterval: 20 * time.Millisecond})
		for i := range 20 {
			_, _, err := st.Enqueue(t.Context(), &store.EnqueueParams{ID: fmt.Sprintf("msg_hung%02d", i), QueueName: "__wkf_step_st",
				Payload: json.RawMessage(`{}`), Target: stuck.URL})
			if err != nil {
				t.Fatal(err)
			}
		}
		for i := range 10 {
			_, _, err := st.Enqueue(t.Context(), &store.EnqueueParams{ID: fmt.Sprintf("msg_ok%02d", i), QueueName: "__wkf_step_st",
				Payload: json.RawMessage(`{}`), Target: ok.srv.URL})
			if err != nil {
				t.Fatal(err)
			}
		}
		for range 10 {
			if d := ok.next(t); d.sigErr != nil {
				t.Fatal(d.sigErr)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if most > 3 {
			t.Fatalf("%d deliveries to the hung target at once, MaxPerTarget is 3", most)
		}
	})
}

// A target's signature binds the URL to the secret.
func TestSignTarget(t *testing.T) {
	sig := delivery.SignTarget(secret, "http://127.0.0.1:3000")
	if err := delivery.VerifyTarget(secret, "http://127.0.0.1:3000", sig); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ target, sig string }{
		{"http://127.0.0.1:3001", sig},
		{"http://127.0.0.1:3000", ""},
		{"http://127.0.0.1:3000", delivery.SignTarget([]byte("another-secret-of-16b"), "http://127.0.0.1:3000")},
	} {
		if err := delivery.VerifyTarget(secret, c.target, c.sig); !errors.Is(err, delivery.ErrSignature) {
			t.Errorf("%s with %q: %v, want ErrSignature", c.target, c.sig, err)
		}
	}
	// The vector the World package's test checks too.
	if got := delivery.SignTarget([]byte("0123456789abcdef"), "http://127.0.0.1:3000"); got != targetVector {
		t.Fatalf("SignTarget = %s", got)
	}
}

const targetVector = "v1=d4a6fffd1918c06232021e033f499d94121ff1e5e607a88080f962b6cff40f3d"

// Each kind of failure gets its own hint.
func TestHint(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range []string{"HTTP 401", "HTTP 404", "HTTP 302", "HTTP 500",
		`Post "http://127.0.0.1:3000/.well-known/workflow/v1/flow": dial tcp 127.0.0.1:3000: connect: connection refused`,
		"dial tcp: lookup app.invalid: no such host", "context deadline exceeded", `queue name "x" has no route`,
		`the target answered 200 with "text/html", not the World's JSON reply: not the app's /.well-known/workflow/v1 route`, "something else"} {
		h := delivery.Hint(e)
		if h == "" || seen[h] {
			t.Errorf("%q: hint %q (empty, or another error's)", e, h)
		}
		seen[h] = true
	}
	if delivery.Hint("") != "" {
		t.Error("no error, no hint")
	}
}

// A target that answers 2xx with something other than the World's JSON (a
// page of HTML, a proxy's login) has not taken the message: it is retried,
// with the reason, not counted delivered and lost.
func TestAnAppURLThatAnswersHTMLIsNotADelivery(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st store.Full) {
		a := newApp(t, func(n int, d delivered) (int, string) { return 200, "<html><body>Welcome</body></html>" })
		o := start(t, st, delivery.Config{Backoff: []time.Duration{time.Hour}, PollInterval: 10 * time.Millisecond})
		enqueue(t, st, "msg_html", "__wkf_step_s", a.srv.URL, 0)
		a.next(t)
		if got := o.next(t); got != "failed" {
			t.Fatalf("outcome %q, want failed", got)
		}
		ms := pending(t, st, "pending")
		if len(ms) != 1 || ms[0].Failures != 1 || !strings.Contains(ms[0].LastError, "not the World's JSON reply") {
			t.Fatalf("pending %+v", ms)
		}
	})
}

// gauge counts requests in flight, at most so far, and done, across the
// apps that share it; each request is held hold long.
type gauge struct {
	mu         sync.Mutex
	in, most   int
	perApp     map[string]int
	mostPerApp map[string]int
	seen       map[string]int
	done       chan string
}

func newGauge(n int) *gauge {
	return &gauge{perApp: map[string]int{}, mostPerApp: map[string]int{}, seen: map[string]int{}, done: make(chan string, n)}
}

// app serves as one app (named name) of g.
func (g *gauge) app(t *testing.T, name string, hold time.Duration) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.in++
		g.most = max(g.most, g.in)
		g.perApp[name]++
		g.mostPerApp[name] = max(g.mostPerApp[name], g.perApp[name])
		g.seen[r.Header.Get("x-vqs-message-id")]++
		g.mu.Unlock()
		time.Sleep(hold) // the app's work: the span the limiter bounds
		g.mu.Lock()
		g.in--
		g.perApp[name]--
		g.mu.Unlock()
		worldReply(w)
		g.done <- name
	}))
	t.Cleanup(srv.Close)
	return srv
}

// wait waits for n deliveries.
func (g *gauge) wait(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-g.done:
		case <-time.After(20 * time.Second):
			t.Fatalf("waited 20s for delivery %d of %d", i+1, n)
		}
	}
}

func setLimiter(t *testing.T, st store.Full, c *limit.Config) {
	t.Helper()
	if err := st.SetLimiter(t.Context(), c); err != nil {
		t.Fatal(err)
	}
}

// A delivery limiter bounds the deliveries in flight, all told and to each
// app (its per-key bound), where the deliverer's own Concurrency would let
// 100 through; every message is delivered once.
func TestALimiterBoundsDeliveries(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st store.Full) {
		setLimiter(t, st, &limit.Config{Name: "world", Concurrency: 3, PerKey: 2})
		g := newGauge(40)
		apps := []*httptest.Server{g.app(t, "a", 15*time.Millisecond), g.app(t, "b", 15*time.Millisecond)}
		start(t, st, delivery.Config{Limiter: "world", Limits: st, PollInterval: 50 * time.Millisecond})
		for i := range 40 {
			enqueue(t, st, fmt.Sprintf("msg_%02d", i), "__wkf_step_s", apps[i%2].URL, 0)
		}
		g.wait(t, 40)
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.most > 3 || g.mostPerApp["a"] > 2 || g.mostPerApp["b"] > 2 {
			t.Fatalf("at most %d in flight (%v per app): the limiter allows 3, and 2 per app", g.most, g.mostPerApp)
		}
		for id, n := range g.seen {
			if n != 1 {
				t.Fatalf("message %s delivered %d times", id, n)
			}
		}
		if g.most < 2 {
			t.Errorf("at most %d in flight: the limiter's 3 slots were never shared", g.most)
		}
	})
}

// On PostgreSQL the limiter holds across deliverers (servers) on the
// database: two deliverers with their own pools, one bound.
func TestALimiterHoldsAcrossDeliverers(t *testing.T) {
	a, b := twoPostgresStores(t)
	setLimiter(t, a, &limit.Config{Name: "world", Concurrency: 2})
	g := newGauge(30)
	app := g.app(t, "a", 20*time.Millisecond)
	start(t, a, delivery.Config{Owner: "a", Limiter: "world", Limits: a, PollInterval: 50 * time.Millisecond})
	start(t, b, delivery.Config{Owner: "b", Limiter: "world", Limits: b, PollInterval: 50 * time.Millisecond})
	for i := range 30 {
		enqueue(t, a, fmt.Sprintf("msg_%02d", i), "__wkf_step_s", app.URL, 0)
	}
	g.wait(t, 30)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.most > 2 {
		t.Fatalf("%d deliveries in flight at once across two deliverers; the limiter allows 2", g.most)
	}
	if len(g.seen) != 30 {
		t.Fatalf("%d messages delivered, want 30", len(g.seen))
	}
}

// A limiter that is not set holds deliveries back, said in the log, and
// loses none: once it is set they go.
func TestAMissingLimiterHoldsDeliveriesBack(t *testing.T) {
	onEveryStore(t, func(t *testing.T, st store.Full) {
		g := newGauge(2)
		app := g.app(t, "a", 0)
		logs := &logSink{ch: make(chan string, 100)}
		start(t, st, delivery.Config{Limiter: "later", Limits: st, PollInterval: 20 * time.Millisecond, Logger: slog.New(logs)})
		enqueue(t, st, "msg_1", "__wkf_workflow_w", app.URL, 0)
		enqueue(t, st, "msg_2", "__wkf_step_s", app.URL, 0)
		deadline := time.After(10 * time.Second)
		for warned := false; !warned; {
			select {
			case m := <-logs.ch:
				warned = strings.Contains(m, "the limiter cannot be used") && strings.Contains(m, "weir limiters set later")
			case <-deadline:
				t.Fatal("no warning of the missing limiter within 10s")
			}
		}
		g.mu.Lock()
		n := len(g.seen)
		g.mu.Unlock()
		if n != 0 {
			t.Fatalf("%d delivered without the limiter", n)
		}
		if got := len(pending(t, st, "pending")); got != 2 {
			t.Fatalf("%d messages pending, want 2 (none lost)", got)
		}
		setLimiter(t, st, &limit.Config{Name: "later", Concurrency: 1})
		g.wait(t, 2)
	})
}

// logSink is a slog.Handler that sends each record's text to ch.
type logSink struct{ ch chan string }

func (l *logSink) Enabled(context.Context, slog.Level) bool { return true }
func (l *logSink) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	select {
	case l.ch <- b.String():
	default:
	}
	return nil
}
func (l *logSink) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logSink) WithGroup(string) slog.Handler      { return l }
