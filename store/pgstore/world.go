package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
	"github.com/weirhq/weir/world"
)

// The World (store.WorldStore). A World event is an op of the group commit
// like an append: its plan locks the event's run and the run's streams with
// the others' (run first, then streams, in id order), and its first round
// trip also reads the World entities the event's rules load; the rules run
// in memory (apply.WorldEvent on the group, which is also an
// apply.WorldTx); the entities' rows are written in the second round trip.
// An op after another in the same group sees what the first saved.

var (
	_ store.WorldStore = (*Store)(nil)
	_ apply.WorldTx    = (*group)(nil)
)

// worldGroup is a group's World state: what its first round trip read,
// overlaid with what its ops saved, and the statements that save it.
type worldGroup struct {
	runs    map[string]*world.Run // nil value: read, none
	steps   map[[2]string]*world.Step
	hooks   map[string]*world.Hook // live, by id; nil value: none
	tokens  map[string]*world.Hook // live, by token
	waits   map[[2]string]*world.Wait
	names   map[string]map[string]int64 // run -> World stream name -> stream id
	stmts   []queuedStmt
	applied map[int64]bool // prevTokens found on their run's events
}

type queuedStmt struct {
	sql  string
	args []any
}

func (g *group) world() *worldGroup {
	if g.w == nil {
		g.w = &worldGroup{runs: map[string]*world.Run{}, steps: map[[2]string]*world.Step{},
			hooks: map[string]*world.Hook{}, tokens: map[string]*world.Hook{}, waits: map[[2]string]*world.Wait{},
			names: map[string]map[string]int64{}, applied: map[int64]bool{}}
	}
	return g.w
}

func (w *worldGroup) exec(sql string, args ...any) {
	w.stmts = append(w.stmts, queuedStmt{sql, args})
}

// worldReads is what a World op reads in the first round trip.
type worldReads struct {
	run, step, hook, token, wait string
	names                        bool  // the run's World streams
	prevToken                    int64 // a lost try's token, to look for
}

// queueWorldReads queues the World reads of the group's ops.
func (g *group) queueWorldReads(b *pgx.Batch, reads []worldReads) {
	w, q := g.world(), g.s.q
	seen := map[string]bool{}
	once := func(k string) bool {
		if seen[k] {
			return false
		}
		seen[k] = true
		return true
	}
	for _, r := range reads {
		if r.run != "" && once("r\x00"+r.run) {
			id := r.run
			w.runs[id] = nil
			// The run's head: its data is read after the commit, for a
			// reply that carries it (Store.worldReplyData), not in the
			// group, for every event of the run (red team, round
			// nineteen audit).
			b.Queue(q.worldRunHead, id).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					run, err := sqlrow.ScanWorldRunHead(rows)
					if err != nil {
						return err
					}
					w.runs[id] = run
				}
				return rows.Err()
			})
		}
		if r.step != "" && once("s\x00"+r.run+"\x00"+r.step) {
			k := [2]string{r.run, r.step}
			b.Queue(q.worldStepOf, r.run, r.step).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					st, err := sqlrow.ScanWorldStep(rows)
					if err != nil {
						return err
					}
					w.steps[k] = st
				}
				return rows.Err()
			})
		}
		readHook := func(sql, arg string) {
			b.Queue(sql, arg).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					h, err := sqlrow.ScanWorldHook(rows)
					if err != nil {
						return err
					}
					w.hooks[h.HookID], w.tokens[h.Token] = h, h
				}
				return rows.Err()
			})
		}
		if r.hook != "" && once("h\x00"+r.hook) {
			readHook(q.worldHook, r.hook)
		}
		if r.token != "" && once("t\x00"+r.token) {
			readHook(q.worldHookByToken, r.token)
		}
		if r.wait != "" && once("w\x00"+r.run+"\x00"+r.wait) {
			k := [2]string{r.run, r.wait}
			b.Queue(q.worldWait, r.run, r.wait).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					wt, err := sqlrow.ScanWorldWait(rows)
					if err != nil {
						return err
					}
					w.waits[k] = wt
				}
				return rows.Err()
			})
		}
		if r.names && once("n\x00"+r.run) {
			run := r.run
			w.names[run] = map[string]int64{}
			b.Queue(q.worldStreamsOf, run).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var name string
					var id int64
					if err := rows.Scan(&name, &id); err != nil {
						return err
					}
					w.names[run][name] = id
				}
				return rows.Err()
			})
		}
		if r.prevToken != 0 {
			tok := r.prevToken
			b.Queue(q.worldTokenSeen, r.run, tok).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					w.applied[tok] = true
				}
				return rows.Err()
			})
		}
	}
}

// The group's apply.WorldTx.

// WorldRun returns a World run read for the group, or saved by it.
func (g *group) WorldRun(id string) (*world.Run, error) { return g.world().runs[id], nil }

