package agrl

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Termination says why an episode ended.
type Termination string

const (
	// Answered: the policy gave a non-empty answer.
	Answered Termination = "answered"
	// GaveUp: the policy gave an empty answer.
	GaveUp Termination = "gave_up"
	// MaxTurnsReached: the policy used every turn without answering.
	MaxTurnsReached Termination = "max_turns"
	// TokenBudget: the episode's token (or byte) budget ran out mid-episode.
	TokenBudget Termination = "token_budget"
	// TooManyInvalid: the policy wrote too many invalid actions in a row.
	TooManyInvalid Termination = "invalid_actions"
	// EnvError: the environment failed (panicked, timed out or refused the task). Such
	// episodes are penalised like a cut-off and should be rare; the error text is on the
	// episode.
	EnvError Termination = "env_error"
	// EnvEnded: the environment ended the episode on a tool call (rare; most environments end
	// episodes only on answers).
	EnvEnded Termination = "env_ended"
)

// Terminations lists every reason, for tables and metrics.
var Terminations = []Termination{Answered, GaveUp, MaxTurnsReached, TokenBudget, TooManyInvalid, EnvError, EnvEnded}

// Turn is one action of the policy and the environment's reply.
type Turn struct {
	// Text is the action exactly as the policy wrote it.
	Text string `json:"text"`
	// Action is Text parsed.
	Action Action `json:"action"`
	// Observation is the reply shown to the policy (without the <obs> tags), after truncation.
	Observation string `json:"observation"`
	// ToolError is non-empty when a tool call failed.
	ToolError string `json:"tool_error,omitempty"`
	// Info is the environment's StepResult.Info.
	Info map[string]string `json:"info,omitempty"`
	// Sampled are the token ids the policy sampled for this action, as the sampler emitted
	// them (model rollouts only): the record TokenMismatches checks the trained ids against.
	Sampled []int32 `json:"sampled,omitempty"`
}

// Episode is the record of one attempt at a task: the turns, why it ended, the answer and its
// reward. It is what run directories and the trajectory viewer store, so it round-trips
// through JSON. The token-level fields are filled by model rollouts and are empty for
// text-level agents such as the experts.
type Episode struct {
	Task Task `json:"task"`
	// Prompt is the first observation that Env.Reset returned.
	Prompt string `json:"prompt"`
	Turns  []Turn `json:"turns"`
	// Termination says why the episode ended; Error holds details for EnvError.
	Termination Termination `json:"termination"`
	Error       string      `json:"error,omitempty"`
	// Answer is the final answer ("" when none was given); Correct whether it matched the gold.
	Answer  string `json:"answer"`
	Correct bool   `json:"correct"`

	// Reward is the rubric's weighted total; Rewards the per-component breakdown (Score fills both).
	Reward  float64      `json:"reward"`
	Rewards []RewardTerm `json:"rewards,omitempty"`

	// Tokens is the whole episode as the policy saw it (prompt, actions, observations).
	Tokens []int32 `json:"tokens,omitempty"`
	// LossMask is 1 on tokens the policy generated and 0 on prompt and observation tokens.
	LossMask []uint8 `json:"loss_mask,omitempty"`
	// LogProbs are the log-probabilities recorded when each generated token was sampled
	// (0 where LossMask is 0).
	LogProbs []float32 `json:"logprobs,omitempty"`
}

// RewardTerm is one rubric component's contribution to an episode's reward.
type RewardTerm struct {
	Name string `json:"name"`
	// Value is what the component returned; Weight its weight; the reward adds Value×Weight.
	Value  float64 `json:"value"`
	Weight float64 `json:"weight"`
}

// ToolCalls counts the turns that called a tool (successfully or not).
func (e *Episode) ToolCalls() int {
	n := 0
	for _, t := range e.Turns {
		if t.Action.Kind == ToolCall {
			n++
		}
	}
	return n
}

// ToolErrors counts the tool calls that failed.
func (e *Episode) ToolErrors() int {
	n := 0
	for _, t := range e.Turns {
		if t.ToolError != "" {
			n++
		}
	}
	return n
}

// InvalidActions counts the turns whose action broke the protocol.
func (e *Episode) InvalidActions() int {
	n := 0
	for _, t := range e.Turns {
		if t.Action.Kind == Invalid {
			n++
		}
	}
	return n
}

// CalledTool reports whether some turn called tool without a tool error.
func (e *Episode) CalledTool(tool string) bool {
	for _, t := range e.Turns {
		if t.Action.Kind == ToolCall && t.Action.Tool == tool && t.ToolError == "" {
			return true
		}
	}
	return false
}

// RewardOf returns the value of the named reward component, and whether it was scored.
func (e *Episode) RewardOf(name string) (float64, bool) {
	for _, r := range e.Rewards {
		if r.Name == name {
			return r.Value, true
		}
	}
	return 0, false
}

// Transcript renders the episode as the policy saw it: the prompt, then each action followed
// by its observation in <obs> tags.
func (e *Episode) Transcript() string {
	var b strings.Builder
	b.WriteString(e.Prompt)
	for _, t := range e.Turns {
		b.WriteString("\n")
		b.WriteString(t.Text)
		if t.Observation != "" || t.Action.Kind != AnswerAction {
			b.WriteString("\n" + Observation(t.Observation))
		}
	}
	return b.String()
}

// String summarises the episode on one line.
func (e *Episode) String() string {
	return fmt.Sprintf("%s %s: %d turns, %s, answer=%q correct=%v reward=%.3f",
		e.Task.ID, e.Task.Difficulty, len(e.Turns), e.Termination, e.Answer, e.Correct, e.Reward)
}

// MarshalIndent is a convenience for printing an episode as indented JSON.
func (e *Episode) MarshalIndent() string {
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return fmt.Sprintf("{%q: %q}", "error", err.Error())
	}
	return string(b)
}

// TokenMismatches compares the ids an episode trains on — Tokens where LossMask is 1, in order —
// with the ids its sampler emitted (each turn's Sampled, in order) and returns how many
// positions differ (a difference in length counts every missing or extra id). It must be 0: a
// trainer that re-tokenises the transcript instead of keeping the sampled ids trains on tokens
// that were never sampled, with log-probs that belong to others. ok is false for an episode
// with no sampled record (text-level agents, or episodes saved before it existed).
func (e *Episode) TokenMismatches() (n int, ok bool) {
	var sampled []int32
	for _, t := range e.Turns {
		sampled = append(sampled, t.Sampled...)
	}
	if len(sampled) == 0 {
		return 0, false
	}
	var trained []int32
	for i, m := range e.LossMask {
		if m == 1 && i < len(e.Tokens) {
			trained = append(trained, e.Tokens[i])
		}
	}
	for i := range min(len(sampled), len(trained)) {
		if sampled[i] != trained[i] {
			n++
		}
	}
	if d := len(sampled) - len(trained); d != 0 {
		n += max(d, -d)
	}
	return n, true
}
