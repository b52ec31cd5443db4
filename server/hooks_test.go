package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
)

// post sends a POST to path (from the server's root) with body.
func (d *dsServer) post(path string, body []byte, hdr ...string) *dsReply {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.ts.URL+path, bytes.NewReader(body))
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
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatal(err)
	}
	return &dsReply{status: resp.StatusCode, h: resp.Header, body: b}
}

// POST /v1/hooks/{token} over HTTP, on both stores: a payload recorded once
// (a re-sent delivery answers the first reply), the run woken, and every
// bad delivery refused with its status.
func TestHookDeliveryOverHTTP(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		wf := weir.Register(d.e, "approve", func(ctx weir.Context, token string) (string, error) {
			h, err := weir.NewHook[map[string]string](ctx, token)
			if err != nil {
				return "", err
			}
			v, err := h.Receive(ctx)
			return v["by"], err
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.e.Work(ctx); err != nil {
			t.Fatal(err)
		}
		run, err := wf.Start(ctx, "tok-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		jsonHdr := []string{"Content-Type", "application/json"}
		eventually(t, "the hook exists", func() bool {
			_, err := d.st.GetHook(ctx, "tok-1")
			return err == nil
		})
		d.post("/v1/hooks/tok-1", []byte(`{"by":"ann"}`), "Content-Type", "text/plain").must(t, http.StatusUnsupportedMediaType)
		d.post("/v1/hooks/tok-1", []byte(`{"by":`), jsonHdr...).must(t, http.StatusBadRequest)
		d.post("/v1/hooks/nope", []byte(`1`), jsonHdr...).must(t, http.StatusNotFound)
		d.post("/v1/hooks/tok-1", []byte(`{"by":"ann"}`), "Content-Type", "application/json", "Origin", "https://evil.example").
			must(t, http.StatusForbidden)
		keyed := append(jsonHdr, "Idempotency-Key", "k1")
		var first, again store.HookDelivery
		if err := json.Unmarshal(d.post("/v1/hooks/tok-1", []byte(`{"by":"ann"}`), keyed...).must(t, http.StatusOK).body, &first); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(d.post("/v1/hooks/tok-1", []byte(`{"by":"ann"}`), keyed...).must(t, http.StatusOK).body, &again); err != nil {
			t.Fatal(err)
		}
		if first.RunID != run.ID || first.Duplicate || !again.Duplicate || again.Seq != first.Seq {
			t.Fatalf("deliveries %+v then %+v", first, again)
		}
		d.post("/v1/hooks/tok-1", []byte(`{"by":"bob"}`), keyed...).must(t, http.StatusUnprocessableEntity)
		if out, err := run.Result(ctx); err != nil || out != "ann" {
			t.Fatalf("result %q %v", out, err)
		}
		var hs api.HookList
		if err := json.Unmarshal(d.runsCall("GET", "/v1/runs/"+run.ID+"/hooks").must(t, http.StatusOK).body, &hs); err != nil {
			t.Fatal(err)
		}
		if len(hs.Hooks) != 1 || hs.Hooks[0].Token != "tok-1" || hs.Hooks[0].Received != 1 || !hs.Hooks[0].Disposed {
			t.Fatalf("hooks %+v", hs)
		}
		// The run ended: its hook takes nothing more.
		d.post("/v1/hooks/tok-1", []byte(`{"by":"late"}`), jsonHdr...).must(t, http.StatusGone).header(t, api.ErrorHeader, "gone")
	})
}

// POST /v1/hooks/{token}?close=true closes the hook with its payload, or
// alone with no body: a Hook.Each loop ends; bad values are 400.
func TestHookCloseOverHTTP(t *testing.T) {
	onEveryStoreWith(t, nil, func(t *testing.T, d *dsServer) {
		wf := weir.Register(d.e, "each", func(ctx weir.Context, token string) (int, error) {
			h, err := weir.NewHook[int](ctx, token)
			if err != nil {
				return 0, err
			}
			sum := 0
			for v, err := range h.Each(ctx) {
				if err != nil {
					return 0, err
				}
				sum += v
			}
			return sum, nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.e.Work(ctx); err != nil {
			t.Fatal(err)
		}
		jsonHdr := []string{"Content-Type", "application/json"}
		for i, last := range []string{`5`, ``} {
			token := fmt.Sprintf("each-%d", i)
			run, err := wf.Start(ctx, token, nil)
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, "the hook exists", func() bool {
				_, err := d.st.GetHook(ctx, token)
				return err == nil
			})
			d.post("/v1/hooks/"+token, []byte(`2`), jsonHdr...).must(t, http.StatusOK)
			d.post("/v1/hooks/"+token+"?close=maybe", []byte(`3`), jsonHdr...).must(t, http.StatusBadRequest)
			d.post("/v1/hooks/"+token+"?shut=true", []byte(`3`), jsonHdr...).must(t, http.StatusBadRequest)
			if last == "" {
				// Closing alone needs no body, nor its Content-Type.
				d.post("/v1/hooks/"+token+"?close=true", nil).must(t, http.StatusOK)
			} else {
				var res store.HookDelivery
				if err := json.Unmarshal(d.post("/v1/hooks/"+token+"?close=true", []byte(last), jsonHdr...).must(t, http.StatusOK).body, &res); err != nil {
					t.Fatal(err)
				}
				if !res.Closed || res.Count != 2 {
					t.Fatalf("closing delivery %+v", res)
				}
			}
			d.post("/v1/hooks/"+token, []byte(`7`), jsonHdr...).must(t, http.StatusGone)
			want := 2
			if last != "" {
				want = 7
			}
			if sum, err := run.Result(ctx); err != nil || sum != want {
				t.Fatalf("result %d %v, want %d", sum, err, want)
			}
		}
	})
}
