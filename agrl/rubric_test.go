package agrl

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func turn(text, obs, toolErr string) Turn {
	return Turn{Text: text, Action: ParseAction(text), Observation: obs, ToolError: toolErr}
}

func TestRubricScoreHandComputed(t *testing.T) {
	// Two valid tool calls (one failed, one repeated), one invalid action, a wrong answer.
	ep := &Episode{
		Task: toyTask,
		Turns: []Turn{
			turn(ToolAction("double", "x"), "error: not an integer", "bad argument"),
			turn("oops", "invalid action: no <tool> or <answer> tag", ""),
			turn(ToolAction("double", "x"), "error: not an integer", "bad argument"),
			turn(AnswerText("41"), "", ""),
		},
		Termination: Answered, Answer: "41",
	}
	r := NewRubric().
		Add("format", WellFormed, 0.2).
		Add("tool", UsedTool("double"), 0.3).
		Add("answer", ExactAnswer, 0.5).
		Add("wrong", WrongAnswer, -0.5).
		Add("invalid", InvalidActions, -0.1).
		Add("tool_errors", ToolErrors, -0.05).
		Add("repeats", RepeatedToolCalls, -0.02).
		Add("turns", TurnCount, 0)
	got, err := r.Score(ep)
	if err != nil {
		t.Fatal(err)
	}
	// format 3/4 valid -> 0.75*0.2 = 0.15; tool 0 (both calls failed); answer 0; wrong -0.5;
	// invalid 1*-0.1; tool errors 2*-0.05; repeats 1*-0.02; turns 4*0.
	want := 0.15 - 0.5 - 0.1 - 0.1 - 0.02
	if math.Abs(got-want) > 1e-12 || math.Abs(ep.Reward-want) > 1e-12 {
		t.Fatalf("reward %v, want %v", got, want)
	}
	wantTerms := map[string]float64{"format": 0.75, "tool": 0, "answer": 0, "wrong": 1, "invalid": 1, "tool_errors": 2, "repeats": 1, "turns": 4}
	if len(ep.Rewards) != len(wantTerms) {
		t.Fatalf("breakdown %+v", ep.Rewards)
	}
	for _, term := range ep.Rewards {
		if term.Value != wantTerms[term.Name] {
			t.Errorf("%s = %v, want %v", term.Name, term.Value, wantTerms[term.Name])
		}
	}
	if v, ok := ep.RewardOf("turns"); !ok || v != 4 {
		t.Errorf("RewardOf(turns) = %v, %v", v, ok)
	}
}

func TestPenaltyComponents(t *testing.T) {
	errQuit := &Episode{Turns: []Turn{turn(ToolAction("cat", "/nope"), "error: no such file", "no such file"), turn(AnswerText(""), "", "")}, Termination: GaveUp}
	errThenFix := &Episode{Turns: []Turn{turn(ToolAction("cat", "/nope"), "error", "no such file"), turn(ToolAction("cat", "/a"), "x", ""), turn(AnswerText(""), "", "")}, Termination: GaveUp}
	errThenWrong := &Episode{Turns: []Turn{turn(ToolAction("cat", "/nope"), "error", "no such file"), turn(AnswerText("y"), "", "")}, Termination: Answered}
	cut := &Episode{Termination: MaxTurnsReached}
	cases := []struct {
		name string
		fn   RewardFunc
		ep   *Episode
		want float64
	}{
		{"error then quit", ErrorThenQuit, errQuit, 1},
		{"error, success, quit", ErrorThenQuit, errThenFix, 0},
		{"error then wrong answer", ErrorThenQuit, errThenWrong, 0},
		{"gave up", GaveUpPenalty, errQuit, 1},
		{"cut off", CutOff, cut, 1},
		{"not cut off", CutOff, errThenWrong, 0},
		{"wrong", WrongAnswer, errThenWrong, 1},
		{"gave up is not wrong", WrongAnswer, errQuit, 0},
		{"format of empty", WellFormed, cut, 0},
	}
	for _, c := range cases {
		if got := c.fn(c.ep); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestRubricIsAValue(t *testing.T) {
	base := NewRubric().Add("answer", ExactAnswer, 1)
	a := base.Add("format", WellFormed, 0.1)
	b := base.Add("turns", TurnCount, 0)
	if len(base.Names()) != 1 || strings.Join(a.Names(), ",") != "answer,format" || strings.Join(b.Names(), ",") != "answer,turns" {
		t.Fatalf("aliasing: base %v a %v b %v", base.Names(), a.Names(), b.Names())
	}
	c := a.Weight("format", 0.5)
	if a.Weights()["format"] != 0.1 || c.Weights()["format"] != 0.5 {
		t.Fatal("Weight changed the receiver")
	}
}

func TestRubricErrors(t *testing.T) {
	bad := NewRubric().Add("", ExactAnswer, 1).Add("a", nil, 1).Add("b", ExactAnswer, math.NaN()).
		Add("b", ExactAnswer, 1).Weight("missing", 1)
	err := bad.Validate()
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{"empty name", `"a" has no function`, `"b" has weight NaN`, `"b" added twice`, `"missing" has no function`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if _, err := bad.Score(&Episode{}); err == nil {
		t.Error("Score must refuse an invalid rubric")
	}
	nan := NewRubric().Add("x", func(*Episode) float64 { return math.Inf(1) }, 1)
	ep := &Episode{Reward: 7}
	if _, err := nan.Score(ep); err == nil || !strings.Contains(err.Error(), `"x" returned +Inf`) {
		t.Errorf("Inf reward: %v", err)
	}
	if ep.Reward != 7 || ep.Rewards != nil {
		t.Error("a failed Score must leave the episode unscored")
	}
	if _, err := NewRubric().Score(nil); err == nil {
		t.Error("nil episode")
	}
}

func ExampleRubric() {
	rubric := NewRubric().
		Add("format", WellFormed, 0.2).
		Add("tool", UsedTool("double"), 0.3).
		Add("answer", ExactAnswer, 0.5).
		Add("turns", TurnCount, 0) // weight 0: logged, not trained on

	ep := &Episode{
		Turns: []Turn{
			{Text: "<tool>double(21)</tool>", Action: ParseAction("<tool>double(21)</tool>"), Observation: "42"},
			{Text: "<answer>42</answer>", Action: ParseAction("<answer>42</answer>")},
		},
		Termination: Answered, Answer: "42", Correct: true,
	}
	reward, err := rubric.Score(ep)
	if err != nil {
		panic(err)
	}
	fmt.Printf("reward %.2f\n", reward)
	for _, term := range ep.Rewards {
		fmt.Printf("%-6s value %.0f weight %.1f\n", term.Name, term.Value, term.Weight)
	}
	// Output:
	// reward 1.00
	// format value 1 weight 0.2
	// tool   value 1 weight 0.3
	// answer value 1 weight 0.5
	// turns  value 2 weight 0.0
}
