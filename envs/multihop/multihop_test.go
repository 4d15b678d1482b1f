package multihop

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"agrl.dev/agrl"
)

func gen(t testing.TB, env Env, seed uint64, d agrl.Difficulty, n int) []agrl.Task {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([]agrl.Task, n)
	for i := range out {
		task, err := env.Generate(rng, d)
		if err != nil {
			t.Fatalf("Generate(%s): %v", d, err)
		}
		out[i] = task
	}
	return out
}

func mustResolve(t testing.TB, task agrl.Task) (spec, resolved) {
	t.Helper()
	s, err := parseSpec(task.Meta)
	if err != nil {
		t.Fatalf("%s: %v", task, err)
	}
	res, err := resolve(s)
	if err != nil {
		t.Fatalf("%s: %v", task, err)
	}
	return s, res
}

func TestGenerateDeterministic(t *testing.T) {
	for _, d := range agrl.Difficulties {
		a, b := gen(t, New(), 3, d, 20), gen(t, New(), 3, d, 20)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: same seed gave different tasks", d)
		}
		c := gen(t, New(), 4, d, 20)
		if reflect.DeepEqual(a, c) {
			t.Fatalf("%s: seeds 3 and 4 gave the same tasks", d)
		}
	}
	m1, err := agrl.NewMix(9).Tasks(New(), agrl.Dev, 30)
	if err != nil {
		t.Fatal(err)
	}
	m2, _ := agrl.NewMix(9).Tasks(New(), agrl.Dev, 30)
	if !reflect.DeepEqual(m1, m2) {
		t.Fatal("mix with the same seed gave different tasks")
	}
	// A world is a pure function of its seed and sizes: pin one so a change of generator shows.
	w, err := newWorld(42, sizes{5, 2, 3, 2})
	if err != nil {
		t.Fatal(err)
	}
	w2, _ := newWorld(42, sizes{5, 2, 3, 2})
	if !reflect.DeepEqual(w.text, w2.text) || len(w.text) != 22 || len(w.names) != 12 {
		t.Fatalf("world of seed 42: %d facts, %d names", len(w.text), len(w.names))
	}
}

func TestGenerateDifficulties(t *testing.T) {
	wantFacts := map[agrl.Difficulty]int{agrl.Easy: 22, agrl.Medium: 27, agrl.Hard: 31, agrl.Extreme: 36}
	wantEntities := map[agrl.Difficulty]int{agrl.Easy: 12, agrl.Medium: 14, agrl.Hard: 16, agrl.Extreme: 18}
	prevPrompt := 0.0
	for _, d := range agrl.Difficulties {
		tasks := gen(t, New(), 11, d, 300)
		bytes, longest := 0, 0
		for _, task := range tasks {
			if err := task.Validate(); err != nil || task.Env != Name || task.Difficulty != d || task.ID != agrl.TaskID(Name, task.Prompt) {
				t.Fatalf("%s: bad task %s (%v)", d, task, err)
			}
			s, res := mustResolve(t, task)
			if len(s.chain) != Hops(d) || Hops(d) != int(d) {
				t.Fatalf("%s: %d hops, want %d", d, len(s.chain), int(d))
			}
			if len(res.w.facts) != wantFacts[d] || len(res.w.names) != wantEntities[d] {
				t.Fatalf("%s: %d facts, %d entities", d, len(res.w.facts), len(res.w.names))
			}
			for _, n := range res.w.names {
				if len(n) < 4 || len(n) > 6 || n[0] < 'A' || n[0] > 'Z' || strings.ToLower(n[1:]) != n[1:] {
					t.Fatalf("bad name %q", n)
				}
			}
			if res.answer != task.Answer || task.Answer == "" {
				t.Fatalf("answer %q vs %q", res.answer, task.Answer)
			}
			bytes += len(task.Prompt)
			longest = max(longest, len(task.Prompt))
		}
		mean := float64(bytes) / float64(len(tasks))
		t.Logf("%s: %d hops, %d entities, %d facts, prompt mean %.1f max %d bytes", d, Hops(d), wantEntities[d], wantFacts[d], mean, longest)
		if mean <= prevPrompt {
			t.Errorf("%s: prompts do not grow with difficulty (%.1f after %.1f)", d, mean, prevPrompt)
		}
		if d != agrl.Extreme && longest > 80 || longest > 90 {
			t.Errorf("%s: prompt of %d bytes", d, longest)
		}
		prevPrompt = mean
	}
	for _, d := range []agrl.Difficulty{0, -1, 5, 99} {
		if _, err := New().Generate(rand.New(rand.NewPCG(1, 2)), d); err == nil {
			t.Errorf("difficulty %d: no error", int(d))
		}
	}
	if _, err := New().Generate(nil, agrl.Easy); err == nil {
		t.Error("nil rng: no error")
	}
}

