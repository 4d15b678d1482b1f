// Package calc is the "calculator verify" environment: each task asks for the exact value of
// an integer arithmetic expression, and the policy may call a calculator tool.
//
// A task reads "Compute: 12+7*(3-5)"; its gold answer is the value as a decimal string
// ("-2"). The one tool is calc(expr), evaluated by Eval, this package's own recursive-descent
// parser (no eval, no go/constant): it returns the value ("-2") or "error: ..." for division
// by zero, int64 overflow, input over MaxExprBytes, nesting deeper than MaxDepth, unsupported
// operators such as ** or ^, empty input, junk characters and unbalanced parentheses.
//
// Division rule: / is integer division truncating toward zero, exactly like Go's / on int64
// (7/2 = 3, -7/2 = -3, 7/-2 = -3). The generator only ever produces exact divisions, so the
// rule matters only for expressions the policy writes itself.
//
// Difficulty sets the operator count, the operand digit count and the parentheses:
//
//	easy     1 operator       operands of 1-2 digits   no parentheses     |values| <= 10^4
//	medium   2-3 operators    operands of 2 digits     no parentheses     |values| <= 10^6
//	hard     4-5 operators    operands of 2-3 digits   >= 1 pair          |values| <= 10^8
//	extreme  6-7 operators    operands of 3-4 digits   >= 1 pair          |values| <= 10^12
//	         (OOD only; at least one 4-digit operand)
//
// The bound on values holds for every intermediate result as Eval computes it. Operands are
// positive literals; results may be negative.
//
// Answer rule: after agrl.NormalizeAnswer (which drops surrounding space, one trailing period
// and a leading "+"), the answer must be an optional "-" followed by decimal digits, and its
// value must equal the gold value. So "-5", "+5", "5." and "005" are read as numbers, while
// "5.0", "5e0", "1,000", "- 5" and "five" are wrong (see CheckAnswer).
//
// The preset Rubric reproduces the seed recipe: 0.2 format (agrl.WellFormed) + 0.3 correct
// tool call (CalledCorrectly) + 0.5 correct answer (agrl.ExactAnswer), with turns and tool
// errors logged at weight 0. Expert calls the tool once and copies its output; Guesser answers
// from "mental arithmetic" without the tool, for an imperfect SFT warm start.
package calc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"agrl.dev/agrl"
)

// Name is the environment's name; it prefixes task IDs and must be a task's Env.
const Name = "calc"

// ToolName is the name of the calculator tool.
const ToolName = "calc"

// PromptPrefix starts every prompt; the expression follows it.
const PromptPrefix = "Compute: "

// DefaultMaxTurns is the number of actions an episode may take unless Turns changes it.
const DefaultMaxTurns = 4

// Env is the calculator environment. The zero value and New() are the default (4 turns).
// Env is a value: setters return a copy.
type Env struct {
	maxTurns int
}

var _ agrl.Env = Env{}

// New returns the default environment.
func New() Env { return Env{} }

// Turns returns a copy of the environment whose episodes may take n actions; n < 1 restores
// DefaultMaxTurns. (The setter cannot be called MaxTurns: agrl.Env already uses that name for
// the getter.)
func (e Env) Turns(n int) Env {
	if n < 1 {
		n = 0
	}
	e.maxTurns = n
	return e
}

// Name returns "calc".
func (e Env) Name() string { return Name }

// MaxTurns returns the turn limit of an episode.
func (e Env) MaxTurns() int {
	if e.maxTurns < 1 {
		return DefaultMaxTurns
	}
	return e.maxTurns
}

// Tools documents the calc tool.
func (e Env) Tools() []agrl.Tool {
	return []agrl.Tool{{
		Name: ToolName,
		Args: "expr: integers, + - * / and parentheses, at most 256 bytes",
		Doc:  "the exact int64 value; / truncates toward zero",
	}}
}

// level holds the generator's knobs for one difficulty.
type level struct {
	minOps, maxOps       int
	minDigits, maxDigits int
	parens               bool  // at least one pair required; without it, none allowed
	wideOperand          bool  // at least one operand must have maxDigits digits
	limit                int64 // bound on every intermediate |value|
}

var levels = map[agrl.Difficulty]level{
	agrl.Easy:    {minOps: 1, maxOps: 1, minDigits: 1, maxDigits: 2, limit: 1e4},
	agrl.Medium:  {minOps: 2, maxOps: 3, minDigits: 2, maxDigits: 2, limit: 1e6},
	agrl.Hard:    {minOps: 4, maxOps: 5, minDigits: 2, maxDigits: 3, parens: true, limit: 1e8},
	agrl.Extreme: {minOps: 6, maxOps: 7, minDigits: 3, maxDigits: 4, parens: true, wideOperand: true, limit: 1e12},
}

