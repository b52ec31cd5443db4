package torture

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// HTTP stream writers are external clients that write standalone streams
// over the Durable Streams protocol (/v1/stream/{path}) of the worker
// processes' HTTP servers, through a loopback proxy that cuts connections
// after the server replied (stream-cut) while the serving processes are
// SIGKILLed (stream-kill, sigkill…) and restarted on the same store.

// HTTP writer kinds.
const (
	// HTTPWriterWeir uses weir's extension: Weir-Writer, Weir-Attempt and
	// Weir-Seq, pages of random size in Weir-Framing: u32be, attempts that
	// re-emit identical bytes (adopted) or diverge (aborted), Weir-Commit.
	HTTPWriterWeir = "weir"
	// HTTPWriterIdem appends anonymously, one Idempotency-Key per request.
	HTTPWriterIdem = "idem"
	// HTTPWriterProducer is a Durable Streams idempotent producer
	// (Producer-Id, Producer-Epoch, Producer-Seq).
	HTTPWriterProducer = "producer"
)

// HTTPStreamSpec is a standalone stream written over HTTP by Writers at
// once; it is created with PUT first and closed once they are done.
type HTTPStreamSpec struct {
	Path    string
	Seed    uint64
	Writers []HTTPWriterSpec
}

// HTTPWriterSpec is one HTTP writer of a stream.
type HTTPWriterSpec struct {
	Kind   string
	ID     string // Weir-Writer, Producer-Id, or the tag of anonymous bodies
	Count  int    // requests (idem, producer)
	MinLen int
	MaxLen int
	// Weir writers: the attempts, in order; every attempt but the last is
	// abandoned after writing its Count chunks (a crashed client); the last
	// writes its Count chunks and commits, or aborts for good with Abort.
	Attempts []HTTPAttempt `json:",omitempty"`
	Abort    bool          `json:",omitempty"`
	// Keys: every append carries an Idempotency-Key too (the same for the
	// same request: a resend with the same paging is a replay).
	Keys bool `json:",omitempty"`
}

// HTTPAttempt is one attempt of a weir HTTP writer.
type HTTPAttempt struct {
	N       int64
	Variant int64 // the bytes: an attempt with its predecessor's variant re-emits identical bytes
	Count   int
}

// relaxed reports whether a weir writer's live view may hold aborts and
// rewritten seqs: an attempt diverged, wrote fewer chunks than one before
// it, or the writer aborts for good.
func (w *HTTPWriterSpec) relaxed() bool {
	if w.Abort {
		return true
	}
	last := w.Attempts[len(w.Attempts)-1]
	for _, a := range w.Attempts {
		if a.Variant != last.Variant || a.Count > last.Count {
			return true
		}
	}
	return false
}

func genHTTPStream(r *rand.Rand, path string, scale float64) HTTPStreamSpec {
	s := HTTPStreamSpec{Path: path, Seed: r.Uint64()}
	for i := range 1 + r.IntN(4) {
		w := HTTPWriterSpec{}
		switch k := r.IntN(10); {
		case k < 5:
			w.Kind, w.ID = HTTPWriterWeir, fmt.Sprintf("w%d", i)
		case k < 8:
			w.Kind, w.ID = HTTPWriterIdem, fmt.Sprintf("i%d", i)
		default:
			w.Kind, w.ID = HTTPWriterProducer, fmt.Sprintf("p%d", i)
		}
		w.MinLen, w.MaxLen = sizes(r)
		maxCount := 60
		if w.MinLen > 1024 {
			maxCount = 6
		} else if w.MaxLen > 1024 {
			maxCount = 20
		}
		count := func() int { return 1 + int(float64(r.IntN(maxCount))*scale) }
		if w.Kind != HTTPWriterWeir {
			w.Count = count()
			s.Writers = append(s.Writers, w)
			continue
		}
		w.Keys = r.IntN(3) == 0
		w.Abort = r.IntN(10) == 0
		full := count()
		prev := HTTPAttempt{}
		for a := range 1 + r.IntN(3) {
			at := HTTPAttempt{N: int64(a + 1), Count: full}
			if a > 0 {
				at.Variant = prev.Variant
				switch r.IntN(3) {
				case 0: // identical bytes: adopted
				case 1: // other bytes: an abort at the first difference
					at.Variant = at.N
				case 2: // identical bytes, fewer chunks: the surplus is aborted
					if full > 1 {
						at.Count = full - 1 - full/3
					}
				}
			}
			w.Attempts = append(w.Attempts, at)
			prev = at
		}
		// Earlier attempts are abandoned part way (or at the end).
		for j := range len(w.Attempts) - 1 {
			w.Attempts[j].Count = 1 + r.IntN(w.Attempts[j].Count)
		}
		s.Writers = append(s.Writers, w)
	}
	return s
}

