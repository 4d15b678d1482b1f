package agrl

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestClearRun(t *testing.T) {
	write := func(path string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A run directory, with files a run does not write (a notebook saved a policy in it): all go.
	run := filepath.Join(t.TempDir(), "run")
	w, err := CreateRun(run, map[string]any{"env": "toy"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.LogMetrics(Metrics{MetricStep: 1}); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(run, RunCheckpointsDir, "ckpt-1", "policy.json"))
	write(filepath.Join(run, "after-step-1", "policy.json"))
	if err := ClearRun(run); err != nil {
		t.Fatal(err)
	}
	if got := names(t, run); len(got) != 0 {
		t.Errorf("left %v", got)
	}
	// The cleared directory takes a new run.
	if _, err := CreateRun(run, map[string]any{"env": "toy"}, false); err != nil {
		t.Errorf("a cleared directory must take a new run: %v", err)
	}

	// A run that failed before writing config.json: only run entries.
	stuck := filepath.Join(t.TempDir(), "stuck")
	for _, p := range []string{RunMetricsFile, ".config.json.tmp-123", filepath.Join(RunTrajectoriesDir, "step-000001.jsonl")} {
		write(filepath.Join(stuck, p))
	}
	if err := os.Mkdir(filepath.Join(stuck, RunCheckpointsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := ClearRun(stuck); err != nil || len(names(t, stuck)) != 0 {
		t.Errorf("stuck run: %v, left %v", err, names(t, stuck))
	}

	// Not a run: nothing is removed.
	other := t.TempDir()
	for _, p := range []string{"notes.txt", RunMetricsFile, filepath.Join("src", "main.go")} {
		write(filepath.Join(other, p))
	}
	err = ClearRun(other)
	if err == nil || !strings.Contains(err.Error(), "not a run directory") || !strings.Contains(err.Error(), "notes.txt") {
		t.Errorf("error %v", err)
	}
	if got := names(t, other); !reflect.DeepEqual(got, []string{RunMetricsFile, "notes.txt", "src"}) {
		t.Errorf("a refused directory changed: %v", got)
	}

	// Missing and empty directories are fine; an empty name is not.
	if err := ClearRun(filepath.Join(t.TempDir(), "missing")); err != nil {
		t.Error(err)
	}
	if err := ClearRun(t.TempDir()); err != nil {
		t.Error(err)
	}
	if err := ClearRun(" "); err == nil {
		t.Error("empty name")
	}
}

func TestFreshRefusesAStartInsideTheRun(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "run", RunCheckpointsDir)
	if err := os.MkdirAll(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	g := NewGRPO().Env(toyEnv{}).Rubric(NewRubric().Add("answer", ExactAnswer, 1)).From(ck).Out(filepath.Join(dir, "run"))
	if err := g.Validate(); err != nil {
		t.Fatalf("without Fresh: %v", err)
	}
	err := g.Fresh(true).Validate()
	if err == nil || !strings.Contains(err.Error(), "inside the run directory") {
		t.Errorf("Fresh with From inside Out: %v", err)
	}
	if err := g.Fresh(true).Out(filepath.Join(dir, "run2")).Validate(); err != nil {
		t.Errorf("From outside Out: %v", err)
	}
	if err := g.Fresh(true).Out(filepath.Join(dir, "run", "..", "runx")).Validate(); err != nil {
		t.Errorf("a sibling whose name starts like the run's: %v", err)
	}
}

// A config.json that is not a run's (another tool's file of the same name) does not make a
// directory of other files clearable.
func TestClearRunNeedsARunsConfig(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{RunConfigFile: `{"port": 8080}`, "main.go": "package main"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := ClearRun(dir); err == nil || !strings.Contains(err.Error(), "not a run directory") {
		t.Errorf("ClearRun on a project directory: %v", err)
	}
	if got := names(t, dir); len(got) != 2 {
		t.Errorf("the refused directory lost files: %v", got)
	}
}
