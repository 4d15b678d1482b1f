package calc

import (
	"strconv"
	"strings"
	"testing"

	"agrl.dev/agrl"
)

// FuzzEval checks the calc tool's parser against the big-integer reference: both accept the
// same inputs with the same value, and that no input panics. (Eval's work is bounded by
// construction: MaxExprBytes is checked before anything is read; TestHostileToolInputs times it.)
func FuzzEval(f *testing.F) {
	for _, s := range []string{
		"1+2*3", "12+7*(3-5)", "-7/2", "7/-2", "--3", "2*-3", "(((1)))", "9**9**9", "2^10", "1/0",
		"9223372036854775807+1", "-9223372036854775807-1", "(-9223372036854775807-1)/-1",
		"3037000500*3037000500", "", " ", "(1+2", "1+2)", "()", "2(3)", "1 2", "1.5", "x", "\xff",
		"\"3+4\"", "../etc/passwd", strings.Repeat("(", 40) + "1" + strings.Repeat(")", 40),
		strings.Repeat("-", 33) + "1", strings.Repeat("9", 300), "007", "\t8\t/\t2",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Eval(s)
		rv, rerr := refEval(s)
		if (err == nil) != (rerr == nil) || (err == nil && v != rv) {
			t.Fatalf("Eval(%q) = %d, %v; reference %d, %v", s, v, err, rv, rerr)
		}
		if err != nil {
			if len("error: "+err.Error()) > 150 {
				t.Fatalf("Eval(%q): error of %d bytes", s, len(err.Error()))
			}
			return
		}
		// The printed value reads back as itself.
		if w, err := Eval(strconv.FormatInt(v, 10)); err != nil && v != -1<<63 || err == nil && w != v {
			t.Fatalf("Eval(%d) = %d, %v", v, w, err)
		}
	})
}

// FuzzCheckAnswer checks the answer rule: an answer is correct exactly when, normalised, it
// is an optional "-" and digits whose value is the gold's.
func FuzzCheckAnswer(f *testing.F) {
	for _, s := range []string{"5", "-5", "+5", "005", "5.", "5.0", "five", "- 5", "--5", "", "-0", "1,000",
		"\u22125", "9223372036854775808", " 42 "} {
		f.Add(s, int64(5))
		f.Add(s, int64(-5))
	}
	f.Fuzz(func(t *testing.T, answer string, gold int64) {
		got := CheckAnswer(answer, strconv.FormatInt(gold, 10))
		n := agrl.NormalizeAnswer(answer)
		digits := strings.TrimPrefix(n, "-")
		plain := digits != "" && strings.Trim(digits, "0123456789") == "" && len(n) <= 64
		v, err := strconv.ParseInt(n, 10, 64)
		want := plain && err == nil && v == gold
		if got != want {
			t.Fatalf("CheckAnswer(%q, %d) = %v, want %v", answer, gold, got, want)
		}
		if !CheckAnswer(strconv.FormatInt(gold, 10), strconv.FormatInt(gold, 10)) {
			t.Fatalf("gold %d does not match itself", gold)
		}
	})
}
