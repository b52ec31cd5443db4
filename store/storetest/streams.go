package storetest

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

func testStreams(t *testing.T, h harness) {
	t.Run("OpenStandalone", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		_, err := s.OpenStream(ctx(t), &store.OpenStreamParams{Path: "chat/1"})
		wantErr(t, err, store.ErrNotFound)
		si, err := s.OpenStream(ctx(t), &store.OpenStreamParams{Path: "chat/1", Create: true})
		must(t, err)
		if si.ID == 0 || si.Path != "chat/1" || si.RunID != "" || si.ContentType != "application/octet-stream" ||
			si.NextOffset != 0 || si.Closed || si.CreatedAt.IsZero() {
			t.Fatalf("created stream = %+v", si)
		}
		for _, create := range []bool{false, true} {
			again, err := s.OpenStream(ctx(t), &store.OpenStreamParams{Path: "chat/1", Create: create})
			must(t, err)
			if again.ID != si.ID || !again.CreatedAt.Equal(si.CreatedAt) {
				t.Fatalf("reopened (create %v) = %+v, want %+v", create, again, si)
			}
		}
		typed, err := s.OpenStream(ctx(t), &store.OpenStreamParams{Path: "chat/2", Create: true, ContentType: "text/plain"})
		must(t, err)
		if typed.ContentType != "text/plain" || typed.ID == si.ID {
			t.Fatalf("typed stream = %+v", typed)
		}
		got, err := s.GetStream(ctx(t), si.ID)
		must(t, err)
		if got.ID != si.ID || got.Path != si.Path {
			t.Fatalf("GetStream = %+v", got)
		}
		_, err = s.GetStream(ctx(t), si.ID+1000)
		wantErr(t, err, store.ErrNotFound)
		_, err = s.OpenStream(ctx(t), &store.OpenStreamParams{Path: "", Create: true})
		wantErr(t, err, store.ErrInvalid)
	})

	t.Run("OpenRunStream", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		createRun(t, s, "r1")
		si, err := s.OpenStream(ctx(t), &store.OpenStreamParams{RunID: "r1", Name: "out", Create: true})
		must(t, err)
		if si.Path != store.RunStreamPath("r1", "out") || si.Path != "runs/r1/out" || si.RunID != "r1" || si.Name != "out" {
			t.Fatalf("run stream = %+v", si)
		}
		for _, p := range []store.OpenStreamParams{
			{RunID: "r1", Name: "out"},
			{RunID: "r1", Name: "out", Create: true},
			{Path: "runs/r1/out"},
		} {
			got, err := s.OpenStream(ctx(t), &p)
			must(t, err)
			if got.ID != si.ID || got.RunID != "r1" || got.Name != "out" {
				t.Fatalf("OpenStream(%+v) = %+v, want %+v", p, got, si)
			}
		}
		_, err = s.OpenStream(ctx(t), &store.OpenStreamParams{RunID: "r1", Name: "other"})
		wantErr(t, err, store.ErrNotFound)
		_, err = s.OpenStream(ctx(t), &store.OpenStreamParams{RunID: "nope", Name: "out", Create: true})
		wantErr(t, err, store.ErrNotFound)
		_, err = s.OpenStream(ctx(t), &store.OpenStreamParams{RunID: "r1", Create: true})
		wantErr(t, err, store.ErrInvalid)
	})

	t.Run("ListStreams", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		createRun(t, s, "r1")
		createRun(t, s, "r2")
		openRunStream(t, s, "r1", "b")
		openRunStream(t, s, "r1", "a")
		openRunStream(t, s, "r2", "c")
		openStream(t, s, "standalone")
		list, err := s.ListStreams(ctx(t), "r1")
		must(t, err)
		var names []string
		for _, si := range list {
			if si.RunID != "r1" {
				t.Fatalf("ListStreams(r1) returned %+v", si)
			}
			names = append(names, si.Name)
		}
		if !slices.Equal(names, []string{"a", "b"}) {
			t.Fatalf("ListStreams(r1) = %v, want [a b]", names)
		}
	})
}

func testAppend(t *testing.T, h harness) {
	t.Run("AnonymousAppendsCommitAtOnce", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := openStream(t, s, "s")
		res := appendOK(t, s, si.ID, "", 0, 0, "a", "b")
		if !slices.Equal(res.Acks, []stream.Ack{{Offset: 0, Outcome: stream.Appended}, {Offset: 1, Outcome: stream.Appended}}) || res.NextOffset != 2 {
			t.Fatalf("acks %v next %d", res.Acks, res.NextOffset)
		}
		// An anonymous append is never deduped: the same bytes again are new.
		res = appendOK(t, s, si.ID, "", 0, 0, "a")
		if res.Acks[0] != (stream.Ack{Offset: 2, Outcome: stream.Appended}) || res.NextOffset != 3 {
			t.Fatalf("acks %v next %d", res.Acks, res.NextOffset)
		}
		log := readAll(t, s, si.ID)
		if got := committed(log); !slices.Equal(got, []string{"a", "b", "a"}) {
			t.Fatalf("committed = %q", got)
		}
		if log[0].Digest != stream.Sum([]byte("a")) || log[0].Kind != stream.KindData || log[0].Writer != "" || log[0].Attempt != 0 {
			t.Fatalf("record 0 = %+v", log[0])
		}
		si, err := s.GetStream(ctx(t), si.ID)
		must(t, err)
		if si.NextOffset != 3 {
			t.Fatalf("GetStream next offset %d, want 3", si.NextOffset)
		}
	})

	t.Run("ProducerAttemptZeroCommitsAtOnce", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := openStream(t, s, "s")
		appendOK(t, s, si.ID, "producer-1", 0, 0, "a", "b")
		res := appendOK(t, s, si.ID, "producer-1", 0, 1, "b", "c")
		if !slices.Equal(res.Acks, []stream.Ack{{Offset: 1, Outcome: stream.Retransmit}, {Offset: 2, Outcome: stream.Appended}}) {
			t.Fatalf("acks %v", res.Acks)
		}
		if got := committed(readAll(t, s, si.ID)); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("committed = %q", got)
		}
		appendErr(t, s, si.ID, "producer-1", 1, 0, stream.ErrMode, "a")
		_, err := s.FinishWriter(ctx(t), &store.FinishWriterParams{StreamID: si.ID, Writer: "producer-1", Attempt: 0, Commit: true})
		wantErr(t, err, stream.ErrMode)
	})

	t.Run("CheckAppend", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := openStream(t, s, "s")
		big := make([]byte, store.MaxChunkSize+1)
		four := make([]byte, store.MaxChunkSize)
		many := make([][]byte, store.MaxAppendChunks+1)
		for i := range many {
			many[i] = []byte{1}
		}
		for _, c := range []struct {
			name string
			p    store.AppendParams
			want error
		}{
			{"no chunks", store.AppendParams{StreamID: si.ID}, store.ErrInvalid},
			{"chunk too large", store.AppendParams{StreamID: si.ID, Chunks: [][]byte{big}}, store.ErrTooLarge},
			{"too many chunks", store.AppendParams{StreamID: si.ID, Chunks: many}, store.ErrTooLarge},
			{"too many bytes", store.AppendParams{StreamID: si.ID, Chunks: [][]byte{four, four, four, four, {1}}}, store.ErrTooLarge},
			{"negative attempt", store.AppendParams{StreamID: si.ID, Writer: "w", Attempt: -1, Chunks: chunks("a")}, store.ErrInvalid},
			{"negative seq", store.AppendParams{StreamID: si.ID, Writer: "w", Attempt: 1, FirstSeq: -1, Chunks: chunks("a")}, store.ErrInvalid},
			{"attempt without writer", store.AppendParams{StreamID: si.ID, Attempt: 1, Chunks: chunks("a")}, store.ErrInvalid},
			{"seq without writer", store.AppendParams{StreamID: si.ID, FirstSeq: 1, Chunks: chunks("a")}, store.ErrInvalid},
			{"writer too long", store.AppendParams{StreamID: si.ID, Writer: string(make([]byte, stream.MaxWriterLen+1)), Attempt: 1, Chunks: chunks("a")}, store.ErrInvalid},
			{"unknown stream", store.AppendParams{StreamID: si.ID + 1000, Chunks: chunks("a")}, store.ErrNotFound},
		} {
			_, err := s.Append(ctx(t), &c.p)
			if !errors.Is(err, c.want) {
				t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
			}
		}
		if log := readAll(t, s, si.ID); len(log) != 0 {
			t.Fatalf("refused appends wrote %v", log)
		}
		// The limits themselves are allowed.
		res, err := s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Chunks: many[:store.MaxAppendChunks]})
		must(t, err)
		if res.NextOffset != store.MaxAppendChunks {
			t.Fatalf("next offset %d", res.NextOffset)
		}
		res, err = s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Writer: "w", Attempt: 1, Chunks: [][]byte{four, four, four, four}})
		must(t, err)
		page, err := s.Read(ctx(t), &store.ReadParams{StreamID: si.ID, From: store.MaxAppendChunks + 3})
		must(t, err)
		if len(page.Records) != 1 || len(page.Records[0].Data) != store.MaxChunkSize || res.NextOffset != store.MaxAppendChunks+4 {
			t.Fatalf("read back the last 4 MiB chunk: %d records", len(page.Records))
		}
	})

	t.Run("FinishWriter", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := openStream(t, s, "s")
		_, err := s.FinishWriter(ctx(t), &store.FinishWriterParams{StreamID: si.ID, Writer: "w", Attempt: 1, Commit: true})
		wantErr(t, err, stream.ErrUnknownWriter)
		_, err = s.FinishWriter(ctx(t), &store.FinishWriterParams{StreamID: si.ID + 1000, Writer: "w", Attempt: 1, Commit: true})
		wantErr(t, err, store.ErrNotFound)
		appendOK(t, s, si.ID, "w", 1, 0, "a", "b")
		_, err = s.FinishWriter(ctx(t), &store.FinishWriterParams{StreamID: si.ID, Writer: "w", Attempt: 0, Commit: true})
		wantErr(t, err, stream.ErrFenced)
		res, err := s.FinishWriter(ctx(t), &store.FinishWriterParams{StreamID: si.ID, Writer: "w", Attempt: 1, Commit: true})
		must(t, err)
		if res != stream.Done {
			t.Fatalf("commit = %v, want Done", res)
		}
		res, err = s.FinishWriter(ctx(t), &store.FinishWriterParams{StreamID: si.ID, Writer: "w", Attempt: 1, Commit: true})
		must(t, err)
		if res != stream.Already {
			t.Fatalf("second commit = %v, want Already", res)
		}
		_, err = s.FinishWriter(ctx(t), &store.FinishWriterParams{StreamID: si.ID, Writer: "w", Attempt: 1, Commit: false})
		wantErr(t, err, stream.ErrWriterFinished)
		if log := readAll(t, s, si.ID); len(log) != 3 || log[2].Kind != stream.KindCommit || log[2].Count() != 2 {
			t.Fatalf("log = %v", log)
		}

		appendOK(t, s, si.ID, "v", 1, 0, "x")
		res, err = s.FinishWriter(ctx(t), &store.FinishWriterParams{StreamID: si.ID, Writer: "v", Attempt: 1, Commit: false})
		must(t, err)
		if res != stream.Done {
			t.Fatalf("abort = %v", res)
		}
		log := readAll(t, s, si.ID)
		if last := log[len(log)-1]; last.Kind != stream.KindAbort || last.Writer != "v" || last.FromSeq() != 0 {
			t.Fatalf("last record %v, want abort{v from 0}", last)
		}
		if got := committed(log); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("committed = %q", got)
		}
	})

	t.Run("CloseStream", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := openStream(t, s, "s")
		appendOK(t, s, si.ID, "w", 1, 0, "a")
		res, err := s.CloseStream(ctx(t), si.ID)
		must(t, err)
		if res != stream.Done {
			t.Fatalf("close = %v", res)
		}
		res, err = s.CloseStream(ctx(t), si.ID)
		must(t, err)
		if res != stream.Already {
			t.Fatalf("second close = %v, want Already", res)
		}
		log := readAll(t, s, si.ID)
		if len(log) != 2 || log[1].Kind != stream.KindClose {
			t.Fatalf("log = %v, want one close record", log)
		}
		got, err := s.GetStream(ctx(t), si.ID)
		must(t, err)
		if !got.Closed || got.NextOffset != 2 {
			t.Fatalf("closed stream = %+v", got)
		}
		appendErr(t, s, si.ID, "", 0, 0, stream.ErrClosed, "late")
		appendErr(t, s, si.ID, "w", 1, 1, stream.ErrClosed, "b")
		// An exact retransmit is still acknowledged.
		ack := appendOK(t, s, si.ID, "w", 1, 0, "a")
		if ack.Acks[0] != (stream.Ack{Offset: 0, Outcome: stream.Retransmit}) {
			t.Fatalf("retransmit after close = %v", ack.Acks)
		}
		_, err = s.FinishWriter(ctx(t), &store.FinishWriterParams{StreamID: si.ID, Writer: "w", Attempt: 1, Commit: true})
		wantErr(t, err, stream.ErrClosed)
		// The open writer's data never joins the committed view.
		if got := committed(readAll(t, s, si.ID)); len(got) != 0 {
			t.Fatalf("committed = %q", got)
		}
		_, err = s.CloseStream(ctx(t), si.ID+1000)
		wantErr(t, err, store.ErrNotFound)
	})

	t.Run("AllOrNothing", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := openStream(t, s, "s")
		appendOK(t, s, si.ID, "w", 1, 0, "a", "b")
		// A conflict in the middle of a request: its retransmitted first
		// chunk and new last chunk leave nothing either.
		appendErr(t, s, si.ID, "w", 1, 0, stream.ErrConflict, "a", "X", "c")
		appendErr(t, s, si.ID, "w", 1, 5, stream.ErrGap, "f", "g")
		// A divergent retry whose request then conflicts: no abort, no data.
		appendOK(t, s, si.ID, "w", 2, 0, "a")
		res := appendOK(t, s, si.ID, "w", 2, 1, "b", "c")
		if !slices.Equal(res.Acks, []stream.Ack{{Offset: 1, Outcome: stream.Adopted}, {Offset: 2, Outcome: stream.Appended}}) {
			t.Fatalf("acks = %v", res.Acks)
		}
		var ce *stream.ConflictError
		if err := appendErr(t, s, si.ID, "w", 2, 2, stream.ErrConflict, "Q"); !errors.As(err, &ce) || ce.Seq != 2 || ce.Offset != 2 {
			t.Fatalf("conflict = %#v", err)
		}
		var ge *stream.GapError
		if err := appendErr(t, s, si.ID, "w", 2, 9, stream.ErrGap, "z"); !errors.As(err, &ge) || ge.Expected != 3 || ge.Got != 9 {
			t.Fatalf("gap = %#v", err)
		}
		// Offsets stay dense after refused requests.
		res = appendOK(t, s, si.ID, "", 0, 0, "next")
		if res.Acks[0].Offset != 3 {
			t.Fatalf("offset after refused appends = %d, want 3", res.Acks[0].Offset)
		}
	})
}

