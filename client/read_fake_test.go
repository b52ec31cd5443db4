package client_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/stream"
)

// fakeStream serves one stream at /v1/stream/s in the documented wire
// format (format=ndjson, long-poll, SSE with control events), so the
// reader's protocol handling is tested apart from the server's.
type fakeStream struct {
	mu      sync.Mutex
	records []client.Record
	closed  bool
	changed chan struct{}
	reqs    []string // the raw queries received
}

func newFake() *fakeStream { return &fakeStream{changed: make(chan struct{})} }

func (f *fakeStream) append(data string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.records = append(f.records, client.Record{Offset: int64(len(f.records)), Kind: stream.KindData, Writer: "w", Seq: int64(len(f.records)), Data: []byte(data)})
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeStream) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.records = append(f.records, client.Record{Offset: int64(len(f.records)), Kind: stream.KindClose})
	f.closed = true
	close(f.changed)
	f.changed = make(chan struct{})
}

// from returns the records at offsets >= off and whether the stream is
// closed, and a channel closed on the next change.
func (f *fakeStream) from(off int64) ([]client.Record, bool, chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if off > int64(len(f.records)) {
		off = int64(len(f.records))
	}
	return append([]client.Record(nil), f.records[off:]...), f.closed, f.changed
}

func ndjson(recs []client.Record) string {
	var b strings.Builder
	for _, r := range recs {
		m := map[string]any{"offset": r.Offset, "kind": r.Kind.String(), "writer": r.Writer, "attempt": r.Attempt, "seq": r.Seq}
		if r.Kind == stream.KindData {
			m["data"] = base64.StdEncoding.EncodeToString(r.Data)
		}
		line, _ := json.Marshal(m)
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

func (f *fakeStream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.reqs = append(f.reqs, r.URL.RawQuery)
	f.mu.Unlock()
	if r.URL.Path != "/v1/stream/s" {
		http.Error(w, "no such stream", http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	var off int64
	if o := q.Get("offset"); o != "-1" {
		var err error
		if off, err = client.ParseOffset(o); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	if q.Get("format") != "ndjson" {
		http.Error(w, "want format=ndjson", http.StatusBadRequest)
		return
	}
	recs, closed, changed := f.from(off)
	switch q.Get("live") {
	case "sse":
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Weir-Data-Encoding", "base64")
		end := time.After(300 * time.Millisecond) // the SSE time limit: the client reconnects
		for {
			next := off + int64(len(recs))
			if len(recs) > 0 {
				fmt.Fprintf(w, "event: data\n")
				for _, line := range strings.Split(strings.TrimSuffix(ndjson(recs), "\n"), "\n") {
					fmt.Fprintf(w, "data: %s\n", line)
				}
				fmt.Fprintf(w, "\n")
			}
			fmt.Fprintf(w, ": keep-alive\n\nevent: control\ndata: {\"streamNextOffset\":%q,\"upToDate\":true,\"streamClosed\":%v}\n\n", client.FormatOffset(next), closed)
			w.(http.Flusher).Flush()
			if closed {
				return
			}
			select {
			case <-changed:
			case <-end:
				return
			case <-r.Context().Done():
				return
			}
			off = next
			recs, closed, changed = f.from(off)
		}
	case "long-poll":
		if len(recs) == 0 && !closed {
			select {
			case <-changed:
				recs, closed, _ = f.from(off)
			case <-time.After(200 * time.Millisecond):
				w.Header().Set("Stream-Next-Offset", client.FormatOffset(off))
				w.Header().Set("Stream-Up-To-Date", "true")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
	}
	// A page of at most 3 records, so catch-up takes several requests.
	upToDate := len(recs) <= 3
	if !upToDate {
		recs = recs[:3]
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Weir-Data-Encoding", "base64")
	w.Header().Set("Stream-Next-Offset", client.FormatOffset(off+int64(len(recs))))
	if upToDate {
		w.Header().Set("Stream-Up-To-Date", "true")
		if closed {
			w.Header().Set("Stream-Closed", "true")
		}
	}
	_, _ = w.Write([]byte(ndjson(recs)))
}

func readAll(t *testing.T, c *client.Client, opts *client.ReadOptions) ([]client.Record, error) {
	t.Helper()
	var out []client.Record
	for rec, err := range c.ReadPath(ctxT(t), "s", opts) {
		if err != nil {
			return out, err
		}
		out = append(out, rec)
	}
	return out, nil
}

func dataOf(recs []client.Record) string {
	var b strings.Builder
	for _, r := range recs {
		if r.Kind == stream.KindData {
			b.Write(r.Data)
			b.WriteByte(' ')
		}
	}
	return strings.TrimSpace(b.String())
}

func TestReaderCatchUpPagesAndResumes(t *testing.T) {
	f := newFake()
	ts := httptest.NewServer(f)
	defer ts.Close()
	c, _ := client.New(ts.URL, nil)
	for i := range 7 {
		f.append(fmt.Sprint(i))
	}
	recs, err := readAll(t, c, nil)
	if err != nil || dataOf(recs) != "0 1 2 3 4 5 6" {
		t.Fatalf("%q %v", dataOf(recs), err)
	}
	for i, r := range recs {
		if r.Offset != int64(i) || r.NextOffset != client.FormatOffset(int64(i+1)) {
			t.Fatalf("record %d: offset %d next %s", i, r.Offset, r.NextOffset)
		}
	}
	// Resume after record 3, by opaque offset and by record offset.
	recs, _ = readAll(t, c, &client.ReadOptions{Offset: recs[3].NextOffset})
	if dataOf(recs) != "4 5 6" {
		t.Fatalf("resumed: %q", dataOf(recs))
	}
	recs, _ = readAll(t, c, &client.ReadOptions{From: 5})
	if dataOf(recs) != "5 6" {
		t.Fatalf("from 5: %q", dataOf(recs))
	}
	if !strings.Contains(f.reqs[0], "view=live") {
		t.Fatalf("the default view is not sent as live: %q", f.reqs[0])
	}
}

func TestReaderFollows(t *testing.T) {
	for _, sse := range []bool{false, true} {
		t.Run(fmt.Sprintf("sse=%v", sse), func(t *testing.T) {
			f := newFake()
			ts := httptest.NewServer(f)
			defer ts.Close()
			c, _ := client.New(ts.URL, nil)
			f.append("a")
			go func() {
				for i := range 5 {
					time.Sleep(60 * time.Millisecond) // some long-polls time out, SSE responses end
					f.append(fmt.Sprint(i))
				}
				f.close()
			}()
			recs, err := readAll(t, c, &client.ReadOptions{Follow: true, SSE: sse})
			if err != nil {
				t.Fatal(err)
			}
			if dataOf(recs) != "a 0 1 2 3 4" || recs[len(recs)-1].Kind != stream.KindClose {
				t.Fatalf("followed %q, last %v", dataOf(recs), recs[len(recs)-1].Kind)
			}
			mode := "live=long-poll"
			if sse {
				mode = "live=sse"
			}
			if !strings.Contains(strings.Join(f.reqs, " "), mode) {
				t.Fatalf("no %s request: %v", mode, f.reqs)
			}
		})
	}
}

func TestReaderErrors(t *testing.T) {
	f := newFake()
	ts := httptest.NewServer(f)
	defer ts.Close()
	c, _ := client.New(ts.URL, nil)
	var n int
	for _, err := range c.ReadPath(ctxT(t), "other", nil) {
		n++
		if err == nil || !strings.Contains(err.Error(), "404") {
			t.Fatalf("unknown stream: %v", err)
		}
	}
	if n != 1 {
		t.Fatalf("%d yields", n)
	}
	if _, err := readAll(t, c, &client.ReadOptions{Offset: "bogus"}); err == nil {
		t.Fatal("a bad offset read without error")
	}
}

func TestOffsets(t *testing.T) {
	for _, n := range []int64{0, 1, 42, 1 << 40} {
		got, err := client.ParseOffset(client.FormatOffset(n))
		if err != nil || got != n {
			t.Fatalf("%d: %d %v", n, got, err)
		}
	}
	for _, s := range []string{"", "-1", "now", "12", "1_x", "x_1", "0000000000000001_0000000000000000", "0_-1"} {
		if _, err := client.ParseOffset(s); err == nil {
			t.Errorf("ParseOffset(%q) accepted", s)
		}
	}
}
