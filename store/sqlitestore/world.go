package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	"github.com/weirhq/weir/store/internal/sqlrow"
	"github.com/weirhq/weir/world"
)

// This file is the store's World (store.WorldStore): its tables (schema
// migration 4), the loads and saves of apply.WorldTx on the committer's
// transaction, and the reads on the read pool. The rules are package
// world's and apply's.

var _ store.WorldStore = (*Store)(nil)

const worldRunFrom = ` FROM runs r JOIN world_runs w ON w.run_id = r.id`

var _ apply.WorldTx = (*wtx)(nil)

// stmt returns q prepared on the write connection, once.
func (tx *wtx) stmt(q string) (*sql.Stmt, error) {
	c := tx.c
	if st, ok := c.stmts[q]; ok {
		return st, nil
	}
	st, err := c.s.conn.PrepareContext(bg, q)
	if err != nil {
		return nil, translate(err)
	}
	if c.stmts == nil {
		c.stmts = make(map[string]*sql.Stmt)
	}
	c.stmts[q] = st
	return st, nil
}

func (tx *wtx) exec(q string, args ...any) error {
	st, err := tx.stmt(q)
	if err != nil {
		return err
	}
	tx.changed = true
	if _, err := st.ExecContext(bg, args...); err != nil {
		return translate(err)
	}
	return nil
}

func (tx *wtx) row(q string, args ...any) (*sql.Row, error) {
	st, err := tx.stmt(q)
	if err != nil {
		return nil, err
	}
	return st.QueryRowContext(bg, args...), nil
}

// noRow turns sql.ErrNoRows into (nil, nil).
func noRow[T any](v *T, err error) (*T, error) {
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, translate(err)
	}
	return v, nil
}

// WorldRun loads a World run's head: not its input and output, which
// the writer read at every World event, a step's or a hook's too (red
// team, round nineteen audit: 17-21 ms for each event of a run with a
// 15 MiB input, every other client's writes waiting). A reply that
// carries the run reads them after the commit (Store.worldReplyData).
func (tx *wtx) WorldRun(id string) (*world.Run, error) {
	row, err := tx.row(`SELECT `+sqlrow.WorldRunHeadCols+worldRunFrom+` WHERE r.id = ?`, id)
	if err != nil {
		return nil, err
	}
	r, err := noRow(sqlrow.ScanWorldRunHead(row))
	if r != nil {
		tx.c.dataRead.Add(int64(len(r.Input) + len(r.Output)))
	}
	return r, err
}

// WorldStep loads a step of a run.
func (tx *wtx) WorldStep(runID, stepID string) (*world.Step, error) {
	st, err := tx.stmt(`SELECT ` + sqlrow.WorldStepCols + ` FROM world_steps WHERE run_id = ? AND step_id = ?`)
	if err != nil {
		return nil, err
	}
	return noRow(sqlrow.ScanWorldStep(st.QueryRowContext(bg, runID, stepID)))
}

// WorldHook loads a live hook.
func (tx *wtx) WorldHook(hookID string) (*world.Hook, error) {
	st, err := tx.stmt(`SELECT ` + sqlrow.WorldHookCols + ` FROM world_hooks WHERE hook_id = ?`)
	if err != nil {
		return nil, err
	}
	return noRow(sqlrow.ScanWorldHook(st.QueryRowContext(bg, hookID)))
}

// WorldHookByToken loads the live hook holding token.
func (tx *wtx) WorldHookByToken(token string) (*world.Hook, error) {
	st, err := tx.stmt(`SELECT ` + sqlrow.WorldHookCols + ` FROM world_hooks WHERE token = ?`)
	if err != nil {
		return nil, err
	}
	return noRow(sqlrow.ScanWorldHook(st.QueryRowContext(bg, token)))
}

// WorldWait loads a wait.
func (tx *wtx) WorldWait(runID, waitID string) (*world.Wait, error) {
	st, err := tx.stmt(`SELECT ` + sqlrow.WorldWaitCols + ` FROM world_waits WHERE run_id = ? AND wait_id = ?`)
	if err != nil {
		return nil, err
	}
	return noRow(sqlrow.ScanWorldWait(st.QueryRowContext(bg, runID, waitID)))
}

// WorldRunStream returns run's World stream name.
func (tx *wtx) WorldRunStream(runID, name string) (*apply.Stream, error) {
	st, err := tx.stmt(`SELECT stream_id FROM world_streams WHERE name = ? AND run_id = ?`)
	if err != nil {
		return nil, err
	}
	var id int64
	if err := st.QueryRowContext(bg, name, runID).Scan(&id); errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	} else if err != nil {
		return nil, translate(err)
	}
	return tx.Stream(id)
}

