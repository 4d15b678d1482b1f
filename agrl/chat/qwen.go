package chat

import (
	"fmt"
	"strings"

	"agrl.dev/agrl"
)

// Qwen's special tokens and the fixed text of its templates.
const (
	imStart   = "<|im_start|>"
	imEnd     = "<|im_end|>"
	endOfText = "<|endoftext|>"

	thinkOpen     = "<think>"
	thinkClose    = "</think>"
	toolCallOpen  = "<tool_call>"
	toolCallClose = "</tool_call>"
	responseOpen  = "<tool_response>"
	responseClose = "</tool_response>"

	qwenDefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
	qwenToolsHead     = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
		"You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
	qwenToolsTail = "\n</tools>\n\nFor each function call, return a json object with function name and " +
		"arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n" +
		"{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
	qwenEmptyThink = "<think>\n\n</think>\n\n"
)

// SHA-256 of the Qwen templates in testdata/.
const (
	qwen25TemplateSHA = "cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f"
	qwen3TemplateSHA  = "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5"
)

// QwenFormat is the ChatML format of Qwen2.5 and Qwen3 Instruct: turns between <|im_start|>
// and <|im_end|>, tools as JSON lines in a "# Tools" section of the system message, calls as
// <tool_call>{"name": …, "arguments": {…}}</tool_call>, tool results inside a user turn as
// <tool_response>…</tool_response>. The zero value is Qwen2.5.
type QwenFormat struct {
	v3         bool
	noThinking bool
}

// Qwen25 is the format of Qwen2.5 Instruct (also Qwen2.5-based models that keep its template).
func Qwen25() QwenFormat { return QwenFormat{} }

// Qwen3 is the format of the Qwen3 hybrid-thinking models, thinking on.
func Qwen3() QwenFormat { return QwenFormat{v3: true} }

// Thinking turns Qwen3's reasoning on (the default) or off. Off is the template's
// enable_thinking=false: the generation prompt ends with an empty "<think>\n\n</think>\n\n",
// and FormatAction writes no reasoning. It changes nothing for Qwen2.5.
func (q QwenFormat) Thinking(on bool) QwenFormat {
	q.noThinking = !on
	return q
}

// Name is "qwen2.5", "qwen3", or "qwen3-no-thinking" with Thinking(false).
func (q QwenFormat) Name() string {
	switch {
	case q.v3 && q.noThinking:
		return "qwen3-no-thinking"
	case q.v3:
		return "qwen3"
	}
	return "qwen2.5"
}

// GenerationPrompt is "<|im_start|>assistant\n", followed for Qwen3 with thinking off by
// the empty think block.
func (q QwenFormat) GenerationPrompt() string {
	if q.v3 && q.noThinking {
		return imStart + "assistant\n" + qwenEmptyThink
	}
	return imStart + "assistant\n"
}

// StopStrings are "<|im_end|>" and "<|endoftext|>".
func (QwenFormat) StopStrings() []string { return []string{imEnd, endOfText} }

// AppendObservation is "\n" (the newline after <|im_end|>), a user turn holding
// "<tool_response>\n" + obs + "\n</tool_response>", and the generation prompt.
func (q QwenFormat) AppendObservation(obs string) string {
	return "\n" + imStart + "user\n" + responseOpen + "\n" + obs + "\n" + responseClose + imEnd + "\n" +
		q.GenerationPrompt()
}

