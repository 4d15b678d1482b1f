package learn

import (
	"agrl.dev/agrl"
	"slices"

	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Episode token layout. A policy reads and writes one token stream per episode:
//
//	BOS prompt  action₁ <obs> observation₁ </obs>  action₂ <obs> … </obs>  actionₙ
//
// Actions are the policy's own tokens (loss mask 1); BOS, the prompt and the observations,
// each wrapped in the <obs> tag tokens, are read only (mask 0). The last action gets no
// observation: the episode has ended. Rollouts record this stream as sampled; EncodeEpisode
// builds the same stream from a text-level episode (an expert's), tokenising it once.

// Rollout plays one episode per task with the policy, in one batch: it samples each action
// (until a closing </tool> or </answer> tag, EOS, the per-action cap or the token budget),
// parses it, steps the environment and appends the observation to the context, until each
// episode ends. Episodes carry their turns and termination exactly as Play records them (the
// same per-turn logic), plus Tokens, LossMask (1 on sampled tokens) and the LogProbs recorded
// when each token was drawn. Episode i uses sampling stream (Seed, i).
//
// It returns an error when an environment refuses a task or a prompt does not fit the budget;
// everything the policy does wrong is recorded on the episodes.
func (p *Policy) Rollout(env agrl.Env, tasks []agrl.Task, opt agrl.RolloutOptions) ([]*agrl.Episode, agrl.RolloutStats, error) {
	start := time.Now()
	var st agrl.RolloutStats
	if env == nil {
		return nil, st, errors.New("agrl: Rollout needs an env")
	}
	if err := opt.Sampling.Validate(); err != nil {
		return nil, st, err
	}
	if len(tasks) == 0 {
		return nil, st, nil
	}
	budget := opt.MaxTokens
	if budget <= 0 || budget > p.arch.Context {
		budget = p.arch.Context
	}
	loops := make([]*agrl.TurnLoop, len(tasks))
	for i, task := range tasks {
		l, err := agrl.StartEpisode(env, task, opt.Limits)
		if err != nil {
			return nil, st, err
		}
		ep := l.Episode()
		ep.Tokens = p.tok.AppendEncode([]int32{agrl.BOS}, ep.Prompt)
		if len(ep.Tokens)+2 > budget {
			return nil, st, fmt.Errorf("agrl: Rollout: %w", &agrl.PromptTooLongError{Task: task.ID, Tokens: len(ep.Tokens), Budget: budget, Need: len(ep.Tokens) + 2, Context: p.arch.Context})
		}
		ep.LossMask = make([]uint8, len(ep.Tokens))
		ep.LogProbs = make([]float32, len(ep.Tokens))
		loops[i] = l
	}
	return p.play(loops, budget, opt, start)
}

// play samples the episodes of loops to their ends in one batch; each episode's Tokens,
// LossMask and LogProbs hold its context so far (the prompt, or a forked prefix).
func (p *Policy) play(loops []*agrl.TurnLoop, budget int, opt agrl.RolloutOptions, start time.Time) ([]*agrl.Episode, agrl.RolloutStats, error) {
	var st agrl.RolloutStats
	d, err := p.NewDecoder(len(loops), budget, opt.Sampling)
	if err != nil {
		return nil, st, err
	}
	defer d.Close()
	for i, l := range loops {
		if err := d.Start(i, l.Episode().Tokens); err != nil {
			return nil, st, err
		}
	}
	var generated atomic.Int64 // Run calls back concurrently for different shards
	// step appends a completion to episode i and says what to feed it next, or that it ended.
	step := func(i int, c Completion) ([]int32, bool) {
		l := loops[i]
		ep := l.Episode()
		generated.Add(int64(len(c.Tokens)))
		ep.Tokens = append(ep.Tokens, c.Tokens...)
		ep.LogProbs = append(ep.LogProbs, c.LogProbs...)
		for range c.Tokens {
			ep.LossMask = append(ep.LossMask, 1)
		}
		done := l.Act(p.tok.Decode(c.Tokens))
		ep.Turns[len(ep.Turns)-1].Sampled = slices.Clone(c.Tokens)
		if done {
			return nil, false
		}
		if c.Stop == agrl.StopBudget {
			ep.Termination = agrl.TokenBudget
			return nil, false
		}
		obs := agrl.AppendObservation(p.tok, nil, ep.Turns[len(ep.Turns)-1].Observation)
		if len(obs)+1 > d.Room(i) { // the observation and at least one more token must fit
			ep.Termination = agrl.TokenBudget
			return nil, false
		}
		if l.OutOfTurns() {
			return nil, false
		}
		ep.Tokens = append(ep.Tokens, obs...)
		ep.LogProbs = append(ep.LogProbs, make([]float32, len(obs))...)
		ep.LossMask = append(ep.LossMask, make([]uint8, len(obs))...)
		return obs, true
	}
	ended := opt.EpisodeEnded(len(loops))
	err = d.Run(func(i int, c Completion) ([]int32, bool) {
		obs, more := step(i, c)
		if !more {
			ended()
		}
		return obs, more
	})
	if err != nil {
		return nil, st, err
	}
	eps := make([]*agrl.Episode, len(loops))
	for i, l := range loops {
		eps[i] = l.Episode()
	}
	st.Episodes, st.Steps, st.Tokens, st.Seconds = len(eps), d.Steps, d.Fed, time.Since(start).Seconds()
	st.Generated = int(generated.Load())
	return eps, st, nil
}

// Fork resamples episode ep from turn turn on, n times: a counterfactual rollout. Each fork
// replays ep's first turn+1 actions in env (a fresh session; the environment must reply as it
// did, or Fork fails), keeps ep's own sampled tokens for them, replaces the observation of turn
// turn with observation (unless it is "", which keeps the environment's reply; a replaced
// observation has no tool error) and samples the rest of the episode with the policy, fork i
// on sampling stream (opt.Sampling.Seed, i). The forks' turns after turn are new; their Tokens,
// LossMask and LogProbs continue ep's prefix, so they train and score like any rollout.
//
// ep must be a rollout of a policy with this tokenizer (Tokens and LossMask recorded), and turn
// must not be its last action: a fork continues after it.
func (p *Policy) Fork(env agrl.Env, ep *agrl.Episode, turn int, observation string, n int, opt agrl.RolloutOptions) ([]*agrl.Episode, agrl.RolloutStats, error) {
	start := time.Now()
	var st agrl.RolloutStats
	switch {
	case env == nil || ep == nil:
		return nil, st, errors.New("agrl: Fork needs an env and an episode")
	case n < 1:
		return nil, st, fmt.Errorf("agrl: Fork: %d forks; want >= 1", n)
	case turn < 0 || turn >= len(ep.Turns):
		return nil, st, fmt.Errorf("agrl: Fork at turn %d: the episode has turns 0..%d", turn, len(ep.Turns)-1)
	}
	if err := opt.Sampling.Validate(); err != nil {
		return nil, st, err
	}
	spans := agrl.TurnSpans(ep.LossMask)
	if len(ep.Tokens) == 0 || len(ep.LossMask) != len(ep.Tokens) || len(ep.LogProbs) != len(ep.Tokens) || len(spans) <= turn {
		return nil, st, errors.New("agrl: Fork: the episode has no token record of its actions (a rollout's Tokens, LossMask and LogProbs)")
	}
	for _, id := range ep.Tokens {
		if int(id) >= p.tok.VocabSize() || id < 0 {
			return nil, st, fmt.Errorf("agrl: Fork: token id %d is outside this policy's vocabulary (%d)", id, p.tok.VocabSize())
		}
	}
	budget := opt.MaxTokens
	if budget <= 0 || budget > p.arch.Context {
		budget = p.arch.Context
	}
	cut := spans[turn][1]
	loops := make([]*agrl.TurnLoop, n)
	for i := range loops {
		l, err := agrl.ReplayEpisode(env, ep, turn+1, opt.Limits)
		if err != nil {
			return nil, st, err
		}
		if observation != "" {
			l.SetObservation(observation)
		}
		f := l.Episode()
		for j := range f.Turns {
			f.Turns[j].Sampled = slices.Clone(ep.Turns[j].Sampled)
		}
		f.Tokens = slices.Clone(ep.Tokens[:cut])
		f.LossMask = slices.Clone(ep.LossMask[:cut])
		f.LogProbs = slices.Clone(ep.LogProbs[:cut])
		if l.OutOfTurns() {
			return nil, st, fmt.Errorf("agrl: Fork at turn %d: no turn is left after it (MaxTurns %d)", turn, len(f.Turns))
		}
		obs := agrl.AppendObservation(p.tok, nil, f.Turns[turn].Observation)
		if len(f.Tokens)+len(obs)+1 > budget {
			return nil, st, fmt.Errorf("agrl: Fork at turn %d: the prefix and its observation take %d tokens; the budget is %d", turn, len(f.Tokens)+len(obs), budget)
		}
		f.Tokens = append(f.Tokens, obs...)
		f.LossMask = append(f.LossMask, make([]uint8, len(obs))...)
		f.LogProbs = append(f.LogProbs, make([]float32, len(obs))...)
		loops[i] = l
	}
	return p.play(loops, budget, opt, start)
}

// PolicyAgent adapts a policy to the text-level Agent interface, one action per call (each
// call re-reads the whole episode: use Rollout to play batches). It is handy for comparing a
// policy with experts through Play.
//
// maxActionTokens caps each action; 0 means no cap but the model's context. The action of turn
// k (from 0) is drawn with seed s.Seed+k, so an agent plays the same episode the same way
// every time. An episode that fills the context is an error (Play then stops): Rollout instead
// ends such an episode as TokenBudget.
func (p *Policy) PolicyAgent(s agrl.Sampling, maxActionTokens int) agrl.Agent {
	return agrl.AgentFunc(func(ep *agrl.Episode) (string, error) {
		tokens, _ := agrl.EncodeEpisode(p.tok, ep)
		if len(ep.Turns) > 0 {
			tokens = agrl.AppendObservation(p.tok, tokens, ep.Turns[len(ep.Turns)-1].Observation)
		}
		room := p.arch.Context - len(tokens)
		if room < 1 {
			return "", fmt.Errorf("agrl: episode of %d tokens fills the context", len(tokens))
		}
		if maxActionTokens > 0 {
			room = min(room, maxActionTokens)
		}
		turn := s
		turn.Seed += uint64(len(ep.Turns))
		out, err := p.Complete([][]int32{tokens}, room, turn)
		if err != nil {
			return "", err
		}
		return p.tok.Decode(out[0].Tokens), nil
	})
}

// EpisodeBatch turns rollout episodes into a TrainBatch on their exact token ids (never
// re-tokenised): "mask" is Episode.LossMask (1 on sampled tokens), "old_logp" the log-probs
// recorded at sampling, and each entry of perEpisode (for example "adv", one advantage per
// episode) is broadcast to every token of its episode. Episodes without tokens (text-level
// ones) are an error; use EncodeEpisode for those.
func EpisodeBatch(eps []*agrl.Episode, perEpisode map[string][]float64) (TrainBatch, error) {
	b := TrainBatch{Values: map[string][][]float32{"mask": nil, "old_logp": nil}}
	var errs []error
	for name, vals := range perEpisode {
		if name == "mask" || name == "old_logp" {
			errs = append(errs, fmt.Errorf("per-episode value %q would replace the per-token one", name))
		}
		if len(vals) != len(eps) {
			errs = append(errs, fmt.Errorf("per-episode value %q has %d entries for %d episodes", name, len(vals), len(eps)))
		}
		b.Values[name] = nil
	}
	for i, ep := range eps {
		n := len(ep.Tokens)
		if n < 2 || len(ep.LossMask) != n || len(ep.LogProbs) != n {
			errs = append(errs, fmt.Errorf("episode %d (%s): %d tokens, %d mask, %d log-probs", i, ep.Task.ID, n, len(ep.LossMask), len(ep.LogProbs)))
			continue
		}
		mask := make([]float32, n)
		for j, m := range ep.LossMask {
			mask[j] = float32(m)
		}
		b.Tokens = append(b.Tokens, ep.Tokens)
		b.Values["mask"] = append(b.Values["mask"], mask)
		b.Values["old_logp"] = append(b.Values["old_logp"], ep.LogProbs)
		for name, vals := range perEpisode {
			if len(vals) != len(eps) {
				continue
			}
			row := make([]float32, n)
			for j := range row {
				row[j] = float32(vals[i])
			}
			b.Values[name] = append(b.Values[name], row)
		}
	}
	if len(errs) > 0 {
		return TrainBatch{}, fmt.Errorf("agrl: EpisodeBatch: %w", errors.Join(errs...))
	}
	return b, nil
}
