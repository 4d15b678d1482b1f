package agrl

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// EvalResult summarises scored episodes of one split. Rates are fractions in 0..1.
type EvalResult struct {
	// Tasks is the number of distinct tasks, N the number of episodes, K the samples per task
	// (the fewest any task has, when they differ).
	Tasks int `json:"tasks"`
	N     int `json:"n"`
	K     int `json:"k"`
	// Success is the fraction of episodes answered correctly (mean@k of correctness).
	Success float64 `json:"success"`
	// PassAtK is the mean over tasks of the unbiased pass@K estimate (PassAtK function): with K
	// samples of every task, the fraction of tasks with at least one correct episode.
	PassAtK float64 `json:"pass_at_k"`
	// PassAt holds the unbiased pass@k for k = 1, 2, 4, … up to K (and K itself), estimated
	// from all of each task's samples (keys are k).
	PassAt map[int]float64 `json:"pass_at,omitempty"`
	// MeanReward is the mean rubric reward (mean@k of reward).
	MeanReward float64 `json:"mean_reward"`
	// MeanTurns is the mean number of actions per episode.
	MeanTurns float64 `json:"mean_turns"`
	// ToolCallRate is the fraction of episodes that called at least one tool (the metric
	// MetricToolCallRate).
	ToolCallRate float64 `json:"tool_call_rate"`
	// MeanToolCalls is the mean number of tool calls per episode (0 in records written
	// before it existed).
	MeanToolCalls float64 `json:"mean_tool_calls"`
	// ToolErrorRate is the fraction of tool calls that failed.
	ToolErrorRate float64 `json:"tool_error_rate"`
	// InvalidRate is the fraction of actions that broke the protocol.
	InvalidRate float64 `json:"invalid_rate"`
	// SuccessByDifficulty is Success per difficulty (JSON keys are the names, "easy"…).
	SuccessByDifficulty map[Difficulty]float64 `json:"success_by_difficulty,omitempty"`
	// Terminations counts episodes per termination reason.
	Terminations map[Termination]int `json:"terminations,omitempty"`
}

// Evaluate summarises scored episodes: K samples per task are grouped by task ID (K is the
// largest group seen). It is an error to pass no episodes.
func Evaluate(eps []*Episode) (EvalResult, error) {
	if len(eps) == 0 {
		return EvalResult{}, errors.New("agrl: Evaluate of no episodes")
	}
	var r EvalResult
	r.N = len(eps)
	r.Terminations = map[Termination]int{}
	byTask := map[string][]*Episode{}
	var order []string
	perDiff := map[Difficulty][2]int{} // correct, total
	calls, callErrs, actions, invalid := 0, 0, 0, 0
	for i, ep := range eps {
		if ep == nil {
			return EvalResult{}, fmt.Errorf("agrl: Evaluate: episode %d is nil", i)
		}
		if math.IsNaN(ep.Reward) || math.IsInf(ep.Reward, 0) {
			return EvalResult{}, fmt.Errorf("agrl: Evaluate: episode %d (%s) has reward %v", i, ep.Task.ID, ep.Reward)
		}
		if _, ok := byTask[ep.Task.ID]; !ok {
			order = append(order, ep.Task.ID)
		}
		byTask[ep.Task.ID] = append(byTask[ep.Task.ID], ep)
		r.Success += b2f(ep.Correct)
		r.MeanReward += ep.Reward
		r.MeanTurns += float64(len(ep.Turns))
		r.ToolCallRate += b2f(ep.ToolCalls() > 0)
		calls += ep.ToolCalls()
		callErrs += ep.ToolErrors()
		actions += len(ep.Turns)
		invalid += ep.InvalidActions()
		r.Terminations[ep.Termination]++
		c := perDiff[ep.Task.Difficulty]
		c[0] += int(b2f(ep.Correct))
		c[1]++
		perDiff[ep.Task.Difficulty] = c
	}
	n := float64(r.N)
	r.Success /= n
	r.MeanReward /= n
	r.MeanTurns /= n
	r.ToolCallRate /= n
	r.MeanToolCalls = float64(calls) / n
	if calls > 0 {
		r.ToolErrorRate = float64(callErrs) / float64(calls)
	}
	if actions > 0 {
		r.InvalidRate = float64(invalid) / float64(actions)
	}
	r.Tasks = len(order)
	r.K = len(byTask[order[0]])
	for _, id := range order {
		r.K = min(r.K, len(byTask[id]))
	}
	var ks []int
	for k := 1; k < r.K; k *= 2 {
		ks = append(ks, k)
	}
	ks = append(ks, r.K)
	r.PassAt = map[int]float64{}
	for _, id := range order {
		group := byTask[id]
		c := 0
		for _, ep := range group {
			c += int(b2f(ep.Correct))
		}
		for _, k := range ks {
			p, err := PassAtK(len(group), c, k)
			if err != nil {
				return EvalResult{}, err
			}
			r.PassAt[k] += p / float64(r.Tasks)
		}
	}
	r.PassAtK = r.PassAt[r.K]
	r.SuccessByDifficulty = map[Difficulty]float64{}
	for d, c := range perDiff {
		r.SuccessByDifficulty[d] = float64(c[0]) / float64(c[1])
	}
	return r, nil
}

