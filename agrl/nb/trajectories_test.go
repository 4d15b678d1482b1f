package nb

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/envs/calc"
)

const hostile = `<script>alert("x")</script><img src=x onerror=alert(1)>&amp;`

// hostileEpisode is an episode whose every text field carries markup and control characters.
func hostileEpisode() *agrl.Episode {
	return &agrl.Episode{
		Task:   agrl.Task{ID: "calc-" + hostile, Env: "calc", Prompt: "Compute: " + hostile, Answer: "</td>" + hostile, Difficulty: agrl.Hard},
		Prompt: "Compute: " + hostile,
		Turns: []agrl.Turn{
			{Text: "<think>" + hostile + "</think><tool>calc(" + hostile + ")</tool>",
				Action:      agrl.Action{Kind: agrl.ToolCall, Think: hostile, Tool: "calc", Args: hostile},
				Observation: "error: " + hostile + "\x1b[31mred", ToolError: "bad expr " + hostile},
			{Text: "</pre>" + hostile, Action: agrl.Action{Kind: agrl.Invalid, Invalid: "no <tool> or <answer> tag"},
				Observation: "invalid action: " + hostile},
			{Text: "<answer>" + hostile + "</answer>", Action: agrl.Action{Kind: agrl.AnswerAction, Answer: hostile}},
		},
		Termination: agrl.Answered, Answer: hostile, Error: hostile,
		Reward:  -0.5,
		Rewards: []agrl.RewardTerm{{Name: hostile, Value: 1, Weight: -0.5}, {Name: "turns", Value: 3, Weight: 0}},
	}
}

func TestEpisodeHTMLEscapesEverything(t *testing.T) {
	out := EpisodeHTML(hostileEpisode())
	for _, bad := range []string{"<script", "<img", `alert("x")`, "onerror=alert(1)>", "\x1b"} {
		if strings.Contains(out, bad) {
			t.Errorf("unescaped %q in:\n%s", bad, out)
		}
	}
	// Every field's text is present, escaped (& escaped once more: &amp;amp;).
	if n := strings.Count(out, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;&amp;amp;"); n < 10 {
		t.Errorf("escaped hostile text appears %d times, want every field (>= 10)", n)
	}
	if !strings.Contains(out, `\x1b[31mred`) {
		t.Error("control characters must be shown escaped")
	}
	// The only tags are our own.
	allowed := map[string]bool{"div": true, "b": true, "code": true, "pre": true, "table": true, "tr": true, "th": true, "td": true, "span": true}
	for _, m := range regexp.MustCompile(`</?([a-zA-Z]+)`).FindAllStringSubmatch(out, -1) {
		if !allowed[m[1]] {
			t.Errorf("unexpected tag <%s>", m[1])
		}
	}
	if strings.Count(out, "<div") != strings.Count(out, "</div>") || strings.Count(out, "<pre") != strings.Count(out, "</pre>") {
		t.Error("unbalanced div or pre")
	}
}

func TestEpisodeHTMLMarksMaskedObservations(t *testing.T) {
	ep := hostileEpisode()
	out := EpisodeHTML(ep)
	// Two observations (the tool call's and the invalid action's) plus the prompt are masked;
	// the final answer has no observation.
	if n := strings.Count(out, `class="agrl-obs" data-loss-mask="0"`); n != 2 {
		t.Errorf("%d masked observation blocks, want 2", n)
	}
	if n := strings.Count(out, "observation · masked out of the loss"); n != 2 {
		t.Errorf("%d masked labels, want 2", n)
	}
	if !strings.Contains(out, `class="agrl-prompt" data-loss-mask="0"`) {
		t.Error("the prompt is not marked as masked")
	}
	if n := strings.Count(out, "policy action (trained on)"); n != 3 {
		t.Errorf("%d turns marked as trained on, want 3", n)
	}
	for _, want := range []string{`class="agrl-tool-error"`, `class="agrl-think"`, `class="agrl-invalid"`, `class="agrl-rewards"`,
		`ended: <b class="agrl-termination">answered</b>`, "(logged only)", "<b>-0.500</b>", "environment error"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q", want)
		}
	}
	// Token statistics appear when the episode carries tokens.
	ep.Tokens, ep.LossMask = make([]int32, 10), []uint8{0, 0, 0, 1, 1, 1, 0, 0, 1, 1}
	if !strings.Contains(EpisodeHTML(ep), "10 in context, 5 trained on (loss mask 1), 5 masked") {
		t.Error("token statistics missing")
	}
}

