package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestPlayWithARun: a checkpoint acts through `agrl play -run` (plain input): Enter and :step
// for its actions, :why for the last one token by token with log-probs that are log-probs,
// :auto to the end, with the run's env and eval temperature; bad flags are usage errors.
func TestPlayWithARun(t *testing.T) {
	out := filepath.Join(t.TempDir(), "calc")
	if code, _, stderr := runCLI(append([]string{"train", "--env", "calc", "--out", out}, quick...)...); code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	prev := stdin
	defer func() { stdin = prev }()
	stdin = strings.NewReader(":task 12*(3+4)\n\n:why\n:step\n:auto\n:quit\n")
	code, stdout, stderr := runCLI("play", "--run", out)
	if code != 0 {
		t.Fatalf("play: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"agent: " + out + " at ckpt-", "temperature 0.3", "Compute: 12*(3+4)", "turn 1> \nagent: ",
		"token by token (log-prob; the likeliest alternatives)", "episode over"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Count(stdout, "agent: ") < 3 {
		t.Errorf("the agent acted %d times, want >= 2 (plus the header):\n%s", strings.Count(stdout, "agent: ")-1, stdout)
	}
	stdin = strings.NewReader("")
	for _, bad := range [][]string{
		{"play", "--env", "nope"},
		{"play", "--run", out, "--env", "multihop"},
		{"play", "--difficulty", "impossible"},
		{"play", "--temperature", "-1"},
		{"play", "--run", filepath.Join(t.TempDir(), "missing")},
	} {
		if code, _, stderr := runCLI(bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2: %s", bad, code, stderr)
		}
	}
}
