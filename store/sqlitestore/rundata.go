package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"regexp"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/internal/sqlrow"
)

// A run's data (its input and output) lives in run_data, a row by the
// run's seq, not in its runs row (migration 18). SQLite rewrites a row
// whole at every UPDATE, reading every column to build the new record:
// a run with a 15 MiB input paid 50–70 ms of CPU for each change of its
// state (a claim, a renewal, a step's record, a message counted in its
// inbox), and a client sending messages to it kept a core busy (red
// team, round sixteen). Apart, a run's row stays small whatever its data,
// and its data is written once: at its start, and its output at its end.
//
// The column lists of package sqlrow, which PostgreSQL reads from one
// row (it keeps large values out of line), are rewritten here to read
// the data from run_data: a length from its row's header, a value once
// the run is read whole.

// dataRef matches what a column list says of a run's data: its length,
// or its value, as runs' own (bare, or r. in a join).
var dataRef = regexp.MustCompile(`length\((?:r\.)?(input|output)\)|(?:\br\.)?\b(input|output)\b`)

// withData rewrites cols to read the run's input and output from
// run_data, the run's seq being seq (runs.seq, r.seq).
func withData(cols, seq string) string {
	return dataRef.ReplaceAllStringFunc(cols, func(m string) string {
		sub := dataRef.FindStringSubmatch(m)
		if sub[1] != "" {
			return `(SELECT length(d.` + sub[1] + `) FROM run_data d WHERE d.seq = ` + seq + `)`
		}
		return `(SELECT d.` + sub[2] + ` FROM run_data d WHERE d.seq = ` + seq + `)`
	})
}

var (
	// runCols are sqlrow.RunCols from runs and run_data.
	runCols = withData(sqlrow.RunCols, "runs.seq")
	// listedRunCols are sqlrow.ListedRunCols from runs and run_data.
	listedRunCols = withData(sqlrow.ListedRunCols, "runs.seq")
	// worldRunCols are sqlrow.WorldRunCols from runs r, world_runs and
	// run_data.
	worldRunCols = withData(sqlrow.WorldRunCols, "r.seq")
)

// headCols are sqlrow.RunCols without the run's data (NULL, NULL): what
// the writer reads of a run, whose lock must not be held while a run's
// input is read. A claim returns its runs so (red team, round eighteen: a
// message waking a run with a 15 MiB input held the writer 0.2 s, other
// clients' writes p90 5 → 76–135 ms), and so do the runs a start, a fork
// or a resume finds (round nineteen: a queued start naming a run with a
// 15 MiB input, other clients' writes p90 3.3 → 98 ms). The data is read
// after the commit, on a read connection (Store.claimedData,
// Store.replyData).
// They are sqlrow.RunHeadCols, which PostgreSQL's admission reads too.
const headCols = sqlrow.RunHeadCols

// foundRunCols are sqlrow.FoundRunCols from runs and run_data, the bound
// ?2 and the input compared ?3: a length is read from run_data's record
// header, a value only within the bound (or, compared, of the same
// length).
var foundRunCols = withData(sqlrow.FoundRunCols("?2", "?3"), "runs.seq")

// runColsWithin is sqlrow.RunColsWithin from runs and run_data.
func runColsWithin(max, errBytes string) string {
	return withData(sqlrow.RunColsWithin(max, errBytes), "runs.seq")
}

// setInput sets run id's input (nil: none).
func (tx *wtx) setInput(id string, input []byte) error {
	return tx.exec(`INSERT INTO run_data (seq, input) SELECT seq, ?2 FROM runs WHERE id = ?1
		ON CONFLICT (seq) DO UPDATE SET input = excluded.input`, id, input)
}

// setOutput sets run id's output (nil: none), making no row for none,
// and writing nothing if it is the output already: a World run is saved
// at every event, and an UPDATE that writes makes SQLite read the whole
// row, its input with it (red team, round seventeen: 25 ms of an event's
// 43-51 ms on a run with a 15 MiB input). The output comes before the
// input in run_data, so the comparison reads the output alone.
func (tx *wtx) setOutput(id string, output []byte) error {
	if output == nil {
		return tx.exec(`UPDATE run_data SET output = NULL
			WHERE seq = (SELECT seq FROM runs WHERE id = ?) AND output IS NOT NULL`, id)
	}
	return tx.exec(`INSERT INTO run_data (seq, output) SELECT seq, ?2 FROM runs WHERE id = ?1
		ON CONFLICT (seq) DO UPDATE SET output = excluded.output WHERE output IS NOT excluded.output`, id, output)
}