// WorldStep returns a step read for the group, or saved by it.
func (g *group) WorldStep(runID, stepID string) (*world.Step, error) {
	return g.world().steps[[2]string{runID, stepID}], nil
}

// WorldHook returns a live hook read for the group, or saved by it.
func (g *group) WorldHook(hookID string) (*world.Hook, error) { return g.world().hooks[hookID], nil }

// WorldHookByToken returns the live hook with token.
func (g *group) WorldHookByToken(token string) (*world.Hook, error) {
	return g.world().tokens[token], nil
}

// WorldWait returns a wait read for the group, or saved by it.
func (g *group) WorldWait(runID, waitID string) (*world.Wait, error) {
	return g.world().waits[[2]string{runID, waitID}], nil
}

// WorldRunStream returns run's World stream name, locked.
func (g *group) WorldRunStream(runID, name string) (*apply.Stream, error) {
	id, ok := g.world().names[runID][name]
	if !ok {
		return nil, nil
	}
	return g.Stream(id)
}

// SaveWorldRun saves a World run and its runs row (apply.WorldTx).
func (g *group) SaveWorldRun(r *world.Run, created, output bool) error {
	w, q := g.world(), g.s.q
	w.runs[r.RunID] = r
	errMsg := ""
	if r.Error != nil {
		errMsg = r.Error.Message
	}
	if created {
		w.exec(q.worldInsertRun, r.RunID, r.WorkflowName, string(r.Status), []byte(r.Input), []byte(r.Output), errMsg,
			sqlrow.Nanos(r.CreatedAt), sqlrow.Nanos(r.UpdatedAt))
		w.exec(q.worldInsertRunRow, r.RunID, r.DeploymentID, r.SpecVersion, []byte(r.ExecutionContext),
			sqlrow.EncodeError(r.Error), sqlrow.PtrNanos(r.StartedAt), sqlrow.PtrNanos(r.CompletedAt), r.Events)
		return nil
	}
	w.exec(q.worldUpdateRun, r.RunID, string(r.Status), []byte(r.Output), errMsg, sqlrow.Nanos(r.UpdatedAt), r.Status.Terminal(), output)
	w.exec(q.worldUpdateRunRow, r.RunID, sqlrow.EncodeError(r.Error), sqlrow.PtrNanos(r.StartedAt),
		sqlrow.PtrNanos(r.CompletedAt), r.Events)
	return nil
}

// SaveWorldStep saves a step.
func (g *group) SaveWorldStep(s *world.Step, created bool) error {
	w, q := g.world(), g.s.q
	w.steps[[2]string{s.RunID, s.StepID}] = s
	sql := q.worldUpdateStep
	if created {
		sql = q.worldInsertStep
	}
	w.exec(sql, s.RunID, s.StepID, s.StepName, string(s.Status), []byte(s.Input), []byte(s.Output),
		sqlrow.EncodeError(s.Error), s.Attempt, sqlrow.PtrNanos(s.StartedAt), sqlrow.PtrNanos(s.CompletedAt),
		sqlrow.Nanos(s.CreatedAt), sqlrow.Nanos(s.UpdatedAt), sqlrow.PtrNanos(s.RetryAfter), s.SpecVersion,
		sqlrow.EncodeCloses(s.Closes))
	return nil
}

// SaveWorldHook creates a hook.
func (g *group) SaveWorldHook(h *world.Hook) error {
	w := g.world()
	w.hooks[h.HookID], w.tokens[h.Token] = h, h
	w.exec(g.s.q.worldInsertHook, h.HookID, h.RunID, h.Token, []byte(h.Metadata), h.IsWebhook, h.SpecVersion,
		sqlrow.Nanos(h.CreatedAt))
	return nil
}

// DisposeWorldHooks disposes one hook, or all of a run's.
func (g *group) DisposeWorldHooks(runID, hookID string) error {
	w := g.world()
	for id, h := range w.hooks {
		if h != nil && h.RunID == runID && (hookID == "" || id == hookID) {
			w.hooks[id] = nil
			delete(w.tokens, h.Token)
		}
	}
	if hookID != "" {
		w.exec(g.s.q.worldDisposeHook, runID, hookID)
	} else {
		w.exec(g.s.q.worldDisposeHooks, runID)
	}
	return nil
}

// SaveWorldWait saves a wait.
func (g *group) SaveWorldWait(wt *world.Wait, created bool) error {
	w, q := g.world(), g.s.q
	w.waits[[2]string{wt.RunID, wt.WaitID}] = wt
	if created {
		w.exec(q.worldInsertWait, wt.RunID, wt.WaitID, wt.Status, sqlrow.PtrNanos(wt.ResumeAt),
			sqlrow.PtrNanos(wt.CompletedAt), sqlrow.Nanos(wt.CreatedAt), sqlrow.Nanos(wt.UpdatedAt), wt.SpecVersion)
		return nil
	}
	w.exec(q.worldUpdateWait, wt.RunID, wt.WaitID, wt.Status, sqlrow.PtrNanos(wt.CompletedAt), sqlrow.Nanos(wt.UpdatedAt))
	return nil
}

