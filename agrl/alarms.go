package agrl

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Alarms: rules of thumb that say, from a run's own metrics, that training is going wrong —
// before the final evaluation does. CheckAlarms evaluates them on the history so far; the CLI's
// progress line, the notebook's live view (nb.Live) and report.html show the ones that fire.
// Each names the metric that fired it and the entry of chapter 8 (tutorials/08-troubleshooting)
// that explains the failure and its fixes.

// Alarm is one rule that fired.
type Alarm struct {
	// Name is the rule's short name ("no-signal").
	Name string `json:"name"`
	// Metric is the metric that fired it; Value its value (over the window the rule reads) and
	// Limit the threshold it crossed.
	Metric string  `json:"metric"`
	Value  float64 `json:"value"`
	Limit  float64 `json:"limit"`
	// Step is the GRPO step it was evaluated at (the history's last).
	Step int `json:"step"`
	// Message says what it means and what to try.
	Message string `json:"message"`
	// Doc is the chapter 8 entry that explains it.
	Doc string `json:"doc"`
}

// String reads "no-signal: frac_reward_zero_std 0.92 >= 0.8 at step 40 — …".
func (a Alarm) String() string {
	return fmt.Sprintf("%s: %s %.3g (limit %.3g) at step %d — %s (%s)", a.Name, a.Metric, a.Value, a.Limit, a.Step, a.Message, a.Doc)
}

// AlarmWindow is the number of recent steps the rules average over: noise on single steps
// never fires them, and a run shorter than a window is too young to judge (except KL blow-up).
const AlarmWindow = 10

const troubleshooting = "tutorials/08-troubleshooting.ipynb"

// Metrics the alarms read that only the learner's step metrics hold.
const (
	// MetricRepeatedToolCalls is the share of a step's tool calls that repeat a call (same
	// tool, same arguments) made earlier in the same episode.
	MetricRepeatedToolCalls = "tool_calls/repeated"
	// MetricTopAnswerShare is the share of a step's tasks whose most common answer is one and
	// the same wrong answer, when two tasks or more share it (TopAnswerShare): 1 when every task
	// gets the same wrong answer, whatever it asks.
	MetricTopAnswerShare = "answer/top_share"
)

