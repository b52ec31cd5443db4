package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// testQuota checks the limits a server puts on what clients may store: a
// stream's data bytes (AppendParams.MaxBytes, CreateStreamParams.MaxBytes)
// and the number of standalone streams (CreateStreamParams.MaxStreams).
func testQuota(t *testing.T, h harness) {
	t.Run("StreamBytes", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := create(t, s, store.CreateStreamParams{Path: "q", Chunks: chunks("abcd"), MaxBytes: 10})
		if si.DataBytes != 4 {
			t.Fatalf("DataBytes after create = %d, want 4", si.DataBytes)
		}
		limited := func(p store.AppendParams) (*store.AppendResult, error) {
			p.StreamID, p.MaxBytes = si.ID, 10
			return s.Append(ctx(t), &p)
		}
		if _, err := limited(store.AppendParams{Writer: "w", Attempt: 1, Chunks: chunks("efg", "hij")}); err != nil {
			t.Fatal(err)
		}
		// Full: a retransmit and an adopting retry are answered, new data is not.
		if _, err := limited(store.AppendParams{Writer: "w", Attempt: 1, Chunks: chunks("efg", "hij")}); err != nil {
			t.Fatalf("retransmit on a full stream: %v", err)
		}
		res, err := limited(store.AppendParams{Writer: "w", Attempt: 2, Chunks: chunks("efg")})
		if err != nil || res.Acks[0].Outcome != stream.Adopted {
			t.Fatalf("adopting retry on a full stream: %v %v", res, err)
		}
		_, err = limited(store.AppendParams{Writer: "w", Attempt: 2, FirstSeq: 1, Chunks: chunks("X")})
		var fe *stream.FullError
		if !errors.As(err, &fe) || !errors.Is(err, stream.ErrFull) || fe.Holds != 10 || fe.Limit != 10 || fe.Adding != 1 {
			t.Fatalf("new data on a full stream: %v, want FullError{Limit 10, Holds 10, Adding 1}", err)
		}
		if _, err := limited(store.AppendParams{Chunks: chunks("Y")}); !errors.Is(err, stream.ErrFull) {
			t.Fatalf("anonymous append on a full stream: %v", err)
		}
		// The refused requests changed nothing; without a limit it goes on.
		if got := getStream(t, s, si.ID); got.DataBytes != 10 || got.NextOffset != 3 {
			t.Fatalf("after refusals: DataBytes %d NextOffset %d, want 10 and 3", got.DataBytes, got.NextOffset)
		}
		appendOK(t, s, si.ID, "", 0, 0, "more")
		if got := getStream(t, s, si.ID); got.DataBytes != 14 {
			t.Fatalf("DataBytes = %d, want 14", got.DataBytes)
		}
		// Initial chunks over the limit create nothing.
		_, _, err = s.CreateStream(ctx(t), &store.CreateStreamParams{Path: "big", Chunks: chunks("12345"), MaxBytes: 4})
		if !errors.Is(err, stream.ErrFull) {
			t.Fatalf("create over the limit: %v", err)
		}
		if _, created, err := s.CreateStream(ctx(t), &store.CreateStreamParams{Path: "big"}); err != nil || !created {
			t.Fatalf("the refused create left a stream: created %v, %v", created, err)
		}
		// A fork counts only what is written to it.
		fork := create(t, s, store.CreateStreamParams{Path: "fork", Fork: &store.ForkParams{SourceID: si.ID, Offset: -1}})
		if fork.DataBytes != 0 {
			t.Fatalf("a fork starts with DataBytes %d, want 0", fork.DataBytes)
		}
		appendOK(t, s, fork.ID, "", 0, 0, "xy")
		if got := getStream(t, s, fork.ID); got.DataBytes != 2 {
			t.Fatalf("fork DataBytes = %d, want 2", got.DataBytes)
		}
		if h.Harness.Reopen != nil {
			s = h.Reopen(t, s)
			if got := getStream(t, s, si.ID); got.DataBytes != 14 {
				t.Fatalf("DataBytes after a restart = %d, want 14", got.DataBytes)
			}
		}
	})

	t.Run("StreamCount", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		limited := func(path string) (*store.StreamInfo, bool, error) {
			return s.CreateStream(ctx(t), &store.CreateStreamParams{Path: path, MaxStreams: 2})
		}
		for _, p := range []string{"a", "b"} {
			if _, created, err := limited(p); err != nil || !created {
				t.Fatalf("create %q: %v %v", p, created, err)
			}
		}
		// Run streams do not count.
		if _, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "r", Workflow: "wf"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.OpenStream(ctx(t), &store.OpenStreamParams{Path: store.RunStreamPath("r", "out"), RunID: "r", Name: "out", Create: true}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := limited("c"); !errors.Is(err, store.ErrQuota) {
			t.Fatalf("a third stream: %v, want ErrQuota", err)
		}
		// A create that finds its stream is answered.
		if si, created, err := limited("a"); err != nil || created || si.Path != "a" {
			t.Fatalf("re-create at the limit: %v %v %v", si, created, err)
		}
		// A deletion makes room.
		b, err := s.GetStream(ctx(t), mustID(t, s, "b"))
		must(t, err)
		if _, err := s.DeleteStream(ctx(t), &store.DeleteStreamParams{ID: b.ID}); err != nil {
			t.Fatal(err)
		}
		if _, created, err := limited("c"); err != nil || !created {
			t.Fatalf("create after a delete: %v %v", created, err)
		}
	})

	t.Run("ListStandalone", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		paths := []string{"a/1", "a/2", "a/3", "a0", "b/1", "a/é", "a/!", "a"}
		for _, p := range paths {
			create(t, s, store.CreateStreamParams{Path: p, Now: t0})
		}
		create(t, s, store.CreateStreamParams{Path: "a/expired", Now: t0, Expiry: store.Expiry{At: t0.Add(time.Second)}})
		del := create(t, s, store.CreateStreamParams{Path: "a/deleted", Now: t0})
		if _, err := s.DeleteStream(ctx(t), &store.DeleteStreamParams{ID: del.ID}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.CreateRun(ctx(t), &store.CreateRunParams{ID: "r", Workflow: "wf"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.OpenStream(ctx(t), &store.OpenStreamParams{Path: store.RunStreamPath("r", "out"), RunID: "r", Name: "out", Create: true}); err != nil {
			t.Fatal(err)
		}
		list := func(p store.ListStandaloneParams) ([]string, string) {
			t.Helper()
			p.Now = t0.Add(time.Second)
			l, err := s.ListStandaloneStreams(ctx(t), &p)
			if err != nil {
				t.Fatalf("list %+v: %v", p, err)
			}
			var out []string
			for _, si := range l.Streams {
				out = append(out, si.Path)
			}
			return out, l.Next
		}
		all, next := list(store.ListStandaloneParams{})
		want := slices.Clone(paths)
		slices.Sort(want) // byte order
		if !slices.Equal(all, want) || next != "" {
			t.Fatalf("all: %q next %q, want %q", all, next, want)
		}
		var paged []string
		for after, n := "", 0; ; n++ {
			page, next := list(store.ListStandaloneParams{Prefix: "a/", After: after, Limit: 2})
			paged = append(paged, page...)
			if next == "" {
				break
			}
			if n > 10 {
				t.Fatal("paging does not end")
			}
			after = next
		}
		if want := []string{"a/!", "a/1", "a/2", "a/3", "a/é"}; !slices.Equal(paged, want) {
			t.Fatalf("paged by 2 under a/: %q, want %q", paged, want)
		}
		if got, _ := list(store.ListStandaloneParams{Prefix: "zz"}); len(got) != 0 {
			t.Fatalf("prefix zz: %q", got)
		}
		for _, p := range []store.ListStandaloneParams{{Limit: -1}, {Limit: store.MaxListLimit + 1}, {Prefix: "a\xff"}, {After: "\x00"}} {
			if _, err := s.ListStandaloneStreams(ctx(t), &p); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("list %+v: %v, want ErrInvalid", p, err)
			}
		}
	})
}

// mustID returns the id of the stream at path.
func mustID(t *testing.T, s store.Full, path string) int64 {
	t.Helper()
	si, created, err := s.CreateStream(ctx(t), &store.CreateStreamParams{Path: path})
	if err != nil || created {
		t.Fatalf("stream %q: %v created %v", path, err, created)
	}
	return si.ID
}