// DeleteWorldWaits removes a run's waits.
func (g *group) DeleteWorldWaits(runID string) error {
	w := g.world()
	for k := range w.waits {
		if k[0] == runID {
			w.waits[k] = nil
		}
	}
	w.exec(g.s.q.worldDeleteWaits, runID)
	return nil
}

// AddWorldEvents appends events, with the group's token.
func (g *group) AddWorldEvents(evs []world.Event) error {
	w := g.world()
	for i := range evs {
		e := &evs[i]
		w.exec(g.s.q.worldInsertEvent, e.RunID, e.Slot, e.EventID, string(e.EventType), e.CorrelationID,
			[]byte(e.EventData), e.SpecVersion, sqlrow.Nanos(e.CreatedAt), g.token)
	}
	return nil
}

// worldEventOp is a WorldEvent. A retry after a lost commit reply looks for
// its last try's token on the run's events: found, that try committed, and
// its result is returned instead of applying the event twice.
type worldEventOp struct {
	opBase
	p    *store.WorldEventParams // with Now, and a run_created's RunID minted
	ids  world.IDs
	res  *store.WorldEventResult
	prev *store.WorldEventResult
}

func (o *worldEventOp) plan(g *group, r *readPlan) {
	req := &o.p.Request
	run := req.RunID
	wr := worldReads{run: run, prevToken: o.prevToken}
	r.Runs = append(r.Runs, run)
	switch req.Type {
	case world.StepCreated, world.StepStarted, world.StepCompleted, world.StepFailed, world.StepRetrying:
		writer := world.StepWriter(req.CorrelationID)
		wr.step, wr.names = req.CorrelationID, true
		r.RunStreams = append(r.RunStreams, run)
		r.RunWriters = append(r.RunWriters, apply.RunWriter{Run: run, Writer: writer})
		r.Fences = append(r.Fences, apply.RunWriter{Run: run, Writer: writer})
	case world.HookCreated, world.HookReceived, world.HookDisposed:
		wr.hook = req.CorrelationID
		if req.Type == world.HookCreated {
			var v struct {
				Token string `json:"token"`
			}
			_ = json.Unmarshal(req.Data, &v)
			wr.token = v.Token
		}
	case world.WaitCreated, world.WaitCompleted:
		wr.wait = world.WaitID(run, req.CorrelationID)
	}
	r.world = append(r.world, wr)
}

func (o *worldEventOp) apply(g *group) error {
	if o.prevToken != 0 && o.prev != nil && g.world().applied[o.prevToken] {
		o.res = o.prev // the lost try committed
		return nil
	}
	var err error
	o.res, err = apply.WorldEvent(g, o.p, o.ids)
	return err
}

func (o *worldEventOp) size() int { return 512 + len(o.p.Request.Data) }

func (o *worldEventOp) clear(keep bool) {
	if keep {
		o.prev = o.res
	}
	o.res = nil
}

// worldCloseOp is a WorldCloseStream: closing twice writes nothing, and
// noting a close for the commit twice notes it once, so a retry needs no
// token.
type worldCloseOp struct {
	opBase
	p      *store.WorldCloseParams
	closed bool
}

func (o *worldCloseOp) plan(g *group, r *readPlan) {
	p := o.p
	r.Runs = append(r.Runs, p.RunID)
	r.RunStreams = append(r.RunStreams, p.RunID)
	r.world = append(r.world, worldReads{run: p.RunID, step: p.StepID, names: true})
}

func (o *worldCloseOp) apply(g *group) error {
	var err error
	o.closed, err = apply.WorldClose(g, o.p)
	return err
}

func (o *worldCloseOp) size() int  { return 256 }
func (o *worldCloseOp) clear(bool) { o.closed = false }

// WorldEvent applies one World event (apply.WorldEvent) in a group.
func (s *Store) WorldEvent(ctx context.Context, p *store.WorldEventParams) (*store.WorldEventResult, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("world event: %w", err)
	}
	q := *p
	if q.Now.IsZero() {
		q.Now = s.cfg.Now()
	}
	if q.Request.Type == world.RunCreated && q.Request.RunID == "" {
		q.Request.RunID = s.ids.New("wrun") // minted once: a retry keeps it
	}
	// Two processes creating the same run, hook token or step at once: the
	// second insert's unique violation is a conflict the next try's reads
	// see (a hook_conflict event, a 409).
	for n := 0; ; n++ {
		o := &worldEventOp{p: &q, ids: &s.ids}
		err := s.exec(ctx, o)
		if err == nil {
			res := *o.res
			if res.Run, err = s.worldReplyData(ctx, res.Run); err != nil {
				return nil, fmt.Errorf("world event: %w", err)
			}
			return &res, nil
		}
		if n < 2 && uniqueViolation(err) {
			continue
		}
		if uniqueViolation(err) {
			err = fmt.Errorf("%w: %v", world.ErrConflict, err)
		}
		return nil, fmt.Errorf("world event: %w", err)
	}
}

