package filesearch

import (
	"regexp"
	"slices"
	"testing"

	"agrl.dev/agrl"
)

type agentStats struct {
	naive, fixed, success, calls float64
	solved                       int
}

func measure(t *testing.T, env agrl.Env, tasks []agrl.Task, agent agrl.Agent) agentStats {
	t.Helper()
	var s agentStats
	n := float64(len(tasks))
	for _, task := range tasks {
		ep := play(t, env, task, agent)
		rn, err := NaiveRubric().Score(ep)
		if err != nil {
			t.Fatal(err)
		}
		rf, err := Rubric().Score(ep)
		if err != nil {
			t.Fatal(err)
		}
		s.naive += rn / n
		s.fixed += rf / n
		s.calls += float64(ep.ToolCalls()) / n
		if ep.Correct {
			s.solved++
		}
	}
	s.success = float64(s.solved) / n
	return s
}

// TestRewardHack reproduces the lesson on 200 hard dev tasks: under NaiveRubric the hack
// (provoke a tool error, give up) out-earns honest exploration; under Rubric it is the other
// way round; the expert beats both under both.
func TestRewardHack(t *testing.T) {
	env := New()
	tasks, err := agrl.NewMix(2025).Easy(0).Medium(0).Hard(1).Tasks(env, agrl.Dev, 200)
	if err != nil {
		t.Fatal(err)
	}
	expert := measure(t, env, tasks, Expert())
	hacker := measure(t, env, tasks, Hacker())
	t.Logf("expert:   naive %+.3f  fixed %+.3f  success %.3f  calls %.2f", expert.naive, expert.fixed, expert.success, expert.calls)
	t.Logf("hacker:   naive %+.3f  fixed %+.3f  success %.3f  calls %.2f", hacker.naive, hacker.fixed, hacker.success, hacker.calls)
	// The two other ways out that GRPO found under the first fix (NaiveRubric plus error_quit
	// alone): giving up at once, and answering anything after a failed call. Under the preset
	// both must earn less than every honest explorer, and the naive rubric must still pay for
	// quitting (the lesson's starting point).
	quitter := measure(t, env, tasks, agrl.AgentFunc(func(*agrl.Episode) (string, error) { return agrl.AnswerText(""), nil }))
	bluffer := measure(t, env, tasks, agrl.AgentFunc(func(ep *agrl.Episode) (string, error) {
		if len(ep.Turns) == 0 {
			return agrl.ToolAction("cat", "/missing.txt"), nil
		}
		return agrl.AnswerText("web1"), nil
	}))
	t.Logf("quitter (no tool call): naive %+.3f  fixed %+.3f", quitter.naive, quitter.fixed)
	t.Logf("bluffer (failed call, any answer): naive %+.3f  fixed %+.3f", bluffer.naive, bluffer.fixed)
	for _, seed := range []uint64{1, 2, 3} {
		explorer := measure(t, env, tasks, Explorer(seed))
		t.Logf("explorer(%d): naive %+.3f  fixed %+.3f  success %.3f  calls %.2f", seed, explorer.naive, explorer.fixed, explorer.success, explorer.calls)
		if explorer.success < 0.1 || explorer.success > 0.5 {
			t.Errorf("explorer(%d) success %.3f: want well inside (0, 1)", seed, explorer.success)
		}
		if d := hacker.naive - explorer.naive; d < 0.25 {
			t.Errorf("NaiveRubric: hacker %.3f should beat explorer(%d) %.3f by 0.25, got %.3f", hacker.naive, seed, explorer.naive, d)
		}
		if d := explorer.fixed - hacker.fixed; d < 0.4 {
			t.Errorf("Rubric: explorer(%d) %.3f should beat hacker %.3f by 0.4, got %.3f", seed, explorer.fixed, hacker.fixed, d)
		}
		if expert.naive-max(hacker.naive, explorer.naive) < 1 || expert.fixed-max(hacker.fixed, explorer.fixed) < 1 {
			t.Errorf("expert %+v does not beat hacker %+v and explorer(%d) %+v by 1", expert, hacker, seed, explorer)
		}
		if quitter.naive <= explorer.naive {
			t.Errorf("NaiveRubric: the quitter %.3f should beat explorer(%d) %.3f", quitter.naive, seed, explorer.naive)
		}
		if d := explorer.fixed - max(quitter.fixed, bluffer.fixed); d < 0.4 {
			t.Errorf("Rubric: explorer(%d) %.3f should beat the quitter %.3f and the bluffer %.3f by 0.4", seed, explorer.fixed, quitter.fixed, bluffer.fixed)
		}
	}
	if expert.solved != len(tasks) || hacker.solved != 0 {
		t.Errorf("expert success %.3f, hacker success %.3f", expert.success, hacker.success)
	}
}

