package filesearch

import (
	"fmt"
	"strings"

	"agrl.dev/agrl"
)

// Limits of the tools' arguments.
const (
	maxPath = 128 // bytes of a path argument
	maxName = 64  // bytes of a find argument
)

// ToolError codes set in agrl.StepResult.ToolError.
const (
	errNoSuchFile = "no such file"
	errBadPath    = "bad path"
	errNotDir     = "not a directory"
	errIsDir      = "is a directory"
	errBadName    = "bad name"
	errUnknown    = "unknown tool"
	errBadAction  = "unexpected action"
)

// InfoFact is the StepResult.Info key set to "true" when a cat printed the file holding the
// asked fact (ReadFact reads it back from the episode).
const InfoFact = "fact"

type session struct {
	w    *world
	gold string
}

func (s *session) Step(a agrl.Action) agrl.StepResult {
	switch a.Kind {
	case agrl.AnswerAction:
		ans := agrl.NormalizeAnswer(a.Answer)
		return agrl.StepResult{Done: true, Correct: ans != "" && ans == s.gold}
	case agrl.ToolCall:
	default:
		return fail(errBadAction, "error: expected a tool call or an answer")
	}
	switch a.Tool {
	case "ls":
		return s.ls(a.Args)
	case "cat":
		return s.cat(a.Args)
	case "find":
		return s.find(a.Args)
	}
	return fail(errUnknown, fmt.Sprintf("error: unknown tool %s (tools: ls, cat, find)", clip(a.Tool)))
}

func fail(code, obs string) agrl.StepResult {
	return agrl.StepResult{Observation: obs, ToolError: code}
}

func (s *session) ls(arg string) agrl.StepResult {
	path, res, ok := resolve(arg)
	if !ok {
		return res
	}
	n := s.w.nodes[path]
	switch {
	case n == nil:
		return fail(errNoSuchFile, "error: no such directory: "+clip(arg))
	case !n.dir:
		return fail(errNotDir, "error: "+clip(arg)+" is a file; use cat")
	case len(n.children) == 0:
		return agrl.StepResult{Observation: "(empty)"}
	}
	parts := make([]string, len(n.children))
	for i, c := range n.children {
		parts[i] = c
		if s.w.nodes[join(path, c)].dir {
			parts[i] += "/"
		}
	}
	return agrl.StepResult{Observation: strings.Join(parts, " ")}
}

func (s *session) cat(arg string) agrl.StepResult {
	if strings.TrimSpace(agrl.UnquoteArg(arg)) == "" {
		return fail(errBadPath, "error: cat needs a file path")
	}
	path, res, ok := resolve(arg)
	if !ok {
		return res
	}
	n := s.w.nodes[path]
	switch {
	case n == nil:
		return fail(errNoSuchFile, "error: no such file: "+clip(arg))
	case n.dir:
		return fail(errIsDir, "error: "+clip(arg)+" is a directory; use ls")
	}
	res = agrl.StepResult{Observation: n.content}
	if path == s.w.factPath {
		res.Info = map[string]string{InfoFact: "true"}
	}
	if res.Observation == "" {
		res.Observation = "(empty file)"
	}
	return res
}

func (s *session) find(arg string) agrl.StepResult {
	name := agrl.UnquoteArg(arg)
	switch {
	case len(name) > maxName:
		return fail(errBadName, fmt.Sprintf("error: name too long (%d bytes, max %d)", len(name), maxName))
	case name == "":
		return fail(errBadName, "error: find needs a name")
	case strings.Contains(name, "/"):
		return fail(errBadName, "error: find takes part of a base name, not a path")
	case !allowed(name):
		return fail(errBadName, "error: bad character in name (allowed: A-Z a-z 0-9 . _ -)")
	}
	found := s.w.find(name)
	if len(found) == 0 {
		return agrl.StepResult{Observation: "no match"}
	}
	obs := strings.Join(found[:min(len(found), maxFind)], " ")
	if len(found) > maxFind {
		obs += fmt.Sprintf(" (+%d more)", len(found)-maxFind)
	}
	return agrl.StepResult{Observation: obs}
}

// resolve turns a path argument into a clean absolute path inside the tree. When the
// argument is invalid it returns the failing step result and ok=false. Paths that leave the
// root are reported as missing files: there is nothing above the root.
func resolve(arg string) (path string, res agrl.StepResult, ok bool) {
	p := agrl.UnquoteArg(arg)
	if len(p) > maxPath {
		return "", fail(errBadPath, fmt.Sprintf("error: path too long (%d bytes, max %d)", len(p), maxPath)), false
	}
	if !allowed(strings.ReplaceAll(p, "/", "")) {
		return "", fail(errBadPath, "error: bad character in path (allowed: A-Z a-z 0-9 . _ - /)"), false
	}
	var stack []string
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(stack) == 0 {
				return "", fail(errNoSuchFile, "error: no such file: "+clip(p)+" (outside the root)"), false
			}
			stack = stack[:len(stack)-1]
		default:
			stack = append(stack, c)
		}
	}
	return "/" + strings.Join(stack, "/"), agrl.StepResult{}, true
}

// allowed reports whether every byte of s is in [A-Za-z0-9._-].
func allowed(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func join(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}