// worldReplyData reads the data of a World event's reply run, read as a
// head in the group, after the commit (apply.WorldReplyData).
func (s *Store) worldReplyData(ctx context.Context, run *world.Run) (*world.Run, error) {
	if run == nil || !run.Head {
		return run, nil
	}
	var status string
	var input, output []byte
	err := s.do(ctx, true, func(ctx context.Context, _ *try) error {
		err := s.pool.QueryRow(ctx, s.q.worldReplyData, run.RunID, sqlrow.Nanos(run.CreatedAt)).Scan(&status, &input, &output)
		if errors.Is(err, pgx.ErrNoRows) {
			input, err = nil, nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return apply.WorldReplyData(run, input, output, world.Status(status)), nil
}

func uniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// WorldCloseStream closes a World stream (apply.WorldClose).
func (s *Store) WorldCloseStream(ctx context.Context, p *store.WorldCloseParams) (bool, error) {
	o := &worldCloseOp{p: p}
	if err := s.exec(ctx, o); err != nil {
		return false, fmt.Errorf("close world stream: %w", err)
	}
	return o.closed, nil
}

// WorldOpenStream returns (creating) World stream name of runID, in one
// transaction that locks the run first, as a World event does: an event
// that commits after it sees the stream.
func (s *Store) WorldOpenStream(ctx context.Context, runID, name string) (*store.StreamInfo, error) {
	if err := world.StreamName(name); err != nil {
		return nil, fmt.Errorf("open world stream: %w", err)
	}
	if si, err := s.WorldStream(ctx, name); err == nil {
		if si.RunID != runID {
			return nil, fmt.Errorf("open world stream: %w: stream %q is another run's", world.ErrConflict, name)
		}
		return si, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	path := store.RunStreamPath(runID, name)
	var si *store.StreamInfo
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		x, err := s.acquire(ctx, t)
		if err != nil {
			return err
		}
		defer x.release()
		c := x.c
		if _, err := c.Exec(ctx, "BEGIN"); err != nil {
			return err
		}
		var kind string
		if err := c.QueryRow(ctx, s.q.worldLockRun, runID).Scan(&kind); errors.Is(err, pgx.ErrNoRows) || err == nil && kind != store.KindWorld {
			return fmt.Errorf("%w: %q", world.ErrRunNotFound, runID)
		} else if err != nil {
			return err
		}
		var n int
		if err := c.QueryRow(ctx, s.q.worldStreamCount, runID).Scan(&n); err != nil {
			return err
		}
		if err := store.CheckWorldStreamCount(runID, n); err != nil {
			return err
		}
		now := sqlrow.Nanos(s.cfg.Now())
		if _, err := c.Exec(ctx, s.q.worldInsertStream, path, runID, name, store.DefaultContentType, now); err != nil {
			return err
		}
		if si, err = sqlrow.ScanStream(c.QueryRow(ctx, s.q.worldStreamByPath, path)); err != nil {
			return err
		}
		var owner string
		if err := c.QueryRow(ctx, s.q.worldClaimName, name, runID, si.ID).Scan(&owner); err != nil {
			return err
		}
		if owner != runID {
			return fmt.Errorf("%w: stream %q is another run's", world.ErrConflict, name)
		}
		b := &pgx.Batch{}
		b.Queue("COMMIT")
		return x.commit(ctx, b)
	})
	if err != nil {
		return nil, fmt.Errorf("open world stream: %w", err)
	}
	s.setStreamRun(si.ID, runID)
	// A reader waiting for the run's stream (store.RunWatcher), in this
	// process or another, looks again, as for any run stream created: it
	// waited for its fallback poll (1 s) before.
	s.wakeRuns([]string{runID})
	return si, nil
}

// WorldStream returns the stream a World stream name names.
func (s *Store) WorldStream(ctx context.Context, name string) (*store.StreamInfo, error) {
	var si *store.StreamInfo
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		var err error
		si, err = sqlrow.ScanStream(s.pool.QueryRow(ctx, s.q.worldStream, name))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("world stream %q: %w", name, err)
	}
	return si, nil
}

// WorldStreams lists the names of a run's World streams.
func (s *Store) WorldStreams(ctx context.Context, runID string) ([]string, error) {
	var out []string
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		rows, err := s.pool.Query(ctx, s.q.worldStreamNames, runID)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("world streams: %w", err)
	}
	return out, nil
}

