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

// Shortcut returns an agent that is imperfect the way an untrained model is, and where it errs
// is a property of the question's surface: asked for a country ("What is the country of …",
// AsksCountry) it makes the first search as the expert does and answers the entity that search
// found, without the further hops, as a model answers a place it half remembers; on every
// other question it is the expert. It is right on every one-hop question and on every longer
// question that asks for something else, and wrong on every longer country question (31% of
// the 1-hop, 38% of the 2-hop and 51% of the 3-hop questions ask for a country). Mixed into
// warm-start demonstrations as the majority on those questions, it leaves a policy that stops
// after one hop when asked for a country, a habit that survives a low sampling temperature
// and that GRPO can learn out of (the expert's minority demonstrations keep the longer search
// within reach).
func Shortcut() agrl.Agent {
	return agrl.AgentFunc(func(ep *agrl.Episode) (string, error) {
		if !AsksCountry(ep.Prompt) {
			return expertAct(ep)
		}
		s, err := parseSpec(ep.Task.Meta)
		if err != nil {
			return "", fmt.Errorf("multihop shortcut: %w", err)
		}
		for _, t := range ep.Turns {
			if t.Action.Kind != agrl.ToolCall || t.Action.Tool != "search" {
				continue
			}
			if next, ok := readFact(t.Observation, relations[s.chain[0]], s.start); ok {
				return agrl.AnswerText(next), nil
			}
		}
		return expertAct(ep)
	})
}

// AsksCountry reports whether a question asks for a country ("What is the country of …"): the
// questions on which Shortcut stops after the first hop.
func AsksCountry(prompt string) bool { return strings.HasPrefix(prompt, "What is the country of ") }

// HopFound is a per-turn reward (agrl.Rubric.AddTurn): 1 at a turn whose search showed the
// next fact of the question's chain, the one the expert needs from there (following the chain
// through the episode's own observations), else 0. An episode that finds every hop in order
// scores Hops(d) turns of 1; repeating a search that found a hop scores nothing the second
// time, and a search for a fact off the chain scores nothing.
func HopFound(ep *agrl.Episode, turn int) float64 {
	s, err := parseSpec(ep.Task.Meta)
	if err != nil || turn < 0 || turn >= len(ep.Turns) {
		return 0
	}
	cur, hop := s.start, 0
	for k := 0; k <= turn && hop < len(s.chain); k++ {
		t := ep.Turns[k]
		if t.Action.Kind != agrl.ToolCall || t.Action.Tool != "search" {
			continue
		}
		if next, ok := readFact(t.Observation, relations[s.chain[hop]], cur); ok {
			if k == turn {
				return 1
			}
			cur, hop = next, hop+1
		}
	}
	return 0
}

// ProcessRubric is Rubric plus a per-turn process reward: 0.1 for every turn whose search
// found the next hop of the chain (HopFound), so that a 3-hop episode that stalls after two
// hops still earns credit for the turns that made progress, at those turns.
func ProcessRubric() agrl.Rubric {
	return Rubric().AddTurn("hop", HopFound, 0.1)
}