// Render writes msgs as the Qwen2.5 or Qwen3 chat template does. Without a system message,
// Qwen2.5 writes its default one ("You are Qwen, created by Alibaba Cloud. …"); Qwen3 writes
// none unless there are tools.
func (q QwenFormat) Render(msgs []Message, tools []agrl.Tool, addGenerationPrompt bool) (string, error) {
	if err := check(msgs, tools); err != nil {
		return "", err
	}
	var b strings.Builder
	first := msgs[0]
	system := first.Role == RoleSystem
	switch {
	case len(tools) > 0:
		b.WriteString(imStart + "system\n")
		switch {
		case system:
			b.WriteString(first.Content + "\n\n")
		case !q.v3:
			b.WriteString(qwenDefaultSystem + "\n\n")
		}
		b.WriteString(qwenToolsHead)
		for _, t := range tools {
			b.WriteString("\n" + ToolSchema(t))
		}
		b.WriteString(qwenToolsTail + imEnd + "\n")
	case system:
		b.WriteString(imStart + "system\n" + first.Content + imEnd + "\n")
	case !q.v3:
		b.WriteString(imStart + "system\n" + qwenDefaultSystem + imEnd + "\n")
	}

	// Qwen3 keeps reasoning only after the last user message that is not a tool response.
	lastQuery := len(msgs) - 1
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role == RoleUser && !(strings.HasPrefix(m.Content, responseOpen) && strings.HasSuffix(m.Content, responseClose)) {
			lastQuery = i
			break
		}
	}

	for i, m := range msgs {
		switch {
		case m.Role == RoleUser || m.Role == RoleSystem && i > 0 || m.Role == RoleAssistant && len(m.ToolCalls) == 0 && !q.v3:
			b.WriteString(imStart + string(m.Role) + "\n" + m.Content + imEnd + "\n")
		case m.Role == RoleAssistant && !q.v3:
			b.WriteString(imStart + "assistant")
			if m.Content != "" {
				b.WriteString("\n" + m.Content)
			}
			for _, c := range m.ToolCalls {
				b.WriteString("\n" + qwenCall(c))
			}
			b.WriteString(imEnd + "\n")
		case m.Role == RoleAssistant:
			b.WriteString(imStart + "assistant\n")
			b.WriteString(qwen3Assistant(m, i > lastQuery, i == len(msgs)-1))
			b.WriteString(imEnd + "\n")
		case m.Role == RoleTool:
			if i == 0 || msgs[i-1].Role != RoleTool {
				b.WriteString(imStart + "user")
			}
			b.WriteString("\n" + responseOpen + "\n" + m.Content + "\n" + responseClose)
			if i == len(msgs)-1 || msgs[i+1].Role != RoleTool {
				b.WriteString(imEnd + "\n")
			}
		}
	}
	if addGenerationPrompt {
		b.WriteString(q.GenerationPrompt())
	}
	return b.String(), nil
}

// qwenCall writes one call as both Qwen templates do (the name is written as is, unquoted).
func qwenCall(c ToolCall) string {
	return toolCallOpen + "\n{\"name\": \"" + c.Name + "\", \"arguments\": " + toJSON(argsValue(c.Arguments)) + "}\n" + toolCallClose
}

// qwen3Assistant writes the body of a Qwen3 assistant turn (after "<|im_start|>assistant\n").
// afterQuery: the message follows the last user question; last: it ends the conversation.
func qwen3Assistant(m Message, afterQuery, last bool) string {
	content, reasoning := m.Content, m.Reasoning
	if reasoning == "" {
		if parts := strings.Split(content, thinkClose); len(parts) > 1 {
			content = strings.TrimLeft(parts[len(parts)-1], "\n")
			before := strings.Split(strings.TrimRight(parts[0], "\n"), thinkOpen)
			reasoning = strings.TrimLeft(before[len(before)-1], "\n")
		}
	}
	var b strings.Builder
	if afterQuery && (last || reasoning != "") {
		b.WriteString(thinkOpen + "\n" + strings.Trim(reasoning, "\n") + "\n" + thinkClose + "\n\n" + strings.TrimLeft(content, "\n"))
	} else {
		b.WriteString(content)
	}
	for j, c := range m.ToolCalls {
		if j > 0 || content != "" {
			b.WriteString("\n")
		}
		b.WriteString(qwenCall(c))
	}
	return b.String()
}

// FormatAction writes the turn that performs a, ending with <|im_end|>. Qwen3 with thinking
// on opens it with "<think>\n" + a.Think + "\n</think>\n\n" (an empty block when a.Think is
// empty, as its template writes the last turn); Qwen2.5, and Qwen3 with thinking off, drop
// a.Think.
func (q QwenFormat) FormatAction(a agrl.Action, tools []agrl.Tool) (string, error) {
	m, err := AssistantMessage(a, tools)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	content := m.Content
	if q.v3 && !q.noThinking {
		b.WriteString(thinkOpen + "\n" + strings.Trim(m.Reasoning, "\n") + "\n" + thinkClose + "\n\n")
		content = strings.TrimLeft(content, "\n")
	}
	b.WriteString(content)
	for _, c := range m.ToolCalls {
		b.WriteString(qwenCall(c))
	}
	b.WriteString(imEnd)
	return b.String(), nil
}