// query runs one read with the store's retries and scans each row.
func query[T any](ctx context.Context, s *Store, sql string, args []any, scan func(pgx.Rows) (T, error)) ([]T, error) {
	var out []T
	err := s.do(ctx, true, func(ctx context.Context, t *try) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			v, err := scan(rows)
			if err != nil {
				return err
			}
			out = append(out, v)
		}
		return rows.Err()
	})
	return out, err
}

// one runs a read of at most one row; notFound is its error for none.
func one[T any](ctx context.Context, s *Store, notFound error, sql string, args []any, scan func(pgx.Rows) (*T, error)) (*T, error) {
	out, err := query(ctx, s, sql, args, scan)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, notFound
	}
	return out[0], nil
}

func scanOf[T any](f func(sqlrow.Scanner) (*T, error)) func(pgx.Rows) (*T, error) {
	return func(r pgx.Rows) (*T, error) { return f(r) }
}

// WorldRun returns a World run.
func (s *Store) WorldRun(ctx context.Context, id string) (*world.Run, error) {
	r, err := one(ctx, s, fmt.Errorf("%w: %q", world.ErrRunNotFound, id), s.q.worldRun, []any{id}, scanOf(sqlrow.ScanWorldRun))
	if err != nil {
		return nil, fmt.Errorf("world run: %w", err)
	}
	return r, nil
}

// WorldRunHead returns a World run without its input and output.
func (s *Store) WorldRunHead(ctx context.Context, id string) (*world.Run, error) {
	r, err := one(ctx, s, fmt.Errorf("%w: %q", world.ErrRunNotFound, id), s.q.worldRunHead, []any{id}, scanOf(sqlrow.ScanWorldRunHead))
	if err != nil {
		return nil, fmt.Errorf("world run: %w", err)
	}
	return r, nil
}

// page runs a paged list: rows ordered by an integer key k (the first
// column), the cursor the last key seen. where holds the filter, with
// placeholders from $1 (args); the key's bound and the limit follow.
func page[T any](ctx context.Context, s *Store, cols, from, where string, args []any, p *store.WorldListParams,
	scan func(sqlrow.Scanner) (*T, error)) (*store.WorldPage[T], error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	p = p.WithDefaults()
	cursor, err := parseCursor(p.Cursor)
	if err != nil {
		return nil, err
	}
	op, order := ">", "ASC"
	if p.Desc {
		op, order = "<", "DESC"
	}
	n := len(args)
	sql := `SELECT k, ` + cols + ` FROM (SELECT ` + from + ` WHERE ` + where + `) x`
	if cursor != 0 {
		sql += fmt.Sprintf(` WHERE k %s $%d`, op, n+1)
		args = append(args, cursor)
		n++
	}
	sql += fmt.Sprintf(` ORDER BY k %s LIMIT $%d`, order, n+1)
	args = append(args, p.Limit+1)
	type kv struct {
		k int64
		v *T
	}
	// The rows are read one by one and the page ends before the one that
	// would pass MaxWorldPageBytes: what a page holds is bounded, not the
	// rows the limit allows.
	bytes := 0
	var attempt pgx.Rows // a retry reads afresh: its bytes count from 0
	rows, err := query(ctx, s, sql, args, func(r pgx.Rows) (kv, error) {
		if r != attempt {
			attempt, bytes = r, 0
		}
		var k int64
		v, err := scan(prefixed{r, &k})
		if err != nil {
			return kv{}, err
		}
		n := store.WorldItemBytes(v)
		if bytes > 0 && bytes+n > store.MaxWorldPageBytes {
			return kv{}, errPageFull
		}
		if p.Reserve != nil {
			if err := p.Reserve(bytes + n); err != nil {
				return kv{}, err
			}
		}
		bytes += n
		return kv{k, v}, nil
	})
	full := errors.Is(err, errPageFull)
	if err != nil && !full {
		return nil, err
	}
	out := &store.WorldPage[T]{}
	for i, r := range rows {
		if i == p.Limit {
			out.NextCursor = fmt.Sprint(rows[i-1].k)
			break
		}
		out.Data = append(out.Data, *r.v)
	}
	if full && out.NextCursor == "" && len(rows) > 0 {
		out.NextCursor = fmt.Sprint(rows[len(rows)-1].k)
	}
	return out, nil
}

// errPageFull ends the read of a page whose payloads reached
// store.MaxWorldPageBytes.
var errPageFull = errors.New("page full")

func parseCursor(c string) (int64, error) {
	if c == "" {
		return 0, nil
	}
	var n int64
	if _, err := fmt.Sscan(c, &n); err != nil || n <= 0 || fmt.Sprint(n) != c {
		return 0, fmt.Errorf("%w: cursor %q", store.ErrInvalid, c)
	}
	return n, nil
}