// SaveWorldRun saves a World run and its runs row (apply.WorldTx).
func (tx *wtx) SaveWorldRun(r *world.Run, created, output bool) error {
	errMsg := ""
	if r.Error != nil {
		errMsg = r.Error.Message
	}
	if created {
		err := tx.exec(`INSERT INTO runs (id, workflow, status, error, created_at, updated_at, kind)
			VALUES (?, ?, ?, ?, ?, ?, 'world')`, r.RunID, r.WorkflowName, string(r.Status),
			errMsg, sqlrow.Nanos(r.CreatedAt), sqlrow.Nanos(r.UpdatedAt))
		if err != nil {
			return fmt.Errorf("insert world run: %w", err)
		}
		if r.Input != nil {
			if err := tx.setInput(r.RunID, []byte(r.Input)); err != nil {
				return fmt.Errorf("insert world run: %w", err)
			}
		}
		if r.Output != nil {
			if err := tx.setOutput(r.RunID, []byte(r.Output)); err != nil {
				return fmt.Errorf("insert world run: %w", err)
			}
		}
		return tx.exec(`INSERT INTO world_runs (run_id, deployment_id, spec_version, execution_context, error_json,
			started_at, completed_at, events) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, r.RunID, r.DeploymentID, r.SpecVersion,
			[]byte(r.ExecutionContext), sqlrow.EncodeError(r.Error), sqlrow.PtrNanos(r.StartedAt), sqlrow.PtrNanos(r.CompletedAt), r.Events)
	}
	if err := tx.exec(`UPDATE runs SET status = ?, error = ?, updated_at = ? WHERE id = ?`,
		string(r.Status), errMsg, sqlrow.Nanos(r.UpdatedAt), r.RunID); err != nil {
		return fmt.Errorf("update world run: %w", err)
	}
	if output {
		if err := tx.setOutput(r.RunID, r.Output); err != nil {
			return fmt.Errorf("update world run: %w", err)
		}
	}
	return tx.exec(`UPDATE world_runs SET error_json = ?, started_at = ?, completed_at = ?, events = ? WHERE run_id = ?`,
		sqlrow.EncodeError(r.Error), sqlrow.PtrNanos(r.StartedAt), sqlrow.PtrNanos(r.CompletedAt), r.Events, r.RunID)
}

// SaveWorldStep saves a step.
func (tx *wtx) SaveWorldStep(s *world.Step, created bool) error {
	closes := sqlrow.EncodeCloses(s.Closes)
	args := []any{s.StepName, string(s.Status), []byte(s.Input), []byte(s.Output), sqlrow.EncodeError(s.Error), s.Attempt,
		sqlrow.PtrNanos(s.StartedAt), sqlrow.PtrNanos(s.CompletedAt), sqlrow.Nanos(s.CreatedAt), sqlrow.Nanos(s.UpdatedAt),
		sqlrow.PtrNanos(s.RetryAfter), s.SpecVersion, closes, s.RunID, s.StepID}
	if created {
		return tx.exec(`INSERT INTO world_steps (step_name, status, input, output, error_json, attempt, started_at,
			completed_at, created_at, updated_at, retry_after, spec_version, closes, run_id, step_id)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, args...)
	}
	return tx.exec(`UPDATE world_steps SET step_name = ?, status = ?, input = ?, output = ?, error_json = ?, attempt = ?,
		started_at = ?, completed_at = ?, created_at = ?, updated_at = ?, retry_after = ?, spec_version = ?, closes = ?
		WHERE run_id = ? AND step_id = ?`, args...)
}

// SaveWorldHook creates a hook.
func (tx *wtx) SaveWorldHook(h *world.Hook) error {
	return tx.exec(`INSERT INTO world_hooks (hook_id, run_id, token, metadata, is_webhook, spec_version, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, h.HookID, h.RunID, h.Token, []byte(h.Metadata), h.IsWebhook, h.SpecVersion,
		sqlrow.Nanos(h.CreatedAt))
}

// DisposeWorldHooks disposes one hook or all of a run's.
func (tx *wtx) DisposeWorldHooks(runID, hookID string) error {
	if hookID != "" {
		return tx.exec(`DELETE FROM world_hooks WHERE hook_id = ? AND run_id = ?`, hookID, runID)
	}
	return tx.exec(`DELETE FROM world_hooks WHERE run_id = ?`, runID)
}

// SaveWorldWait saves a wait.
func (tx *wtx) SaveWorldWait(w *world.Wait, created bool) error {
	if created {
		return tx.exec(`INSERT INTO world_waits (run_id, wait_id, status, resume_at, completed_at, created_at, updated_at,
			spec_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, w.RunID, w.WaitID, w.Status, sqlrow.PtrNanos(w.ResumeAt),
			sqlrow.PtrNanos(w.CompletedAt), sqlrow.Nanos(w.CreatedAt), sqlrow.Nanos(w.UpdatedAt), w.SpecVersion)
	}
	return tx.exec(`UPDATE world_waits SET status = ?, completed_at = ?, updated_at = ? WHERE run_id = ? AND wait_id = ?`,
		w.Status, sqlrow.PtrNanos(w.CompletedAt), sqlrow.Nanos(w.UpdatedAt), w.RunID, w.WaitID)
}

