package learn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agrl.dev/agrl"
)

func TestBuildFreshStartsAfresh(t *testing.T) {
	g := tinyGRPO(t).Steps(1).EvalTasks(4).TrajectoriesEvery(0)
	out := g.Spec().Out
	tr, err := Build(g)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Step(); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Policy().Save(tr.Run().CheckpointDir()); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	again, err := Build(g)
	if err != nil {
		t.Fatalf("without Fresh the run resumes: %v", err)
	}
	again.Close()
	tr, err = Build(g.Fresh(true).Seed(4))
	if err != nil {
		t.Fatal(err)
	}
	if tr.StepNumber() != 0 || len(Checkpoints(tr.Run().CheckpointDir())) != 0 {
		t.Errorf("fresh run at step %d with checkpoints %v", tr.StepNumber(), Checkpoints(tr.Run().CheckpointDir()))
	}
	if _, err := os.Stat(filepath.Join(out, agrl.RunMetricsFile)); !os.IsNotExist(err) {
		t.Errorf("metrics.jsonl of the old run: %v", err)
	}
	r, err := agrl.OpenRun(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Config.Seed != 4 || len(r.Metrics) != 0 {
		t.Errorf("config seed %d, %d metrics", r.Config.Seed, len(r.Metrics))
	}

	// A directory that is not a run is refused and left alone.
	other := filepath.Join(t.TempDir(), "notes")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "todo.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(g.Fresh(true).Out(other)); err == nil || !strings.Contains(err.Error(), "not a run directory") {
		t.Errorf("Fresh on a directory of other files: %v", err)
	}
	if _, err := os.Stat(filepath.Join(other, "todo.txt")); err != nil {
		t.Errorf("the refused directory lost its file: %v", err)
	}
}
