package apply

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// memTx is a Tx over maps, for the rules' own tests: it records what each
// request loads and saves, so the tests can hold the rules to their
// contracts (Reads lists every load; a refusal loads but never saves).
// Backends are tested against real databases by storetest.
type memTx struct {
	streams   map[int64]*Stream
	writers   map[WriterRef]*stream.Writer
	fences    map[RunWriter]int64
	producers map[StreamKey]stream.ProducerState
	keys      map[StreamKey]*Key
	runs      map[string]*Run
	changes   map[string][]RunChange
	events    map[string][]store.Event
	log       map[int64][]stream.Record
	values    map[[2]string]store.Event // (run, key) -> its run event

	loads  Reads // what the current request loaded
	saves  int   // saves made by the current request
	failAt int   // the failAt-th save of a request fails (0: none)
}

var errInjected = errors.New("injected save failure")

func newMemTx() *memTx {
	return &memTx{
		streams: map[int64]*Stream{}, writers: map[WriterRef]*stream.Writer{}, fences: map[RunWriter]int64{},
		producers: map[StreamKey]stream.ProducerState{}, keys: map[StreamKey]*Key{}, runs: map[string]*Run{},
		changes: map[string][]RunChange{}, events: map[string][]store.Event{}, log: map[int64][]stream.Record{},
	}
}

// begin starts a request.
func (m *memTx) begin() { m.loads, m.saves = Reads{}, 0 }

func (m *memTx) save() error {
	m.saves++
	if m.failAt > 0 && m.saves == m.failAt {
		return errInjected
	}
	return nil
}

func (m *memTx) Stream(id int64) (*Stream, error) {
	m.loads.Streams = append(m.loads.Streams, id)
	if st := m.streams[id]; st != nil {
		return st, nil
	}
	return nil, fmt.Errorf("stream %d: %w", id, store.ErrNotFound)
}

func (m *memTx) Writer(st *Stream, id string) (*stream.Writer, error) {
	m.loads.Writers = append(m.loads.Writers, WriterRef{st.ID, id})
	return m.writers[WriterRef{st.ID, id}], nil
}

func (m *memTx) Fence(run, writer string) (int64, error) {
	m.loads.Fences = append(m.loads.Fences, RunWriter{run, writer})
	return m.fences[RunWriter{run, writer}], nil
}

func (m *memTx) Producer(st *Stream, id string) (*stream.ProducerState, error) {
	m.loads.Producers = append(m.loads.Producers, StreamKey{st.ID, id})
	if ps, ok := m.producers[StreamKey{st.ID, id}]; ok {
		return &ps, nil
	}
	return nil, nil
}

func (m *memTx) Key(st *Stream, key string) (*Key, error) {
	m.loads.Keys = append(m.loads.Keys, StreamKey{st.ID, key})
	return m.keys[StreamKey{st.ID, key}], nil
}

func (m *memTx) Run(id string) (*Run, error) {
	m.loads.Runs = append(m.loads.Runs, id)
	if r := m.runs[id]; r != nil {
		return r, nil
	}
	return nil, fmt.Errorf("run %q: %w", id, store.ErrNotFound)
}

func (m *memTx) runStreams(run string, keep func(*Stream) bool) []*Stream {
	m.loads.RunStreams = append(m.loads.RunStreams, run)
	var out []*Stream
	for _, id := range slices.Sorted(maps.Keys(m.streams)) {
		if st := m.streams[id]; st.RunID == run && keep(st) {
			out = append(out, st)
		}
	}
	return out
}

func (m *memTx) WriterStreams(run, writer string) ([]*Stream, error) {
	m.loads.RunWriters = append(m.loads.RunWriters, RunWriter{run, writer})
	return m.runStreams(run, func(st *Stream) bool { return m.writers[WriterRef{st.ID, writer}] != nil }), nil
}

func (m *memTx) RunStreams(run string) ([]*Stream, error) {
	return m.runStreams(run, func(st *Stream) bool { return !st.Head.Closed }), nil
}

func (m *memTx) AddRecords(st *Stream, recs []stream.Record) error {
	if err := m.save(); err != nil {
		return err
	}
	for _, r := range recs {
		if r.Offset != int64(len(m.log[st.ID])) {
			panic(fmt.Sprintf("stream %d: record at offset %d, log has %d", st.ID, r.Offset, len(m.log[st.ID])))
		}
		m.log[st.ID] = append(m.log[st.ID], r)
	}
	return nil
}

func (m *memTx) SaveStream(st *Stream) error { return m.save() }

func (m *memTx) SaveWriter(st *Stream, w *stream.Writer, created bool) error {
	if err := m.save(); err != nil {
		return err
	}
	if created != (m.writers[WriterRef{st.ID, w.ID}] == nil) {
		panic(fmt.Sprintf("SaveWriter(%q, created %v)", w.ID, created))
	}
	m.writers[WriterRef{st.ID, w.ID}] = w
	return nil
}

