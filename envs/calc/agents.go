package calc

import (
	"errors"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"agrl.dev/agrl"
)

// exprOf returns the episode's expression: Meta["expr"], or the prompt after PromptPrefix.
func exprOf(ep *agrl.Episode) (string, error) {
	if e, ok := ep.Task.Meta["expr"]; ok {
		return e, nil
	}
	if e, ok := strings.CutPrefix(ep.Prompt, PromptPrefix); ok {
		return e, nil
	}
	return "", errors.New("calc: episode has no expression")
}

// Expert returns the scripted expert: it calls calc on the task's expression, then answers
// the number the tool returned. It solves every task in two turns, e.g.
//
//	<tool>calc(12+7*(3-5))</tool>  ->  <obs>-2</obs>  ->  <answer>-2</answer>
//
// Should a call fail, it calls again (it never does on generated tasks).
func Expert() agrl.Agent {
	return agrl.AgentFunc(func(ep *agrl.Episode) (string, error) {
		if n := len(ep.Turns); n > 0 {
			last := ep.Turns[n-1]
			if last.Action.Kind == agrl.ToolCall && last.Action.Tool == ToolName && last.ToolError == "" {
				return agrl.AnswerText(last.Observation), nil
			}
		}
		expr, err := exprOf(ep)
		if err != nil {
			return "", err
		}
		return agrl.ToolAction(ToolName, expr), nil
	})
}

// Guesser returns an agent that answers at once, without the tool, with a "mental arithmetic"
// guess, as an imperfect teacher for an SFT warm start. Its guess is exact with probability
//
//	p = 1 - 0.15·(operators-1) - 0.1·(digits-1), at least 0.05,
//
// where digits is the longest operand's digit count: 1.0 for "3+4", 0.9 for "12+7", 0.6 for
// three operators on 2-digit numbers, 0.05 on extreme tasks. Otherwise it is off by a nonzero
// amount of at most max(3, |value|/10). The guess is deterministic for a seed and a prompt.
func Guesser(seed uint64) agrl.Agent {
	return agrl.AgentFunc(func(ep *agrl.Episode) (string, error) {
		expr, err := exprOf(ep)
		if err != nil {
			return "", err
		}
		v, err := Eval(expr)
		if err != nil {
			return agrl.AnswerText("0"), nil
		}
		h := fnv.New64a()
		h.Write([]byte(ep.Prompt))
		rng := rand.New(rand.NewPCG(seed, h.Sum64()))
		if rng.Float64() < GuessAccuracy(expr) {
			return agrl.AnswerText(strconv.FormatInt(v, 10)), nil
		}
		return agrl.AnswerText(strconv.FormatInt(perturb(rng, v), 10)), nil
	})
}

// GuessAccuracy is the probability that Guesser's answer to expr is exact.
func GuessAccuracy(expr string) float64 {
	ops, digits, run := 0, 0, 0
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		if c >= '0' && c <= '9' {
			run++
			digits = max(digits, run)
			continue
		}
		run = 0
		if strings.IndexByte("+-*/", c) >= 0 {
			ops++
		}
	}
	p := 1 - 0.15*float64(max(ops-1, 0)) - 0.1*float64(max(digits-1, 0))
	return max(p, 0.05)
}

// perturb returns v moved by a nonzero amount of at most max(3, |v|/10), never overflowing.
func perturb(rng *rand.Rand, v int64) int64 {
	m := v / 10
	if m < 0 {
		m = -m
	}
	k := 1 + rng.Int64N(max(3, m))
	up := rng.IntN(2) == 0
	if up && v > math.MaxInt64-k {
		up = false
	}
	if !up && v < math.MinInt64+k {
		up = true
	}
	if up {
		return v + k
	}
	return v - k
}

// Overconfident returns an agent that is imperfect the way an untrained model is: it trusts its
// mental arithmetic on what looks easy and is often wrong there. On an expression that LooksEasy
// it answers at once with a guess, exact with probability MentalAccuracy(expr); on any other it
// calls the tool and copies the result, as Expert does. Whether it skips the tool is therefore a
// property of the task (short expressions without parentheses), not a coin flip, so the share
// of tool calls of a policy warm-started on it is fixed by the task mix. The guess is
// deterministic for a seed and a prompt.
//
// Mixed with Expert demonstrations (calc.Recipe: 30% expert, 70% overconfident) the warm-started
// policy calls the tool on every long expression and, on short ones, now and then: GRPO's
// rollouts find that the call pays on the short ones too.
func Overconfident(seed uint64) agrl.Agent {
	expert := Expert()
	return agrl.AgentFunc(func(ep *agrl.Episode) (string, error) {
		expr, err := exprOf(ep)
		if err != nil {
			return "", err
		}
		if !LooksEasy(expr) {
			return expert.Act(ep)
		}
		v, err := Eval(expr)
		if err != nil {
			return agrl.AnswerText("0"), nil
		}
		h := fnv.New64a()
		h.Write([]byte(ep.Prompt))
		rng := rand.New(rand.NewPCG(seed^0x9e3779b97f4a7c15, h.Sum64()))
		if rng.Float64() < MentalAccuracy(expr) {
			return agrl.AnswerText(strconv.FormatInt(v, 10)), nil
		}
		return agrl.AnswerText(strconv.FormatInt(perturb(rng, v), 10)), nil
	})
}

// LooksEasy reports whether expr looks like mental arithmetic: at most three operators, no
// parentheses and no operand longer than two digits. The generator's easy (one operator) and
// medium (two or three) tasks look easy; hard and extreme ones (parentheses, four or more
// operators) do not.
func LooksEasy(expr string) bool {
	ops, run := 0, 0
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch {
		case c >= '0' && c <= '9':
			run++
			if run > 2 {
				return false
			}
			continue
		case c == '(' || c == ')':
			return false
		case strings.IndexByte("+-*/", c) >= 0:
			ops++
		}
		run = 0
	}
	return ops <= 3
}

// MentalAccuracy is the probability that Overconfident's guess at expr is exact: GuessAccuracy
// less 0.2 for every product or quotient (multiplying two-digit numbers in one's head is where
// guesses go wrong), at least 0.05. About 0.82 on the generator's easy tasks and 0.47 on medium.
func MentalAccuracy(expr string) float64 {
	p := GuessAccuracy(expr)
	p -= 0.2 * float64(strings.Count(expr, "*")+strings.Count(expr, "/"))
	return max(p, 0.05)
}
