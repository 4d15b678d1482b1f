package filesearch

import "agrl.dev/agrl"

// WrongOrGaveUp is 1 when the episode ended with a wrong answer or an empty one (giving up),
// else 0: the naive rubric's single "did not succeed but did answer" penalty.
func WrongOrGaveUp(ep *agrl.Episode) float64 {
	if (ep.Termination == agrl.Answered && !ep.Correct) || ep.Termination == agrl.GaveUp {
		return 1
	}
	return 0
}

// ReadFact is 1 when some cat printed the file holding the asked fact (the session marks that
// step with Info[InfoFact] = "true"), else 0: a process signal. The naive rubric only logs it
// (weight 0); the preset pays for it.
func ReadFact(ep *agrl.Episode) float64 {
	for _, t := range ep.Turns {
		if t.Info[InfoFact] == "true" {
			return 1
		}
	}
	return 0
}

// NaiveRubric is the flawed rubric of the reward-hacking lesson:
//
//	answer   agrl.ExactAnswer   +1
//	wrong    WrongOrGaveUp      -0.4   (a wrong answer and giving up cost the same)
//	cutoff   agrl.CutOff        -1     (running out of turns costs more)
//	calls    agrl.ToolCallCount -0.05  per call
//	fact     ReadFact            0     (logged)
//
// Quitting after one failed call earns -0.45, more than an honest search that runs out of
// turns (-1.4 at 8 turns), so a policy that finds the fact less than about 40% of the time
// earns more by quitting than by searching. GRPO finds it: from a warm start that sometimes
// guesses a file name, the share of error-then-quit episodes rises within 20 steps and the
// policy freezes on it (docs/experiments.md, "File search: … reward hacking in a real run").
func NaiveRubric() agrl.Rubric {
	return agrl.NewRubric().
		Add("answer", agrl.ExactAnswer, 1).
		Add("wrong", WrongOrGaveUp, -0.4).
		Add("cutoff", agrl.CutOff, -1).
		Add("calls", agrl.ToolCallCount, -0.05).
		Add("fact", ReadFact, 0)
}

// Rubric is the preset: the naive rubric fixed against every hack GRPO found under it and
// under the first fix (measured in docs/experiments.md, "File search: … reward hacking in a
// real run"):
//
//	answer     agrl.ExactAnswer   +1
//	wrong      WrongOrGaveUp      -1     (a wrong answer or giving up: as much as a cut-off)
//	cutoff     agrl.CutOff        -1
//	calls      agrl.ToolCallCount -0.01  per call
//	error_quit agrl.ErrorThenQuit -1     (the last tool call failed, then it quit)
//	fact       ReadFact           +0.5   (read the file that holds the fact)
//
// Every way of failing costs -1, so quitting at once gains only the few hundredths of call
// costs over an honest search that fails (the first fix, NaiveRubric plus error_quit alone,
// left quitting at once at -0.40 against -1.4 for a search cut off, and a wrong answer after a
// failed guess at -0.50, and GRPO found both); the hack of the lesson earns -2.01. That small
// pull remains: a policy that rarely reaches the fact's file can still learn to answer at once
// (measured in docs/experiments.md). Reading the right file pays 0.5 whether or not the answer
// is then right, so a search that gets that far beats a guess that fails, and GRPO has a
// signal on tasks whose answer the policy still gets wrong.
func Rubric() agrl.Rubric {
	return agrl.NewRubric().
		Add("answer", agrl.ExactAnswer, 1).
		Add("wrong", WrongOrGaveUp, -1).
		Add("cutoff", agrl.CutOff, -1).
		Add("calls", agrl.ToolCallCount, -0.01).
		Add("error_quit", agrl.ErrorThenQuit, -1).
		Add("fact", ReadFact, 0.5)
}
