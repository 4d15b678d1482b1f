package learn

import (
	"agrl.dev/agrl"

	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// addEnv is a toy tool-calling environment for the policy tests: "What is A+B?" with one tool,
// add(A+B), that returns the sum. The expert calls the tool, then answers with its output.
type addEnv struct{ maxTurns int }

func (e addEnv) Name() string { return "add" }
func (e addEnv) Tools() []agrl.Tool {
	return []agrl.Tool{{Name: "add", Args: "expr: A+B", Doc: "returns the sum"}}
}
func (e addEnv) MaxTurns() int {
	if e.maxTurns == 0 {
		return 3
	}
	return e.maxTurns
}

func (e addEnv) Generate(rng *rand.Rand, d agrl.Difficulty) (agrl.Task, error) {
	hi := map[agrl.Difficulty]int{agrl.Easy: 10, agrl.Medium: 100, agrl.Hard: 1000, agrl.Extreme: 10000}[d]
	if hi == 0 {
		return agrl.Task{}, fmt.Errorf("no difficulty %v", d)
	}
	a, b := rng.IntN(hi), rng.IntN(hi)
	prompt := fmt.Sprintf("What is %d+%d?", a, b)
	return agrl.Task{Env: "add", Prompt: prompt, Answer: strconv.Itoa(a + b), Difficulty: d,
		Meta: map[string]string{"expr": fmt.Sprintf("%d+%d", a, b)}}, nil
}

func (e addEnv) Reset(t agrl.Task) (agrl.Session, string, error) {
	if t.Prompt == "" {
		return nil, "", fmt.Errorf("empty task")
	}
	return &addSession{gold: t.Answer}, t.Prompt, nil
}

type addSession struct{ gold string }

func (s *addSession) Step(a agrl.Action) agrl.StepResult {
	switch a.Kind {
	case agrl.ToolCall:
		if a.Tool != "add" {
			return agrl.StepResult{Observation: "unknown tool " + a.Tool, ToolError: "unknown tool"}
		}
		x, y, ok := strings.Cut(a.Args, "+")
		xi, err1 := strconv.Atoi(strings.TrimSpace(x))
		yi, err2 := strconv.Atoi(strings.TrimSpace(y))
		if !ok || err1 != nil || err2 != nil {
			return agrl.StepResult{Observation: "bad expression", ToolError: "bad args"}
		}
		return agrl.StepResult{Observation: strconv.Itoa(xi + yi)}
	case agrl.AnswerAction:
		return agrl.StepResult{Observation: "ok", Done: true, Correct: agrl.NormalizeAnswer(a.Answer) == agrl.NormalizeAnswer(s.gold)}
	}
	return agrl.StepResult{Observation: "?"}
}

// addExpert solves addEnv tasks: it calls the tool, then answers with the observation.
var addExpert = agrl.AgentFunc(func(ep *agrl.Episode) (string, error) {
	if len(ep.Turns) == 0 {
		return agrl.ToolAction("add", ep.Task.Meta["expr"]), nil
	}
	return agrl.AnswerText(ep.Turns[len(ep.Turns)-1].Observation), nil
})

func nil2() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }
