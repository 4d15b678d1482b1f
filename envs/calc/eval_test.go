package calc

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestEvalValues(t *testing.T) {
	cases := []struct {
		expr string
		want int64
	}{
		// precedence
		{"1+2*3", 7},
		{"2+3*4-6/2", 11},
		{"12+7*(3-5)", -2},
		{"(1+2)*3", 9},
		{"((((5))))", 5},
		// left associativity of - and /
		{"10-4-3", 3},
		{"8-3-2", 3},
		{"1-2-3-4", -8},
		{"100/10/5", 2},
		{"48/4/2", 6},
		{"2*3/4", 1},   // (2*3)/4 = 6/4
		{"2*(3/4)", 0}, // 3/4 truncates to 0 first
		{"2*3*4/5", 4},
		// truncation toward zero, like Go
		{"7/2", 3},
		{"-7/2", -3},
		{"7/-2", -3},
		{"-7/-2", 3},
		{"-1/2", 0},
		{"0/5", 0},
		// unary signs
		{"-3", -3},
		{"--3", 3},
		{"+4", 4},
		{"-(2+3)", -5},
		{"2--3", 5},
		{"2-+3", -1},
		{"2*-3", -6},
		{"-2*-3", 6},
		// negative results, white space, leading zeros
		{"3-10", -7},
		{"5-99*2", -193},
		{" 1 + 2 ", 3},
		{"\t8\t/\t2", 4},
		{"0", 0},
		{"007", 7},
		// int64 edges
		{"9223372036854775807", math.MaxInt64},
		{"-9223372036854775807-1", math.MinInt64},
		{"(-9223372036854775807-1)/1", math.MinInt64},
		{"-(-9223372036854775807)", math.MaxInt64},
		{"3037000499*3037000499", 3037000499 * 3037000499},
		{"99999*99999", 9999800001},
	}
	for _, c := range cases {
		got, err := Eval(c.expr)
		if err != nil || got != c.want {
			t.Errorf("Eval(%q) = %d, %v; want %d", c.expr, got, err, c.want)
		}
	}
}

func TestEvalErrors(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("(", n) + "1" + strings.Repeat(")", n) }
	cases := []struct {
		expr string
		want error
		msg  string // the whole message, when given
	}{
		{"", ErrEmpty, "empty expression"},
		{" \t ", ErrEmpty, ""},
		{strings.Repeat("1", MaxExprBytes+1), ErrTooLong, "expression too long: 257 bytes, limit 256"},
		{deep(MaxDepth + 1), ErrTooDeep, "nesting too deep: limit 32"},
		{strings.Repeat("-", MaxDepth+1) + "1", ErrTooDeep, ""},
		{"1/0", ErrDivByZero, "division by zero"},
		{"5/(3-3)", ErrDivByZero, ""},
		{"9223372036854775808", ErrOverflow, "integer overflow: number at 1 too large"},
		{"1+99999999999999999999999", ErrOverflow, ""},
		{"9223372036854775807+1", ErrOverflow, "integer overflow: 9223372036854775807+1"},
		{"-9223372036854775807-2", ErrOverflow, ""},
		{"(-9223372036854775807-1)/-1", ErrOverflow, ""},
		{"(-9223372036854775807-1)*-1", ErrOverflow, ""},
		{"-1*(-9223372036854775807-1)", ErrOverflow, ""},
		{"-(-9223372036854775807-1)", ErrOverflow, ""},
		{"3037000500*3037000500", ErrOverflow, ""},
		{"9**9**9", ErrUnsupported, "unsupported operator ** at 2"},
		{"2^10", ErrUnsupported, "unsupported operator ^ at 2"},
		{"7%3", ErrUnsupported, ""},
		{"7//2", ErrUnsupported, "unsupported operator // at 2"},
		{"1<<3", ErrUnsupported, ""},
		{"^3", ErrUnsupported, ""},
		{"(1+2", ErrUnbalanced, "unbalanced parentheses: '(' at 1 never closed"},
		{"((1)", ErrUnbalanced, ""},
		{"1+2)", ErrUnbalanced, "unbalanced parentheses: unexpected ')' at 4"},
		{")", ErrSyntax, "syntax error: missing number before ')' at 1"},
		{"()", ErrSyntax, ""},
		{"x", ErrSyntax, "syntax error: unexpected 'x' at 1"},
		{"2x", ErrSyntax, ""},
		{"2 3", ErrSyntax, "syntax error: missing operator before '3' at 3"},
		{"2(3)", ErrSyntax, ""},
		{"1+", ErrSyntax, "syntax error: missing number at end"},
		{"*3", ErrSyntax, "syntax error: missing number before '*' at 1"},
		{"1.5", ErrSyntax, "syntax error: unexpected '.' at 2, integers only"},
		{"1,000", ErrSyntax, ""},
		{"\xff", ErrSyntax, "syntax error: unexpected byte 0xff at 1"},
		{"1\n+2", ErrSyntax, ""},
		{"../../etc/passwd", ErrSyntax, ""},
		{"\"3+4", ErrSyntax, ""},
	}
	for _, c := range cases {
		v, err := Eval(c.expr)
		if !errors.Is(err, c.want) {
			t.Errorf("Eval(%.40q) = %d, %v; want %v", c.expr, v, err, c.want)
			continue
		}
		if c.msg != "" && err.Error() != c.msg {
			t.Errorf("Eval(%.40q) error %q; want %q", c.expr, err, c.msg)
		}
	}
}

func TestEvalBounds(t *testing.T) {
	deep := strings.Repeat("(", MaxDepth) + "7" + strings.Repeat(")", MaxDepth)
	if v, err := Eval(deep); err != nil || v != 7 {
		t.Errorf("nesting of exactly MaxDepth: %d, %v", v, err)
	}
	if v, err := Eval(strings.Repeat("-", MaxDepth) + "7"); err != nil || v != 7 {
		t.Errorf("%d unary minus signs: %d, %v", MaxDepth, v, err)
	}
	long := "1" + strings.Repeat("+1", (MaxExprBytes-1)/2) // 255 bytes
	if v, err := Eval(long + " "); err != nil || v != int64(MaxExprBytes/2) {
		t.Errorf("expression of exactly MaxExprBytes: %d, %v", v, err)
	}
	// Sequential nesting does not accumulate depth.
	seq := strings.Repeat("(((1)))+", 20) + "0"
	if v, err := Eval(seq); err != nil || v != 20 {
		t.Errorf("Eval(%q) = %d, %v", seq, v, err)
	}
}

// TestEvalMatchesReference compares Eval with the big-integer reference on random expressions
// built from a grammar that also produces invalid ones.
func TestEvalMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	atoms := []string{"0", "1", "2", "7", "10", "99", "-", "+", "*", "/", "(", ")", " ", "3037000500",
		"9223372036854775807", "4611686018427387904", "%", "x"}
	agree, ok := 0, 0
	for range 200000 {
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			b.WriteString(atoms[rng.IntN(len(atoms))])
		}
		s := b.String()
		v, err := Eval(s)
		rv, rerr := refEval(s)
		if (err == nil) != (rerr == nil) || (err == nil && v != rv) {
			t.Fatalf("Eval(%q) = %d, %v; reference %d, %v", s, v, err, rv, rerr)
		}
		agree++
		if err == nil {
			ok++
		}
	}
	t.Logf("%d random expressions agree with the reference, %d of them valid", agree, ok)
	if ok < 10000 {
		t.Errorf("only %d valid expressions: the generator of this test is too weak", ok)
	}
}
