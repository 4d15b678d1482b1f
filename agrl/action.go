package agrl

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// The action protocol.
//
// Each turn the policy writes one action:
//
//	action := [ "<think>" text "</think>" ] ( tool | answer )
//	tool   := "<tool>" name "(" args ")" "</tool>"
//	answer := "<answer>" text "</answer>"
//	name   := [a-z_][a-z0-9_]*            (at most MaxToolNameLen bytes)
//
// White space may surround the parts. Nothing else may appear outside the tags, and the text
// inside a tag may not contain another protocol tag. An empty answer ("<answer></answer>")
// means the policy gives up. The environment's reply comes back wrapped as "<obs>…</obs>";
// the policy never writes an observation tag itself.
//
// Args is passed to the tool verbatim (after trimming white space); each tool parses its own
// arguments. Action text longer than MaxActionBytes, or that is not valid UTF-8, is invalid.
const (
	ThinkOpen   = "<think>"
	ThinkClose  = "</think>"
	ToolOpen    = "<tool>"
	ToolClose   = "</tool>"
	AnswerOpen  = "<answer>"
	AnswerClose = "</answer>"
	ObsOpen     = "<obs>"
	ObsClose    = "</obs>"
)

// Tags lists every protocol tag, in a fixed order (tokenizers reserve one token for each).
var Tags = []string{ThinkOpen, ThinkClose, ToolOpen, ToolClose, AnswerOpen, AnswerClose, ObsOpen, ObsClose}

// Limits of the action parser.
const (
	// MaxActionBytes caps one action's text; longer actions are invalid without being scanned.
	MaxActionBytes = 4096
	// MaxToolNameLen caps a tool name.
	MaxToolNameLen = 32
)

// ActionKind says what a parsed action does.
type ActionKind int

const (
	// Invalid actions break the protocol; Action.Invalid says why.
	Invalid ActionKind = iota
	// ToolCall actions call Action.Tool with Action.Args.
	ToolCall
	// AnswerAction actions end the episode with Action.Answer (empty: the policy gives up).
	AnswerAction
)

// String returns "invalid", "tool" or "answer".
func (k ActionKind) String() string {
	switch k {
	case ToolCall:
		return "tool"
	case AnswerAction:
		return "answer"
	default:
		return "invalid"
	}
}

