package repl

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Run drives s from in to out until :quit or the end of the input (Ctrl-D on an empty line).
//
// With edit false (input that is not a terminal: a pipe, a file, a test) it reads plain lines
// and writes each prompt and the line it read before the output, so the output reads as a
// transcript of the session. With edit true, in must be a terminal in raw mode (MakeRaw): Run
// edits lines itself — ←/→ (Ctrl-B/F), Home/End (Ctrl-A/E), Backspace, Delete, Ctrl-K/U/W,
// ↑/↓ through the history of the session's lines — and Ctrl-C abandons the line being typed.
func Run(s *Session, in io.Reader, out io.Writer, edit bool) error {
	fmt.Fprint(out, s.Banner())
	if !edit {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for {
			fmt.Fprint(out, s.Prompt())
			if !sc.Scan() {
				fmt.Fprintln(out)
				return sc.Err()
			}
			fmt.Fprintln(out, sc.Text())
			res, quit := s.Exec(sc.Text())
			fmt.Fprint(out, res)
			if quit {
				return nil
			}
		}
	}
	ed := &editor{in: bufio.NewReader(in), out: out}
	for {
		line, err := ed.readLine(s.Prompt())
		if errors.Is(err, io.EOF) {
			fmt.Fprint(out, "\n")
			return nil
		}
		if err != nil {
			return err
		}
		res, quit := s.Exec(line)
		fmt.Fprint(out, res)
		if quit {
			return nil
		}
	}
}

// editor is a small line editor over a raw terminal.
type editor struct {
	in      *bufio.Reader
	out     io.Writer
	history []string
}

// Keys.
const (
	ctrlA     = 1
	ctrlB     = 2
	ctrlC     = 3
	ctrlD     = 4
	ctrlE     = 5
	ctrlF     = 6
	ctrlH     = 8
	ctrlK     = 11
	ctrlU     = 21
	ctrlW     = 23
	esc       = 27
	backspace = 127
)

// readLine reads one line; io.EOF means Ctrl-D on an empty line (or the input's end).
func (e *editor) readLine(prompt string) (string, error) {
	var line []rune
	cur := 0
	hist := len(e.history) // the history entry shown; len(history) is the line being typed
	draft := ""
	redraw := func() {
		fmt.Fprintf(e.out, "\r\033[K%s%s", prompt, string(line))
		if back := len(line) - cur; back > 0 {
			fmt.Fprintf(e.out, "\033[%dD", back)
		}
	}
	show := func(i int) {
		if i == len(e.history) {
			line = []rune(draft)
		} else {
			line = []rune(e.history[i])
		}
		hist, cur = i, len(line)
		redraw()
	}
	fmt.Fprint(e.out, prompt)
	for {
		b, err := e.in.ReadByte()
		if err != nil {
			if len(line) > 0 && errors.Is(err, io.EOF) {
				fmt.Fprint(e.out, "\n")
				return string(line), nil
			}
			return "", err
		}
		switch b {
		case '\r', '\n':
			fmt.Fprint(e.out, "\n")
			text := string(line)
			if strings.TrimSpace(text) != "" && (len(e.history) == 0 || e.history[len(e.history)-1] != text) {
				e.history = append(e.history, text)
			}
			return text, nil
		case ctrlC:
			fmt.Fprint(e.out, "^C\n")
			line, cur, hist, draft = nil, 0, len(e.history), ""
			fmt.Fprint(e.out, prompt)
		case ctrlD:
			if len(line) == 0 {
				return "", io.EOF
			}
			if cur < len(line) {
				line = append(line[:cur], line[cur+1:]...)
				redraw()
			}
		case backspace, ctrlH:
			if cur > 0 {
				line = append(line[:cur-1], line[cur:]...)
				cur--
				redraw()
			}
		case ctrlA:
			cur = 0
			redraw()
		case ctrlE:
			cur = len(line)
			redraw()
		case ctrlB:
			if cur > 0 {
				cur--
				redraw()
			}
		case ctrlF:
			if cur < len(line) {
				cur++
				redraw()
			}
		case ctrlK:
			line = line[:cur]
			redraw()
		case ctrlU:
			line, cur = line[cur:], 0
			redraw()
		case ctrlW:
			i := cur
			for i > 0 && line[i-1] == ' ' {
				i--
			}
			for i > 0 && line[i-1] != ' ' {
				i--
			}
			line, cur = append(line[:i], line[cur:]...), i
			redraw()
		case esc:
			seq := e.escape()
			switch seq {
			case "[D":
				if cur > 0 {
					cur--
				}
			case "[C":
				if cur < len(line) {
					cur++
				}
			case "[H", "[1~", "OH":
				cur = 0
			case "[F", "[4~", "OF":
				cur = len(line)
			case "[3~":
				if cur < len(line) {
					line = append(line[:cur], line[cur+1:]...)
				}
			case "[A":
				if hist > 0 {
					if hist == len(e.history) {
						draft = string(line)
					}
					show(hist - 1)
				}
				continue
			case "[B":
				if hist < len(e.history) {
					show(hist + 1)
				}
				continue
			}
			redraw()
		default:
			if b < 0x20 {
				continue // other control keys: ignored
			}
			r := rune(b)
			if b >= utf8.RuneSelf { // a multi-byte character: read the rest of it
				buf := []byte{b}
				for !utf8.FullRune(buf) && len(buf) < utf8.UTFMax {
					nb, err := e.in.ReadByte()
					if err != nil {
						break
					}
					buf = append(buf, nb)
				}
				r, _ = utf8.DecodeRune(buf)
			}
			line = append(line[:cur], append([]rune{r}, line[cur:]...)...)
			cur++
			if cur == len(line) {
				fmt.Fprint(e.out, string(r))
			} else {
				redraw()
			}
		}
	}
}

// escape reads the rest of an escape sequence after ESC: "[A", "[3~", "OH"…
func (e *editor) escape() string {
	b, err := e.in.ReadByte()
	if err != nil || (b != '[' && b != 'O') {
		return ""
	}
	seq := []byte{b}
	for len(seq) < 8 {
		c, err := e.in.ReadByte()
		if err != nil {
			break
		}
		seq = append(seq, c)
		if c >= 0x40 && c <= 0x7e { // the final byte
			break
		}
	}
	return string(seq)
}