// ParseTurn reads one Qwen assistant turn. A leading "<think>…</think>" block (or text up to
// a "</think>" whose opening tag was in the prompt) is the reasoning; then either one
// <tool_call> holding {"name": tool, "arguments": {param: "value"}}, or plain text, the
// answer. Text before a tool call joins the reasoning. Invalid: several calls, text after the
// call, malformed JSON, an unknown tool, a missing, extra or non-string argument, an empty
// turn, a stray tag or special token, a turn over MaxTurnBytes or not UTF-8.
func (q QwenFormat) ParseTurn(text string, tools []agrl.Tool) agrl.Action {
	if a, bad := checkTurn(text); bad {
		return a
	}
	body := cutEnd(text, imEnd, endOfText)
	for _, tok := range []string{imEnd, imStart, endOfText} {
		if strings.Contains(body, tok) {
			return invalid("%s inside the turn", tok)
		}
	}
	think, rest, reason := splitThink(body)
	if reason != "" {
		return invalid("%s", reason)
	}
	for _, tag := range []string{responseOpen, responseClose} {
		if strings.Contains(rest, tag) {
			return invalid("%s in the turn: tool results come from the environment", tag)
		}
	}
	switch n := strings.Count(rest, toolCallOpen); {
	case n == 0:
		if strings.Contains(rest, toolCallClose) {
			return invalid("%s without %s", toolCallClose, toolCallOpen)
		}
		return answer(think, rest)
	case n > 1:
		return invalid("%d tool calls in one turn: call one tool per turn", n)
	}
	pre, after, _ := strings.Cut(rest, toolCallOpen)
	inner, post, ok := strings.Cut(after, toolCallClose)
	if !ok {
		return invalid("unclosed %s", toolCallOpen)
	}
	if strings.TrimSpace(post) != "" {
		return invalid("text after %s", toolCallClose)
	}
	a := parseCall(inner, tools, "arguments")
	if a.Kind != agrl.Invalid {
		a.Think = joinThink(think, strings.TrimSpace(pre))
	}
	return a
}

// splitThink splits a leading reasoning block off body. It returns a reason when the think
// tags are misplaced.
func splitThink(body string) (think, rest, reason string) {
	s := strings.TrimLeft(body, " \t\r\n")
	switch {
	case strings.HasPrefix(s, thinkOpen):
		inner, after, ok := strings.Cut(s[len(thinkOpen):], thinkClose)
		if !ok {
			return "", "", "unclosed " + thinkOpen
		}
		think, rest = inner, after
	case strings.Contains(body, thinkClose): // the prompt opened the block
		think, rest, _ = strings.Cut(body, thinkClose)
	default:
		think, rest = "", body
	}
	if strings.Contains(think, thinkOpen) {
		return "", "", "text before " + thinkOpen
	}
	if strings.Contains(rest, thinkOpen) || strings.Contains(rest, thinkClose) {
		return "", "", "a second think block"
	}
	return strings.TrimSpace(think), rest, ""
}

// joinThink joins the reasoning and the visible text before a tool call.
func joinThink(think, pre string) string {
	switch {
	case think == "":
		return pre
	case pre == "":
		return think
	}
	return think + "\n\n" + pre
}

// answer is the action of a turn without a tool call.
func answer(think, rest string) agrl.Action {
	ans := strings.TrimSpace(rest)
	if ans == "" {
		if think != "" {
			return invalid("no answer or tool call after %s", thinkClose)
		}
		return invalid("empty turn")
	}
	return agrl.Action{Kind: agrl.AnswerAction, Think: think, Answer: ans}
}

func invalid(format string, args ...any) agrl.Action {
	return agrl.Action{Kind: agrl.Invalid, Invalid: fmt.Sprintf(format, args...)}
}