// calcEpisodes plays n dev tasks of calc: the expert on even ones, the guesser on odd ones.
func calcEpisodes(t *testing.T, n int) []*agrl.Episode {
	t.Helper()
	env := calc.New()
	tasks, err := agrl.NewMix(3).Tasks(env, agrl.Dev, n)
	if err != nil {
		t.Fatal(err)
	}
	var eps []*agrl.Episode
	for i, task := range tasks {
		agent := calc.Expert()
		if i%2 == 1 {
			agent = calc.Guesser(1)
		}
		ep, err := agrl.Play(env, task, agent, agrl.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := calc.Rubric().Score(ep); err != nil {
			t.Fatal(err)
		}
		eps = append(eps, ep)
	}
	return eps
}

func TestFilters(t *testing.T) {
	eps := calcEpisodes(t, 40)
	fails := Select(eps, Failures, 0)
	wins := Select(eps, Successes, 0)
	if len(fails) == 0 || len(wins) == 0 || len(fails)+len(wins) != len(eps) {
		t.Fatalf("%d failures + %d successes of %d", len(fails), len(wins), len(eps))
	}
	for _, ep := range fails {
		if ep.Correct {
			t.Error("a success among failures")
		}
	}
	if got := Select(eps, Failures, 2); len(got) != 2 || got[0] != fails[0] || got[1] != fails[1] {
		t.Error("Select(…, 2) must return the first two in order")
	}
	if got := Select(append([]*agrl.Episode{nil}, eps...), nil, 0); len(got) != len(eps) {
		t.Error("a nil filter keeps all, nil episodes are skipped")
	}
	hard := Select(eps, And(Successes, OfDifficulty(agrl.Hard), Ended(agrl.Answered)), 0)
	for _, ep := range hard {
		if !ep.Correct || ep.Task.Difficulty != agrl.Hard {
			t.Error("And filter")
		}
	}

	out := TrajectoriesHTML(eps, Failures, 3)
	if n := strings.Count(out, `class="agrl-episode"`); n != 3 {
		t.Errorf("%d episodes shown, want 3", n)
	}
	if !strings.Contains(out, fmt.Sprintf("3 of %d matching episodes (40 in all)", len(fails))) {
		t.Errorf("header missing in %.200s", out)
	}
	for _, ep := range fails[:3] {
		if !strings.Contains(out, ep.Task.ID) {
			t.Errorf("failure %s not shown", ep.Task.ID)
		}
	}
	for _, ep := range wins {
		if strings.Contains(out, ep.Task.ID) {
			t.Errorf("success %s shown among failures", ep.Task.ID)
		}
	}
	if strings.Contains(out, "✓ solved") {
		t.Error("a solved episode among failures")
	}
	if !strings.Contains(TrajectoriesHTML(eps, Ended(agrl.EnvError), 3), "no episode matches (out of 40)") {
		t.Error("empty selection note")
	}
	text := TrajectoriesText(eps, Successes, 1)
	if !strings.Contains(text, "SOLVED") || strings.Count(text, "== ") != 1 {
		t.Errorf("text:\n%s", text)
	}
}

func TestEpisodeText(t *testing.T) {
	out := EpisodeText(hostileEpisode())
	if strings.Contains(out, "\x1b") {
		t.Error("raw escape character in text output")
	}
	for _, want := range []string{`\x1b[31mred`, "observation [masked out of the loss]", "prompt [masked out of the loss]",
		"-- turn 3 [policy, trained on]", "tool error: bad expr", "invalid action (no <tool> or <answer> tag)", "total -0.500"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	zero := &agrl.Episode{Rewards: []agrl.RewardTerm{{Name: "cutoff", Value: 0, Weight: -1}}}
	if strings.Contains(EpisodeText(zero), "-0.000") || strings.Contains(EpisodeHTML(zero), "-0.000") {
		t.Error("negative zero shown")
	}
	if strings.Count(out, "observation [masked out of the loss]") != 2 {
		t.Error("want two observations")
	}
	// Multi-line observations stay inside the block.
	ep := &agrl.Episode{Prompt: "p", Turns: []agrl.Turn{{Action: agrl.Action{Kind: agrl.ToolCall, Tool: "ls", Args: "/"}, Observation: "a/\nb/\nc.txt"}}}
	if !strings.Contains(EpisodeText(ep), "   | a/\n   | b/\n   | c.txt\n") {
		t.Errorf("multi-line observation:\n%s", EpisodeText(ep))
	}
}

func TestBeforeAfter(t *testing.T) {
	mk := func(id string, correct bool, reward float64) *agrl.Episode {
		return &agrl.Episode{Task: agrl.Task{ID: id, Difficulty: agrl.Easy}, Correct: correct, Reward: reward, Termination: agrl.Answered}
	}
	before := []*agrl.Episode{mk("a", false, 0.2), mk("b", true, 1), mk("c", false, 0), mk("a", false, 0.2), mk("only-before", false, 0)}
	after := []*agrl.Episode{mk("b", false, 0.5), mk("a", true, 1), mk("c", false, 0.2), mk("only-after", true, 1), mk("<x>", true, 1)}
	pairs, ub, ua := PairByTask(before, after)
	if len(pairs) != 3 || ub != 2 || ua != 2 {
		t.Fatalf("%d pairs, unpaired %d/%d; want 3, 2/2 (the second 'a' has no partner)", len(pairs), ub, ua)
	}
	for _, p := range pairs {
		if p.Before.Task.ID != p.After.Task.ID {
			t.Error("pair of different tasks")
		}
	}
	if pairs[0].Before.Task.ID != "a" || pairs[1].Before.Task.ID != "b" {
		t.Error("pairs must follow before's order")
	}
	out := BeforeAfterHTML(before, after)
	for _, want := range []string{"3 pairs: 1 fixed, 1 broken, 1 unchanged", "mean reward 0.400 → 0.567", "unpaired: 2 before, 2 after",
		"reward 0.200 → 1.000 (+0.800)", "· fixed ·", "· broken ·"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q", want)
		}
	}
	if n := strings.Count(out, `class="agrl-episode"`); n != 6 {
		t.Errorf("%d episodes, want 6", n)
	}
	if !strings.Contains(BeforeAfterHTML(before[:1], after[:1]), "no task appears on both sides") {
		t.Error("no-pair note")
	}
}

func TestLatest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	w, err := agrl.CreateRun(dir, map[string]any{}, false)
	if err != nil {
		t.Fatal(err)
	}
	eps := calcEpisodes(t, 4)
	run, _ := agrl.OpenRun(dir)
	if _, err := Latest(run); err == nil || !strings.Contains(err.Error(), "no trajectories yet") {
		t.Errorf("err %v", err)
	}
	if err := w.SaveTrajectories(20, eps[:3]); err != nil {
		t.Fatal(err)
	}
	if err := w.SaveTrajectories(10, eps[:1]); err != nil {
		t.Fatal(err)
	}
	got, err := Latest(run)
	if err != nil || len(got) != 3 || got[2].Task.ID != eps[2].Task.ID {
		t.Fatalf("Latest: %d episodes, %v", len(got), err)
	}
	if _, err := Latest(nil); err == nil {
		t.Error("nil run")
	}
}
