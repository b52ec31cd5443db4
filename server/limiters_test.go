package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/client"
)

// send sends method to path (from the server's root) with body.
func (d *dsServer) send(method, path, body string, hdr ...string) *dsReply {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, d.ts.URL+path, bytes.NewReader([]byte(body)))
	if err != nil {
		d.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := d.ts.Client().Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return &dsReply{status: resp.StatusCode, h: resp.Header, body: b}
}

// The limiters API on both stores: a limiter set, listed, read with its
// state, changed; bad bounds, periods, fields and media refused with a
// one-line reason and nothing changed; an unknown one is 404.
func TestLimitersAPI(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		js := []string{"Content-Type", "application/json"}
		var l api.Limiter
		if err := json.Unmarshal(d.send("PUT", "/v1/limiters/openai", `{"concurrency":4,"rate":60,"period":"1m"}`, js...).must(t, http.StatusOK).body, &l); err != nil {
			t.Fatal(err)
		}
		if l.Name != "openai" || l.Concurrency != 4 || l.Rate != 60 || l.Period != "1m0s" || l.State == nil || l.State.Held != 0 {
			t.Fatalf("PUT answered %+v", l)
		}
		d.send("PUT", "/v1/limiters/tokens", `{"name":"tokens","budget":100000,"period":"1m"}`, js...).must(t, http.StatusOK)
		for _, bad := range []struct {
			body string
			hdr  []string
			code int
		}{
			{`{"concurrency":-1}`, js, http.StatusBadRequest},
			{`{}`, js, http.StatusBadRequest},
			{`{"rate":5}`, js, http.StatusBadRequest},
			{`{"rate":5,"period":"soon"}`, js, http.StatusBadRequest},
			{`{"rate":1,"period":"2562047h"}`, js, http.StatusBadRequest}, // a wake time past 2262 (red team, round eleven)
			{`{"concurrency":"four"}`, js, http.StatusBadRequest},
			{`{"concurrency":2,"colour":"red"}`, js, http.StatusBadRequest},
			{`{"name":"other","concurrency":2}`, js, http.StatusBadRequest},
			{`{"concurrency":2}`, []string{"Content-Type", "text/plain"}, http.StatusUnsupportedMediaType},
		} {
			r := d.send("PUT", "/v1/limiters/openai", bad.body, bad.hdr...).must(t, bad.code)
			if n := bytes.Count(bytes.TrimSpace(r.body), []byte("\n")); n != 0 {
				t.Fatalf("%s: a reason of %d lines", bad.body, n+1)
			}
		}
		d.send("PUT", "/v1/limiters/"+strings.Repeat("n", 300), `{"concurrency":1}`, js...).must(t, http.StatusBadRequest)
		// A name PostgreSQL's text cannot hold (a NUL), or a log line
		// could be split by (CR, LF), is refused before either store.
		for _, name := range []string{"a%00b", "a%0D%0Ab", "a%01b"} {
			r := d.send("PUT", "/v1/limiters/"+name, `{"concurrency":1}`, js...).must(t, http.StatusBadRequest)
			if r.h.Get(api.ErrorHeader) != "invalid_name" {
				t.Fatalf("limiter %q: %s %s", name, r.h.Get(api.ErrorHeader), r.body)
			}
		}
		var one api.Limiter
		if err := json.Unmarshal(d.runsCall("GET", "/v1/limiters/openai").must(t, http.StatusOK).body, &one); err != nil {
			t.Fatal(err)
		}
		if one.Concurrency != 4 || one.Rate != 60 {
			t.Fatalf("openai after refused changes: %+v", one)
		}
		var all api.LimiterList
		if err := json.Unmarshal(d.runsCall("GET", "/v1/limiters").must(t, http.StatusOK).body, &all); err != nil {
			t.Fatal(err)
		}
		if len(all.Limiters) != 2 || all.Limiters[0].Name != "openai" || all.Limiters[1].Name != "tokens" || all.Limiters[1].Budget != 100000 {
			t.Fatalf("GET /v1/limiters: %+v", all)
		}
		d.runsCall("GET", "/v1/limiters/nope").must(t, http.StatusNotFound)
		m := string(d.runsCall("GET", "/metrics").must(t, http.StatusOK).body)
		for _, want := range []string{`weir_limiter_held{limiter="openai"} 0`, `weir_limiter_concurrency{limiter="openai"} 4`,
			`weir_limiter_budget{limiter="tokens"} 100000`, `weir_limiter_spent{limiter="tokens"} 0`} {
			if !strings.Contains(m, want) {
				t.Fatalf("/metrics has no %s", want)
			}
		}
		d.runsCall("GET", "/v1/limiters/openai?x=1").must(t, http.StatusBadRequest)
		// Deleted once nothing uses it; then it is gone.
		d.send("DELETE", "/v1/limiters/tokens", "").must(t, http.StatusNoContent)
		d.runsCall("GET", "/v1/limiters/tokens").must(t, http.StatusNotFound)
		d.send("DELETE", "/v1/limiters/tokens", "").must(t, http.StatusNotFound)
		d.send("DELETE", "/v1/limiters/a%00b", "").must(t, http.StatusBadRequest)
	})
}

// GET /v1/limiters comes in pages by name (each limiter on a page costs a
// read of its state): after=<name>&limit=<n>, more and next_after; a bad
// limit is a 400; the Go client reads every page.
func TestLimitersPaged(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		js := []string{"Content-Type", "application/json"}
		var want []string
		for i := range 7 {
			name := "lim-" + string(rune('a'+i))
			want = append(want, name)
			d.send("PUT", "/v1/limiters/"+name, `{"concurrency":1}`, js...).must(t, http.StatusOK)
		}
		var got []string
		after, pages := "", 0
		for {
			path := "/v1/limiters?limit=3"
			if after != "" {
				path += "&after=" + after
			}
			var page api.LimiterList
			if err := json.Unmarshal(d.runsCall("GET", path).must(t, http.StatusOK).body, &page); err != nil {
				t.Fatal(err)
			}
			pages++
			if len(page.Limiters) > 3 {
				t.Fatalf("a page of %d, limit 3", len(page.Limiters))
			}
			for _, l := range page.Limiters {
				got = append(got, l.Name)
			}
			if !page.More {
				if page.NextAfter != "" {
					t.Fatalf("the last page names a next one: %+v", page)
				}
				break
			}
			if pages > 5 {
				t.Fatalf("more pages than limiters: %v", got)
			}
			after = page.NextAfter
		}
		if strings.Join(got, ",") != strings.Join(want, ",") || pages != 3 {
			t.Fatalf("pages %d gave %v, want %v", pages, got, want)
		}
		// A cursor between names, or past them all.
		var page api.LimiterList
		if err := json.Unmarshal(d.runsCall("GET", "/v1/limiters?after=lim-c0").must(t, http.StatusOK).body, &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Limiters) != 4 || page.Limiters[0].Name != "lim-d" || page.More {
			t.Fatalf("after lim-c0: %+v", page)
		}
		if err := json.Unmarshal(d.runsCall("GET", "/v1/limiters?after=zzz").must(t, http.StatusOK).body, &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Limiters) != 0 || page.More {
			t.Fatalf("after zzz: %+v", page)
		}
		for _, bad := range []string{"limit=0", "limit=501", "limit=x", "colour=red"} {
			d.runsCall("GET", "/v1/limiters?"+bad).must(t, http.StatusBadRequest)
		}
		c, err := client.New(d.ts.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		all, err := c.Limiters(t.Context())
		if err != nil || len(all) != 7 {
			t.Fatalf("client.Limiters: %d, %v", len(all), err)
		}
	})
}
