package chat

import (
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"

	"agrl.dev/agrl"
)

// checkTurn rejects a turn that is too long or not UTF-8, without scanning it further.
func checkTurn(text string) (agrl.Action, bool) {
	if len(text) > MaxTurnBytes {
		return invalid("turn too long: %d bytes (limit %d)", len(text), MaxTurnBytes), true
	}
	if !utf8.ValidString(text) {
		return invalid("turn is not valid UTF-8"), true
	}
	return agrl.Action{}, false
}

// cutEnd removes trailing white space and then one end-of-turn marker, if present.
func cutEnd(text string, markers ...string) string {
	s := strings.TrimRight(text, " \t\r\n")
	for _, m := range markers {
		if t, ok := strings.CutSuffix(s, m); ok {
			return t
		}
	}
	return s
}

// decodeObject reads one JSON object from the start of s (after white space) and returns
// its keys and the text after it.
func decodeObject(s string) (map[string]json.RawMessage, string, string) {
	dec := json.NewDecoder(strings.NewReader(s))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, "", "malformed tool call JSON: " + err.Error()
	}
	if k := jsonKind(raw); k != "object" {
		return nil, "", "the tool call is a JSON " + k + ", not an object"
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil { // unreachable: raw is a valid object
		return nil, "", "malformed tool call JSON: " + err.Error()
	}
	return obj, s[dec.InputOffset():], ""
}

// jsonKind names the kind of a valid JSON value.
func jsonKind(raw json.RawMessage) string {
	s := strings.TrimLeft(string(raw), " \t\r\n")
	if s == "" {
		return "nothing"
	}
	switch s[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// parseCall reads the JSON of one call, {"name": tool, argsKey: {param: "value"}}, where
// argsKey is the first of argsKeys present (all of them are accepted, only one at a time).
// Extra keys, and "type" other than "function", are invalid.
func parseCall(s string, tools []agrl.Tool, argsKeys ...string) agrl.Action {
	obj, rest, reason := decodeObject(s)
	if reason != "" {
		return invalid("%s", reason)
	}
	if r := strings.TrimSpace(rest); r != "" {
		if r[0] == '{' || r[0] == ';' || r[0] == ',' {
			return invalid("several tool calls in one turn: call one tool per turn")
		}
		return invalid("text after the tool call JSON")
	}
	var argsKey string
	for _, k := range sortedKeys(obj) { // one reason, the same every time
		switch {
		case k == "name":
		case k == "type" && string(obj[k]) == `"function"`:
		case slices.Contains(argsKeys, k):
			if argsKey != "" {
				return invalid("both %q and %q in the tool call", argsKey, k)
			}
			argsKey = k
		default:
			return invalid("unexpected key %q in the tool call (want name and %s)", clip(k), argsKeys[0])
		}
	}
	rawName, ok := obj["name"]
	if !ok {
		return invalid("tool call without a name")
	}
	var name string
	if err := json.Unmarshal(rawName, &name); err != nil || jsonKind(rawName) != "string" { // null decodes as ""
		return invalid("tool name is a JSON %s, not a string", jsonKind(rawName))
	}
	t, ok := findTool(tools, name)
	if !ok {
		return invalid("unknown tool %q (tools: %s)", clip(name), toolNames(tools))
	}
	param, _ := Param(t)
	if argsKey == "" {
		return invalid("call of %s without %q", name, argsKeys[0])
	}
	rawArgs := obj[argsKey]
	if k := jsonKind(rawArgs); k != "object" {
		return invalid("%s of %s is a JSON %s, not an object", argsKey, name, k)
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal(rawArgs, &args); err != nil { // unreachable: a valid object
		return invalid("malformed %s: %v", argsKey, err)
	}
	for _, k := range sortedKeys(args) {
		if k != param {
			return invalid("unexpected argument %q of %s (it takes only %q)", clip(k), name, param)
		}
	}
	rawValue, ok := args[param]
	if !ok {
		return invalid("missing argument %q of %s", param, name)
	}
	var value string
	if err := json.Unmarshal(rawValue, &value); err != nil || jsonKind(rawValue) != "string" {
		return invalid("argument %q of %s is a JSON %s, not a string", param, name, jsonKind(rawValue))
	}
	return agrl.Action{Kind: agrl.ToolCall, Tool: name, Args: strings.TrimSpace(value)}
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