// TestQuestionsAnswerable checks that every hop of every question has exactly one fact, and
// that the relation's query ranks that fact strictly first among all facts of the world.
func TestQuestionsAnswerable(t *testing.T) {
	for _, d := range agrl.Difficulties {
		for _, task := range gen(t, New(), 5, d, 300) {
			s, res := mustResolve(t, task)
			w := res.w
			cur := res.path[0]
			seen := map[int]bool{cur: true}
			for hop, r := range s.chain {
				var match []int
				for i, f := range w.facts {
					if f.subj == cur && f.rel == r {
						match = append(match, i)
					}
				}
				if len(match) != 1 {
					t.Fatalf("%s hop %d: %d facts of %s about %s", task.Prompt, hop, len(match), relations[r].key, w.names[cur])
				}
				q, err := parseQuery(strings.ReplaceAll(relations[r].query, "%s", w.names[cur]))
				if err != nil {
					t.Fatal(err)
				}
				best := q.score(w.toks[match[0]])
				for i, toks := range w.toks {
					if i != match[0] && q.score(toks) >= best {
						t.Fatalf("%s hop %d: %q ties or beats %q", task.Prompt, hop, w.text[i], w.text[match[0]])
					}
				}
				cur = w.facts[match[0]].obj
				if seen[cur] {
					t.Fatalf("%s: chain revisits %s", task.Prompt, w.names[cur])
				}
				seen[cur] = true
			}
			if w.names[cur] != task.Answer {
				t.Fatalf("%s: chain ends at %s, answer %s", task.Prompt, w.names[cur], task.Answer)
			}
		}
	}
}

