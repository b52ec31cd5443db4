package store

import "context"

// Outline returns run's whole log a page at a time (ListEventsPage), each
// event without its data unless its type is dataOf (a message's payload,
// a step's output are left unread by the store): what a summary of a long
// log needs (what it waits on), held in memory as the events' heads and
// the data of dataOf's, not as the log's bytes.
func Outline(ctx context.Context, s Store, run string, dataOf EventType) ([]Event, error) {
	var out []Event
	p := &ListEventsParams{RunID: run, Limit: MaxEventPage, DataOf: dataOf}
	for {
		page, err := s.ListEventsPage(ctx, p)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Events...)
		if !page.More || len(page.Events) == 0 {
			return out, nil
		}
		p.After = page.Events[len(page.Events)-1].Seq
	}
}

// LogSizer is a store that tells how many bytes of data a run's log holds
// without reading it: a server holds what a fork, a retry or a resume will
// read of a log (the whole of it, with its payloads) against its budget
// before the store reads it.
type LogSizer interface {
	// LogBytes returns the bytes of data of run's events, of its input
	// (which a fork copies) and of its output (which a reply carries: a
	// fork found by its id, a resume refused, read whole on PostgreSQL),
	// 0 for a run with none or no run. (Red team, round twelve: a fork of
	// a run with a 15 MiB input and no events was held as nothing, and 16
	// at once took 1 GB; round nineteen audit: a 15 MiB output was held
	// as nothing.)
	LogBytes(ctx context.Context, run string) (int64, error)
}

// LogSizerOf returns s, or the store it wraps, as a LogSizer.
func LogSizerOf(s Store) (LogSizer, bool) { return as[LogSizer](s) }
