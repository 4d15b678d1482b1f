package filesearch

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"os"
	"path"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"agrl.dev/agrl"
)

// Compile-time check that Env implements agrl.Env.
var _ agrl.Env = Env{}

func genTask(t *testing.T, seed uint64, d agrl.Difficulty) agrl.Task {
	t.Helper()
	task, err := New().Generate(rand.New(rand.NewPCG(seed, 1)), d)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func play(t *testing.T, env agrl.Env, task agrl.Task, agent agrl.Agent) *agrl.Episode {
	t.Helper()
	ep, err := agrl.Play(env, task, agent, agrl.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

func TestBuilder(t *testing.T) {
	if got := New().MaxTurns(); got != DefaultMaxTurns {
		t.Fatalf("New().MaxTurns() = %d", got)
	}
	if got := (Env{}).MaxTurns(); got != DefaultMaxTurns {
		t.Fatalf("zero Env MaxTurns() = %d", got)
	}
	base := New()
	short := base.Turns(3)
	if short.MaxTurns() != 3 || base.MaxTurns() != DefaultMaxTurns {
		t.Fatalf("Turns changed the receiver or did not apply: %d %d", short.MaxTurns(), base.MaxTurns())
	}
	if New().Name() != "filesearch" || len(New().Tools()) != 3 {
		t.Fatalf("name %q, tools %v", New().Name(), New().Tools())
	}
}

func TestGenerateDeterministic(t *testing.T) {
	for _, d := range agrl.Difficulties {
		a, b := genTask(t, 42, d), genTask(t, 42, d)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: same seed, different tasks:\n%v\n%v", d, a, b)
		}
		if c := genTask(t, 43, d); c.Prompt == a.Prompt && c.Meta["seed"] == a.Meta["seed"] {
			t.Fatalf("%s: different seeds gave the same task", d)
		}
	}
	mixA, err := agrl.NewMix(5).Tasks(New(), agrl.Train, 50)
	if err != nil {
		t.Fatal(err)
	}
	mixB, _ := agrl.NewMix(5).Tasks(New(), agrl.Train, 50)
	if !reflect.DeepEqual(mixA, mixB) {
		t.Fatal("Mix.Tasks not deterministic")
	}
}

func TestGenerateInvalidDifficulty(t *testing.T) {
	for _, d := range []agrl.Difficulty{0, -1, 5, 99} {
		if _, err := New().Generate(rand.New(rand.NewPCG(1, 1)), d); err == nil {
			t.Errorf("difficulty %d: no error", d)
		}
		if _, _, err := Knobs(d); err == nil {
			t.Errorf("Knobs(%d): no error", d)
		}
	}
}

// TestKnobsGrowWithDifficulty checks that every difficulty yields valid tasks and that the
// trees really get deeper, wider and fuller, and the file names less helpful.
func TestKnobsGrowWithDifficulty(t *testing.T) {
	type stats struct{ depth, width, services, near, files, noise, hint, nodes, find float64 }
	var prev stats
	rng := rand.New(rand.NewPCG(9, 9))
	for i, d := range agrl.Difficulties {
		var s stats
		const n = 100
		for range n {
			task, err := New().Generate(rng, d)
			if err != nil {
				t.Fatal(err)
			}
			if err := task.Validate(); err != nil || task.Difficulty != d || task.Env != Name {
				t.Fatalf("%s: invalid task %v: %v", d, task, err)
			}
			w, err := worldOf(task)
			if err != nil {
				t.Fatalf("%s: %v", d, err)
			}
			ranges, _, _ := Knobs(d)
			for k, r := range ranges {
				v, _ := strconv.Atoi(task.Meta[k])
				if v < r[0] || v > r[1] {
					t.Fatalf("%s: knob %s = %d outside %v", d, k, v, r)
				}
			}
			get := func(k string) float64 { v, _ := strconv.Atoi(task.Meta[k]); return float64(v) }
			s.depth += get("depth") / n
			s.width += get("width") / n
			s.services += get("services") / n
			s.near += get("near") / n
			s.files += get("files") / n
			s.noise += get("noise") / n
			if task.Meta["hint"] == "true" {
				s.hint += 1.0 / n
			}
			s.nodes += float64(len(w.nodes)) / n
			s.find += float64(len(w.find(w.service))) / n
			if strings.Count(w.factPath, "/") != int(get("depth"))+1 {
				t.Fatalf("%s: fact %s not at depth %s", d, w.factPath, task.Meta["depth"])
			}
			if len(task.Prompt) > 80 {
				t.Fatalf("prompt too long: %q", task.Prompt)
			}
		}
		t.Logf("%-7s depth %.2f width %.1f services %.0f near %.2f files %.0f noise %.0f hint %.2f nodes %.1f find-matches %.2f",
			d, s.depth, s.width, s.services, s.near, s.files, s.noise, s.hint, s.nodes, s.find)
		if i > 0 {
			if !(s.depth > prev.depth && s.width > prev.width && s.services > prev.services && s.near > prev.near &&
				s.files > prev.files && s.noise > prev.noise && s.nodes > prev.nodes && s.find > prev.find) {
				t.Errorf("%s does not grow over the previous difficulty: %+v vs %+v", d, s, prev)
			}
			if s.hint > prev.hint || (d == agrl.Hard && s.hint != 0) {
				t.Errorf("%s: hint rate %.2f (previous %.2f)", d, s.hint, prev.hint)
			}
		}
		prev = s
	}
}

func TestResetRejectsBadTasks(t *testing.T) {
	good := genTask(t, 3, agrl.Medium)
	if _, prompt, err := New().Reset(good); err != nil || prompt != good.Prompt {
		t.Fatalf("good task: %q, %v", prompt, err)
	}
	mutate := func(f func(*agrl.Task)) agrl.Task {
		c := good
		c.Meta = map[string]string{}
		for k, v := range good.Meta {
			c.Meta[k] = v
		}
		f(&c)
		return c
	}
	cases := map[string]agrl.Task{
		"wrong env":      mutate(func(c *agrl.Task) { c.Env = "calc" }),
		"no meta":        mutate(func(c *agrl.Task) { c.Meta = nil }),
		"no seed":        mutate(func(c *agrl.Task) { delete(c.Meta, "seed") }),
		"garbled seed":   mutate(func(c *agrl.Task) { c.Meta["seed"] = "12x" }),
		"other seed":     mutate(func(c *agrl.Task) { c.Meta["seed"] = "7" }),
		"huge depth":     mutate(func(c *agrl.Task) { c.Meta["depth"] = "1000000" }),
		"negative width": mutate(func(c *agrl.Task) { c.Meta["width"] = "-3" }),
		"bad hint":       mutate(func(c *agrl.Task) { c.Meta["hint"] = "maybe" }),
		"other path":     mutate(func(c *agrl.Task) { c.Meta["path"] = "/etc/passwd" }),
		"other answer":   mutate(func(c *agrl.Task) { c.Answer = "1" }),
		"other prompt":   mutate(func(c *agrl.Task) { c.Prompt = "What port does service zzzz use?" }),
		"no difficulty":  mutate(func(c *agrl.Task) { c.Difficulty = 0 }),
	}
	for name, task := range cases {
		if _, _, err := New().Reset(task); err == nil {
			t.Errorf("%s: Reset accepted %v", name, task)
		}
	}
}

func TestJSONRoundTripReplays(t *testing.T) {
	task := genTask(t, 11, agrl.Hard)
	b, err := json.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	var back agrl.Task
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	a, c := play(t, New(), task, Expert()), play(t, New(), back, Expert())
	if a.Transcript() != c.Transcript() || !c.Correct {
		t.Fatalf("replay differs:\n%s\n---\n%s", a.Transcript(), c.Transcript())
	}
}

func TestExpertSolvesEverySplit(t *testing.T) {
	env := New()
	bytes := map[agrl.Difficulty][]int{}
	for _, split := range agrl.Splits {
		tasks, err := agrl.NewMix(2024).Tasks(env, split, 200)
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			ep := play(t, env, task, Expert())
			r, err := Rubric().Score(ep)
			if err != nil {
				t.Fatal(err)
			}
			if !ep.Correct || ep.Termination != agrl.Answered || ep.ToolErrors() != 0 || ReadFact(ep) != 1 || r < 0.6 {
				t.Fatalf("%s: expert failed (reward %.2f):\n%s", split, r, ep.Transcript())
			}
			bytes[task.Difficulty] = append(bytes[task.Difficulty], len(ep.Transcript()))
		}
	}
	for _, d := range agrl.Difficulties {
		sum, most := 0, 0
		for _, n := range bytes[d] {
			sum += n
			most = max(most, n)
		}
		t.Logf("%-7s expert episode bytes: mean %d, max %d (%d episodes)", d, sum/len(bytes[d]), most, len(bytes[d]))
	}
}

func TestExpertPerDifficulty(t *testing.T) {
	env := New()
	rng := rand.New(rand.NewPCG(77, 0))
	for _, d := range agrl.Difficulties {
		sum, turns := 0.0, 0
		const n = 200
		for range n {
			task, err := env.Generate(rng, d)
			if err != nil {
				t.Fatal(err)
			}
			ep := play(t, env, task, Expert())
			if !ep.Correct {
				t.Fatalf("%s: expert failed:\n%s", d, ep.Transcript())
			}
			r, _ := Rubric().Score(ep)
			sum += r
			turns = max(turns, len(ep.Turns))
		}
		t.Logf("%-7s expert mean reward %.3f, most turns %d", d, sum/n, turns)
		if turns > DefaultMaxTurns {
			t.Fatalf("%s: expert needed %d turns", d, turns)
		}
	}
}

func TestRandomBaseline(t *testing.T) {
	env := New()
	rng := rand.New(rand.NewPCG(5, 5))
	for _, d := range agrl.Difficulties {
		var expert, random float64
		wins := 0
		const n = 200
		for i := range n {
			task, err := env.Generate(rng, d)
			if err != nil {
				t.Fatal(err)
			}
			e := play(t, env, task, Expert())
			r := play(t, env, task, agrl.RandomAgent(uint64(i), env))
			re, _ := Rubric().Score(e)
			rr, _ := Rubric().Score(r)
			expert += re / n
			random += rr / n
			if r.Correct {
				wins++
			}
		}
		t.Logf("%-7s mean reward (Rubric): expert %.3f, random %.3f (random solved %d/%d)", d, expert, random, wins, n)
		if expert-random < 1.2 || expert < 0.6 {
			t.Errorf("%s: expert %.3f vs random %.3f: margin too small", d, expert, random)
		}
	}
}

func newSession(t *testing.T, task agrl.Task) agrl.Session {
	t.Helper()
	s, _, err := New().Reset(task)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func call(s agrl.Session, tool, args string) agrl.StepResult {
	return s.Step(agrl.Action{Kind: agrl.ToolCall, Tool: tool, Args: args})
}

func TestTools(t *testing.T) {
	task := genTask(t, 8, agrl.Hard)
	s := newSession(t, task)
	fact := task.Meta["path"]
	dir, file := path.Split(fact)
	dir = strings.TrimSuffix(dir, "/")
	rel := strings.TrimPrefix(fact, "/")

	ok := func(r agrl.StepResult, want string) {
		t.Helper()
		if r.ToolError != "" || !strings.Contains(r.Observation, want) {
			t.Errorf("got %+v, want an observation containing %q", r, want)
		}
	}
	bad := func(r agrl.StepResult, want string) {
		t.Helper()
		if r.ToolError == "" || !strings.HasPrefix(r.Observation, "error: ") || !strings.Contains(r.Observation, want) || r.Done {
			t.Errorf("got %+v, want a tool error containing %q", r, want)
		}
	}
	root := call(s, "ls", "")
	ok(root, "/")
	if call(s, "ls", "/").Observation != root.Observation || call(s, "ls", `"/"`).Observation != root.Observation {
		t.Error("ls(), ls(/) and ls(\"/\") differ")
	}
	ok(call(s, "ls", dir), file)
	ok(call(s, "ls", dir+"/"), file)
	ok(call(s, "ls", strings.TrimPrefix(dir, "/")), file)
	ok(call(s, "ls", dir+"/../"+path.Base(dir)+"/."), file)
	for _, p := range []string{fact, rel, "'" + fact + "'", `"` + rel + `"`, "/./" + rel, "//" + rel} {
		r := call(s, "cat", p)
		ok(r, "="+task.Answer)
		if r.Info[InfoFact] != "true" {
			t.Errorf("cat(%s) did not mark the fact", p)
		}
	}
	w, _ := worldOf(task)
	found := call(s, "find", w.service)
	ok(found, dir+"/")
	ok(call(s, "find", `"`+w.service+`"`), dir+"/")
	ok(call(s, "find", file), fact)
	if r := call(s, "find", "nothing-like-this"); r.ToolError != "" || r.Observation != "no match" {
		t.Errorf("find with no match: %+v", r)
	}
	if r := call(s, "find", "."); !strings.Contains(r.Observation, "more)") {
		t.Errorf("find(.) should be capped: %q", r.Observation)
	}

	bad(call(s, "cat", "../../etc/passwd"), "no such file")
	bad(call(s, "cat", "/../etc/passwd"), "no such file")
	bad(call(s, "cat", "/etc/passwd"), "no such file")
	bad(call(s, "cat", rel+"/../../../../../../.."), "no such file")
	bad(call(s, "ls", ".."), "no such file")
	bad(call(s, "cat", "/missing.txt"), "no such file")
	bad(call(s, "cat", ""), "needs a file path")
	bad(call(s, "cat", dir), "is a directory")
	bad(call(s, "ls", fact), "is a file")
	bad(call(s, "ls", "/nope"), "no such directory")
	bad(call(s, "cat", fact+"\x00"), "bad character")
	bad(call(s, "cat", "/srv/caf\u00e9"), "bad character")
	bad(call(s, "cat", "/"+strings.Repeat("a", 200)), "too long")
	bad(call(s, "find", ""), "needs a name")
	bad(call(s, "find", "srv/x"), "not a path")
	bad(call(s, "find", "a b"), "bad character")
	bad(call(s, "find", strings.Repeat("a", 65)), "too long")
	bad(call(s, "grep", "port"), "unknown tool")
	bad(s.Step(agrl.Action{Kind: agrl.Invalid}), "expected")

	for ans, want := range map[string]bool{task.Answer: true, " " + strings.ToUpper(task.Answer) + ". ": true,
		"": false, task.Answer + "0": false, "x" + task.Answer: false} {
		r := s.Step(agrl.Action{Kind: agrl.AnswerAction, Answer: ans})
		if !r.Done || r.Correct != want {
			t.Errorf("answer %q: %+v, want correct=%v", ans, r, want)
		}
	}
}

// TestHostileInputs sends every tool arguments meant to break it: each call must end in a
// tool error (or a harmless listing), never panic, and return fast.
func TestHostileInputs(t *testing.T) {
	s := newSession(t, genTask(t, 21, agrl.Extreme))
	huge := strings.Repeat("a/", 1<<20)
	garbage := string([]byte{0, 1, 2, 0xff, 0xfe, '/', 0x80, '\n'})
	inputs := []string{
		huge, garbage, strings.Repeat("(", 10000), `"unbalanced`, `'`, `"`, `""`, "((a)", "a)", "a,b", `"a","b"`,
		strings.Repeat("../", 40), "../../etc/passwd", "/../../../../root/.ssh/id_rsa", "C:\\Windows\\system32",
		"~/.bashrc", "$HOME", "`rm -rf /`", "/proc/self/environ", strings.Repeat("[", 5000) + strings.Repeat("]", 5000),
		"99999999999999999999999999999999999999", "-1e308", "\x00", "/srv\x00/etc/passwd", strings.Repeat("/", 129),
		"a/" + strings.Repeat("./", 70), "\u202e/srv", "%2e%2e/%2e%2e/etc/passwd",
	}
	for _, tool := range []string{"ls", "cat", "find", "nope", strings.Repeat("x", 1000)} {
		for _, in := range inputs {
			start := time.Now()
			var r agrl.StepResult
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("%s(%q) panicked: %v", tool, clip(in), p)
					}
				}()
				r = call(s, tool, in)
			}()
			if d := time.Since(start); d > 50*time.Millisecond {
				t.Errorf("%s(%q) took %v", tool, clip(in), d)
			}
			if r.Done || len(r.Observation) > 200 {
				t.Errorf("%s(%q): %+v", tool, clip(in), r)
			}
			// The only hostile inputs that may succeed are harmless: ls("") lists the root and
			// find of a number finds nothing.
			if r.ToolError == "" && !(tool == "find" && r.Observation == "no match") && !(tool == "ls" && in == `""`) {
				t.Errorf("%s(%q) did not fail: %+v", tool, clip(in), r)
			}
			for _, leak := range []string{"root:", "PATH=", "ssh-"} {
				if strings.Contains(r.Observation, leak) {
					t.Fatalf("%s(%q) leaked %q", tool, clip(in), leak)
				}
			}
		}
	}
	// The tool errors reach the policy as penalised observations through Play as well.
	ep := play(t, New(), genTask(t, 21, agrl.Extreme), agrl.AgentFunc(func(ep *agrl.Episode) (string, error) {
		if len(ep.Turns) < 3 {
			return agrl.ToolAction("cat", []string{"../../etc/passwd", "/srv/\x01\x7f", "/x/" + strings.Repeat("b", 300)}[len(ep.Turns)]), nil
		}
		return agrl.AnswerText(""), nil
	}))
	if ep.ToolErrors() != 3 {
		t.Fatalf("want 3 tool errors:\n%s", ep.Transcript())
	}
}

// TestNoFileSystemImports parses the package's non-test files and checks that none imports a
// package that could reach the real file system.
func TestNoFileSystemImports(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	banned := map[string]bool{"os": true, "io/fs": true, "path/filepath": true, "syscall": true,
		"os/exec": true, "io/ioutil": true, "unsafe": true, "net": true, "plugin": true}
	files := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		files++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); banned[p] || strings.HasPrefix(p, "golang.org/x/sys") {
				t.Errorf("%s imports %s", name, p)
			}
		}
	}
	if files < 4 {
		t.Fatalf("parsed only %d files", files)
	}
}
