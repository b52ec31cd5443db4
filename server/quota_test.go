package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/weirhq/weir/api"
)

// A client cannot fill the disk: a stream past --max-stream-bytes takes no
// new data (413, stream_full) but still acknowledges retransmits and
// adopting retries; a store at --max-streams creates no stream (507,
// quota) until one is deleted. Each refusal says what the limit is.
func TestQuotas(t *testing.T) {
	onEveryStoreWith(t, &Config{MaxStreams: 2, MaxStreamBytes: 8}, func(t *testing.T, d *dsServer) {
		d.create("a", "text/plain")
		d.create("b", "text/plain")
		r := d.call("PUT", "c", nil, "Content-Type", "text/plain").must(t, http.StatusInsufficientStorage).header(t, api.ErrorHeader, "quota")
		if !strings.Contains(r.String(), "2 standalone streams") {
			t.Fatalf("quota reply %q does not say the limit", r)
		}
		d.call("PUT", "a", nil, "Content-Type", "text/plain").must(t, http.StatusOK) // an existing stream is answered

		acks, _ := d.weirAppend("a", "w", 1, 0, "abcd", "efgh")
		if outcomes(acks) != "0:appended 1:appended" {
			t.Fatalf("first attempt: %s", outcomes(acks))
		}
		if acks, _ = d.weirAppend("a", "w", 1, 0, "abcd", "efgh"); outcomes(acks) != "0:retransmit 1:retransmit" {
			t.Fatalf("retransmit to a full stream: %s", outcomes(acks))
		}
		if acks, _ = d.weirAppend("a", "w", 2, 0, "abcd"); outcomes(acks) != "0:adopted" {
			t.Fatalf("adopting retry on a full stream: %s", outcomes(acks))
		}
		r = d.call("POST", "a", []byte("x"), "Content-Type", "text/plain").
			must(t, http.StatusRequestEntityTooLarge).header(t, api.ErrorHeader, "stream_full")
		if !strings.Contains(r.String(), "8 data bytes") {
			t.Fatalf("full reply %q does not say the limit", r)
		}
		d.call("DELETE", "b", nil).must(t, http.StatusNoContent)
		d.create("c", "text/plain")

		// The standalone streams, listed by path, a page at a time.
		var l api.StreamList
		if err := json.Unmarshal(d.runsCall("GET", "/v1/streams?limit=1").must(t, http.StatusOK).body, &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Streams) != 1 || l.Streams[0].Path != "a" || l.Streams[0].Bytes != 8 || l.NextCursor != "a" {
			t.Fatalf("page 1: %+v", l)
		}
		l = api.StreamList{}
		if err := json.Unmarshal(d.runsCall("GET", "/v1/streams?after=a").must(t, http.StatusOK).body, &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Streams) != 1 || l.Streams[0].Path != "c" || l.NextCursor != "" {
			t.Fatalf("page 2: %+v", l)
		}
		d.runsCall("GET", "/v1/streams?limit=0").must(t, http.StatusBadRequest)
		d.runsCall("GET", "/v1/streams?prefix=%ff").must(t, http.StatusBadRequest)
	})
}