// httpChunk is chunk seq of writer wi of stream s, in byte variant v.
func httpChunk(s *HTTPStreamSpec, wi, seq int, v int64) []byte {
	w := &s.Writers[wi]
	return Chunk(s.Seed, int64(wi), "http", seq, v, w.MinLen, w.MaxLen)
}

// anonBody is request k of an anonymous or producer writer: a tag naming it,
// then its bytes. The checker finds each request's record by its tag.
func anonBody(s *HTTPStreamSpec, wi, k int) []byte {
	return append([]byte(fmt.Sprintf("%s#%d|", s.Writers[wi].ID, k)), httpChunk(s, wi, k, 0)...)
}

// httpAck is a chunk acknowledged to a weir writer.
type httpAck struct {
	Writer  string
	Attempt int64
	Seq     int
	Offset  int64
}

// httpStreamLog is what one stream's writers were told.
type httpStreamLog struct {
	mu       sync.Mutex
	acks     []httpAck
	appended map[int64]string // offsets acknowledged as new records, to whom
	// anonNext: the Stream-Next-Offset first acknowledged to each anonymous
	// or producer request ("id#k"): its record lies before it.
	anonNext map[string]int64
	finished map[string]string // weir writer -> "commit" or "abort", acknowledged
	closed   bool
}

// httpRun is the outcome of a trial's HTTP stream writers.
type httpRun struct {
	logs     map[string]*httpStreamLog // by path
	cut      int64
	requests int64
	viols    []Violation
}

// streamRunner drives a trial's HTTP stream writers.
type streamRunner struct {
	t        *Trial
	base     string
	client   *http.Client
	progress func()
	requests atomic.Int64
	mu       sync.Mutex
	viols    []Violation
}

func (sr *streamRunner) fail(where, format string, args ...any) {
	sr.mu.Lock()
	if len(sr.viols) < 50 {
		sr.viols = append(sr.viols, Violation{"http", where, fmt.Sprintf(format, args...)})
	}
	sr.mu.Unlock()
}

// streamCuts lists the stream requests (from 1) the trial's stream-cut
// faults cut, and how many.
func streamCuts(t *Trial) (map[int64]bool, int) {
	m := map[int64]bool{}
	for _, f := range t.Faults {
		if f.Kind != FaultStreamCut {
			continue
		}
		// Every other request from Request on: a writer's resend of a cut
		// request is usually its next one.
		for i := range f.Cuts {
			m[int64(f.Request+2*i)] = true
		}
	}
	return m, len(m)
}

// runHTTPStreams runs every HTTP stream writer of t through a proxy in
// front of backend (which names a serving process anew for every
// connection), each writer until it has committed (or aborted) or a
// minute has passed.
func runHTTPStreams(ctx context.Context, t *Trial, backend func() string, progress func()) (*httpRun, error) {
	cuts, _ := streamCuts(t)
	p, err := newCutProxy(backend, func(n int64) bool { return cuts[n] })
	if err != nil {
		return nil, err
	}
	defer p.close()
	sr := &streamRunner{
		t: t, base: "http://" + p.addr() + "/v1/stream/", progress: progress,
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second},
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	run := &httpRun{logs: map[string]*httpStreamLog{}}
	var wg sync.WaitGroup
	for i := range t.HTTPStreams {
		s := &t.HTTPStreams[i]
		lg := &httpStreamLog{appended: map[int64]string{}, anonNext: map[string]int64{}, finished: map[string]string{}}
		run.logs[s.Path] = lg
		wg.Add(1)
		go func() {
			defer wg.Done()
			sr.stream(ctx, s, lg)
		}()
	}
	wg.Wait()
	run.cut = p.cut.Load()
	run.requests = sr.requests.Load()
	run.viols = sr.viols
	return run, nil
}

type httpReply struct {
	status int
	h      http.Header
	body   []byte
}

