package weircli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/weirhq/weir/api"
)

const limitersUsage = `Usage:
  weir limiters ls
  weir limiters show NAME
  weir limiters set NAME [--concurrency N] [--per-key N] [--rate N] [--budget N] [--period D]
  weir limiters rm NAME

A limiter bounds the steps that take its slots (weir.WithLimiter) and the
runs started in it as a queue (weir runs start --queue): how many run at
once (--concurrency), how many of one key (a tenant) at once (--per-key),
how many start per period (--rate), and how
much cost they may charge per period (--budget: the tokens a step reports
with weir.ChargeLimiter). On PostgreSQL every process keeps to it; a change
applies to the next step of every process. ls and show print each one's
bounds and what it holds now: slots held, steps in line, slots taken and
cost charged in its window, runs queued. rm deletes a limiter nothing uses
(no slot held, no one in line, no run queued in it); steps that name it
afterwards fail as for a limiter never set. A store keeps at most 10,000.

Every subcommand takes --url (default $WEIR_URL, else http://127.0.0.1:4437)
and --token (default $WEIR_TOKEN).
`

func limitersCmd(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errUsage(fmt.Errorf("limiters: want a subcommand: ls, show or set\n\n%s", named(limitersUsage, name)))
	}
	fs := newFlagSet("limiters "+args[0], limitersUsage, stderr)
	var cf clientFlags
	cf.register(fs)
	var set api.Limiter
	var period time.Duration
	if args[0] == "set" {
		fs.IntVar(&set.Concurrency, "concurrency", 0, "steps holding a slot at once (0: no bound)")
		fs.IntVar(&set.PerKey, "per-key", 0, "slots one key (a tenant) holds at once (0: no bound)")
		fs.IntVar(&set.Rate, "rate", 0, "slots taken per period (0: no bound)")
		fs.Int64Var(&set.Budget, "budget", 0, "cost charged per period (0: no bound)")
		fs.DurationVar(&period, "period", 0, "the window of --rate and --budget")
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, named(limitersUsage, name))
		return nil
	case "ls", "show", "set", "rm":
	default:
		return errUsage(fmt.Errorf("limiters: unknown subcommand %q\n\n%s", args[0], named(limitersUsage, name)))
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
		return errUsage(fmt.Errorf("limiters %s: want %d argument(s), got %d", args[0], want, len(pos)))
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var ls []api.Limiter
	switch args[0] {
	case "rm":
		if err := c.DeleteLimiter(ctx, pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "limiter %s deleted\n", pos[0])
		return nil
	case "ls":
		ls, err = c.Limiters(ctx)
	case "show":
		var l *api.Limiter
		if l, err = c.Limiter(ctx, pos[0]); err == nil {
			ls = []api.Limiter{*l}
		}
	case "set":
		if period < 0 {
			return errUsage(errors.New("limiters set: --period must be positive"))
		}
		set.Name = pos[0]
		if period > 0 {
			set.Period = period.String()
		}
		var l *api.Limiter
		if l, err = c.SetLimiter(ctx, &set); err == nil {
			ls = []api.Limiter{*l}
		}
	}
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCONCURRENCY\tPER-KEY\tRATE\tBUDGET\tPERIOD\tHELD\tWAITING\tQUEUED\tTAKEN\tSPENT")
	for _, l := range ls {
		st := api.LimiterState{}
		if l.State != nil {
			st = *l.State
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", l.Name, bound(int64(l.Concurrency)), bound(int64(l.PerKey)), bound(int64(l.Rate)), bound(l.Budget),
			or(l.Period, "-"), st.Held, st.Waiting, st.Queued, st.Taken, st.Spent)
	}
	return tw.Flush()
}

func bound(n int64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
