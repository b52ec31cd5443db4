//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlitestore

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive advisory lock on path+"-lock": the caches are
// authoritative only if one Store owns the database. The kernel drops the
// lock when the process dies, however it dies.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path+"-lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s: one process owns a SQLite database (its caches must see every write). "+
				"Run your workflows and the server in that one process (weircli: `yourprogram server`, or mount server.New in it); "+
				"for several processes, use PostgreSQL (docs/operations.md, \"Deployment shapes\")", ErrInUse, path)
		}
		return nil, fmt.Errorf("lock: %w", err)
	}
	return f, nil
}
