package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir"
)

// The exactly-once extension end to end: Weir-Writer, Weir-Attempt,
// Weir-Seq, Weir-Commit, Weir-Abort, views, format=ndjson.

func TestWeirRetriedWriterAdoptsAndDivergentRetryAborts(t *testing.T) {
	d := newDSServer(t, nil)
	d.create("s", "text/plain")
	acks, r := d.weirAppend("s", "step/1", 1, 0, "a", "b", "c")
	if r.status != 200 || outcomes(acks) != "0:appended 1:appended 2:appended" {
		t.Fatalf("attempt 1: %d %q", r.status, outcomes(acks))
	}
	// Nothing is committed yet: a plain (committed) read holds it back.
	d.call("GET", "s", nil).must(t, 200).header(t, "Stream-Next-Offset", formatOffset(0)).header(t, "Stream-Up-To-Date", "true")
	if got := d.call("GET", "s?view=live", nil).must(t, 200).String(); got != "abc" {
		t.Fatalf("live view %q", got)
	}

	// Attempt 2 re-emits the same first two chunks: adopted, no new record.
	acks, _ = d.weirAppend("s", "step/1", 2, 0, "a", "b")
	if outcomes(acks) != "0:adopted 1:adopted" {
		t.Fatalf("attempt 2: %q", outcomes(acks))
	}
	// Then other bytes at seq 2: one abort record, then the new chunk.
	acks, _ = d.weirAppend("s", "step/1", 2, 2, "X")
	if outcomes(acks) != "4:appended" {
		t.Fatalf("attempt 2 diverges: %q", outcomes(acks))
	}
	d.finish("s", "step/1", 2, "Weir-Commit").must(t, 204).header(t, "Weir-Result", "done")
	d.finish("s", "step/1", 2, "Weir-Commit").must(t, 204).header(t, "Weir-Result", "already")

	r = d.call("GET", "s", nil).must(t, 200)
	if r.String() != "abX" {
		t.Fatalf("committed view %q", r.body)
	}
	r.header(t, "Stream-Next-Offset", formatOffset(6)).header(t, "Stream-Up-To-Date", "true")
	if got := d.call("GET", "s?view=live", nil).String(); got != "abcX" {
		t.Fatalf("live view %q", got)
	}
	var kinds []string
	for _, rec := range d.ndjson("s", "") {
		kinds = append(kinds, rec.String())
	}
	want := `data:step/1/1/0="a" data:step/1/1/1="b" data:step/1/1/2="c" abort:step/1 data:step/1/2/2="X" commit:step/1`
	if strings.Join(kinds, " ") != want {
		t.Fatalf("ndjson:\n got %s\nwant %s", strings.Join(kinds, " "), want)
	}
	recs := d.ndjson("s", "&view=committed")
	if len(recs) != 3 || string(recs[2].Data) != `"X"` || recs[2].NextOffset != formatOffset(5) {
		t.Fatalf("ndjson committed: %v", recs)
	}
	// A finished writer takes nothing new; aborting it now is refused.
	_, r = d.weirAppend("s", "step/1", 2, 3, "more")
	r.must(t, 409)
	_, r = d.weirAppend("s", "step/1", 3, 0, "a")
	r.must(t, 409)
	d.finish("s", "step/1", 2, "Weir-Abort").must(t, 409)
	d.finish("s", "nobody", 1, "Weir-Commit").must(t, 404)
}

func TestWeirPagedBatchResentInFull(t *testing.T) {
	d := newDSServer(t, nil)
	d.create("s", "text/plain")
	d.weirAppend("s", "w", 1, 0, "p1", "p2")
	d.weirAppend("s", "w", 1, 2, "p3", "p4") // its reply is lost
	// The client re-sends the whole batch, paged differently.
	acks, _ := d.weirAppend("s", "w", 1, 0, "p1", "p2", "p3")
	if outcomes(acks) != "0:retransmit 1:retransmit 2:retransmit" {
		t.Fatalf("re-sent batch: %q", outcomes(acks))
	}
	acks, _ = d.weirAppend("s", "w", 1, 3, "p4", "p5")
	if outcomes(acks) != "3:retransmit 4:appended" {
		t.Fatalf("overlapping page: %q", outcomes(acks))
	}
	// Other bytes at an acknowledged seq: 422, nothing written.
	_, r := d.weirAppend("s", "w", 1, 1, "XX")
	r.must(t, 422)
	// A gap: 409 with the seq to send.
	_, r = d.weirAppend("s", "w", 1, 9, "z")
	r.must(t, 409).header(t, "Weir-Expected-Seq", "5")
	d.finish("s", "w", 1, "Weir-Commit").must(t, 204)
	if got := d.call("GET", "s", nil).String(); got != "p1p2p3p4p5" {
		t.Fatalf("committed %q", got)
	}
}

