//go:build linux

package main

import (
	"bytes"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// openPTY returns a pseudo-terminal pair: the master (the test's keyboard and screen) and the
// slave (the terminal agrl play runs on).
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	unlock := int32(0)
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatal(e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatal(e)
	}
	slave, err = os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slave.Close(); master.Close() })
	return master, slave
}

// screen accumulates what the program writes to the terminal.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// String is what the terminal shows so far, colours (SGR sequences) left out.
func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sgr.ReplaceAllString(s.buf.String(), "")
}

var sgr = regexp.MustCompile("\x1b\\[[0-9;]*m")

// waitFor waits until the screen shows want (after the first after bytes).
func (s *screen) waitFor(t *testing.T, want string, after int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if i := strings.Index(s.String()[after:], want); i >= 0 {
			return after + i + len(want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the terminal never showed %q; it shows:\n%s", want, s.String())
	return 0
}

func echoOn(t *testing.T, f *os.File) bool {
	var tio syscall.Termios
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&tio))); e != 0 {
		t.Fatal(e)
	}
	return tio.Lflag&syscall.ECHO != 0
}

// TestPlayOnATerminal types into `agrl play` through a pseudo-terminal: a task of one's own, a
// line fixed in the middle with ← and an insertion, a line abandoned with Ctrl-C, the history
// recalled with ↑ and cleared with Ctrl-U, a Backspace, the answer, and Ctrl-D to leave; the
// terminal's mode is restored afterwards.
func TestPlayOnATerminal(t *testing.T) {
	master, slave := openPTY(t)
	if !echoOn(t, slave) {
		t.Fatal("a new terminal without echo")
	}
	scr := &screen{}
	go func() { _, _ = copyAll(scr, master) }()
	prev := stdin
	stdin = slave
	defer func() { stdin = prev }()
	done := make(chan error, 1)
	var stderr bytes.Buffer
	go func() {
		code := run([]string{"play", "--env", "calc"}, slave, &stderr)
		if code != 0 {
			done <- &exitError{code, stderr.String()}
			return
		}
		done <- nil
	}()
	at := scr.waitFor(t, "turn 1> ", 0)
	if echoOn(t, slave) {
		t.Error("agrl play left echo on: the line editor needs raw mode")
	}
	typeKeys := func(keys string) { _, _ = master.WriteString(keys) }

	typeKeys(":task 12*(3+4)\r")
	at = scr.waitFor(t, "Compute: 12*(3+4)", at)
	at = scr.waitFor(t, "turn 1> ", at)
	// "(" is missing after "*": go back over the 12 characters after it and insert it.
	typeKeys("<tool>calc(12*3+4))</tool>" + strings.Repeat("\x1b[D", 12) + "(\r")
	at = scr.waitFor(t, "obs: 84", at)
	typeKeys("nonsense, abandoned\x03")
	at = scr.waitFor(t, "^C", at)
	typeKeys("\x1b[A")                         // ↑: the tool call again
	at = scr.waitFor(t, "calc(12*(3+4))", at)  // redrawn from the history
	typeKeys("\x15<answer>85\x7f4</answer>\r") // Ctrl-U clears it; Backspace fixes 85 → 84
	at = scr.waitFor(t, `answer "84": correct`, at)
	scr.waitFor(t, "reward 1.000", at)
	typeKeys("\x04") // Ctrl-D on an empty line
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("agrl play did not exit on Ctrl-D; the terminal shows:\n%s", scr.String())
	}
	if !echoOn(t, slave) {
		t.Error("agrl play did not restore the terminal's mode")
	}
	if strings.Contains(scr.String(), "nonsense, abandoned\r\ninvalid") {
		t.Error("the line abandoned with Ctrl-C was played")
	}
}

type exitError struct {
	code   int
	stderr string
}

func (e *exitError) Error() string { return "exit " + strconv.Itoa(e.code) + ": " + e.stderr }

func copyAll(dst *screen, src *os.File) (int, error) {
	buf := make([]byte, 4096)
	total := 0
	for {
		n, err := src.Read(buf)
		if n > 0 {
			dst.Write(buf[:n])
			total += n
		}
		if err != nil {
			return total, err
		}
	}
}
