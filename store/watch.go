package store

import (
	"hash/fnv"

	"github.com/weirhq/weir/limit"
)

// RunWatcher is a store that says when a run may have changed for a reader
// waiting on it: a stream of the run was created, a run event set, or the
// run ended. The server's live reads of a run's stream that is not written
// yet, and the engine's waits for a run event (Engine.GetEvent), wait on
// it instead of asking the store again and again.
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

// LimiterWatcher is a store that says when a limiter's line may move: a
// slot given back, a grant shrunk, the limiter's bounds changed; and,
// apart, when a waiter joins its line (a grant's holder then gives back
// what it does not use). An attempt near the head of the line waits on
// it instead of asking again on a timer, so a slot freed in one process
// reaches a waiter of another in milliseconds (PostgreSQL: through the
// notifications of streams and runs), not at its next poll.
type LimiterWatcher interface {
	// WatchLimiter returns a channel closed at the next time limiter
	// name's line may move (or when changes may have been missed), and a
	// function to call once the caller is done with it. Watch before
	// asking, so that a release between the refusal and the wait still
	// wakes.
	WatchLimiter(name string) (moved <-chan struct{}, stop func())
	// WatchLimiterLine returns a channel closed at the next time a waiter
	// joins limiter name's line, as WatchLimiter does.
	WatchLimiterLine(name string) (joined <-chan struct{}, stop func())
	// WatchSlot returns a channel closed when holder, waiting in limiter
	// name's line, may have been handed a slot (limit.HandOff: by another
	// holder's release, in this process or another), as WatchLimiter
	// does. A waiter waits on it alone: the line moves to it without its
	// asking, so a saturated limiter's waiters do not crowd its row.
	WatchSlot(name, holder string) (handed <-chan struct{}, stop func())
}

// LimiterSlotKey is the key of a WatchSlot.
func LimiterSlotKey(name, holder string) int64 {
	return RunKey("limiter-slot\x00" + name + "\x00" + holder)
}

// SlotKeys is the keys of the holders a limiter's decision handed a slot.
func SlotKeys(name string, handed []string) []int64 {
	if len(handed) == 0 {
		return nil
	}
	ks := make([]int64, len(handed))
	for i, h := range handed {
		ks[i] = LimiterSlotKey(name, h)
	}
	return ks
}

// LimiterKey is the key a limiter's watchers are woken by, in the key
// space of RunKey (a run and a limiter whose keys collide wake each
// other's watchers for nothing, which costs a look, never a change).
func LimiterKey(name string) int64 { return RunKey("limiter\x00" + name) }

// LimiterLineKey is the key of a limiter's WatchLimiterLine.
func LimiterLineKey(name string) int64 { return RunKey("limiter-line\x00" + name) }

// LimiterWatcherOf returns s, or the store it wraps, as a LimiterWatcher.
func LimiterWatcherOf(s Store) (LimiterWatcher, bool) { return as[LimiterWatcher](s) }

// AcquireWakes is whom a limiter's decision d wakes once it is committed:
// moved, its line (a grant gave slots back, so the line may go on);
// joined, the grant holders that WatchLimiterLine (a waiter joined the
// line, so they give back what they do not use); and the waiters it handed
// a slot (d.Handed, WatchSlot). Every store wakes by it.
func AcquireWakes(d *limit.Decision) (moved, joined bool, handed []string) {
	return d.Freed > 0, d.Joined, d.Handed
}