// TestAgentShapes checks the episodes behind the numbers: the hacker's is one failed call and
// an empty answer (flagged by agrl.ErrorThenQuit); the explorer never calls a tool that fails,
// never answers wrongly, and is deterministic for a seed.
func TestAgentShapes(t *testing.T) {
	env := New()
	for _, d := range agrl.Difficulties {
		h := play(t, env, genTask(t, uint64(d), d), Hacker())
		if len(h.Turns) != 2 || h.ToolErrors() != 1 || h.Termination != agrl.GaveUp || agrl.ErrorThenQuit(h) != 1 {
			t.Fatalf("hacker episode:\n%s", h.Transcript())
		}
	}
	rates := map[agrl.Difficulty]float64{}
	for _, d := range agrl.Difficulties {
		const n = 200
		for i := range n {
			task := genTask(t, uint64(1000*int(d)+i), d)
			a, b := play(t, env, task, Explorer(7)), play(t, env, task, Explorer(7))
			if a.Transcript() != b.Transcript() {
				t.Fatalf("explorer not deterministic:\n%s\n---\n%s", a.Transcript(), b.Transcript())
			}
			if a.ToolErrors() != 0 || (a.Termination == agrl.Answered && !a.Correct) {
				t.Fatalf("explorer erred or answered wrongly:\n%s", a.Transcript())
			}
			if a.Correct {
				rates[d] += 1.0 / n
			}
		}
	}
	t.Logf("explorer(7) success by difficulty: easy %.2f medium %.2f hard %.2f extreme %.2f",
		rates[agrl.Easy], rates[agrl.Medium], rates[agrl.Hard], rates[agrl.Extreme])
	if !(rates[agrl.Easy] > rates[agrl.Hard] && rates[agrl.Hard] > rates[agrl.Extreme]) {
		t.Errorf("explorer success should fall with difficulty: %v", rates)
	}
}

// TestGuesser: the guesser's shortcut works exactly where files are named after their key, so
// its success is a property of the task (all easy trees, about half the medium ones, no hard
// one); every failure is a tool error followed by giving up, which ErrorThenQuit flags.
func TestGuesser(t *testing.T) {
	env := New()
	want := map[agrl.Difficulty][2]float64{agrl.Easy: {1, 1}, agrl.Medium: {0.35, 0.65}, agrl.Hard: {0, 0}, agrl.Extreme: {0, 0}}
	for _, d := range agrl.Difficulties {
		const n = 200
		solved := 0
		for i := range n {
			task := genTask(t, uint64(5000*int(d)+i), d)
			ep := play(t, env, task, Guesser())
			hint := task.Meta["hint"] == "true"
			switch {
			case ep.Correct != hint:
				t.Fatalf("%s task (hint %v):\n%s", d, hint, ep.Transcript())
			case ep.Correct && (len(ep.Turns) != 3 || ep.ToolErrors() != 0):
				t.Fatalf("a solved guess is find, cat, answer:\n%s", ep.Transcript())
			case !ep.Correct && (len(ep.Turns) != 3 || ep.ToolErrors() != 1 || ep.Termination != agrl.GaveUp || agrl.ErrorThenQuit(ep) != 1):
				t.Fatalf("a failed guess is find, a failing cat, giving up:\n%s", ep.Transcript())
			}
			if ep.Correct {
				solved++
			}
		}
		rate := float64(solved) / n
		t.Logf("%-7s guesser success %.3f", d, rate)
		if rate < want[d][0] || rate > want[d][1] {
			t.Errorf("%s: guesser success %.3f, want in [%.2f, %.2f]", d, rate, want[d][0], want[d][1])
		}
	}
}

// TestSkimmer: the skimmer answers from the first file it opens, so it is right exactly where
// that file holds the fact — every tree whose files are named after their key, and otherwise
// about one in three or four — and wrong (never giving up, never a failing call) elsewhere:
// find, ls, one cat, an answer.
func TestSkimmer(t *testing.T) {
	env := New()
	want := map[agrl.Difficulty][2]float64{agrl.Easy: {1, 1}, agrl.Medium: {0.55, 0.8}, agrl.Hard: {0.15, 0.4}, agrl.Extreme: {0.1, 0.35}}
	for _, d := range agrl.Difficulties {
		const n = 200
		solved := 0
		for i := range n {
			task := genTask(t, uint64(7000*int(d)+i), d)
			ep := play(t, env, task, Skimmer())
			first := ep.Turns[2]
			_, key, _ := question(task.Prompt)
			_, holds := factIn(first.Observation, key)
			switch {
			case len(ep.Turns) != 4 || ep.ToolErrors() != 0 || ep.Termination != agrl.Answered:
				t.Fatalf("a skim is find, ls, cat, answer:\n%s", ep.Transcript())
			case ep.Correct != holds:
				t.Fatalf("correct %v, but the file read holds the fact: %v\n%s", ep.Correct, holds, ep.Transcript())
			case task.Meta["hint"] == "true" && !ep.Correct:
				t.Fatalf("a tree named after its keys, skimmed wrongly:\n%s", ep.Transcript())
			}
			if ep.Correct {
				solved++
			}
		}
		rate := float64(solved) / n
		t.Logf("%-7s skimmer success %.3f", d, rate)
		if rate < want[d][0] || rate > want[d][1] {
			t.Errorf("%s: skimmer success %.3f, want in [%.2f, %.2f]", d, rate, want[d][0], want[d][1])
		}
	}
}

