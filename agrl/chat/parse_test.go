package chat

import (
	"strings"
	"testing"

	"agrl.dev/agrl"
)

func tool(think, name, args string) agrl.Action {
	return agrl.Action{Kind: agrl.ToolCall, Think: think, Tool: name, Args: args}
}

func ans(think, a string) agrl.Action {
	return agrl.Action{Kind: agrl.AnswerAction, Think: think, Answer: a}
}

// bad is an invalid action whose reason contains the text.
func bad(reason string) agrl.Action { return agrl.Action{Kind: agrl.Invalid, Invalid: reason} }

func checkParse(t *testing.T, f Format, tools []agrl.Tool, text string, want agrl.Action) {
	t.Helper()
	got := f.ParseTurn(text, tools)
	if want.Kind == agrl.Invalid {
		if got.Kind != agrl.Invalid || !strings.Contains(got.Invalid, want.Invalid) {
			t.Errorf("%s: ParseTurn(%q) = %+v; want invalid %q", f.Name(), text, got, want.Invalid)
		}
		return
	}
	if got != want {
		t.Errorf("%s: ParseTurn(%q) = %+v; want %+v", f.Name(), text, got, want)
	}
}

func TestParseQwen(t *testing.T) {
	tools := append(append([]agrl.Tool{}, calcTools...), agrl.Tool{Name: "echo", Args: "repeat this"})
	cases := []struct {
		text string
		want agrl.Action
	}{
		{"<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"12*(3+4)\"}}\n</tool_call><|im_end|>", tool("", "calc", "12*(3+4)")},
		{"<tool_call>{\"name\":\"calc\",\"arguments\":{\"expr\":\" 1+1 \"}}</tool_call>", tool("", "calc", "1+1")},
		{"<think>\nParentheses first.\n</think>\n\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"7*6\"}}\n</tool_call><|im_end|>\n", tool("Parentheses first.", "calc", "7*6")},
		{"Let me compute.\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"7*6\"}}\n</tool_call>", tool("Let me compute.", "calc", "7*6")},
		{"<think>a</think>b<tool_call>{\"name\": \"calc\", \"arguments\": {\"expr\": \"1\"}}</tool_call>", tool("a\n\nb", "calc", "1")},
		{"reasoning begun in the prompt\n</think>\n\n84", ans("reasoning begun in the prompt", "84")},
		{"<tool_call>{\"name\": null, \"arguments\": {\"expr\": \"1\"}}</tool_call>", bad("tool name is a JSON null")},
		{"<tool_call>{\"name\": \"echo\", \"arguments\": {\"input\": \"hé \\\"x\\\" \\u00e9\"}}</tool_call>", tool("", "echo", "hé \"x\" é")},
		{"<tool_call>{\"type\": \"function\", \"name\": \"calc\", \"arguments\": {\"expr\": \"1\"}}</tool_call>", tool("", "calc", "1")},
		{"The answer is 84.<|im_end|>", ans("", "The answer is 84.")},
		{"<think>\nIt said 84.\n</think>\n\n84<|endoftext|>", ans("It said 84.", "84")},
		{"  84  \n", ans("", "84")},

		{"", bad("empty turn")},
		{"<|im_end|>", bad("empty turn")},
		{"<think>\nhmm\n</think>\n\n", bad("no answer or tool call after </think>")},
		{"<think>\nstill thinking", bad("unclosed <think>")},
		{"<think>a</think><think>b</think>84", bad("second think block")},
		{"84<|im_end|>\n<|im_start|>user\nmore", bad("inside the turn")},
		{"<tool_call>{\"name\": \"calc\", \"arguments\": {\"expr\": \"1\"}}", bad("unclosed <tool_call>")},
		{"84</tool_call>", bad("without <tool_call>")},
		{"<tool_call>{\"name\": \"calc\", \"arguments\": {\"expr\": \"1\"}}</tool_call>\n<tool_call>{\"name\": \"calc\", \"arguments\": {\"expr\": \"2\"}}</tool_call>", bad("2 tool calls in one turn")},
		{"<tool_call>{\"name\": \"calc\", \"arguments\": {\"expr\": \"1\"}}\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"2\"}}</tool_call>", bad("several tool calls")},
		{"<tool_call>{\"name\": \"calc\", \"arguments\": {\"expr\": \"1\"}}</tool_call> so 1", bad("text after </tool_call>")},
		{"<tool_call>{\"name\": \"calc\", \"arguments\": {\"expr\": \"1\"}</tool_call>", bad("malformed tool call JSON")},
		{"<tool_call>calc(1)</tool_call>", bad("malformed tool call JSON")},
		{"<tool_call></tool_call>", bad("malformed tool call JSON")},
		{"<tool_call>[1]</tool_call>", bad("JSON array, not an object")},
		{"<tool_call>{\"name\": \"rm\", \"arguments\": {\"expr\": \"1\"}}</tool_call>", bad(`unknown tool "rm" (tools: calc, echo)`)},
		{"<tool_call>{\"name\": 7, \"arguments\": {\"expr\": \"1\"}}</tool_call>", bad("tool name is a JSON number")},
		{"<tool_call>{\"arguments\": {\"expr\": \"1\"}}</tool_call>", bad("without a name")},
		{"<tool_call>{\"name\": \"calc\"}</tool_call>", bad(`without "arguments"`)},
		{"<tool_call>{\"name\": \"calc\", \"parameters\": {\"expr\": \"1\"}}</tool_call>", bad(`unexpected key "parameters"`)},
		{"<tool_call>{\"name\": \"calc\", \"arguments\": \"{\\\"expr\\\": \\\"1\\\"}\"}</tool_call>", bad("arguments of calc is a JSON string, not an object")},
		{"<tool_call>{\"name\": \"calc\", \"arguments\": {}}</tool_call>", bad(`missing argument "expr"`)},
		{"<tool_call>{\"name\": \"calc\", \"arguments\": {\"x\": \"1\"}}</tool_call>", bad(`unexpected argument "x" of calc`)},
		{"<tool_call>{\"name\": \"calc\", \"arguments\": {\"expr\": \"1\", \"x\": \"2\"}}</tool_call>", bad(`unexpected argument "x"`)},
		{"<tool_call>{\"name\": \"calc\", \"arguments\": {\"expr\": 12}}</tool_call>", bad(`argument "expr" of calc is a JSON number, not a string`)},
		{"<tool_call>{\"name\": \"calc\", \"arguments\": {\"expr\": null}}</tool_call>", bad("JSON null")},
		{"<tool_response>\n84\n</tool_response>", bad("tool results come from the environment")},
		{"\xff84", bad("not valid UTF-8")},
		{strings.Repeat("x", MaxTurnBytes+1), bad("turn too long")},
	}
	for _, f := range []Format{Qwen25(), Qwen3(), Qwen3().Thinking(false)} {
		for _, c := range cases {
			checkParse(t, f, tools, c.text, c.want)
		}
	}
}

func TestParseLlama(t *testing.T) {
	tools := append(append([]agrl.Tool{}, calcTools...), agrl.Tool{Name: "echo", Args: "repeat this"})
	cases := []struct {
		text string
		want agrl.Action
	}{
		{`{"name": "calc", "parameters": {"expr": "12*(3+4)"}}<|eot_id|>`, tool("", "calc", "12*(3+4)")},
		{`{"name": "calc", "parameters": {"expr": "12*(3+4)"}}<|eom_id|>`, tool("", "calc", "12*(3+4)")},
		{`<|python_tag|>{"name": "calc", "parameters": {"expr": "1"}}`, tool("", "calc", "1")},
		{`{"type": "function", "name": "calc", "parameters": {"expr": "1"}}`, tool("", "calc", "1")},
		{`{"name": "calc", "arguments": {"expr": "1"}}`, tool("", "calc", "1")},
		{` {"name":"echo","parameters":{"input":"a\nb"}} `, tool("", "echo", "a\nb")},
		{"The answer is 84.<|eot_id|>", ans("", "The answer is 84.")},
		{"84", ans("", "84")},
		{"The set {1, 2} has two elements.", ans("", "The set {1, 2} has two elements.")},

		{"", bad("empty turn")},
		{"<|eot_id|>", bad("empty turn")},
		{"84<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nmore", bad("inside the turn")},
		{`{"name": "calc", "parameters": {"expr": "1"}}; {"name": "calc", "parameters": {"expr": "2"}}`, bad("several tool calls")},
		{`{"name": "calc", "parameters": {"expr": "1"}}{"name": "calc", "parameters": {"expr": "2"}}`, bad("several tool calls")},
		{`[{"name": "calc", "parameters": {"expr": "1"}}]`, bad("JSON array")},
		{`{"name": "calc", "parameters": {"expr": "1"}} is my call`, bad("text after the tool call JSON")},
		{`I will call {"name": "calc", "parameters": {"expr": "1"}}`, bad("text before the tool call JSON")},
		{`{"name": "calc", "parameters": {"expr": "1"}`, bad("malformed tool call JSON")},
		{`{"name": "calc", "parameters": {"expr": "1"}, "arguments": {"expr": "1"}}`, bad("both")},
		{`{"name": "calc", "parameters": {"expr": 1}}`, bad("JSON number, not a string")},
		{`{"name": "calc", "parameters": {"x": "1"}}`, bad(`unexpected argument "x"`)},
		{`{"name": "calc", "parameters": {}}`, bad("missing argument")},
		{`{"name": "wolfram", "parameters": {"query": "1"}}`, bad("unknown tool")},
		{`<|python_tag|>brave_search.call(query="x")`, bad("built-in tools are not supported")},
		{`Sure <|python_tag|>{"name": "calc", "parameters": {"expr": "1"}}`, bad("text before <|python_tag|>")},
		{"\xc3", bad("not valid UTF-8")},
	}
	for _, c := range cases {
		checkParse(t, Llama3(), tools, c.text, c.want)
	}
}

// TestRoundTrip writes actions in each format and reads them back.
func TestRoundTrip(t *testing.T) {
	tools := append(append(append([]agrl.Tool{}, calcTools...), fileTools...), agrl.Tool{Name: "echo", Args: "no colon here"})
	actions := []agrl.Action{
		tool("", "calc", "12*(3+4)"),
		tool("Parentheses first.", "calc", "7*6"),
		tool("", "cat", "/var/nifu/run.cfg"),
		tool("Quote \"this\".", "echo", "a \"quoted\" \\ string\nwith\ttabs, <b>tags</b> and é 😀 \u0001"),
		tool("", "find", ""),
		ans("", "84"),
		ans("It said 84.", "84"),
		ans("", "7×6 = 42 — «quarante-deux»\nsecond line"),
	}
	for _, f := range []Format{Qwen25(), Qwen3(), Qwen3().Thinking(false), Llama3()} {
		for _, a := range actions {
			text, err := f.FormatAction(a, tools)
			if err != nil {
				t.Fatalf("%s: FormatAction(%+v): %v", f.Name(), a, err)
			}
			want := a
			if !keepsThink(f) {
				want.Think = ""
			}
			if got := f.ParseTurn(text, tools); got != want {
				t.Errorf("%s: ParseTurn(FormatAction(%+v)) = %+v (text %q)", f.Name(), a, got, text)
			}
		}
		if _, err := f.FormatAction(bad("x"), tools); err == nil {
			t.Errorf("%s: FormatAction of an invalid action", f.Name())
		}
		if _, err := f.FormatAction(tool("", "rm", "x"), tools); err == nil {
			t.Errorf("%s: FormatAction of an unknown tool", f.Name())
		}
	}
}

// keepsThink reports whether f writes agrl.Action.Think (Qwen3 with thinking on).
func keepsThink(f Format) bool {
	q, ok := f.(QwenFormat)
	return ok && q.v3 && !q.noThinking
}

func TestFormatActionText(t *testing.T) {
	a := tool("Parentheses first.", "calc", "12*(3+4)")
	for _, c := range []struct {
		f    Format
		want string
	}{
		{Qwen25(), "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"12*(3+4)\"}}\n</tool_call><|im_end|>"},
		{Qwen3(), "<think>\nParentheses first.\n</think>\n\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"12*(3+4)\"}}\n</tool_call><|im_end|>"},
		{Llama3(), "{\"name\": \"calc\", \"parameters\": {\"expr\": \"12*(3+4)\"}}<|eot_id|>"},
	} {
		got, err := c.f.FormatAction(a, calcTools)
		if err != nil || got != c.want {
			t.Errorf("%s: got %q, %v; want %q", c.f.Name(), got, err, c.want)
		}
	}
}

func TestParam(t *testing.T) {
	for _, c := range []struct{ args, name, desc string }{
		{"expr: an integer expression", "expr", "an integer expression"},
		{"  path :a file: absolute ", "path", "a file: absolute"},
		{"no colon here", "input", "no colon here"},
		{"e.g. x: y", "input", "e.g. x: y"},
		{"", "input", ""},
		{": nameless", "input", ": nameless"},
		{"_x9: ok", "_x9", "ok"},
		{"9x: digit first", "input", "9x: digit first"},
	} {
		name, desc := Param(agrl.Tool{Name: "t", Args: c.args})
		if name != c.name || desc != c.desc {
			t.Errorf("Param(%q) = %q, %q; want %q, %q", c.args, name, desc, c.name, c.desc)
		}
	}
	got := ToolSchema(agrl.Tool{Name: "echo", Args: "x"})
	want := `{"type": "function", "function": {"name": "echo", "parameters": {"type": "object", "properties": {"input": {"type": "string", "description": "x"}}, "required": ["input"]}}}`
	if got != want {
		t.Errorf("ToolSchema without Doc:\n got  %s\n want %s", got, want)
	}
}

func TestJSON(t *testing.T) {
	v := object{{"a", "é<>&/\u2028\x01\x7f\"\\\n\r\t\b\f"}, {"b", []any{"1", object{}}}, {"c", []any{}}}
	if got, want := toJSON(v), `{"a": "é<>&/`+"\u2028"+`\u0001`+"\x7f"+`\"\\\n\r\t\b\f", "b": ["1", {}], "c": []}`; got != want {
		t.Errorf("toJSON:\n got  %s\n want %s", got, want)
	}
	if got, want := toJSONIndent(object{{"b", []any{"1", "2"}}, {"c", object{}}}, 2), "{\n  \"b\": [\n    \"1\",\n    \"2\"\n  ],\n  \"c\": {}\n}"; got != want {
		t.Errorf("toJSONIndent:\n got  %q\n want %q", got, want)
	}
	if got := toJSON("a\xffb"); got != "\"a\uFFFDb\"" {
		t.Errorf("invalid UTF-8: %q", got)
	}
}
