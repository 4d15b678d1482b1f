package agrl

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

var toyTask = Task{ID: "toy-1", Env: "toy", Prompt: "double 21", Answer: "42", Difficulty: Easy, Meta: map[string]string{"n": "21"}}

func TestPlayExpert(t *testing.T) {
	ep, err := Play(toyEnv{}, toyTask, toyExpert, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if ep.Termination != Answered || !ep.Correct || ep.Answer != "42" || len(ep.Turns) != 2 {
		t.Fatalf("expert episode: %v", ep)
	}
	if ep.Turns[0].Observation != "42" || ep.Turns[0].Action.Tool != "double" {
		t.Fatalf("first turn: %+v", ep.Turns[0])
	}
	want := "double 21\n<tool>double(21)</tool>\n<obs>42</obs>\n<answer>42</answer>"
	if got := ep.Transcript(); got != want {
		t.Fatalf("transcript:\n%s\nwant:\n%s", got, want)
	}
}

func TestPlayTerminations(t *testing.T) {
	cases := []struct {
		name   string
		lim    Limits
		agent  Agent
		want   Termination
		turns  int
		errSub string
	}{
		{"wrong answer", Limits{}, script("<answer>41</answer>"), Answered, 1, ""},
		{"gave up", Limits{}, script("<answer> </answer>"), GaveUp, 1, ""},
		{"max turns", Limits{}, script(ToolAction("double", "1"), ToolAction("double", "2"), ToolAction("double", "3")), MaxTurnsReached, 3, ""},
		{"max turns override", Limits{MaxTurns: 1}, script(ToolAction("double", "1")), MaxTurnsReached, 1, ""},
		{"invalid run", Limits{MaxTurns: 10}, script("x", "y", "z"), TooManyInvalid, 3, ""},
		{"invalid run resets", Limits{MaxTurns: 4, MaxInvalid: 2}, script("x", ToolAction("double", "1"), "y", "<answer>41</answer>"), Answered, 4, ""},
		{"budget", Limits{MaxBytes: 30}, script(ToolAction("double", "123456789")), TokenBudget, 1, ""},
		{"panic", Limits{}, script(ToolAction("panic", "")), EnvError, 1, "panicked"},
		{"hang", Limits{StepTimeout: 20 * time.Millisecond}, script(ToolAction("hang", "")), EnvError, 1, "timed out"},
		{"env ends", Limits{}, script(ToolAction("quit", "")), EnvEnded, 1, ""},
	}
	for _, c := range cases {
		ep, err := Play(toyEnv{}, toyTask, c.agent, c.lim)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if ep.Termination != c.want || len(ep.Turns) != c.turns || !strings.Contains(ep.Error, c.errSub) {
			t.Errorf("%s: got %s after %d turns (error %q), want %s after %d", c.name, ep.Termination, len(ep.Turns), ep.Error, c.want, c.turns)
		}
		if ep.Correct {
			t.Errorf("%s: marked correct", c.name)
		}
	}
}

func TestPlayPenalisesInvalidAndCapsObservations(t *testing.T) {
	ep, err := Play(toyEnv{}, toyTask, script("<tool>double(1", ToolAction("flood", ""), ToolAction("nope", "1"), AnswerText("42")), Limits{MaxTurns: 5, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if got := ep.Turns[0].Observation; got != "invalid action: unclosed <tool>" {
		t.Errorf("invalid action observation %q", got)
	}
	if n := len(ep.Turns[1].Observation); n > MaxObservationBytes || !strings.HasSuffix(ep.Turns[1].Observation, "[truncated]") {
		t.Errorf("flood observation not capped: %d bytes", n)
	}
	if ep.Turns[2].ToolError == "" || ep.ToolErrors() != 1 || ep.InvalidActions() != 1 || ep.ToolCalls() != 2 {
		t.Errorf("counts: tool errors %d, invalid %d, calls %d", ep.ToolErrors(), ep.InvalidActions(), ep.ToolCalls())
	}
	if !ep.Correct || ep.Termination != Answered {
		t.Errorf("final: %v", ep)
	}
}

func TestPlayErrors(t *testing.T) {
	if _, err := Play(toyEnv{}, Task{Env: "other"}, toyExpert, Limits{}); err == nil {
		t.Error("a refused task must be an error")
	}
	if _, err := Play(nil, toyTask, toyExpert, Limits{}); err == nil {
		t.Error("nil env must be an error")
	}
	ep, err := Play(toyEnv{}, toyTask, script(), Limits{})
	if err == nil || ep == nil || !strings.Contains(err.Error(), "script exhausted") {
		t.Errorf("agent failure: %v", err)
	}
}

func TestEpisodeJSONRoundTrip(t *testing.T) {
	ep, err := Play(toyEnv{}, toyTask, toyExpert, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewRubric().Add("answer", ExactAnswer, 1).Add("turns", TurnCount, 0).Score(ep); err != nil {
		t.Fatal(err)
	}
	ep.Tokens, ep.LossMask, ep.LogProbs = []int32{1, 2, 3}, []uint8{0, 1, 1}, []float32{0, -0.5, -0.25}
	b, err := json.Marshal(ep)
	if err != nil {
		t.Fatal(err)
	}
	var back Episode
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*ep, back) {
		t.Fatalf("round trip differs:\n%+v\n%+v", *ep, back)
	}
	if !strings.Contains(string(b), `"difficulty":"easy"`) || !strings.Contains(string(b), `"kind":"tool"`) {
		t.Errorf("JSON should name enums: %s", b)
	}
}

func TestTruncateObservation(t *testing.T) {
	s := strings.Repeat("é", 100) // 200 bytes
	got := TruncateObservation(s, 51)
	if len(got) > 51 || !strings.HasSuffix(got, "…[truncated]") || !strings.HasPrefix(got, "é") {
		t.Errorf("got %q (%d bytes)", got, len(got))
	}
	if TruncateObservation("short", 51) != "short" {
		t.Error("short strings stay")
	}
}

func TestGoldAnswer(t *testing.T) {
	task := Task{ID: "t", Env: "x", Prompt: "What is 2+2?", Answer: "4", Difficulty: Easy}
	got, err := GoldAnswer().Act(&Episode{Task: task, Prompt: task.Prompt})
	if err != nil || got != "<answer>4</answer>" {
		t.Errorf("GoldAnswer: %q, %v", got, err)
	}
}
