package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/demo"
	"github.com/weirhq/weir/stream"
)

// collect reads a run's stream to its end (or close, following) and
// returns the records.
func collect(t *testing.T, c *client.Client, run, name string, opts *client.ReadOptions) []client.Record {
	t.Helper()
	var out []client.Record
	for rec, err := range c.Read(ctxT(t), run, name, opts) {
		if err != nil {
			t.Fatalf("read %s/%s: %v", run, name, err)
		}
		out = append(out, rec)
	}
	return out
}

func text(recs []client.Record) string {
	var b strings.Builder
	for _, r := range recs {
		if r.Kind == stream.KindData {
			b.Write(r.Data)
		}
	}
	return b.String()
}

// checkDense checks a live read: offsets 0, 1, 2 … with nothing missing or
// twice, each record's NextOffset the next one's start.
func checkDense(t *testing.T, recs []client.Record) {
	t.Helper()
	for i, r := range recs {
		if r.Offset != int64(i) {
			t.Fatalf("record %d has offset %d", i, r.Offset)
		}
		if n, err := client.ParseOffset(r.NextOffset); err != nil || n != r.Offset+1 {
			t.Fatalf("record %d: NextOffset %q", i, r.NextOffset)
		}
	}
}

func TestReadFollowsARunningStep(t *testing.T) {
	c, _ := newServer(t, nil, nil)
	ctx := ctxT(t)
	words := "the retry writes the same tokens so they are adopted and seen once"
	for _, sse := range []bool{false, true} {
		run, _, err := c.Start(ctx, demo.TokensWorkflow, demo.TokensInput{Text: words, FailAfter: 4, Delay: 15 * time.Millisecond}, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Started before the stream exists: the reader waits for it.
		live := collect(t, c, run.ID, demo.TokensStream, &client.ReadOptions{Follow: true, SSE: sse})
		if text(live) != words {
			t.Fatalf("sse=%v: live view %q", sse, text(live))
		}
		checkDense(t, live)
		if last := live[len(live)-1]; last.Kind != stream.KindClose {
			t.Fatalf("sse=%v: the last record is %v, not close", sse, last.Kind)
		}
		var commits int
		for _, r := range live {
			if r.Kind == stream.KindCommit {
				commits++
				if r.Writer != "step/1" || r.Attempt != 2 || r.Seq != int64(len(demo.Tokenize(words))) {
					t.Fatalf("commit %+v", r)
				}
			}
			if r.Kind == stream.KindData && r.Writer != "step/1" {
				t.Fatalf("data of writer %q", r.Writer)
			}
		}
		if commits != 1 {
			t.Fatalf("%d commits", commits)
		}
		committed := collect(t, c, run.ID, demo.TokensStream, &client.ReadOptions{View: weir.CommittedView, Follow: true, SSE: sse})
		if text(committed) != words {
			t.Fatalf("sse=%v: committed view %q", sse, text(committed))
		}
	}
}

func TestReadDivergingRetry(t *testing.T) {
	c, _ := newServer(t, nil, nil)
	ctx := ctxT(t)
	in := demo.TokensInput{Text: "one two three four five", RetryText: "one two THREE four", FailAfter: 4}
	run, _, err := c.Start(ctx, demo.TokensWorkflow, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	committed := collect(t, c, run.ID, demo.TokensStream, &client.ReadOptions{View: weir.CommittedView})
	if text(committed) != in.RetryText {
		t.Fatalf("committed %q", text(committed))
	}
	live := collect(t, c, run.ID, demo.TokensStream, nil)
	checkDense(t, live)
	var aborts []client.Record
	for _, r := range live {
		if r.Kind == stream.KindAbort {
			aborts = append(aborts, r)
		}
	}
	if len(aborts) != 1 || aborts[0].Seq != 2 || aborts[0].Attempt != 2 {
		t.Fatalf("aborts %+v in %q", aborts, text(live))
	}
	if text(live) != "one two three four THREE four" {
		t.Fatalf("live %q", text(live))
	}
}

func TestReadResumes(t *testing.T) {
	c, _ := newServer(t, nil, nil)
	ctx := ctxT(t)
	run, _, err := c.Start(ctx, demo.TokensWorkflow, demo.TokensInput{Text: "a b c d e f"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	all := collect(t, c, run.ID, demo.TokensStream, nil)
	// Stop after 2 records, resume from the second's NextOffset.
	var got []client.Record
	for rec, err := range c.Read(ctx, run.ID, demo.TokensStream, nil) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rec)
		if len(got) == 2 {
			break
		}
	}
	rest := collect(t, c, run.ID, demo.TokensStream, &client.ReadOptions{Offset: got[1].NextOffset})
	if text(append(got, rest...)) != text(all) || len(got)+len(rest) != len(all) {
		t.Fatalf("resumed %q + %q, want %q", text(got), text(rest), text(all))
	}
	from := collect(t, c, run.ID, demo.TokensStream, &client.ReadOptions{From: 4})
	if from[0].Offset != 4 || text(from) != " e f" {
		t.Fatalf("from 4: %+v", from)
	}
	for _, err := range c.Read(ctx, run.ID, demo.TokensStream, &client.ReadOptions{Offset: "9999999999999999_9999999999999999"}) {
		if !errors.Is(err, client.ErrBadRequest) {
			t.Fatalf("an offset past the end: %v", err)
		}
	}
	// The tail of a closed stream: nothing more.
	if now := collect(t, c, run.ID, demo.TokensStream, &client.ReadOptions{Offset: "now", Follow: true}); len(now) != 0 {
		t.Fatalf("from now: %+v", now)
	}
}

func TestReadErrors(t *testing.T) {
	c, _ := newServer(t, nil, nil)
	ctx := ctxT(t)
	for _, follow := range []bool{false, true} {
		n := 0
		for _, err := range c.Read(ctx, "nope", "tokens", &client.ReadOptions{Follow: follow}) {
			n++
			if !errors.Is(err, weir.ErrNotFound) {
				t.Fatalf("follow=%v: unknown run: %v", follow, err)
			}
		}
		if n != 1 {
			t.Fatalf("%d yields", n)
		}
	}
	// A run that ended without writing to the stream: nothing, no error.
	run, _, err := c.Start(ctx, "echo", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	if recs := collect(t, c, run.ID, "never", &client.ReadOptions{Follow: true}); len(recs) != 0 {
		t.Fatalf("%+v", recs)
	}
}