// CheckAlarms evaluates every rule on a run's history (its metrics, in step order) and its
// evaluations (nil if none yet), and returns the alarms that fire, in a fixed order:
//
//   - token-mismatch: the step trained on ids that differ from the ids sampled (any step; a
//     bug in the pipeline, never the policy's doing).
//   - no-signal: most groups' rewards are all equal (frac_reward_zero_std ≥ 0.8 over the
//     window, without dynamic sampling's refills): the loss is 0 on them and nothing is learnt
//     (chapter 8, "the loss is zero" and "nothing moves").
//   - entropy-collapse: the entropy fell below a quarter of the run's first window while half
//     the groups or more carry no signal and training success is below 0.8: the policy stopped
//     exploring before it solved the tasks (a confident policy that solves them, or that still
//     disagrees within its groups, is not stuck).
//   - kl-blowup: the KL to the reference exceeds 1 nat per token on a step, or its window mean
//     is 20× the first window's and above 0.2: a learning rate too high (chapter 8, §1) or no KL
//     penalty (§2).
//   - length-collapse / length-growth: the response length fell below 30% of the first
//     window's, or grew over 3×; turns-collapse: episodes fell to one turn on average from two
//     or more (stalling, or giving up on tools).
//   - repeated-calls: over 30% of tool calls repeat an earlier identical call (loops).
//   - one-answer: over the window, half or more of the tasks of a step get one and the same
//     wrong answer (a degenerate policy that answers alike whatever it is asked).
//   - error-then-quit: 30% or more of the episodes stop right after a failed tool call without
//     a correct answer, and the share is not falling (the shape of a reward hack, chapter 8, §3).
//   - tool-errors: fewer than 80% of tool calls succeed (tool_error_rate above 0.2).
//   - hacking: the mean reward rose by at least 0.1 from the first window while held-out (dev)
//     success did not rise (the latest dev evaluation at most 0.01 above the start's): the
//     rubric pays for something other than the task (chapter 8, §3).
func CheckAlarms(history []Metrics, evals []EvalRecord) []Alarm {
	n := len(history)
	if n == 0 {
		return nil
	}
	step := history[n-1].Step()
	var out []Alarm
	fire := func(name, metric string, value, limit float64, msg, doc string) {
		if !strings.HasPrefix(doc, "tutorials/") {
			doc = troubleshooting + doc // an entry of chapter 8
		}
		out = append(out, Alarm{Name: name, Metric: metric, Value: value, Limit: limit, Step: step,
			Message: msg, Doc: doc})
	}
	mean := func(k string, from, to int) (float64, bool) {
		s, c := 0.0, 0
		for _, m := range history[max(0, from):min(n, to)] {
			if v, ok := m[k]; ok && !math.IsNaN(v) {
				s += v
				c++
			}
		}
		if c == 0 {
			return 0, false
		}
		return s / float64(c), true
	}
	last := func(k string) (float64, bool) { return mean(k, n-AlarmWindow, n) }
	first := func(k string) (float64, bool) { return mean(k, 0, AlarmWindow) }

	// A token mismatch is a bug, not a trend: any step's counts.
	if v := history[n-1][MetricTokenMismatches]; v > 0 {
		fire("token-mismatch", MetricTokenMismatches, v, 0, "the trainer trained on token ids the sampler did not emit (a re-tokenised transcript?): the loss and its ratios are wrong", "tutorials/09-from-tiny-to-real-llm.ipynb#3.-Token-in,-token-out")
	}
	// KL blow-up judges single steps: a spike matters at once.
	if kl, ok := history[n-1][MetricKL]; ok && kl > 1 {
		fire("kl-blowup", MetricKL, kl, 1, "the policy jumped away from the reference in one step: lower the learning rate (LR, Warmup, GradClip)", "#1.-Learning-rate-too-high:-collapse")
	} else if n >= 2*AlarmWindow {
		k1, ok1 := first(MetricKL)
		k2, ok2 := last(MetricKL)
		if ok1 && ok2 && k2 > 0.2 && k2 > 20*math.Max(k1, 1e-3) {
			fire("kl-blowup", MetricKL, k2, 20*math.Max(k1, 1e-3), "the KL to the reference keeps growing: raise the KL coefficient or lower the learning rate", "#2.-No-KL-penalty:-drift")
		}
	}
	if n < AlarmWindow {
		return out
	}
	// With dynamic sampling frac_reward_zero_std counts the first rollout's groups, before the
	// refills that replace them: it says nothing about the batch trained on.
	refills, _ := last(MetricRefills)
	if v, ok := last(MetricFracRewardZeroStd); ok && v >= 0.8 && refills == 0 {
		fire("no-signal", MetricFracRewardZeroStd, v, 0.8, "most groups' rewards are all equal, so their advantages and loss are 0: easier tasks, a denser rubric, larger groups, DynamicSampling or Screen", "#5.-\"The-loss-is-zero\":-all-equal-groups")
	}
	if n >= 2*AlarmWindow {
		zs, _ := last(MetricFracRewardZeroStd)
		succ, _ := last(MetricSuccess)
		if e1, ok1 := first(MetricEntropy); ok1 && zs >= 0.5 && succ < 0.8 {
			if e2, ok2 := last(MetricEntropy); ok2 && e1 > 0 && e2 < 0.25*e1 {
				fire("entropy-collapse", MetricEntropy, e2, 0.25*e1, "the policy's entropy collapsed: it no longer explores, and its groups will agree; raise the temperature, lower the learning rate, add KL", "#5.-\"The-loss-is-zero\":-all-equal-groups")
			}
		}
		if l1, ok1 := first(MetricResponseLength); ok1 && l1 > 0 {
			if l2, ok2 := last(MetricResponseLength); ok2 {
				switch {
				case l2 < 0.3*l1:
					fire("length-collapse", MetricResponseLength, l2, 0.3*l1, "responses shrank to under a third of their length: the policy may be stalling or skipping its tool calls", "#3.-Reward-hacking")
				case l2 > 3*l1:
					fire("length-growth", MetricResponseLength, l2, 3*l1, "responses grew over 3×: rambling or looping; check the trajectories, cap MaxActionTokens", "#3.-Reward-hacking")
				}
			}
		}
		if t1, ok1 := first(MetricTurns); ok1 && t1 >= 2 {
			if t2, ok2 := last(MetricTurns); ok2 && t2 <= 1.05 {
				fire("turns-collapse", MetricTurns, t2, 1.05, "episodes fell to a single turn: the policy answers without its tools", "#3.-Reward-hacking")
			}
		}
		if q1, ok1 := first(MetricErrorThenQuit); ok1 {
			if q2, ok2 := last(MetricErrorThenQuit); ok2 && q2 >= 0.3 && q2 >= 0.8*q1 {
				fire("error-then-quit", MetricErrorThenQuit, q2, 0.3, "many episodes stop right after a failed tool call without a correct answer, and the share is not falling: check the rubric's penalties (a reward hack)", "#3.-Reward-hacking")
			}
		}
		if r1, ok1 := first(MetricReward); ok1 {
			if r2, ok2 := last(MetricReward); ok2 && r2-r1 >= 0.1 {
				if start, latest, ok := devSuccessTrend(evals); ok && latest-start <= 0.01 {
					fire("hacking", MetricReward, r2-r1, 0.1, fmt.Sprintf("the reward rose by %.2f while dev success went %.3f → %.3f: the rubric pays for something other than solving the task", r2-r1, start, latest), "#3.-Reward-hacking")
				}
			}
		}
	}
	if v, ok := last(MetricRepeatedToolCalls); ok && v > 0.3 {
		fire("repeated-calls", MetricRepeatedToolCalls, v, 0.3, "the policy repeats identical tool calls: it loops instead of using the observations", "#3.-Reward-hacking")
	}
	if v, ok := last(MetricTopAnswerShare); ok && v >= 0.5 {
		fire("one-answer", MetricTopAnswerShare, v, 0.5, "different tasks get the same answer: the policy ignores the question", "#3.-Reward-hacking")
	}
	if rate, ok := last(MetricToolCallRate); ok && rate > 0 {
		if errs, ok := last(MetricToolErrorRate); ok && errs > 0.2 {
			fire("tool-errors", MetricToolErrorRate, errs, 0.2, "fewer than 80% of tool calls succeed: look at the failing calls in the trajectories", "#3.-Reward-hacking")
		}
	}
	return out
}

