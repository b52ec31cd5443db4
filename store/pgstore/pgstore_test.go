package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/internal/pgtest"
	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/apply"
	storeopen "github.com/weirhq/weir/store/open"
	"github.com/weirhq/weir/store/pgstore"
	"github.com/weirhq/weir/store/storetest"
	"github.com/weirhq/weir/stream"
	"github.com/weirhq/weir/world"
)

// The tests need PostgreSQL (package pgtest): an unreachable database fails
// them, it never skips them.
func databaseURL() string { return pgtest.URL() }

func adminPool(t testing.TB) *pgxpool.Pool { return pgtest.Admin(t) }

func newSchema(t testing.TB) string { return pgtest.NewSchema(t) }

func adminDo(t testing.TB, f func(ctx context.Context) error) error {
	t.Helper()
	return pgtest.Do(f)
}

// testConfig keeps the tests' pools small: many stores run at once. Its
// operations ride out a restart of PostgreSQL made by another package's
// tests meanwhile (CI opts in to them, pgtest.RestartEnv; under load a
// restart has taken more than the default 10 s): a conformance test that
// met one failed with "connection reset by peer".
func testConfig(schema string) *pgstore.Config {
	return &pgstore.Config{Schema: schema, MaxConns: 4, PollInterval: 200 * time.Millisecond, RetryFor: 45 * time.Second}
}

// open opens a store on schema, closed when t ends.
func open(t testing.TB, schema string, cfg *pgstore.Config) *pgstore.Store {
	t.Helper()
	if cfg == nil {
		cfg = testConfig(schema)
	}
	cfg.Schema = schema
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := pgstore.Open(ctx, databaseURL(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			return open(t, newSchema(t), nil)
		},
		Reopen: func(t *testing.T, s store.Store) store.Store {
			old := s.(*pgstore.Store)
			if err := old.Close(); err != nil {
				t.Fatal(err)
			}
			return open(t, old.Schema(), nil)
		},
	})
}

// Processes that start at once on a new schema migrate it once.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			s, err := pgstore.Open(t.Context(), databaseURL(), &pgstore.Config{Schema: schema, MaxConns: 2})
			if err != nil {
				errs <- err
				return
			}
			errs <- s.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var n int
	err := adminDo(t, func(ctx context.Context) error {
		return adminPool(t).QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema}.Sanitize()+`.weir_migrations`).Scan(&n)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != pgstore.SchemaVersion() {
		t.Fatalf("%d migrations recorded, want %d", n, pgstore.SchemaVersion())
	}
}