// maxTries bounds the rejection sampling of one task. A try succeeds most of the time, so
// running out means a bug.
const maxTries = 1000

// Generate draws one task of difficulty d.
func (e Env) Generate(rng *rand.Rand, d agrl.Difficulty) (agrl.Task, error) {
	lv, ok := levels[d]
	if !ok {
		return agrl.Task{}, fmt.Errorf("calc: invalid difficulty %d", int(d))
	}
	if rng == nil {
		return agrl.Task{}, errors.New("calc: Generate needs a random source")
	}
	for range maxTries {
		ops := lv.minOps + rng.IntN(lv.maxOps-lv.minOps+1)
		n := lv.gen(rng, ops)
		if n == nil {
			continue
		}
		var b strings.Builder
		n.write(&b)
		expr := b.String()
		if strings.Contains(expr, "(") != lv.parens || (lv.wideOperand && !n.hasDigits(lv.maxDigits)) {
			continue
		}
		if _, err := eval(expr, true, lv.limit); err == nil {
			return NewTask(expr, d)
		}
	}
	return agrl.Task{}, fmt.Errorf("calc: no %s task after %d tries", d, maxTries)
}

// NewTask builds the task that asks for the value of expr, a hand-written expression for
// example. It fails when Eval does or when d is invalid.
func NewTask(expr string, d agrl.Difficulty) (agrl.Task, error) {
	if !d.Valid() {
		return agrl.Task{}, fmt.Errorf("calc: invalid difficulty %d", int(d))
	}
	v, err := Eval(expr)
	if err != nil {
		return agrl.Task{}, fmt.Errorf("calc: %q: %w", expr, err)
	}
	prompt := PromptPrefix + expr
	return agrl.Task{
		ID:         agrl.TaskID(Name, prompt),
		Env:        Name,
		Prompt:     prompt,
		Answer:     strconv.FormatInt(v, 10),
		Difficulty: d,
		Meta:       map[string]string{"expr": expr},
	}, nil
}

// node is an expression tree built by the generator; op is 0 for a number.
type node struct {
	op          byte
	left, right *node
	val         int64
}

// gen builds a random tree with ops operators, or nil when a value leaves ±limit.
// A division's divisor is a number chosen among the divisors of the dividend, so divisions
// are exact; when the dividend has none in range, the operator becomes + - or *.
func (lv level) gen(rng *rand.Rand, ops int) *node {
	if ops == 0 {
		return &node{val: lv.operand(rng)}
	}
	op := "+-*/"[rng.IntN(4)]
	var l, r *node
	if op == '/' && ops == 1 {
		if a, d, ok := lv.quotient(rng); ok {
			l, r = &node{val: a}, &node{val: d}
		} else {
			op = "+-*"[rng.IntN(3)]
		}
	}
	switch {
	case l != nil:
	case op == '/':
		if l = lv.gen(rng, ops-1); l == nil {
			return nil
		}
		if ds := lv.divisors(l.val); len(ds) > 0 {
			r = &node{val: ds[rng.IntN(len(ds))]}
		} else {
			op = "+-*"[rng.IntN(3)]
			r = &node{val: lv.operand(rng)}
		}
	default:
		k := rng.IntN(ops)
		if l = lv.gen(rng, k); l == nil {
			return nil
		}
		if r = lv.gen(rng, ops-1-k); r == nil {
			return nil
		}
	}
	p := parser{exact: true, limit: lv.limit}
	v, err := p.apply(op, l.val, r.val)
	if err != nil {
		return nil
	}
	return &node{op: op, left: l, right: r, val: v}
}

// operand draws a number whose digit count is uniform in [minDigits, maxDigits].
func (lv level) operand(rng *rand.Rand) int64 {
	lo, hi := digitRange(lv.minDigits + rng.IntN(lv.maxDigits-lv.minDigits+1))
	return lo + rng.Int64N(hi-lo+1)
}

// quotient draws a division of two operands a/d with an exact quotient of at least 2 and
// d > 1, so that the division is never trivial ("84/1", "84/84").
func (lv level) quotient(rng *rand.Rand) (a, d int64, ok bool) {
	for range 10 {
		d = lv.operand(rng)
		lo, hi := digitRange(lv.minDigits + rng.IntN(lv.maxDigits-lv.minDigits+1))
		qlo, qhi := max(2, (lo+d-1)/d), hi/d
		if d > 1 && qlo <= qhi {
			return d * (qlo + rng.Int64N(qhi-qlo+1)), d, true
		}
	}
	return 0, 0, false
}

