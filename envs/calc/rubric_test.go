package calc

import (
	"errors"
	"math"
	"testing"

	"agrl.dev/agrl"
)

// script returns an agent that writes the given actions in order.
func script(actions ...string) agrl.Agent {
	return agrl.AgentFunc(func(ep *agrl.Episode) (string, error) {
		if len(ep.Turns) >= len(actions) {
			return "", errors.New("script exhausted")
		}
		return actions[len(ep.Turns)], nil
	})
}

func TestRubricOnHandBuiltEpisodes(t *testing.T) {
	task, _ := NewTask("12+7*(3-5)", agrl.Medium)
	call := agrl.ToolAction("calc", "12+7*(3-5)")
	cases := []struct {
		name    string
		actions []string
		want    float64
		tool    float64
	}{
		{"expert", []string{call, "<answer>-2</answer>"}, 1.0, 1},
		{"answer only, correct", []string{"<answer>-2</answer>"}, 0.7, 0},
		{"answer only, +/leading zeros", []string{"<answer> -002 </answer>"}, 0.7, 0},
		{"tool then wrong answer", []string{call, "<answer>2</answer>"}, 0.5, 1},
		{"tool then give up", []string{call, "<answer></answer>"}, 0.5, 1},
		{"tool until out of turns", []string{call, call, call, call}, 0.5, 1},
		{"all invalid", []string{"hello", "<tool>calc(1)", "<answer>-2"}, 0, 0},
		{"answer only, wrong", []string{"<answer>-3</answer>"}, 0.2, 0},
		{"answer 5.0 is wrong", []string{"<answer>-2.0</answer>"}, 0.2, 0},
		{"wrong expression, correct answer", []string{agrl.ToolAction("calc", "12+7*3-5"), "<answer>-2</answer>"}, 0.7, 0},
		{"tool error, correct answer", []string{agrl.ToolAction("calc", "12+7*(3-5"), "<answer>-2</answer>"}, 0.7, 0},
		{"wrong tool name", []string{agrl.ToolAction("calculator", "12+7*(3-5)"), "<answer>-2</answer>"}, 0.7, 0},
		{"equivalent expression", []string{agrl.ToolAction("calc", `"(12)+(7*(3-5))"`), "<answer>-2</answer>"}, 1.0, 1},
		{"one invalid, then expert", []string{"oops", call, "<answer>-2</answer>"}, 0.2*2/3 + 0.8, 1},
	}
	for _, c := range cases {
		ep, err := agrl.Play(New(), task, script(c.actions...), agrl.Limits{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, err := Rubric().Score(ep)
		tool, _ := ep.RewardOf("tool")
		if err != nil || math.Abs(got-c.want) > 1e-9 || tool != c.tool {
			t.Errorf("%s: reward %v (tool %v, %v), want %v (tool %v)\n%s", c.name, got, tool, err, c.want, c.tool, ep.Transcript())
		}
	}
}

func TestRubricPreset(t *testing.T) {
	r := Rubric()
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"format": 0.2, "tool": 0.3, "answer": 0.5, "turns": 0, "tool_errors": 0}
	got := r.Weights()
	if len(got) != len(want) {
		t.Fatalf("weights %v", got)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("weight of %s = %v, want %v", k, got[k], w)
		}
	}
}

func TestCalledCorrectlyGarbledTask(t *testing.T) {
	ep := &agrl.Episode{Task: agrl.Task{Answer: "minus two"}, Turns: []agrl.Turn{
		{Action: agrl.Action{Kind: agrl.ToolCall, Tool: "calc", Args: "1"}, Observation: "1"}}}
	if v := CalledCorrectly(ep); v != 0 {
		t.Errorf("CalledCorrectly with a non-integer gold = %v", v)
	}
	ep.Task.Answer = "1"
	if v := CalledCorrectly(ep); v != 1 {
		t.Errorf("CalledCorrectly = %v, want 1", v)
	}
	ep.Turns[0].ToolError = "boom"
	if v := CalledCorrectly(ep); v != 0 {
		t.Errorf("CalledCorrectly on a failed call = %v, want 0", v)
	}
}
