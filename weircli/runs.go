package weircli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/store"
)

const runsUsage = `Usage:
  weir runs ls [--workflow W] [--status S] [--limit N] [--before RUN] [--json]
  weir runs show RUN [--json]          a run, its event log and its streams
  weir runs start WORKFLOW [--input JSON] [--id ID | --idempotency-key KEY] [--wait]
  weir runs cancel RUN
  weir runs fork RUN (--op N | --step NAME) [--id ID] [--input JSON] [--app-version V]
                                                  a new run from a step: the steps before it replay, their output is kept
  weir runs retry RUN [--step NAME]             fork from the step whose failure ended the run (or from NAME)
  weir runs resume RUN                          a failed or cancelled run runs again: its failed step, then the rest
  weir runs migrate --from V1 --to V2 [RUN…]
                                                  move runs in flight to the workers of another application version
  weir runs watch RUN [--interval D]   a run's progress, live: its events as recorded, what it waits on, its end
  weir runs hook TOKEN [--data JSON] [--key KEY] [--close]
                                                  deliver a payload to a run's hook (--close: its last)
  weir runs send RUN TOPIC [--data JSON] [--key KEY]
                                                  send a message to a run (weir.Recv takes it)
  weir runs event RUN KEY [--wait D] [--after SEQ]
                                                  a run event's latest value (weir.SetEvent), or wait for one

Every subcommand takes --url (default $WEIR_URL, else http://127.0.0.1:4437)
and --token (default $WEIR_TOKEN).
`

func runsCmd(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errUsage(fmt.Errorf("runs: want a subcommand: ls, show, start, watch, cancel, fork, retry, resume, migrate, hook, send or event\n\n%s", named(runsUsage, name)))
	}
	switch args[0] {
	case "ls", "list":
		return runsLs(ctx, args[1:], stdout, stderr)
	case "show", "get":
		return runsShow(ctx, args[1:], stdout, stderr)
	case "start":
		return runsStart(ctx, args[1:], stdout, stderr)
	case "cancel":
		return runsCancel(ctx, args[1:], stdout, stderr)
	case "migrate":
		return runsMigrate(ctx, args[1:], stdout, stderr)
	case "fork":
		return runsFork(ctx, args[1:], stdout, stderr)
	case "retry":
		return runsRetry(ctx, args[1:], stdout, stderr)
	case "resume":
		return runsResume(ctx, args[1:], stdout, stderr)
	case "watch":
		return runsWatch(ctx, name, args[1:], stdout, stderr)
	case "hook":
		return runsHook(ctx, args[1:], stdout, stderr)
	case "send":
		return runsSend(ctx, args[1:], stdout, stderr)
	case "event":
		return runsEvent(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, named(runsUsage, name))
		return nil
	}
	return errUsage(fmt.Errorf("runs: unknown subcommand %q\n\n%s", args[0], named(runsUsage, name)))
}

