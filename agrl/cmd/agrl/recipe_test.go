package main

import (
	"encoding/json"
	"flag"
	"io"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/envs"
)

// flagsConfig parses args as `agrl train` does and returns the resolved configuration.
func flagsConfig(t *testing.T, args ...string) agrl.GRPOConfig {
	t.Helper()
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f trainFlags
	f.register(fs, args)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	g, err := f.config(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return g.Resolved()
}

func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The recipe exists once: `agrl train --env E` with no other flag trains exactly E's recipe.
func TestTrainDefaultsAreTheRecipe(t *testing.T) {
	for _, e := range envs.All() {
		got := asJSON(t, flagsConfig(t, "--env", e.Name))
		want := asJSON(t, e.Recipe().Resolved())
		if got != want {
			t.Errorf("%s: agrl train's defaults differ from the recipe:\n flags  %s\n recipe %s", e.Name, got, want)
		}
	}
}

// Flags change only what they name.
func TestTrainFlagsOverrideTheRecipe(t *testing.T) {
	c := flagsConfig(t, "--env", "calc", "--lr", "3e-4", "--guess-frac", "0.2", "--sft-steps", "500", "--seed", "7", "--demo-mix", "")
	want := calcRecipeWith(t, func(g agrl.GRPO) agrl.GRPO {
		e, _ := envs.Get("calc")
		sft := g.Spec().SFT.Steps(500)
		return g.LR(3e-4).Seed(7).WarmStart(sft, e.Demos(0.2, 0)...).DemoMix(g.Spec().Mix)
	})
	if got := asJSON(t, c); got != asJSON(t, want) {
		t.Errorf("flags:\n got  %s\n want %s", got, asJSON(t, want))
	}
}

func calcRecipeWith(t *testing.T, change func(agrl.GRPO) agrl.GRPO) agrl.GRPOConfig {
	t.Helper()
	e, err := envs.Get("calc")
	if err != nil {
		t.Fatal(err)
	}
	return change(e.Recipe()).Resolved()
}

// The env that picks the defaults is the -env flag's, not a value that reads "env".
func TestRecipeDefaultsFollowTheEnvFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "calc"},
		{[]string{"--env", "multihop"}, "multihop"},
		{[]string{"-env=filesearch"}, "filesearch"},
		{[]string{"--out", "env", "--steps", "3"}, "calc"},
		{[]string{"--out", "env", "--env", "multihop"}, "multihop"},
	} {
		if got, _ := recipeDefaults(c.args); got != c.want {
			t.Errorf("%q: env %q, want %q", c.args, got, c.want)
		}
	}
	if c := flagsConfig(t, "--env", "multihop"); c.Steps != 100 {
		t.Errorf("multihop defaults: %d steps, want the recipe's 100", c.Steps)
	}
}