// prefixed scans one column into k before the columns a scanner takes.
type prefixed struct {
	row sqlrow.Scanner
	k   *int64
}

func (p prefixed) Scan(dest ...any) error { return p.row.Scan(append([]any{p.k}, dest...)...) }

// The lists select a key k and the entity's columns under their plain
// names; cols names them again in the outer query.
const (
	worldRunOuter  = `id, status, deployment_id, workflow, spec_version, execution_context, input, output, error_json, started_at, completed_at, created_at, updated_at, events, target`
	worldStepOuter = sqlrow.WorldStepCols
	// worldRunOuterHead is worldRunOuter without the input and output.
	worldRunOuterHead = `id, status, deployment_id, workflow, spec_version, execution_context, NULL, NULL, error_json, started_at, completed_at, created_at, updated_at, events, target`
)

// WorldRuns lists World runs.
func (s *Store) WorldRuns(ctx context.Context, p *store.WorldListParams) (*store.WorldPage[world.Run], error) {
	where, args := `r.kind = 'world'`, []any{}
	if p.WorkflowName != "" {
		args = append(args, p.WorkflowName)
		where += fmt.Sprintf(` AND r.workflow = $%d`, len(args))
	}
	if p.Status != "" {
		args = append(args, string(p.Status))
		where += fmt.Sprintf(` AND r.status = $%d`, len(args))
	}
	outer := worldRunOuter
	if p.NoData { // the inner query's input and output are left unread
		outer = worldRunOuterHead
	}
	res, err := page(ctx, s, outer, `r.seq AS k, `+s.q.worldRunSelect, where, args, p, sqlrow.ScanWorldRun)
	if err != nil {
		return nil, fmt.Errorf("world runs: %w", err)
	}
	return res, nil
}

// WorldEvents lists events by run or by correlation id.
func (s *Store) WorldEvents(ctx context.Context, p *store.WorldListParams) (*store.WorldPage[world.Event], error) {
	var key, where string
	var args []any
	switch {
	case p.CorrelationID != "":
		key, where, args = `id`, `correlation_id = $1`, []any{p.CorrelationID}
		if p.RunID != "" {
			where, args = where+` AND run_id = $2`, append(args, p.RunID)
		}
	case p.RunID != "":
		// Whether the run exists, from its world_runs row: not a whole
		// read of the run, on every page of a token-less GET a UI polls
		// every 500 ms (red team, round nineteen audit).
		if _, err := one(ctx, s, fmt.Errorf("world run: %w: %q", world.ErrRunNotFound, p.RunID), s.q.worldRunExists,
			[]any{p.RunID}, func(r pgx.Rows) (*int, error) { var n int; return &n, r.Scan(&n) }); err != nil {
			return nil, err
		}
		key, where, args = `slot`, `run_id = $1`, []any{p.RunID}
	default:
		return nil, fmt.Errorf("world events: %w: a run id or a correlation id is required", store.ErrInvalid)
	}
	res, err := page(ctx, s, sqlrow.WorldEventCols, key+` AS k, `+sqlrow.WorldEventCols+` FROM `+s.q.schema+`.world_events`,
		where, args, p, sqlrow.ScanWorldEvent)
	if err != nil {
		return nil, fmt.Errorf("world events: %w", err)
	}
	return res, nil
}

// WorldEventByID returns one event of a run.
func (s *Store) WorldEventByID(ctx context.Context, runID, eventID string) (*world.Event, error) {
	e, err := one(ctx, s, store.ErrNotFound, s.q.worldEventByID, []any{runID, eventID}, scanOf(sqlrow.ScanWorldEvent))
	if err != nil {
		return nil, fmt.Errorf("world event %q of run %q: %w", eventID, runID, err)
	}
	return e, nil
}

// WorldStep returns a step.
func (s *Store) WorldStep(ctx context.Context, runID, stepID string) (*world.Step, error) {
	st, err := one(ctx, s, fmt.Errorf("%w: %q", world.ErrStepNotFound, stepID), s.q.worldStep, []any{stepID, runID},
		scanOf(sqlrow.ScanWorldStep))
	if err != nil {
		return nil, fmt.Errorf("world step: %w", err)
	}
	return st, nil
}

// WorldSteps lists a run's steps.
func (s *Store) WorldSteps(ctx context.Context, p *store.WorldListParams) (*store.WorldPage[world.Step], error) {
	outer := worldStepOuter
	if p.NoData {
		outer = sqlrow.WorldStepHeadCols
	}
	res, err := page(ctx, s, outer, `seq AS k, `+sqlrow.WorldStepCols+` FROM `+s.q.schema+`.world_steps`,
		`run_id = $1`, []any{p.RunID}, p, sqlrow.ScanWorldStep)
	if err != nil {
		return nil, fmt.Errorf("world steps: %w", err)
	}
	return res, nil
}

