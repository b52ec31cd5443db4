package store

// Counts are what a store asked of its database since it opened. Unlike
// times, they do not move with the machine's load: a benchmark divides them
// by its runs ("what a run costs", docs/benchmarks.md) and CI guards them
// (bench/guard.json).
type Counts struct {
	// Statements is the SQL statements sent to a database server, each of
	// a pipelined batch counted; 0 for an embedded store.
	Statements int64
	// RoundTrips is how often the store waited for the server: a statement
	// sent alone, a pipelined batch, a statement's first preparation.
	RoundTrips int64
	// Commits is the explicit transactions committed: on PostgreSQL a
	// group commit, and each transaction of the store's own (a statement
	// sent alone commits by itself and is not counted here).
	Commits int64
	// Groups is the group commits (each one transaction), and GroupOps the
	// writes they applied: GroupOps/Groups is the mean group's size.
	Groups, GroupOps int64
}

// Sub returns c - o: what was asked between two readings.
func (c Counts) Sub(o Counts) Counts {
	return Counts{
		Statements: c.Statements - o.Statements, RoundTrips: c.RoundTrips - o.RoundTrips, Commits: c.Commits - o.Commits,
		Groups: c.Groups - o.Groups, GroupOps: c.GroupOps - o.GroupOps,
	}
}

// Counter is a store that counts what it asks of its database.
type Counter interface {
	Counts() Counts
}

// CountsOf returns the counts of s, or of the store it wraps (a wrapper has
// an Unwrap method), and whether one of them counts.
func CountsOf(s Store) (Counts, bool) {
	if c, ok := as[Counter](s); ok {
		return c.Counts(), true
	}
	return Counts{}, false
}

// as returns s, or the store it wraps (a wrapper has an Unwrap method), as
// a T.
func as[T any](s Store) (T, bool) {
	for s != nil {
		if t, ok := s.(T); ok {
			return t, true
		}
		u, ok := s.(interface{ Unwrap() Store })
		if !ok {
			break
		}
		s = u.Unwrap()
	}
	var zero T
	return zero, false
}
