package store

import "hash/fnv"

// RunWatcher is a store that says when a run's streams may have changed
// for a reader waiting for one of them to appear: a stream of the run was
// created, or the run ended. The server's live reads of a run's stream that
// is not written yet wait on it instead of asking the store again and again.
type RunWatcher interface {
	// WatchRun returns a channel that is closed at the next such change of
	// run (or when changes may have been missed: each caller looks again),
	// and a function to call once the caller is done with it. Watch
	// before looking, so that a change between the look and the wait still
	// closes the channel.
	WatchRun(run string) (changed <-chan struct{}, stop func())
	// CreatedStream returns the run stream at path if this process created
	// it while a watch of its run was on (what woke the watch, most
	// likely), with the newest head the process knows; false if it did
	// not: look the stream up.
	CreatedStream(path string) (*StreamInfo, bool)
}

// RunKey is the key a run's watchers are woken by: a hash of its id, which
// fits a notification where any run id may not.
func RunKey(run string) int64 {
	h := fnv.New64a()
	h.Write([]byte(run))
	return int64(h.Sum64() &^ (1 << 63))
}

// WatcherOf returns s, or the store it wraps, as a RunWatcher.
func WatcherOf(s Store) (RunWatcher, bool) { return as[RunWatcher](s) }