func TestWeirFencedZombie(t *testing.T) {
	d := newDSServer(t, nil)
	d.create("s", "text/plain")
	d.weirAppend("s", "step/3", 1, 0, "old")
	d.weirAppend("s", "step/3", 2, 0, "new")
	_, r := d.weirAppend("s", "step/3", 1, 1, "zombie")
	r.must(t, 403).header(t, "Weir-Attempt", "2")
	d.finish("s", "step/3", 1, "Weir-Commit").must(t, 403).header(t, "Weir-Attempt", "2")
	if m := d.srv.metrics.fenced.Load(); m != 2 {
		t.Fatalf("fenced counter %d, want 2", m)
	}
	// Attempt 0 (committed at append) after attempts: also older.
	_, r = d.weirAppend("s", "step/3", 0, 0, "x")
	r.must(t, 403)
}

func TestWeirClosedStream(t *testing.T) {
	d := newDSServer(t, nil)
	d.create("s", "text/plain")
	d.weirAppend("s", "w", 0, 0, "a") // attempt 0: committed at append
	d.call("POST", "s", nil, "Stream-Closed", "true").must(t, 204).header(t, "Stream-Closed", "true")
	// An exact retransmit is acknowledged; anything else is 409 + Stream-Closed.
	acks, _ := d.weirAppend("s", "w", 0, 0, "a")
	if outcomes(acks) != "0:retransmit" {
		t.Fatalf("retransmit after close: %q", outcomes(acks))
	}
	_, r := d.weirAppend("s", "w", 0, 1, "b")
	r.must(t, 409).header(t, "Stream-Closed", "true").header(t, "Stream-Next-Offset", formatOffset(2))
	if got := d.call("GET", "s", nil).must(t, 200).header(t, "Stream-Closed", "true").String(); got != "a" {
		t.Fatalf("read %q", got)
	}
}

func TestWeirJSONStreamChunksAreElements(t *testing.T) {
	d := newDSServer(t, nil)
	d.create("j", "application/json")
	r := d.call("POST", "j", []byte(`[{"t":"a"}, {"t":"b"}]`), "Content-Type", "application/json",
		"Weir-Writer", "w", "Weir-Attempt", "1", "Weir-Seq", "0").must(t, 200)
	var rep appendReply
	if err := json.Unmarshal(r.body, &rep); err != nil || len(rep.Acks) != 2 {
		t.Fatalf("reply %q", r.body)
	}
	d.call("POST", "j", []byte(`[{"t":"a"}]`), "Content-Type", "application/json",
		"Weir-Writer", "w", "Weir-Attempt", "2", "Weir-Seq", "0").must(t, 200)
	d.finish("j", "w", 2, "Weir-Commit").must(t, 204)
	if got := d.call("GET", "j", nil).String(); got != `[{"t":"a"}]` {
		t.Fatalf("committed %q", got)
	}
	recs := d.ndjson("j", "")
	if len(recs) != 4 || string(recs[1].Data) != `{"t":"b"}` || recs[2].Kind != "abort" || recs[2].From != 1 || recs[3].Count != 1 {
		t.Fatalf("ndjson %v", recs)
	}
	d.call("POST", "j", []byte(`[1]`), "Content-Type", "application/json", "Weir-Writer", "w", "Weir-Attempt", "3",
		"Weir-Seq", "0", "Weir-Framing", "u32be").must(t, 400)
}

func TestNDJSONBinaryIsBase64(t *testing.T) {
	d := newDSServer(t, nil)
	d.create("b", "application/octet-stream")
	d.call("POST", "b", []byte{0, 1, 0xff}, "Content-Type", "application/octet-stream").must(t, 204)
	d.create("t", "text/plain")
	d.call("POST", "t", []byte{'o', 'k'}, "Content-Type", "text/plain").must(t, 204)
	d.call("POST", "t", []byte{0xff, 0xfe}, "Content-Type", "text/plain").must(t, 204)
	r := d.call("GET", "b?format=ndjson", nil).must(t, 200).header(t, "Weir-Data-Encoding", "base64")
	if !strings.Contains(r.String(), `"data":"AAH/"`) {
		t.Fatalf("binary ndjson %q", r.body)
	}
	recs := d.ndjson("t", "")
	if string(recs[0].Data) != `"ok"` || recs[0].Encoding != "" || string(recs[1].Data) != `"//4="` || recs[1].Encoding != "base64" {
		t.Fatalf("text ndjson %v", recs)
	}
}

