package weircli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/internal/demo"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/open"
	"github.com/weirhq/weir/stream"
)

func demoCmd(ctx context.Context, args []string, out, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbPath := fs.String("db", "", "the store: a SQLite file or a postgres:// URL (default: a fresh SQLite file in a temporary folder)")
	fast := fs.Bool("fast", false, "no pause between tokens")
	if err := fs.Parse(args); err != nil {
		return err
	}
	path := *dbPath
	if path == "" {
		dir, err := os.MkdirTemp("", "weir-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "weir.db")
	}
	s, err := open.Open(ctx, path)
	if err != nil {
		return err
	}
	defer s.Close()
	var where string
	if kind, target := open.Parse(path); kind == "postgres" {
		where = "PostgreSQL at " + redactURL(target)
	} else {
		where = "SQLite at " + target
	}
	e, err := weir.New(s, &weir.Config{PollInterval: 20 * time.Millisecond})
	if err != nil {
		return err
	}
	wf := demo.Register(e)
	if err := e.Work(ctx); err != nil {
		return err
	}
	defer e.Close(context.Background())

	delay := 40 * time.Millisecond
	if *fast {
		delay = 0
	}
	fmt.Fprintf(out, "weir demo: a step streams tokens to a live reader, fails midway, and is retried.\nstore: %s (durable commits)\n", where)

	fmt.Fprintf(out, "\n1. The retry writes the same tokens (a deterministic step)\n\n")
	same := demo.TokensInput{
		Text:      "Exactly once means every chunk reaches the reader once, even when the step that wrote it is retried.",
		FailAfter: 7, Delay: delay,
	}
	if err := demoRun(ctx, out, e, wf, same); err != nil {
		return err
	}

	fmt.Fprintf(out, "\n2. The retry writes different tokens (a sampled LLM)\n\n")
	diff := demo.TokensInput{
		Text:      "The answer to the question is forty-one, give or take.",
		RetryText: "The answer to the question is forty-two, as computed.",
		FailAfter: 8, Delay: delay,
	}
	return demoRun(ctx, out, e, wf, diff)
}

func demoRun(ctx context.Context, out io.Writer, e *weir.Engine, wf *weir.Workflow[demo.TokensInput, demo.TokensOutput], in demo.TokensInput) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	h, err := wf.Start(ctx, in, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "   run %s, live reader on stream %q:\n", h.ID, demo.TokensStream)

	seen := map[int64]string{} // offset -> chunk, as the live reader got them
	seenAttempt := map[int64]int64{}
	voided := map[int64]bool{}
	var order []int64
	for rec, err := range e.Read(ctx, h.ID, demo.TokensStream, &weir.ReadOptions{Follow: true, ApplyAborts: true}) {
		if err != nil {
			return err
		}
		switch rec.Kind {
		case stream.KindData:
			seen[rec.Offset] = string(rec.Data)
			seenAttempt[rec.Offset] = rec.Attempt
			order = append(order, rec.Offset)
			fmt.Fprintf(out, "   %3d  attempt %d  seq %2d  %q\n", rec.Offset, rec.Attempt, rec.Seq, rec.Data)
		case stream.KindAbort:
			var words []string
			for _, o := range rec.Voided {
				voided[o] = true
				words = append(words, seen[o])
			}
			fmt.Fprintf(out, "   %3d  ABORT    attempt %d diverged at seq %d: voids %q\n", rec.Offset, rec.Attempt, rec.FromSeq(), strings.Join(words, ""))
		case stream.KindCommit:
			fmt.Fprintf(out, "   %3d  COMMIT   attempt %d, %d chunks\n", rec.Offset, rec.Attempt, rec.Count())
		case stream.KindClose:
			fmt.Fprintf(out, "   %3d  CLOSE    the run ended\n", rec.Offset)
		}
	}
	res, err := h.Result(ctx)
	if err != nil {
		return err
	}
	events, err := e.Store().ListEvents(ctx, h.ID, 0)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n   event log:\n   ")
	for _, ev := range events {
		switch ev.Type {
		case store.EventStepStarted:
			fmt.Fprintf(out, " step %q attempt %d started ·", ev.Name, ev.Attempt)
		case store.EventStepFailed:
			fmt.Fprintf(out, " attempt %d failed (%s) ·\n   ", ev.Attempt, ev.Error)
		case store.EventStepCompleted:
			fmt.Fprintf(out, " attempt %d completed ·", ev.Attempt)
		case store.EventRunCompleted:
			fmt.Fprintf(out, " run completed\n")
		}
	}

	var committed strings.Builder
	n := 0
	for rec, err := range e.Read(ctx, h.ID, demo.TokensStream, &weir.ReadOptions{View: weir.CommittedView}) {
		if err != nil {
			return err
		}
		if rec.Kind == stream.KindData {
			committed.WriteString(string(rec.Data))
			n++
		}
	}
	final := in.Text
	if in.RetryText != "" {
		final = in.RetryText
	}
	if len(seen) != len(order) {
		return fmt.Errorf("the live reader got a record twice")
	}
	earlier := 0
	for _, o := range order {
		if !voided[o] && o < int64(len(order)) && seenAttempt[o] < res.Attempts {
			earlier++
		}
	}
	if earlier > 0 {
		fmt.Fprintf(out, "   attempt %d re-sent seq 0–%d with the same bytes: adopted, so no new record\n", res.Attempts, earlier-1)
	}
	fmt.Fprintf(out, "   the live reader got %d data chunks, none twice; an abort voided %d of them\n", len(order), len(voided))
	fmt.Fprintf(out, "   committed view (%d chunks): %q\n", n, committed.String())
	if committed.String() != final {
		return fmt.Errorf("committed view differs from the final attempt's output %q", final)
	}
	firstTry := min(in.FailAfter, len(demo.Tokenize(in.Text)))
	fmt.Fprintf(out, "   a bare append would have shown %d chunks: attempt 1's %d, then all %d of attempt %d again\n",
		firstTry+res.Tokens, firstTry, res.Tokens, res.Attempts)
	return nil
}

// redactURL hides a URL's password.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a database URL)"
	}
	return u.Redacted()
}
