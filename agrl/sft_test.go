package agrl

import (
	"testing"
)

func TestSFTLearnsToolUse(t *testing.T) {
	env := addEnv{}
	mix := NewMix(7).Easy(1).Medium(0).Hard(0)
	train, err := mix.Tasks(env, Train, 60)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := mix.Tasks(env, Dev, 10)
	if err != nil {
		t.Fatal(err)
	}
	experts, err := ExpertEpisodes(env, addExpert, train, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	p := TinyLM().Width(64).Heads(4).Layers(2).MLP(128).Context(64).Seed(3).MustBuild()
	rep, err := SFT().Steps(150).Batch(16).Seed(5).Eval(RolloutOptions{Sampling: Sampling{MaxActionTokens: 24}}).
		Run(p, experts, env, dev)
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
	if len(rep.Evals) != 1 || rep.Evals[0].Episodes != len(dev) {
		t.Fatalf("evals %+v", rep.Evals)
	}
	if rep.Evals[0].Success < 0.5 {
		t.Errorf("greedy dev success %.2f after SFT", rep.Evals[0].Success)
	}
}