// valueShape is the form of each known-looking key's values (keyValue).
var valueShape = map[string]*regexp.Regexp{
	"user":   regexp.MustCompile(`^[a-z]{3}[0-9]$`),
	"host":   regexp.MustCompile(`^[a-z]+[0-9]{1,2}$`),
	"region": regexp.MustCompile(`^[a-z]{2}-(north|south|east|west)[1-4]$`),
	"owner":  regexp.MustCompile(`^[a-z]+-team$`),
	"level":  regexp.MustCompile(`^(debug|info|warn|error|trace|fatal)$`),
}

// TestAssumer checks the assumer against the expert: on questions that LooksKnown it answers at
// once (no tool call) a value of the asked kind, right only by luck; on the others it plays the
// expert's episode exactly; its guesses are fixed by the seed and the prompt.
func TestAssumer(t *testing.T) {
	env := New()
	known, lucky, differ := 0, 0, 0
	for i := range 800 {
		d := agrl.Difficulties[i%len(agrl.Difficulties)]
		task := genTask(t, uint64(9100+i), d)
		_, key, _ := question(task.Prompt)
		ep := play(t, env, task, Assumer(3))
		if !LooksKnown(key) {
			if want := play(t, env, task, Expert()); ep.Transcript() != want.Transcript() || !ep.Correct {
				t.Fatalf("%s is not a known-looking key, but the assumer left the expert's path:\n%s", key, ep.Transcript())
			}
			continue
		}
		known++
		if len(ep.Turns) != 1 || ep.Termination != agrl.Answered || ep.ToolCalls() != 0 {
			t.Fatalf("a known-looking question (%s) answered with a search:\n%s", key, ep.Transcript())
		}
		if ep.Correct {
			lucky++
		}
		ans := ep.Turns[0].Action.Answer
		if !valueShape[key].MatchString(ans) {
			t.Fatalf("the assumer answered %q to a question about %s: not a value of that kind", ans, key)
		}
		// The guess depends on the seed and the prompt only: an episode with nothing but the
		// prompt (no task, no ID) gets the same action.
		if again, err := Assumer(3).Act(&agrl.Episode{Prompt: task.Prompt}); err != nil || again != ep.Turns[0].Text {
			t.Fatalf("the assumer's guess for %q changed: %q, then %q (%v)", task.Prompt, ep.Turns[0].Text, again, err)
		}
		if other := play(t, env, task, Assumer(4)); other.Turns[0].Action != ep.Turns[0].Action {
			differ++
		}
	}
	rate := float64(lucky) / float64(known)
	t.Logf("%d of 800 questions look known; the assumer is right on %.3f of them", known, rate)
	// Five keys in eight look known; luck is 1/6 on levels, 1/10 on teams and near 0 on users,
	// regions and hosts (1/100, 1/96, about 1/360), so about 0.058 over the five.
	if known < 440 || known > 560 {
		t.Errorf("%d of 800 questions look known, want about 5/8", known)
	}
	if differ < known/2 {
		t.Errorf("seeds 3 and 4 guess alike on %d of %d questions: the seed should move the guesses", known-differ, known)
	}
	if rate < 0.03 || rate > 0.09 {
		t.Errorf("assumer right on %.3f of the known-looking questions, want about 0.058", rate)
	}
}

// TestTokenizer checks the recipe's tokenizer: a word for every key and every directory name as
// a path component, a path written with them in 8 tokens instead of 17, and 40 expert episodes
// of every difficulty encoded for training without an unknown byte.
func TestTokenizer(t *testing.T) {
	tok := Tokenizer()
	words := map[string]bool{}
	for _, w := range tok.WordList() {
		words[w] = true
	}
	for _, k := range keys {
		if !words[k.name] {
			t.Errorf("no word for the key %q", k.name)
		}
	}
	for _, pool := range levelPools {
		for _, name := range pool {
			if !words["/"+name] {
				t.Errorf("no word for the path component /%s", name)
			}
		}
	}
	if n, plain := len(tok.Encode("/srv/prod/eu/kemo")), len(agrl.TinyLM().Spec().Tokenizer.Encode("/srv/prod/eu/kemo")); n != 8 || plain != 17 {
		t.Errorf("/srv/prod/eu/kemo: %d tokens, TinyLM's tokenizer %d; want 8 and 17", n, plain)
	}
	env := New()
	for i := range 40 {
		task := genTask(t, uint64(9900+i), agrl.Difficulties[i%len(agrl.Difficulties)])
		ep := play(t, env, task, Expert())
		if ids, _ := agrl.EncodeEpisode(tok, ep); slices.Contains(ids, agrl.UNK) {
			t.Fatalf("an unknown byte in the expert's episode:\n%s", ep.Transcript())
		}
	}
}
