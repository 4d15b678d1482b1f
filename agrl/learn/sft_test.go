package learn

import (
	"agrl.dev/agrl"

	"math/rand/v2"
	"testing"
)

func TestSFTLearnsToolUse(t *testing.T) {
	env := addEnv{}
	mix := agrl.NewMix(7).Easy(1).Medium(0).Hard(0)
	train, err := mix.Tasks(env, agrl.Train, 60)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := mix.Tasks(env, agrl.Dev, 10)
	if err != nil {
		t.Fatal(err)
	}
	experts, err := agrl.ExpertEpisodes(env, addExpert, train, agrl.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	p := MustNewPolicy(agrl.TinyLM().Width(64).Heads(4).Layers(2).MLP(128).Context(64).Seed(3))
	rep, err := p.SFT(agrl.SFT().Steps(150).Batch(16).Seed(5).Eval(agrl.RolloutOptions{Sampling: agrl.Sampling{MaxActionTokens: 24}}),
		experts, env, dev)
	if err != nil {
		t.Fatal(err)
	}
	first, last := rep.Steps[0], rep.Final()
	t.Logf("loss %.3f -> %.3f, accuracy %.2f -> %.2f, %.0f tokens/s; dev %+v",
		first.Loss, last.Loss, first.Metrics["accuracy"], last.Metrics["accuracy"], rep.TokensPerSecond, rep.Evals)
	if last.Loss > first.Loss/3 {
		t.Errorf("loss only fell from %.3f to %.3f", first.Loss, last.Loss)
	}
	if last.Metrics["accuracy"] < 0.7 {
		t.Errorf("token accuracy %.2f after SFT", last.Metrics["accuracy"])
	}
	if len(rep.Evals) != 1 || rep.Evals[0].N != len(dev) || rep.Evals[0].Step != 150 || rep.Evals[0].Split != agrl.Dev {
		t.Fatalf("evals %+v", rep.Evals)
	}
	if ev := rep.Evals[0]; ev.ToolCallRate < 0 || ev.ToolCallRate > 1 || ev.MeanToolCalls < ev.ToolCallRate || ev.MeanReward != 0 {
		t.Errorf("tool-call rate %v (a share of episodes) and %v calls per episode; mean reward %v (unscored: 0)", ev.ToolCallRate, ev.MeanToolCalls, ev.MeanReward)
	}
	if rep.Evals[0].Success < 0.5 {
		t.Errorf("greedy dev success %.2f after SFT", rep.Evals[0].Success)
	}
}

func TestEpisodeDrawsFollowTheCurriculum(t *testing.T) {
	// Without a curriculum the draws are the plain uniform draws of the SFT seed.
	plain, err := newEpisodeDraws([]int{1, 1, 1, 1, 1}, 7)
	if err != nil {
		t.Fatal(err)
	}
	ref := rand.New(rand.NewPCG(7, 0x736674))
	for step := 1; step <= 50; step++ {
		if got, want := plain.next(step), ref.IntN(5); got != want {
			t.Fatalf("step %d: drew %d, want %d", step, got, want)
		}
	}
	// Episodes 1 and 3 join at step 11: never drawn before it, both drawn after it.
	d, err := newEpisodeDraws([]int{1, 11, 1, 11, 1}, 7)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	for step := 1; step <= 10; step++ {
		for range 8 {
			if k := d.next(step); k == 1 || k == 3 {
				t.Fatalf("step %d drew episode %d, which joins at step 11", step, k)
			}
		}
	}
	for step := 11; step <= 40; step++ {
		for range 8 {
			seen[d.next(step)]++
		}
	}
	for k := range 5 {
		if seen[k] == 0 {
			t.Errorf("episode %d never drawn after step 11: %v", k, seen)
		}
	}
	if _, err := newEpisodeDraws([]int{3, 5}, 1); err == nil {
		t.Error("want an error when no episode is available at the first step")
	}
}
