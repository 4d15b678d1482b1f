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
// step with Info[InfoFact] = "true"), else 0. It is a process signal, logged with weight 0 in
// the presets.
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
// earns more by quitting than by searching.
func NaiveRubric() agrl.Rubric {
	return agrl.NewRubric().
		Add("answer", agrl.ExactAnswer, 1).
		Add("wrong", WrongOrGaveUp, -0.4).
		Add("cutoff", agrl.CutOff, -1).
		Add("calls", agrl.ToolCallCount, -0.05).
		Add("fact", ReadFact, 0)
}

// Rubric is the preset: NaiveRubric plus a penalty of -1 for an episode whose last tool call
// failed and which then gave up or stopped without a correct answer (agrl.ErrorThenQuit).
// The hack then earns -1.45, less than honest exploration.
func Rubric() agrl.Rubric {
	return NaiveRubric().Add("error_quit", agrl.ErrorThenQuit, -1)
}
