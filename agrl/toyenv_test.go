package agrl

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
)

// toyEnv is a tiny environment for the core's tests: the task asks for the double of a number,
// the tool double(x) computes it. Difficulty sets the number of digits. Special prompts make the
// session misbehave so the loop's defences can be tested.
type toyEnv struct {
	maxTurns int
	tiny     bool // only 10 easy prompts
}

func (e toyEnv) Name() string { return "toy" }
func (e toyEnv) Tools() []Tool {
	return []Tool{{Name: "double", Args: "x: an integer", Doc: "returns 2x"}}
}
func (e toyEnv) MaxTurns() int {
	if e.maxTurns == 0 {
		return 3
	}
	return e.maxTurns
}

func (e toyEnv) Generate(rng *rand.Rand, d Difficulty) (Task, error) {
	if !d.Valid() {
		return Task{}, fmt.Errorf("toy: bad difficulty %d", d)
	}
	hi := []int{0, 1000, 10000, 100000, 1000000}[d]
	if e.tiny && d == Easy {
		hi = 10
	}
	n := rng.IntN(hi)
	p := fmt.Sprintf("double %d", n)
	return Task{ID: TaskID("toy", p), Env: "toy", Prompt: p, Answer: strconv.Itoa(2 * n), Difficulty: d,
		Meta: map[string]string{"n": strconv.Itoa(n)}}, nil
}

func (e toyEnv) Reset(task Task) (Session, string, error) {
	if task.Env != "toy" {
		return nil, "", errors.New("not a toy task")
	}
	return &toySession{task: task}, task.Prompt, nil
}

type toySession struct{ task Task }

func (s *toySession) Step(a Action) StepResult {
	switch a.Kind {
	case AnswerAction:
		return StepResult{Done: true, Correct: NormalizeAnswer(a.Answer) == s.task.Answer}
	case ToolCall:
		switch a.Tool {
		case "double":
			n, err := strconv.Atoi(UnquoteArg(a.Args))
			if err != nil {
				return StepResult{Observation: "error: not an integer", ToolError: "bad argument"}
			}
			return StepResult{Observation: strconv.Itoa(2 * n)}
		case "panic":
			panic("boom")
		case "hang":
			time.Sleep(time.Hour)
		case "flood":
			out := make([]byte, 10000)
			for i := range out {
				out[i] = 'x'
			}
			return StepResult{Observation: string(out)}
		case "quit":
			return StepResult{Observation: "bye", Done: true}
		}
		return StepResult{Observation: "error: unknown tool " + a.Tool, ToolError: "unknown tool"}
	}
	return StepResult{Observation: "error: unexpected action", ToolError: "unexpected"}
}

// toyExpert calls double(n) and answers what it returns.
var toyExpert = AgentFunc(func(ep *Episode) (string, error) {
	if len(ep.Turns) == 0 {
		return ToolAction("double", ep.Task.Meta["n"]), nil
	}
	return AnswerText(ep.Turns[len(ep.Turns)-1].Observation), nil
})

// script returns an agent that writes the given actions in order.
func script(actions ...string) Agent {
	return AgentFunc(func(ep *Episode) (string, error) {
		if len(ep.Turns) >= len(actions) {
			return "", errors.New("script exhausted")
		}
		return actions[len(ep.Turns)], nil
	})
}
