package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Round three (-round 3): the cases of issue 37 (the surfaces added in
// issues 26 to 31), against the same server as round two:
//
//  1. a run's log full of messages (16 of 1 MiB, on a topic it does not
//     wait for): the 17th is 507; sending them costs the server no replay
//     of the run (its CPU while they are sent is reported), and 8 readers
//     paging through the log at once raise RSS by at most a page each;
//  2. 400 schedules with 64 KiB inputs: 6 listers paging through them at
//     once raise RSS by at most a page each;
//  3. names: a fork, a start and a tick id in another run's space or a
//     reserved prefix, a topic with CR, a limiter name with NUL: 400
//     invalid_name, nothing made.
//
// The server's CPU is read from /proc/PID/stat (user + system).

// eventPage and schedulePage are what one page may carry (store's
// MaxEventPageBytes, MaxSchedulePageBytes), plus the one entry a page
// takes whatever its size (a 1 MiB message, a 64 KiB input).
const (
	eventPage    = 4*mib + mib
	schedulePage = mib + 64*kib
)

func runRound3() int {
	return runRound("three (issue 37)", func(a *r2) []roundCase {
		return []roundCase{
			{"1 a run's log", a.runLog},
			{"2 schedule lists", a.scheduleLists},
			{"3 names", a.names},
		}
	})
}

// cpu is the server's CPU time so far.
func (a *r2) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", a.srv.pid))
	if err != nil {
		return 0
	}
	// The fields after the command's closing parenthesis; utime and stime
	// are the 14th and 15th of the line, in clock ticks (100 a second).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * 10 * time.Millisecond
}

// readAll pages through path (a list answering "more" and "next_after")
// until its end or stop, and returns the pages it read.
func (a *r2) pageThrough(path string, stop <-chan struct{}) (pages int, err error) {
	after := ""
	for {
		select {
		case <-stop:
			return pages, nil
		default:
		}
		u := path
		if after != "" {
			u += "&after=" + url.QueryEscape(after)
		}
		req, _ := http.NewRequestWithContext(a.ctx, "GET", a.srv.url+u, nil)
		req.Header.Set("Authorization", "Bearer "+round2Token)
		resp, err := client.Do(req)
		if err != nil {
			return pages, err
		}
		var page struct {
			More      bool            `json:"more"`
			NextAfter json.RawMessage `json:"next_after"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || err != nil {
			return pages, fmt.Errorf("GET %s: %d %v", u, resp.StatusCode, err)
		}
		pages++
		if !page.More {
			after = "" // from the start again
			continue
		}
		after = strings.Trim(string(page.NextAfter), `"`)
	}
}

// readers runs n readers of path for d and returns the RSS rise and the
// pages they read.
func (a *r2) readers(n int, path string, d time.Duration) (rise int64, pages int, err error) {
	var mu sync.Mutex
	rise = a.rise(func() {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				p, e := a.pageThrough(path, stop)
				mu.Lock()
				defer mu.Unlock()
				pages += p
				if e != nil && err == nil {
					err = e
				}
			})
		}
		sleepCtx(a.ctx, d)
		close(stop)
		wg.Wait()
	})
	return rise, pages, err
}

