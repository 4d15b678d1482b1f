//go:build !linux

package repl

import "errors"

// IsTerminal reports whether fd is a terminal: never, on this platform (Run then reads plain
// lines).
func IsTerminal(fd uintptr) bool { return false }

// MakeRaw is not supported on this platform.
func MakeRaw(fd uintptr) (restore func() error, err error) {
	return nil, errors.New("repl: raw terminal mode is supported on Linux only")
}
