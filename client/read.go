package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// ReadOptions configures a stream read.
type ReadOptions struct {
	// Offset is where the read starts, as the Durable Streams protocol
	// spells offsets: "" (or "-1") the stream's start, "now" its tail, or a
	// Record.NextOffset from an earlier read, to resume after that record.
	Offset string
	// From, when Offset is empty, starts at weir's record offset From (the
	// Record.Offset numbering: 0, 1, 2 …).
	From int64
	// View is stream.Live (the default: every record as written, aborts
	// included) or stream.CommittedView (only the output of successful
	// attempts, each chunk once).
	View stream.View
	// Follow keeps reading as records arrive, until the stream is closed or
	// ctx ends; without it the read stops at the stream's current end.
	Follow bool
	// SSE follows with Server-Sent Events instead of long-polls.
	SSE bool
}

// Record is one record of a stream.
type Record struct {
	Offset  int64       // weir's record offset: dense from 0
	Kind    stream.Kind // data, abort, commit or close
	Writer  string      // empty for anonymous appends and close
	Attempt int64       // 0: committed at append
	// Seq is the chunk's seq for data, the first voided seq for an abort,
	// the count of committed chunks for a commit.
	Seq  int64
	Data []byte // data only
	// NextOffset is ReadOptions.Offset to resume after this record.
	NextOffset string
}

// FormatOffset spells weir's record offset n as a Durable Streams offset:
// the position before record n.
func FormatOffset(n int64) string { return fmt.Sprintf("%016d_%016d", 0, n) }

// ParseOffset is the inverse of FormatOffset.
func ParseOffset(s string) (int64, error) {
	hi, lo, ok := strings.Cut(s, "_")
	if !ok {
		return 0, fmt.Errorf("offset %q: want NNNN_NNNN", s)
	}
	h, err1 := strconv.ParseUint(hi, 10, 64)
	l, err2 := strconv.ParseInt(lo, 10, 64)
	if err1 != nil || err2 != nil || h != 0 || l < 0 {
		return 0, fmt.Errorf("offset %q: not a weir offset", s)
	}
	return l, nil
}

// Read reads stream name of run runID (at /v1/stream/runs/<run>/<name>).
// The iterator yields each record, or one error and stops. With Follow, a
// stream that does not exist yet is waited for while the run goes on; an
// unknown run is store.ErrNotFound.
func (c *Client) Read(ctx context.Context, runID, name string, opts *ReadOptions) iter.Seq2[Record, error] {
	return c.read(ctx, store.RunStreamPath(runID, name), runID, opts)
}

// ReadPath reads the stream at /v1/stream/<path> (a standalone stream, or
// runs/<run>/<name>).
func (c *Client) ReadPath(ctx context.Context, path string, opts *ReadOptions) iter.Seq2[Record, error] {
	return c.read(ctx, path, "", opts)
}

// dataEncodingOf returns the reply's Weir-Data-Encoding: base64 if absent.
func dataEncodingOf(h http.Header) string {
	switch e := strings.ToLower(h.Get("Weir-Data-Encoding")); e {
	case encodingJSON, encodingText:
		return e
	}
	return encodingBase64
}

// maxLineBytes bounds one NDJSON record (a 4 MiB chunk in base64, and room).
const maxLineBytes = 8 << 20

func (c *Client) read(ctx context.Context, path, runID string, opts *ReadOptions) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		var o ReadOptions
		if opts != nil {
			o = *opts
		}
		offset := o.Offset
		if offset == "" {
			offset = "-1"
			if o.From > 0 {
				offset = FormatOffset(o.From)
			}
		}
		r := &reader{c: c, path: streamURLPath(path), view: o.View.String(), offset: offset}
		// A follower's first request is live already: it answers at once
		// with whatever is there, like a catch-up read, and otherwise waits
		// for the first records (a run's stream, for its creation) instead
		// of answering "nothing yet" and being asked again.
		live := ""
		if o.Follow {
			live = liveMode(o.SSE)
		}
		missing := 10 * time.Millisecond
		for {
			st, err := r.get(ctx, live, yield)
			switch {
			case err == nil:
			case errors.Is(err, errStop):
				return
			case o.Follow && runID != "" && errors.Is(err, store.ErrNotFound):
				// The run's stream may not exist yet: wait while the run goes on.
				run, rerr := c.GetRun(ctx, runID)
				if rerr != nil {
					yield(Record{}, rerr)
					return
				}
				if run.Status.Terminal() {
					return // it ended without writing to this stream
				}
				if err := sleep(ctx, missing); err != nil {
					yield(Record{}, err)
					return
				}
				missing = min(2*missing, 500*time.Millisecond)
				continue
			default:
				yield(Record{}, err)
				return
			}
			if st.closed && st.upToDate {
				return
			}
			if !o.Follow && st.upToDate {
				return
			}
			if ctx.Err() != nil {
				yield(Record{}, ctx.Err())
				return
			}
			if st.upToDate {
				live = liveMode(o.SSE)
			}
		}
	}
}

