package repl

import (
	"syscall"
	"unsafe"
)

// IsTerminal reports whether fd is a terminal.
func IsTerminal(fd uintptr) bool {
	var t syscall.Termios
	_, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return e == 0
}

// MakeRaw puts the terminal fd in the mode Run's line editor needs — no echo, no line
// buffering, Ctrl-C and Ctrl-D as plain bytes; output processing stays on, so "\n" still starts
// a new line — and returns the function that restores its previous mode.
func MakeRaw(fd uintptr) (restore func() error, err error) {
	var old syscall.Termios
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCGETS, uintptr(unsafe.Pointer(&old))); e != 0 {
		return nil, e
	}
	raw := old
	raw.Iflag &^= syscall.ICRNL | syscall.IXON | syscall.INLCR | syscall.IGNCR | syscall.ISTRIP
	raw.Lflag &^= syscall.ECHO | syscall.ECHONL | syscall.ICANON | syscall.ISIG | syscall.IEXTEN
	raw.Cflag |= syscall.CS8
	raw.Cc[syscall.VMIN], raw.Cc[syscall.VTIME] = 1, 0
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCSETS, uintptr(unsafe.Pointer(&raw))); e != 0 {
		return nil, e
	}
	return func() error {
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCSETS, uintptr(unsafe.Pointer(&old))); e != 0 {
			return e
		}
		return nil
	}, nil
}
