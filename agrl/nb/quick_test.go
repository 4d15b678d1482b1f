package nb

import (
	"encoding/json"
	"testing"

	"agrl.dev/envs/calc"
)

func TestBudgetCutsOnlyBudgets(t *testing.T) {
	g := calc.Recipe()
	t.Setenv(QuickEnv, "")
	if a, b := mustJSON(t, Budget(g).Resolved()), mustJSON(t, g.Resolved()); a != b {
		t.Fatalf("Budget changed the configuration outside quick mode:\n%s\n%s", a, b)
	}
	if Sized(48, 12) != 48 {
		t.Error("Sized outside quick mode")
	}
	t.Setenv(QuickEnv, "1")
	q := Budget(g).Resolved()
	if q.Steps != 6 || q.EvalTasks != 16 || q.EvalEvery != 3 || Sized(48, 12) != 12 {
		t.Errorf("quick budgets: steps %d, eval tasks %d every %d", q.Steps, q.EvalTasks, q.EvalEvery)
	}
	// Everything else is the recipe's: undo the budget fields and compare.
	full := g.Resolved()
	q.Steps, q.EvalTasks, q.EvalEvery, q.Trajectories = full.Steps, full.EvalTasks, full.EvalEvery, full.Trajectories
	q.WarmStart, full.WarmStart = nil, nil
	if a, b := mustJSON(t, q), mustJSON(t, full); a != b {
		t.Errorf("quick mode changed more than budgets:\n%s\n%s", a, b)
	}
	ws := Budget(g).Spec()
	if ws.SFT.Spec().Steps != 100 || ws.DemoEpisodes != 512 || len(ws.Demos) != 2 || ws.Demos[1].Name != "guess" {
		t.Errorf("quick warm start: %d steps, %d demos, %+v", ws.SFT.Spec().Steps, ws.DemoEpisodes, ws.Demos)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
