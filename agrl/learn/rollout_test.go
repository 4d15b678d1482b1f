package learn

import (
	"agrl.dev/agrl"

	"math"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/core/graph"
)

func TestPlayRefactorUnchanged(t *testing.T) {
	env := addEnv{}
	tasks, err := agrl.NewMix(3).Tasks(env, agrl.Train, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		ep, err := agrl.Play(env, task, addExpert, agrl.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if !ep.Correct || ep.Termination != agrl.Answered || len(ep.Turns) != 2 {
			t.Errorf("expert episode: %v", ep)
		}
	}
	bad := agrl.AgentFunc(func(*agrl.Episode) (string, error) { return "no tags here", nil })
	ep, _ := agrl.Play(env, tasks[0], bad, agrl.Limits{MaxInvalid: 2})
	if ep.Termination != agrl.TooManyInvalid || len(ep.Turns) != 2 {
		t.Errorf("invalid agent: %v", ep)
	}
	loop := agrl.AgentFunc(func(*agrl.Episode) (string, error) { return agrl.ToolAction("add", "1+1"), nil })
	ep, _ = agrl.Play(env, tasks[0], loop, agrl.Limits{MaxTurns: 4})
	if ep.Termination != agrl.MaxTurnsReached || len(ep.Turns) != 4 {
		t.Errorf("looping agent: %v", ep)
	}
	ep, _ = agrl.Play(env, tasks[0], loop, agrl.Limits{MaxTurns: 50, MaxBytes: 60})
	if ep.Termination != agrl.TokenBudget {
		t.Errorf("byte budget: %v", ep)
	}
}

func TestEncodeEpisode(t *testing.T) {
	tok := agrl.ASCIITokenizer()
	env := addEnv{}
	task, _ := env.Generate(nil2(), agrl.Easy)
	ep, err := agrl.Play(env, task, addExpert, agrl.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ids, mask := agrl.EncodeEpisode(tok, ep)
	if len(ids) != len(mask) || ids[0] != agrl.BOS {
		t.Fatalf("bad encoding %v %v", ids, mask)
	}
	want := "<bos>" + ep.Prompt + ep.Turns[0].Text + agrl.Observation(ep.Turns[0].Observation) + ep.Turns[1].Text
	var got string
	for _, id := range ids {
		if id == agrl.BOS {
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
	p := MustNewPolicy(testLM())
	env := addEnv{}
	tasks, err := agrl.NewMix(1).Tasks(env, agrl.Train, 6)
	if err != nil {
		t.Fatal(err)
	}
	var ended []int
	opt := agrl.RolloutOptions{Sampling: agrl.Sampling{Temperature: 1, Seed: 3, MaxActionTokens: 12}, MaxTokens: 64,
		Progress: func(done, total int) {
			if total != 6 {
				t.Errorf("progress: total %d, want 6", total)
			}
			ended = append(ended, done)
		}}
	eps, st, err := p.Rollout(env, tasks, opt)
	if err != nil {
		t.Fatal(err)
	}
	if st.Episodes != 6 || st.Generated == 0 || st.Steps == 0 {
		t.Errorf("stats %+v", st)
	}
	if !slices.Equal(ended, []int{1, 2, 3, 4, 5, 6}) {
		t.Errorf("progress: episodes ended %v, want 1 … 6", ended)
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
		if ep.Turns[0].Action.Kind == agrl.Invalid && !slices.Contains([]agrl.Termination{agrl.TooManyInvalid, agrl.TokenBudget, agrl.MaxTurnsReached}, ep.Termination) {
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

// TestEpisodeBatchRatioIsOne trains on rollout episodes through EpisodeBatch: before any update
// the log-probs the trainer computes equal those recorded at sampling (sampler and scorer shift
// by one position and apply the temperature the same way, so the importance ratio is exactly 1
// at the first minibatch).
func TestEpisodeBatchRatioIsOne(t *testing.T) {
	p := MustNewPolicy(testLM())
	tasks, err := agrl.NewMix(4).Tasks(addEnv{}, agrl.Train, 6)
	if err != nil {
		t.Fatal(err)
	}
	temp := 0.8
	eps, _, err := p.Rollout(addEnv{}, tasks, agrl.RolloutOptions{Sampling: agrl.Sampling{Temperature: temp, Seed: 9, MaxActionTokens: 10}, MaxTokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	adv := []float64{1, -1, 0.5, -0.5, 0, 2}
	b, err := EpisodeBatch(eps, map[string][]float64{"adv": adv})
	if err != nil {
		t.Fatal(err)
	}
	// ratio = exp(logp - old_logp) on policy tokens; report its largest deviation from 1.
	ratioLoss := func(in LossInputs) (*graph.Node, map[string]*graph.Node) {
		mask := graph.Mul(in.Values["mask"], in.Valid)
		dev := graph.Abs(graph.Sub(graph.Exp(graph.Sub(in.LogProbs, in.Values["old_logp"])), graph.Const(mask.Graph(), float32(1))))
		worst := graph.ReduceAllMax(graph.Mul(dev, mask))
		n := graph.Max(in.Sums["mask"], graph.Const(mask.Graph(), float32(1)))
		loss := graph.Div(graph.Neg(graph.ReduceAllSum(graph.Mul(graph.Mul(mask, in.Values["adv"]), in.LogProbs))), n)
		return loss, map[string]*graph.Node{"max_ratio_dev": worst}
	}
	tr, err := p.NewTrainer("pg", ratioLoss, []string{"mask", "old_logp", "adv"}, agrl.NewAdamW(), temp)
	if err != nil {
		t.Fatal(err)
	}
	st, err := tr.Eval(b)
	if err != nil {
		t.Fatal(err)
	}
	if dev := st.Metrics["max_ratio_dev"]; dev > 1e-4 {
		t.Errorf("importance ratio deviates from 1 by %g before any update", dev)
	}
	if _, err := EpisodeBatch([]*agrl.Episode{{}}, nil); err == nil {
		t.Error("an episode without tokens was accepted")
	}
	if _, err := EpisodeBatch(eps, map[string][]float64{"adv": {1}}); err == nil {
		t.Error("a short per-episode value was accepted")
	}
}

// TestPolicyAgent: PolicyAgent writes what Complete writes after the episode's tokens, capped by
// maxActionTokens, or (0) by the rest of the context only; and it plays the same episode the
// same way every time (turn k draws with seed Seed+k).
func TestPolicyAgent(t *testing.T) {
	p := MustNewPolicy(testLM().Context(128))
	task, err := addEnv{}.Generate(nil2(), agrl.Medium)
	if err != nil {
		t.Fatal(err)
	}
	s := agrl.Sampling{Temperature: 1, Seed: 5}
	prompt := p.Tokenizer().AppendEncode([]int32{agrl.BOS}, task.Prompt)
	complete := func(maxNew int, seed uint64) string {
		s := s
		s.Seed = seed
		out, err := p.Complete([][]int32{prompt}, maxNew, s)
		if err != nil {
			t.Fatal(err)
		}
		return p.Tokenizer().Decode(out[0].Tokens)
	}
	for _, c := range []struct{ maxAction, maxNew int }{{0, 128 - len(prompt)}, {3, 3}} {
		ep, err := agrl.Play(addEnv{}, task, p.PolicyAgent(s, c.maxAction), agrl.Limits{MaxTurns: 1})
		if err != nil {
			t.Fatalf("PolicyAgent(s, %d): %v", c.maxAction, err)
		}
		if want := complete(c.maxNew, 5); len(ep.Turns) != 1 || ep.Turns[0].Text != want {
			t.Errorf("PolicyAgent(s, %d) wrote %q; Complete with %d new tokens writes %q", c.maxAction, ep.Turns[0].Text, c.maxNew, want)
		}
	}
	// Turn 1 of an episode draws with seed 6, however often the agent is asked.
	agent := p.PolicyAgent(s, 3)
	ep, err := agrl.Play(addEnv{}, task, agent, agrl.Limits{MaxTurns: 1})
	if err != nil {
		t.Fatal(err)
	}
	first, err := agent.Act(ep)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := agent.Act(ep)
	if first != again {
		t.Errorf("the same episode's turn 1: %q, then %q", first, again)
	}
}
