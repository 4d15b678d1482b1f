package chat

import (
	"fmt"
	"strings"

	"agrl.dev/agrl"
)

// Llama 3's special tokens and the fixed text of its template.
const (
	beginOfText = "<|begin_of_text|>"
	endOfTextL  = "<|end_of_text|>"
	headerOpen  = "<|start_header_id|>"
	headerClose = "<|end_header_id|>"
	eotID       = "<|eot_id|>"
	eomID       = "<|eom_id|>"
	pythonTag   = "<|python_tag|>"

	llamaRespondIn = "Respond in the format {\"name\": function name, \"parameters\": dictionary of " +
		"argument name and its value}.Do not use variables.\n\n"
	llamaToolsInSystem = "You have access to the following functions. To call a function, please " +
		"respond with JSON for a function call." + llamaRespondIn
	llamaToolsInUser = "Given the following functions, please respond with a JSON for a function call " +
		"with its proper arguments that best answers the given prompt.\n\n" + llamaRespondIn
)

// llama32TemplateSHA is the SHA-256 of testdata/llama3_2.jinja.
const llama32TemplateSHA = "5816fce10444e03c2e9ee1ef8a4a1ea61ae7e69e438613f3b17b69d0426223a4"

// DefaultLlamaDate is the "Today Date" a LlamaFormat writes unless told otherwise: the
// template's own fallback. transformers gives Llama 3.2's template today's date (its
// strftime_now), so pass the day with Date to match a rendering made on that day.
const DefaultLlamaDate = "26 Jul 2024"

// LlamaFormat is the format of Llama 3.1, 3.2 and 3.3 Instruct with custom (JSON) tools:
// every message between <|start_header_id|>role<|end_header_id|>\n\n and <|eot_id|>, a system
// message that opens with "Environment: ipython" (with tools) and the knowledge and today
// dates, the tools as indented JSON in the first user message (or the system message, see
// ToolsInSystem), calls as {"name": …, "parameters": {…}}, tool results in the "ipython"
// role as JSON strings. It is verified against Llama 3.2's template. Llama 3.1's template
// (on no npm package, so not verified here) differs in built-in tools, which this package
// does not use, and in never reading today's date; for custom tools it should render the
// same text. The zero value puts tools in the first user message and writes DefaultLlamaDate.
type LlamaFormat struct {
	toolsInSystem bool
	date          string
}

// Llama3 is the Llama 3.x Instruct format with the template's defaults.
func Llama3() LlamaFormat { return LlamaFormat{} }

// ToolsInSystem moves the tool definitions from the first user message (the template's
// default, tools_in_user_message=true) to the system message.
func (l LlamaFormat) ToolsInSystem(on bool) LlamaFormat {
	l.toolsInSystem = on
	return l
}

// Date sets the "Today Date" line ("01 Dec 2026", the template's date_string; empty:
// DefaultLlamaDate).
func (l LlamaFormat) Date(d string) LlamaFormat {
	l.date = d
	return l
}

// Name is "llama3".
func (LlamaFormat) Name() string { return "llama3" }

// GenerationPrompt is "<|start_header_id|>assistant<|end_header_id|>\n\n".
func (LlamaFormat) GenerationPrompt() string { return header("assistant") }

// StopStrings are "<|eot_id|>", "<|eom_id|>" (which Llama 3.1 may end a tool call with when
// the system message says "Environment: ipython") and "<|end_of_text|>".
func (LlamaFormat) StopStrings() []string { return []string{eotID, eomID, endOfTextL} }

// AppendObservation is the ipython turn holding obs as a JSON string (the template writes a
// string result with tojson, quotes and all) and the generation prompt.
func (l LlamaFormat) AppendObservation(obs string) string {
	return header("ipython") + toJSON(obs) + eotID + l.GenerationPrompt()
}

func header(role string) string { return headerOpen + role + headerClose + "\n\n" }

