package pgstore

import (
	"sync"
	"sync/atomic"
	"time"
)

// SetLockedHook sets the hook a group runs after its first round trip while
// it holds run locks: the process tests freeze a worker there.
func SetLockedHook(f func()) { testHookLocked = f }

// lose holds, per schema, how many commit replies are still to be lost.
var lose sync.Map // string -> *atomic.Int64

func init() {
	testHookCommitted = func(schema string) bool {
		n, ok := lose.Load(schema)
		return ok && n.(*atomic.Int64).Add(-1) >= 0
	}
}

// LoseCommitReplies makes the next n commits of the stores on schema lose
// their replies: the server commits, the connection is closed before the
// client hears, as a cut after the commit. It returns how many of the n are
// still to come, for the test to check they happened.
func LoseCommitReplies(schema string, n int64) (left func() int64) {
	c := &atomic.Int64{}
	c.Store(n)
	lose.Store(schema, c)
	return func() int64 { return max(c.Load(), 0) }
}

// Notifies counts the NOTIFYs the store's publisher sent.
func (s *Store) Notifies() int64 { return s.stats.notifies.Load() }

// HearsOthers reports whether the store knows another process listens.
func (s *Store) HearsOthers() bool { return time.Now().UnixNano() < s.pub.othersUntil.Load() }

// HeadReads counts the stream heads Waits have read.
func (s *Store) HeadReads() int64 { return s.stats.headReads.Load() }

// Waiting returns how many Waits of stream id are subscribed.
func (s *Store) Waiting(id int64) int { return s.hub.Waiting(id) }