func (m *memTx) SaveFence(run, writer string, attempt int64) error {
	if err := m.save(); err != nil {
		return err
	}
	if attempt <= m.fences[RunWriter{run, writer}] {
		panic("SaveFence lowers or keeps a fence")
	}
	m.fences[RunWriter{run, writer}] = attempt
	return nil
}

func (m *memTx) SaveProducer(st *Stream, id string, ps stream.ProducerState) error {
	if err := m.save(); err != nil {
		return err
	}
	m.producers[StreamKey{st.ID, id}] = ps
	return nil
}

func (m *memTx) SaveKey(st *Stream, key string, k *Key) error {
	if err := m.save(); err != nil {
		return err
	}
	m.keys[StreamKey{st.ID, key}] = k
	return nil
}

func (m *memTx) AddEvents(run *Run, evs []store.Event) error {
	if err := m.save(); err != nil {
		return err
	}
	for _, e := range evs {
		if e.Seq != int64(len(m.events[run.ID]))+1 {
			panic(fmt.Sprintf("event seq %d after %d", e.Seq, len(m.events[run.ID])))
		}
		m.events[run.ID] = append(m.events[run.ID], e)
	}
	return nil
}

func (m *memTx) SaveRunEvent(run *Run, ev *store.Event) error {
	if err := m.save(); err != nil {
		return err
	}
	if m.values == nil {
		m.values = map[[2]string]store.Event{}
	}
	m.values[[2]string{run.ID, ev.Name}] = *ev
	return nil
}

func (m *memTx) SaveRun(run *Run, c *RunChange) error {
	if err := m.save(); err != nil {
		return err
	}
	m.changes[run.ID] = append(m.changes[run.ID], *c)
	return nil
}

// snapshot is a deep copy of the state the rules may change in place.
type snapshot struct {
	streams   map[int64]Stream
	writers   map[WriterRef]stream.Writer
	fences    map[RunWriter]int64
	producers map[StreamKey]stream.ProducerState
	keys      map[StreamKey]Key
	runs      map[string]Run
	logs      map[int64]int
	events    map[string]int
}

func (m *memTx) snapshot() snapshot {
	s := snapshot{streams: map[int64]Stream{}, writers: map[WriterRef]stream.Writer{}, fences: maps.Clone(m.fences),
		producers: maps.Clone(m.producers), keys: map[StreamKey]Key{}, runs: map[string]Run{},
		logs: map[int64]int{}, events: map[string]int{}}
	for id, st := range m.streams {
		c := *st
		if st.ClosedBy != nil {
			p := *st.ClosedBy
			c.ClosedBy = &p
		}
		s.streams[id] = c
	}
	for k, w := range m.writers {
		c := *w
		c.Live = slices.Clone(w.Live)
		s.writers[k] = c
	}
	for k, v := range m.keys {
		s.keys[k] = *v
	}
	for k, v := range m.runs {
		s.runs[k] = *v
	}
	for k, v := range m.log {
		s.logs[k] = len(v)
	}
	for k, v := range m.events {
		s.events[k] = len(v)
	}
	return s
}

// diff describes how m differs from s, "" if it does not.
func (m *memTx) diff(s snapshot) string {
	now := m.snapshot()
	switch {
	case !maps.EqualFunc(now.streams, s.streams, func(a, b Stream) bool {
		if (a.ClosedBy == nil) != (b.ClosedBy == nil) || a.ClosedBy != nil && *a.ClosedBy != *b.ClosedBy {
			return false
		}
		a.ClosedBy, b.ClosedBy = nil, nil
		return fmt.Sprint(a) == fmt.Sprint(b)
	}):
		return fmt.Sprintf("streams %v, were %v", now.streams, s.streams)
	case !maps.EqualFunc(now.writers, s.writers, func(a, b stream.Writer) bool {
		return a.ID == b.ID && samePersisted(&a, &b) && slices.Equal(a.Live, b.Live)
	}):
		return fmt.Sprintf("writers %v, were %v", now.writers, s.writers)
	case !maps.Equal(now.fences, s.fences):
		return "fences changed"
	case !maps.Equal(now.producers, s.producers):
		return "producers changed"
	case !maps.EqualFunc(now.keys, s.keys, func(a, b Key) bool { return fmt.Sprint(a) == fmt.Sprint(b) }):
		return "keys changed"
	case !maps.Equal(now.runs, s.runs):
		return fmt.Sprintf("runs %v, were %v", now.runs, s.runs)
	case !maps.Equal(now.logs, s.logs):
		return "logs changed"
	case !maps.Equal(now.events, s.events):
		return "events changed"
	}
	return ""
}
