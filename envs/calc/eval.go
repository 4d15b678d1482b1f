package calc

import (
	"errors"
	"fmt"
	"math"
)

// Limits of Eval. They bound the work of one call whatever its input: a call reads at most
// MaxExprBytes bytes once, and its recursion is at most MaxDepth levels deep.
const (
	// MaxExprBytes caps the length of an expression; longer input is rejected unread.
	MaxExprBytes = 256
	// MaxDepth caps the nesting of parentheses and unary signs: "((1))" and "--1" are both
	// 2 deep.
	MaxDepth = 32
)

// The errors Eval returns wrap one of these, so callers can test them with errors.Is. Their
// messages are short because the policy reads them as observations.
var (
	// ErrEmpty: the expression is empty or only white space.
	ErrEmpty = errors.New("empty expression")
	// ErrTooLong: the expression is longer than MaxExprBytes.
	ErrTooLong = errors.New("expression too long")
	// ErrTooDeep: parentheses or unary signs nest deeper than MaxDepth.
	ErrTooDeep = errors.New("nesting too deep")
	// ErrUnbalanced: a '(' is never closed, or a ')' closes nothing.
	ErrUnbalanced = errors.New("unbalanced parentheses")
	// ErrUnsupported: an operator the calculator does not have, such as ** ^ % or //.
	ErrUnsupported = errors.New("unsupported operator")
	// ErrSyntax: any other malformed input (junk characters, a missing number or operator).
	ErrSyntax = errors.New("syntax error")
	// ErrDivByZero: a division by zero.
	ErrDivByZero = errors.New("division by zero")
	// ErrOverflow: a number or an intermediate result outside the int64 range.
	ErrOverflow = errors.New("integer overflow")
)

// Errors used only by the generator's strict mode.
var (
	errInexact = errors.New("inexact division")
	errLimit   = errors.New("value over the generator's limit")
)

// Eval computes the value of an integer expression with our own recursive-descent parser.
//
// Grammar (white space, spaces and tabs, is allowed between tokens):
//
//	expr   := term { ("+" | "-") term }
//	term   := unary { ("*" | "/") unary }
//	unary  := ("-" | "+") unary | "(" expr ")" | number
//	number := digit { digit }                      (decimal, at most math.MaxInt64)
//
// Operators of equal precedence associate to the left: 8-3-2 is 3 and 48/4/2 is 6. Unary
// signs bind tighter than * and /. Division truncates toward zero, like Go's / on integers:
// 7/2 is 3 and -7/2 is -3. All arithmetic is on int64 and checked: a result outside the
// int64 range is ErrOverflow, never a wrapped value. Implicit multiplication ("2(3)"),
// decimals and any other operator (** ^ % // …) are errors. The minimum int64 cannot be
// written as a literal (its magnitude overflows) but can be computed.
func Eval(expr string) (int64, error) { return eval(expr, false, math.MaxInt64) }

// eval is Eval with the generator's checks: with exact set an inexact division is an error,
// and every intermediate value must lie within ±limit.
func eval(expr string, exact bool, limit int64) (int64, error) {
	if len(expr) > MaxExprBytes {
		return 0, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLong, len(expr), MaxExprBytes)
	}
	p := parser{s: expr, exact: exact, limit: limit}
	p.skipSpace()
	if p.pos == len(p.s) {
		return 0, ErrEmpty
	}
	v, err := p.expr()
	if err != nil {
		return 0, err
	}
	p.skipSpace()
	if p.pos < len(p.s) {
		return 0, p.bad(false)
	}
	return v, nil
}

type parser struct {
	s     string
	pos   int
	depth int
	exact bool
	limit int64
}

func (p *parser) skipSpace() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t') {
		p.pos++
	}
}

// peek returns the next non-space byte, or 0 at the end of the input.
func (p *parser) peek() byte {
	p.skipSpace()
	if p.pos >= len(p.s) {
		return 0
	}
	return p.s[p.pos]
}

func (p *parser) expr() (int64, error) {
	v, err := p.term()
	for err == nil {
		op := p.peek()
		if op != '+' && op != '-' {
			return v, nil
		}
		p.pos++
		var r int64
		if r, err = p.term(); err == nil {
			v, err = p.apply(op, v, r)
		}
	}
	return 0, err
}

func (p *parser) term() (int64, error) {
	v, err := p.unary()
	for err == nil {
		op := p.peek()
		if op != '*' && op != '/' {
			return v, nil
		}
		if p.pos+1 < len(p.s) && p.s[p.pos+1] == op { // ** or //
			return 0, p.bad(false)
		}
		p.pos++
		var r int64
		if r, err = p.unary(); err == nil {
			v, err = p.apply(op, v, r)
		}
	}
	return 0, err
}

