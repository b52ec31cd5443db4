package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/examples/agent-chat/agent"
	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/store/sqlitestore"
)

func newTestApp(t *testing.T) *httptest.Server {
	t.Helper()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "weir.db"), &sqlitestore.Config{Synchronous: "OFF"})
	if err != nil {
		t.Fatal(err)
	}
	e, err := weir.New(st, &weir.Config{PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	turn := agent.Register(e, &agent.Config{TokenDelay: -1, RetryDelay: time.Millisecond})
	if err := e.Work(ctx); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(nil)
	ts.Config.Handler = newApp(turn, server.New(e, nil), ts.Listener.Addr().String())
	ts.Start()
	t.Cleanup(func() {
		ts.Close()
		_ = e.Close(context.Background())
		_ = st.Close()
	})
	return ts
}

// record is a record of the stream as the page reads it.
type record struct {
	Kind    string          `json:"kind"`
	Writer  string          `json:"writer"`
	Attempt int64           `json:"attempt"`
	Seq     int64           `json:"seq"`
	From    int64           `json:"from"`
	Data    json.RawMessage `json:"data"`
}

// A turn whose first model call fails after 3 tokens and is retried with
// other words, read as the page reads it: the failed attempt's words come,
// an abort voids them, and what stays (the visible chunks once the stream
// closed) says the retry's words, each once, and the answer; a turn whose
// retry says the same has no abort at all.
func TestTurnThroughTheAppsRoute(t *testing.T) {
	ts := newTestApp(t)
	for _, same := range []bool{false, true} {
		body, _ := json.Marshal(agent.Turn{Messages: []agent.Message{{Role: "user", Text: "What is the weather in Paris?"}}, Fail: &agent.Fail{AfterTokens: 3, Same: same}})
		req, _ := http.NewRequest("POST", ts.URL+"/api/chat", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var started struct{ RunID, Stream string }
		if err := json.NewDecoder(resp.Body).Decode(&started); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("start: %d %v", resp.StatusCode, err)
		}
		resp.Body.Close()

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ = http.NewRequestWithContext(ctx, "GET", ts.URL+started.Stream+"?offset=-1&live=sse", nil)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var visible []record
		aborts := 0
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data:")
			if !ok || !strings.Contains(line, `"kind"`) {
				continue
			}
			var r record
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			switch r.Kind {
			case "data":
				visible = append(visible, r)
			case "abort":
				aborts++
				kept := visible[:0]
				for _, v := range visible {
					if v.Writer != r.Writer || v.Seq < r.From {
						kept = append(kept, v)
					}
				}
				visible = kept
			}
		}
		var text strings.Builder
		for _, v := range visible {
			var c struct{ Type, Delta string }
			if err := json.Unmarshal(v.Data, &c); err != nil {
				t.Fatalf("chunk %s is not a JSON object: %v", v.Data, err)
			}
			if c.Type == "text-delta" {
				text.WriteString(c.Delta + "|")
			}
		}
		want := "Sure!| I| will| check| Paris's| weather| and| local| time| at| once.|You| asked:| \"What| is| the| weather| in| Paris?\".| In| Paris| it| is| 7°C| and| windy,| and| 14:05| local| time.| Anything| else?|"
		wantAborts := 1
		if same {
			want = "Let| me| look| up| the| weather| and| the| time| in| Paris.|You| asked:| \"What| is| the| weather| in| Paris?\".| In| Paris| it| is| 7°C| and| windy,| and| 14:05| local| time.| Anything| else?|"
			wantAborts = 0
		}
		if text.String() != want || aborts != wantAborts {
			t.Fatalf("same=%v: %d aborts, text %q\nwant %q", same, aborts, text.String(), want)
		}
	}
}

// What a hostile page could send is refused: another Host, a form POST, a
// cross-origin POST, a bad turn.
func TestAppRefuses(t *testing.T) {
	ts := newTestApp(t)
	for _, c := range []struct {
		name, host, origin, ct, body string
		status                       int
	}{
		{"rebinding", "evil.example", "", "application/json", `{"messages":[{"role":"user","text":"hi"}]}`, http.StatusForbidden},
		{"form", "", "", "application/x-www-form-urlencoded", `messages=x`, http.StatusUnsupportedMediaType},
		{"cross-origin", "", "https://evil.example", "application/json", `{"messages":[{"role":"user","text":"hi"}]}`, http.StatusForbidden},
		{"no messages", "", "", "application/json", `{"messages":[]}`, http.StatusBadRequest},
		{"unknown field", "", "", "application/json", `{"messages":[{"role":"user","text":"hi"}],"x":1}`, http.StatusBadRequest},
		{"role", "", "", "application/json", `{"messages":[{"role":"system","text":"hi"}]}`, http.StatusBadRequest},
	} {
		req, _ := http.NewRequest("POST", ts.URL+"/api/chat", strings.NewReader(c.body))
		req.Header.Set("Content-Type", c.ct)
		if c.host != "" {
			req.Host = c.host
		}
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.status)
		}
	}
}
