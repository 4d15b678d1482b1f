package calc

import (
	"errors"
	"math"
	"math/big"
)

// refEval is an independent reference for Eval, used by the differential tests: a
// shunting-yard evaluator over math/big integers. It accepts the same grammar and reports an
// error for anything Eval must reject (syntax, depth, length, division by zero, any value
// outside int64).
func refEval(s string) (int64, error) {
	if len(s) > MaxExprBytes {
		return 0, errors.New("too long")
	}
	minI, maxI := big.NewInt(math.MinInt64), big.NewInt(math.MaxInt64)
	inRange := func(v *big.Int) bool { return v.Cmp(minI) >= 0 && v.Cmp(maxI) <= 0 }
	var vals []*big.Int
	var ops []byte // '(' , binary + - * /, unary 'n' (minus) and 'p' (plus)
	var scope []byte
	maxDepth := 0
	prec := func(op byte) int {
		switch op {
		case '+', '-':
			return 1
		case '*', '/':
			return 2
		case 'n', 'p':
			return 3
		}
		return 0
	}
	failed := error(nil)
	apply := func(op byte) {
		switch op {
		case 'n', 'p':
			v := vals[len(vals)-1]
			if op == 'n' {
				v = new(big.Int).Neg(v)
			}
			vals[len(vals)-1] = v
			if !inRange(v) && failed == nil {
				failed = errors.New("overflow")
			}
			return
		}
		a, b := vals[len(vals)-2], vals[len(vals)-1]
		vals = vals[:len(vals)-2]
		r := new(big.Int)
		switch op {
		case '+':
			r.Add(a, b)
		case '-':
			r.Sub(a, b)
		case '*':
			r.Mul(a, b)
		case '/':
			if b.Sign() == 0 {
				if failed == nil {
					failed = errors.New("div by zero")
				}
				r.SetInt64(0)
			} else {
				r.Quo(a, b)
			}
		}
		if !inRange(r) && failed == nil {
			failed = errors.New("overflow")
		}
		vals = append(vals, r)
	}
	// closeUnary ends the scope of the unary signs whose operand just finished.
	closeUnary := func() {
		for len(scope) > 0 && scope[len(scope)-1] == 'u' {
			scope = scope[:len(scope)-1]
		}
	}
	expectOperand := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			continue
		case c >= '0' && c <= '9':
			if !expectOperand {
				return 0, errors.New("syntax")
			}
			j := i
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			v, _ := new(big.Int).SetString(s[i:j], 10)
			if !inRange(v) && failed == nil {
				failed = errors.New("overflow")
			}
			vals = append(vals, v)
			i = j - 1
			expectOperand = false
			closeUnary()
		case c == '(':
			if !expectOperand {
				return 0, errors.New("syntax")
			}
			ops = append(ops, '(')
			scope = append(scope, '(')
			maxDepth = max(maxDepth, len(scope))
		case c == ')':
			if expectOperand {
				return 0, errors.New("syntax")
			}
			for len(ops) > 0 && ops[len(ops)-1] != '(' {
				apply(ops[len(ops)-1])
				ops = ops[:len(ops)-1]
			}
			if len(ops) == 0 {
				return 0, errors.New("unbalanced")
			}
			ops = ops[:len(ops)-1]
			scope = scope[:len(scope)-1]
			closeUnary()
		case c == '+' || c == '-' || c == '*' || c == '/':
			if expectOperand {
				if c == '*' || c == '/' {
					return 0, errors.New("syntax")
				}
				u := byte('p')
				if c == '-' {
					u = 'n'
				}
				ops = append(ops, u)
				scope = append(scope, 'u')
				maxDepth = max(maxDepth, len(scope))
				continue
			}
			for len(ops) > 0 && prec(ops[len(ops)-1]) >= prec(c) {
				apply(ops[len(ops)-1])
				ops = ops[:len(ops)-1]
			}
			ops = append(ops, c)
			expectOperand = true
		default:
			return 0, errors.New("syntax")
		}
	}
	if expectOperand {
		return 0, errors.New("syntax")
	}
	for len(ops) > 0 {
		op := ops[len(ops)-1]
		if op == '(' {
			return 0, errors.New("unbalanced")
		}
		apply(op)
		ops = ops[:len(ops)-1]
	}
	if maxDepth > MaxDepth {
		return 0, errors.New("too deep")
	}
	if failed != nil {
		return 0, failed
	}
	return vals[0].Int64(), nil
}