func TestScorerRanking(t *testing.T) {
	if got := tokenize("The mentor of Dax's  friend, IS 42!", nil); !reflect.DeepEqual(got, []string{"mentor", "dax", "friend", "42"}) {
		t.Fatalf("tokenize: %q", got)
	}
	facts := []string{
		"Dax works for Zorn.",        // 0
		"The mentor of Quon is Dax.", // 1
		"Tam was born in Vell.",      // 2
		"The mentor of Dax is Quon.", // 3
		"Dax was born in Kip.",       // 4
		"Zorn was founded by Dax.",   // 5
		"Vell is located in Lor.",    // 6
	}
	var toks [][]string
	for _, f := range facts {
		toks = append(toks, tokenize(f, nil))
	}
	cases := []struct {
		query  string
		scores []int
		top3   []int
	}{
		{"mentor of Dax", []int{1, 2, 0, 3, 1, 1, 0}, []int{3, 1, 0}},
		{"mentor Quon", []int{0, 3, 0, 2, 0, 0, 0}, []int{1, 3}},
		{"Dax born", []int{1, 1, 1, 1, 3, 1, 0}, []int{4, 0, 1}},
		{"born Dax", []int{1, 1, 1, 1, 2, 1, 0}, []int{4, 0, 1}},
		{"Dax", []int{1, 1, 0, 1, 1, 1, 0}, []int{0, 1, 3}},
		{"birthplace of Dax", []int{1, 1, 0, 1, 1, 1, 0}, []int{0, 1, 3}},
		{"Vell Vell located located", []int{0, 0, 1, 0, 0, 0, 3}, []int{6, 2}},
		{"zorn FOUNDED", []int{1, 0, 0, 0, 0, 3, 0}, []int{5, 0}},
		{"who is the", nil, nil},
		{"xyzzy 99", []int{0, 0, 0, 0, 0, 0, 0}, []int{}},
	}
	for _, c := range cases {
		q, err := parseQuery(c.query)
		if c.scores == nil {
			if err == nil {
				t.Errorf("%q: stop words only, no error", c.query)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", c.query, err)
		}
		for i, want := range c.scores {
			if got := q.score(toks[i]); got != want {
				t.Errorf("%q on %q: score %d, want %d", c.query, facts[i], got, want)
			}
		}
		if got := q.rank(toks, 3); !reflect.DeepEqual(got, c.top3) {
			t.Errorf("%q: top 3 %v, want %v", c.query, got, c.top3)
		}
	}
}

// firstTask returns the first generated task of d whose chain starts with relation key.
func firstTask(t *testing.T, d agrl.Difficulty, key string) agrl.Task {
	t.Helper()
	for _, task := range gen(t, New(), 1, d, 200) {
		if strings.HasPrefix(task.Meta[metaChain], key) {
			return task
		}
	}
	t.Fatalf("no %s task starting with %s", d, key)
	return agrl.Task{}
}

func TestSearchTool(t *testing.T) {
	task := firstTask(t, agrl.Medium, "born")
	_, res := mustResolve(t, task)
	start := task.Meta[metaStart]
	step := func(env Env, args string) agrl.StepResult {
		sess, prompt, err := env.Reset(task)
		if err != nil || prompt != task.Prompt {
			t.Fatalf("Reset: %v", err)
		}
		return sess.Step(agrl.Action{Kind: agrl.ToolCall, Tool: "search", Args: args})
	}
	r := step(New(), start+" born")
	lines := strings.Split(r.Observation, "\n")
	if r.ToolError != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], start+" was born in ") || r.Info["relevant"] != "true" {
		t.Fatalf("search(%s born): %+v", start, r)
	}
	if r2 := step(New(), `"`+start+` born"`); r2.Observation != r.Observation {
		t.Fatalf("quoted query differs: %q", r2.Observation)
	}
	for k, want := range map[int]int{-3: 1, 0: 1, 1: 1, 3: 3, 100: MaxTopK} {
		if got := strings.Count(step(New().TopK(k), start+" born works").Observation, "\n") + 1; got != want {
			t.Errorf("TopK(%d): %d lines, want %d", k, got, want)
		}
	}
	// A search whose results name no chain entity is irrelevant but not an error.
	var other string
	for e, n := range res.w.names {
		on := false
		for _, p := range res.path {
			on = on || p == e
		}
		if !on && res.w.kinds[e] == country {
			other = n
		}
	}
	if other != "" {
		r := step(New().TopK(1), other)
		if r.ToolError != "" || r.Info["relevant"] != "false" || r.Observation == "" {
			t.Errorf("irrelevant search(%s): %+v", other, r)
		}
	}
	for _, q := range []string{"", `""`, "  ", "the of is", "qwxz", "?!"} {
		r := step(New(), q)
		if r.ToolError == "" || !strings.HasPrefix(r.Observation, "error: ") || r.Info["relevant"] != "false" {
			t.Errorf("search(%q): %+v", q, r)
		}
	}
	sess, _, _ := New().Reset(task)
	r = sess.Step(agrl.Action{Kind: agrl.ToolCall, Tool: "lookup", Args: start})
	if r.ToolError == "" || r.Done {
		t.Errorf("unknown tool: %+v", r)
	}
}

func TestAnswers(t *testing.T) {
	task := firstTask(t, agrl.Easy, "born")
	cases := map[string]bool{
		task.Answer: true,
		"  " + strings.ToUpper(task.Answer) + ". ": true,
		"":                   false,
		task.Answer[:3]:      false,
		task.Answer + "x":    false,
		task.Meta[metaStart]: false,
	}
	for ans, want := range cases {
		sess, _, _ := New().Reset(task)
		r := sess.Step(agrl.Action{Kind: agrl.AnswerAction, Answer: ans})
		if !r.Done || r.Correct != want || r.ToolError != "" {
			t.Errorf("answer %q: %+v, want correct=%v", ans, r, want)
		}
	}
}

