package server

import (
	"bytes"
	"errors"
	"net/http"
	"testing"

	"github.com/weirhq/weir/store"
)

// Hardening, round two (issue 21): each case of the issue, as found from
// outside, with the bound it now holds.

// tinyValues is a JSON array of n zeros: [0,0,…].
func tinyValues(n int) []byte {
	b := make([]byte, 0, 2*n+1)
	b = append(b, '[')
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '0')
	}
	return append(b, ']')
}

// A JSON body is counted before it is split: a 16 MiB [0,0,…] (8 million
// values, 10,000 allowed) is refused having allocated next to nothing,
// where splitting it first allocated a slice header a value (the server
// grew 650-900 MB a request).
func TestAJSONBodyIsCountedBeforeItIsSplit(t *testing.T) {
	body := tinyValues(8 << 20)
	var err error
	n := allocated(func() { _, err = bodyChunks("application/json", &writeHeaders{}, body) })
	if !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("8M values: %v, want ErrTooLarge", err)
	}
	if n > 64<<10 {
		t.Errorf("refusing 8M values allocated %d KiB, want < 64 KiB", n>>10)
	}
	// At the limit, exactly the values are allocated: the slice once.
	body = tinyValues(store.MaxAppendChunks)
	var vals [][]byte
	n = allocated(func() { vals, err = bodyChunks("application/json", &writeHeaders{}, body) })
	if err != nil || len(vals) != store.MaxAppendChunks || cap(vals) != len(vals) {
		t.Fatalf("%d values: %d (cap %d), %v", store.MaxAppendChunks, len(vals), cap(vals), err)
	}
	if most := int64(store.MaxAppendChunks*24 + 16<<10); n > most {
		t.Errorf("splitting %d values allocated %d bytes, want at most %d", store.MaxAppendChunks, n, most)
	}

	s := newTestServer(t, nil)
	s.do("PUT", "/v1/stream/j", "", "Content-Type", "application/json").want(t, http.StatusCreated)
	big := string(tinyValues(store.MaxAppendChunks + 1))
	r := s.do("POST", "/v1/stream/j", big, "Content-Type", "application/json").want(t, http.StatusRequestEntityTooLarge)
	if !bytes.Contains([]byte(r.body), []byte("the limit is 10000")) {
		t.Errorf("reply %q does not say the limit", r.body)
	}
	s.do("PUT", "/v1/stream/k", big, "Content-Type", "application/json").want(t, http.StatusRequestEntityTooLarge)
	// Nothing was stored: the stream is empty, and k was not created.
	if r := s.do("GET", "/v1/stream/j?offset=-1", "").want(t, http.StatusOK); r.body != "[]" {
		t.Errorf("the stream holds %q after the refusals", r.body)
	}
	s.do("HEAD", "/v1/stream/k", "").want(t, http.StatusNotFound)
}