// DeleteWorldWaits removes a run's waits.
func (tx *wtx) DeleteWorldWaits(runID string) error {
	return tx.exec(`DELETE FROM world_waits WHERE run_id = ?`, runID)
}

// AddWorldEvents appends events.
func (tx *wtx) AddWorldEvents(evs []world.Event) error {
	for i := range evs {
		e := &evs[i]
		if err := tx.exec(`INSERT INTO world_events (run_id, slot, event_id, type, correlation_id, data, spec_version,
			created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, e.RunID, e.Slot, e.EventID, string(e.EventType), e.CorrelationID,
			[]byte(e.EventData), e.SpecVersion, sqlrow.Nanos(e.CreatedAt)); err != nil {
			return fmt.Errorf("insert world event: %w", err)
		}
	}
	return nil
}

// WorldEvent applies one World event (apply.WorldEvent).
func (s *Store) WorldEvent(ctx context.Context, p *store.WorldEventParams) (*store.WorldEventResult, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("world event: %w", err)
	}
	q := *p
	if q.Now.IsZero() {
		q.Now = s.cfg.Now()
	}
	var res *store.WorldEventResult
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		res, err = apply.WorldEvent(tx, &q, &s.ids)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("world event: %w", err)
	}
	if res.Run, err = s.worldReplyData(ctx, res.Run); err != nil {
		return nil, fmt.Errorf("world event: %w", err)
	}
	return res, nil
}

// worldReplyData reads the data of a World event's reply run, read as a
// head by the writer, on a read connection (apply.WorldReplyData).
func (s *Store) worldReplyData(ctx context.Context, run *world.Run) (*world.Run, error) {
	if run == nil || !run.Head {
		return run, nil
	}
	var status string
	var input, output []byte
	err := s.rdb.QueryRowContext(ctx, `SELECT r.status, d.input, d.output FROM runs r JOIN run_data d ON d.seq = r.seq
		WHERE r.id = ? AND r.created_at = ?`, run.RunID, sqlrow.Nanos(run.CreatedAt)).Scan(&status, &input, &output)
	if errors.Is(err, sql.ErrNoRows) {
		return run, nil
	}
	if err != nil {
		return nil, s.readErr(err)
	}
	return apply.WorldReplyData(run, input, output, world.Status(status)), nil
}

// WorldCloseStream closes a World stream (apply.WorldClose).
func (s *Store) WorldCloseStream(ctx context.Context, p *store.WorldCloseParams) (bool, error) {
	var closed bool
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		closed, err = apply.WorldClose(tx, p)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("close world stream: %w", err)
	}
	return closed, nil
}

// WorldOpenStream returns (creating) World stream name of runID.
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
	var si *store.StreamInfo
	now := sqlrow.Nanos(s.cfg.Now())
	err := s.write(ctx, func(tx *wtx) error {
		// Whether the run is a World run, from its world_runs row: not a
		// whole read of the run (its input may be 15 MiB), which held the
		// writer for every open (red team, round nineteen audit).
		ex, err := tx.stmt(`SELECT 1 FROM world_runs WHERE run_id = ?`)
		if err != nil {
			return err
		}
		var one int
		if err := ex.QueryRowContext(bg, runID).Scan(&one); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %q", world.ErrRunNotFound, runID)
		} else if err != nil {
			return translate(err)
		}
		st, err := tx.stmt(`SELECT run_id, stream_id FROM world_streams WHERE name = ?`)
		if err != nil {
			return err
		}
		var owner string
		var id int64
		switch err := st.QueryRowContext(bg, name).Scan(&owner, &id); {
		case err == nil && owner != runID:
			return fmt.Errorf("%w: stream %q is another run's", world.ErrConflict, name)
		case err == nil:
			si, err = sqlrow.ScanStream(tx.w.streamInfo.QueryRowContext(bg, id))
			return translate(err)
		case !errors.Is(err, sql.ErrNoRows):
			return translate(err)
		}
		cnt, err := tx.stmt(`SELECT count(*) FROM world_streams WHERE run_id = ?`)
		if err != nil {
			return err
		}
		var n int
		if err := cnt.QueryRowContext(bg, runID).Scan(&n); err != nil {
			return translate(err)
		}
		if err := store.CheckWorldStreamCount(runID, n); err != nil {
			return err
		}
		path := store.RunStreamPath(runID, name)
		if si, err = sqlrow.ScanStream(tx.w.streamByPath.QueryRowContext(bg, path)); errors.Is(err, sql.ErrNoRows) {
			tx.changed = true
			si, err = sqlrow.ScanStream(tx.w.insertStream.QueryRowContext(bg, path, runID, name, store.DefaultContentType, now))
		}
		if err != nil {
			return translate(err)
		}
		return tx.exec(`INSERT INTO world_streams (name, run_id, stream_id) VALUES (?, ?, ?)`, name, runID, si.ID)
	})
	if err != nil {
		return nil, fmt.Errorf("open world stream: %w", err)
	}
	// A reader waiting for the run's stream (store.RunWatcher) looks
	// again, as for any run stream created: it waited for its fallback
	// poll (1 s) before.
	s.runs.Wake(store.RunKey(runID), struct{}{})
	return si, nil
}

// WorldStream returns the stream a World stream name names.
func (s *Store) WorldStream(ctx context.Context, name string) (*store.StreamInfo, error) {
	if s.isClosed() {
		return nil, store.ErrClosedStore
	}
	si, err := sqlrow.ScanStream(s.rdb.QueryRowContext(ctx, `SELECT `+sqlrow.StreamCols+` FROM streams
		WHERE id = (SELECT stream_id FROM world_streams WHERE name = ?)`, name))
	if err != nil {
		return nil, fmt.Errorf("world stream %q: %w", name, s.readErr(err))
	}
	return si, nil
}

// WorldStreams lists the names of a run's World streams.
func (s *Store) WorldStreams(ctx context.Context, runID string) ([]string, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT name FROM world_streams WHERE run_id = ? ORDER BY name`, runID)
	if err != nil {
		return nil, fmt.Errorf("world streams: %w", s.readErr(err))
	}
	return collect(rows, func(r *sql.Rows) (string, error) {
		var n string
		return n, r.Scan(&n)
	}, s)
}

func collect[T any](rows *sql.Rows, scan func(*sql.Rows) (T, error), s *Store) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, s.readErr(err)
		}
		out = append(out, v)
	}
	return out, s.readErr(rows.Err())
}