// FirstAlarms replays CheckAlarms at every step of a history (with the evaluations logged up
// to that step) and returns each alarm as it was when it first fired, in the order they fired:
// when a finished run's warnings would have appeared during training.
func FirstAlarms(history []Metrics, evals []EvalRecord) []Alarm {
	var out []Alarm
	seen := map[string]bool{}
	for i := 1; i <= len(history); i++ {
		var ev []EvalRecord
		for _, e := range evals {
			if e.Step <= history[i-1].Step() {
				ev = append(ev, e)
			}
		}
		for _, a := range CheckAlarms(history[:i], ev) {
			if !seen[a.Name] {
				seen[a.Name] = true
				out = append(out, a)
			}
		}
	}
	return out
}

// devSuccessTrend returns the dev success of a run's first evaluation (the start's, label
// "sft", else the earliest) and of its latest, when there are at least two.
func devSuccessTrend(evals []EvalRecord) (start, latest float64, ok bool) {
	var dev []EvalRecord
	for _, e := range evals {
		if e.Split == Dev {
			dev = append(dev, e)
		}
	}
	if len(dev) < 2 {
		return 0, 0, false
	}
	sort.SliceStable(dev, func(i, j int) bool {
		if dev[i].Step != dev[j].Step {
			return dev[i].Step < dev[j].Step
		}
		return dev[i].Label == LabelSFT // the start's evaluation first at its step
	})
	return dev[0].Success, dev[len(dev)-1].Success, true
}

// TopAnswerShare is MetricTopAnswerShare of a batch of episodes: group them by task and take
// each task's most common non-empty answer; among the tasks whose most common answer is wrong,
// find the answer most of them share; return the share of all the tasks that give it — when at
// least two do, else 0. Right answers never count (different tasks may share a gold answer),
// nor does a lone wrong one: 1 means every task gets the same wrong answer.
func TopAnswerShare(eps []*Episode) float64 {
	byTask := map[string]map[string]int{}
	gold := map[string]string{}
	for _, ep := range eps {
		if byTask[ep.Task.ID] == nil {
			byTask[ep.Task.ID] = map[string]int{}
		}
		gold[ep.Task.ID] = ep.Task.Answer
		if ep.Answer != "" && !ep.Correct {
			byTask[ep.Task.ID][ep.Answer]++
		}
	}
	modal := map[string]int{}
	for id, answers := range byTask {
		best, bestN := "", 0
		for a, c := range answers {
			if c > bestN || c == bestN && a < best {
				best, bestN = a, c
			}
		}
		if bestN > 0 && best != gold[id] {
			modal[best]++
		}
	}
	top := 0
	for _, c := range modal {
		top = max(top, c)
	}
	if top < 2 {
		return 0
	}
	return float64(top) / float64(len(byTask))
}
