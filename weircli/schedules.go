package weircli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/weirhq/weir/api"
)

const schedulesUsage = `Usage:
  weir schedules ls
  weir schedules show NAME
  weir schedules set NAME --workflow W --spec SPEC [--input JSON] [--tz ZONE]
                          [--overlap skip|buffer_one|allow] [--backfill D] [--paused]
  weir schedules pause NAME
  weir schedules resume NAME
  weir schedules rm NAME

A schedule starts a run of its workflow at each tick of its spec: a cron
expression of five fields ("0 9 * * MON-FRI"), a macro (@hourly, @daily,
@weekly, @monthly, @yearly) or an interval ("@every 15m"), read in --tz (an
IANA zone; default UTC). Each tick starts one run, named
sched:NAME:<tick>, however many workers run. --overlap says what a tick does
while the last tick's run is in flight: skip it (the default), keep the
first such tick until the run ends (buffer_one), or start it anyway (allow).
--backfill is how late a tick may be and still start, after every worker
was down (default 1m). pause and resume keep the rest; ticks while paused
never start. rm deletes the schedule, not its runs.

Every subcommand takes --url (default $WEIR_URL, else http://127.0.0.1:4437)
and --token (default $WEIR_TOKEN).
`

func schedulesCmd(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errUsage(fmt.Errorf("schedules: want a subcommand: ls, show, set, pause, resume or rm\n\n%s", named(schedulesUsage, name)))
	}
	fs := newFlagSet("schedules "+args[0], schedulesUsage, stderr)
	var cf clientFlags
	cf.register(fs)
	var set api.Schedule
	var input string
	var backfill time.Duration
	if args[0] == "set" {
		fs.StringVar(&set.Workflow, "workflow", "", "the workflow each tick starts a run of (required)")
		fs.StringVar(&set.Spec, "spec", "", `the ticks: "0 9 * * MON-FRI", @daily, "@every 15m" (required)`)
		fs.StringVar(&input, "input", "", "every run's input, JSON (default null)")
		fs.StringVar(&set.TZ, "tz", "", "the IANA time zone the spec is read in (default UTC)")
		fs.StringVar(&set.Overlap, "overlap", "", "skip, buffer_one or allow (default skip)")
		fs.DurationVar(&backfill, "backfill", 0, "how late a tick may be and still start (default 1m)")
		fs.BoolVar(&set.Paused, "paused", false, "set it paused")
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, named(schedulesUsage, name))
		return nil
	case "ls", "show", "set", "pause", "resume", "rm":
	default:
		return errUsage(fmt.Errorf("schedules: unknown subcommand %q\n\n%s", args[0], named(schedulesUsage, name)))
	}
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	want := 1
	if args[0] == "ls" {
		want = 0
	}
	if len(pos) != want {
		return errUsage(fmt.Errorf("schedules %s: want %d argument(s), got %d", args[0], want, len(pos)))
	}
	if args[0] == "set" {
		switch {
		case set.Workflow == "" || set.Spec == "":
			return errUsage(fmt.Errorf("schedules set: --workflow and --spec are required"))
		case input != "" && !json.Valid([]byte(input)):
			return errUsage(fmt.Errorf("schedules set: --input is not JSON"))
		case backfill < 0:
			return errUsage(fmt.Errorf("schedules set: --backfill must be positive"))
		}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var ss []api.Schedule
	one := func(sc *api.Schedule, err error) error {
		if err == nil {
			ss = []api.Schedule{*sc}
		}
		return err
	}
	switch args[0] {
	case "ls":
		ss, err = c.Schedules(ctx)
	case "show":
		err = one(c.Schedule(ctx, pos[0]))
	case "set":
		set.Name = pos[0]
		if input != "" {
			set.Input = json.RawMessage(input)
		}
		if backfill > 0 {
			set.Backfill = backfill.String()
		}
		err = one(c.SetSchedule(ctx, &set))
	case "pause":
		err = one(c.PauseSchedule(ctx, pos[0]))
	case "resume":
		err = one(c.ResumeSchedule(ctx, pos[0]))
	case "rm":
		if err = c.DeleteSchedule(ctx, pos[0]); err == nil {
			fmt.Fprintf(stdout, "deleted schedule %s\n", pos[0])
			return nil
		}
	}
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tWORKFLOW\tSPEC\tTZ\tOVERLAP\tSTATE\tNEXT\tLAST RUN\tSTARTED\tSKIPPED")
	for _, s := range ss {
		state, next := "active", "-"
		if s.Paused {
			state = "paused"
		}
		if s.NextDue != nil {
			next = s.NextDue.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", s.Name, s.Workflow, s.Spec, or(s.TZ, "UTC"), or(s.Overlap, "skip"), state, next,
			or(s.LastRun, "-"), s.Started, s.Skipped)
	}
	return tw.Flush()
}