// Difficulties returns the difficulties present in SuccessByDifficulty, easiest first.
func (r EvalResult) Difficulties() []Difficulty {
	var ds []Difficulty
	for d := range r.SuccessByDifficulty {
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds
}

// BeforeAfter returns the run's evaluations labelled LabelSFT (the policy GRPO starts from)
// and LabelFinal (after GRPO), by split; the last record wins. Either map is empty when the
// run did not record it (no warm start, or not finished). A split's before is left out when a
// resume with new settings changed what an evaluation measures after it was made
// (BeforeAfterChanges names the changes).
func (r *Run) BeforeAfter() (before, after map[Split]EvalResult) {
	before, after = map[Split]EvalResult{}, map[Split]EvalResult{}
	b, a, changed := r.startAndFinal()
	for s, e := range a {
		after[s] = e.EvalResult
	}
	for s, e := range b {
		if len(changed[s]) == 0 { // else measured under other settings: not a before of this after
			before[s] = e.EvalResult
		}
	}
	return before, after
}

// startAndFinal returns the last evaluation of each split labelled LabelSFT and LabelFinal,
// and for each split that has both, the changes to what its evaluation measures made between
// them (splitEvalChanges).
func (r *Run) startAndFinal() (start, final map[Split]EvalRecord, changed map[Split][]SettingChange) {
	start, final, changed = map[Split]EvalRecord{}, map[Split]EvalRecord{}, map[Split][]SettingChange{}
	for _, e := range r.Evals {
		switch e.Label {
		case LabelSFT:
			start[e.Split] = e
		case LabelFinal:
			final[e.Split] = e
		}
	}
	for s, e := range start {
		if f, ok := final[s]; ok {
			changed[s] = splitEvalChanges(s, r.EvalChangesBetween(e.Settings, f.Settings))
		}
	}
	return start, final, changed
}

// BeforeAfterChanges returns the changes to the evaluation settings made (by resuming with new
// settings) between the evaluation of the policy GRPO started from and the final one: when
// there are any, BeforeAfter leaves out the splits' "before", which measured something else
// (another env, other tasks, another temperature…). Nil when the two compare.
func (r *Run) BeforeAfterChanges() []SettingChange {
	_, _, changed := r.startAndFinal()
	var out []SettingChange
	for _, s := range []Split{Dev, Test, OOD} {
		for _, c := range changed[s] {
			if !slices.ContainsFunc(out, func(x SettingChange) bool { return x.Setting == c.Setting }) {
				out = append(out, c)
			}
		}
	}
	return out
}

// FormatBeforeAfter renders a before/after table as text, one row per split (dev, test, ood)
// with success, mean reward and tool-call rate before, after and the change in points.
func FormatBeforeAfter(before, after map[Split]EvalResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-6s %23s %23s %23s\n", "split", "success", "mean reward", "tool-call rate")
	fmt.Fprintf(&b, "%-6s %23s %23s %23s\n", "", "before → after (Δ)", "before → after (Δ)", "before → after (Δ)")
	for _, s := range []Split{Dev, Test, OOD} {
		a, okA := after[s]
		bf, okB := before[s]
		if !okA && !okB {
			continue
		}
		cell := func(x, y float64, okX, okY bool, pts bool) string {
			f := func(v float64, ok bool) string {
				if !ok {
					return "–"
				}
				if pts {
					return fmt.Sprintf("%.1f%%", 100*v)
				}
				return fmt.Sprintf("%.3f", v)
			}
			d := ""
			if okX && okY {
				if pts {
					d = fmt.Sprintf(" (%+.1f)", 100*(y-x))
				} else {
					d = fmt.Sprintf(" (%+.3f)", y-x)
				}
			}
			return f(x, okX) + " → " + f(y, okY) + d
		}
		fmt.Fprintf(&b, "%-6s %23s %23s %23s\n", s,
			cell(bf.Success, a.Success, okB, okA, true),
			cell(bf.MeanReward, a.MeanReward, okB, okA, false),
			cell(bf.ToolCallRate, a.ToolCallRate, okB, okA, true))
	}
	return b.String()
}
