package agrl

import (
	"math"
	"slices"
	"testing"
)

func TestPlayRefactorUnchanged(t *testing.T) {
	env := addEnv{}
	tasks, err := NewMix(3).Tasks(env, Train, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		ep, err := Play(env, task, addExpert, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if !ep.Correct || ep.Termination != Answered || len(ep.Turns) != 2 {
			t.Errorf("expert episode: %v", ep)
		}
	}
	bad := AgentFunc(func(*Episode) (string, error) { return "no tags here", nil })
	ep, _ := Play(env, tasks[0], bad, Limits{MaxInvalid: 2})
	if ep.Termination != TooManyInvalid || len(ep.Turns) != 2 {
		t.Errorf("invalid agent: %v", ep)
	}
	loop := AgentFunc(func(*Episode) (string, error) { return ToolAction("add", "1+1"), nil })
	ep, _ = Play(env, tasks[0], loop, Limits{MaxTurns: 4})
	if ep.Termination != MaxTurnsReached || len(ep.Turns) != 4 {
		t.Errorf("looping agent: %v", ep)
	}
	ep, _ = Play(env, tasks[0], loop, Limits{MaxTurns: 50, MaxBytes: 60})
	if ep.Termination != TokenBudget {
		t.Errorf("byte budget: %v", ep)
	}
}

func TestEncodeEpisode(t *testing.T) {
	tok := ASCIITokenizer()
	env := addEnv{}
	task, _ := env.Generate(nil2(), Easy)
	ep, err := Play(env, task, addExpert, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ids, mask := EncodeEpisode(tok, ep)
	if len(ids) != len(mask) || ids[0] != BOS {
		t.Fatalf("bad encoding %v %v", ids, mask)
	}
	want := "<bos>" + ep.Prompt + ep.Turns[0].Text + Observation(ep.Turns[0].Observation) + ep.Turns[1].Text
	var got string
	for _, id := range ids {
		if id == BOS {
			got += "<bos>"
		} else {
			got += tok.Token(id)
		}
	}
	if got != want {
		t.Errorf("layout %q, want %q", got, want)
	}
	var policy string
	for i, id := range ids {
		if mask[i] == 1 {
			policy += tok.Token(id)
		}
	}
	if policy != ep.Turns[0].Text+ep.Turns[1].Text {
		t.Errorf("masked tokens %q are not the actions", policy)
	}
}

func TestRolloutUntrained(t *testing.T) {
	p := testLM().MustBuild()
	env := addEnv{}
	tasks, err := NewMix(1).Tasks(env, Train, 6)
	if err != nil {
		t.Fatal(err)
	}
	opt := RolloutOptions{Sampling: Sampling{Temperature: 1, Seed: 3, MaxActionTokens: 12}, MaxTokens: 64}
	eps, st, err := p.Rollout(env, tasks, opt)
	if err != nil {
		t.Fatal(err)
	}
	if st.Episodes != 6 || st.Generated == 0 || st.Steps == 0 {
		t.Errorf("stats %+v", st)
	}
	var seqs [][]int32
	for _, ep := range eps {
		if ep.Termination == "" || len(ep.Turns) == 0 {
			t.Errorf("unfinished episode %v", ep)
		}
		if len(ep.Tokens) != len(ep.LossMask) || len(ep.Tokens) != len(ep.LogProbs) || len(ep.Tokens) > 64 {
			t.Fatalf("token fields: %d tokens, %d mask, %d logprobs", len(ep.Tokens), len(ep.LossMask), len(ep.LogProbs))
		}
		// An untrained policy writes garbage: invalid actions get a penalised observation.
		if ep.Turns[0].Action.Kind == Invalid && !slices.Contains([]Termination{TooManyInvalid, TokenBudget, MaxTurnsReached}, ep.Termination) {
			t.Errorf("termination %s after invalid actions", ep.Termination)
		}
		seqs = append(seqs, ep.Tokens)
	}
	// The recorded log-probs are the scorer's, on the policy's tokens only.
	sc, err := p.Score(seqs, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, ep := range eps {
		for j := 1; j < len(ep.Tokens); j++ {
			if ep.LossMask[j] == 0 {
				if ep.LogProbs[j] != 0 {
					t.Fatalf("log-prob recorded on a read token")
				}
				continue
			}
			if d := math.Abs(float64(ep.LogProbs[j] - sc[i].LogProbs[j-1])); d > 1e-4 {
				t.Fatalf("episode %d token %d: recorded %v, scored %v", i, j, ep.LogProbs[j], sc[i].LogProbs[j-1])
			}
		}
	}
	// Same seed, same episodes.
	again, _, err := p.Rollout(env, tasks, opt)
	if err != nil {
		t.Fatal(err)
	}
	for i := range eps {
		if !slices.Equal(eps[i].Tokens, again[i].Tokens) {
			t.Errorf("episode %d differs between identical rollouts", i)
		}
	}
}
