package multihop

import (
	"fmt"
	"strings"

	"agrl.dev/agrl"
)

// Expert returns the scripted expert. It reads the relation chain and the start entity from
// Task.Meta, searches each hop with the relation's query ("Dakor born", "mentor of Dakor",
// "Zorni founded"…), takes the next entity from the fact it finds in the observation text,
// and answers the last one. If a search did not show the fact it needs, it retries once with
// the fact's own words ("Dakor was born in"), then gives up. It solves every task, with any
// TopK, in hops+1 turns.
func Expert() agrl.Agent { return agrl.AgentFunc(expertAct) }

func expertAct(ep *agrl.Episode) (string, error) {
	s, err := parseSpec(ep.Task.Meta)
	if err != nil {
		return "", fmt.Errorf("multihop expert: %w", err)
	}
	cur, hop, misses := s.start, 0, 0
	for _, t := range ep.Turns {
		if hop == len(s.chain) {
			break
		}
		if t.Action.Kind != agrl.ToolCall || t.Action.Tool != "search" {
			continue
		}
		if next, ok := readFact(t.Observation, relations[s.chain[hop]], cur); ok {
			cur, hop, misses = next, hop+1, 0
		} else {
			misses++
		}
	}
	if hop == len(s.chain) {
		return agrl.AnswerText(cur), nil
	}
	rel := relations[s.chain[hop]]
	switch misses {
	case 0:
		return agrl.ToolAction("search", fmt.Sprintf(rel.query, cur)), nil
	case 1:
		return agrl.ToolAction("search", strings.TrimSpace(rel.before+cur+rel.middle)), nil
	}
	return agrl.AnswerText(""), nil
}

// readFact finds the line "<before>subj<middle>X<after>" in an observation and returns X.
func readFact(obs string, rel relation, subj string) (string, bool) {
	prefix := rel.before + subj + rel.middle
	for _, line := range strings.Split(obs, "\n") {
		if !strings.HasPrefix(line, prefix) || !strings.HasSuffix(line, rel.after) {
			continue
		}
		obj := line[len(prefix) : len(line)-len(rel.after)]
		if obj != "" && !strings.ContainsAny(obj, " \t") {
			return obj, true
		}
	}
	return "", false
}

// EmptySearches counts the tool calls that retrieved nothing useful: searches whose step was
// marked Info["relevant"] = "false" (no result names an entity of the question's chain) and
// failed calls (empty, binary, over-long or unmatched queries; unknown tools).
func EmptySearches(ep *agrl.Episode) float64 {
	n := 0
	for _, t := range ep.Turns {
		if t.Action.Kind == agrl.ToolCall && (t.ToolError != "" || t.Info["relevant"] == "false") {
			n++
		}
	}
	return float64(n)
}

// Rubric returns the preset of the seed article: +1 for a correct answer ("correct", weight
// 1), -0.5 for a wrong one ("wrong", weight -0.5; giving up is neither), -0.1 per empty or
// irrelevant search ("empty_searches", weight -0.1), and -1 when the episode is cut off before
// answering ("cutoff", weight -1).
func Rubric() agrl.Rubric {
	return agrl.NewRubric().
		Add("correct", agrl.ExactAnswer, 1).
		Add("wrong", agrl.WrongAnswer, -0.5).
		Add("empty_searches", EmptySearches, -0.1).
		Add("cutoff", agrl.CutOff, -1)
}
