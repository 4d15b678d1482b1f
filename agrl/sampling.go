package agrl

import (
	"errors"
	"fmt"
	"math"
	"sync"
)

// Sampling configures how the policy draws tokens. The zero value decodes greedily.
type Sampling struct {
	// Temperature divides the logits before the softmax; 0 decodes greedily (log-probs are then
	// recorded at temperature 1). The scorer applies a temperature the same way, so score with
	// the temperature the tokens were sampled at. The GRPO trainer samples at
	// GRPO.Temperature and evaluates at GRPO.EvalTemperature.
	Temperature float64 `json:"temperature"`
	// TopK keeps only the K most likely tokens (0: all).
	TopK int `json:"top_k,omitempty"`
	// TopP keeps the smallest set of most likely tokens whose probability reaches TopP (0 or
	// 1: all). With TopK or TopP set, the recorded log-probs are still those of the full
	// tempered distribution (as the scorer computes them), so the sampled tokens are slightly
	// off-policy, as in TRL and verl.
	TopP float64 `json:"top_p,omitempty"`
	// Seed seeds the draws. Sequence i of a batch draws from its own stream (Seed, i), so the
	// same seed gives the same samples.
	Seed uint64 `json:"seed"`
	// MaxActionTokens caps the tokens of one action (0: only the context budget caps it).
	MaxActionTokens int `json:"max_action_tokens,omitempty"`
}

// Validate reports what is wrong with the settings, or nil.
func (s Sampling) Validate() error {
	var errs []error
	if math.IsNaN(s.Temperature) || s.Temperature < 0 || s.Temperature > 100 {
		errs = append(errs, fmt.Errorf("temperature %v; want 0 (greedy) or in (0, 100]", s.Temperature))
	}
	if s.TopK < 0 {
		errs = append(errs, fmt.Errorf("top-k %d; want >= 0", s.TopK))
	}
	if math.IsNaN(s.TopP) || s.TopP < 0 || s.TopP > 1 {
		errs = append(errs, fmt.Errorf("top-p %v; want in [0, 1]", s.TopP))
	}
	if s.MaxActionTokens < 0 {
		errs = append(errs, fmt.Errorf("max action tokens %d; want >= 0", s.MaxActionTokens))
	}
	if len(errs) > 0 {
		return fmt.Errorf("agrl: invalid sampling: %w", errors.Join(errs...))
	}
	return nil
}

// StopReason says why the sampler ended an action.
type StopReason string

const (
	// StopTag: the action ended with a closing </tool> or </answer> tag.
	StopTag StopReason = "tag"
	// StopEOS: the policy wrote EOS.
	StopEOS StopReason = "eos"
	// StopLength: the action reached Sampling.MaxActionTokens.
	StopLength StopReason = "length"
	// StopBudget: the sequence filled its token budget.
	StopBudget StopReason = "budget"
)

// EncodeEpisode tokenises a text-level episode (from Play) in the layout rollouts produce and
// returns the tokens and the loss mask (1 on action tokens). It does not fill the episode.
func EncodeEpisode(tok *Tokenizer, ep *Episode) (tokens []int32, mask []uint8) {
	tokens = tok.AppendEncode([]int32{BOS}, ep.Prompt)
	mask = make([]uint8, len(tokens))
	for i, t := range ep.Turns {
		n := len(tokens)
		tokens = tok.AppendEncode(tokens, t.Text)
		for range len(tokens) - n {
			mask = append(mask, 1)
		}
		if i < len(ep.Turns)-1 {
			n = len(tokens)
			tokens = AppendObservation(tok, tokens, t.Observation)
			for range len(tokens) - n {
				mask = append(mask, 0)
			}
		}
	}
	return tokens, mask
}

// AppendObservation appends an observation, wrapped in its <obs> tag tokens, to dst.
func AppendObservation(tok *Tokenizer, dst []int32, obs string) []int32 {
	dst = append(dst, TagID(ObsOpen))
	dst = tok.AppendEncode(dst, obs)
	return append(dst, TagID(ObsClose))
}

// RolloutOptions configures the learner's rollouts (learn.Policy.Rollout). The zero value samples at temperature 0 (greedy)
// with the environment's turn limit and the whole context as budget.
type RolloutOptions struct {
	// Sampling sets temperature, top-k/p, the seed and an optional per-action token cap.
	Sampling Sampling
	// Limits bounds each episode as in Play: MaxTurns, MaxInvalid and StepTimeout apply;
	// MaxBytes (Play's text budget) is ignored in favour of MaxTokens.
	Limits Limits
	// MaxTokens is the per-episode token budget: prompt, actions and observations together
	// (one budget for the whole episode, never per turn). 0 or more than the context means
	// the context.
	MaxTokens int
	// Progress, when set, is told as each episode ends how many of the call's episodes have
	// ended: one call at a time, in increasing order, from the sampler's goroutines (it must
	// return quickly). Samplers call it through EpisodeEnded.
	Progress func(done, total int)
}

// EpisodeEnded returns the function a sampler calls as each of its total episodes ends: it
// tells o.Progress, if set, how many have ended, one call at a time.
func (o RolloutOptions) EpisodeEnded(total int) func() {
	if o.Progress == nil {
		return func() {}
	}
	var mu sync.Mutex
	done := 0
	return func() {
		mu.Lock()
		defer mu.Unlock()
		done++
		o.Progress(done, total)
	}
}

// RolloutStats describes the sampling work of one Rollout call.
type RolloutStats struct {
	Episodes  int
	Steps     int     // graph calls
	Tokens    int     // tokens read into the KV cache (prompt, observations and sampled)
	Generated int     // tokens sampled
	Seconds   float64 // wall time, environment steps included
}

// PromptTooLongError is a rollout's error when a task's prompt leaves no room for an action
// within the episode's token budget (RolloutOptions.MaxTokens, or the model's context): a
// setting to change, which resuming the same run as it is cannot get past.
type PromptTooLongError struct {
	Task    string // the task's ID
	Tokens  int    // the prompt's tokens
	Budget  int    // the episode's token budget: MaxTokens, at most the model's context
	Need    int    // the smallest budget that leaves room for an action
	Context int    // the model's context, which bounds every budget
}

// Error names the task, its prompt's tokens and the budget it would need, or the model's
// context when that is what is short.
func (e *PromptTooLongError) Error() string {
	if e.Need > e.Context {
		return fmt.Sprintf("the prompt of task %s takes %d tokens; the model's context is %d (an action needs at least %d)", e.Task, e.Tokens, e.Context, e.Need)
	}
	return fmt.Sprintf("the prompt of task %s takes %d tokens; the budget is %d (at least %d leaves room for an action)", e.Task, e.Tokens, e.Budget, e.Need)
}
