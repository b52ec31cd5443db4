package torture

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/store/sqlitestore"
	"github.com/weirhq/weir/stream"
)

// HTTP stream writers of every kind, in process, through the cutting proxy:
// no violation; then planted ones (a request twice, an acknowledged chunk
// gone) are reported.
func TestHTTPStreamWriters(t *testing.T) {
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "weir.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e, err := weir.New(s, &weir.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(server.New(e, &server.Config{Logger: slog.New(slog.DiscardHandler)}))
	defer hs.Close()

	tr := &Trial{Seed: 7, Prefix: "h", HTTPStreams: []HTTPStreamSpec{{Path: "torture-h-0", Seed: 7, Writers: []HTTPWriterSpec{
		// identical bytes (adopted), then other bytes and fewer chunks (aborted)
		{Kind: HTTPWriterWeir, ID: "w0", MinLen: 1, MaxLen: 64, Keys: true, Attempts: []HTTPAttempt{{1, 0, 10}, {2, 0, 25}, {3, 3, 20}}},
		// identical bytes: each chunk once in the live view too
		{Kind: HTTPWriterWeir, ID: "w1", MinLen: 1, MaxLen: 300, Attempts: []HTTPAttempt{{1, 0, 12}, {2, 0, 30}}},
		{Kind: HTTPWriterWeir, ID: "w2", MinLen: 1, MaxLen: 1, Abort: true, Attempts: []HTTPAttempt{{1, 0, 5}}},
		{Kind: HTTPWriterIdem, ID: "i3", Count: 20, MinLen: 1, MaxLen: 64},
		{Kind: HTTPWriterProducer, ID: "p4", Count: 15, MinLen: 1, MaxLen: 64},
	}}}}
	tr.Faults = []Fault{{Kind: FaultStreamCut, Request: 2, Cuts: 4}, {Kind: FaultStreamCut, Request: 20, Cuts: 3}}
	host := strings.TrimPrefix(hs.URL, "http://")
	run, err := runHTTPStreams(ctx, tr, func() string { return host }, func() {})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range run.viols {
		t.Error(v)
	}
	if run.cut == 0 {
		t.Error("the proxy cut no connection")
	}
	tr.http = run
	v, st, err := check(ctx, s, tr, hs.URL+"/v1/stream/")
	if err != nil || len(v) > 0 {
		t.Fatalf("%v %v", v, err)
	}
	if st.HTTPStreams != 1 || st.HTTPAcks < 67 || st.Aborts == 0 {
		t.Fatalf("%+v", st)
	}
	t.Logf("%+v, %d requests, %d cut", st, run.requests, run.cut)

	plant := func(name, want string, tamper func([]stream.Record) []stream.Record) {
		t.Helper()
		v, _, err := check(ctx, &tamperStore{Full: s, tamper: func(rs []stream.Record) []stream.Record {
			return renumber(tamper(slices.Clone(rs)))
		}}, tr, "")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(v, func(v Violation) bool { return strings.Contains(v.String(), want) }) {
			t.Errorf("%s: no violation saying %q: %v", name, want, v)
		}
	}
	plant("an anonymous request twice", "is in the committed view 2 times", func(rs []stream.Record) []stream.Record {
		i := slices.IndexFunc(rs, func(r stream.Record) bool { return r.Kind == stream.KindData && r.Writer == "" })
		return slices.Insert(rs, i+1, rs[i])
	})
	plant("an acknowledged chunk gone", "w1 attempt 2 seq 29 was acknowledged", func(rs []stream.Record) []stream.Record {
		i := slices.IndexFunc(rs, func(r stream.Record) bool { return r.Kind == stream.KindData && r.Writer == "w1" && r.Seq == 29 })
		return slices.Delete(rs, i, i+1)
	})
}