// WorldHook returns a live hook.
func (s *Store) WorldHook(ctx context.Context, hookID string) (*world.Hook, error) {
	return s.oneHook(ctx, s.q.worldHook, hookID)
}

// WorldHookByToken returns the live hook holding token.
func (s *Store) WorldHookByToken(ctx context.Context, token string) (*world.Hook, error) {
	return s.oneHook(ctx, s.q.worldHookByToken, token)
}

func (s *Store) oneHook(ctx context.Context, sql, arg string) (*world.Hook, error) {
	h, err := one(ctx, s, fmt.Errorf("%w: %q", world.ErrHookNotFound, arg), sql, []any{arg}, scanOf(sqlrow.ScanWorldHook))
	if err != nil {
		return nil, fmt.Errorf("world hook: %w", err)
	}
	return h, nil
}

// WorldHooks lists live hooks.
func (s *Store) WorldHooks(ctx context.Context, p *store.WorldListParams) (*store.WorldPage[world.Hook], error) {
	where, args := `true`, []any{}
	if p.RunID != "" {
		where, args = where+` AND run_id = $1`, append(args, p.RunID)
	}
	res, err := page(ctx, s, sqlrow.WorldHookCols, `seq AS k, `+sqlrow.WorldHookCols+` FROM `+s.q.schema+`.world_hooks`,
		where, args, p, sqlrow.ScanWorldHook)
	if err != nil {
		return nil, fmt.Errorf("world hooks: %w", err)
	}
	return res, nil
}

// worldQueries are the World's statements, set by newQueries.
type worldQueries struct {
	worldRun, worldRunSelect, worldStepOf, worldStep, worldHook, worldHookByToken, worldWait string
	worldStreamsOf, worldTokenSeen, worldInsertRun, worldInsertRunRow, worldUpdateRun        string
	worldUpdateRunRow, worldInsertStep, worldUpdateStep, worldInsertHook, worldDisposeHook   string
	worldDisposeHooks, worldInsertWait, worldUpdateWait, worldDeleteWaits, worldInsertEvent  string
	worldLockRun, worldInsertStream, worldStreamByPath, worldClaimName, worldStream          string
	worldStreamNames, worldEventByID, worldStreamCount, worldRunExists, worldRunHead         string
	worldReplyData                                                                           string
	purgeWorld                                                                               []string
}