// 1: a run's log of 16 MiB of messages.
func (a *r2) runLog() error {
	code, _, msg := a.call("POST", "/v1/runs", []byte(`{"workflow":"demo.chat","id":"r3-chat"}`), "Content-Type", "application/json")
	if code != 200 && code != 201 {
		return fmt.Errorf("start demo.chat: %d %s", code, msg)
	}
	// It waits for a message on "user", parked once ParkAfter passed.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _, body := a.call("GET", "/v1/runs/r3-chat", nil)
		var r struct {
			WakeAt *time.Time `json:"wake_at"`
		}
		if json.Unmarshal([]byte(body), &r) == nil && r.WakeAt != nil && r.WakeAt.After(time.Now().Add(10*time.Second)) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the demo.chat run did not park within 30 s: %s", body)
		}
		sleepCtx(a.ctx, 100*time.Millisecond)
	}
	payload := []byte(`"` + strings.Repeat("m", mib-2) + `"`)
	before := a.cpu()
	sent := 0
	for range 16 {
		if code, _, msg := a.call("POST", "/v1/runs/r3-chat/messages/noise", payload, "Content-Type", "application/json"); code != 200 && code != 201 {
			return fmt.Errorf("message %d: %d %s", sent+1, code, msg)
		}
		sent++
	}
	// A wake's replay would come after the reply: count what the server
	// does in the two seconds after too.
	sleepCtx(a.ctx, 2*time.Second)
	used := a.cpu() - before
	code, _, msg = a.call("POST", "/v1/runs/r3-chat/messages/noise", []byte(`1`), "Content-Type", "application/json")
	a.row(code == 507, "1a. a 17th message to a run holding 16 MiB of them", fmt.Sprintf("%d %s", code, clipStr(msg, 60)), "507 quota")
	// Each 1 MiB message is parsed, checked and written once: a few ms of
	// CPU. A replay of the run per message would read its log each time
	// (136 MiB in all).
	a.row(used < time.Second, "1b. server CPU to take 16 messages of 1 MiB on a topic the parked run does not wait for, and 2 s after",
		fmt.Sprintf("%s (%d messages)", used, sent), "no replay: under 1 s")
	const n = 8
	rise, pages, err := a.readers(n, "/v1/runs/r3-chat/events?limit=1000", 5*time.Second)
	if err != nil {
		return err
	}
	per := *flagGC*2*eventPage + conn()
	a.row(rise <= n*per+slack(), fmt.Sprintf("1c. %d readers paging through its 16 MiB log for 5 s", n),
		fmt.Sprintf("%d pages; RSS +%s, %s a reader", pages, mb(rise), mb(rise/n)),
		fmt.Sprintf("%s a reader (a page, its JSON) + %s; was ~215 MB a read of a 48 MiB log", mb(per), mb(slack())))
	return nil
}

// 2: 400 schedules of 64 KiB inputs, listed by 6 at once.
func (a *r2) scheduleLists() error {
	input := `"` + strings.Repeat("s", 64*kib-2) + `"`
	for i := range 400 {
		body := fmt.Sprintf(`{"workflow":"demo.tokens","spec":"@every 24h","input":%s}`, input)
		if code, _, msg := a.call("PUT", fmt.Sprintf("/v1/schedules/r3-%03d", i), []byte(body), "Content-Type", "application/json"); code != 200 && code != 201 {
			return fmt.Errorf("schedule %d: %d %s", i, code, msg)
		}
	}
	const n = 6
	rise, pages, err := a.readers(n, "/v1/schedules?limit=1000", 5*time.Second)
	if err != nil {
		return err
	}
	per := *flagGC*2*schedulePage + conn()
	a.row(rise <= n*per+slack(), fmt.Sprintf("2. %d listers paging through 400 schedules of 64 KiB for 5 s", n),
		fmt.Sprintf("%d pages; RSS +%s, %s a lister", pages, mb(rise), mb(rise/n)),
		fmt.Sprintf("%s a lister (a page, its JSON) + %s; was ~83 MB a list", mb(per), mb(slack())))
	return nil
}

// 3: names refused before any store.
func (a *r2) names() error {
	cases := []struct {
		name, method, path, body string
	}{
		{"a start with a tick's id", "POST", "/v1/runs", `{"workflow":"demo.tokens","id":"sched:nightly:20261205T020000.000Z"}`},
		{"a start with an id in another run's space", "POST", "/v1/runs", `{"workflow":"demo.tokens","id":"r3-chat/spoof"}`},
		{"a fork named ../x", "POST", "/v1/runs/r3-chat/fork", `{"id":"../x","op":1}`},
		{"a fork in another run's space", "POST", "/v1/runs/r3-chat/fork", `{"id":"r3-chat/spoof","op":1}`},
		{"a fork with a reserved prefix", "POST", "/v1/runs/r3-chat/fork", `{"id":"wrun_x","op":1}`},
		{"a topic with CR", "POST", "/v1/runs/r3-chat/messages/a%0Db", `1`},
		{"a limiter name with NUL", "PUT", "/v1/limiters/a%00b", `{"concurrency":1}`},
	}
	refused := 0
	var got []string
	for _, c := range cases {
		code, h, msg := a.call(c.method, c.path, []byte(c.body), "Content-Type", "application/json")
		if code == 400 && h.Get("Weir-Error") != "" {
			refused++
		} else {
			got = append(got, fmt.Sprintf("%s: %d %s", c.name, code, clipStr(msg, 80)))
		}
	}
	a.row(refused == len(cases), fmt.Sprintf("3. %d bad names (fork, start, tick ids, topic, limiter)", len(cases)),
		fmt.Sprintf("%d/%d refused with a Weir-Error code %s", refused, len(cases), strings.Join(got, "; ")), "400 each, nothing made")
	return nil
}
