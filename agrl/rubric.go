package agrl

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// RewardFunc scores one aspect of a finished episode. It must not modify the episode.
type RewardFunc func(ep *Episode) float64

// Rubric is a list of named, weighted reward components. An episode's reward is the sum of
// weight × value over the components; a component of weight 0 is computed and stored in the
// breakdown (so it can be logged and plotted) but adds nothing.
//
// Rubric is a value: Add returns a new rubric and never changes the receiver, so presets can be
// extended freely. The zero value is an empty rubric that scores every episode 0.
type Rubric struct {
	terms []rubricTerm
}

type rubricTerm struct {
	name   string
	fn     RewardFunc
	weight float64
}

// NewRubric returns an empty rubric.
func NewRubric() Rubric { return Rubric{} }

// Add returns a copy of the rubric with one more component. Problems (an empty or duplicate
// name, a nil function, a NaN or infinite weight) are reported by Validate and Score.
func (r Rubric) Add(name string, fn RewardFunc, weight float64) Rubric {
	terms := make([]rubricTerm, len(r.terms), len(r.terms)+1)
	copy(terms, r.terms)
	return Rubric{terms: append(terms, rubricTerm{name: name, fn: fn, weight: weight})}
}

// Weight returns a copy of the rubric with the named component's weight changed (handy in
// sweeps and in the reward-hacking lesson). An unknown name is reported by Validate.
func (r Rubric) Weight(name string, weight float64) Rubric {
	terms := make([]rubricTerm, len(r.terms))
	copy(terms, r.terms)
	found := false
	for i := range terms {
		if terms[i].name == name {
			terms[i].weight, found = weight, true
		}
	}
	if !found {
		terms = append(terms, rubricTerm{name: name, weight: weight})
	}
	return Rubric{terms: terms}
}

// Names lists the components in the order they were added.
func (r Rubric) Names() []string {
	out := make([]string, len(r.terms))
	for i, t := range r.terms {
		out[i] = t.name
	}
	return out
}

// Weights returns each component's weight by name.
func (r Rubric) Weights() map[string]float64 {
	out := make(map[string]float64, len(r.terms))
	for _, t := range r.terms {
		out[t.name] = t.weight
	}
	return out
}

// Validate reports every problem of the rubric at once, or nil.
func (r Rubric) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, t := range r.terms {
		switch {
		case strings.TrimSpace(t.name) == "":
			errs = append(errs, fmt.Errorf("rubric component %d has an empty name", i))
		case seen[t.name]:
			errs = append(errs, fmt.Errorf("rubric component %q added twice", t.name))
		}
		seen[t.name] = true
		if t.fn == nil {
			errs = append(errs, fmt.Errorf("rubric component %q has no function (unknown name given to Weight?)", t.name))
		}
		if math.IsNaN(t.weight) || math.IsInf(t.weight, 0) {
			errs = append(errs, fmt.Errorf("rubric component %q has weight %v", t.name, t.weight))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("agrl: invalid rubric: %w", errors.Join(errs...))
	}
	return nil
}

// Score computes the episode's reward, stores it and its breakdown on the episode and returns
// it. A component that returns NaN or ±Inf is an error (the reward would poison training);
// the episode is then left unscored.
func (r Rubric) Score(ep *Episode) (float64, error) {
	if err := r.Validate(); err != nil {
		return 0, err
	}
	if ep == nil {
		return 0, errors.New("agrl: Score of a nil episode")
	}
	terms := make([]RewardTerm, 0, len(r.terms))
	total := 0.0
	for _, t := range r.terms {
		v := t.fn(ep)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, fmt.Errorf("agrl: reward component %q returned %v on task %s", t.name, v, ep.Task.ID)
		}
		terms = append(terms, RewardTerm{Name: t.name, Value: v, Weight: t.weight})
		total += t.weight * v
	}
	ep.Reward, ep.Rewards = total, terms
	return total, nil
}

// Built-in reward components. Each is a RewardFunc over a finished episode; give penalties a
// negative weight.

// WellFormed is the fraction of the episode's actions that followed the protocol (0 for an
// episode with no actions). Keep its weight small: it is a format reward.
func WellFormed(ep *Episode) float64 {
	if len(ep.Turns) == 0 {
		return 0
	}
	return 1 - float64(ep.InvalidActions())/float64(len(ep.Turns))
}

// ExactAnswer is 1 when the final answer matched the gold answer exactly after normalisation
// (as judged by the environment), else 0.
func ExactAnswer(ep *Episode) float64 { return b2f(ep.Correct) }

// WrongAnswer is 1 when the policy gave a non-empty answer that was wrong, else 0.
func WrongAnswer(ep *Episode) float64 {
	return b2f(ep.Termination == Answered && !ep.Correct)
}

// UsedTool returns a component that is 1 when the episode called tool at least once without a
// tool error.
func UsedTool(tool string) RewardFunc {
	return func(ep *Episode) float64 { return b2f(ep.CalledTool(tool)) }
}

// InvalidActions counts the actions that broke the protocol.
func InvalidActions(ep *Episode) float64 { return float64(ep.InvalidActions()) }

// ToolErrors counts the tool calls that failed.
func ToolErrors(ep *Episode) float64 { return float64(ep.ToolErrors()) }

// RepeatedToolCalls counts tool calls identical (same tool, same arguments) to an earlier call
// of the same episode.
func RepeatedToolCalls(ep *Episode) float64 {
	seen := map[string]bool{}
	n := 0
	for _, t := range ep.Turns {
		if t.Action.Kind != ToolCall {
			continue
		}
		key := t.Action.Tool + "\x00" + t.Action.Args
		if seen[key] {
			n++
		}
		seen[key] = true
	}
	return float64(n)
}

// CutOff is 1 when the episode ran out of turns, of budget or of valid actions, or broke the
// environment, before answering.
func CutOff(ep *Episode) float64 {
	switch ep.Termination {
	case MaxTurnsReached, TokenBudget, TooManyInvalid, EnvError:
		return 1
	}
	return 0
}

// GaveUpPenalty is 1 when the policy gave up (an empty answer).
func GaveUpPenalty(ep *Episode) float64 { return b2f(ep.Termination == GaveUp) }

// ErrorThenQuit is 1 when the policy's last tool call failed and it then gave up or stopped
// without a correct answer: the shape of the "provoke an error and quit" reward hack.
func ErrorThenQuit(ep *Episode) float64 {
	if ep.Correct {
		return 0
	}
	lastErr := false
	for _, t := range ep.Turns {
		if t.Action.Kind == ToolCall {
			lastErr = t.ToolError != ""
		}
	}
	return b2f(lastErr && ep.Termination != Answered)
}

// ToolCallCount counts the tool calls, failed ones included; give it a small negative weight
// for a per-call cost, or weight 0 to log it.
func ToolCallCount(ep *Episode) float64 { return float64(ep.ToolCalls()) }

// TurnCount is the number of actions taken; give it weight 0 to log it.
func TurnCount(ep *Episode) float64 { return float64(len(ep.Turns)) }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
