package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Flock takes a flock(2) of kind how (syscall.LOCK_SH or LOCK_EX, optionally
// with LOCK_NB) on path, creating the file. It serializes the processes that
// share the local cluster: test binaries run in parallel.
func Flock(path string, how int) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("flock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
