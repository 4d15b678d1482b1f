package agrl

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// Labels of the evaluations that bracket GRPO in eval.jsonl (EvalRecord.Label). Evaluations
// during training have no label.
const (
	// LabelSFT marks the evaluation of the policy GRPO starts from (after the warm start, or
	// as loaded with From), at step 0: the "before" of a before/after table.
	LabelSFT = "sft"
	// LabelFinal marks the evaluation after the last GRPO step: the "after".
	LabelFinal = "final"
)

// decodeConfig reads config.json into r.Config (typed) and r.ConfigJSON (as written). The file
// must hold a JSON object; keys GRPOConfig does not know are left to Setting.
func decodeConfig(b []byte, r *Run) error {
	var generic map[string]json.RawMessage
	if err := json.Unmarshal(b, &generic); err != nil {
		return err
	}
	if generic == nil {
		return errors.New("not a JSON object")
	}
	if err := json.Unmarshal(b, &r.Config); err != nil {
		return err
	}
	r.ConfigJSON = json.RawMessage(bytes.Clone(b))
	return nil
}

// Setting returns one setting of config.json by its JSON name, decoded generically (numbers
// are float64, objects map[string]any): a dotted path such as "optimizer.lr" or
// "warm_start.sft.steps" reaches into nested objects. It reads keys that Config does not know
// (a configuration written by another tool, or by a later version); Config is the typed way to
// read a GRPO run's settings.
func (r *Run) Setting(path string) (any, bool) {
	var m map[string]any
	if r == nil || json.Unmarshal(r.ConfigJSON, &m) != nil || m == nil {
		return nil, false
	}
	if v, ok := m[path]; ok {
		return v, true
	}
	var cur any = m
	for _, part := range strings.Split(path, ".") {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = obj[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// Eval returns the last evaluation of split s with the label (LabelSFT, LabelFinal, or "" for
// those during training), and whether there is one.
func (r *Run) Eval(s Split, label string) (EvalResult, bool) {
	for i := len(r.Evals) - 1; i >= 0; i-- {
		if e := r.Evals[i]; e.Split == s && e.Label == label {
			return e.EvalResult, true
		}
	}
	return EvalResult{}, false
}

// EvalAt returns the last evaluation of split s at a step (whatever its label; step 0 is the
// LabelSFT one), and whether there is one.
func (r *Run) EvalAt(s Split, step int) (EvalResult, bool) {
	for i := len(r.Evals) - 1; i >= 0; i-- {
		if e := r.Evals[i]; e.Split == s && e.Step == step {
			return e.EvalResult, true
		}
	}
	return EvalResult{}, false
}

// Before returns the evaluation of split s labelled LabelSFT: the policy before GRPO.
func (r *Run) Before(s Split) (EvalResult, bool) { return r.Eval(s, LabelSFT) }

// Final returns the evaluation of split s labelled LabelFinal: the policy after GRPO.
func (r *Run) Final(s Split) (EvalResult, bool) { return r.Eval(s, LabelFinal) }

// EvalsOf returns the evaluations of split s in the order they were written.
func (r *Run) EvalsOf(s Split) []EvalRecord {
	var out []EvalRecord
	for _, e := range r.Evals {
		if e.Split == s {
			out = append(out, e)
		}
	}
	return out
}

// EvalSeries returns, for a curve over training, the steps of the evaluations of split s and
// one value of each (for instance func(e agrl.EvalResult) float64 { return e.Success }). A step
// evaluated more than once (a resumed run) keeps its last value.
func (r *Run) EvalSeries(s Split, value func(EvalResult) float64) (steps, values []float64) {
	at := map[int]int{} // step → index in steps
	for _, e := range r.EvalsOf(s) {
		if i, ok := at[e.Step]; ok {
			values[i] = value(e.EvalResult)
			continue
		}
		at[e.Step] = len(steps)
		steps = append(steps, float64(e.Step))
		values = append(values, value(e.EvalResult))
	}
	return steps, values
}