// liveMode is the live parameter of a follower's reads.
func liveMode(sse bool) string {
	if sse {
		return "sse"
	}
	return "long-poll"
}

// streamURLPath escapes a stream path segment by segment.
func streamURLPath(path string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "/v1/stream/" + strings.Join(segs, "/")
}

// errStop ends a read: the consumer stopped.
var errStop = errors.New("stop")

type reader struct {
	c      *Client
	path   string
	view   string
	offset string
}

// readState is what one response said of the stream.
type readState struct {
	upToDate bool
	closed   bool
}

// get sends one read and yields its records; it advances r.offset.
func (r *reader) get(ctx context.Context, live string, yield func(Record, error) bool) (readState, error) {
	q := url.Values{"offset": {r.offset}, "format": {"ndjson"}, "view": {r.view}}
	if live != "" {
		q.Set("live", live)
	}
	h := http.Header{}
	if live == "sse" {
		h.Set("Accept", "text/event-stream")
	}
	resp, err := r.c.do(ctx, http.MethodGet, r.path, q, h, nil)
	if err != nil {
		return readState{}, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNoContent:
		// A long-poll that saw nothing new.
		return r.advance(resp.Header), nil
	case resp.StatusCode != http.StatusOK:
		return readState{}, errorFrom(resp)
	}
	if live == "sse" {
		return r.sse(resp, yield)
	}
	recs, err := decodeNDJSON(resp.Body, dataEncodingOf(resp.Header))
	if err != nil {
		return readState{}, fmt.Errorf("client: read %s: %w", r.path, err)
	}
	st := r.advance(resp.Header)
	if err := r.yieldAll(recs, yield); err != nil {
		return st, err
	}
	return st, nil
}

// yieldAll yields a response's records, each with the offset to resume
// after it; the last one resumes at the response's next offset.
func (r *reader) yieldAll(recs []Record, yield func(Record, error) bool) error {
	for i := range recs {
		if recs[i].NextOffset == "" {
			recs[i].NextOffset = FormatOffset(recs[i].Offset + 1)
		}
		if i == len(recs)-1 {
			recs[i].NextOffset = r.offset
		}
		if !yield(recs[i], nil) {
			return errStop
		}
	}
	return nil
}

func (r *reader) advance(h http.Header) readState {
	if next := h.Get("Stream-Next-Offset"); next != "" {
		r.offset = next
	}
	return readState{
		upToDate: strings.EqualFold(h.Get("Stream-Up-To-Date"), "true"),
		closed:   strings.EqualFold(h.Get("Stream-Closed"), "true"),
	}
}

// sse reads one SSE response: data events carry NDJSON records, control
// events the next offset and whether the stream is up to date or closed.
func (r *reader) sse(resp *http.Response, yield func(Record, error) bool) (readState, error) {
	st := readState{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	b64 := strings.EqualFold(resp.Header.Get("Stream-SSE-Data-Encoding"), "base64")
	enc := dataEncodingOf(resp.Header)
	var event string
	var data strings.Builder
	var pending []Record
	dispatch := func() error {
		defer func() { event = ""; data.Reset() }()
		switch event {
		case "data", "":
			payload := data.String()
			if b64 {
				raw, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(payload, "\n", ""))
				if err != nil {
					return fmt.Errorf("SSE data event: %w", err)
				}
				payload = string(raw)
			}
			recs, err := decodeNDJSON(strings.NewReader(payload), enc)
			if err != nil {
				return err
			}
			pending = append(pending, recs...)
		case "error":
			var e struct {
				Error string `json:"error"`
			}
			_ = json.Unmarshal([]byte(data.String()), &e)
			if e.Error == "" {
				e.Error = data.String()
			}
			return fmt.Errorf("client: read %s: the server ended the stream: %s", r.path, e.Error)
		case "control":
			var ctl struct {
				StreamNextOffset string `json:"streamNextOffset"`
				UpToDate         bool   `json:"upToDate"`
				StreamClosed     bool   `json:"streamClosed"`
			}
			if err := json.Unmarshal([]byte(data.String()), &ctl); err != nil {
				return fmt.Errorf("SSE control event: %w", err)
			}
			if ctl.StreamNextOffset != "" {
				r.offset = ctl.StreamNextOffset
			}
			st = readState{upToDate: ctl.UpToDate || ctl.StreamClosed, closed: ctl.StreamClosed}
			recs := pending
			pending = nil
			if err := r.yieldAll(recs, yield); err != nil {
				return err
			}
			if st.closed {
				return errStop
			}
		}
		return nil
	}
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if data.Len() == 0 && event == "" {
				continue
			}
			if err := dispatch(); err != nil {
				if errors.Is(err, errStop) && st.closed {
					return st, nil
				}
				return st, err
			}
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment, a keep-alive
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			event = value
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(value)
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return st, fmt.Errorf("client: SSE read %s: %w", r.path, err)
	}
	// The server ended the response (its SSE time limit): reconnect from
	// the last control event's offset. Records after it come again.
	return st, nil
}