// Render writes msgs as the Llama 3.2 template does. Content is trimmed of white space
// (Python's str.strip) except in tool results; an assistant message with a tool call writes
// only the call (its content is dropped) and may hold only one. With tools in the user
// message (the default), the first message after the system message must be a user message.
func (l LlamaFormat) Render(msgs []Message, tools []agrl.Tool, addGenerationPrompt bool) (string, error) {
	if err := check(msgs, tools); err != nil {
		return "", err
	}
	date := l.date
	if date == "" {
		date = DefaultLlamaDate
	}
	var b strings.Builder
	b.WriteString(beginOfText)
	system, skipped := "", 0 // skipped: messages already written, for error messages
	if msgs[0].Role == RoleSystem {
		system = pyStrip(msgs[0].Content)
		msgs, skipped = msgs[1:], 1
	}
	b.WriteString(header("system"))
	if len(tools) > 0 {
		b.WriteString("Environment: ipython\n")
	}
	b.WriteString("Cutting Knowledge Date: December 2023\nToday Date: " + date + "\n\n")
	if len(tools) > 0 && l.toolsInSystem {
		b.WriteString(llamaToolsInSystem + llamaTools(tools))
	}
	b.WriteString(system + eotID)
	if len(tools) > 0 && !l.toolsInSystem {
		if len(msgs) == 0 {
			return "", fmt.Errorf("chat: llama3 puts the tools in the first user message, and there is none")
		}
		if msgs[0].Role != RoleUser {
			return "", fmt.Errorf("chat: llama3 puts the tools in the first user message, but message %d is a %s message",
				skipped, msgs[0].Role)
		}
		b.WriteString(header("user") + llamaToolsInUser + llamaTools(tools) + pyStrip(msgs[0].Content) + eotID)
		msgs, skipped = msgs[1:], skipped+1
	}
	for i, m := range msgs {
		switch {
		case m.Role == RoleTool:
			b.WriteString(header("ipython") + toJSON(m.Content) + eotID)
		case len(m.ToolCalls) > 0:
			if len(m.ToolCalls) != 1 {
				return "", fmt.Errorf("chat: llama3 takes one tool call per message; message %d has %d",
					skipped+i, len(m.ToolCalls))
			}
			b.WriteString(header("assistant") + llamaCall(m.ToolCalls[0]) + eotID)
		default:
			b.WriteString(header(string(m.Role)) + pyStrip(m.Content) + eotID)
		}
	}
	if addGenerationPrompt {
		b.WriteString(l.GenerationPrompt())
	}
	return b.String(), nil
}

// llamaTools writes each tool as tojson(indent=4) followed by a blank line.
func llamaTools(tools []agrl.Tool) string {
	var b strings.Builder
	for _, t := range tools {
		b.WriteString(toJSONIndent(toolValue(t), 4) + "\n\n")
	}
	return b.String()
}

// llamaCall writes one call as the template does (the name is written as is, unquoted).
func llamaCall(c ToolCall) string {
	return "{\"name\": \"" + c.Name + "\", \"parameters\": " + toJSON(argsValue(c.Arguments)) + "}"
}

// FormatAction writes the turn that performs a, ending with <|eot_id|>: the call's JSON, or
// the trimmed answer. a.Think is dropped (the template has no place for it).
func (LlamaFormat) FormatAction(a agrl.Action, tools []agrl.Tool) (string, error) {
	m, err := AssistantMessage(a, tools)
	if err != nil {
		return "", err
	}
	if len(m.ToolCalls) > 0 {
		return llamaCall(m.ToolCalls[0]) + eotID, nil
	}
	return pyStrip(m.Content) + eotID, nil
}

// ParseTurn reads one Llama 3 assistant turn: a JSON object {"name": tool, "parameters":
// {param: "value"}} ("arguments" is accepted for "parameters", and "type": "function" is
// allowed), optionally after <|python_tag|>, is a tool call; other text is the answer.
// Invalid: several calls, text around the JSON, malformed JSON, an unknown tool, a missing,
// extra or non-string argument, an empty turn, a special token inside the turn, a turn over
// MaxTurnBytes or not UTF-8.
func (LlamaFormat) ParseTurn(text string, tools []agrl.Tool) agrl.Action {
	if a, bad := checkTurn(text); bad {
		return a
	}
	body := cutEnd(text, eotID, eomID, endOfTextL)
	for _, tok := range []string{eotID, eomID, endOfTextL, beginOfText, headerOpen, headerClose} {
		if strings.Contains(body, tok) {
			return invalid("%s inside the turn", tok)
		}
	}
	s := pyStrip(body)
	tagged := false
	if t, ok := strings.CutPrefix(s, pythonTag); ok {
		s, tagged = pyStrip(t), true
	}
	if strings.Contains(s, pythonTag) {
		return invalid("text before %s", pythonTag)
	}
	switch {
	case s == "":
		return invalid("empty turn")
	case strings.HasPrefix(s, "{"), strings.HasPrefix(s, "["):
		return parseCall(s, tools, "parameters", "arguments")
	case tagged:
		return invalid("%s without a JSON tool call (built-in tools are not supported)", pythonTag)
	case strings.Contains(s, `{"name"`):
		return invalid("text before the tool call JSON")
	}
	return agrl.Action{Kind: agrl.AnswerAction, Answer: pyStrip(s)} // as the template trims it
}