// MarshalText writes the kind's name.
func (k ActionKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads a kind's name.
func (k *ActionKind) UnmarshalText(b []byte) error {
	switch string(b) {
	case "tool":
		*k = ToolCall
	case "answer":
		*k = AnswerAction
	case "invalid":
		*k = Invalid
	default:
		return fmt.Errorf("agrl: unknown action kind %q", b)
	}
	return nil
}

// Action is one parsed turn of the policy.
type Action struct {
	Kind ActionKind `json:"kind"`
	// Think is the reasoning inside <think>…</think>, if any.
	Think string `json:"think,omitempty"`
	// Tool and Args are set for a ToolCall.
	Tool string `json:"tool,omitempty"`
	Args string `json:"args,omitempty"`
	// Answer is set for an AnswerAction; empty means the policy gave up.
	Answer string `json:"answer,omitempty"`
	// Invalid says why an Invalid action was rejected.
	Invalid string `json:"invalid,omitempty"`
}

// GivesUp reports whether the action is an empty answer.
func (a Action) GivesUp() bool {
	return a.Kind == AnswerAction && strings.TrimSpace(a.Answer) == ""
}

// String renders the action back in protocol form (an invalid action renders its reason).
func (a Action) String() string {
	var b strings.Builder
	if a.Think != "" {
		b.WriteString(ThinkOpen + a.Think + ThinkClose)
	}
	switch a.Kind {
	case ToolCall:
		b.WriteString(ToolOpen + a.Tool + "(" + a.Args + ")" + ToolClose)
	case AnswerAction:
		b.WriteString(AnswerOpen + a.Answer + AnswerClose)
	default:
		b.WriteString("invalid: " + a.Invalid)
	}
	return b.String()
}

// ToolAction builds the protocol text of a tool call.
func ToolAction(tool, args string) string { return ToolOpen + tool + "(" + args + ")" + ToolClose }

// AnswerText builds the protocol text of an answer.
func AnswerText(answer string) string { return AnswerOpen + answer + AnswerClose }

// Observation wraps an environment's reply as the policy sees it.
func Observation(text string) string { return ObsOpen + text + ObsClose }

func invalid(format string, args ...any) Action {
	return Action{Kind: Invalid, Invalid: fmt.Sprintf(format, args...)}
}

// ParseAction turns one turn of policy text into an Action. It never panics and never returns
// an error: text that breaks the protocol yields an Action of kind Invalid with a reason that
// the environment loop sends back to the policy as a penalised observation.
func ParseAction(text string) Action {
	if len(text) > MaxActionBytes {
		return invalid("action too long: %d bytes (limit %d)", len(text), MaxActionBytes)
	}
	if !utf8.ValidString(text) {
		return invalid("action is not valid UTF-8")
	}
	rest := strings.TrimSpace(text)
	if rest == "" {
		return invalid("empty action")
	}
	var think string
	if strings.HasPrefix(rest, ThinkOpen) {
		body, after, ok := strings.Cut(rest[len(ThinkOpen):], ThinkClose)
		if !ok {
			return invalid("unclosed %s", ThinkOpen)
		}
		if tag := findTag(body); tag != "" {
			return invalid("%s inside <think>", tag)
		}
		think = body
		rest = strings.TrimSpace(after)
		if rest == "" {
			return invalid("no <tool> or <answer> after </think>")
		}
	}
	switch {
	case strings.HasPrefix(rest, ToolOpen):
		body, after, ok := strings.Cut(rest[len(ToolOpen):], ToolClose)
		if !ok {
			return invalid("unclosed %s", ToolOpen)
		}
		if strings.TrimSpace(after) != "" {
			return invalid("text after %s", ToolClose)
		}
		if tag := findTag(body); tag != "" {
			return invalid("%s inside <tool>", tag)
		}
		name, args, err := splitCall(strings.TrimSpace(body))
		if err != "" {
			return invalid("%s", err)
		}
		return Action{Kind: ToolCall, Think: think, Tool: name, Args: args}
	case strings.HasPrefix(rest, AnswerOpen):
		body, after, ok := strings.Cut(rest[len(AnswerOpen):], AnswerClose)
		if !ok {
			return invalid("unclosed %s", AnswerOpen)
		}
		if strings.TrimSpace(after) != "" {
			return invalid("text after %s", AnswerClose)
		}
		if tag := findTag(body); tag != "" {
			return invalid("%s inside <answer>", tag)
		}
		return Action{Kind: AnswerAction, Think: think, Answer: strings.TrimSpace(body)}
	default:
		if tag := findTag(rest); tag != "" {
			return invalid("text before %s", tag)
		}
		return invalid("no <tool> or <answer> tag")
	}
}

// findTag returns the first protocol tag in s, or "".
func findTag(s string) string {
	i := strings.IndexByte(s, '<')
	for i >= 0 {
		for _, t := range Tags {
			if strings.HasPrefix(s[i:], t) {
				return t
			}
		}
		j := strings.IndexByte(s[i+1:], '<')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return ""
}

// splitCall splits "name(args)" and validates the name. It returns a reason on failure.
func splitCall(s string) (name, args, reason string) {
	open := strings.IndexByte(s, '(')
	if open < 0 {
		return "", "", "tool call without '(': want name(args)"
	}
	if !strings.HasSuffix(s, ")") {
		return "", "", "tool call does not end with ')'"
	}
	name = strings.TrimSpace(s[:open])
	if name == "" {
		return "", "", "missing tool name"
	}
	if len(name) > MaxToolNameLen {
		return "", "", fmt.Sprintf("tool name longer than %d bytes", MaxToolNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c == '_' || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return "", "", fmt.Sprintf("bad tool name %q: want [a-z_][a-z0-9_]*", name)
		}
	}
	return name, strings.TrimSpace(s[open+1 : len(s)-1]), ""
}

// UnquoteArg strips one pair of matching single or double quotes around a tool argument,
// so that ls("/docs") and ls(/docs) mean the same. Inner text is returned unchanged.
func UnquoteArg(s string) string {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}