func ep(task agrl.Task, term agrl.Termination, correct bool, answer string, turns ...agrl.Turn) *agrl.Episode {
	return &agrl.Episode{Task: task, Turns: turns, Termination: term, Correct: correct, Answer: answer}
}

func search(args, obs, toolErr, relevant string) agrl.Turn {
	text := agrl.ToolAction("search", args)
	return agrl.Turn{Text: text, Action: agrl.ParseAction(text), Observation: obs, ToolError: toolErr, Info: map[string]string{"relevant": relevant}}
}

func answer(a string) agrl.Turn {
	return agrl.Turn{Text: agrl.AnswerText(a), Action: agrl.ParseAction(agrl.AnswerText(a))}
}

func TestRubricHandBuilt(t *testing.T) {
	task := agrl.Task{ID: "multihop-x", Env: Name, Prompt: "Who is the mentor of Dax?", Answer: "Quon", Difficulty: agrl.Easy}
	good := search("mentor of Dax", "The mentor of Dax is Quon.", "", "true")
	empty := search("", "error: empty query", "empty query", "false")
	nomatch := search("qq", "error: no fact matches", "no match", "false")
	irrel := search("Lor", "Vell is located in Lor.", "", "false")
	unknown := agrl.Turn{Text: agrl.ToolAction("find", "Dax"), Action: agrl.ParseAction(agrl.ToolAction("find", "Dax")), ToolError: "unknown tool"}
	invalid := agrl.Turn{Text: "hello", Action: agrl.ParseAction("hello")}
	cases := []struct {
		name    string
		ep      *agrl.Episode
		empties float64
		want    float64
	}{
		{"direct correct", ep(task, agrl.Answered, true, "Quon", good, answer("Quon")), 0, 1},
		{"correct after an empty search", ep(task, agrl.Answered, true, "Quon", empty, good, answer("Quon")), 1, 0.9},
		{"correct without searching", ep(task, agrl.Answered, true, "Quon", answer("Quon")), 0, 1},
		{"wrong", ep(task, agrl.Answered, false, "Dax", good, answer("Dax")), 0, -0.5},
		{"wrong after 3 bad searches", ep(task, agrl.Answered, false, "Lor", nomatch, irrel, unknown, answer("Lor")), 3, -0.8},
		{"gave up", ep(task, agrl.GaveUp, false, "", irrel, answer("")), 1, -0.1},
		{"cut off", ep(task, agrl.MaxTurnsReached, false, "", empty, empty, good, irrel, good, nomatch), 4, -1.4},
		{"invalid actions", ep(task, agrl.TooManyInvalid, false, "", invalid, invalid, invalid), 0, -1},
	}
	r := Rubric()
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := r.Weights(); !reflect.DeepEqual(got, map[string]float64{"correct": 1, "wrong": -0.5, "empty_searches": -0.1, "cutoff": -1}) {
		t.Fatalf("weights %v", got)
	}
	for _, c := range cases {
		if got := EmptySearches(c.ep); got != c.empties {
			t.Errorf("%s: EmptySearches %v, want %v", c.name, got, c.empties)
		}
		got, err := r.Score(c.ep)
		if err != nil || math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: reward %v (%v), want %v", c.name, got, err, c.want)
		}
	}
}

