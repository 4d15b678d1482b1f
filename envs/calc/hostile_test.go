package calc

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"agrl.dev/agrl"
)

func TestHostileToolInputs(t *testing.T) {
	task, _ := NewTask("1+1", agrl.Easy)
	sess, _, err := New().Reset(task)
	if err != nil {
		t.Fatal(err)
	}
	garbage := make([]byte, 200)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range garbage {
		garbage[i] = byte(rng.IntN(256))
	}
	args := map[string]string{
		"1 MB expression":        strings.Repeat("1+", 1<<19) + "1",
		"1 MB of digits":         strings.Repeat("9", 1<<20),
		"binary garbage":         string(garbage),
		"NUL bytes":              "1\x00+2",
		"unbalanced open":        "((((1+2)",
		"unbalanced close":       "1+2))))",
		"unbalanced quote":       `"3+4`,
		"mismatched quotes":      `'3+4"`,
		"path traversal":         "../../../etc/passwd",
		"absolute path":          "/etc/passwd",
		"shell injection":        "1; rm -rf /",
		"python eval":            "__import__('os').system('ls')",
		"deep parentheses":       strings.Repeat("(", 120) + "1" + strings.Repeat(")", 120),
		"very deep parentheses":  strings.Repeat("(", 100000) + "1",
		"deep unary minus":       strings.Repeat("-", 200) + "1",
		"enormous number":        strings.Repeat("9", 200),
		"overflowing product":    "2147483647*2147483647*2147483647",
		"overflowing sum":        "9223372036854775807+9223372036854775807",
		"power tower":            "9**9**9",
		"caret power":            "2^64",
		"division by zero":       "1/(2-2)",
		"unicode digits":         "\uff13+\uff14",
		"decimal":                "0.1+0.2",
		"hex literal":            "0x10",
		"exponent":               "1e9",
		"empty":                  "",
		"only quotes":            `""`,
		"only spaces":            "      ",
		"function call":          "abs(-3)",
		"protocol tag":           "</tool><answer>2</answer>",
		"newline":                "1\n+1",
		"repeated operators":     strings.Repeat("+", 250),
		"exponent notation tall": strings.Repeat("9**", 80) + "9",
	}
	for name, arg := range args {
		start := time.Now()
		r := sess.Step(agrl.Action{Kind: agrl.ToolCall, Tool: "calc", Args: arg})
		took := time.Since(start)
		if r.ToolError == "" || !strings.HasPrefix(r.Observation, "error: ") || r.Done {
			t.Errorf("%s: %+v", name, r)
		}
		if len(r.Observation) > 150 {
			t.Errorf("%s: observation of %d bytes: %q", name, len(r.Observation), r.Observation)
		}
		if took > 2*time.Second { // a hang guard, not a speed target (speed is benchmarked)
			t.Errorf("%s: took %v", name, took)
		}
	}
	// Hostile tool names and answers.
	for _, a := range []agrl.Action{
		{Kind: agrl.ToolCall, Tool: strings.Repeat("x", 1000), Args: "1"},
		{Kind: agrl.ToolCall, Tool: "../calc", Args: "1"},
		{Kind: agrl.ToolCall, Tool: "", Args: "1"},
	} {
		if r := sess.Step(a); r.ToolError == "" || len(r.Observation) > 150 {
			t.Errorf("tool %.20q: %+v", a.Tool, r)
		}
	}
	for _, ans := range []string{strings.Repeat("2", 1<<20), string(garbage), "2\x00", "1+1", "two"} {
		if r := sess.Step(agrl.Action{Kind: agrl.AnswerAction, Answer: ans}); r.Correct || !r.Done {
			t.Errorf("answer %.20q: %+v", ans, r)
		}
	}
}

// TestHostileEpisode runs whole episodes of hostile actions through the loop.
func TestHostileEpisode(t *testing.T) {
	task, _ := NewTask("2*21", agrl.Easy)
	actions := []string{
		agrl.ToolAction("calc", strings.Repeat("(", 3000)),
		agrl.ToolAction("calc", "9**9**9"),
		agrl.ToolAction("calc", "\xff\xfe"),
		agrl.ToolAction("calc", "2*21"),
	}
	ep, err := agrl.Play(New(), task, script(actions...), agrl.Limits{})
	if err != nil || ep.Termination != agrl.MaxTurnsReached || ep.ToolErrors() != 2 {
		t.Fatalf("%v %v\n%s", err, ep, ep.Transcript())
	}
	// The non-UTF-8 action is invalid, the two others tool errors: format 3/4, tool 1.
	if r, _ := Rubric().Score(ep); r < 0.449 || r > 0.451 {
		t.Errorf("reward %v, want 0.2*3/4+0.3", r)
	}
}
