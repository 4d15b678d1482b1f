package chat

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"agrl.dev/agrl"
)

// Role says who speaks a message.
type Role string

// The roles a conversation may use. Llama 3 writes RoleTool messages as its "ipython" role.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one message of a conversation, in the shape chat templates take
// (transformers' {"role", "content", "reasoning_content", "tool_calls"}).
type Message struct {
	Role    Role   `json:"role"`
	Content string `json:"content"`
	// Reasoning is an assistant message's reasoning_content. Only Qwen3 renders it; empty
	// means none was given, and Qwen3 then looks for "<think>…</think>" in Content.
	Reasoning string `json:"reasoning,omitempty"`
	// ToolCalls are an assistant message's function calls (Llama 3 takes at most one).
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// ToolCall is one function call of an assistant message.
type ToolCall struct {
	Name string `json:"name"`
	// Arguments maps parameter names to string values; they render in sorted key order.
	Arguments map[string]string `json:"arguments"`
}

// Format is one model family's chat and tool-call format.
//
// The pieces fit together as the template renders them: for a conversation msgs that ends
// with a user or tool message, an action a and the observation obs it gets,
//
//	Render(msgs, tools, true) + FormatAction(a, tools) + AppendObservation(obs)
//	  == Render(append(msgs, AssistantMessage(a), {RoleTool, obs}), tools, true)
//
// byte for byte. The exceptions come from the templates: Qwen3's drops the empty think block
// of an earlier assistant turn (so for Qwen3 they agree with thinking on and a.Think not
// empty), and Llama 3's writes <|eot_id|> after a call where Llama 3.1 may sample <|eom_id|>.
// Training on the sampled tokens (token in, token out) is exact either way.
type Format interface {
	// Name is the format's short name: "qwen2.5", "qwen3", "qwen3-no-thinking" (Qwen3 with
	// Thinking(false)) or "llama3". ByName(f.Name()) is f.
	Name() string
	// Render writes msgs as the model's chat template does, with the tools described in the
	// system or first user message as the template places them (none when tools is empty),
	// and ends with the generation prompt if addGenerationPrompt is set. It returns an error
	// for a conversation the template rejects or this package does not render (no messages,
	// an unknown role, tool calls outside assistant messages, …).
	Render(msgs []Message, tools []agrl.Tool, addGenerationPrompt bool) (string, error)
	// GenerationPrompt is the text that opens an assistant turn for the model to continue.
	GenerationPrompt() string
	// AppendObservation is the text that follows an assistant turn (its text and end-of-turn
	// marker, as the model sampled them) when the tool answers obs: the rest of the turn's
	// ending, the tool-result turn and the next generation prompt.
	AppendObservation(obs string) string
	// StopStrings are the texts that end an assistant turn; the first is the one the
	// template writes.
	StopStrings() []string
	// ParseTurn reads one assistant turn (the text after the generation prompt, with or
	// without its end-of-turn marker) as an action. It never panics: a turn that breaks the
	// format, or calls a tool wrongly, is an agrl.Invalid action with the reason.
	ParseTurn(text string, tools []agrl.Tool) agrl.Action
	// FormatAction writes the assistant turn that performs a, ending with the end-of-turn
	// marker: what the model should sample after the generation prompt (a demonstration for
	// SFT). ParseTurn(FormatAction(a)) gives a back, less a.Think where the format has no
	// reasoning, and with a.Args and a.Answer trimmed of white space. It fails where
	// AssistantMessage does.
	FormatAction(a agrl.Action, tools []agrl.Tool) (string, error)
}

// MaxTurnBytes caps the text ParseTurn reads. It is larger than agrl.MaxActionBytes because
// native turns are wordier (JSON, special tokens) and Qwen3 reasons at length.
const MaxTurnBytes = 16 << 10

// defaultParam names the parameter of a tool whose Args names none.
const defaultParam = "input"

// Param returns the name and description of t's single string parameter: Args "expr: an
// integer expression" gives ("expr", "an integer expression"). Without a ':' — or when the
// text before it is not an identifier of at most 64 bytes ([A-Za-z_][A-Za-z0-9_]*) — the
// parameter is "input" and all of Args, trimmed, describes it.
func Param(t agrl.Tool) (name, description string) {
	if n, d, ok := strings.Cut(t.Args, ":"); ok && isIdent(strings.TrimSpace(n)) {
		return strings.TrimSpace(n), strings.TrimSpace(d)
	}
	return defaultParam, strings.TrimSpace(t.Args)
}

func isIdent(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// toolValue is t as a JSON-schema function, in the key order transformers' get_json_schema
// uses. Empty descriptions are left out.
func toolValue(t agrl.Tool) object {
	name, desc := Param(t)
	prop := object{{"type", "string"}}
	if desc != "" {
		prop = append(prop, member{"description", desc})
	}
	fn := object{{"name", t.Name}}
	if t.Doc != "" {
		fn = append(fn, member{"description", t.Doc})
	}
	fn = append(fn, member{"parameters", object{
		{"type", "object"},
		{"properties", object{{name, prop}}},
		{"required", []any{name}},
	}})
	return object{{"type", "function"}, {"function", fn}}
}

// ToolSchema returns t as the JSON-schema function the templates show the model, on one line:
//
//	{"type": "function", "function": {"name": …, "description": Doc, "parameters":
//	  {"type": "object", "properties": {param: {"type": "string", "description": …}},
//	  "required": [param]}}}
func ToolSchema(t agrl.Tool) string { return toJSON(toolValue(t)) }

// argsValue is a call's arguments as a JSON object, keys sorted.
func argsValue(args map[string]string) object {
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	obj := make(object, len(keys))
	for i, k := range keys {
		obj[i] = member{k, args[k]}
	}
	return obj
}

// findTool returns the tool named name.
func findTool(tools []agrl.Tool, name string) (agrl.Tool, bool) {
	for _, t := range tools {
		if t.Name == name {
			return t, true
		}
	}
	return agrl.Tool{}, false
}

// toolNames lists the tools' names for error messages.
func toolNames(tools []agrl.Tool) string {
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
	}
	return strings.Join(names, ", ")
}

// check validates a conversation and its tools: every problem at once.
func check(msgs []Message, tools []agrl.Tool) error {
	var errs []error
	if len(msgs) == 0 {
		errs = append(errs, errors.New("no messages"))
	}
	seen := map[string]bool{}
	for i, t := range tools {
		switch {
		case t.Name == "":
			errs = append(errs, fmt.Errorf("tool %d has no name", i))
		case seen[t.Name]:
			errs = append(errs, fmt.Errorf("tool %q listed twice", t.Name))
		}
		seen[t.Name] = true
	}
	for i, m := range msgs {
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		default:
			errs = append(errs, fmt.Errorf("message %d: unknown role %q", i, m.Role))
		}
		if len(m.ToolCalls) > 0 && m.Role != RoleAssistant {
			errs = append(errs, fmt.Errorf("message %d: tool calls in a %s message", i, m.Role))
		}
		for j, c := range m.ToolCalls {
			if c.Name == "" {
				errs = append(errs, fmt.Errorf("message %d: tool call %d has no name", i, j))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	return nil
}

// AssistantMessage is the assistant message that performs a: a call of a.Tool with a.Args
// as its single parameter, or the answer a.Answer as content; a.Think is its Reasoning. It
// fails for an invalid action, a tool not in tools, and an empty answer: giving up has no
// native form (a native turn without a tool call is an answer, and an empty one is invalid).
func AssistantMessage(a agrl.Action, tools []agrl.Tool) (Message, error) {
	switch a.Kind {
	case agrl.ToolCall:
		t, ok := findTool(tools, a.Tool)
		if !ok {
			return Message{}, fmt.Errorf("chat: unknown tool %q (tools: %s)", a.Tool, toolNames(tools))
		}
		p, _ := Param(t)
		return Message{Role: RoleAssistant, Reasoning: a.Think,
			ToolCalls: []ToolCall{{Name: a.Tool, Arguments: map[string]string{p: a.Args}}}}, nil
	case agrl.AnswerAction:
		if strings.TrimSpace(a.Answer) == "" {
			return Message{}, errors.New("chat: an empty answer (giving up) has no native form")
		}
		return Message{Role: RoleAssistant, Content: a.Answer, Reasoning: a.Think}, nil
	default:
		return Message{}, fmt.Errorf("chat: cannot write an invalid action (%s)", a.Invalid)
	}
}

// Conversation turns an episode into messages for a demonstration: the system message (if
// not empty), the prompt as the user message, then each turn's action as an assistant message
// followed, for a tool call, by its observation as a tool message. It fails on an invalid
// turn, a turn after an answer, or a call of a tool not in tools.
func Conversation(system, prompt string, turns []agrl.Turn, tools []agrl.Tool) ([]Message, error) {
	var msgs []Message
	if system != "" {
		msgs = append(msgs, Message{Role: RoleSystem, Content: system})
	}
	msgs = append(msgs, Message{Role: RoleUser, Content: prompt})
	for i, t := range turns {
		m, err := AssistantMessage(t.Action, tools)
		if err != nil {
			return nil, fmt.Errorf("turn %d: %w", i, err)
		}
		msgs = append(msgs, m)
		if t.Action.Kind == agrl.AnswerAction {
			if i != len(turns)-1 {
				return nil, fmt.Errorf("chat: turn %d answers, but %d turns follow", i, len(turns)-1-i)
			}
			break
		}
		msgs = append(msgs, Message{Role: RoleTool, Content: t.Observation})
	}
	return msgs, nil
}

// knownTemplates maps the SHA-256 of each chat template verified in testdata/ to its format.
var knownTemplates = map[string]func() Format{
	qwen25TemplateSHA:  func() Format { return Qwen25() },
	qwen3TemplateSHA:   func() Format { return Qwen3() },
	llama32TemplateSHA: func() Format { return Llama3() },
}

// ByName returns the format of a short name (Format.Name): one of agrl.ChatFormats(). It
// is how a run chooses the format of a model whose chat template ForTemplate does not know
// (agrl.PretrainedLM.ChatFormat): Llama 3.1 and 3.3 Instruct take "llama3", Qwen2.5's
// variants "qwen2.5", Qwen3's instruct-only releases "qwen3" or "qwen3-no-thinking".
func ByName(name string) (Format, error) {
	switch name {
	case "qwen2.5":
		return Qwen25(), nil
	case "qwen3":
		return Qwen3(), nil
	case "qwen3-no-thinking":
		return Qwen3().Thinking(false), nil
	case "llama3":
		return Llama3(), nil
	}
	return nil, fmt.Errorf("chat: unknown format %q (known: %s)", name, strings.Join(agrl.ChatFormats(), ", "))
}

// ForTemplate returns the format of a tokenizer_config.json chat_template: one of the
// templates this package is verified against (testdata/), compared byte for byte. Another
// template is an *UnknownTemplateError that names the format it resembles; if the model was
// tuned on that format, use it by name (ByName; Llama 3.1 and 3.3 Instruct, whose templates
// differ from 3.2's in built-in tools and the date, take "llama3").
func ForTemplate(chatTemplate string) (Format, error) {
	sum := sha256.Sum256([]byte(chatTemplate))
	h := hex.EncodeToString(sum[:])
	if f, ok := knownTemplates[h]; ok {
		return f(), nil
	}
	e := &UnknownTemplateError{SHA256: h}
	switch {
	case strings.Contains(chatTemplate, "<|start_header_id|>"):
		e.Resembles = "llama3"
	case strings.Contains(chatTemplate, "<tool_call>") && strings.Contains(chatTemplate, "<think>"):
		e.Resembles = "qwen3"
	case strings.Contains(chatTemplate, "<tool_call>"):
		e.Resembles = "qwen2.5"
	}
	return nil, e
}

// UnknownTemplateError is ForTemplate's error for a chat template this package is not
// verified against.
type UnknownTemplateError struct {
	// SHA256 is the template's digest, in hex.
	SHA256 string
	// Resembles names the format (ByName) whose markers the template uses: "llama3", "qwen3"
	// or "qwen2.5"; "" when none.
	Resembles string
}

// Error says the template is unverified and which format it resembles.
func (e *UnknownTemplateError) Error() string {
	guess := "no family this package knows"
	if e.Resembles != "" {
		guess = fmt.Sprintf("the %q format", e.Resembles)
	}
	return fmt.Sprintf("chat: unverified chat template (sha256 %s…); it resembles %s", e.SHA256[:12], guess)
}

// pySpace reports whether Python's str.isspace holds for r: Unicode White_Space and the
// separators U+001C–U+001F. jinja2's trim filter strips these.
func pySpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// pyStrip is Python's s.strip() (jinja2's trim).
func pyStrip(s string) string { return strings.TrimFunc(s, pySpace) }

// clip shortens s for an error message.
func clip(s string) string {
	const n = 40
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xc0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