// WorldRun returns a World run.
func (s *Store) WorldRun(ctx context.Context, id string) (*world.Run, error) {
	r, err := sqlrow.ScanWorldRun(s.rdb.QueryRowContext(ctx, `SELECT `+worldRunCols+worldRunFrom+` WHERE r.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("world run: %w: %q", world.ErrRunNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("world run: %w", s.readErr(err))
	}
	return r, nil
}

// WorldRunHead returns a World run without its input and output, which
// live in run_data and are left unread.
func (s *Store) WorldRunHead(ctx context.Context, id string) (*world.Run, error) {
	r, err := sqlrow.ScanWorldRunHead(s.rdb.QueryRowContext(ctx, `SELECT `+sqlrow.WorldRunHeadCols+worldRunFrom+` WHERE r.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("world run: %w: %q", world.ErrRunNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("world run: %w", s.readErr(err))
	}
	return r, nil
}

// worldRunExists is nil if World run id exists, world.ErrRunNotFound if
// not: from its world_runs row, which holds none of its data. A list of a
// run's events asked it by a whole read of the run (a token-less GET a UI
// polls every 500 ms, page after page: 30 MiB each for a run with a 15 MiB
// input and output; red team, round nineteen audit).
func (s *Store) worldRunExists(ctx context.Context, id string) error {
	var one int
	err := s.rdb.QueryRowContext(ctx, `SELECT 1 FROM world_runs WHERE run_id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("world run: %w: %q", world.ErrRunNotFound, id)
	}
	if err != nil {
		return fmt.Errorf("world run: %w", s.readErr(err))
	}
	return nil
}

// page runs a paged query: rows ordered by an integer key, cursor the last
// key seen; scan returns each row's key.
func page[T any](ctx context.Context, s *Store, q string, args []any, p *store.WorldListParams, scan func(*sql.Rows) (T, int64, error)) (*store.WorldPage[T], error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	p = p.WithDefaults()
	if p.Cursor != "" {
		c, err := strconv.ParseInt(p.Cursor, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: cursor %q", store.ErrInvalid, p.Cursor)
		}
		if p.Desc {
			q += ` AND k < ?`
		} else {
			q += ` AND k > ?`
		}
		args = append(args, c)
	}
	if p.Desc {
		q += ` ORDER BY k DESC`
	} else {
		q += ` ORDER BY k`
	}
	q += ` LIMIT ?`
	args = append(args, p.Limit+1)
	rows, err := s.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.readErr(err)
	}
	defer rows.Close()
	out := &store.WorldPage[T]{}
	var last int64
	bytes := 0 // the page ends before the row that would pass store.MaxWorldPageBytes
	for rows.Next() {
		v, k, err := scan(rows)
		if err != nil {
			return nil, s.readErr(err)
		}
		n := store.WorldItemBytes(&v)
		if len(out.Data) == p.Limit || bytes > 0 && bytes+n > store.MaxWorldPageBytes {
			out.NextCursor = strconv.FormatInt(last, 10)
			break
		}
		if p.Reserve != nil {
			if err := p.Reserve(bytes + n); err != nil {
				return nil, err
			}
		}
		bytes += n
		out.Data, last = append(out.Data, v), k
	}
	return out, s.readErr(rows.Err())
}

// WorldRuns lists World runs.
func (s *Store) WorldRuns(ctx context.Context, p *store.WorldListParams) (*store.WorldPage[world.Run], error) {
	cols := worldRunCols
	if p.NoData {
		cols = sqlrow.WorldRunHeadCols
	}
	q := `SELECT * FROM (SELECT r.seq AS k, ` + cols + worldRunFrom + ` WHERE r.kind = 'world'`
	var args []any
	if p.WorkflowName != "" {
		q, args = q+` AND r.workflow = ?`, append(args, p.WorkflowName)
	}
	if p.Status != "" {
		q, args = q+` AND r.status = ?`, append(args, string(p.Status))
	}
	q += `) WHERE 1 = 1`
	res, err := page(ctx, s, q, args, p, func(r *sql.Rows) (world.Run, int64, error) {
		var k int64
		run, err := sqlrow.ScanWorldRun(prefixed{r, &k})
		if err != nil {
			return world.Run{}, 0, err
		}
		return *run, k, nil
	})
	if err != nil {
		return nil, fmt.Errorf("world runs: %w", err)
	}
	return res, nil
}

// prefixed scans one column into k before the columns a scanner takes.
type prefixed struct {
	row sqlrow.Scanner
	k   *int64
}

func (p prefixed) Scan(dest ...any) error { return p.row.Scan(append([]any{p.k}, dest...)...) }

// WorldEvents lists events by run or by correlation id.
func (s *Store) WorldEvents(ctx context.Context, p *store.WorldListParams) (*store.WorldPage[world.Event], error) {
	var q string
	var args []any
	switch {
	case p.CorrelationID != "":
		q = `SELECT * FROM (SELECT id AS k, ` + sqlrow.WorldEventCols + ` FROM world_events WHERE correlation_id = ?`
		args = append(args, p.CorrelationID)
		if p.RunID != "" {
			q, args = q+` AND run_id = ?`, append(args, p.RunID)
		}
	case p.RunID != "":
		if err := s.worldRunExists(ctx, p.RunID); err != nil {
			return nil, err
		}
		q, args = `SELECT * FROM (SELECT slot AS k, `+sqlrow.WorldEventCols+` FROM world_events WHERE run_id = ?`, append(args, p.RunID)
	default:
		return nil, fmt.Errorf("world events: %w: a run id or a correlation id is required", store.ErrInvalid)
	}
	q += `) WHERE 1 = 1`
	res, err := page(ctx, s, q, args, p, func(r *sql.Rows) (world.Event, int64, error) {
		var k int64
		e, err := sqlrow.ScanWorldEvent(prefixed{r, &k})
		if err != nil {
			return world.Event{}, 0, err
		}
		return *e, k, nil
	})
	if err != nil {
		return nil, fmt.Errorf("world events: %w", err)
	}
	return res, nil
}

// WorldEventByID returns one event of a run.
func (s *Store) WorldEventByID(ctx context.Context, runID, eventID string) (*world.Event, error) {
	e, err := sqlrow.ScanWorldEvent(s.rdb.QueryRowContext(ctx, `SELECT `+sqlrow.WorldEventCols+` FROM world_events
		WHERE run_id = ? AND event_id = ?`, runID, eventID))
	if err != nil {
		return nil, fmt.Errorf("world event %q of run %q: %w", eventID, runID, s.readErr(err))
	}
	return e, nil
}

// WorldStep returns a step.
func (s *Store) WorldStep(ctx context.Context, runID, stepID string) (*world.Step, error) {
	q, args := `SELECT `+sqlrow.WorldStepCols+` FROM world_steps WHERE step_id = ?`, []any{stepID}
	if runID != "" {
		q, args = q+` AND run_id = ?`, append(args, runID)
	}
	st, err := sqlrow.ScanWorldStep(s.rdb.QueryRowContext(ctx, q+` ORDER BY seq LIMIT 1`, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("world step: %w: %q", world.ErrStepNotFound, stepID)
	}
	if err != nil {
		return nil, fmt.Errorf("world step: %w", s.readErr(err))
	}
	return st, nil
}

// WorldSteps lists a run's steps.
func (s *Store) WorldSteps(ctx context.Context, p *store.WorldListParams) (*store.WorldPage[world.Step], error) {
	cols := sqlrow.WorldStepCols
	if p.NoData {
		cols = sqlrow.WorldStepHeadCols
	}
	q := `SELECT * FROM (SELECT seq AS k, ` + cols + ` FROM world_steps WHERE run_id = ?) WHERE 1 = 1`
	res, err := page(ctx, s, q, []any{p.RunID}, p, func(r *sql.Rows) (world.Step, int64, error) {
		var k int64
		st, err := sqlrow.ScanWorldStep(prefixed{r, &k})
		if err != nil {
			return world.Step{}, 0, err
		}
		return *st, k, nil
	})
	if err != nil {
		return nil, fmt.Errorf("world steps: %w", err)
	}
	return res, nil
}

// WorldHook returns a live hook.
func (s *Store) WorldHook(ctx context.Context, hookID string) (*world.Hook, error) {
	return s.oneHook(ctx, `hook_id = ?`, hookID)
}

// WorldHookByToken returns the live hook holding token.
func (s *Store) WorldHookByToken(ctx context.Context, token string) (*world.Hook, error) {
	return s.oneHook(ctx, `token = ?`, token)
}

func (s *Store) oneHook(ctx context.Context, where string, arg string) (*world.Hook, error) {
	h, err := sqlrow.ScanWorldHook(s.rdb.QueryRowContext(ctx, `SELECT `+sqlrow.WorldHookCols+` FROM world_hooks WHERE `+where, arg))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("world hook: %w: %q", world.ErrHookNotFound, arg)
	}
	if err != nil {
		return nil, fmt.Errorf("world hook: %w", s.readErr(err))
	}
	return h, nil
}

// WorldHooks lists live hooks.
func (s *Store) WorldHooks(ctx context.Context, p *store.WorldListParams) (*store.WorldPage[world.Hook], error) {
	q := `SELECT * FROM (SELECT seq AS k, ` + sqlrow.WorldHookCols + ` FROM world_hooks WHERE 1 = 1`
	var args []any
	if p.RunID != "" {
		q, args = q+` AND run_id = ?`, append(args, p.RunID)
	}
	q += `) WHERE 1 = 1`
	res, err := page(ctx, s, q, args, p, func(r *sql.Rows) (world.Hook, int64, error) {
		var k int64
		h, err := sqlrow.ScanWorldHook(prefixed{r, &k})
		if err != nil {
			return world.Hook{}, 0, err
		}
		return *h, k, nil
	})
	if err != nil {
		return nil, fmt.Errorf("world hooks: %w", err)
	}
	return res, nil
}

// The queue (store.WorldStore): a message is a world_queue row, pending
// until a delivery settles it done (deleted) or dead. A claim leases it:
// lease_until hides it from other claims until the lease ends, so a
// delivery whose process died is retried by the next claim.

// Enqueue stores a message, or returns the pending one with its key.
func (s *Store) Enqueue(ctx context.Context, p *store.EnqueueParams) (*store.Message, bool, error) {
	if err := p.Check(); err != nil {
		return nil, false, fmt.Errorf("enqueue: %w", err)
	}
	now := p.Now
	if now.IsZero() {
		now = s.cfg.Now()
	}
	var msg *store.Message
	var created bool
	err := s.write(ctx, func(tx *wtx) error {
		created = false
		// The same id again is a retry: the message stands.
		row, err := tx.row(`SELECT `+sqlrow.MessageCols+` FROM world_queue WHERE id = ?`, p.ID)
		if err != nil {
			return err
		}
		if msg, err = noRow(sqlrow.ScanMessage(row)); err != nil || msg != nil {
			return err
		}
		if p.IdempotencyKey != "" {
			row, err := tx.row(`SELECT `+sqlrow.MessageCols+` FROM world_queue
				WHERE queue_name = ? AND idempotency_key = ? AND state = 'pending'`, p.QueueName, p.IdempotencyKey)
			if err != nil {
				return err
			}
			if msg, err = noRow(sqlrow.ScanMessage(row)); err != nil || msg != nil {
				return err
			}
		}
		kind, _ := world.QueueKind(p.QueueName)
		row, err = tx.row(`INSERT INTO world_queue (id, queue_name, kind, payload, target, idempotency_key, deployment_id,
			run_id, state, deliver_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?) RETURNING `+sqlrow.MessageCols,
			p.ID, p.QueueName, kind, []byte(p.Payload), p.Target, p.IdempotencyKey, p.DeploymentID, p.RunID,
			sqlrow.Nanos(now.Add(p.Delay)), sqlrow.Nanos(now))
		if err != nil {
			return err
		}
		tx.changed = true
		if msg, err = sqlrow.ScanMessage(row); err != nil {
			return translate(err)
		}
		created = true
		if p.RunID != "" {
			// The app's URL, for a message weir itself sends the run
			// (a cancel from weir's API).
			return tx.exec(`UPDATE world_runs SET target = ? WHERE run_id = ? AND target != ?`, p.Target, p.RunID, p.Target)
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("enqueue: %w", err)
	}
	if created {
		s.notify.Wake(store.QueueWake, struct{}{})
	}
	return msg, created, nil
}

// ClaimMessages leases due messages.
func (s *Store) ClaimMessages(ctx context.Context, p *store.ClaimMessagesParams) ([]*store.Message, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("claim messages: %w", err)
	}
	now := p.Now
	if now.IsZero() {
		now = s.cfg.Now()
	}
	var out []*store.Message
	err := s.write(ctx, func(tx *wtx) error {
		out = out[:0]
		lease := s.ids.New("lse_")
		st, err := tx.stmt(`UPDATE world_queue SET lease = ?1, lease_owner = ?2, lease_until = ?3, attempt = attempt + 1
			WHERE seq IN (SELECT seq FROM world_queue WHERE state = 'pending' AND deliver_at <= ?4 AND lease_until <= ?4
				AND NOT (kind = 'workflow' AND run_id IN (SELECT value FROM json_each(?6)))
				AND target NOT IN (SELECT value FROM json_each(?7))
				ORDER BY deliver_at, seq LIMIT ?5)
			RETURNING ` + sqlrow.MessageCols)
		if err != nil {
			return err
		}
		tx.changed = true
		skip, _ := json.Marshal(append([]string{}, p.SkipRuns...))
		skipTargets, _ := json.Marshal(append([]string{}, p.SkipTargets...))
		rows, err := st.QueryContext(bg, lease, p.Owner, sqlrow.Nanos(now.Add(p.Lease)), sqlrow.Nanos(now), p.Limit, string(skip),
			string(skipTargets))
		if err != nil {
			return translate(err)
		}
		defer rows.Close()
		for rows.Next() {
			m, err := sqlrow.ScanMessage(rows)
			if err != nil {
				return translate(err)
			}
			out = append(out, m)
		}
		return translate(rows.Err())
	})
	if err != nil {
		return nil, fmt.Errorf("claim messages: %w", err)
	}
	slices.SortFunc(out, func(a, b *store.Message) int { return a.DeliverAt.Compare(b.DeliverAt) })
	return out, nil
}

// SettleMessage records a delivery's outcome.
func (s *Store) SettleMessage(ctx context.Context, p *store.SettleParams) error {
	now := p.Now
	if now.IsZero() {
		now = s.cfg.Now()
	}
	q, args := settleQuery(p, sqlrow.Nanos(now))
	err := s.write(ctx, func(tx *wtx) error {
		st, err := tx.stmt(q)
		if err != nil {
			return err
		}
		tx.changed = true
		res, err := st.ExecContext(bg, args...)
		if err != nil {
			return translate(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("message %q: %w", p.ID, store.ErrLeaseLost)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("settle message: %w", err)
	}
	if !p.Done && !p.Dead {
		s.notify.Wake(store.QueueWake, struct{}{})
	}
	return nil
}

// settleQuery is the statement of a settle, with ?1 the id, ?2 the lease.
func settleQuery(p *store.SettleParams, now int64) (string, []any) {
	const where = ` WHERE id = ?1 AND lease = ?2 AND state = 'pending'`
	const unlease = `lease = '', lease_owner = '', lease_until = 0`
	switch {
	case p.Done:
		return `DELETE FROM world_queue` + where, []any{p.ID, p.Lease}
	case p.Dead:
		return `UPDATE world_queue SET state = 'dead', failures = failures + 1, last_error = ?3,
			first_failure = CASE first_failure WHEN 0 THEN ?4 ELSE first_failure END, ` + unlease + where,
			[]any{p.ID, p.Lease, p.LastError, now}
	case p.Failed:
		return `UPDATE world_queue SET failures = failures + 1, last_error = ?3, deliver_at = ?5,
			first_failure = CASE first_failure WHEN 0 THEN ?4 ELSE first_failure END, ` + unlease + where,
			[]any{p.ID, p.Lease, p.LastError, now, sqlrow.Nanos(p.DeliverAt)}
	case p.Back:
		return `UPDATE world_queue SET attempt = attempt - 1, deliver_at = ?3, ` + unlease + where,
			[]any{p.ID, p.Lease, sqlrow.Nanos(p.DeliverAt)}
	default:
		return `UPDATE world_queue SET failures = 0, first_failure = 0, last_error = '', deliver_at = ?3, ` + unlease + where,
			[]any{p.ID, p.Lease, sqlrow.Nanos(p.DeliverAt)}
	}
}

// Messages lists messages of one state.
func (s *Store) Messages(ctx context.Context, p *store.MessagesParams) ([]*store.Message, error) {
	p, err := p.Check()
	if err != nil {
		return nil, fmt.Errorf("messages: %w", err)
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+sqlrow.MessageCols+` FROM world_queue WHERE state = ? AND (? = '' OR run_id = ?)
		ORDER BY seq LIMIT ?`, p.State, p.RunID, p.RunID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("messages: %w", s.readErr(err))
	}
	reserve := p.Reserving()
	defer rows.Close()
	var out []*store.Message
	for rows.Next() {
		m, err := sqlrow.ScanMessage(rows)
		if err == nil {
			err = reserve(m)
		}
		if errors.Is(err, store.ErrPageFull) {
			return out, nil // the list is full: what it holds is the list
		}
		if err != nil {
			return nil, s.readErr(err)
		}
		out = append(out, m)
	}
	return out, s.readErr(rows.Err())
}

// RedeliverMessage makes a dead message pending again.
func (s *Store) RedeliverMessage(ctx context.Context, id string) error {
	now := sqlrow.Nanos(s.cfg.Now())
	err := s.write(ctx, func(tx *wtx) error {
		// A key another pending message took since is dropped.
		st, err := tx.stmt(`UPDATE world_queue SET state = 'pending', failures = 0, first_failure = 0, deliver_at = ?,
				idempotency_key = CASE WHEN EXISTS (SELECT 1 FROM world_queue q WHERE q.state = 'pending'
					AND q.queue_name = world_queue.queue_name AND q.idempotency_key = world_queue.idempotency_key)
					THEN '' ELSE idempotency_key END
			WHERE id = ? AND state = 'dead'`)
		if err != nil {
			return err
		}
		tx.changed = true
		res, err := st.ExecContext(bg, now, id)
		if err != nil {
			return translate(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("dead message %q: %w", id, store.ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redeliver message: %w", err)
	}
	s.notify.Wake(store.QueueWake, struct{}{})
	return nil
}

// NextMessageDue returns when the next pending message is claimable.
func (s *Store) NextMessageDue(ctx context.Context) (time.Time, error) {
	var due sql.NullInt64
	if err := s.rdb.QueryRowContext(ctx, `SELECT MIN(MAX(deliver_at, lease_until)) FROM world_queue
		WHERE state = 'pending'`).Scan(&due); err != nil {
		return time.Time{}, fmt.Errorf("next message due: %w", s.readErr(err))
	}
	if !due.Valid {
		return time.Time{}, nil
	}
	return sqlrow.Time(due.Int64), nil
}

// WatchMessages watches for messages becoming due.
func (s *Store) WatchMessages(ctx context.Context) (<-chan struct{}, func()) {
	w := s.notify.Subscribe(store.QueueWake)
	return w.C, func() { s.notify.Unsubscribe(store.QueueWake, w) }
}

// CoalesceMessages deletes a run's redundant workflow messages.
func (s *Store) CoalesceMessages(ctx context.Context, p *store.CoalesceParams) (int, error) {
	now := p.Now
	if now.IsZero() {
		now = s.cfg.Now()
	}
	var n int64
	err := s.write(ctx, func(tx *wtx) error {
		st, err := tx.stmt(`DELETE FROM world_queue WHERE run_id = ? AND kind = 'workflow' AND state = 'pending'
			AND deliver_at < ? AND lease_until <= ?`)
		if err != nil {
			return err
		}
		tx.changed = true
		res, err := st.ExecContext(bg, p.RunID, sqlrow.Nanos(p.Before), sqlrow.Nanos(now))
		if err != nil {
			return translate(err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("coalesce messages: %w", err)
	}
	return int(n), nil
}

// RenewMessage extends a delivery's lease.
func (s *Store) RenewMessage(ctx context.Context, p *store.RenewMessageParams) error {
	err := s.write(ctx, func(tx *wtx) error {
		st, err := tx.stmt(`UPDATE world_queue SET lease_until = ? WHERE id = ? AND lease = ? AND state = 'pending'`)
		if err != nil {
			return err
		}
		tx.changed = true
		res, err := st.ExecContext(bg, sqlrow.Nanos(p.Until), p.ID, p.Lease)
		if err != nil {
			return translate(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("message %q: %w", p.ID, store.ErrLeaseLost)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("renew message: %w", err)
	}
	return nil
}

var _ store.WorldSizer = (*Store)(nil)

// WorldItemSize is store.WorldSizer's.
func (s *Store) WorldItemSize(ctx context.Context, ref store.WorldItemRef) (int64, error) {
	q, args, err := store.WorldItemSizeQuery(ref, "", func(i int) string { return "?" + strconv.Itoa(i) })
	if err != nil {
		return 0, err
	}
	if ref.Kind == "run" {
		q = withData(q, "r.seq") // a run's data is in run_data
	}
	var n int64
	err = s.rdb.QueryRowContext(ctx, q, args...).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("world item size: %w", s.readErr(err))
	}
	return n, nil
}
