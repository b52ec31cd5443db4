package torture

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// checkOverHTTP is Check with every stream also read over HTTP, from a
// server.Server on s on a loopback port.
func checkOverHTTP(ctx context.Context, s store.Full, t *Trial) ([]Violation, Stats, error) {
	e, err := weir.New(s, &weir.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, Stats{}, err
	}
	hs := httptest.NewServer(server.New(e, &server.Config{Logger: slog.New(slog.DiscardHandler)}))
	defer hs.Close()
	return check(ctx, s, t, hs.URL+"/v1/stream/")
}

// ndRecord is one line of a format=ndjson read.
type ndRecord struct {
	Offset   int64           `json:"offset"`
	Next     string          `json:"next_offset"`
	Kind     string          `json:"kind"`
	Writer   string          `json:"writer"`
	Attempt  int64           `json:"attempt"`
	Seq      int64           `json:"seq"`
	Data     json.RawMessage `json:"data"`
	Encoding string          `json:"encoding"`
	From     int64           `json:"from"`
	Count    int64           `json:"count"`
	bytes    []byte
}

// readHTTP reads a stream whole over HTTP from the start, page after page
// (catch-up reads), with the query given: the bodies, one after the other,
// and the last reply's headers.
func (c *checker) readHTTP(ctx context.Context, path, query string) ([]byte, http.Header, error) {
	var segs []string
	for _, seg := range strings.Split(path, "/") {
		segs = append(segs, url.PathEscape(seg))
	}
	u := c.base + strings.Join(segs, "/")
	off := "-1"
	var all []byte
	for range 100000 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"?offset="+off+"&"+query, nil)
		if err != nil {
			return nil, nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, nil, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, nil, fmt.Errorf("GET %s?offset=%s&%s: %d %s", path, off, query, resp.StatusCode, bytes.TrimSpace(b))
		}
		all = append(all, b...)
		next := resp.Header.Get("Stream-Next-Offset")
		if resp.Header.Get("Stream-Up-To-Date") == "true" || next == off || next == "" {
			return all, resp.Header, nil
		}
		off = next
	}
	return nil, nil, fmt.Errorf("GET %s: no end after 100000 pages", path)
}