// claimedData reads the input and output of runs just claimed (headCols)
// from a read connection: a claimed run's data does not change while it
// is leased, but by its own execution.
// One query for all of them: a claim of 32 runs is one read, not 32.
func (s *Store) claimedData(ctx context.Context, runs []*store.Run) error {
	if len(runs) == 0 {
		return nil
	}
	byID := make(map[string]*store.Run, len(runs))
	ids := make([]string, len(runs))
	for i, r := range runs {
		byID[r.ID], ids[i] = r, r.ID
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT r.id, d.input, d.output FROM runs r JOIN run_data d ON d.seq = r.seq
		WHERE r.id IN (SELECT value FROM json_each(?))`, jsonList(ids))
	if err != nil {
		return s.readErr(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var input, output []byte
		if err := rows.Scan(&id, &input, &output); err != nil {
			return s.readErr(err)
		}
		if r := byID[id]; r != nil { // runs without data have no row
			r.Input, r.Output = input, output
		}
	}
	return s.readErr(rows.Err())
}

// replyData is run, read by the writer without its data (headCols), with
// its data read after the commit on a read connection, for the reply of
// a write that found it or changed its state alone: a start naming it, a
// retried fork, a resume. Its input is fixed but while it is queued (a
// debounced start gives a queued run its own: the reply has the input the
// run will start with) and its output comes and goes with its status (a
// run ends with it, a resume clears it): the output is taken if the run's
// status is still run's, the state the write left. A run gone since (a
// purge) is returned as the writer read it.
func (s *Store) replyData(ctx context.Context, run *store.Run) (*store.Run, error) {
	return s.replyDataWithin(ctx, run, math.MaxInt64)
}

// replyDataWithin is replyData reading neither the input nor the output
// if either is over bound bytes (apply.FoundBound): the run is then
// Elided, as a start that found it by its id returns it.
func (s *Store) replyDataWithin(ctx context.Context, run *store.Run, bound int64) (*store.Run, error) {
	if run == nil {
		return nil, nil
	}
	var status string
	var input, output []byte
	var over bool
	err := s.rdb.QueryRowContext(ctx, `SELECT r.status,
		CASE WHEN COALESCE(length(d.input), 0) > ?3 OR COALESCE(length(d.output), 0) > ?3 THEN NULL ELSE d.input END,
		CASE WHEN COALESCE(length(d.input), 0) > ?3 OR COALESCE(length(d.output), 0) > ?3 THEN NULL ELSE d.output END,
		COALESCE(length(d.input), 0) > ?3 OR COALESCE(length(d.output), 0) > ?3
		FROM runs r LEFT JOIN run_data d ON d.seq = r.seq
		WHERE r.id = ?1 AND r.created_at = ?2`, run.ID, sqlrow.Nanos(run.CreatedAt), bound).Scan(&status, &input, &output, &over)
	if errors.Is(err, sql.ErrNoRows) {
		return run, nil
	}
	if err != nil {
		return nil, s.readErr(err)
	}
	c := *run
	c.Input, c.Elided = input, over
	if store.RunStatus(status) == run.Status {
		c.Output = output
	}
	return &c, nil
}

// RunOutline returns run's log without its messages' payloads
// (apply.ForkTx).
func (tx *wtx) RunOutline(run string) ([]store.Event, error) {
	return tx.events(`SELECT `+sqlrow.EventOutlineCols+` FROM events WHERE run_id = ? ORDER BY seq`, run)
}

// RunInput returns run id's input: a fork's, copied from its source.
func (tx *wtx) RunInput(id string) ([]byte, error) {
	st, err := tx.stmt(`SELECT d.input FROM runs r JOIN run_data d ON d.seq = r.seq WHERE r.id = ?`)
	if err != nil {
		return nil, err
	}
	var input []byte
	err = st.QueryRowContext(bg, id).Scan(&input)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	tx.c.dataRead.Add(int64(len(input)))
	return input, translate(err)
}

// scanRun scans a run the writer read (sqlrow.ScanRun), counting the
// data it carries (committer.dataRead).
func (tx *wtx) scanRun(row sqlrow.Scanner) (*store.Run, error) {
	run, err := sqlrow.ScanRun(row)
	if err == nil {
		tx.c.dataRead.Add(int64(len(run.Input) + len(run.Output)))
	}
	return run, err
}
