package agrl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// RunLockFile is the lock file of a run directory: a process that trains into the directory
// holds an exclusive lock on it and writes its process id there.
const RunLockFile = ".lock"

// RunLockedError is LockRun's error when another process holds the run directory.
type RunLockedError struct {
	// Dir is the run directory; PID the process holding it (0 if it could not be read).
	Dir string
	PID int
}

// Error names the directory and the holder.
func (e *RunLockedError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("agrl: run directory %s is in use by %s (another agrl train or notebook on the same run); "+
		"wait for it to finish or stop it, or choose another directory", e.Dir, holder)
}

// ErrRunLocked is matched (errors.Is) by every *RunLockedError.
var ErrRunLocked = errors.New("agrl: run directory in use")

// Is makes errors.Is(err, ErrRunLocked) true.
func (e *RunLockedError) Is(target error) bool { return target == ErrRunLocked }

// runLock is an exclusive lock on a run directory. On Unix it is flock(2) on RunLockFile: the
// kernel drops it when the process exits, however it exits (SIGKILL included), so a lock is
// never stale. Elsewhere it is a no-op.
type runLock struct{ f *os.File }

// lockRun creates dir if needed and takes its lock without waiting.
func lockRun(dir string) (*runLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("agrl: creating run directory: %w", err)
	}
	path := filepath.Join(dir, RunLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("agrl: locking run directory: %w", err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("agrl: locking run directory %s: %w", dir, err)
	}
	if held {
		b, _ := os.ReadFile(path)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		f.Close()
		return nil, &RunLockedError{Dir: dir, PID: pid}
	}
	// The holder's process id, for the message above (informational: the lock is the flock).
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &runLock{f: f}, nil
}

// unlock releases the lock (idempotent).
func (l *runLock) unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	err := l.f.Close() // closing the descriptor releases the flock
	l.f = nil
	return err
}
