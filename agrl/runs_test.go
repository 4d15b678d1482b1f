package agrl

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestRunDirectoryRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	w, err := CreateRun(dir, map[string]any{"env": "toy", "lr": 3e-4}, false)
	if err != nil {
		t.Fatal(err)
	}
	for step := 1; step <= 3; step++ {
		if err := w.LogMetrics(Metrics{"step": float64(step), "reward/mean": float64(step) / 10, "kl": math.NaN()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.LogMetrics(Metrics{"reward": 1}); err == nil {
		t.Error("metrics without a step must be refused")
	}
	if err := w.LogEval(EvalRecord{Step: 3, Split: Dev, EvalResult: EvalResult{N: 10, Success: 0.4}}); err != nil {
		t.Fatal(err)
	}
	ep, _ := Play(toyEnv{}, toyTask, toyExpert, Limits{})
	if err := w.SaveTrajectories(3, []*Episode{ep, ep}); err != nil {
		t.Fatal(err)
	}
	if err := w.SaveTrajectories(1, []*Episode{ep}); err != nil {
		t.Fatal(err)
	}
	sum := Summary{Env: "toy", Seed: 1, Steps: 3, Backend: "go", Final: &SplitSummary{DevSuccess: 0.4}, Status: "completed"}
	if err := w.WriteSummary(sum); err != nil {
		t.Fatal(err)
	}
	if _, err := CreateRun(dir, nil, false); err == nil {
		t.Error("an existing run must not be overwritten")
	}

	r, err := OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "run" || r.Config.Env != "toy" || len(r.Metrics) != 3 || len(r.Evals) != 1 || r.Skipped != 0 {
		t.Fatalf("run %+v", r)
	}
	if lr, ok := r.Setting("lr"); !ok || lr != 3e-4 {
		t.Errorf("setting lr %v %v", lr, ok)
	}
	if !reflect.DeepEqual(*r.Summary, sum) {
		t.Errorf("summary %+v", r.Summary)
	}
	steps, vals := r.Series("reward/mean")
	if !reflect.DeepEqual(steps, []float64{1, 2, 3}) || !reflect.DeepEqual(vals, []float64{0.1, 0.2, 0.3}) {
		t.Errorf("series %v %v", steps, vals)
	}
	if _, kl := r.Series("kl"); !math.IsNaN(kl[0]) {
		t.Error("NaN must survive the round trip")
	}
	if got := strings.Join(r.MetricNames(), ","); got != "kl,reward/mean,step" {
		t.Errorf("names %s", got)
	}
	ts, err := r.TrajectorySteps()
	if err != nil || !reflect.DeepEqual(ts, []int{1, 3}) {
		t.Fatalf("trajectory steps %v %v", ts, err)
	}
	eps, err := r.Trajectories(3)
	if err != nil || len(eps) != 2 || !reflect.DeepEqual(eps[0], ep) {
		t.Fatalf("trajectories: %v", err)
	}
	if _, err := r.Trajectories(2); err == nil {
		t.Error("missing step")
	}
}

func TestRunSurvivesTornLines(t *testing.T) {
	dir := t.TempDir()
	w, err := CreateRun(dir, map[string]int{"x": 1}, false)
	if err != nil {
		t.Fatal(err)
	}
	w.LogMetrics(Metrics{"step": 1, "loss": 2})
	// A process killed in the middle of a write leaves a torn last line.
	f, _ := os.OpenFile(filepath.Join(dir, RunMetricsFile), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"step": 2, "lo`)
	f.Close()
	r, err := OpenRun(dir)
	if err != nil || len(r.Metrics) != 1 || r.Skipped != 1 {
		t.Fatalf("torn last line: %v %+v", err, r)
	}
	// Resuming drops the torn line before appending, so new lines are never glued to it.
	w2, err := CreateRun(dir, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	w2.LogMetrics(Metrics{"step": 3})
	r, err = OpenRun(dir)
	if err != nil || len(r.Metrics) != 2 || r.Metrics[1].Step() != 3 || r.Skipped != 0 {
		t.Fatalf("after resume: %v %+v", err, r)
	}
	// A corrupt line in the middle is an error that names the line, never silently dropped.
	os.WriteFile(filepath.Join(dir, RunEvalFile), []byte("{\"step\":1}\nnot json\n{\"step\":2}\n"), 0o644)
	if _, err := OpenRun(dir); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("corrupt middle line: %v", err)
	}
}

func TestOpenRunErrors(t *testing.T) {
	if _, err := OpenRun(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing dir")
	}
	if _, err := OpenRun(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a run directory") {
		t.Errorf("empty dir: %v", err)
	}
	if _, err := CreateRun("", nil, false); err == nil {
		t.Error("empty name")
	}
}

func TestAtomicWriteKeepsOldContentOnFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "summary.json")
	if err := writeFileAtomic(path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	// Renaming over a directory fails after the temporary file is fully written: the old file
	// must be intact and no temporary file left behind.
	if err := writeFileAtomic(dir, []byte("new")); err == nil {
		t.Error("writing over a directory should fail")
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("content %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("leftover files: %v", entries)
	}
}

func TestEvaluateHandComputed(t *testing.T) {
	mk := func(id string, d Difficulty, correct bool, reward float64, turns ...Turn) *Episode {
		term := Answered
		return &Episode{Task: Task{ID: id, Difficulty: d}, Correct: correct, Reward: reward, Turns: turns, Termination: term}
	}
	call := turn(ToolAction("double", "1"), "2", "")
	bad := turn(ToolAction("double", "x"), "error", "bad")
	junk := turn("junk", "invalid action", "")
	ans := turn(AnswerText("2"), "", "")
	eps := []*Episode{
		mk("a", Easy, true, 1, call, ans),
		mk("a", Easy, false, 0.2, ans),
		mk("b", Hard, false, 0, bad, junk, ans),
		mk("b", Hard, false, 0.5, call, ans),
	}
	r, err := Evaluate(eps)
	if err != nil {
		t.Fatal(err)
	}
	want := EvalResult{
		Tasks: 2, N: 4, K: 2,
		Success: 0.25, PassAtK: 0.5, PassAt: map[int]float64{1: 0.25, 2: 0.5}, MeanReward: 1.7 / 4, MeanTurns: 8.0 / 4,
		ToolCallRate: 0.75, MeanToolCalls: 3.0 / 4, ToolErrorRate: 1.0 / 3, InvalidRate: 1.0 / 8,
		SuccessByDifficulty: map[Difficulty]float64{Easy: 0.5, Hard: 0},
		Terminations:        map[Termination]int{Answered: 4},
	}
	if !near(r.MeanReward, want.MeanReward) || !near(r.ToolErrorRate, want.ToolErrorRate) {
		t.Errorf("got %+v", r)
	}
	r.MeanReward, r.ToolErrorRate = want.MeanReward, want.ToolErrorRate
	if !reflect.DeepEqual(r, want) {
		t.Errorf("got  %+v\nwant %+v", r, want)
	}
	if got := fmt.Sprint(r.Difficulties()); got != "[easy hard]" {
		t.Errorf("difficulties %s", got)
	}
	if _, err := Evaluate(nil); err == nil {
		t.Error("no episodes")
	}
	if _, err := Evaluate([]*Episode{{Reward: math.NaN()}}); err == nil {
		t.Error("NaN reward")
	}
}