func runsLs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("runs ls", "Usage: weir runs ls [flags]\n\nLists runs, newest first.\n", stderr)
	var cf clientFlags
	cf.register(fs)
	workflow := fs.String("workflow", "", "only runs of this workflow")
	status := fs.String("status", "", "only runs with this status: pending, running, completed, failed, cancelled")
	limit := fs.Int("limit", 20, "at most this many runs (1-1000)")
	before := fs.String("before", "", "only runs older than this run (the cursor printed after a full page)")
	queue := fs.String("queue", "", "only runs started in this queue")
	queued := fs.Bool("queued", false, "only runs still waiting in their queue")
	asJSON := fs.Bool("json", false, "print the page as JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return errUsage(fmt.Errorf("runs ls: unexpected argument %q", pos[0]))
	}
	if *status != "" && !store.RunStatus(*status).Valid() {
		return errUsage(fmt.Errorf("runs ls: --status %q: want pending, running, completed, failed or cancelled", *status))
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	page, err := c.ListRuns(ctx, &client.ListOptions{Workflow: *workflow, Status: store.RunStatus(*status), Before: *before, Limit: *limit,
		Queue: *queue, Queued: *queued})
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, page)
	}
	if len(page.Runs) == 0 {
		fmt.Fprintln(stderr, "no runs")
		return nil
	}
	// A VERSION column when any run of the page has one (versioned
	// deploys: a run waits for a worker of its version).
	versioned := slices.ContainsFunc(page.Runs, func(r client.Run) bool { return r.Version != "" })
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	head := "ID\tKIND\tWORKFLOW\tSTATUS\tCREATED\tUPDATED"
	if versioned {
		head += "\tVERSION"
	}
	fmt.Fprintln(tw, head)
	for _, r := range page.Runs {
		kind := "go"
		if r.Kind != "" {
			kind = r.Kind
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", r.ID, kind, r.Workflow, r.Status, fmtTime(r.CreatedAt), fmtTime(r.UpdatedAt))
		if versioned {
			line += "\t" + or(r.Version, "-")
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.NextCursor != "" {
		fmt.Fprintf(stderr, "more: weir runs ls --before %s\n", page.NextCursor)
	}
	return nil
}

func runsShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("runs show", "Usage: weir runs show RUN [flags]\n\nShows a run, its event log and its streams.\n", stderr)
	var cf clientFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print the run, its events and its streams as JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errUsage(fmt.Errorf("runs show: want one run id"))
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	id := pos[0]
	run, err := c.GetRun(ctx, id)
	if err != nil {
		return err
	}
	if run.Kind == "world" {
		return worldShow(ctx, c, run, *asJSON, stdout)
	}
	events, err := c.Events(ctx, id, 0)
	if err != nil {
		return err
	}
	streams, err := c.Streams(ctx, id)
	if err != nil {
		return err
	}
	hooks, err := c.Hooks(ctx, id)
	if err != nil {
		return err
	}
	state, err := c.State(ctx, id)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, struct {
			Run     *client.Run         `json:"run"`
			Events  []client.Event      `json:"events"`
			Streams []client.StreamInfo `json:"streams"`
			Hooks   []api.Hook          `json:"hooks"`
			State   *api.RunState       `json:"state"`
		}{run, events, streams, hooks, state})
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "run\t%s\n", run.ID)
	fmt.Fprintf(tw, "workflow\t%s\n", run.Workflow)
	if run.Parent != "" {
		fmt.Fprintf(tw, "parent\t%s (weir runs show %s)\n", run.Parent, run.Parent)
	}
	if run.Version != "" {
		fmt.Fprintf(tw, "version\t%s (claimed by workers of that version)\n", run.Version)
	}
	status := string(run.Status)
	if run.CancelRequested && !run.Status.Terminal() {
		status += " (cancel requested)"
	}
	fmt.Fprintf(tw, "status\t%s\n", status)
	if run.Queue != "" {
		q := run.Queue
		var opts []string
		if run.QueueKey != "" {
			opts = append(opts, "key "+run.QueueKey)
		}
		if run.Priority != 0 {
			opts = append(opts, fmt.Sprintf("priority %d", run.Priority))
		}
		if run.Dedupe != "" {
			opts = append(opts, "dedupe "+run.Dedupe)
		}
		if len(opts) > 0 {
			q += " (" + strings.Join(opts, ", ") + ")"
		}
		if run.Queued {
			q += ": queued, not yet admitted"
		}
		fmt.Fprintf(tw, "queue\t%s\n", q)
	}
	if !run.Status.Terminal() {
		// What it waits on now: its queue, a limiter, a hook… (best
		// effort: an older server has no /waiting).
		if w, err := c.Waiting(ctx, id); err == nil && w.Summary != "" {
			fmt.Fprintf(tw, "waiting\t%s\n", w.Summary)
		}
	}
	fmt.Fprintf(tw, "created\t%s\n", fmtTime(run.CreatedAt))
	fmt.Fprintf(tw, "updated\t%s\n", fmtTime(run.UpdatedAt))
	if run.WakeAt != nil {
		fmt.Fprintf(tw, "wakes\t%s\n", fmtTime(*run.WakeAt))
	}
	if len(run.Input) > 0 {
		fmt.Fprintf(tw, "input\t%s\n", oneLine(run.Input))
	}
	if len(run.Output) > 0 {
		fmt.Fprintf(tw, "output\t%s\n", oneLine(run.Output))
	}
	if run.Error != "" {
		fmt.Fprintf(tw, "error\t%s\n", firstLine(run.Error))
	}
	if (run.Status == store.RunFailed || run.Status == store.RunCancelled) && run.Kind == "" {
		fmt.Fprintf(tw, "again\tweir runs resume %s (its failed step again) · weir runs retry %s (a new run from it) · weir runs fork %s --op N\n", run.ID, run.ID, run.ID)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nevents (%d):\n", len(events))
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, ev := range events {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", ev.Seq, ev.At.Local().Format("15:04:05.000"), ev.Type, describeEvent(&ev))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nstreams (%d):\n", len(streams))
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, s := range streams {
		state := "open"
		if s.Closed {
			state = "closed"
		}
		fmt.Fprintf(tw, "  %s\t%d records\t%s\tweir stream cat %s %s\n", s.Name, s.NextOffset, state, run.ID, s.Name)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(hooks) > 0 {
		fmt.Fprintf(stdout, "\nhooks (%d):\n", len(hooks))
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, h := range hooks {
			state := "waiting: weir runs hook " + h.Token + " --data JSON"
			if h.Disposed {
				state = "disposed"
			}
			fmt.Fprintf(tw, "  %s\top %d\t%d received\t%s\n", h.Token, h.Op, h.Received, state)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(state.Messages) > 0 {
		fmt.Fprintf(stdout, "\nmessages (%d topics):\n", len(state.Messages))
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, m := range state.Messages {
			taken := "the run takes them with weir.Recv"
			if m.Taken >= 0 {
				taken = fmt.Sprintf("%d taken, %d left untaken", m.Taken, m.Left)
			}
			fmt.Fprintf(tw, "  %s\t%d received\t%s\n", m.Topic, m.Received, taken)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(state.Events) > 0 {
		fmt.Fprintf(stdout, "\nrun events (%d):\n", len(state.Events))
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, ev := range state.Events {
			value := oneLine(ev.Value)
			if ev.Elided { // over 4 KiB: the state lists its size
				value = fmt.Sprintf("(%d bytes: weir runs event %s %s)", ev.Size, run.ID, ev.Key)
			}
			fmt.Fprintf(tw, "  %s\t%s\tset at event %d, %s\n", ev.Key, value, ev.Seq, ev.At.Local().Format("15:04:05.000"))
		}
		if state.More {
			fmt.Fprintf(tw, "  …\tmore keys after %s (GET /v1/runs/%s/state?after=)\n", state.NextAfter, run.ID)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// worldShow shows a World run: its World event log and its streams.
func worldShow(ctx context.Context, c *client.Client, run *client.Run, asJSON bool, stdout io.Writer) error {
	events, err := c.WorldEvents(ctx, run.ID)
	if err != nil {
		return err
	}
	streams, err := c.Streams(ctx, run.ID)
	if err != nil {
		return err
	}
	// What weir has yet to deliver to the app for this run, and why it
	// could not so far: a run that stays pending says why here.
	pending, err := c.WorldMessages(ctx, "pending", run.ID)
	if err != nil {
		return err
	}
	dead, err := c.WorldMessages(ctx, "dead", run.ID)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, struct {
			Run     *client.Run         `json:"run"`
			Events  []api.WorldEvent    `json:"events"`
			Streams []client.StreamInfo `json:"streams"`
			Pending []api.WorldMessage  `json:"pending"`
			Dead    []api.WorldMessage  `json:"dead"`
		}{run, events, streams, pending, dead})
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "run\t%s (a Vercel Workflow run on weir's World)\n", run.ID)
	fmt.Fprintf(tw, "workflow\t%s\n", run.Workflow)
	fmt.Fprintf(tw, "status\t%s\n", run.Status)
	fmt.Fprintf(tw, "created\t%s\n", fmtTime(run.CreatedAt))
	fmt.Fprintf(tw, "updated\t%s\n", fmtTime(run.UpdatedAt))
	if run.Error != "" {
		fmt.Fprintf(tw, "error\t%s\n", firstLine(run.Error))
	}
	if w := worldWaiting(run, events, pending, dead); w != "" {
		fmt.Fprintf(tw, "waiting\t%s\n", w)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(pending)+len(dead) > 0 {
		fmt.Fprintf(stdout, "\ndeliveries to the app (%d pending, %d dead):\n", len(pending), len(dead))
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, m := range append(pending, dead...) {
			line := fmt.Sprintf("  %s\t%s\t%s\tto %s", m.ID, m.State, m.QueueName, m.Target)
			if m.Failures > 0 {
				line += fmt.Sprintf("\t%d failed, last: %s", m.Failures, firstLine(m.LastError))
			}
			if m.State == "pending" {
				line += "\tnext " + fmtTime(m.DeliverAt)
			}
			fmt.Fprintln(tw, line)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "\nevents (%d):\n", len(events))
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for i, ev := range events {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", i+1, ev.CreatedAt.Local().Format("15:04:05.000"), ev.EventType, ev.CorrelationID)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nstreams (%d):\n", len(streams))
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, s := range streams {
		fmt.Fprintf(tw, "  %s\t%d records\tweir stream cat %s %s\n", s.Name, s.NextOffset, run.ID, s.Name)
	}
	return tw.Flush()
}

// worldWaiting says what a World run that has not ended waits on, when
// weir can tell: a delivery to the app that keeps failing (and the likely
// cause), a dead letter, or nothing queued at all.
func worldWaiting(run *client.Run, events []api.WorldEvent, pending, dead []api.WorldMessage) string {
	switch run.Status {
	case "completed", "failed", "cancelled":
		return ""
	}
	for _, m := range pending {
		if m.Failures > 0 {
			return fmt.Sprintf("weir cannot deliver to the app at %s (%d failed, last: %s): %s", m.Target, m.Failures,
				firstLine(m.LastError), m.Hint)
		}
	}
	if len(dead) > 0 {
		m := dead[0]
		return fmt.Sprintf("a delivery to the app at %s was dead-lettered after %d failures (last: %s): %s; then weir runs redeliver or the UI's button",
			m.Target, m.Failures, firstLine(m.LastError), m.Hint)
	}
	if len(pending) > 0 {
		return fmt.Sprintf("a delivery to the app at %s, due %s", pending[0].Target, fmtTime(pending[0].DeliverAt))
	}
	if run.Status == "pending" && len(events) <= 1 {
		return "no delivery is queued for it: the app's start() created it, but its queue() did not reach weir (the app's log says why)"
	}
	return ""
}

func describeEvent(ev *client.Event) string {
	var parts []string
	if ev.Op > 0 {
		parts = append(parts, fmt.Sprintf("op %d", ev.Op))
	}
	if ev.Name != "" {
		parts = append(parts, fmt.Sprintf("%q", ev.Name))
	}
	if ev.Attempt > 0 {
		parts = append(parts, fmt.Sprintf("attempt %d", ev.Attempt))
	}
	if ev.Final {
		parts = append(parts, "final")
	}
	if ev.WakeAt != nil {
		parts = append(parts, "until "+fmtTime(*ev.WakeAt))
	}
	if ev.Error != "" {
		parts = append(parts, "error: "+firstLine(ev.Error))
	}
	if len(ev.Data) > 0 {
		parts = append(parts, "-> "+oneLine(ev.Data))
	}
	return strings.Join(parts, " ")
}

func runsStart(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("runs start", "Usage: weir runs start WORKFLOW [flags]\n\nStarts a run and prints its id.\n", stderr)
	var cf clientFlags
	cf.register(fs)
	input := fs.String("input", "", "the run's input, as JSON")
	id := fs.String("id", "", "the run's id (an existing run with it is returned instead)")
	key := fs.String("idempotency-key", "", "an Idempotency-Key: the same key returns the same run")
	wait := fs.Bool("wait", false, "wait for the run to end and print its output")
	queue := fs.String("queue", "", "the queue (a limiter: weir limiters set) the run waits in before it starts")
	queueKey := fs.String("queue-key", "", "the run's group in its queue (a tenant): its share and its per-key bound")
	priority := fs.Int("priority", 0, "the run's priority in its queue: higher starts first")
	dedupe := fs.String("dedupe", "", "fold this start into the queue's queued or running run with this key")
	debounce := fs.Duration("debounce", 0, "with --dedupe: start the run this long after the latest start of its key, with its input")
	debounceMax := fs.Duration("debounce-max", 0, "with --debounce: start the run at the latest this long after the first start of its key, however many follow")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errUsage(fmt.Errorf("runs start: want one workflow name"))
	}
	if *queue == "" && (*queueKey != "" || *priority != 0 || *dedupe != "" || *debounce != 0 || *debounceMax != 0) {
		return errUsage(fmt.Errorf("runs start: --queue-key, --priority, --dedupe, --debounce and --debounce-max need --queue"))
	}
	var in any
	if *input != "" {
		if !json.Valid([]byte(*input)) {
			return errUsage(fmt.Errorf("runs start: --input is not valid JSON"))
		}
		in = json.RawMessage(*input)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	run, created, err := c.Start(ctx, pos[0], in, &client.StartOptions{ID: *id, IdempotencyKey: *key,
		Queue: *queue, QueueKey: *queueKey, Priority: *priority, Dedupe: *dedupe, Debounce: *debounce, DebounceMax: *debounceMax})
	if err != nil {
		return err
	}
	switch {
	case !created && *dedupe != "" && run.ID != *id:
		fmt.Fprintf(stderr, "folded into run %s (dedupe key %q)\n", run.ID, *dedupe)
	case !created:
		fmt.Fprintf(stderr, "run %s existed already\n", run.ID)
	case run.Queued:
		fmt.Fprintf(stderr, "run %s waits in queue %q\n", run.ID, run.Queue)
	}
	fmt.Fprintln(stdout, run.ID)
	if !*wait {
		return nil
	}
	run, err = c.Wait(ctx, run.ID)
	if err != nil {
		return err
	}
	switch run.Status {
	case store.RunCompleted:
		fmt.Fprintln(stdout, oneLine(run.Output))
		return nil
	default:
		return fmt.Errorf("run %s %s: %s", run.ID, run.Status, firstLine(run.Error))
	}
}

func runsCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("runs cancel", "Usage: weir runs cancel RUN [flags]\n\nAsks for a run to be cancelled.\n", stderr)
	var cf clientFlags
	cf.register(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errUsage(fmt.Errorf("runs cancel: want one run id"))
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	run, err := c.Cancel(ctx, pos[0])
	if err != nil {
		return err
	}
	if run.Status.Terminal() {
		fmt.Fprintf(stdout, "run %s is %s already: nothing to cancel\n", run.ID, run.Status)
		return nil
	}
	fmt.Fprintf(stdout, "run %s: cancel requested\n", run.ID)
	return nil
}

func runsHook(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("runs hook", "Usage: weir runs hook TOKEN [flags]\n\nDelivers a payload (JSON) to the hook holding TOKEN; the run waiting on it resumes.\n", stderr)
	var cf clientFlags
	cf.register(fs)
	data := fs.String("data", "null", "the payload, JSON")
	key := fs.String("key", "", "an idempotency key: the same delivery sent again adds nothing")
	closing := fs.Bool("close", false, "close the hook with this payload (the last one); without --data, close it alone")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errUsage(fmt.Errorf("runs hook: want one hook token"))
	}
	if !json.Valid([]byte(*data)) {
		return errUsage(fmt.Errorf("runs hook: --data %q is not JSON", *data))
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	payload := json.RawMessage(*data)
	dataSet := false
	fs.Visit(func(f *flag.Flag) { dataSet = dataSet || f.Name == "data" })
	if *closing && !dataSet {
		payload = nil
	}
	res, err := c.DeliverHook(ctx, pos[0], payload, &client.DeliverOptions{IdempotencyKey: *key, Close: *closing})
	if err != nil {
		return err
	}
	note := ""
	if res.Duplicate {
		note = " (sent before: nothing added)"
	}
	switch {
	case res.Closed && payload == nil:
		fmt.Fprintf(stdout, "run %s: hook %s closed after %d payloads, event %d%s\n", res.RunID, pos[0], res.Count, res.Seq, note)
	case res.Closed:
		fmt.Fprintf(stdout, "run %s: payload %d of hook %s, its last (the hook is closed), event %d%s\n", res.RunID, res.Count, pos[0], res.Seq, note)
	default:
		fmt.Fprintf(stdout, "run %s: payload %d of hook %s, event %d%s\n", res.RunID, res.Count, pos[0], res.Seq, note)
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// oneLine shortens a JSON value for a table.
func oneLine(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

func runsSend(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("runs send", "Usage: weir runs send RUN TOPIC [flags]\n\nSends a message (JSON) to a run on a topic: it is kept in the run's log until the run takes it (weir.Recv).\n", stderr)
	var cf clientFlags
	cf.register(fs)
	data := fs.String("data", "null", "the message, JSON")
	key := fs.String("key", "", "an idempotency key: the same message sent again adds nothing")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return errUsage(fmt.Errorf("runs send: want a run id and a topic"))
	}
	if !json.Valid([]byte(*data)) {
		return errUsage(fmt.Errorf("runs send: --data %q is not JSON", *data))
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	res, err := c.SendMessage(ctx, pos[0], pos[1], json.RawMessage(*data), &client.SendOptions{IdempotencyKey: *key})
	if err != nil {
		return err
	}
	note := ""
	if res.Duplicate {
		note = " (sent before: nothing added)"
	}
	fmt.Fprintf(stdout, "run %s: message on %q, event %d%s\n", res.RunID, res.Topic, res.Seq, note)
	return nil
}

func runsEvent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("runs event", "Usage: weir runs event RUN KEY [flags]\n\nPrints the latest value a run set for KEY (weir.SetEvent), or waits for one.\n", stderr)
	var cf clientFlags
	cf.register(fs)
	wait := fs.Duration("wait", 0, "wait up to this long (at most 60s) for a value newer than --after")
	after := fs.Int64("after", 0, "with --wait: the event seq of the value you have")
	asJSON := fs.Bool("json", false, "print the value with its seq and time as JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return errUsage(fmt.Errorf("runs event: want a run id and a key"))
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	ev, err := c.GetEvent(ctx, pos[0], pos[1], &client.EventOptions{Wait: *wait, After: *after})
	if err != nil {
		return err
	}
	if ev == nil {
		return fmt.Errorf("runs event: run %s set no newer %q within %v", pos[0], pos[1], *wait)
	}
	if *asJSON {
		return printJSON(stdout, ev)
	}
	fmt.Fprintf(stdout, "%s\n", ev.Value)
	return nil
}

func runsMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("runs migrate", fmt.Sprintf(`Usage: weir runs migrate --from V1 --to V2 [RUN…] [flags]

Moves the runs in flight (pending or running) of application version V1, or
only the RUNs named, to version V2, so that V2's workers claim them. Prints
their ids (the first %d by id) and how many moved. Do it knowingly: their
logs were written by V1's code, which V2's must replay (weir.Patched keeps
both paths). "" is the version of runs started by unversioned code.
`, api.MaxMigratedListed), stderr)
	var cf clientFlags
	cf.register(fs)
	from := fs.String("from", "", "the version the runs started on")
	to := fs.String("to", "", "the version to move them to")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if *from == *to {
		return errUsage(fmt.Errorf("runs migrate: --from and --to name the same version %q", *from))
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	m, err := c.MigrateRuns(ctx, *from, *to, pos...)
	if err != nil {
		return err
	}
	for _, id := range m.Migrated {
		fmt.Fprintln(stdout, id)
	}
	fmt.Fprintf(stderr, "%d run(s) moved from version %q to %q\n", m.Count, *from, *to)
	if m.More {
		fmt.Fprintf(stderr, "(the first %d listed; the others moved too)\n", len(m.Migrated))
	}
	return nil
}

func runsFork(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("runs fork", `Usage: weir runs fork RUN (--op N | --step NAME) [flags]

Starts a new run from RUN's operation N (as 'weir runs show' numbers them)
or its first step named NAME: the operations before it replay their
recorded outcomes without running, and the new run's streams begin with
their committed output; the rest runs with the code of the fork's version.
RUN itself does not change. Prints the new run's id.
`, stderr)
	var cf clientFlags
	cf.register(fs)
	op := fs.Int64("op", 0, "the first operation to run again (1-based)")
	step := fs.String("step", "", "the first step of this name is the fork point")
	id := fs.String("id", "", "the fork's id (default: a random one; the same id and point again is the same fork)")
	input := fs.String("input", "", "the fork's input, JSON (default: RUN's)")
	version := fs.String("app-version", "", "the application version the fork starts on (default: RUN's)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errUsage(fmt.Errorf("runs fork: want one run id"))
	}
	if (*op > 0) == (*step != "") {
		return errUsage(fmt.Errorf("runs fork: want --op or --step, one of them"))
	}
	o := client.ForkOptions{ID: *id, Op: *op, Step: *step, Version: *version}
	if *input != "" {
		if !json.Valid([]byte(*input)) {
			return errUsage(fmt.Errorf("runs fork: --input is not JSON"))
		}
		o.Input = json.RawMessage(*input)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	run, err := c.Fork(ctx, pos[0], o)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, run.ID)
	return nil
}

func runsRetry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("runs retry", `Usage: weir runs retry RUN [--step NAME] [flags]

Forks RUN from the step whose failure ended it (or from its first step
named NAME): a new run that replays the steps before it and runs it and
the rest again. Prints the new run's id.
`, stderr)
	var cf clientFlags
	cf.register(fs)
	step := fs.String("step", "", "the step to retry from (default: the one that failed the run)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errUsage(fmt.Errorf("runs retry: want one run id"))
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	run, err := c.RetryFrom(ctx, pos[0], *step)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, run.ID)
	return nil
}

func runsResume(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("runs resume", `Usage: weir runs resume RUN [flags]

Makes a failed or cancelled run run again, with its id and history: the
steps whose failures ended it run again under their retry policies, the
others replay. Its streams reopen (docs/semantics.md).
`, stderr)
	var cf clientFlags
	cf.register(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errUsage(fmt.Errorf("runs resume: want one run id"))
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	run, err := c.Resume(ctx, pos[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "run %s resumed: %s\n", run.ID, run.Status)
	return nil
}
