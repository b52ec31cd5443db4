package weircli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/stream"
)

const streamUsage = `Usage:
  weir stream tail RUN NAME [--from N] [--view live|committed] [--sse] [--records]
  weir stream cat  RUN NAME [--from N] [--view live|committed] [--records]
  weir stream ls   [--prefix P] [--limit N]

tail follows the stream until it is closed (the run ended) or you stop it;
cat prints it to its current end. Data goes to stdout as written; on the live
view, abort and commit records are noted on stderr. --records prints every
record as a line instead: offset, kind, writer, attempt, seq, data.
ls lists the standalone streams (the Durable Streams protocol's) by path:
path, records, data bytes, closed, content type.

Every subcommand takes --url (default $WEIR_URL, else http://127.0.0.1:4437)
and --token (default $WEIR_TOKEN).
`

func streamCmd(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errUsage(fmt.Errorf("stream: want a subcommand: tail, cat or ls\n\n%s", named(streamUsage, name)))
	}
	switch args[0] {
	case "tail":
		return streamRead(ctx, "tail", true, args[1:], stdout, stderr)
	case "cat":
		return streamRead(ctx, "cat", false, args[1:], stdout, stderr)
	case "ls":
		return streamList(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, named(streamUsage, name))
		return nil
	}
	return errUsage(fmt.Errorf("stream: unknown subcommand %q\n\n%s", args[0], named(streamUsage, name)))
}

func streamRead(ctx context.Context, name string, follow bool, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("stream "+name, streamUsage, stderr)
	var cf clientFlags
	cf.register(fs)
	from := fs.Int64("from", 0, "first record offset to read (0: the start)")
	viewName := fs.String("view", "live", "live (every record as written) or committed (successful attempts only)")
	records := fs.Bool("records", false, "print every record as a line: offset, kind, writer, attempt, seq, data")
	sse := false
	if follow {
		fs.BoolVar(&sse, "sse", false, "follow with Server-Sent Events instead of long-polls")
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return errUsage(fmt.Errorf("stream %s: want a run id and a stream name", name))
	}
	if *from < 0 {
		return errUsage(fmt.Errorf("stream %s: --from must be 0 or more", name))
	}
	view, ok := stream.ParseView(*viewName)
	if !ok {
		return errUsage(fmt.Errorf("stream %s: --view %q: want live or committed", name, *viewName))
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	opts := &client.ReadOptions{From: *from, View: view, Follow: follow, SSE: sse}
	seen := false
	for rec, err := range c.Read(ctx, pos[0], pos[1], opts) {
		seen = true
		if err != nil {
			if follow && errors.Is(err, context.Canceled) {
				return nil // interrupted: a normal way to stop tailing
			}
			if errors.Is(err, weir.ErrNotFound) {
				// A run that exists without that stream: say which it has.
				if nerr := noSuchStream(ctx, c, name, pos[0], pos[1]); nerr != nil && !errors.Is(nerr, weir.ErrNotFound) {
					return nerr
				}
			}
			return err
		}
		if *records {
			printRecord(out, &rec)
		} else if rec.Kind == stream.KindData {
			_, _ = out.Write(rec.Data)
		} else if view == weir.LiveView && rec.Kind != stream.KindClose {
			_ = out.Flush()
			fmt.Fprintf(stderr, "\n[%s]\n", describeRecord(&rec))
		}
		if follow {
			if err := out.Flush(); err != nil {
				return err
			}
		}
	}
	if !seen {
		// Nothing at all, not even a close: the run ended without this
		// stream. Say so, and which it has, rather than print nothing.
		return noSuchStream(ctx, c, name, pos[0], pos[1])
	}
	return out.Flush()
}

// noSuchStream is the error of a read of stream name of run, which has
// none by that name: nil if it has one after all (an empty stream).
func noSuchStream(ctx context.Context, c *client.Client, cmd, run, name string) error {
	infos, err := c.Streams(ctx, run)
	if err != nil {
		return err
	}
	var names []string
	for _, si := range infos {
		if si.Name == name {
			return nil
		}
		names = append(names, si.Name)
	}
	if len(names) == 0 {
		return fmt.Errorf("stream %s: run %s has no stream %q: it has none", cmd, run, name)
	}
	return fmt.Errorf("stream %s: run %s has no stream %q; its streams: %s", cmd, run, name, strings.Join(names, ", "))
}

func printRecord(w io.Writer, r *client.Record) {
	fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%d", r.Offset, r.Kind, orDash(r.Writer), r.Attempt, r.Seq)
	if r.Kind == stream.KindData {
		fmt.Fprintf(w, "\t%s", strconv.Quote(string(r.Data)))
	}
	fmt.Fprintln(w)
}

func describeRecord(r *client.Record) string {
	switch r.Kind {
	case stream.KindAbort:
		return fmt.Sprintf("abort at %d: %s attempt %d voids its earlier attempts' chunks from seq %d", r.Offset, r.Writer, r.Attempt, r.Seq)
	case stream.KindCommit:
		return fmt.Sprintf("commit at %d: %s attempt %d, %d chunks", r.Offset, r.Writer, r.Attempt, r.Seq)
	}
	return fmt.Sprintf("%s at %d", r.Kind, r.Offset)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func streamList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("stream ls", streamUsage, stderr)
	var cf clientFlags
	cf.register(fs)
	prefix := fs.String("prefix", "", "only paths that start with this")
	limit := fs.Int("limit", 0, "list at most this many (0: all)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *limit < 0 {
		return errUsage(errors.New("stream ls: takes no arguments; --limit must be 0 or more"))
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	opts := &client.StandaloneOptions{Prefix: *prefix}
	for n := 0; ; {
		page, err := c.StandaloneStreams(ctx, opts)
		if err != nil {
			return err
		}
		for _, si := range page.Streams {
			closed := "open"
			if si.Closed {
				closed = "closed"
			}
			fmt.Fprintf(out, "%s\t%d\t%d\t%s\t%s\n", si.Path, si.NextOffset, si.Bytes, closed, si.ContentType)
			if n++; *limit > 0 && n == *limit {
				return nil
			}
		}
		if page.NextCursor == "" {
			return nil
		}
		opts.After = page.NextCursor
	}
}
