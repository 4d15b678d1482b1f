package filesearch

import (
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"agrl.dev/agrl"
)

var fuzzSession = sync.OnceValue(func() agrl.Session {
	task, err := New().Generate(rand.New(rand.NewPCG(4, 4)), agrl.Extreme)
	if err != nil {
		panic(err)
	}
	s, _, err := New().Reset(task)
	if err != nil {
		panic(err)
	}
	return s
})

// pathCorpus seeds the path fuzzers: good paths, traversal, quoting, garbage.
func pathCorpus(f *testing.F) {
	s := fuzzSession().(*session)
	for _, p := range []string{"", "/", ".", "..", s.w.factPath, strings.TrimPrefix(s.w.factPath, "/"),
		`"` + s.w.factPath + `"`, "'/srv'", "/srv/", "srv//x", "./a/../b", "../../etc/passwd", "/..", "a/../..",
		"/a/b/c/d/e/f/g/h/i/j/k", strings.Repeat("a/", 70), "\x00", "/srv\x00", "caf\u00e9", `"a","b"`, "a b",
		"((x))", `"`, "%2e%2e", "\\..\\..", strings.Repeat(".", 200), "-", "_", "/missing.txt"} {
		f.Add(p)
	}
}

// checkResult checks what every tool result must satisfy, whatever the argument.
func checkResult(t *testing.T, tool, arg string, r agrl.StepResult) {
	t.Helper()
	if r.Done || r.Correct {
		t.Fatalf("%s(%q) ended the episode: %+v", tool, arg, r)
	}
	if r.Observation == "" {
		t.Fatalf("%s(%q): empty observation", tool, arg)
	}
	if (r.ToolError != "") != strings.HasPrefix(r.Observation, "error: ") {
		t.Fatalf("%s(%q): tool error %q with observation %q", tool, arg, r.ToolError, r.Observation)
	}
	if len(r.Observation) > 400 {
		t.Fatalf("%s(%q): observation of %d bytes", tool, arg, len(r.Observation))
	}
	for i := 0; i < len(r.Observation); i++ {
		if c := r.Observation[i]; (c < 0x20 && c != '\n') || c > 0x7e {
			t.Fatalf("%s(%q): non-printable byte %#x in %q", tool, arg, c, r.Observation)
		}
	}
}

// FuzzResolve checks the path parser: an accepted path is clean, absolute and inside the
// tree; a path whose ".." climbs above the root is "no such file".
func FuzzResolve(f *testing.F) {
	pathCorpus(f)
	f.Fuzz(func(t *testing.T, arg string) {
		path, res, ok := resolve(arg)
		if !ok {
			if res.ToolError == "" || path != "" {
				t.Fatalf("resolve(%q) failed without a tool error: %+v", arg, res)
			}
			return
		}
		if !strings.HasPrefix(path, "/") || len(path) > maxPath+1 {
			t.Fatalf("resolve(%q) = %q", arg, path)
		}
		for _, c := range strings.Split(path[1:], "/") {
			if (c == "" && path != "/") || c == "." || c == ".." {
				t.Fatalf("resolve(%q) = %q: unclean component %q", arg, path, c)
			}
		}
		depth := 0
		for _, c := range strings.Split(agrl.UnquoteArg(arg), "/") {
			switch c {
			case "", ".":
			case "..":
				depth--
			default:
				depth++
			}
			if depth < 0 {
				t.Fatalf("resolve(%q) = %q accepted a path above the root", arg, path)
			}
		}
	})
}

// FuzzLs fuzzes ls's argument.
func FuzzLs(f *testing.F) {
	pathCorpus(f)
	f.Fuzz(func(t *testing.T, arg string) {
		r := call(fuzzSession(), "ls", arg)
		checkResult(t, "ls", arg, r)
	})
}

// FuzzCat fuzzes cat's argument: a successful cat returns a file of the tree.
func FuzzCat(f *testing.F) {
	pathCorpus(f)
	f.Fuzz(func(t *testing.T, arg string) {
		r := call(fuzzSession(), "cat", arg)
		checkResult(t, "cat", arg, r)
		if r.ToolError == "" {
			path, _, ok := resolve(arg)
			n := fuzzSession().(*session).w.nodes[path]
			if !ok || n == nil || n.dir {
				t.Fatalf("cat(%q) succeeded on %q", arg, path)
			}
		}
	})
}

// FuzzFind fuzzes find's argument: every path listed contains the name in its base name.
func FuzzFind(f *testing.F) {
	s := fuzzSession().(*session)
	for _, n := range []string{s.w.service, "app", ".", "-", "conf", "x", "", `"a"`, "'", "a/b", "a b", "\x00",
		strings.Repeat("z", 65), "caf\u00e9", "..", "*", "[a-z]", ".*"} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, arg string) {
		r := call(fuzzSession(), "find", arg)
		checkResult(t, "find", arg, r)
		if r.ToolError != "" || r.Observation == "no match" {
			return
		}
		name := agrl.UnquoteArg(arg)
		for _, p := range strings.Fields(r.Observation) {
			if strings.HasPrefix(p, "(+") || strings.HasSuffix(p, "more)") {
				continue
			}
			if !strings.Contains(base(strings.TrimSuffix(p, "/")), name) {
				t.Fatalf("find(%q) listed %q", arg, p)
			}
		}
	})
}