func testRead(t *testing.T, h harness) {
	t.Run("Paging", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := openStream(t, s, "s")
		// 10 records in batches of 3, 3 and 4; each chunk is 10 bytes.
		var all []string
		for _, n := range []int{3, 3, 4} {
			var cs []string
			for range n {
				c := string(rune('a'+len(all))) + "123456789"
				cs = append(cs, c)
				all = append(all, c)
			}
			appendOK(t, s, si.ID, "", 0, 0, cs...)
		}
		read := func(p store.ReadParams) (*store.ReadResult, []string) {
			t.Helper()
			p.StreamID = si.ID
			res, err := s.Read(ctx(t), &p)
			must(t, err)
			var got []string
			for i, r := range res.Records {
				if r.Offset != p.From+int64(i) {
					t.Fatalf("read %+v: record %d at offset %d", p, i, r.Offset)
				}
				got = append(got, string(r.Data))
			}
			return res, got
		}
		if res, got := read(store.ReadParams{}); !slices.Equal(got, all) || res.NextOffset != 10 || res.Closed {
			t.Fatalf("read all = %q next %d closed %v", got, res.NextOffset, res.Closed)
		}
		for _, c := range []struct {
			name string
			p    store.ReadParams
			want []string
		}{
			{"limit", store.ReadParams{Limit: 4}, all[:4]},
			{"from inside a batch", store.ReadParams{From: 4, Limit: 3}, all[4:7]},
			{"from the last record", store.ReadParams{From: 9}, all[9:]},
			{"max bytes", store.ReadParams{From: 1, MaxBytes: 25}, all[1:3]},
			{"max bytes below one record", store.ReadParams{From: 5, MaxBytes: 5}, all[5:6]},
			{"max bytes exact", store.ReadParams{MaxBytes: 30}, all[:3]},
		} {
			if _, got := read(c.p); !slices.Equal(got, c.want) {
				t.Errorf("%s: got %q, want %q", c.name, got, c.want)
			}
		}
		if got := readAllLimit(t, s, si.ID, 3); len(got) != 10 {
			t.Fatalf("paged read got %d records", len(got))
		}
		res, got := read(store.ReadParams{From: 10})
		if len(got) != 0 || res.NextOffset != 10 {
			t.Fatalf("read at the end = %q next %d", got, res.NextOffset)
		}
		for _, p := range []store.ReadParams{{StreamID: si.ID, From: 11}, {StreamID: si.ID, From: -1}} {
			_, err := s.Read(ctx(t), &p)
			wantErr(t, err, store.ErrInvalid)
		}
		_, err := s.Read(ctx(t), &store.ReadParams{StreamID: si.ID + 1000})
		wantErr(t, err, store.ErrNotFound)
		_, err = s.CloseStream(ctx(t), si.ID)
		must(t, err)
		if res, _ := read(store.ReadParams{From: 10}); !res.Closed || len(res.Records) != 1 || res.Records[0].Kind != stream.KindClose {
			t.Fatalf("read after close = %+v", res)
		}
	})

	t.Run("Pieces", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := openStream(t, s, "pieces")
		big := func(n int, seed byte) []byte {
			b := make([]byte, n)
			for i := range b {
				b[i] = seed + byte(i*7)
			}
			return b
		}
		b1, b2 := big(300_000, 1), big(70_001, 2)
		// One append of a small, a large and a small record; then a large
		// one alone; then a small one.
		_, err := s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Chunks: [][]byte{[]byte("a"), b1, []byte("b")}})
		must(t, err)
		_, err = s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Chunks: [][]byte{b2}})
		must(t, err)
		_, err = s.Append(ctx(t), &store.AppendParams{StreamID: si.ID, Chunks: [][]byte{[]byte("c")}})
		must(t, err)
		const page = 64 << 10
		read := func(s store.Full, from, dataFrom int64) *store.ReadResult {
			t.Helper()
			res, err := s.Read(ctx(t), &store.ReadParams{StreamID: si.ID, From: from, MaxBytes: page, Pieces: true, DataFrom: dataFrom})
			must(t, err)
			return res
		}
		// Records that fit come as a page; a larger one as pieces.
		if res := read(s, 0, 0); len(res.Records) != 1 || string(res.Records[0].Data) != "a" || res.Piece != nil {
			t.Fatalf("from 0: %v %+v", res.Records, res.Piece)
		}
		whole := func(s store.Full, off int64, want []byte) {
			t.Helper()
			var got []byte
			for from := int64(0); from < int64(len(want)); {
				res := read(s, off, from)
				if res.Piece == nil || len(res.Records) != 1 || res.Records[0].Offset != off || res.Piece.From != from ||
					res.Piece.Size != int64(len(want)) || len(res.Records[0].Data) > page || len(res.Records[0].Data) == 0 {
					t.Fatalf("record %d from byte %d: %d records, piece %+v", off, from, len(res.Records), res.Piece)
				}
				got = append(got, res.Records[0].Data...)
				from = res.Piece.End(len(res.Records[0].Data))
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("record %d in pieces: %d bytes, not its %d", off, len(got), len(want))
			}
		}
		whole(s, 1, b1)
		whole(s, 3, b2)
		if res := read(s, 2, 0); len(res.Records) != 1 || string(res.Records[0].Data) != "b" || res.Piece != nil {
			t.Fatalf("from 2: %v %+v", res.Records, res.Piece)
		}
		// From a byte in the middle, on a store that never read it (no
		// hint), and of a record that fits: the rest of it.
		if h.Harness.Reopen != nil {
			s = h.Reopen(t, s)
		}
		if res := read(s, 1, 250_000); res.Piece == nil || !bytes.Equal(res.Records[0].Data, b1[250_000:]) {
			t.Fatalf("record 1 from byte 250000: %+v", res.Piece)
		}
		if res := read(s, 3, 70_000); res.Piece == nil || !bytes.Equal(res.Records[0].Data, b2[70_000:]) {
			t.Fatalf("record 3 from byte 70000: %+v", res.Piece)
		}
		// Bytes past a record's, and DataFrom without Pieces, are refused.
		for _, p := range []store.ReadParams{
			{StreamID: si.ID, From: 1, Pieces: true, DataFrom: 300_000},
			{StreamID: si.ID, From: 0, Pieces: true, DataFrom: 1},
			{StreamID: si.ID, From: 1, DataFrom: 5},
			{StreamID: si.ID, From: 1, Pieces: true, DataFrom: -1},
		} {
			_, err := s.Read(ctx(t), &p)
			wantErr(t, err, store.ErrInvalid)
		}
	})
	t.Run("RecordsOwnTheirBytes", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := openStream(t, s, "s")
		appendOK(t, s, si.ID, "w", 1, 0, "one", "two")
		appendOK(t, s, si.ID, "w", 1, 2, "three")
		first := readAll(t, s, si.ID)
		readAll(t, s, si.ID) // a second read must not clobber the first's bytes
		want := []string{"one", "two", "three"}
		for i, r := range first {
			if !bytes.Equal(r.Data, []byte(want[i])) || r.Digest != stream.Sum(r.Data) || r.Writer != "w" || r.Attempt != 1 || r.Seq != int64(i) {
				t.Fatalf("record %d = %+v", i, r)
			}
		}
	})
}