// wireRecord is one NDJSON line of format=ndjson:
//
//	{"offset":3,"next_offset":"…","kind":"data","writer":"step/1","attempt":2,"seq":0,"data":…}
//	{"offset":4,"next_offset":"…","kind":"abort","writer":"step/1","attempt":2,"from":1}
//	{"offset":5,"next_offset":"…","kind":"commit","writer":"step/1","attempt":2,"count":1}
//	{"offset":6,"next_offset":"…","kind":"close"}
//
// data is the value itself (JSON streams), a string (text streams) or base64
// (binary streams), as the reply's Weir-Data-Encoding says; a record whose
// bytes do not fit its stream's encoding says "encoding":"base64".
type wireRecord struct {
	Offset     json.Number     `json:"offset"`
	NextOffset string          `json:"next_offset"`
	Kind       string          `json:"kind"`
	Writer     string          `json:"writer"`
	Attempt    int64           `json:"attempt"`
	Seq        int64           `json:"seq"`
	From       *int64          `json:"from"`
	Count      *int64          `json:"count"`
	Data       json.RawMessage `json:"data"`
	Encoding   string          `json:"encoding"`
}

// Data encodings of format=ndjson (the Weir-Data-Encoding header).
const (
	encodingJSON   = "json"
	encodingText   = "text"
	encodingBase64 = "base64"
)

func decodeNDJSON(rd io.Reader, enc string) ([]Record, error) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	var out []Record
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var w wireRecord
		if err := json.Unmarshal(line, &w); err != nil {
			return nil, fmt.Errorf("NDJSON record: %w", err)
		}
		rec, err := w.record(enc)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func (w *wireRecord) record(enc string) (Record, error) {
	off, err := strconv.ParseInt(w.Offset.String(), 10, 64)
	if err != nil {
		off, err = ParseOffset(w.Offset.String())
		if err != nil {
			return Record{}, fmt.Errorf("NDJSON record: %w", err)
		}
	}
	kind, ok := stream.ParseKind(w.Kind)
	if !ok {
		return Record{}, fmt.Errorf("NDJSON record at %d: unknown kind %q", off, w.Kind)
	}
	rec := Record{Offset: off, Kind: kind, Writer: w.Writer, Attempt: w.Attempt, Seq: w.Seq, NextOffset: w.NextOffset}
	switch {
	case kind == stream.KindAbort && w.From != nil:
		rec.Seq = *w.From
	case kind == stream.KindCommit && w.Count != nil:
		rec.Seq = *w.Count
	}
	if kind != stream.KindData || len(w.Data) == 0 {
		return rec, nil
	}
	if w.Encoding != "" {
		enc = w.Encoding
	}
	if enc == encodingJSON {
		rec.Data = []byte(w.Data) // the value as it is
		return rec, nil
	}
	var s string
	if err := json.Unmarshal(w.Data, &s); err != nil {
		return Record{}, fmt.Errorf("NDJSON record at %d: data is not a string: %w", off, err)
	}
	if enc == encodingText {
		rec.Data = []byte(s)
		return rec, nil
	}
	if rec.Data, err = base64.StdEncoding.DecodeString(s); err != nil {
		return Record{}, fmt.Errorf("NDJSON record at %d: data: %w", off, err)
	}
	return rec, nil
}