// do sends one request; an error is a cut connection (or a dead server).
func (sr *streamRunner) do(ctx context.Context, method, path string, hdr map[string]string, body []byte) (*httpReply, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, sr.base+path, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	sr.requests.Add(1)
	resp, err := sr.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &httpReply{status: resp.StatusCode, h: resp.Header, body: b}, nil
}

// retryable: no answer (a cut, a killed server), a server error, or an
// Idempotency-Key still in flight on the server that lost its client.
func retryable(rep *httpReply, err error) bool {
	return err != nil || rep.status >= 500 || rep.status == http.StatusConflict && bytes.Contains(rep.body, []byte("in flight"))
}

func pause(ctx context.Context, r *rand.Rand) {
	sleepCtx(ctx, time.Duration(10+r.IntN(40))*time.Millisecond)
}

func (rep *httpReply) String() string {
	if rep == nil {
		return "no reply"
	}
	return fmt.Sprintf("%d %s", rep.status, strings.TrimSpace(string(rep.body[:min(len(rep.body), 300)])))
}

// stream creates s, runs its writers at once, then closes it.
func (sr *streamRunner) stream(ctx context.Context, s *HTTPStreamSpec, lg *httpStreamLog) {
	r := rand.New(rand.NewPCG(s.Seed, 0xc1))
	where := "stream " + s.Path
	ct := map[string]string{"Content-Type": "application/octet-stream"}
	for {
		rep, err := sr.do(ctx, http.MethodPut, s.Path, ct, nil)
		if ctx.Err() != nil {
			sr.fail(where, "no PUT answered in time: %v", err)
			return
		}
		if retryable(rep, err) {
			pause(ctx, r)
			continue
		}
		if rep.status != http.StatusCreated && rep.status != http.StatusOK {
			sr.fail(where, "PUT: %v", rep)
			return
		}
		break
	}
	var wg sync.WaitGroup
	for wi := range s.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch s.Writers[wi].Kind {
			case HTTPWriterWeir:
				sr.weirWriter(ctx, s, wi, lg)
			case HTTPWriterIdem, HTTPWriterProducer:
				sr.anonWriter(ctx, s, wi, lg)
			}
		}()
	}
	wg.Wait()
	for {
		rep, err := sr.do(ctx, http.MethodPost, s.Path, map[string]string{"Stream-Closed": "true"}, nil)
		if ctx.Err() != nil {
			sr.fail(where, "no close answered in time: %v", err)
			return
		}
		if retryable(rep, err) {
			pause(ctx, r)
			continue
		}
		if rep.status != http.StatusNoContent || rep.h.Get("Stream-Closed") != "true" {
			sr.fail(where, "close: %v", rep)
			return
		}
		lg.mu.Lock()
		lg.closed = true
		lg.mu.Unlock()
		return
	}
}

func frames(chunks [][]byte) []byte {
	n := 0
	for _, c := range chunks {
		n += 4 + len(c)
	}
	b := make([]byte, 0, n)
	for _, c := range chunks {
		b = binary.BigEndian.AppendUint32(b, uint32(len(c)))
		b = append(b, c...)
	}
	return b
}

