package repl

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/envs/calc"
)

// options plays calc with the mix of seed 1; agent may be nil.
func options(agent Agent) Options {
	env := calc.New()
	return Options{Env: env, Rubric: calc.Rubric(), Agent: agent, Temperature: 0.3, Seed: 1,
		FromText: func(expr string) (agrl.Task, error) { return calc.NewTask(expr, agrl.Medium) },
		Tasks: func(n int, d agrl.Difficulty) (agrl.Task, error) {
			mix := agrl.NewMix(1)
			if d != 0 {
				mix = mix.Only(d)
			}
			tasks, err := mix.Tasks(env, agrl.Dev, n+1)
			if err != nil {
				return agrl.Task{}, err
			}
			return tasks[n], nil
		}}
}

// transcript runs the lines through Run in plain mode and returns the output.
func transcript(t *testing.T, o Options, lines ...string) string {
	t.Helper()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Run(s, strings.NewReader(strings.Join(lines, "\n")+"\n"), &out, false); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func wantAll(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// TestPlayAnEpisode: a human episode from prompt to reward breakdown, with a tool error, an
// invalid action and an undo on the way; the values are the env's and the rubric's.
func TestPlayAnEpisode(t *testing.T) {
	out := transcript(t, options(nil),
		":task 12*(3+4)",
		"<tool>calc(12*(3+4)</tool>", // unbalanced: a tool error
		"hello",                      // not the protocol: invalid
		":undo",
		"<tool>calc(12*(3+4))</tool>",
		"<answer>84</answer>",
		"<answer>85</answer>", // after the end
		":quit")
	wantAll(t, out,
		"Compute: 12*(3+4)",
		"turn 2> hello\ninvalid:",
		"took back turn 2",
		"turn 2> <tool>calc(12*(3+4))</tool>\nobs: 84",
		`answer "84": correct (gold "84")`,
		"reward 1.000 = format 1.000×0.2 + tool 1.000×0.3 + answer 1.000×0.5", // the undone invalid action does not count
		"(logged: turns 3, tool_errors 1)",
		"error: the episode is over")
	if !strings.Contains(out, "tool error:") {
		t.Errorf("no tool error shown:\n%s", out)
	}
}

// TestCommands: every command's success and failure paths.
func TestCommands(t *testing.T) {
	save := filepath.Join(t.TempDir(), "eps.jsonl")
	out := transcript(t, options(nil),
		":help", ":new hard", ":new nonsense", ":task 3", ":task -1", ":task 99999999999", ":task 1/0", ":task", ":temp 0.5", ":temp -1",
		":step", ":auto", ":why", ":undo", ":show", ":save", "<answer>7</answer>", ":save "+save, ":frobnicate", ":q")
	wantAll(t, out, ":undo              take back the last action", "(hard)", `error: agrl: unknown difficulty`,
		"error: :task -1: want a number 0..99999", "error: :task 99999999999: want a number 0..99999", `error: calc: "1/0"`, "error: :task wants", "temperature 0.5",
		"error: :temp wants", "error: no agent", "error: nothing to undo", "error: :save wants a file name",
		"saved the episode (1 turns)", "error: unknown command :frobnicate")
	if strings.Count(out, "(hard)") < 2 {
		t.Errorf(":task 3 after :new hard is not a hard task:\n%s", out)
	}
	eps, err := agrl.ReadEpisodes(save)
	if err != nil || len(eps) != 1 || eps[0].Answer != "7" || len(eps[0].Rewards) == 0 {
		t.Fatalf("saved episodes %v, %v: want the scored episode", eps, err)
	}
}

// scripted is an agent that plays fixed actions and explains them.
type scripted struct {
	actions []string
	calls   []string
}

func (a *scripted) Act(ep *agrl.Episode, temperature float64, seed uint64) (string, error) {
	a.calls = append(a.calls, fmt.Sprintf("turn %d t=%g seed=%d", len(ep.Turns), temperature, seed))
	if len(ep.Turns) >= len(a.actions) {
		return "", errors.New("out of actions")
	}
	return a.actions[len(ep.Turns)], nil
}

func (a *scripted) Explain(ep *agrl.Episode, turn int, temperature float64, k int) ([]TokenChoice, error) {
	return []TokenChoice{{Text: "<answer>", LogProb: -0.01, Alternatives: []Alternative{{"<answer>", -0.01}, {"<tool>", -4.6}}},
		{Text: "84", LogProb: -3.0}}, nil
}

// TestAgentSteps: Enter and :step let the agent act with the session's temperature and seeds,
// the user takes over in between, :auto plays to the end, :why shows the tokens.
func TestAgentSteps(t *testing.T) {
	a := &scripted{actions: []string{"<tool>calc(12*(3+4))</tool>", "<tool>calc(84)</tool>", "<tool>calc(1/0)</tool>", "<answer>84</answer>"}}
	out := transcript(t, options(a), ":task 12*(3+4)", "", ":temp 0.9", "<tool>calc(84)</tool>", ":auto", ":why", ":quit")
	wantAll(t, out, "agent: <tool>calc(12*(3+4))</tool>\nobs: 84", "agent: <tool>calc(1/0)</tool>\ntool error:", "agent: <answer>84</answer>", `answer "84": correct`,
		`"<answer>"  -0.010   "<answer>" -0.010, "<tool>" -4.600`, "\"84\"        -3.000\n")
	if got := strings.Join(a.calls, "; "); got != "turn 0 t=0.3 seed=1; turn 2 t=0.9 seed=2; turn 3 t=0.9 seed=3" { // :auto goes on after a tool error
		t.Errorf("agent calls %q", got)
	}
	if strings.Contains(out, "\033[") {
		t.Error("colour codes in plain output")
	}
}

// TestNewValidates: a session needs an env, a task source, a valid rubric and temperature.
func TestNewValidates(t *testing.T) {
	_, err := New(Options{Temperature: -1})
	if err == nil {
		t.Fatal("invalid options accepted")
	}
	for _, w := range []string{"no environment", "no task source", "temperature -1"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}
