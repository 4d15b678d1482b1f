package agrl

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseActionValid(t *testing.T) {
	cases := []struct {
		in   string
		want Action
	}{
		{"<tool>calc(1+2)</tool>", Action{Kind: ToolCall, Tool: "calc", Args: "1+2"}},
		{"  <think>add them</think>\n<tool>calc( 1 + 2 )</tool>  ", Action{Kind: ToolCall, Think: "add them", Tool: "calc", Args: "1 + 2"}},
		{"<tool>ls()</tool>", Action{Kind: ToolCall, Tool: "ls"}},
		{"<tool>f(g(x))</tool>", Action{Kind: ToolCall, Tool: "f", Args: "g(x)"}},
		{"<tool>cat(\"/a b/c.txt\")</tool>", Action{Kind: ToolCall, Tool: "cat", Args: "\"/a b/c.txt\""}},
		{"<answer>42</answer>", Action{Kind: AnswerAction, Answer: "42"}},
		{"<answer> Vell </answer>", Action{Kind: AnswerAction, Answer: "Vell"}},
		{"<think></think><answer>x</answer>", Action{Kind: AnswerAction, Answer: "x"}},
		{"<answer></answer>", Action{Kind: AnswerAction}},
		{"<answer>a < b</answer>", Action{Kind: AnswerAction, Answer: "a < b"}},
	}
	for _, c := range cases {
		got := ParseAction(c.in)
		if got != c.want {
			t.Errorf("ParseAction(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
	if !ParseAction("<answer> </answer>").GivesUp() || ParseAction("<answer>0</answer>").GivesUp() {
		t.Error("GivesUp: empty answer gives up, \"0\" does not")
	}
}

func TestParseActionInvalid(t *testing.T) {
	cases := map[string]string{
		"":                                     "empty action",
		"   \n":                                "empty action",
		"hello":                                "no <tool> or <answer> tag",
		"I think <answer>4</answer>":           "text before <answer>",
		"<answer>4":                            "unclosed <answer>",
		"<tool>calc(1+2)":                      "unclosed <tool>",
		"<think>hmm":                           "unclosed <think>",
		"<think>hmm</think>":                   "no <tool> or <answer> after </think>",
		"<tool>calc(1+2)</tool> and more":      "text after </tool>",
		"<answer>4</answer><answer>5</answer>": "text after </answer>",
		"<tool>calc 1+2</tool>":                "tool call without '(': want name(args)",
		"<tool>calc(1+2</tool>":                "tool call does not end with ')'",
		"<tool>(1+2)</tool>":                   "missing tool name",
		"<tool>Calc(1)</tool>":                 `bad tool name "Calc": want [a-z_][a-z0-9_]*`,
		"<tool>9lives(1)</tool>":               `bad tool name "9lives": want [a-z_][a-z0-9_]*`,
		"<tool>rm -rf(/)</tool>":               `bad tool name "rm -rf": want [a-z_][a-z0-9_]*`,
		"<answer><obs>x</obs></answer>":        "<obs> inside <answer>",
		"<tool>calc(<answer>)</tool>":          "<answer> inside <tool>",
		"<think><tool>x()</tool></think><answer>1</answer>": "<tool> inside <think>",
		"\xff\xfe<answer>1</answer>":                        "action is not valid UTF-8",
		"<tool>" + strings.Repeat("a", 40) + "(1)</tool>":   "tool name longer than 32 bytes",
	}
	for in, reason := range cases {
		got := ParseAction(in)
		if got.Kind != Invalid || got.Invalid != reason {
			t.Errorf("ParseAction(%q) = %+v, want invalid %q", in, got, reason)
		}
	}
	huge := "<answer>" + strings.Repeat("9", MaxActionBytes) + "</answer>"
	if a := ParseAction(huge); a.Kind != Invalid || !strings.HasPrefix(a.Invalid, "action too long") {
		t.Errorf("huge action: %+v", a)
	}
}

func TestActionRoundTrip(t *testing.T) {
	for _, text := range []string{ToolAction("search", "mentor of Dax"), AnswerText("Vell"), "<think>x</think>" + AnswerText("1")} {
		a := ParseAction(text)
		if a.Kind == Invalid || a.String() != text {
			t.Errorf("%q parsed to %+v, renders %q", text, a, a.String())
		}
	}
}

func TestUnquoteArg(t *testing.T) {
	for in, want := range map[string]string{`"/a"`: "/a", `'/a'`: "/a", `/a`: "/a", `"/a'`: `"/a'`, `"`: `"`, ` "x" `: "x"} {
		if got := UnquoteArg(in); got != want {
			t.Errorf("UnquoteArg(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzParseAction checks that the parser never panics, that a valid action renders back to
// text that parses to the same action, and that invalid actions always carry a reason.
func FuzzParseAction(f *testing.F) {
	for _, s := range []string{
		"<tool>calc(1+2)</tool>", "<think>a</think><answer>b</answer>", "<answer></answer>",
		"<tool>cat(../../etc/passwd)</tool>", "<tool>calc(9**9**9)</tool>", "<<<>>>", "<tool>(", ")</tool>",
		"<think><think></think>", "\x00\x01<answer>\xff</answer>", "<answer>" + strings.Repeat("<", 100),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a := ParseAction(s)
		switch a.Kind {
		case Invalid:
			if a.Invalid == "" {
				t.Fatalf("invalid action without reason for %q", s)
			}
		case ToolCall, AnswerAction:
			if !utf8.ValidString(s) || len(s) > MaxActionBytes {
				t.Fatalf("accepted bad input %q", s)
			}
			if b := ParseAction(a.String()); b != a {
				t.Fatalf("round trip of %q: %+v then %+v", s, a, b)
			}
		default:
			t.Fatalf("unknown kind %d", a.Kind)
		}
	})
}