func (q *worldQueries) set(set func(*string, string)) {
	set(&q.worldRunSelect, `r.id, r.status, w.deployment_id, r.workflow, w.spec_version, w.execution_context, r.input,
		r.output, w.error_json, w.started_at, w.completed_at, r.created_at, r.updated_at, w.events, w.target
		FROM $S.runs r JOIN $S.world_runs w ON w.run_id = r.id`)
	set(&q.worldRun, `SELECT `+q.worldRunSelect+` WHERE r.id = $1`)
	set(&q.worldRunHead, `SELECT `+sqlrow.WorldRunHeadCols+` FROM $S.runs r JOIN $S.world_runs w ON w.run_id = r.id WHERE r.id = $1`)
	set(&q.worldReplyData, `SELECT status, input, output FROM $S.runs WHERE id = $1 AND created_at = $2`)
	set(&q.worldRunExists, `SELECT 1 FROM $S.world_runs WHERE run_id = $1`)
	set(&q.worldStepOf, `SELECT `+sqlrow.WorldStepCols+` FROM $S.world_steps WHERE run_id = $1 AND step_id = $2`)
	set(&q.worldStep, `SELECT `+sqlrow.WorldStepCols+` FROM $S.world_steps WHERE step_id = $1 AND ($2 = '' OR run_id = $2) ORDER BY seq LIMIT 1`)
	set(&q.worldHook, `SELECT `+sqlrow.WorldHookCols+` FROM $S.world_hooks WHERE hook_id = $1`)
	set(&q.worldHookByToken, `SELECT `+sqlrow.WorldHookCols+` FROM $S.world_hooks WHERE token = $1`)
	set(&q.worldWait, `SELECT `+sqlrow.WorldWaitCols+` FROM $S.world_waits WHERE run_id = $1 AND wait_id = $2`)
	set(&q.worldStreamsOf, `SELECT name, stream_id FROM $S.world_streams WHERE run_id = $1`)
	set(&q.worldTokenSeen, `SELECT 1 FROM $S.world_events WHERE run_id = $1 AND token = $2 LIMIT 1`)
	set(&q.worldInsertRun, `INSERT INTO $S.runs (id, workflow, status, input, output, error, created_at, updated_at, kind)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'world')`)
	set(&q.worldInsertRunRow, `INSERT INTO $S.world_runs (run_id, deployment_id, spec_version, execution_context,
		error_json, started_at, completed_at, events) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`)
	set(&q.worldUpdateRun, `UPDATE $S.runs SET status = $2, output = CASE WHEN $7 THEN $3 ELSE output END, error = $4, updated_at = $5,
		ended_at = CASE WHEN $6 AND ended_at = 0 THEN $5 ELSE ended_at END WHERE id = $1`)
	set(&q.worldUpdateRunRow, `UPDATE $S.world_runs SET error_json = $2, started_at = $3, completed_at = $4, events = $5
		WHERE run_id = $1`)
	set(&q.worldInsertStep, `INSERT INTO $S.world_steps (run_id, step_id, step_name, status, input, output, error_json,
		attempt, started_at, completed_at, created_at, updated_at, retry_after, spec_version, closes)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`)
	set(&q.worldUpdateStep, `UPDATE $S.world_steps SET step_name = $3, status = $4, input = $5, output = $6,
		error_json = $7, attempt = $8, started_at = $9, completed_at = $10, created_at = $11, updated_at = $12,
		retry_after = $13, spec_version = $14, closes = $15 WHERE run_id = $1 AND step_id = $2`)
	set(&q.worldInsertHook, `INSERT INTO $S.world_hooks (hook_id, run_id, token, metadata, is_webhook, spec_version,
		created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`)
	set(&q.worldDisposeHook, `DELETE FROM $S.world_hooks WHERE run_id = $1 AND hook_id = $2`)
	set(&q.worldDisposeHooks, `DELETE FROM $S.world_hooks WHERE run_id = $1`)
	set(&q.worldInsertWait, `INSERT INTO $S.world_waits (run_id, wait_id, status, resume_at, completed_at, created_at,
		updated_at, spec_version) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`)
	set(&q.worldUpdateWait, `UPDATE $S.world_waits SET status = $3, completed_at = $4, updated_at = $5
		WHERE run_id = $1 AND wait_id = $2`)
	set(&q.worldDeleteWaits, `DELETE FROM $S.world_waits WHERE run_id = $1`)
	set(&q.worldInsertEvent, `INSERT INTO $S.world_events (run_id, slot, event_id, type, correlation_id, data,
		spec_version, created_at, token) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`)
	set(&q.worldLockRun, `SELECT kind FROM $S.runs WHERE id = $1 FOR NO KEY UPDATE`)
	set(&q.worldStreamCount, `SELECT count(*) FROM $S.world_streams WHERE run_id = $1`)
	set(&q.worldInsertStream, `INSERT INTO $S.streams (path, run_id, name, content_type, created_at, last_access)
		VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (path) DO NOTHING`)
	set(&q.worldStreamByPath, `SELECT `+sqlrow.StreamCols+` FROM $S.streams WHERE path = $1`)
	// The name's owner: this run's if it was free.
	set(&q.worldClaimName, `WITH ins AS (
			INSERT INTO $S.world_streams (name, run_id, stream_id) VALUES ($1, $2, $3)
			ON CONFLICT (name) DO NOTHING RETURNING run_id
		)
		SELECT run_id FROM ins UNION ALL SELECT run_id FROM $S.world_streams WHERE name = $1 LIMIT 1`)
	set(&q.worldStream, `SELECT `+sqlrow.StreamCols+` FROM $S.streams
		WHERE id = (SELECT stream_id FROM $S.world_streams WHERE name = $1)`)
	set(&q.worldStreamNames, `SELECT name FROM $S.world_streams WHERE run_id = $1 ORDER BY name`)
	set(&q.worldEventByID, `SELECT `+sqlrow.WorldEventCols+` FROM $S.world_events WHERE run_id = $1 AND event_id = $2`)
	for _, t := range []string{"world_events", "world_steps", "world_hooks", "world_waits", "world_streams", "world_queue", "world_runs"} {
		var sql string
		set(&sql, `DELETE FROM $S.`+t+` WHERE run_id = ANY($1)`)
		q.purgeWorld = append(q.purgeWorld, sql)
	}
}

var _ store.WorldSizer = (*Store)(nil)

// WorldItemSize is store.WorldSizer's.
func (s *Store) WorldItemSize(ctx context.Context, ref store.WorldItemRef) (int64, error) {
	q, args, err := store.WorldItemSizeQuery(ref, s.q.schema+".", func(i int) string { return "$" + strconv.Itoa(i) + "::text" })
	if err != nil {
		return 0, err
	}
	var n int64
	err = s.do(ctx, true, func(ctx context.Context, _ *try) error {
		err := s.pool.QueryRow(ctx, q, args...).Scan(&n)
		if errors.Is(err, pgx.ErrNoRows) {
			n, err = 0, nil
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("world item size: %w", err)
	}
	return n, nil
}