func parseNDJSON(body []byte, enc string) ([]ndRecord, error) {
	var out []ndRecord
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var r ndRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("ndjson line %d: %v", len(out), err)
		}
		if r.Kind == "data" {
			e := enc
			if r.Encoding != "" {
				e = r.Encoding
			}
			switch e {
			case "json":
				r.bytes = r.Data
			default:
				var s string
				if err := json.Unmarshal(r.Data, &s); err != nil {
					return nil, fmt.Errorf("ndjson line %d: data: %v", len(out), err)
				}
				r.bytes = []byte(s)
				if e == "base64" {
					b, err := base64.StdEncoding.DecodeString(s)
					if err != nil {
						return nil, fmt.Errorf("ndjson line %d: data: %v", len(out), err)
					}
					r.bytes = b
				}
			}
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// checkHTTPViews reads a stream over HTTP, format=ndjson in the live and the
// committed views and raw in the committed view, and checks each is what
// the store holds: live, read (its committed data) and closed.
func (c *checker) checkHTTPViews(ctx context.Context, info *store.StreamInfo, live []stream.Record, read []*stream.Record, closed bool) error {
	where := "stream " + info.Path + " over HTTP"
	body, h, err := c.readHTTP(ctx, info.Path, "view=live&format=ndjson")
	if err != nil {
		c.fail("http", where, "live read: %v", err)
		return nil
	}
	if got := h.Get("Stream-Closed") == "true"; got != closed {
		c.fail("http", where, "Stream-Closed %v, the store says closed %v", got, closed)
	}
	recs, err := parseNDJSON(body, h.Get("Weir-Data-Encoding"))
	if err != nil {
		c.fail("http", where, "live view: %v", err)
		return nil
	}
	if len(recs) != len(live) {
		c.fail("http", where, "live view (ndjson) has %d records, the store %d", len(recs), len(live))
	}
	for i := range min(len(recs), len(live)) {
		g, w := &recs[i], &live[i]
		ok := g.Offset == w.Offset && g.Kind == w.Kind.String()
		if ok && w.Kind != stream.KindClose {
			ok = g.Writer == w.Writer && g.Attempt == w.Attempt
		}
		switch w.Kind {
		case stream.KindData:
			ok = ok && g.Seq == w.Seq && bytes.Equal(g.bytes, w.Data)
		case stream.KindAbort:
			ok = ok && g.From == w.FromSeq()
		case stream.KindCommit:
			ok = ok && g.Count == w.Count()
		}
		if ok && g.Next != formatDSOffset(w.Offset+1) {
			ok = false
		}
		if !ok {
			c.fail("http", where, "live view (ndjson) record %d is %s %s a%d s%d (%d bytes), the store's %v", i, g.Kind, g.Writer, g.Attempt, g.Seq, len(g.bytes), w)
			break
		}
	}

	body, h, err = c.readHTTP(ctx, info.Path, "view=committed&format=ndjson")
	if err != nil {
		c.fail("http", where, "committed read: %v", err)
		return nil
	}
	if recs, err = parseNDJSON(body, h.Get("Weir-Data-Encoding")); err != nil {
		c.fail("http", where, "committed view: %v", err)
		return nil
	}
	var data []ndRecord
	for _, r := range recs {
		if r.Kind == "data" {
			data = append(data, r)
		}
	}
	if len(data) != len(read) {
		c.fail("5", where, "committed view (ndjson) has %d chunks, the store's %d", len(data), len(read))
	}
	for i := range min(len(data), len(read)) {
		g, w := &data[i], read[i]
		if g.Offset != w.Offset || g.Writer != w.Writer || g.Seq != w.Seq || !bytes.Equal(g.bytes, w.Data) {
			c.fail("5", where, "committed view (ndjson) chunk %d is at offset %d %s s%d (%d bytes), the store's %v", i, g.Offset, g.Writer, g.Seq, len(g.bytes), w)
			break
		}
	}

	if strings.Contains(info.ContentType, "json") {
		return nil
	}
	raw, _, err := c.readHTTP(ctx, info.Path, "view=committed")
	if err != nil {
		c.fail("http", where, "raw committed read: %v", err)
		return nil
	}
	var want []byte
	for _, r := range read {
		want = append(want, r.Data...)
	}
	if !bytes.Equal(raw, want) {
		c.fail("5", where, "raw committed read has %d bytes, the committed chunks %d", len(raw), len(want))
	}
	return nil
}

func formatDSOffset(o int64) string { return fmt.Sprintf("0000000000000000_%016d", o) }

// checkHTTPStream checks a stream written by HTTP writers: weir writers'
// committed output is their last attempt's, each (writer, seq) once, and
// every chunk acknowledged to them is at its offset (and, for the attempt
// that committed, in the committed view); every anonymous or producer
// request is in the committed view exactly once, in order, before the
// Stream-Next-Offset it was acknowledged with.
func (c *checker) checkHTTPStream(ctx context.Context, t *Trial, s *HTTPStreamSpec) error {
	where := "stream " + s.Path
	c.stats.HTTPStreams++
	var lg *httpStreamLog
	if t.http != nil {
		lg = t.http.logs[s.Path]
	}
	if lg == nil {
		lg = &httpStreamLog{}
	}
	info, err := c.s.OpenStream(ctx, &store.OpenStreamParams{Path: s.Path})
	if err != nil {
		c.fail("state", where, "the stream is not there: %v", err)
		return nil
	}
	want := map[string][][]byte{"": nil}
	relaxed := map[string]bool{}
	final := map[string]string{}
	byID := map[string]int{}
	for wi := range s.Writers {
		w := &s.Writers[wi]
		byID[w.ID] = wi
		switch w.Kind {
		case HTTPWriterWeir:
			c.stats.HTTPWeir++
			last := w.Attempts[len(w.Attempts)-1]
			chunks := [][]byte{}
			if !w.Abort {
				for q := range last.Count {
					chunks = append(chunks, httpChunk(s, wi, q, last.Variant))
				}
				final[w.ID] = strconv.FormatInt(last.N, 10)
			} else {
				final[w.ID] = ""
			}
			want[w.ID] = chunks
			relaxed[w.ID] = w.relaxed()
			if lg.finished != nil && lg.finished[w.ID] == "" {
				c.fail("http", where, "writer %s never had its commit or abort acknowledged", w.ID)
			}
		case HTTPWriterIdem:
			c.stats.HTTPIdem++
		case HTTPWriterProducer:
			c.stats.HTTPProducer++
		}
	}
	live, read, err := c.checkStream(ctx, info, want, lg.closed, func(w string) (string, bool) {
		a, ok := final[w]
		return a, ok
	}, relaxed)
	if err != nil || live == nil {
		return err
	}

	// Anonymous and producer requests: each once, in order, as sent.
	got := map[string][]int{}
	for _, r := range read {
		if r.Writer != "" {
			continue
		}
		tag, _, _ := bytes.Cut(r.Data, []byte("|"))
		id, ks, _ := strings.Cut(string(tag), "#")
		k, err := strconv.Atoi(ks)
		wi, known := byID[id]
		if err != nil || !known || s.Writers[wi].Kind == HTTPWriterWeir || k < 0 || k >= s.Writers[wi].Count {
			c.fail("content", where, "committed anonymous record at offset %d is no request's (tag %.40q)", r.Offset, tag)
			continue
		}
		if r.Attempt != 0 {
			c.fail("content", where, "anonymous record at offset %d has attempt %d", r.Offset, r.Attempt)
		}
		if !bytes.Equal(r.Data, anonBody(s, wi, k)) {
			c.fail("content", where, "request %s has other bytes at offset %d than were sent", tag, r.Offset)
		}
		if next, ok := lg.anonNext[string(tag)]; ok && r.Offset >= next {
			c.fail("2", where, "request %s is at offset %d, but was acknowledged with Stream-Next-Offset %d", tag, r.Offset, next)
		}
		got[id] = append(got[id], k)
	}
	for wi := range s.Writers {
		w := &s.Writers[wi]
		if w.Kind == HTTPWriterWeir {
			continue
		}
		ks := got[w.ID]
		n := map[int]int{}
		for i, k := range ks {
			n[k]++
			if i > 0 && k <= ks[i-1] {
				c.fail("1", where, "%s's requests are committed out of order: %d after %d", w.ID, k, ks[i-1])
				break
			}
		}
		for k := range w.Count {
			switch {
			case n[k] > 1:
				c.fail("1", where, "%s request %d (%s) is in the committed view %d times", w.ID, k, w.Kind, n[k])
			case n[k] == 0:
				c.fail("2", where, "%s request %d (%s), acknowledged, is not in the committed view", w.ID, k, w.Kind)
			}
		}
	}

	// Every chunk acknowledged to a weir writer is at its offset; those
	// of the attempt that committed are in the committed view.
	committed := map[int64]bool{}
	for _, r := range read {
		committed[r.Offset] = true
	}
	for _, a := range lg.acks {
		c.stats.HTTPAcks++
		wi := byID[a.Writer]
		w := &s.Writers[wi]
		var at *HTTPAttempt
		for i := range w.Attempts {
			if w.Attempts[i].N == a.Attempt {
				at = &w.Attempts[i]
			}
		}
		if a.Offset < 0 || a.Offset >= int64(len(live)) || at == nil {
			c.fail("2", where, "%s attempt %d seq %d was acknowledged at offset %d; the stream has %d records", a.Writer, a.Attempt, a.Seq, a.Offset, len(live))
			continue
		}
		r := &live[a.Offset]
		if r.Kind != stream.KindData || r.Writer != a.Writer || r.Seq != int64(a.Seq) || !bytes.Equal(r.Data, httpChunk(s, wi, a.Seq, at.Variant)) {
			c.fail("2", where, "%s attempt %d seq %d was acknowledged at offset %d, which holds %v", a.Writer, a.Attempt, a.Seq, a.Offset, r)
			continue
		}
		if !w.Abort && at == &w.Attempts[len(w.Attempts)-1] && !committed[a.Offset] {
			c.fail("2", where, "%s seq %d of the attempt that committed (%d), acknowledged at offset %d, is not in the committed view", a.Writer, a.Seq, a.Attempt, a.Offset)
		}
	}
	return nil
}