// weirWriter writes writer wi's attempts with the extension headers. Pages
// are random; a request that got no answer is resent as it was, or the
// writer rewinds (to seq 0: the whole buffer, or part way) and resends
// with other paging; now and then it rewinds after an answer too. Every
// ack is checked against what the writer was told before.
func (sr *streamRunner) weirWriter(ctx context.Context, s *HTTPStreamSpec, wi int, lg *httpStreamLog) {
	w := &s.Writers[wi]
	r := rand.New(rand.NewPCG(s.Seed, uint64(wi)+1))
	where := fmt.Sprintf("stream %s writer %s", s.Path, w.ID)
	known := map[[2]int64]int64{} // (attempt, seq) -> offset acknowledged
	sent := map[[2]int64]bool{}
	variants := map[int64]int64{}
	for _, at := range w.Attempts {
		variants[at.N] = at.Variant
		chunks := make([][]byte, at.Count)
		for q := range chunks {
			chunks[q] = httpChunk(s, wi, q, at.Variant)
		}
		seq, n, framed, resend := 0, 0, false, false
		for seq < len(chunks) {
			if ctx.Err() != nil {
				sr.fail(where, "attempt %d not written in time (at seq %d of %d)", at.N, seq, len(chunks))
				return
			}
			if !resend {
				n = 1 + r.IntN(min(40, len(chunks)-seq))
				size := 0
				for i := range n { // at most 1 MiB a request
					if size += len(chunks[seq+i]); size > 1<<20 && i > 0 {
						n = i
						break
					}
				}
				framed = n > 1 || r.IntN(2) == 0
			}
			resend = false
			hdr := map[string]string{
				"Content-Type": "application/octet-stream",
				"Weir-Writer":  w.ID, "Weir-Attempt": strconv.FormatInt(at.N, 10), "Weir-Seq": strconv.Itoa(seq),
			}
			var body []byte
			if framed {
				hdr["Weir-Framing"] = "u32be"
				body = frames(chunks[seq : seq+n])
			} else {
				body = chunks[seq]
			}
			if w.Keys {
				hdr["Idempotency-Key"] = fmt.Sprintf("%s/a%d/s%d/n%d/%v", w.ID, at.N, seq, n, framed)
			}
			for q := seq; q < seq+n; q++ {
				sent[[2]int64{at.N, int64(q)}] = true
			}
			rep, err := sr.do(ctx, http.MethodPost, s.Path, hdr, body)
			if retryable(rep, err) {
				pause(ctx, r)
				switch r.IntN(4) {
				case 0: // the whole buffer again, paged otherwise
					seq = 0
				case 1: // from somewhere before, paged otherwise
					seq = r.IntN(seq + 1)
				default: // the same request
					resend = true
				}
				continue
			}
			if rep.status != http.StatusOK {
				sr.fail(where, "attempt %d seq %d..%d: %v", at.N, seq, seq+n-1, rep)
				return
			}
			var reply struct {
				Acks []struct {
					Offset  int64  `json:"offset"`
					Outcome string `json:"outcome"`
				} `json:"acks"`
			}
			if err := json.Unmarshal(rep.body, &reply); err != nil || len(reply.Acks) != n {
				sr.fail(where, "attempt %d seq %d: %d chunks sent, reply %v", at.N, seq, n, rep)
				return
			}
			replay := rep.h.Get("Weir-Idempotent-Replay") == "true"
			lg.mu.Lock()
			for i, a := range reply.Acks {
				q := seq + i
				key := [2]int64{at.N, int64(q)}
				if o, ok := known[key]; ok {
					if a.Offset != o {
						sr.fail(where, "attempt %d seq %d acknowledged at offset %d, before at %d", at.N, q, a.Offset, o)
					}
					if !replay && a.Outcome != "retransmit" {
						sr.fail(where, "attempt %d seq %d, acknowledged before, came back %s", at.N, q, a.Outcome)
					}
					continue
				}
				known[key] = a.Offset
				lg.acks = append(lg.acks, httpAck{w.ID, at.N, q, a.Offset})
				switch a.Outcome {
				case "appended":
					if who, dup := lg.appended[a.Offset]; dup {
						sr.fail(where, "attempt %d seq %d appended at offset %d, already acknowledged as %s's", at.N, q, a.Offset, who)
					}
					lg.appended[a.Offset] = fmt.Sprintf("%s a%d s%d", w.ID, at.N, q)
				case "adopted":
					// An earlier attempt's identical chunk, at that offset.
					ok := false
					for _, prev := range w.Attempts {
						if prev.N >= at.N {
							break
						}
						if o, acked := known[[2]int64{prev.N, int64(q)}]; acked && o == a.Offset &&
							bytes.Equal(httpChunk(s, wi, q, variants[prev.N]), chunks[q]) {
							ok = true
						}
					}
					if !ok {
						sr.fail(where, "attempt %d seq %d adopted offset %d, which holds no earlier attempt's identical chunk at that seq", at.N, q, a.Offset)
					}
				case "retransmit":
					// Its first reply was cut; it must have been sent.
					if !sent[key] {
						sr.fail(where, "attempt %d seq %d: a retransmit of a chunk never sent", at.N, q)
					}
				default:
					sr.fail(where, "attempt %d seq %d: outcome %q", at.N, q, a.Outcome)
				}
			}
			lg.mu.Unlock()
			seq += n
			sr.progress()
			if r.IntN(8) == 0 {
				seq = max(0, seq-1-r.IntN(30)) // resend some, paged otherwise
			}
		}
	}
	last := w.Attempts[len(w.Attempts)-1]
	hdr := map[string]string{"Weir-Writer": w.ID, "Weir-Attempt": strconv.FormatInt(last.N, 10)}
	what := "commit"
	if w.Abort {
		hdr["Weir-Abort"], what = "true", "abort"
	} else {
		hdr["Weir-Commit"] = "true"
	}
	for {
		rep, err := sr.do(ctx, http.MethodPost, s.Path, hdr, nil)
		if ctx.Err() != nil {
			sr.fail(where, "no %s answered in time: %v", what, err)
			return
		}
		if retryable(rep, err) {
			pause(ctx, r)
			continue
		}
		if res := rep.h.Get("Weir-Result"); rep.status != http.StatusNoContent || res != "done" && res != "already" {
			sr.fail(where, "%s of attempt %d: %v", what, last.N, rep)
			return
		}
		lg.mu.Lock()
		lg.finished[w.ID] = what
		lg.mu.Unlock()
		sr.progress()
		return
	}
}

