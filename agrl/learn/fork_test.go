package learn

import (
	"agrl.dev/agrl"
	"agrl.dev/envs/calc"

	"math"
	"slices"
	"strings"
	"testing"
)

// forkBase returns greedy calc rollouts of a random Tiny policy with at least two turns (its
// actions are mostly invalid, which continues the episode) and the policy.
func forkBase(t *testing.T) (*Policy, agrl.Env, []*agrl.Episode) {
	t.Helper()
	p := MustNewPolicy(agrl.TinyLM().Seed(4))
	env := calc.New()
	tasks, err := agrl.NewMix(3).Tasks(env, agrl.Dev, 6)
	if err != nil {
		t.Fatal(err)
	}
	eps, _, err := p.Rollout(env, tasks, agrl.RolloutOptions{Sampling: agrl.Sampling{MaxActionTokens: 16}})
	if err != nil {
		t.Fatal(err)
	}
	var multi []*agrl.Episode
	for _, ep := range eps {
		if len(ep.Turns) >= 3 {
			multi = append(multi, ep)
		}
	}
	if len(multi) == 0 {
		t.Fatal("no rollout with 3 turns or more")
	}
	return p, env, multi
}

// TestForkGreedyReplaysTheEpisode: forking a greedy episode at turn 1 with its own observation
// and sampling greedily again gives back the very same episode — tokens, masks, turns — so a
// fork continues from exactly the context the policy had.
func TestForkGreedyReplaysTheEpisode(t *testing.T) {
	p, env, eps := forkBase(t)
	opt := agrl.RolloutOptions{Sampling: agrl.Sampling{MaxActionTokens: 16}}
	for _, ep := range eps {
		forks, _, err := p.Fork(env, ep, 1, "", 2, opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range forks {
			if !slices.Equal(f.Tokens, ep.Tokens) || !slices.Equal(f.LossMask, ep.LossMask) || len(f.Turns) != len(ep.Turns) || f.Termination != ep.Termination {
				t.Fatalf("task %s: the greedy fork differs from the episode (%d vs %d tokens, %d vs %d turns)", ep.Task.ID, len(f.Tokens), len(ep.Tokens), len(f.Turns), len(ep.Turns))
			}
			for j := range f.LogProbs {
				if d := math.Abs(float64(f.LogProbs[j] - ep.LogProbs[j])); d > 1e-4 {
					t.Fatalf("task %s token %d: log-prob %v, episode %v", ep.Task.ID, j, f.LogProbs[j], ep.LogProbs[j])
				}
			}
			for j := range f.Turns {
				if f.Turns[j].Text != ep.Turns[j].Text || f.Turns[j].Observation != ep.Turns[j].Observation {
					t.Fatalf("task %s turn %d: %q/%q, episode %q/%q", ep.Task.ID, j, f.Turns[j].Text, f.Turns[j].Observation, ep.Turns[j].Text, ep.Turns[j].Observation)
				}
			}
		}
	}
}

// TestForkReplacesTheObservation: with a replaced observation the fork reads it — its tokens
// are the episode's up to the end of the forked action, then the new observation's — samples
// its own continuation whose recorded log-probs are the scorer's on the fork's tokens, and
// passes the token audit; bad forks are errors.
func TestForkReplacesTheObservation(t *testing.T) {
	p, env, eps := forkBase(t)
	ep := eps[0]
	opt := agrl.RolloutOptions{Sampling: agrl.Sampling{Temperature: 1, Seed: 9, MaxActionTokens: 16}}
	forks, st, err := p.Fork(env, ep, 0, "42", 4, opt)
	if err != nil {
		t.Fatal(err)
	}
	if st.Episodes != 4 || st.Generated == 0 {
		t.Errorf("stats %+v", st)
	}
	cut := agrl.TurnSpans(ep.LossMask)[0][1]
	obs := agrl.AppendObservation(p.Tokenizer(), nil, "42")
	differ := 0
	for i, f := range forks {
		if !slices.Equal(f.Tokens[:cut], ep.Tokens[:cut]) || !slices.Equal(f.Tokens[cut:cut+len(obs)], obs) {
			t.Fatalf("fork %d: the prefix or the replaced observation's tokens are wrong", i)
		}
		if f.Turns[0].Observation != "42" || f.Turns[0].ToolError != "" || f.Turns[0].Text != ep.Turns[0].Text || len(f.Turns) < 2 {
			t.Fatalf("fork %d turn 0: %+v", i, f.Turns[0])
		}
		if n, ok := f.TokenMismatches(); !ok || n != 0 {
			t.Errorf("fork %d: %d token mismatches (record %v)", i, n, ok)
		}
		sc, err := p.Score([][]int32{f.Tokens}, 1)
		if err != nil {
			t.Fatal(err)
		}
		for j := cut + len(obs); j < len(f.Tokens); j++ {
			if f.LossMask[j] == 1 {
				if d := math.Abs(float64(f.LogProbs[j] - sc[0].LogProbs[j-1])); d > 1e-4 {
					t.Fatalf("fork %d token %d: sampled %v, scored %v", i, j, f.LogProbs[j], sc[0].LogProbs[j-1])
				}
			}
		}
		if !slices.Equal(f.Tokens, forks[0].Tokens) {
			differ++
		}
	}
	if differ == 0 {
		t.Error("four forks at temperature 1 are identical: the sampling streams are not per fork")
	}
	text := &agrl.Episode{Task: ep.Task, Prompt: ep.Prompt, Turns: ep.Turns}
	last := len(ep.Turns) - 1
	for _, c := range []struct {
		ep   *agrl.Episode
		turn int
		want string
	}{
		{ep, -1, "turns 0.."},
		{ep, len(ep.Turns), "turns 0.."},
		{text, 0, "no token record"},
	} {
		if _, _, err := p.Fork(env, c.ep, c.turn, "", 1, opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("fork at %d: %v, want an error containing %q", c.turn, err, c.want)
		}
	}
	if ep.Termination == agrl.TooManyInvalid || ep.Termination == agrl.Answered {
		if _, _, err := p.Fork(env, ep, last, "", 1, opt); err == nil || !strings.Contains(err.Error(), "ended the episode") {
			t.Errorf("fork at the ending turn: %v", err)
		}
	}
	if _, _, err := p.Fork(env, ep, 0, "", 0, opt); err == nil {
		t.Error("0 forks accepted")
	}
}
