package main

import (
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"agrl.dev/agrl"
)

// TestInspect: `agrl inspect` opens a quick run's recorded steps — the newest by default, a
// named one, one episode with every token — re-derives the logged metrics (exit 0 only when
// they match), prints JSON, and names the recorded steps for one that was not. (The run also
// writes a CPU profile, -cpuprofile: a gzip-compressed pprof file.)
func TestInspect(t *testing.T) {
	out := filepath.Join(t.TempDir(), "calc")
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	if code, _, stderr := runCLI(append([]string{"train", "--env", "calc", "--out", out, "--trajectories-every", "1", "--cpuprofile", prof}, quick...)...); code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	if b, err := os.ReadFile(prof); err != nil || len(b) < 100 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("-cpuprofile: %d bytes (%v), want a gzip-compressed profile", len(b), err)
	}
	if code, _, stderr := runCLI("train", "--env", "calc", "--cpuprofile", filepath.Join(out, "no", "such", "dir", "p"), "--out", filepath.Join(t.TempDir(), "x")); code == 0 || !strings.Contains(stderr, "cpuprofile") {
		t.Errorf("-cpuprofile into a missing directory: exit %d: %s", code, stderr)
	}
	code, stdout, stderr := runCLI("inspect", "--run", out)
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s\n%s", code, stderr, stdout)
	}
	for _, want := range []string{"step 2: ", "every metric re-derived from the record to within 1e-5", "groups: rewards → advantages",
		"advantages", "pos     id  text", "pg_loss", "share"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = runCLI("inspect", "--run", out, "--step", "1", "--episode", "0", "--all")
	if code != 0 || !strings.Contains(stdout, "step 1: ") || !strings.Contains(stdout, "episode 0 (group 0)") || !strings.Contains(stdout, "   ·\n") {
		t.Fatalf("inspect -step 1 -all: exit %d: %s\n%s", code, stderr, stdout)
	}
	code, stdout, _ = runCLI("inspect", "--run", out, "--step", "1", "--json")
	var js struct {
		Logged, Derived map[string]float64
		Tokens          []struct {
			Mask  bool    `json:"mask"`
			Ratio float64 `json:"ratio"`
		}
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &js) != nil || len(js.Tokens) == 0 || len(js.Derived) != len(js.Logged) {
		t.Fatalf("inspect -json: exit %d: %.300s", code, stdout)
	}
	// -replay re-runs any step from a checkpoint, given the flags the run was trained with.
	code, stdout, stderr = runCLI(append([]string{"inspect", "--run", out, "--step", "2", "--replay", "--trajectories-every", "1"}, quick...)...)
	if code != 0 || !strings.Contains(stdout, "replayed step 2 from the checkpoint of step ") || !strings.Contains(stdout, "every metric as logged, bit for bit") ||
		!strings.Contains(stdout, "every metric re-derived from the record to within 1e-5") || strings.Contains(stdout, "replaying with the run's settings") {
		t.Fatalf("inspect -replay: exit %d: %s\n%s", code, stderr, stdout)
	}
	// Without them, the flags that set one setting each take the run's values from config.json.
	code, stdout, stderr = runCLI("inspect", "--run", out, "--step", "2", "--replay", "--group", "2")
	const filled = "replaying with the run's settings (its config.json) where no flag gave them: -demos=16 -eval-tasks=3 -max-action-tokens=24 -sft-steps=4\n"
	if code != 0 || !strings.HasPrefix(stdout, filled) || !strings.Contains(stdout, "every metric as logged, bit for bit") {
		t.Fatalf("inspect -replay without the train flags: exit %d: %s\n%s", code, stderr, stdout)
	}
	// A flag given that the run did not have is named, with the run's value.
	code, _, stderr = runCLI("inspect", "--run", out, "--step", "2", "--replay", "--lr", "0.5", "--group", "3")
	if code != 2 || !strings.Contains(stderr, "the flags describe other settings than those "+out+" was trained with") ||
		!strings.Contains(stderr, "\n  group: 2 → 3\n  optimizer.lr: 0.0001 → 0.5\n") || strings.Contains(stderr, ".agrl-replay") {
		t.Errorf("inspect -replay with another -lr and -group: exit %d: %s", code, stderr)
	}
	for _, bad := range [][]string{
		{"inspect"},
		{"inspect", "--run", out, "--step", "-1"},
		{"inspect", "--run", out, "--step", "1", "--episode", "9999"},
		{"inspect", "--run", out, "--step", "1", "--episode", "-5"},
	} {
		if code, _, _ := runCLI(bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
	if code, _, stderr := runCLI("inspect", "--run", out, "--step", "7"); code != 1 || !strings.Contains(stderr, "recorded steps: 1, 2") {
		t.Errorf("unrecorded step: exit %d: %s", code, stderr)
	}
}

// runFlags gives -replay the flags that rebuild a run's settings from its config.json, in
// forms the flag package parses: a large seed whole, no warm start as -sft-steps 0 alone, and
// -clip with the run's -clip-high (-clip alone sets both sides).
func TestReplayFlagsFromConfig(t *testing.T) {
	parse := func(args ...string) trainFlags {
		fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f trainFlags
		f.register(fs, args)
		if err := fs.Parse(args); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return f
	}
	trained := []string{"--env", "calc", "--seed", "9007199254740993", "--clip", "0.1", "--clip-high", "0.2",
		"--sft-steps", "0", "--eval-tasks", "2000000", "--kl", "0"}
	dir := t.TempDir()
	b, err := json.Marshal(flagsConfig(t, trained...))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, agrl.RunConfigFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	fill, err := runFlags(parse("--env", "calc"), dir, map[string]bool{"env": true}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-clip-high=0.2", "-clip=0.1", "-eval-tasks=2000000", "-kl=0", "-seed=9007199254740993", "-sft-steps=0"}
	if !slices.Equal(fill, want) {
		t.Fatalf("filled %q, want %q", fill, want)
	}
	f := parse(append(append([]string{}, fill...), "--env", "calc")...)
	g, err := f.config(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if binding, _, err := g.ResumeChanges(json.RawMessage(b)); err != nil || len(binding) > 0 {
		t.Errorf("the filled flags still differ from the run: %v %v", binding, err)
	}
}
