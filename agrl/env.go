package agrl

import (
	"math/rand/v2"
	"unicode/utf8"
)

// Env is a family of tool-calling tasks: it generates tasks and starts episodes on them.
//
// Implementations live in their own packages under envs/ (envs/calc, envs/multihop, …).
// An Env must be deterministic given the task: the same task and the same actions give the
// same observations. It is a value that may be shared by many goroutines; all episode state
// lives in the Session that Reset returns.
type Env interface {
	// Name is the environment's short name ("calc"); it prefixes task IDs.
	Name() string
	// Tools documents the tools that the environment's sessions accept.
	Tools() []Tool
	// MaxTurns is the number of actions an episode may take before it is cut off.
	MaxTurns() int
	// Generate draws one task of the given difficulty from rng. It returns an error for a
	// difficulty the environment cannot generate.
	Generate(rng *rand.Rand, d Difficulty) (Task, error)
	// Reset starts an episode on task. It returns the episode's session and the first
	// observation (the prompt shown to the policy).
	Reset(task Task) (Session, string, error)
}

// Session is one episode in progress. Step is only given valid actions (the loop answers
// invalid ones itself); a tool failure is reported in the result, never as a Go error, and
// never by panicking.
type Session interface {
	Step(a Action) StepResult
}

// StepResult is what an environment answers to one action.
type StepResult struct {
	// Observation is the tool's output, or the environment's reply to an answer. The loop
	// wraps it in <obs>…</obs> and caps it at MaxObservationBytes.
	Observation string
	// ToolError is non-empty when the tool call failed (unknown tool, bad arguments, division
	// by zero, missing file…). The observation then tells the policy what went wrong.
	ToolError string
	// Done ends the episode. Answers always end it.
	Done bool
	// Correct is set with Done after an answer: whether it matches the gold answer.
	Correct bool
	// Info carries optional environment-specific facts about the step that reward components
	// read (for example "relevant": "false" for a search that found nothing useful).
	Info map[string]string
}

// Tool documents one tool of an environment.
type Tool struct {
	Name string `json:"name"`
	// Args describes the argument, e.g. "expr: an integer expression with + - * / and parentheses".
	Args string `json:"args"`
	// Doc says what the tool returns.
	Doc string `json:"doc"`
}

// MaxObservationBytes caps what one observation may add to the context. Longer tool output is
// cut and marked with "…[truncated]".
const MaxObservationBytes = 512

// TruncateObservation caps s at max bytes without splitting a UTF-8 sequence.
func TruncateObservation(s string, max int) string {
	if len(s) <= max {
		return s
	}
	const mark = "…[truncated]"
	cut := max - len(mark)
	if cut < 0 {
		cut = 0
	}
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
