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
	turnFn TurnRewardFunc // set instead of fn for a per-turn component
	weight float64
}

// TurnRewardFunc scores one turn of a finished episode (turn indexes ep.Turns). It must not
// modify the episode.
type TurnRewardFunc func(ep *Episode, turn int) float64

// AddTurn returns a copy of the rubric with one more component that scores each turn (a
// process reward: a search that retrieved a needed fact, a tool result that the answer uses).
// In the episode's reward and breakdown its value is the sum over the turns; TurnRewards and
// Returns give the per-turn values, which GRPO's turn-level credit (GRPO.TurnAdvantages) and
// discount (GRPO.Gamma) use.
func (r Rubric) AddTurn(name string, fn TurnRewardFunc, weight float64) Rubric {
	terms := make([]rubricTerm, len(r.terms), len(r.terms)+1)
	copy(terms, r.terms)
	return Rubric{terms: append(terms, rubricTerm{name: name, turnFn: fn, weight: weight})}
}

// HasTurnTerms reports whether some component scores turns (AddTurn).
func (r Rubric) HasTurnTerms() bool {
	for _, t := range r.terms {
		if t.turnFn != nil {
			return true
		}
	}
	return false
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
		if t.fn == nil && t.turnFn == nil {
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
		var v float64
		if t.turnFn != nil {
			for k := range ep.Turns {
				v += t.turnFn(ep, k)
			}
		} else {
			v = t.fn(ep)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, fmt.Errorf("agrl: reward component %q returned %v on task %s", t.name, v, ep.Task.ID)
		}
		terms = append(terms, RewardTerm{Name: t.name, Value: v, Weight: t.weight})
		total += t.weight * v
	}
	ep.Reward, ep.Rewards = total, terms
	return total, nil
}

// TurnRewards returns the weighted sum of the per-turn components (AddTurn) at each turn of
// the episode, one value per turn (all 0 when the rubric has none). A component that returns NaN
// or ±Inf is an error.
func (r Rubric) TurnRewards(ep *Episode) ([]float64, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if ep == nil {
		return nil, errors.New("agrl: TurnRewards of a nil episode")
	}
	out := make([]float64, len(ep.Turns))
	for _, t := range r.terms {
		if t.turnFn == nil {
			continue
		}
		for k := range ep.Turns {
			v := t.turnFn(ep, k)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("agrl: reward component %q returned %v at turn %d of task %s", t.name, v, k, ep.Task.ID)
			}
			out[k] += t.weight * v
		}
	}
	return out, nil
}

// Returns gives the episode's discounted return from each turn on: with t_j the turn rewards
// (TurnRewards) of its T turns and R the rest of its reward (the weighted episode-level
// components, credited at the last turn),
//
//	G_k = Σ_{j ≥ k} γ^{j−k} t_j + γ^{T−1−k} R.
//
// With γ = 1, G_0 is the episode's reward; with no per-turn components and γ = 1 every G_k is.
// An episode without turns has the single return R. It is an error for γ to lie outside
// (0, 1], or for a component to return NaN or ±Inf.
func (r Rubric) Returns(ep *Episode, gamma float64) ([]float64, error) {
	if !(gamma > 0 && gamma <= 1) {
		return nil, fmt.Errorf("agrl: discount γ = %v: want 0 < γ ≤ 1", gamma)
	}
	turns, err := r.TurnRewards(ep) // validates the rubric and the episode
	if err != nil {
		return nil, err
	}
	outcome := 0.0
	for _, t := range r.terms {
		if t.fn == nil {
			continue
		}
		v := t.fn(ep)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("agrl: reward component %q returned %v on task %s", t.name, v, ep.Task.ID)
		}
		outcome += t.weight * v
	}
	if len(turns) == 0 {
		return []float64{outcome}, nil
	}
	g := make([]float64, len(turns))
	last := len(turns) - 1
	g[last] = turns[last] + outcome
	for k := last - 1; k >= 0; k-- {
		g[k] = turns[k] + gamma*g[k+1]
	}
	return g, nil
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