func TestCommittedLongPollWakesOnCommit(t *testing.T) {
	d := newDSServer(t, &Config{LongPollTimeout: 5 * time.Second})
	d.create("s", "text/plain")
	d.weirAppend("s", "w", 1, 0, "pending")
	done := make(chan *dsReply, 1)
	go func() { done <- d.call("GET", "s?offset="+formatOffset(0)+"&live=long-poll", nil) }()
	eventually(t, "the long-poll waiting", func() bool { return d.srv.metrics.gauge(readerLongPoll).Load() == 1 })
	d.call("POST", "s", []byte("anon"), "Content-Type", "text/plain").must(t, 204) // held back behind w
	select {
	case r := <-done:
		t.Fatalf("long-poll answered before the commit: %d %q", r.status, r.body)
	case <-time.After(100 * time.Millisecond):
	}
	d.finish("s", "w", 1, "Weir-Commit").must(t, 204)
	select {
	case r := <-done:
		r.must(t, 200).header(t, "Stream-Next-Offset", formatOffset(3))
		if r.String() != "pendinganon" {
			t.Fatalf("long-poll body %q", r.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long-poll did not wake on the commit")
	}
}

// A raw live reader cannot drop bytes it got: an abort record ends its
// live read with an error.
func TestLiveRawReaderIsToldOfAborts(t *testing.T) {
	d := newDSServer(t, nil)
	d.create("s", "text/plain")
	d.weirAppend("s", "w", 1, 0, "draft")
	r := d.call("GET", "s?view=live&offset=-1&live=long-poll", nil).must(t, 200)
	if r.String() != "draft" {
		t.Fatalf("first poll %q", r.body)
	}
	next := r.h.Get("Stream-Next-Offset")
	d.weirAppend("s", "w", 2, 0, "final") // diverges: abort, then "final"
	r = d.call("GET", "s?view=live&live=long-poll&offset="+next, nil).must(t, 409)
	r.header(t, "Weir-Aborted-At", formatOffset(1)).header(t, "Stream-Next-Offset", formatOffset(2))
	// ndjson readers get the abort as a record.
	recs := d.ndjson("s", "&offset="+next+"&live=long-poll")
	if len(recs) != 2 || recs[0].Kind != "abort" || recs[1].Kind != "data" {
		t.Fatalf("ndjson long-poll %v", recs)
	}

	// SSE: the data before the abort, then an error event; the read ends.
	resp, err := http.Get(d.ts.URL + streamPrefix + "s?view=live&live=sse&offset=-1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, ev)
		}
	}
	if strings.Join(events, " ") != "data control error" {
		t.Fatalf("SSE events %v", events)
	}
}

func TestIdempotencyKey(t *testing.T) {
	d := newDSServer(t, nil)
	d.create("s", "text/plain")
	post := func(body string) *dsReply {
		return d.call("POST", "s", []byte(body), "Content-Type", "text/plain", "Idempotency-Key", `"k-1"`)
	}
	first := post("once").must(t, 204)
	if first.h.Get("Weir-Idempotent-Replay") != "" {
		t.Fatal("first request marked as a replay")
	}
	d.call("POST", "s", []byte("+"), "Content-Type", "text/plain").must(t, 204)
	again := post("once").must(t, 204).header(t, "Weir-Idempotent-Replay", "true")
	if again.h.Get("Stream-Next-Offset") != first.h.Get("Stream-Next-Offset") {
		t.Fatalf("replay next offset %q, first %q", again.h.Get("Stream-Next-Offset"), first.h.Get("Stream-Next-Offset"))
	}
	post("twice").must(t, 422)
	if got := d.call("GET", "s", nil).String(); got != "once+" {
		t.Fatalf("data %q", got)
	}
	// The same key with writer headers too: the reply (acks) is replayed.
	hdr := []string{"Content-Type", "text/plain", "Idempotency-Key", "k-2", "Weir-Writer", "w", "Weir-Seq", "0"}
	a := d.call("POST", "s", []byte("x"), hdr...).must(t, 200)
	b := d.call("POST", "s", []byte("x"), hdr...).must(t, 200)
	if string(a.body) != string(b.body) {
		t.Fatalf("replayed acks %q, first %q", b.body, a.body)
	}
	// Still in flight: 409.
	info, err := d.st.OpenStream(context.Background(), streamParams("s"))
	if err != nil {
		t.Fatal(err)
	}
	k := inflightKey{info.ID, "k-3"}
	d.srv.ds.begin(k)
	d.call("POST", "s", []byte("y"), "Content-Type", "text/plain", "Idempotency-Key", "k-3").must(t, 409)
	d.srv.ds.end(k)
	d.call("POST", "s", []byte("y"), "Content-Type", "text/plain", "Idempotency-Key", "k-3").must(t, 204)
}

func TestConcurrentIdempotentRequestsAppendOnce(t *testing.T) {
	d := newDSServer(t, nil)
	d.create("s", "text/plain")
	var wg sync.WaitGroup
	statuses := make(chan int, 16)
	for range 16 {
		wg.Go(func() {
			statuses <- d.call("POST", "s", []byte("one"), "Content-Type", "text/plain", "Idempotency-Key", "same").status
		})
	}
	wg.Wait()
	close(statuses)
	for st := range statuses {
		if st != 204 && st != 409 {
			t.Fatalf("status %d", st)
		}
	}
	if got := d.call("GET", "s", nil).String(); got != "one" {
		t.Fatalf("data %q", got)
	}
}

// api.Run streams are Durable Streams: readable at /v1/stream/runs/<run>/<name>
// (committed by default: a retried step's chunks once), never writable.
func TestRunStreamsAreReadOnlyDurableStreams(t *testing.T) {
	d := newDSServer(t, nil)
	wf := weir.Register(d.e, "retry", func(ctx weir.Context, _ struct{}) (int, error) {
		return weir.Step(ctx, "gen", func(sc weir.StepContext) (int, error) {
			w := sc.Stream("out")
			for _, tok := range []string{"one ", "two "} {
				if _, err := w.WriteString(tok); err != nil {
					return 0, err
				}
			}
			if err := w.Flush(); err != nil {
				return 0, err
			}
			if sc.Attempt() == 1 {
				return 0, errors.New("first attempt fails")
			}
			if _, err := w.WriteString("three"); err != nil {
				return 0, err
			}
			return 3, nil
		})
	})
	ctx := context.Background()
	if err := d.e.Work(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := wf.Start(ctx, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Result(ctx); err != nil {
		t.Fatal(err)
	}
	path := "runs/" + h.ID + "/out"
	r := d.call("GET", path, nil).must(t, 200).header(t, "Stream-Closed", "true").header(t, "Content-Type", "application/octet-stream")
	if r.String() != "one two three" {
		t.Fatalf("committed run stream %q", r.body)
	}
	var sawCommit bool
	for _, rec := range d.ndjson(path, "") {
		sawCommit = sawCommit || rec.Kind == "commit" && rec.Writer != ""
	}
	if !sawCommit {
		t.Fatal("no commit record in the live view")
	}
	d.call("HEAD", path, nil).must(t, 200).header(t, "Stream-Closed", "true")
	for _, m := range []string{"PUT", "POST", "DELETE"} {
		d.call(m, path, []byte("x"), "Content-Type", "application/octet-stream").must(t, 405).header(t, "Allow", "GET, HEAD, OPTIONS")
	}
	d.call("GET", "runs/"+h.ID+"/nope", nil).must(t, 404)
}

// A page starts a run and follows its stream at once, before the run wrote
// it: a live read waits for the stream (long-poll answers 204 from the
// start when it does not come in time, and the reader polls again), an SSE
// read gets the words once they come; once the run ended without writing
// it, or for a run that does not exist, the stream is not found. A plain
// catch-up read does not wait.
func TestLiveReadWaitsForARunsStream(t *testing.T) {
	onEveryStoreWith(t, &Config{LongPollTimeout: 200 * time.Millisecond}, func(t *testing.T, d *dsServer) {
		gate := make(chan struct{})
		open := sync.OnceFunc(func() { close(gate) })
		defer open()
		wf := weir.Register(d.e, "later", func(ctx weir.Context, _ int) (int, error) {
			<-gate
			return weir.Step(ctx, "say", func(sc weir.StepContext) (int, error) {
				_, err := sc.Stream("words").WriteString("now")
				return 1, err
			})
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.e.Work(ctx); err != nil {
			t.Fatal(err)
		}
		run, err := wf.Start(ctx, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		path := "runs/" + run.ID + "/words"
		d.call("GET", path+"?offset=-1&format=ndjson", nil).must(t, http.StatusNotFound)
		d.call("GET", path+"?offset=-1&live=long-poll&format=ndjson", nil).must(t, http.StatusNoContent).
			header(t, "Stream-Next-Offset", formatOffset(0)).header(t, "Stream-Up-To-Date", "true")
		d.call("GET", "runs/nosuchrun/words?offset=-1&live=long-poll", nil).must(t, http.StatusNotFound)

		got := make(chan *dsReply, 1)
		go func() { got <- d.call("GET", path+"?offset=-1&live=sse&format=ndjson", nil) }()
		open()
		if _, err := d.e.Wait(ctx, run.ID); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			r.must(t, http.StatusOK)
			if !strings.Contains(r.String(), `"kind":"data"`) || !strings.Contains(r.String(), `"kind":"close"`) {
				t.Fatalf("SSE read: %s", r)
			}
		case <-ctx.Done():
			t.Fatal("the SSE read never ended")
		}
		d.call("GET", "runs/"+run.ID+"/other?offset=-1&live=sse", nil).must(t, http.StatusNotFound)
	})
}
