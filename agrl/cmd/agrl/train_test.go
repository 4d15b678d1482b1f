package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"agrl.dev/agrl"
)

// quick are flags that make training take seconds: the point here is the command's plumbing;
// the trainer's learning is tested in package agrl.
var quick = []string{"--steps", "2", "--sft-steps", "4", "--demos", "16", "--group", "2", "--tasks", "2",
	"--eval-tasks", "3", "--eval-every", "1", "--max-action-tokens", "24", "--quiet"}

func TestTrainEvalAndResume(t *testing.T) {
	out := filepath.Join(t.TempDir(), "calc")
	code, stdout, stderr := runCLI(append([]string{"train", "--env", "calc", "--out", out}, quick...)...)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"2 steps", "success", "before → after", "dev", "report:"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("train output lacks %q:\n%s", want, stdout)
		}
	}
	for _, f := range []string{"config.json", "metrics.jsonl", "eval.jsonl", "summary.json", "before_after.json", "report.html"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("run directory: %v", err)
		}
	}
	run, err := agrl.OpenRun(out)
	if err != nil {
		t.Fatal(err)
	}
	if s := run.Summary; s == nil || s.Final == nil || s.SFT == nil || s.Env != "calc" || s.Steps != 2 || !strings.Contains(s.Backend, ":") {
		t.Fatalf("summary %+v", run.Summary) // the backend configuration, e.g. go:ops_sequential
	}
	page, _ := os.ReadFile(filepath.Join(out, "report.html"))
	if !strings.Contains(string(page), "data:image/png;base64,") || !strings.Contains(string(page), "Trajectories") {
		t.Error("report.html lacks curves or trajectories")
	}
	var ba map[string]map[string]agrl.EvalResult
	b, _ := os.ReadFile(filepath.Join(out, "before_after.json"))
	if err := json.Unmarshal(b, &ba); err != nil || len(ba["before"]) != 3 || len(ba["after"]) != 3 {
		t.Errorf("before_after.json: %v %s", err, b)
	}

	code, stdout, stderr = runCLI("eval", "--run", out, "--split", "test", "--k", "2", "--n", "3")
	if code != 0 || !strings.Contains(stdout, "pass@2") || !strings.Contains(stdout, "3 tasks × k=2") || !strings.Contains(stdout, "(GRPO step 2)") {
		t.Fatalf("eval: exit %d: %s %s", code, stdout, stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--k", "1000000000"}, "-k 1000000000: want 1..100000"},
		{[]string{"--k", "1000", "--n", "1000"}, "1000 tasks × k 1000 is 1000000 episodes, held together: want at most 100000"},
	} {
		if code, _, stderr := runCLI(append([]string{"eval", "--run", out, "--temperature", "1"}, c.args...)...); code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("eval %v: exit %d, want 2 and %q: %s", c.args, code, c.want, stderr)
		}
	}
	code, stdout, _ = runCLI("eval", "--run", out, "--split", "ood", "--json")
	var res struct {
		agrl.EvalResult
		Step int `json:"step"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &res) != nil || res.N != 3 || res.Step != 2 {
		t.Fatalf("eval --json: %d %s", code, stdout)
	}

	// The same command with more steps resumes the run instead of starting over.
	args := append([]string{"train", "--env", "calc", "--out", out}, quick...)
	args[len(args)-len(quick)+1] = "3" // --steps 3
	code, stdout, stderr = runCLI(args...)
	if code != 0 {
		t.Fatalf("resume: exit %d: %s", code, stderr)
	}
	run, _ = agrl.OpenRun(out)
	if len(run.Metrics) != 3 || run.Summary.Steps != 3 {
		t.Errorf("after resume: %d metrics lines, summary %+v", len(run.Metrics), run.Summary)
	}

	// Other settings are refused, each named, unless --new-settings (then recorded).
	changed := append(append([]string(nil), args...), "--lr", "3e-4", "--seed", "2")
	code, _, stderr = runCLI(changed...)
	if code != 2 || !strings.Contains(stderr, "optimizer.lr: 0.0001 → 0.0003") || !strings.Contains(stderr, "seed: 1 → 2") {
		t.Fatalf("resume with other settings: exit %d: %s", code, stderr)
	}
	code, stdout, stderr = runCLI(append(changed, "--new-settings")...)
	if code != 0 {
		t.Fatalf("resume with --new-settings: exit %d: %s", code, stderr)
	}
	if hist, err := agrl.ConfigHistory(out); err != nil || len(hist) != 2 || !hist[1].NewSettings {
		t.Errorf("config history: %v %+v", err, hist)
	}
	// The seed draws the evaluation's samples: the start's evaluation, made under seed 1, is
	// not this final one's before.
	const noBefore = "no before: the start was evaluated under other settings (seed: 1 → 2)"
	if !strings.Contains(stdout, noBefore) || !strings.Contains(stdout, "dev                   – → ") {
		t.Errorf("resume with another seed: want %q under a table without befores:\n%s", noBefore, stdout)
	}
	if run, err := agrl.OpenRun(out); err != nil || len(run.History) != 2 {
		t.Errorf("OpenRun's history: %v", err)
	} else if before, after := run.BeforeAfter(); len(before) != 0 || len(after) != 3 {
		t.Errorf("BeforeAfter after a change of seed: %d befores, %d afters", len(before), len(after))
	}
}

func TestTrainUsageErrors(t *testing.T) {
	code, _, stderr := runCLI("train", "--env", "nope")
	if code != 2 || !strings.Contains(stderr, `unknown environment "nope"`) {
		t.Errorf("unknown env: %d %s", code, stderr)
	}
	code, _, stderr = runCLI("train", "--preset", "huge", "--guess-frac", "2", "--guess-after", "1")
	if code != 2 || !strings.Contains(stderr, `-preset "huge"`) || !strings.Contains(stderr, "-guess-frac 2") || !strings.Contains(stderr, "-guess-after 1") {
		t.Errorf("bad flags: %d %s", code, stderr)
	}
	code, _, stderr = runCLI("train", "--group", "1", "--lr", "-1", "--out", t.TempDir()+"/x", "--quiet")
	if code != 2 || !strings.Contains(stderr, "group size 1") || !strings.Contains(stderr, "learning rate -1") {
		t.Errorf("invalid config: %d %s", code, stderr)
	}
	code, _, stderr = runCLI("eval", "--split", "holdout", "--k", "0")
	if code != 2 || !strings.Contains(stderr, "-run is required") || !strings.Contains(stderr, "-k 0") {
		t.Errorf("eval usage: %d %s", code, stderr)
	}
	code, _, stderr = runCLI("eval", "--run", t.TempDir())
	if code != 1 || !strings.Contains(stderr, "not a run directory") {
		t.Errorf("eval of a non-run: %d %s", code, stderr)
	}
}

func TestParseGrid(t *testing.T) {
	pts, err := parseGrid("lr=1e-4,3e-4; kl=0,0.01")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pts {
		names = append(names, p.name())
	}
	if got := strings.Join(names, " "); got != "lr=1e-4,kl=0 lr=3e-4,kl=0 lr=1e-4,kl=0.01 lr=3e-4,kl=0.01" {
		t.Errorf("points: %s", got)
	}
	for _, bad := range []string{"", "lr", "lr=", "speed=1,2", "lr=x", "lr=1;lr=2", "group=1.5"} {
		if _, err := parseGrid(bad); err == nil {
			t.Errorf("grid %q accepted", bad)
		}
	}
}

func TestSweep(t *testing.T) {
	out := filepath.Join(t.TempDir(), "sweep")
	code, stdout, stderr := runCLI(append([]string{"sweep", "--env", "calc", "--grid", "kl=0,0.05", "--out", out}, quick...)...)
	if code != 0 {
		t.Fatalf("sweep: exit %d: %s", code, stderr)
	}
	for _, f := range []string{"results.csv", "results.md", "curves.png", "warm-start/summary.json", "kl=0/summary.json", "kl=0.05/summary.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("sweep output: %v", err)
		}
	}
	if !strings.Contains(stdout, "| kl=0.05 | 0.05 |") {
		t.Errorf("table:\n%s", stdout)
	}
}

// The warm start reports its progress (not a terminal: the first step, every 5% and the last).
func TestTrainShowsWarmStartProgress(t *testing.T) {
	out := filepath.Join(t.TempDir(), "calc")
	args := []string{"train", "--env", "calc", "--out", out, "--sft-steps", "40"}
	for i := 0; i < len(quick); i++ {
		switch quick[i] {
		case "--quiet":
		case "--sft-steps":
			i++
		default:
			args = append(args, quick[i])
		}
	}
	code, _, stderr := runCLI(args...)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"warm start 1/40 [", "warm start 2/40 [", "warm start 20/40 [", "warm start 40/40 [========================]", "accuracy", "eta 0s"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("progress lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "warm start 3/40 [") {
		t.Errorf("a line for every step on a non-terminal:\n%s", stderr)
	}
}

// A seeds sweep trains each seed from its own warm start and reports mean ± interval over seeds,
// computed from the runs' own evaluations.
func TestSweepSeeds(t *testing.T) {
	out := filepath.Join(t.TempDir(), "seeds")
	code, stdout, stderr := runCLI(append([]string{"sweep", "--env", "calc", "--seeds", "3", "--seed", "7", "--out", out}, quick...)...)
	if code != 0 {
		t.Fatalf("sweep: exit %d: %s", code, stderr)
	}
	var runs []*agrl.Run
	for _, s := range []string{"seed-7", "seed-8", "seed-9"} {
		r, err := agrl.OpenRun(filepath.Join(out, s))
		if err != nil {
			t.Fatal(err)
		}
		if r.Summary == nil || r.Summary.Status != "completed" || r.Summary.SFT == nil {
			t.Fatalf("%s: summary %+v", s, r.Summary)
		}
		runs = append(runs, r)
	}
	if runs[0].Config.Seed != 7 || runs[2].Config.Seed != 9 {
		t.Errorf("seeds %d, %d", runs[0].Config.Seed, runs[2].Config.Seed)
	}
	// The reported test numbers are the mean and t interval of the runs' own.
	var gains []float64
	for _, r := range runs {
		gains = append(gains, r.Summary.Final.TestSuccess-r.Summary.SFT.TestSuccess)
	}
	iv, err := agrl.MeanCI(gains)
	if err != nil {
		t.Fatal(err)
	}
	wantRow := fmt.Sprintf("| test | %.1f", 100*(runs[0].Summary.SFT.TestSuccess+runs[1].Summary.SFT.TestSuccess+runs[2].Summary.SFT.TestSuccess)/3)
	wantGain := fmt.Sprintf("[%+.1f, %+.1f]", 100*iv.Lo, 100*iv.Hi)
	for _, want := range []string{"calc, 3 seeds (seeds 7, 8, 9)", wantRow, wantGain, "| 8 | seed-8 |"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("results lack %q:\n%s", want, stdout)
		}
	}
	for _, f := range []string{"results.csv", "results.md", "curves.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	csvText, _ := os.ReadFile(filepath.Join(out, "results.csv"))
	if lines := strings.Count(string(csvText), "\n"); lines != 4 || !strings.HasPrefix(string(csvText), "point,seed,dev_before,dev_after,test_before") {
		t.Errorf("results.csv:\n%s", csvText)
	}

	// With a grid, each seed's warm start is shared by that seed's points.
	out2 := filepath.Join(t.TempDir(), "grid")
	code, stdout, stderr = runCLI(append([]string{"sweep", "--env", "calc", "--grid", "kl=0,0.05", "--seeds", "2", "--out", out2}, quick...)...)
	if code != 0 {
		t.Fatalf("grid sweep: exit %d: %s", code, stderr)
	}
	for _, f := range []string{"warm-start/seed-1/summary.json", "warm-start/seed-2/summary.json", "kl=0/seed-1/summary.json", "kl=0.05/seed-2/summary.json"} {
		if _, err := os.Stat(filepath.Join(out2, f)); err != nil {
			t.Errorf("grid sweep output: %v", err)
		}
	}
	if !strings.Contains(stdout, "kl=0, 2 seeds (seeds 1, 2)") || !strings.Contains(stdout, "kl=0.05, 2 seeds") {
		t.Errorf("grid results:\n%s", stdout)
	}
	// A seed axis and -seeds together are refused.
	if code, _, errOut := runCLI(append([]string{"sweep", "--env", "calc", "--grid", "seed=1,2", "--seeds", "2", "--out", out2}, quick...)...); code != 2 || !strings.Contains(errOut, "one or the other") {
		t.Errorf("seed axis with -seeds: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCLI("sweep", "--env", "calc", "--out", out2); code != 2 || !strings.Contains(errOut, "nothing to sweep") {
		t.Errorf("sweep without a grid or seeds: exit %d, %q", code, errOut)
	}
}

// -rubric picks one of the environment's named rubrics (recorded in config.json); -gamma and
// -turn-advantages reach the configuration; bad values are usage errors naming what there is.
func TestTrainRubricAndCredit(t *testing.T) {
	out := filepath.Join(t.TempDir(), "mh")
	code, _, stderr := runCLI(append([]string{"train", "--env", "multihop", "--rubric", "process", "--gamma", "0.9", "--turn-advantages", "--out", out}, quick...)...)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	r, err := agrl.OpenRun(out)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, term := range r.Config.Rubric {
		names = append(names, term.Name)
	}
	if !strings.Contains(strings.Join(names, ","), "hop") || r.Config.Gamma != 0.9 || !r.Config.TurnAdvantages {
		t.Errorf("config: rubric %v, γ %v, turn advantages %v", names, r.Config.Gamma, r.Config.TurnAdvantages)
	}
	code, _, stderr = runCLI(append([]string{"train", "--env", "calc", "--rubric", "naive", "--gamma", "1.5", "--out", filepath.Join(t.TempDir(), "x")}, quick...)...)
	if code != 2 || !strings.Contains(stderr, `calc has no rubric "naive" (it has: preset)`) || !strings.Contains(stderr, "discount") {
		t.Errorf("bad rubric and γ: exit %d: %s", code, stderr)
	}
}

// -screen reaches the configuration (recorded in config.json) and the run logs what screening
// predicted; -screen 0 turns the recipe's screening off; -screen 1 is a usage error.
func TestTrainScreen(t *testing.T) {
	out := filepath.Join(t.TempDir(), "screened")
	code, _, stderr := runCLI(append([]string{"train", "--env", "calc", "--screen", "3", "--out", out}, quick...)...)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	r, err := agrl.OpenRun(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Config.Screen != 3 || len(r.Metrics) == 0 {
		t.Fatalf("config screen %d, %d steps logged", r.Config.Screen, len(r.Metrics))
	}
	for _, m := range r.Metrics {
		if _, ok := m[agrl.MetricScreenSignal]; !ok {
			t.Errorf("step %v logs no %s", m.Step(), agrl.MetricScreenSignal)
		}
	}
	off := filepath.Join(t.TempDir(), "off")
	if code, _, stderr := runCLI(append([]string{"train", "--env", "calc", "--screen", "0", "--out", off}, quick...)...); code != 0 {
		t.Fatalf("train -screen 0: exit %d: %s", code, stderr)
	}
	if r, err := agrl.OpenRun(off); err != nil || r.Config.Screen != 0 {
		t.Errorf("-screen 0: %v, %+v", err, r)
	}
	if code, _, stderr := runCLI(append([]string{"train", "--env", "calc", "--screen", "1", "--out", filepath.Join(t.TempDir(), "x")}, quick...)...); code != 2 || !strings.Contains(stderr, "screening pool 1") {
		t.Errorf("-screen 1: exit %d: %s", code, stderr)
	}
}

// TestProgressShowsAlarms: an alarm is printed once, in full, when it first fires, and the
// progress line names the alarms firing.
func TestProgressShowsAlarms(t *testing.T) {
	var out strings.Builder
	p := newProgress(&out, 3)
	fired := []agrl.Alarm{}
	p.alarms = func() []agrl.Alarm { return fired }
	p.update(agrl.Metrics{agrl.MetricStep: 1})
	fired = []agrl.Alarm{{Name: "no-signal", Metric: agrl.MetricFracRewardZeroStd, Value: 0.9, Limit: 0.8, Step: 2, Message: "m", Doc: "d"}}
	p.update(agrl.Metrics{agrl.MetricStep: 2})
	p.update(agrl.Metrics{agrl.MetricStep: 3})
	got := out.String()
	if strings.Count(got, "alarm: no-signal: frac_reward_zero_std 0.9 (limit 0.8) at step 2") != 1 {
		t.Errorf("the alarm is not printed exactly once:\n%s", got)
	}
	if !strings.Contains(got, "step 3/3") || !strings.HasSuffix(strings.TrimSpace(got), "alarms: no-signal") {
		t.Errorf("the last progress line does not name the alarm:\n%s", got)
	}
}

// TestProgressPhases: in a log a step's phases print once the step has run 30 s and then at
// most one line every 30 s, from scratch at each step; on a terminal every phase replaces the
// line.
func TestProgressPhases(t *testing.T) {
	var out strings.Builder
	p := newProgress(&out, 5)
	for _, ph := range []agrl.StepPhase{
		// the evaluation before training (step 0) under 30 s: nothing
		{Step: 0, What: "evaluation before training, dev: 1 of 2 episodes done", Elapsed: 13 * time.Second},
		{Step: 1, What: "rollouts: 8 episodes", Elapsed: time.Second},
		{Step: 1, What: "update 1/1", Elapsed: 31 * time.Second},
		{Step: 1, What: "update 1/1: micro-batch 1 of 4 done", Elapsed: 50 * time.Second},
		{Step: 1, What: "update 1/1: micro-batch 2 of 4 done", Elapsed: 62 * time.Second},
		{Step: 2, What: "rollouts: 8 episodes", Elapsed: 2 * time.Second},
		{Step: 2, What: "update 1/1", Elapsed: 29 * time.Second},
		{Step: 2, What: "update 1/1: micro-batch 1 of 1 done", Elapsed: 40 * time.Second},
		// an evaluation after step 2: its clock starts again, and so does the 30 s (even
		// when its first episode ends later than the step's last phase)
		{Step: 2, What: "evaluation at step 2, dev: 1 of 4 episodes done", Evaluation: true, Elapsed: 45 * time.Second},
		{Step: 2, What: "evaluation at step 2, dev: 2 of 4 episodes done", Evaluation: true, Elapsed: 62 * time.Second},
	} {
		p.phase(ph)
	}
	want := "step 1/5: update 1/1 (31s)\nstep 1/5: update 1/1: micro-batch 2 of 4 done (1m2s)\n" +
		"step 2/5: update 1/1: micro-batch 1 of 1 done (40s)\nstep 2/5: evaluation at step 2, dev: 1 of 4 episodes done (45s)\n"
	if got := out.String(); got != want {
		t.Errorf("log:\n%q\nwant\n%q", got, want)
	}
	out.Reset()
	p.tty = true
	p.phase(agrl.StepPhase{Step: 3, What: "rollouts: 8 episodes", Elapsed: time.Second})
	if got := out.String(); got != "\r\033[Kstep 3/5: rollouts: 8 episodes (1s)" {
		t.Errorf("terminal: %q", got)
	}
}

// TestTrainPromptTooLong: a token budget that a prompt fills is a setting to change, and the
// CLI says so (not "run the same command to resume", which would stop at the same prompt).
func TestTrainPromptTooLong(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	code, _, stderr := runCLI("train", "--env", "calc", "--max-tokens", "10", "--steps", "2", "--sft-steps", "2", "--group", "2",
		"--tasks", "1", "--eval-tasks", "1", "--eval-every", "0", "--out", out, "--quiet")
	if code != 1 || !strings.Contains(stderr, "takes 17 tokens; the budget is 10 (at least 19 leaves room for an action)") ||
		!strings.Contains(stderr, "raise -max-tokens to at least 19") || strings.Contains(stderr, "run the same command") {
		t.Errorf("exit %d: %s", code, stderr)
	}
	// A context too short: -max-tokens cannot help (the context bounds every budget).
	code, _, stderr = runCLI("train", "--env", "calc", "--context", "16", "--steps", "2", "--sft-steps", "2", "--group", "2",
		"--tasks", "1", "--eval-tasks", "1", "--eval-every", "0", "--out", filepath.Join(t.TempDir(), "run"), "--quiet")
	if code != 1 || !strings.Contains(stderr, "takes 17 tokens; the model's context is 16 (an action needs at least 19)") ||
		!strings.Contains(stderr, "context of at least 19 tokens (-context), in a new run") || strings.Contains(stderr, "-max-tokens") {
		t.Errorf("-context 16: exit %d: %s", code, stderr)
	}
}
