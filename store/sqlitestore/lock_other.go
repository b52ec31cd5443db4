//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package sqlitestore

import "os"

// lockFile does nothing here: on this platform nothing stops two stores from
// opening one database, and the caller must make sure none does.
func lockFile(path string) (*os.File, error) { return nil, nil }
