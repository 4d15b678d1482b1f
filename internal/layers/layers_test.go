// Package layers holds a repository-wide test of the architecture: the standard-library core
// (agrl.dev/agrl), the environments (agrl.dev/envs/...) and the notebook display package
// (agrl.dev/agrl/nb) never depend on GoMLX or on cgo, nor do the pretrained-model packages
// (agrl/hf, agrl/bpe, agrl/chat, agrl/llm); only the learner (agrl.dev/agrl/learn) and
// what builds on it (the CLI) do. See docs/architecture.md.
package layers

import (
	"os/exec"
	"strings"
	"testing"
)

// stdlibOnly are the packages (patterns) that must build without GoMLX and without cgo.
// The pretrained-model groundwork (checkpoint formats, tokenizer, chat formats, the reference
// forward pass) is standard library only too; its GoMLX graphs live under agrl/learn.
var stdlibOnly = []string{"agrl.dev/agrl", "agrl.dev/agrl/nb", "agrl.dev/envs/...",
	"agrl.dev/agrl/hf", "agrl.dev/agrl/bpe", "agrl.dev/agrl/chat", "agrl.dev/agrl/llm/...", "agrl.dev/agrl/repl"}

// forbidden are the module path prefixes the standard-library layer must not import.
var forbidden = []string{"github.com/gomlx/"}

// deps lists pattern's packages and their transitive dependencies (tests excluded), one line
// each: import path, whether it is in the standard library, and its cgo files.
func deps(t *testing.T, pattern string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}} {{len .CgoFiles}}", pattern).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pattern, err, out)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func TestCoreEnvsAndNotebookDisplayNeedNoGoMLXNorCgo(t *testing.T) {
	for _, pattern := range stdlibOnly {
		var bad []string
		for _, line := range deps(t, pattern) {
			f := strings.Fields(line)
			if len(f) != 3 {
				t.Fatalf("unexpected go list line %q", line)
			}
			path, standard, cgo := f[0], f[1] == "true", f[2] != "0"
			for _, p := range forbidden {
				if strings.HasPrefix(path, p) {
					bad = append(bad, path+" (GoMLX)")
				}
			}
			// The standard library's net and os/user have optional cgo files that
			// CGO_ENABLED=0 builds without; any other package with cgo files is a C dependency.
			if cgo && !standard {
				bad = append(bad, path+" (cgo)")
			}
		}
		if len(bad) > 0 {
			t.Errorf("%s depends on %s", pattern, strings.Join(bad, ", "))
		}
	}
}

// The check itself must be able to fail: the learner does depend on GoMLX.
func TestTheLearnerIsWhereGoMLXLives(t *testing.T) {
	for _, line := range deps(t, "agrl.dev/agrl/learn") {
		if strings.HasPrefix(line, "github.com/gomlx/gomlx/") {
			return
		}
	}
	t.Fatal("agrl.dev/agrl/learn does not depend on GoMLX: the layer test's list is out of date")
}
