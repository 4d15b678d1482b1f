package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"agrl.dev/agrl"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestEnvs(t *testing.T) {
	code, out, _ := runCLI("envs")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"calc", "multihop", "filesearch", "search", "cat"} {
		if !strings.Contains(out, want) {
			t.Errorf("envs output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCLI("envs", "--json")
	var list []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 3 {
		t.Fatalf("envs --json: %d %s", code, out)
	}
}

func TestSampleExpertJSON(t *testing.T) {
	for _, env := range []string{"calc", "multihop", "filesearch"} {
		code, out, errOut := runCLI("sample", "--env", env, "--difficulty", "hard", "-n", "3", "--seed", "5", "--json")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", env, code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 {
			t.Fatalf("%s: %d lines", env, len(lines))
		}
		for _, line := range lines {
			var ep agrl.Episode
			if err := json.Unmarshal([]byte(line), &ep); err != nil {
				t.Fatal(err)
			}
			if !ep.Correct || ep.Task.Difficulty != agrl.Hard || len(ep.Rewards) == 0 || ep.Reward <= 0 {
				t.Errorf("%s: expert episode %v", env, &ep)
			}
		}
		// Same seed, same output.
		_, again, _ := runCLI("sample", "--env", env, "--difficulty", "hard", "-n", "3", "--seed", "5", "--json")
		if again != out {
			t.Errorf("%s: sample is not deterministic", env)
		}
	}
}

func TestSampleText(t *testing.T) {
	code, out, errOut := runCLI("sample", "--env", "calc", "--difficulty", "extreme", "-n", "1", "--agent", "random", "--seed", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"(extreme, ood)", "prompt: Compute:", "-- random episode:", "rewards: format"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	cases := [][]string{
		{},
		{"frobnicate"},
		{"sample", "--env", "nope"},
		{"sample", "--difficulty", "impossible", "-n", "0", "--agent", "oracle"},
		{"sample", "--split", "holdout"},
		{"sample", "extra"},
		{"sample", "--no-such-flag"},
	}
	for _, args := range cases {
		code, _, errOut := runCLI(args...)
		if code != 2 || errOut == "" {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
	// Every problem of a command line is reported at once.
	_, _, errOut := runCLI("sample", "--env", "nope", "--difficulty", "impossible", "-n", "0", "--agent", "oracle")
	for _, want := range []string{`unknown environment "nope"`, `unknown difficulty "impossible"`, "-n 0", `-agent "oracle"`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q: %s", want, errOut)
		}
	}
	if code, out, _ := runCLI("help"); code != 0 || !strings.Contains(out, "agrl sample") {
		t.Error("help")
	}
}