func (p *parser) unary() (int64, error) {
	switch c := p.peek(); {
	case c == 0:
		return 0, fmt.Errorf("%w: missing number at end", ErrSyntax)
	case c == '-' || c == '+':
		if err := p.enter(); err != nil {
			return 0, err
		}
		p.pos++
		v, err := p.unary()
		p.depth--
		if err != nil || c == '+' {
			return v, err
		}
		if v == math.MinInt64 {
			return 0, fmt.Errorf("%w: -(%d)", ErrOverflow, v)
		}
		return -v, nil
	case c == '(':
		if err := p.enter(); err != nil {
			return 0, err
		}
		open := p.pos
		p.pos++
		v, err := p.expr()
		if err != nil {
			return 0, err
		}
		switch p.peek() {
		case ')':
			p.pos++
			p.depth--
			return v, nil
		case 0:
			return 0, fmt.Errorf("%w: '(' at %d never closed", ErrUnbalanced, open+1)
		}
		return 0, p.bad(false)
	case c >= '0' && c <= '9':
		return p.number()
	default:
		return 0, p.bad(true)
	}
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxDepth {
		return fmt.Errorf("%w: limit %d", ErrTooDeep, MaxDepth)
	}
	return nil
}

func (p *parser) number() (int64, error) {
	start := p.pos
	var v int64
	for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
		d := int64(p.s[p.pos] - '0')
		if v > (math.MaxInt64-d)/10 {
			return 0, fmt.Errorf("%w: number at %d too large", ErrOverflow, start+1)
		}
		v = v*10 + d
		p.pos++
	}
	return v, p.check(v)
}

// check enforces the generator's limit on an intermediate value (none for Eval).
func (p *parser) check(v int64) error {
	if p.limit < math.MaxInt64 && (v > p.limit || v < -p.limit) {
		return errLimit
	}
	return nil
}

// apply computes a op b, checked.
func (p *parser) apply(op byte, a, b int64) (int64, error) {
	var r int64
	ok := true
	switch op {
	case '+':
		r = a + b
		ok = (b >= 0 && r >= a) || (b < 0 && r < a)
	case '-':
		r = a - b
		ok = (b >= 0 && r <= a) || (b < 0 && r > a)
	case '*':
		r = a * b
		ok = a == 0 || ((a != -1 || b != math.MinInt64) && (b != -1 || a != math.MinInt64) && r/a == b)
	case '/':
		if b == 0 {
			return 0, ErrDivByZero
		}
		if a == math.MinInt64 && b == -1 {
			ok = false
			break
		}
		if p.exact && a%b != 0 {
			return 0, errInexact
		}
		r = a / b
	}
	if !ok {
		return 0, fmt.Errorf("%w: %d%c%d", ErrOverflow, a, op, b)
	}
	return r, p.check(r)
}

// unsupported lists the single-byte operators people expect from other calculators.
const unsupported = "^%&|!=<>~"

// bad describes the unexpected byte at p.pos. operand says whether a number was expected there.
func (p *parser) bad(operand bool) error {
	c, at := p.s[p.pos], p.pos+1
	switch {
	case (c == '*' || c == '/') && p.pos+1 < len(p.s) && p.s[p.pos+1] == c:
		return fmt.Errorf("%w %c%c at %d", ErrUnsupported, c, c, at)
	case c < 0x80 && containsByte(unsupported, c):
		return fmt.Errorf("%w %c at %d", ErrUnsupported, c, at)
	case c == ')' && operand:
		return fmt.Errorf("%w: missing number before ')' at %d", ErrSyntax, at)
	case c == ')':
		return fmt.Errorf("%w: unexpected ')' at %d", ErrUnbalanced, at)
	case operand && (c == '*' || c == '/'):
		return fmt.Errorf("%w: missing number before '%c' at %d", ErrSyntax, c, at)
	case !operand && (c == '(' || (c >= '0' && c <= '9')):
		return fmt.Errorf("%w: missing operator before '%c' at %d", ErrSyntax, c, at)
	case c == '.' || c == ',':
		return fmt.Errorf("%w: unexpected '%c' at %d, integers only", ErrSyntax, c, at)
	case c > ' ' && c < 0x7f:
		return fmt.Errorf("%w: unexpected '%c' at %d", ErrSyntax, c, at)
	default:
		return fmt.Errorf("%w: unexpected byte 0x%02x at %d", ErrSyntax, c, at)
	}
}

func containsByte(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return true
		}
	}
	return false
}
