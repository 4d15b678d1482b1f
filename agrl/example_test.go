package agrl_test

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"agrl.dev/agrl"
	"agrl.dev/envs/calc"
)

// ParseAction reads one turn of policy text. Text that breaks the protocol is never an error:
// it becomes an Invalid action whose reason is sent back to the policy as its observation.
func ExampleParseAction() {
	for _, text := range []string{
		`<tool>calc(12+7*(3-5))</tool>`,
		`<think>the tool said -2</think> <answer>-2</answer>`,
		`<answer></answer>`,
		`The answer is <answer>-2</answer>`,
		`<tool>Calc(1+1)</tool>`,
		`<tool>calc(1+1)`,
	} {
		a := agrl.ParseAction(text)
		switch a.Kind {
		case agrl.ToolCall:
			fmt.Printf("tool %s(%s)\n", a.Tool, a.Args)
		case agrl.AnswerAction:
			fmt.Printf("answer %q (think %q, gives up %v)\n", a.Answer, a.Think, a.GivesUp())
		default:
			fmt.Printf("invalid: %s\n", a.Invalid)
		}
	}
	// Output:
	// tool calc(12+7*(3-5))
	// answer "-2" (think "the tool said -2", gives up false)
	// answer "" (think "", gives up true)
	// invalid: text before <answer>
	// invalid: bad tool name "Calc": want [a-z_][a-z0-9_]*
	// invalid: unclosed <tool>
}

// upperEnv is the smallest useful Env: the task names a word, the tool upper(word) returns it in
// capitals, and the answer must be that.
type upperEnv struct{}

func (upperEnv) Name() string { return "upper" }
func (upperEnv) Tools() []agrl.Tool {
	return []agrl.Tool{{Name: "upper", Args: "word", Doc: "returns the word in capitals"}}
}
func (upperEnv) MaxTurns() int { return 4 }
func (upperEnv) Generate(rng *rand.Rand, d agrl.Difficulty) (agrl.Task, error) {
	w := []string{"go", "grpo", "agent"}[rng.IntN(3)]
	return agrl.Task{ID: agrl.TaskID("upper", w), Env: "upper", Prompt: "Shout " + w, Answer: strings.ToUpper(w), Difficulty: d}, nil
}
func (upperEnv) Reset(t agrl.Task) (agrl.Session, string, error) {
	return upperSession{gold: t.Answer}, t.Prompt, nil
}

type upperSession struct{ gold string }

func (s upperSession) Step(a agrl.Action) agrl.StepResult {
	if a.Kind == agrl.AnswerAction {
		return agrl.StepResult{Observation: "ok", Done: true, Correct: a.Answer == s.gold}
	}
	if a.Tool != "upper" {
		return agrl.StepResult{Observation: "unknown tool " + a.Tool, ToolError: "unknown tool"}
	}
	return agrl.StepResult{Observation: strings.ToUpper(a.Args)}
}

// Play runs one episode with any Agent, here a scripted one that first breaks the protocol,
// then calls a tool that does not exist, then the right one, and answers with its output.
// Everything the agent does wrong is recorded on the episode; a Rubric then scores it.
func ExamplePlay() {
	script := []string{"SHOUT!", agrl.ToolAction("shout", "go"), agrl.ToolAction("upper", "go")}
	agent := agrl.AgentFunc(func(ep *agrl.Episode) (string, error) {
		if n := len(ep.Turns); n < len(script) {
			return script[n], nil
		}
		return agrl.AnswerText(ep.Turns[len(ep.Turns)-1].Observation), nil
	})
	task := agrl.Task{ID: "upper-1", Env: "upper", Prompt: "Shout go", Answer: "GO"}
	ep, err := agrl.Play(upperEnv{}, task, agent, agrl.Limits{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ep.Transcript())
	fmt.Println(ep.Termination, ep.Correct, ep.InvalidActions(), ep.ToolCalls(), ep.ToolErrors())

	rubric := agrl.NewRubric().
		Add("answer", agrl.ExactAnswer, 1).
		Add("invalid", agrl.InvalidActions, -0.1).
		Add("tool_errors", agrl.ToolErrors, -0.1)
	reward, _ := rubric.Score(ep)
	for _, r := range ep.Rewards {
		fmt.Printf("%s %v×%v  ", r.Name, r.Value, r.Weight)
	}
	fmt.Printf("reward %.1f\n", reward)
	// Output:
	// Shout go
	// SHOUT!
	// <obs>invalid action: no <tool> or <answer> tag</obs>
	// <tool>shout(go)</tool>
	// <obs>unknown tool shout</obs>
	// <tool>upper(go)</tool>
	// <obs>GO</obs>
	// <answer>GO</answer>
	// <obs>ok</obs>
	// answered true 1 2 1
	// answer 1×1  invalid 1×-0.1  tool_errors 1×-0.1  reward 0.8
}

// NewGRPO's configuration is a value: a sweep derives variants without touching the base, and
// Resolved shows every default filled in (as config.json records it). Training needs the
// learner: learn.Build(cfg) in agrl.dev/agrl/learn.
func ExampleNewGRPO() {
	base := agrl.NewGRPO().Env(calc.New()).Rubric(calc.Rubric()).Policy(agrl.TinyLM()).
		Group(8).TasksPerStep(4).KL(0.01).LossNorm(agrl.TokenMean).Out("runs/calc")
	variant := base.KL(0.04).LossNorm(agrl.SeqMean).Out("runs/calc-kl0.04")
	fmt.Println(base.Validate(), variant.Validate())

	b, v := base.Resolved(), variant.Resolved()
	fmt.Println(b.KL, b.LossNorm, b.Out, "|", v.KL, v.LossNorm, v.Out)
	fmt.Println(b.Env, b.Group, "×", b.TasksPerStep, "=", b.Group*b.TasksPerStep, "episodes per step")
	// MaxTurns and MaxTokens were left at 0: the env's turn limit and TinyLM's context.
	fmt.Println(b.MaxTurns, "turns,", b.MaxTokens, "tokens per episode")
	// Output:
	// <nil> <nil>
	// 0.01 token-mean runs/calc | 0.04 seq-mean runs/calc-kl0.04
	// calc 8 × 4 = 32 episodes per step
	// 4 turns, 512 tokens per episode
}

// Validate reports every problem of a configuration at once, before anything is built.
func ExampleGRPO_Validate() {
	err := agrl.NewGRPO().Rubric(calc.Rubric()).Group(1).ClipEps(1.5).KL(-0.1).Temperature(0).Validate()
	fmt.Println(err)
	// Output:
	// agrl: invalid GRPO configuration: no environment (call Env)
	// group size 1; GRPO needs >= 2 samples per task
	// clip ε low 1.5; want in (0, 1)
	// KL coefficient -0.1; want >= 0
	// train temperature 0; want > 0 (GRPO needs sampling)
	// no run directory (call Out)
}
