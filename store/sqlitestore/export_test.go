package sqlitestore

// Waiting returns how many Wait calls wait on stream id: tests wait for
// their readers to block before they write.
func (s *Store) Waiting(id int64) int { return s.notify.Waiting(id) }

// WriterDataRead returns the bytes of runs' data and events' payloads
// the writer has read (committer.dataRead).
func (s *Store) WriterDataRead() int64 { return s.c.dataRead.Load() }