func testWait(t *testing.T, h harness) {
	t.Run("ReturnsAtOnceWhenDataIsThere", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := openStream(t, s, "s")
		appendOK(t, s, si.ID, "", 0, 0, "a")
		must(t, s.Wait(ctx(t), si.ID, 0))
		wantErr(t, s.Wait(ctx(t), si.ID+1000, 0), store.ErrNotFound)
	})

	t.Run("WakesOnAppend", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := openStream(t, s, "s")
		done := make(chan error, 1)
		go func() { done <- s.Wait(ctx(t), si.ID, 0) }()
		select {
		case err := <-done:
			t.Fatalf("Wait returned %v before any append", err)
		case <-time.After(20 * time.Millisecond):
		}
		appendOK(t, s, si.ID, "", 0, 0, "a")
		select {
		case err := <-done:
			must(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("Wait did not return after an append")
		}
	})

	t.Run("WakesOnClose", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := openStream(t, s, "s")
		appendOK(t, s, si.ID, "", 0, 0, "a")
		done := make(chan error, 1)
		go func() { done <- s.Wait(ctx(t), si.ID, 1) }()
		time.Sleep(10 * time.Millisecond)
		_, err := s.CloseStream(ctx(t), si.ID)
		must(t, err)
		select {
		case err := <-done:
			must(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("Wait did not return after a close")
		}
		// Closed: Wait at the end returns at once.
		must(t, s.Wait(ctx(t), si.ID, 2))
	})

	t.Run("ReturnsOnContextEnd", func(t *testing.T) {
		t.Parallel()
		s := h.New(t)
		si := openStream(t, s, "s")
		c, cancel := context.WithTimeout(ctx(t), 20*time.Millisecond)
		defer cancel()
		err := s.Wait(c, si.ID, 0)
		wantErr(t, err, context.DeadlineExceeded)
	})
}
