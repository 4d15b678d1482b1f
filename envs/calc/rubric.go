package calc

import (
	"strconv"

	"agrl.dev/agrl"
)

// Rubric returns the preset: the seed recipe of 0.2 format (agrl.WellFormed), 0.3 correct tool
// call (CalledCorrectly) and 0.5 correct answer (agrl.ExactAnswer), plus "turns"
// (agrl.TurnCount) and "tool_errors" (agrl.ToolErrors) logged at weight 0. An expert episode
// scores 1.0, a correct answer without the tool 0.7, a correct tool call followed by a wrong
// answer 0.5, and an episode of invalid actions 0.
func Rubric() agrl.Rubric {
	return agrl.NewRubric().
		Add("format", agrl.WellFormed, 0.2).
		Add("tool", CalledCorrectly, 0.3).
		Add("answer", agrl.ExactAnswer, 0.5).
		Add("turns", agrl.TurnCount, 0).
		Add("tool_errors", agrl.ToolErrors, 0)
}

// CalledCorrectly is 1 when some calc call of the episode evaluated without error to the gold
// value (the call's argument is evaluated again, so the score does not depend on what the
// observation says), else 0. It is 0 when the task's answer is not an integer.
var CalledCorrectly agrl.RewardFunc = calledCorrectly

func calledCorrectly(ep *agrl.Episode) float64 {
	gold, err := strconv.ParseInt(ep.Task.Answer, 10, 64)
	if err != nil {
		return 0
	}
	for _, t := range ep.Turns {
		if t.Action.Kind != agrl.ToolCall || t.Action.Tool != ToolName || t.ToolError != "" {
			continue
		}
		if v, err := Eval(agrl.UnquoteArg(t.Action.Args)); err == nil && v == gold {
			return 1
		}
	}
	return 0
}
