package server

import (
	"io"
	"net/http"
	"net/url"
	"testing"
)

// onEveryStore runs f against a server on each store backend.
func onEveryStore(t *testing.T, f func(t *testing.T, d *dsServer)) { onEveryStoreWith(t, nil, f) }

// The drifts the rules-once issue found from outside, as a new user meets
// them over HTTP: each store answers alike.
func TestStoresAnswerAlike(t *testing.T) {
	onEveryStore(t, func(t *testing.T, d *dsServer) {
		// An idempotency key that rode on a producer's retry refuses another
		// body (PostgreSQL appended it).
		d.create("s", "text/plain")
		prod := []string{"Content-Type", "text/plain", "Producer-Id", "p", "Producer-Epoch", "0", "Producer-Seq", "0"}
		d.call("POST", "s", []byte("a"), prod...).must(t, http.StatusOK)
		d.call("POST", "s", []byte("a"), append(prod, "Idempotency-Key", "k")...).must(t, http.StatusNoContent)
		d.call("POST", "s", []byte("other"), "Content-Type", "text/plain", "Idempotency-Key", "k").
			must(t, http.StatusUnprocessableEntity).header(t, "Weir-Error", "key_reused")
		if got := d.call("GET", "s", nil).String(); got != "a" {
			t.Fatalf("stream holds %q, want a", got)
		}
		// A run id that is not UTF-8 is a bad request, with the same reason
		// (PostgreSQL answered with the driver's text).
		r := d.runsCall("GET", "/v1/runs/ab%ffcd").must(t, http.StatusBadRequest)
		if r.String() == "" || r.h.Get("Weir-Error") == "" {
			t.Fatalf("reply %q", r.body)
		}
		// Stream paths and writer ids that are not UTF-8 are refused alike
		// (SQLite took them).
		d.call("PUT", "bad%ff", nil, "Content-Type", "text/plain").must(t, http.StatusBadRequest)
		d.call("POST", "s", []byte("x"), "Content-Type", "text/plain", "Weir-Writer", "w\xff", "Weir-Attempt", "1", "Weir-Seq", "0").
			must(t, http.StatusBadRequest)
	})
}

// runsCall sends a request to a path of the runs API.
func (d *dsServer) runsCall(method, path string) *dsReply {
	d.t.Helper()
	u, err := url.Parse(d.ts.URL)
	if err != nil {
		d.t.Fatal(err)
	}
	req, err := http.NewRequest(method, u.Scheme+"://"+u.Host+path, nil)
	if err != nil {
		d.t.Fatal(err)
	}
	resp, err := d.ts.Client().Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatal(err)
	}
	return &dsReply{status: resp.StatusCode, h: resp.Header, body: b}
}
