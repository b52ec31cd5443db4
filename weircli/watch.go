package weircli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/runwait"
	"github.com/weirhq/weir/store"
)

// runsWatch runs `runs watch RUN`: the run's progress, live, one line per
// event of its log as it is recorded (stamped from the run's creation),
// what it waits on when it parks or waits on a hook, and its end. It exits
// 0 when the run completes, 1 when it fails or is cancelled.
func runsWatch(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("runs watch", "Usage: "+name+" runs watch RUN [flags]\n\nShows a run's progress live: each event as it is recorded, what the run waits on, its end.\n", stderr)
	var cf clientFlags
	cf.register(fs)
	interval := fs.Duration("interval", 250*time.Millisecond, "how often to look for new events")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errUsage(errors.New("runs watch: want one run id"))
	}
	if *interval <= 0 {
		return errUsage(errors.New("runs watch: --interval must be positive"))
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	id := pos[0]
	var after int64
	waiting := ""
	for {
		run, err := c.GetRun(ctx, id)
		if err != nil {
			return err
		}
		events, err := c.Events(ctx, id, after)
		if err != nil {
			return err
		}
		for i := range events {
			ev := &events[i]
			fmt.Fprintf(stdout, "%9s  %-18s %s\n", since(run.CreatedAt, ev.At), ev.Type, describeEvent(ev))
			after = ev.Seq
		}
		if run.Status.Terminal() {
			return watchEnd(stdout, run)
		}
		if w := watchWaiting(ctx, c, name, run); w != waiting {
			if w != "" {
				fmt.Fprintf(stdout, "%9s  %-18s %s\n", since(run.CreatedAt, time.Now()), "waiting", w)
			}
			waiting = w
		}
		select {
		case <-ctx.Done():
			return nil // interrupted: a normal way to stop watching
		case <-time.After(*interval):
		}
	}
}

// watchEnd prints a run's end, and is the error of one that did not
// complete.
func watchEnd(stdout io.Writer, run *client.Run) error {
	took := run.UpdatedAt.Sub(run.CreatedAt).Round(time.Millisecond)
	switch run.Status {
	case store.RunCompleted:
		fmt.Fprintf(stdout, "completed in %s: %s\n", took, oneLine(run.Output))
		return nil
	case store.RunCancelled:
		return fmt.Errorf("run %s was cancelled after %s", run.ID, took)
	}
	return fmt.Errorf("run %s failed after %s: %s", run.ID, took, firstLine(run.Error))
}

// watchWaiting says what a running run waits on (the server's
// /v1/runs/{id}/waiting), with the command that delivers to a hook; ""
// if it waits on nothing but the steps its events show running.
func watchWaiting(ctx context.Context, c *client.Client, name string, run *client.Run) string {
	wt, err := c.Waiting(ctx, run.ID)
	if err != nil {
		return ""
	}
	var parts []string
	for _, w := range wt.Waits {
		switch w.Kind {
		case runwait.Step:
			continue // its step_started line says so
		case runwait.Hook:
			parts = append(parts, fmt.Sprintf("%s (%s runs hook %s --data JSON)", w.Text, name, w.Name))
		default:
			parts = append(parts, w.Text)
		}
	}
	return strings.Join(parts, "; ")
}

// since is t as an offset from the run's creation: +1.234s.
func since(created, t time.Time) string {
	d := t.Sub(created)
	if d < 0 {
		d = 0
	}
	return fmt.Sprintf("+%.3fs", d.Seconds())
}