// anonWriter sends writer wi's requests one by one: anonymous appends with
// an Idempotency-Key each, or producer appends. A request that got no
// answer is resent as it was; now and then an answered one is resent too,
// which must append nothing.
func (sr *streamRunner) anonWriter(ctx context.Context, s *HTTPStreamSpec, wi int, lg *httpStreamLog) {
	w := &s.Writers[wi]
	r := rand.New(rand.NewPCG(s.Seed, uint64(wi)+1))
	where := fmt.Sprintf("stream %s writer %s", s.Path, w.ID)
	sent := map[int]bool{}
	for k := 0; k < w.Count; {
		if ctx.Err() != nil {
			sr.fail(where, "request %d of %d not answered in time", k, w.Count)
			return
		}
		tag := fmt.Sprintf("%s#%d", w.ID, k)
		hdr := map[string]string{"Content-Type": "application/octet-stream"}
		if w.Kind == HTTPWriterIdem {
			hdr["Idempotency-Key"] = tag
		} else {
			hdr["Producer-Id"], hdr["Producer-Epoch"], hdr["Producer-Seq"] = w.ID, "0", strconv.Itoa(k)
		}
		wasSent := sent[k]
		sent[k] = true
		rep, err := sr.do(ctx, http.MethodPost, s.Path, hdr, anonBody(s, wi, k))
		if retryable(rep, err) {
			pause(ctx, r)
			continue
		}
		next, perr := parseDSOffset(rep.h.Get("Stream-Next-Offset"))
		lg.mu.Lock()
		first, acked := lg.anonNext[tag]
		switch {
		case w.Kind == HTTPWriterIdem && rep.status == http.StatusNoContent && perr == nil:
			replay := rep.h.Get("Weir-Idempotent-Replay") == "true"
			switch {
			case replay && !wasSent:
				sr.fail(where, "request %d, sent for the first time, was answered as a replay", k)
			case acked && !replay:
				sr.fail(where, "request %d, acknowledged before, was appended again (no Weir-Idempotent-Replay)", k)
			case acked && next != first:
				sr.fail(where, "request %d replayed with Stream-Next-Offset %d, first %d", k, next, first)
			case !acked:
				lg.anonNext[tag] = next
			}
		case w.Kind == HTTPWriterProducer && rep.status == http.StatusOK && perr == nil:
			if acked {
				sr.fail(where, "producer seq %d, accepted before, was accepted again (200, not 204)", k)
			} else {
				lg.anonNext[tag] = next
			}
		case w.Kind == HTTPWriterProducer && rep.status == http.StatusNoContent:
			// A duplicate: only of a request sent before (its reply cut).
			if !wasSent {
				sr.fail(where, "producer seq %d, sent for the first time, was answered as a duplicate", k)
			}
			if got, _ := strconv.Atoi(rep.h.Get("Producer-Seq")); got < k {
				sr.fail(where, "producer seq %d answered as a duplicate, but the highest seq accepted is %d", k, got)
			}
		default:
			sr.fail(where, "request %d: %v", k, rep)
			lg.mu.Unlock()
			return
		}
		lg.mu.Unlock()
		sr.progress()
		k++
		if r.IntN(6) == 0 {
			k = max(0, k-1-r.IntN(3)) // resend some: each must append nothing
		}
	}
}

// parseDSOffset parses a Durable Streams offset into weir's record offset.
func parseDSOffset(s string) (int64, error) {
	_, rec, ok := strings.Cut(s, "_")
	if !ok {
		return 0, fmt.Errorf("offset %q", s)
	}
	return strconv.ParseInt(rec, 10, 64)
}