// A schema migrated by a newer weir is refused.
func TestSchemaTooNew(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := open(t, schema, nil)
	err := adminDo(t, func(ctx context.Context) error {
		_, err := adminPool(t).Exec(ctx, `INSERT INTO `+pgx.Identifier{schema}.Sanitize()+`.weir_migrations (version, name) VALUES (1000, 'future')
			ON CONFLICT DO NOTHING`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = pgstore.Open(t.Context(), databaseURL(), testConfig(schema))
	if !errors.Is(err, pgstore.ErrSchemaTooNew) {
		t.Fatalf("Open: err = %v, want ErrSchemaTooNew", err)
	}
}

// open.Open picks PostgreSQL for a postgres:// URL, whose schema parameter
// names the schema (and is not sent to the server).
func TestOpenURLWithSchema(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s, err := storeopen.Open(t.Context(), databaseURL()+"&schema="+schema)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ps, ok := s.(*pgstore.Store)
	if !ok || ps.Schema() != schema {
		t.Fatalf("opened %T with schema %q", s, ps.Schema())
	}
	if _, _, err := s.CreateRun(t.Context(), &store.CreateRunParams{ID: "r", Workflow: "wf"}); err != nil {
		t.Fatal(err)
	}
}

// Two stores on one schema stand for two processes: each caches writers'
// state, and each must see the other's writes. A writer's cached state goes
// stale when the other store writes for it; its row's version tells, and
// the state is rebuilt from the log.
func TestTwoStoresShareWriters(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	a, b := open(t, schema, nil), open(t, schema, nil)
	ctx := t.Context()
	if _, _, err := a.CreateRun(ctx, &store.CreateRunParams{ID: "r", Workflow: "wf"}); err != nil {
		t.Fatal(err)
	}
	runs, err := a.ClaimRuns(ctx, &store.ClaimRunsParams{Owner: "w", Limit: 1, LeaseTTL: time.Hour})
	if err != nil || len(runs) != 1 {
		t.Fatalf("claim: %v %v", runs, err)
	}
	epoch := runs[0].LeaseEpoch
	si, err := a.OpenStream(ctx, &store.OpenStreamParams{RunID: "r", Name: "out", Create: true})
	if err != nil {
		t.Fatal(err)
	}
	app := func(s *pgstore.Store, attempt, seq int64, cs ...string) []stream.Ack {
		t.Helper()
		var chunks [][]byte
		for _, c := range cs {
			chunks = append(chunks, []byte(c))
		}
		res, err := s.Append(ctx, &store.AppendParams{StreamID: si.ID, Writer: "step/1", Attempt: attempt, FirstSeq: seq, Chunks: chunks})
		if err != nil {
			t.Fatalf("append a%d s%d: %v", attempt, seq, err)
		}
		return res.Acks
	}
	app(a, 1, 0, "c0", "c1", "c2") // a caches the writer at seq 3
	app(b, 1, 3, "c3", "c4")       // b writes on: a's cache is stale
	// Attempt 2, through a, re-emits everything: all five adopted.
	if err := a.Advance(ctx, &store.AdvanceParams{RunID: "r", LeaseEpoch: epoch, Fence: &store.Fence{Writer: "step/1", Attempt: 2}}); err != nil {
		t.Fatal(err)
	}
	acks := app(a, 2, 0, "c0", "c1", "c2", "c3", "c4")
	for i, ack := range acks {
		if ack != (stream.Ack{Offset: int64(i), Outcome: stream.Adopted}) {
			t.Fatalf("attempt 2 ack %d = %v, want adopted at %d", i, ack, i)
		}
	}
	// The fence a raised holds in b too: attempt 1 is a zombie there.
	_, err = b.Append(ctx, &store.AppendParams{StreamID: si.ID, Writer: "step/1", Attempt: 1, FirstSeq: 5, Chunks: [][]byte{[]byte("z")}})
	if !errors.Is(err, stream.ErrFenced) {
		t.Fatalf("zombie append through b: err = %v, want ErrFenced", err)
	}
	// b commits attempt 2 (its cache never had it: rebuilt).
	if err := b.Advance(ctx, &store.AdvanceParams{RunID: "r", LeaseEpoch: epoch, Finish: &store.Finish{Writer: "step/1", Attempt: 2, Commit: true}}); err != nil {
		t.Fatal(err)
	}
	res, err := a.Read(ctx, &store.ReadParams{StreamID: si.ID})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range res.Records {
		got = append(got, r.String())
	}
	want := []string{`0:data{step/1 a1 s0 "c0"}`, `1:data{step/1 a1 s1 "c1"}`, `2:data{step/1 a1 s2 "c2"}`,
		`3:data{step/1 a1 s3 "c3"}`, `4:data{step/1 a1 s4 "c4"}`, `5:commit{step/1 a2 count 5}`}
	if !slices.Equal(got, want) {
		t.Fatalf("log:\n %q\nwant\n %q", got, want)
	}
}

// A Wait in one store wakes on an append through another, by NOTIFY: the
// waiter's poll is far longer than the test waits.
func TestWaitWakesAcrossStores(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	cfg := testConfig(schema)
	cfg.PollInterval = time.Hour
	reader, writer := open(t, schema, cfg), open(t, schema, nil)
	si, err := writer.OpenStream(t.Context(), &store.OpenStreamParams{Path: "s", Create: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		done := make(chan error, 1)
		go func() { done <- reader.Wait(t.Context(), si.ID, int64(i)) }()
		select {
		case err := <-done:
			t.Fatalf("Wait returned %v before the append", err)
		case <-time.After(50 * time.Millisecond):
		}
		start := time.Now()
		if _, err := writer.Append(t.Context(), &store.AppendParams{StreamID: si.ID, Chunks: [][]byte{[]byte("x")}}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("woken %v after the append", time.Since(start).Round(time.Microsecond))
		case <-time.After(5 * time.Second):
			t.Fatal("Wait did not wake on another store's append")
		}
	}
}

// A write PostgreSQL refuses (here a run id with a NUL byte, which text
// cannot hold) fails alone, though it shares a group commit with others.
func TestRefusedWriteFailsAlone(t *testing.T) {
	t.Parallel()
	s := open(t, newSchema(t), nil)
	si, err := s.OpenStream(t.Context(), &store.OpenStreamParams{Path: "s", Create: true})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		var wg sync.WaitGroup
		errs := make([]error, 16)
		for i := range errs {
			wg.Go(func() {
				if i == 7 {
					_, _, errs[i] = s.CreateRun(t.Context(), &store.CreateRunParams{ID: fmt.Sprintf("bad\x00%d", round), Workflow: "wf"})
					return
				}
				_, errs[i] = s.Append(t.Context(), &store.AppendParams{StreamID: si.ID, Chunks: [][]byte{[]byte("x")}})
			})
		}
		wg.Wait()
		for i, err := range errs {
			if (err != nil) != (i == 7) {
				t.Fatalf("round %d, write %d: err = %v", round, i, err)
			}
		}
	}
	res, err := s.Read(t.Context(), &store.ReadParams{StreamID: si.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 5*15 {
		t.Fatalf("%d records, want %d", len(res.Records), 5*15)
	}
}

// TestLostCommitRepliesApplyOnce cuts the connection after the server
// committed, before the client heard, for each kind of write the World
// makes: the retry finds its lost try's token and returns what committed,
// and nothing is applied twice.
func TestLostCommitRepliesApplyOnce(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := open(t, schema, nil)
	ctx := t.Context()
	ev := func(run string, typ world.EventType, corr string, data string) *store.WorldEventResult {
		t.Helper()
		left := pgstore.LoseCommitReplies(schema, 1)
		res, err := s.WorldEvent(ctx, &store.WorldEventParams{Request: world.Request{RunID: run, Type: typ,
			CorrelationID: corr, Data: json.RawMessage(data)}})
		if err != nil {
			t.Fatalf("%s after a lost reply: %v", typ, err)
		}
		if left() != 0 {
			t.Fatalf("%s: no reply was lost", typ)
		}
		return res
	}
	run := ev("", world.RunCreated, "", `{"deploymentId":"d","workflowName":"w","input":[]}`).Run.RunID
	ev(run, world.RunStarted, "", "")
	ev(run, world.StepCreated, "step_1", `{"stepName":"s","input":[]}`)
	ev(run, world.StepStarted, "step_1", "")
	si, err := s.WorldOpenStream(ctx, run, "strm_1")
	if err != nil {
		t.Fatal(err)
	}
	left := pgstore.LoseCommitReplies(schema, 1)
	res, err := s.Append(ctx, &store.AppendParams{StreamID: si.ID, Writer: world.StepWriter("step_1"), Attempt: 1,
		Chunks: [][]byte{[]byte("a"), []byte("b")}, Late: true})
	if err != nil || left() != 0 || len(res.Acks) != 2 || res.Acks[0].Outcome != stream.Appended {
		t.Fatalf("append after a lost reply: %+v %v (left %d)", res, err, left())
	}
	done := ev(run, world.StepCompleted, "step_1", `{"result":1}`)
	if done.Step.Status != world.Completed || len(done.Events) != 1 {
		t.Fatalf("step_completed after a lost reply: %+v", done)
	}
	page, err := s.WorldEvents(ctx, &store.WorldListParams{RunID: run})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range page.Data {
		types = append(types, string(e.EventType))
	}
	if want := []string{"run_created", "run_started", "step_created", "step_started", "step_completed"}; !slices.Equal(types, want) {
		t.Fatalf("events after lost replies: %v, want %v", types, want)
	}
	rd, err := s.Read(ctx, &store.ReadParams{StreamID: si.ID})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range rd.Records {
		kinds = append(kinds, r.Kind.String())
	}
	if want := []string{"data", "data", "commit"}; !slices.Equal(kinds, want) {
		t.Fatalf("stream after lost replies: %v, want %v", kinds, want)
	}
	left = pgstore.LoseCommitReplies(schema, 1)
	if _, _, err := s.Enqueue(ctx, &store.EnqueueParams{ID: "msg_1", QueueName: "__wkf_workflow_w",
		Payload: json.RawMessage(`{}`), Target: "http://x"}); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	if ms, _ := s.Messages(ctx, &store.MessagesParams{State: "pending"}); len(ms) != 1 {
		t.Fatalf("%d messages after an enqueue (left %d)", len(ms), left())
	}
}

// Idle readers cost the database nothing while LISTEN works: a Wait reads
// its stream's head once, then waits for a notification or the shared
// safety poll, not for its own poll timer.
func TestIdleWaitersDoNotPoll(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	cfg := testConfig(schema)
	cfg.PollInterval = 20 * time.Millisecond // the old per-waiter poll, fast
	cfg.SafetyPollInterval = time.Hour
	s := open(t, schema, cfg)
	si, err := s.OpenStream(t.Context(), &store.OpenStreamParams{Path: "idle", Create: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	const n = 20
	done := make(chan error, n)
	for range n {
		go func() { done <- s.Wait(ctx, si.ID, 0) }()
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Waiting(si.ID) < n {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %d waiters, have %d", n, s.Waiting(si.ID))
		}
		time.Sleep(time.Millisecond)
	}
	before := s.HeadReads()
	// What is measured is a stretch of idle time: 25 of the old polls.
	time.Sleep(500 * time.Millisecond)
	if polled := s.HeadReads() - before; polled > n {
		t.Fatalf("%d idle waiters read their head %d times in 500 ms", n, polled)
	}
	// A write still wakes them at once.
	if _, err := s.Append(t.Context(), &store.AppendParams{StreamID: si.ID, Chunks: [][]byte{[]byte("x")}}); err != nil {
		t.Fatal(err)
	}
	for range n {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter did not wake within 10s of the write")
		}
	}
}

// A schema from before migration 5 gets each stream's data bytes counted
// from its batches: a fork's copied batches not included.
func TestDataBytesBackfill(t *testing.T) {
	ctx := t.Context()
	schema := newSchema(t)
	s := open(t, schema, nil)
	src, _, err := s.CreateStream(ctx, &store.CreateStreamParams{Path: "src", Chunks: [][]byte{[]byte("abc"), []byte("de")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, &store.AppendParams{StreamID: src.ID, Writer: "w", Attempt: 1, Chunks: [][]byte{[]byte("fghi")}}); err != nil {
		t.Fatal(err)
	}
	fork, _, err := s.CreateStream(ctx, &store.CreateStreamParams{Path: "fork", Fork: &store.ForkParams{SourceID: src.ID, Offset: -1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, &store.AppendParams{StreamID: fork.ID, Chunks: [][]byte{[]byte("xy")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	q := pgx.Identifier{schema}.Sanitize()
	if err := adminDo(t, func(ctx context.Context) error {
		// Back to version 4: what migrations 5 to 19 made is undone.
		_, err := adminPool(t).Exec(ctx, `ALTER TABLE `+q+`.runs DROP COLUMN limiters, DROP COLUMN line_priority, DROP COLUMN parent_id, DROP COLUMN trace_parent,
				DROP COLUMN queue, DROP COLUMN queue_key, DROP COLUMN priority, DROP COLUMN dedupe, DROP COLUMN queued, DROP COLUMN version, DROP COLUMN awaits, DROP COLUMN inbox, DROP COLUMN inbox_bytes;
			DROP TABLE `+q+`.hooks, `+q+`.hook_keys, `+q+`.message_keys, `+q+`.run_events, `+q+`.limiters, `+q+`.schedules;
			DROP INDEX `+q+`.streams_standalone;
			ALTER TABLE `+q+`.streams DROP COLUMN data_bytes;
			DELETE FROM `+q+`.weir_migrations WHERE version >= 5`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s = open(t, schema, nil)
	for id, want := range map[int64]int64{src.ID: 9, fork.ID: 2} {
		si, err := s.GetStream(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if si.DataBytes != want {
			t.Errorf("stream %q: DataBytes %d after the migration, want %d", si.Path, si.DataBytes, want)
		}
	}
}

// Not parallel: it measures the heap (storetest.LeavesRunDataUnread).
func TestLeavesRunDataUnread(t *testing.T) {
	schema := newSchema(t)
	storetest.LeavesRunDataUnread(t, open(t, schema, nil))
}

// Not parallel: it measures the heap (storetest.LeavesWorldRunDataUnread).
func TestLeavesWorldRunDataUnread(t *testing.T) {
	schema := newSchema(t)
	storetest.LeavesWorldRunDataUnread(t, open(t, schema, nil))
}

// Not parallel: it measures the heap (storetest.ReadHoldsAPage). pgx reads
// a row whole into a buffer it keeps for the connection (a power of two):
// one window's, at most, which a read may leave behind. With 32 KiB windows
// (a 4 MiB append is read 128 times as many times), the bound is tight.
func TestReadHoldsAPage(t *testing.T) {
	for _, c := range []struct {
		window int
		extra  int64
	}{{0, 1 << 20}, {32<<10 - 1<<10, 32 << 10}} {
		t.Run(fmt.Sprintf("window %d", c.window), func(t *testing.T) {
			schema := newSchema(t)
			cfg := testConfig(schema)
			cfg.ReadWindow = c.window
			storetest.ReadHoldsAPage(t, open(t, schema, cfg), c.extra)
		})
	}
}

// A run stream is created only for a run that exists until the commit: an
// OpenStream racing a purge that deletes the run waits for the purge (the
// insert locks the run FOR KEY SHARE, as the foreign key it replaces did)
// and then finds no run; no stream is left behind for a purged run's id.
func TestRunStreamRacingAPurgeIsNotCreated(t *testing.T) {
	schema := newSchema(t)
	s := open(t, schema, nil)
	ctx := context.Background()
	if _, _, err := s.CreateRun(ctx, &store.CreateRunParams{ID: "doomed", Workflow: "wf"}); err != nil {
		t.Fatal(err)
	}
	// The purge, by hand: the run locked and deleted, not yet committed.
	tx, err := adminPool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	sid := pgx.Identifier{schema}.Sanitize()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+sid+`.runs WHERE id = 'doomed' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM `+sid+`.runs WHERE id = 'doomed'`); err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() {
		_, err := s.OpenStream(ctx, &store.OpenStreamParams{RunID: "doomed", Name: "out", Create: true})
		opened <- err
	}()
	// Wait until the open waits for the purge's lock (on the run, for its
	// group or its insert).
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := adminPool(t).QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND position($1 in query) > 0`, sid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case err := <-opened:
			t.Fatalf("the open did not wait for the purge's lock: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the open to wait on the run's lock")
		}
		time.Sleep(5 * time.Millisecond) // polling the server's view, not syncing
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-opened:
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("open for a purged run: %v, want ErrNotFound", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the open did not return after the purge committed")
	}
	var n int
	if err := adminPool(t).QueryRow(ctx, `SELECT count(*) FROM `+sid+`.streams WHERE run_id = 'doomed'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d streams left for a purged run", n)
	}
}

// An open-append whose commit reply is lost: the retry finds the start
// committed (the run's token) and the stream made, and says so (Created
// false); the writer's append by id is then a retransmit. The start is
// recorded once, the chunks once.
func TestLostOpenAppendReply(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := open(t, schema, nil)
	ctx := t.Context()
	run, _, err := s.CreateRun(ctx, &store.CreateRunParams{ID: "r", Workflow: "wf", Owner: "w", LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	chunks := [][]byte{[]byte("a"), []byte("b")}
	left := pgstore.LoseCommitReplies(schema, 1)
	res, err := s.OpenAppend(ctx, &store.OpenAppendParams{RunID: "r", Name: "out",
		Start: &store.AdvanceParams{RunID: "r", LeaseEpoch: run.LeaseEpoch,
			Events: []store.Event{{Type: store.EventStepStarted, Op: 1, Name: "s", Attempt: 1}},
			Fence:  &store.Fence{Writer: "step/1", Attempt: 1}},
		Append: store.AppendParams{Writer: "step/1", Attempt: 1, Chunks: chunks}})
	if err != nil || left() != 0 {
		t.Fatalf("open-append after a lost reply: %v (left %d)", err, left())
	}
	if !res.Created {
		ar, err := s.Append(ctx, &store.AppendParams{StreamID: res.Stream.ID, Writer: "step/1", Attempt: 1, Chunks: chunks})
		if err != nil || ar.Acks[0].Outcome == stream.Appended {
			t.Fatalf("the append by id after a committed open-append: %+v %v, want retransmits", ar, err)
		}
	}
	evs, err := s.ListEvents(ctx, "r", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Type != store.EventStepStarted {
		t.Fatalf("events %+v, want one step_started", evs)
	}
	rd, err := s.Read(ctx, &store.ReadParams{StreamID: res.Stream.ID})
	if err != nil || len(rd.Records) != 2 {
		t.Fatalf("records %+v %v, want 2", rd, err)
	}
}

// A process alone on its schema sends no NOTIFY once it has looked and
// found no other listener; one that starts listening later is heard at once
// (its hello) and woken by the next append.
func TestNotifyOnlyWhenOthersListen(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	a := open(t, schema, nil)
	ctx := t.Context()
	si, err := a.OpenStream(ctx, &store.OpenStreamParams{Path: "s", Create: true})
	if err != nil {
		t.Fatal(err)
	}
	app := func(s *pgstore.Store) {
		t.Helper()
		if _, err := s.Append(ctx, &store.AppendParams{StreamID: si.ID, Chunks: [][]byte{[]byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	// A waiter here: a's own listener is up, and its look finds no other.
	go func() { _ = a.Wait(ctx, si.ID, 1<<40) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		app(a)
		before := a.Notifies()
		for range 20 {
			app(a)
		}
		time.Sleep(10 * time.Millisecond) // the publisher sends within NotifyInterval (2 ms)
		if a.Notifies() == before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a store alone still sends NOTIFYs after 10 s (%d)", a.Notifies())
		}
	}
	cfg := testConfig(schema)
	cfg.PollInterval, cfg.SafetyPollInterval = time.Hour, time.Hour
	b := open(t, schema, cfg)
	head := func() int64 {
		res, err := b.Read(ctx, &store.ReadParams{StreamID: si.ID})
		if err != nil {
			t.Fatal(err)
		}
		return res.NextOffset
	}
	next := head()
	done := make(chan error, 1)
	go func() { done <- b.Wait(ctx, si.ID, next) }()
	for b.Waiting(si.ID) == 0 {
		time.Sleep(time.Millisecond)
		if time.Now().After(deadline) {
			t.Fatal("b's Wait did not subscribe")
		}
	}
	// b's listener said hello before its LISTEN: a hears it.
	for !a.HearsOthers() {
		if time.Now().After(deadline) {
			t.Fatal("a did not hear b's hello")
		}
		time.Sleep(time.Millisecond)
	}
	end := time.Now().Add(5 * time.Second)
	for {
		app(a)
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(end) {
			t.Fatal("a new listener was not woken by appends for 5 s: its hello was not heard")
		}
	}
}

// Leases are renewed on a connection of their own: with every connection
// of the pool waiting on a limiter's row (held by another session), a
// run's lease is still renewed at once, where a renewal through the pool
// waits as long as the limiter does.
func TestLeasesRenewedWhileThePoolWaits(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := open(t, schema, nil) // MaxConns 4
	ctx := t.Context()
	run, _, err := s.CreateRun(ctx, &store.CreateRunParams{ID: "r", Workflow: "wf", Owner: "w", LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetLimiter(ctx, &limit.Config{Name: "busy", Concurrency: 2}); err != nil {
		t.Fatal(err)
	}
	// Another session holds the limiter's row.
	tx, err := adminPool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{schema}.Sanitize()+`.limiters WHERE name = 'busy' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	// Every connection of the pool waits for it.
	waiting, cancelWaiting := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { _ = s.SetLimiter(waiting, &limit.Config{Name: "busy", Concurrency: 3}) })
	}
	defer func() { cancelWaiting(); wg.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for s.Pool().Stat().AcquiredConns() < s.Pool().Stat().MaxConns() {
		if time.Now().After(deadline) {
			t.Fatalf("the pool never filled: %d of %d connections acquired", s.Pool().Stat().AcquiredConns(), s.Pool().Stat().MaxConns())
		}
		time.Sleep(10 * time.Millisecond)
	}
	pooled, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = s.RenewLease(pooled, &store.RenewLeaseParams{RunID: "r", LeaseEpoch: run.LeaseEpoch, LeaseTTL: time.Minute})
	cancel()
	if err == nil {
		t.Fatal("a renewal through the pool went through while every connection waited: the test shows nothing")
	}
	own, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := s.RenewLeases(own, []store.RenewLeaseParams{{RunID: "r", LeaseEpoch: run.LeaseEpoch, LeaseTTL: time.Minute}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("RenewLeases while the pool waits: %v %+v", err, res)
	}
}

// Two processes create the same limiter at once: the second waits its turn
// (creations take turns on a lock held to commit) while the first commits
// and grants a slot. The second's creation must keep that slot, not reset
// the limiter's state to a new one's (two holders of a one-slot queue).
func TestLimiterCreatedMeanwhileKeepsItsState(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := open(t, schema, nil)
	ctx := t.Context()
	q := pgx.Identifier{schema}.Sanitize()
	conn, err := adminPool(t).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// The first creation: holding the creations' lock, it inserts the
	// limiter with the slot it grants.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, q+".limiters"); err != nil {
		t.Fatal(err)
	}
	cfg := &limit.Config{Name: "l", Concurrency: 1}
	second := make(chan error, 1)
	go func() { second <- s.SetLimiter(ctx, cfg) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := adminPool(t).QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case err := <-second:
			t.Fatalf("the second creation did not wait for the first: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the second creation never waited for the creations' lock")
		}
	}
	now := time.Now()
	state, _ := apply.EncodeLimiterState(limit.State{Holds: []limit.Hold{{Holder: "first", Key: "k", At: now, Until: now.Add(time.Hour)}}})
	config, _ := apply.EncodeLimiterConfig(cfg)
	if _, err := tx.Exec(ctx, `INSERT INTO `+q+`.limiters (name, config, state) VALUES ('l', $1, $2)`, config, state); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-second:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second creation did not end")
	}
	st, err := s.LimiterState(ctx, "l", now)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holds) != 1 || st.Holds[0].Holder != "first" {
		t.Fatalf("after the second creation the limiter holds %+v, want the first one's slot", st.Holds)
	}
}

// A renewal skips a run's row locked by a write in progress, rather than
// waiting for it: the others are renewed at once, and the locked one is
// said to be not renewed this round (store.ErrNotRenewed), not lost. A
// renewal that waited behind such writes timed out with every lease it
// carried, and at 30,000 runs of a saturated limiter leases lapsed and
// bodies ran again (issue 38).
func TestRenewalSkipsABusyRow(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := open(t, schema, nil)
	ctx := t.Context()
	var ps []store.RenewLeaseParams
	for _, id := range []string{"a", "busy", "c"} {
		run, _, err := s.CreateRun(ctx, &store.CreateRunParams{ID: id, Workflow: "wf", Owner: "w", LeaseTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, store.RenewLeaseParams{RunID: id, LeaseEpoch: run.LeaseEpoch, LeaseTTL: time.Minute})
	}
	tx, err := adminPool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{schema}.Sanitize()+`.runs WHERE id = 'busy' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	own, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := s.RenewLeases(own, ps)
	if err != nil {
		t.Fatalf("RenewLeases with a row locked: %v", err)
	}
	if res[0].Err != nil || res[2].Err != nil {
		t.Fatalf("the free rows: %v, %v", res[0].Err, res[2].Err)
	}
	if !errors.Is(res[1].Err, store.ErrNotRenewed) || errors.Is(res[1].Err, store.ErrLeaseLost) {
		t.Fatalf("the locked row: %v, want ErrNotRenewed", res[1].Err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := s.RenewLeases(own, ps[1:2]); err != nil || res[0].Err != nil {
		t.Fatalf("the row once free: %v %+v", err, res)
	}
}
