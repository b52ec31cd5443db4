package sqlitestore

// Waiting returns how many Wait calls wait on stream id: tests wait for
// their readers to block before they write.
func (s *Store) Waiting(id int64) int { return s.notify.Waiting(id) }
