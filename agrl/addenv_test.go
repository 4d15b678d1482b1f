package agrl

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// addEnv is a toy tool-calling environment for the policy tests: "What is A+B?" with one tool,
// add(A+B), that returns the sum. The expert calls the tool, then answers with its output.
type addEnv struct{ maxTurns int }

func (e addEnv) Name() string { return "add" }
func (e addEnv) Tools() []Tool {
	return []Tool{{Name: "add", Args: "expr: A+B", Doc: "returns the sum"}}
}
func (e addEnv) MaxTurns() int {
	if e.maxTurns == 0 {
		return 3
	}
	return e.maxTurns
}

func (e addEnv) Generate(rng *rand.Rand, d Difficulty) (Task, error) {
	hi := map[Difficulty]int{Easy: 10, Medium: 100, Hard: 1000, Extreme: 10000}[d]
	if hi == 0 {
		return Task{}, fmt.Errorf("no difficulty %v", d)
	}
	a, b := rng.IntN(hi), rng.IntN(hi)
	prompt := fmt.Sprintf("What is %d+%d?", a, b)
	return Task{Env: "add", Prompt: prompt, Answer: strconv.Itoa(a + b), Difficulty: d,
		Meta: map[string]string{"expr": fmt.Sprintf("%d+%d", a, b)}}, nil
}

func (e addEnv) Reset(t Task) (Session, string, error) {
	if t.Prompt == "" {
		return nil, "", fmt.Errorf("empty task")
	}
	return &addSession{gold: t.Answer}, t.Prompt, nil
}

type addSession struct{ gold string }

func (s *addSession) Step(a Action) StepResult {
	switch a.Kind {
	case ToolCall:
		if a.Tool != "add" {
			return StepResult{Observation: "unknown tool " + a.Tool, ToolError: "unknown tool"}
		}
		x, y, ok := strings.Cut(a.Args, "+")
		xi, err1 := strconv.Atoi(strings.TrimSpace(x))
		yi, err2 := strconv.Atoi(strings.TrimSpace(y))
		if !ok || err1 != nil || err2 != nil {
			return StepResult{Observation: "bad expression", ToolError: "bad args"}
		}
		return StepResult{Observation: strconv.Itoa(xi + yi)}
	case AnswerAction:
		return StepResult{Observation: "ok", Done: true, Correct: NormalizeAnswer(a.Answer) == NormalizeAnswer(s.gold)}
	}
	return StepResult{Observation: "?"}
}

// addExpert solves addEnv tasks: it calls the tool, then answers with the observation.
var addExpert = AgentFunc(func(ep *Episode) (string, error) {
	if len(ep.Turns) == 0 {
		return ToolAction("add", ep.Task.Meta["expr"]), nil
	}
	return AnswerText(ep.Turns[len(ep.Turns)-1].Observation), nil
})

func nil2() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }
