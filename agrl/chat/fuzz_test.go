package chat

import (
	"strings"
	"testing"
	"unicode/utf8"

	"agrl.dev/agrl"
)

var fuzzTools = append(append(append([]agrl.Tool{}, calcTools...), fileTools...), agrl.Tool{Name: "echo", Args: "no colon"})

var fuzzFormats = []Format{Qwen25(), Qwen3(), Qwen3().Thinking(false), Llama3()}

// FuzzParseTurn: ParseTurn never panics; what it accepts is well formed, and writing it back
// and reading it again gives the same action.
func FuzzParseTurn(f *testing.F) {
	for _, s := range []string{
		"<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"12*(3+4)\"}}\n</tool_call><|im_end|>",
		"<think>\nx\n</think>\n\n<tool_call>{\"name\": \"cat\", \"arguments\": {\"path\": \"/a\"}}</tool_call>",
		"pre\n<tool_call>{\"name\": \"echo\", \"arguments\": {\"input\": \"\\u00e9\\n\"}}</tool_call>",
		"x</think>84", "<think>unclosed", "84<|im_end|>", "<tool_call>{\"name\": [], \"arguments\": 1}</tool_call>",
		`{"name": "calc", "parameters": {"expr": "1"}}<|eot_id|>`, `<|python_tag|>{"name": "ls", "arguments": {"path": ""}}`,
		`{"type": "function", "name": "find", "parameters": {"name": "x"}}; {}`, "The answer is 84.<|eot_id|>",
		"{", "[", `{"name": "calc", "parameters": {"expr": 1e999}}`, "\x00<|eom_id|>", "\xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, fm := range fuzzFormats {
			a := fm.ParseTurn(text, fuzzTools)
			switch a.Kind {
			case agrl.Invalid:
				if a.Invalid == "" {
					t.Fatalf("%s: invalid without a reason", fm.Name())
				}
				continue
			case agrl.ToolCall:
				if _, ok := findTool(fuzzTools, a.Tool); !ok || a.Args != strings.TrimSpace(a.Args) || !utf8.ValidString(a.Args) {
					t.Fatalf("%s: bad call %+v", fm.Name(), a)
				}
			case agrl.AnswerAction:
				if a.Answer == "" || a.Answer != strings.TrimSpace(a.Answer) {
					t.Fatalf("%s: bad answer %q", fm.Name(), a.Answer)
				}
			default:
				t.Fatalf("%s: kind %d", fm.Name(), a.Kind)
			}
			out, err := fm.FormatAction(a, fuzzTools)
			if err != nil {
				t.Fatalf("%s: FormatAction(%+v): %v", fm.Name(), a, err)
			}
			want := a
			if !keepsThink(fm) {
				want.Think = ""
			}
			if got := fm.ParseTurn(out, fuzzTools); got != want {
				t.Fatalf("%s: %q parsed as %+v, written as %q, parsed again as %+v", fm.Name(), text, a, out, got)
			}
		}
	})
}

// FuzzRoundTrip: an action written in a format is read back unchanged (Think only where the
// format keeps it), for any argument text and any answer and reasoning free of the formats'
// tags and special tokens.
func FuzzRoundTrip(f *testing.F) {
	f.Add(uint8(0), "Parentheses first.", "12*(3+4)", "84")
	f.Add(uint8(2), "", "/var/nifu/run.cfg", "warn")
	f.Add(uint8(4), "multi\nline", "a \"q\" \\ \t\n\x01 é 😀 {\"x\": 1} </tool_call> <|im_end|>", "7×6 = 42\nok")
	f.Fuzz(func(t *testing.T, which uint8, think, args, answer string) {
		if !utf8.ValidString(think) || !utf8.ValidString(args) || !utf8.ValidString(answer) {
			t.Skip()
		}
		think, args, answer = strings.TrimSpace(think), strings.TrimSpace(args), strings.TrimSpace(answer)
		tl := fuzzTools[int(which)%len(fuzzTools)]
		actions := []agrl.Action{{Kind: agrl.ToolCall, Think: think, Tool: tl.Name, Args: args}}
		if answer != "" && clean(answer) && !strings.ContainsAny(answer[:1], "{[") && !strings.Contains(answer, `{"name"`) &&
			answer == pyStrip(answer) {
			actions = append(actions, agrl.Action{Kind: agrl.AnswerAction, Think: think, Answer: answer})
		}
		if !clean(think) {
			t.Skip()
		}
		for _, fm := range fuzzFormats {
			for _, a := range actions {
				out, err := fm.FormatAction(a, fuzzTools)
				if err != nil {
					t.Fatalf("%s: FormatAction(%+v): %v", fm.Name(), a, err)
				}
				want := a
				if !keepsThink(fm) {
					want.Think = ""
				}
				got := fm.ParseTurn(out, fuzzTools)
				if got != want {
					if a.Kind == agrl.ToolCall && strings.Contains(args, "<|") && got.Kind == agrl.Invalid {
						continue // special-token text inside an argument: refused, as intended
					}
					t.Fatalf("%s: %+v written as %q, read as %+v", fm.Name(), a, out, got)
				}
			}
		}
	})
}

// clean reports whether s holds none of the formats' tags or special tokens.
func clean(s string) bool {
	if strings.Contains(s, "<|") {
		return false
	}
	for _, tag := range []string{thinkOpen, thinkClose, toolCallOpen, toolCallClose, responseOpen, responseClose} {
		if strings.Contains(s, tag) {
			return false
		}
	}
	return true
}