func playAll(t *testing.T, env Env, agent agrl.Agent, tasks []agrl.Task) (mean float64, solved int, eps []*agrl.Episode) {
	t.Helper()
	for _, task := range tasks {
		e, err := agrl.Play(env, task, agent, agrl.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := Rubric().Score(e)
		if err != nil {
			t.Fatal(err)
		}
		mean += r
		if e.Correct {
			solved++
		}
		eps = append(eps, e)
	}
	return mean / float64(len(tasks)), solved, eps
}

func TestExpertSolvesEverySplit(t *testing.T) {
	env := New()
	for _, split := range agrl.Splits {
		tasks, err := agrl.NewMix(17).Tasks(env, split, 200)
		if err != nil {
			t.Fatal(err)
		}
		mean, solved, eps := playAll(t, env, Expert(), tasks)
		if solved != len(tasks) || mean != 1 {
			for _, e := range eps {
				if !e.Correct {
					t.Fatalf("%s: expert failed:\n%s", split, e.Transcript())
				}
			}
			t.Fatalf("%s: expert mean reward %v", split, mean)
		}
	}
}

func TestExpertSolvesEveryDifficulty(t *testing.T) {
	for _, k := range []int{1, 2, 4} {
		env := New().TopK(k)
		for _, d := range agrl.Difficulties {
			tasks := gen(t, env, 23, d, 200)
			mean, solved, eps := playAll(t, env, Expert(), tasks)
			if solved != len(tasks) || mean != 1 {
				t.Fatalf("TopK(%d) %s: expert solved %d/%d, mean %v", k, d, solved, len(tasks), mean)
			}
			bytes, longest, obs := 0, 0, 0
			for _, e := range eps {
				if len(e.Turns) != Hops(d)+1 || e.ToolErrors() != 0 || EmptySearches(e) != 0 {
					t.Fatalf("%s: expert episode %s", d, e)
				}
				n := len(e.Transcript())
				bytes += n
				longest = max(longest, n)
				for _, turn := range e.Turns {
					obs = max(obs, len(turn.Observation))
				}
			}
			mean = float64(bytes) / float64(len(eps))
			if k == 2 {
				t.Logf("%s: expert episode mean %.0f max %d bytes, longest observation %d bytes", d, mean, longest, obs)
				if d <= agrl.Medium && mean > 300 || obs > 150 {
					t.Errorf("%s: expert episodes too long (mean %.0f bytes, observation %d)", d, mean, obs)
				}
			}
		}
	}
}

// TestExpertRecovers shows the expert reading observations: after a search that missed, it
// retries with the fact's own words.
func TestExpertRecovers(t *testing.T) {
	task := firstTask(t, agrl.Easy, "born")
	start := task.Meta[metaStart]
	e := &agrl.Episode{Task: task, Prompt: task.Prompt, Turns: []agrl.Turn{search("zz", "error: no fact matches", "no match", "false")}}
	got, err := Expert().Act(e)
	if err != nil || got != agrl.ToolAction("search", start+" was born in") {
		t.Fatalf("retry: %q, %v", got, err)
	}
	e.Turns = append(e.Turns, search("zz", "nothing", "", "false"))
	if got, _ := Expert().Act(e); got != agrl.AnswerText("") {
		t.Fatalf("second miss: %q", got)
	}
	if _, err := Expert().Act(&agrl.Episode{Task: agrl.Task{Meta: map[string]string{}}}); err == nil {
		t.Fatal("expert on a task without Meta: no error")
	}
}

func TestRandomBaseline(t *testing.T) {
	env := New()
	for _, d := range agrl.Difficulties {
		tasks := gen(t, env, 29, d, 200)
		expert, _, _ := playAll(t, env, Expert(), tasks)
		random, solved, _ := playAll(t, env, agrl.RandomAgent(1, env), tasks)
		t.Logf("%s: expert mean reward %.3f, random %.3f (%d/%d solved)", d, expert, random, solved, len(tasks))
		if expert-random < 1.2 {
			t.Errorf("%s: random baseline %.3f too close to expert %.3f", d, random, expert)
		}
	}
}

func TestHostileInputs(t *testing.T) {
	task := firstTask(t, agrl.Hard, "")
	nested := strings.Repeat("(", 5000) + strings.Repeat(")", 5000)
	inputs := []string{
		strings.Repeat("Dax born ", 1<<17),
		strings.Repeat("a", MaxQueryBytes+1),
		"\x00\x01\xff\xfe binary",
		string([]byte{0xc3, 0x28, 0xa0, 0xa1}),
		"Dax\nborn",
		`"unbalanced`, `'`, `"`, `((((`, `)`, `"""''`,
		"../../../../etc/passwd",
		"/etc/shadow",
		nested,
		"(((((((((((((((((((((((((((((())))))))))))))))))))))))))",
		"99999999999999999999999999999999999999999999999999",
		"-1e308", "NaN", "0x7fffffffffffffff",
		"%s%s%n%x", "${HOME}", "`rm -rf /`", "<obs>x</obs>",
		"Ünïcödé ßtraße", "\u202e evil",
	}
	for _, in := range inputs {
		sess, _, err := New().Reset(task)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		r := sess.Step(agrl.Action{Kind: agrl.ToolCall, Tool: "search", Args: in})
		if el := time.Since(start); el > 2*time.Second { // a hang guard, not a speed target
			t.Errorf("search(%.20q) took %v", in, el)
		}
		if r.ToolError == "" || !strings.HasPrefix(r.Observation, "error: ") || r.Done || r.Info["relevant"] != "false" || len(r.Observation) > 150 {
			t.Errorf("search(%.20q): %+v", in, r)
		}
	}
	// Unknown tools with hostile names, and actions Step should never get, are errors too.
	sess, _, _ := New().Reset(task)
	for _, a := range []agrl.Action{
		{Kind: agrl.ToolCall, Tool: strings.Repeat("x", 1<<16), Args: "a"},
		{Kind: agrl.ToolCall, Tool: "../search", Args: "a"},
		{Kind: agrl.Invalid, Invalid: "junk"},
		{Kind: agrl.ActionKind(42)},
	} {
		r := sess.Step(a)
		if r.ToolError == "" || r.Done || len(r.Observation) > 150 {
			t.Errorf("action %.30v: %+v", a, r)
		}
	}
}

func TestResetValidation(t *testing.T) {
	task := firstTask(t, agrl.Medium, "works")
	if _, _, err := New().Reset(task); err != nil {
		t.Fatal(err)
	}
	// A task that went through JSON replays identically.
	b, _ := json.Marshal(task)
	var back agrl.Task
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	e1, err1 := agrl.Play(New(), task, Expert(), agrl.Limits{})
	e2, err2 := agrl.Play(New(), back, Expert(), agrl.Limits{})
	if err1 != nil || err2 != nil || e1.Transcript() != e2.Transcript() {
		t.Fatalf("JSON round trip changed the episode:\n%s\n%s", e1.Transcript(), e2.Transcript())
	}
	with := func(key, val string) agrl.Task {
		c := task
		c.Meta = map[string]string{}
		for k, v := range task.Meta {
			c.Meta[k] = v
		}
		if val == "<delete>" {
			delete(c.Meta, key)
		} else {
			c.Meta[key] = val
		}
		return c
	}
	bad := map[string]agrl.Task{
		"wrong env":        func() agrl.Task { c := task; c.Env = "calc"; return c }(),
		"no difficulty":    func() agrl.Task { c := task; c.Difficulty = 0; return c }(),
		"nil meta":         func() agrl.Task { c := task; c.Meta = nil; return c }(),
		"other prompt":     func() agrl.Task { c := task; c.Prompt = "Who is the mentor of Quon?"; return c }(),
		"other answer":     func() agrl.Task { c := task; c.Answer = "Quon"; return c }(),
		"no seed":          with(metaSeed, "<delete>"),
		"seed text":        with(metaSeed, "forty"),
		"seed negative":    with(metaSeed, "-1"),
		"seed too big":     with(metaSeed, "99999999999999999999999"),
		"other seed":       with(metaSeed, "12345"),
		"world short":      with(metaWorld, "6,3,3"),
		"world zero":       with(metaWorld, "6,0,3,2"),
		"world one person": with(metaWorld, "1,3,3,2"),
		"world huge":       with(metaWorld, "16,16,16,16"),
		"world overflow":   with(metaWorld, "6,3,3,99999999999999999999"),
		"chain empty":      with(metaChain, ""),
		"chain unknown":    with(metaChain, "works,owns"),
		"chain ill-typed":  with(metaChain, "works,born"),
		"chain too long":   with(metaChain, strings.Repeat("mentor,", 50)+"mentor"),
		"start missing":    with(metaStart, "Nobody"),
		"start lowercase":  with(metaStart, strings.ToLower(task.Meta[metaStart])),
		"start wrong kind": with(metaChain, "located"),
	}
	for name, c := range bad {
		if _, _, err := New().Reset(c); err == nil {
			t.Errorf("%s: Reset accepted %s", name, c)
		}
	}
}

func TestBuilder(t *testing.T) {
	base := New()
	e := base.Turns(9).TopK(3)
	if base.MaxTurns() != 6 || base.K() != 2 || e.MaxTurns() != 9 || e.K() != 3 {
		t.Fatalf("setters changed the base or did not apply: %d %d %d %d", base.MaxTurns(), base.K(), e.MaxTurns(), e.K())
	}
	var zero Env
	if zero.MaxTurns() != 6 || zero.K() != 2 || zero.Turns(0).MaxTurns() != 1 {
		t.Fatal("zero value is not New()")
	}
	if len(base.Tools()) != 1 || base.Tools()[0].Name != "search" || base.Name() != "multihop" {
		t.Fatalf("tools %+v", base.Tools())
	}
	var _ agrl.Env = New()
}

// The shortcut agent answers after its first search on country questions and is the expert on
// the others: right on every one-hop question and every other longer question, wrong on every
// longer country question. Both kinds of question are common at every difficulty.
func TestShortcut(t *testing.T) {
	env := New()
	for _, d := range agrl.Difficulties {
		tasks := gen(t, env, 31, d, 200)
		_, solved, eps := playAll(t, env, Shortcut(), tasks)
		country := 0
		for i, e := range eps {
			expertEp, err := agrl.Play(env, tasks[i], Expert(), agrl.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			asks := AsksCountry(tasks[i].Prompt)
			if asks {
				country++
			}
			if !asks || Hops(d) == 1 {
				if e.Transcript() != expertEp.Transcript() || !e.Correct {
					t.Fatalf("%s: shortcut differs from the expert:\n%s", d, e.Transcript())
				}
			} else if len(e.Turns) != 2 || e.ToolCalls() != 1 || e.Termination != agrl.Answered || e.Correct {
				t.Fatalf("%s: shortcut episode on a country question:\n%s", d, e.Transcript())
			}
		}
		want := len(tasks)
		if Hops(d) > 1 {
			want = len(tasks) - country
		}
		if solved != want || country < len(tasks)/5 || country > len(tasks)*4/5 {
			t.Errorf("%s: shortcut solved %d/%d with %d country questions, want %d solved and 20-80%% of them", d, solved, len(tasks), country, want)
		}
		t.Logf("%s: %d of %d questions ask for a country", d, country, len(tasks))
	}
}

// HopFound credits exactly the turns that found the next hop: every search of the expert, the
// shortcut's one search, nothing for a repeated search.
func TestHopFound(t *testing.T) {
	env := New()
	for _, d := range []agrl.Difficulty{agrl.Easy, agrl.Medium, agrl.Hard} {
		for _, task := range gen(t, env, 41, d, 50) {
			ep, err := agrl.Play(env, task, Expert(), agrl.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			for k := range ep.Turns {
				want := 1.0
				if k == len(ep.Turns)-1 { // the answer
					want = 0
				}
				if got := HopFound(ep, k); got != want {
					t.Fatalf("expert turn %d: %v, want %v\n%s", k, got, want, ep.Transcript())
				}
			}
			r, err := ProcessRubric().Score(ep)
			if err != nil || math.Abs(r-(1+0.1*float64(Hops(d)))) > 1e-12 {
				t.Fatalf("process reward of the expert %v, %v", r, err)
			}
			// Repeat the first search: the repeat finds nothing new.
			first := ep.Turns[0]
			rep := &agrl.Episode{Task: ep.Task, Turns: []agrl.Turn{first, first}}
			if HopFound(rep, 0) != 1 || HopFound(rep, 1) != 0 {
				t.Fatalf("repeated search: %v %v", HopFound(rep, 0), HopFound(rep, 1))
			}
			if HopFound(rep, 5) != 0 || HopFound(rep, -1) != 0 {
				t.Fatal("out-of-range turn scored")
			}
		}
	}
}