// divisors lists the operands in range that divide v, leaving out 1 and |v| when others exist.
func (lv level) divisors(v int64) []int64 {
	lo, _ := digitRange(lv.minDigits)
	_, hi := digitRange(lv.maxDigits)
	var ds, trivial []int64
	for d := lo; d <= hi; d++ {
		switch {
		case v%d != 0:
		case d == 1 || d == v || d == -v:
			trivial = append(trivial, d)
		default:
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		return trivial
	}
	return ds
}

// digitRange returns the smallest and largest positive numbers of n digits.
func digitRange(n int) (lo, hi int64) {
	lo = 1
	for range n - 1 {
		lo *= 10
	}
	hi = lo*10 - 1
	return lo, hi
}

func prec(op byte) int {
	switch op {
	case '+', '-':
		return 1
	case '*', '/':
		return 2
	}
	return 3
}

// write prints the tree with the parentheses its shape needs: a child of lower precedence, and
// a right child of equal precedence except under + or in a product of products.
func (n *node) write(b *strings.Builder) {
	if n.op == 0 {
		b.WriteString(strconv.FormatInt(n.val, 10))
		return
	}
	writeChild(b, n.left, prec(n.left.op) < prec(n.op))
	b.WriteByte(n.op)
	pr, pn := prec(n.right.op), prec(n.op)
	writeChild(b, n.right, pr < pn || (pr == pn && n.op != '+' && !(n.op == '*' && n.right.op == '*')))
}

func writeChild(b *strings.Builder, n *node, parens bool) {
	if parens {
		b.WriteByte('(')
	}
	n.write(b)
	if parens {
		b.WriteByte(')')
	}
}

// hasDigits reports whether some operand of the tree has n digits.
func (n *node) hasDigits(d int) bool {
	if n.op == 0 {
		return len(strconv.FormatInt(n.val, 10)) == d
	}
	return n.left.hasDigits(d) || n.right.hasDigits(d)
}

// Reset checks the task and starts an episode. The prompt must be PromptPrefix followed by
// Meta["expr"], and the expression must evaluate to the gold answer.
func (e Env) Reset(task agrl.Task) (agrl.Session, string, error) {
	if task.Env != Name {
		return nil, "", fmt.Errorf("calc: task %q belongs to env %q", task.ID, task.Env)
	}
	if !task.Difficulty.Valid() {
		return nil, "", fmt.Errorf("calc: task %q has invalid difficulty %d", task.ID, int(task.Difficulty))
	}
	expr, ok := task.Meta["expr"]
	if !ok {
		return nil, "", fmt.Errorf("calc: task %q has no meta \"expr\"", task.ID)
	}
	if task.Prompt != PromptPrefix+expr {
		return nil, "", fmt.Errorf("calc: task %q: prompt %q does not pose expr %q", task.ID, task.Prompt, expr)
	}
	v, err := Eval(expr)
	if err != nil {
		return nil, "", fmt.Errorf("calc: task %q: expr %q: %w", task.ID, expr, err)
	}
	if gold := strconv.FormatInt(v, 10); task.Answer != gold {
		return nil, "", fmt.Errorf("calc: task %q: answer %q, but %s = %s", task.ID, task.Answer, expr, gold)
	}
	return &session{gold: task.Answer}, task.Prompt, nil
}

type session struct {
	gold string
}

// Step runs one calc call or checks the answer.
func (s *session) Step(a agrl.Action) agrl.StepResult {
	switch a.Kind {
	case agrl.AnswerAction:
		return agrl.StepResult{Done: true, Correct: CheckAnswer(a.Answer, s.gold)}
	case agrl.ToolCall:
		if a.Tool != ToolName {
			msg := fmt.Sprintf("unknown tool %q, the only tool is calc", truncate(a.Tool, 32))
			return agrl.StepResult{Observation: "error: " + msg, ToolError: msg}
		}
		v, err := Eval(agrl.UnquoteArg(a.Args))
		if err != nil {
			return agrl.StepResult{Observation: "error: " + err.Error(), ToolError: err.Error()}
		}
		return agrl.StepResult{Observation: strconv.FormatInt(v, 10)}
	}
	return agrl.StepResult{Observation: "error: not a tool call or an answer", ToolError: "unexpected action"}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// CheckAnswer reports whether answer is a correct answer for the gold value: after
// agrl.NormalizeAnswer it must read as an optional "-" and decimal digits ("+5", "005" and
// "5." are fine; "5.0", "1,000" and "five" are not) with the gold's value. Answers longer than
// 64 bytes are wrong.
func CheckAnswer(answer, gold string) bool {
	a, ok := canonical(agrl.NormalizeAnswer(answer))
	if !ok {
		return false
	}
	g, ok := canonical(agrl.NormalizeAnswer(gold))
	return ok && a == g
}

// canonical returns the decimal integer s without leading zeros (and "0" for "-0").
func canonical(s string) (string, bool) {
	if len(s) > 64 {
		return "", false
	}
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	if s == "" {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return "", false
		}
	}
	s = strings.TrimLeft(s, "0")
	switch {
	case s == "":
		return "0", true
	case neg:
		return "-" + s, true
	}
	return s, true
}
