package nb

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"agrl.dev/agrl"
)

func result(success, reward float64) agrl.EvalResult {
	return agrl.EvalResult{Tasks: 10, N: 20, K: 2, Success: success, PassAtK: success + 0.1, MeanReward: reward, MeanTurns: 2,
		ToolCallRate: 0.5, SuccessByDifficulty: map[agrl.Difficulty]float64{agrl.Easy: 1, agrl.Hard: success},
		Terminations: map[agrl.Termination]int{agrl.Answered: 18, agrl.MaxTurnsReached: 2}}
}

func TestEvalTable(t *testing.T) {
	recs := []agrl.EvalRecord{
		{Step: 0, Split: agrl.Dev, Label: agrl.LabelSFT, EvalResult: result(0.25, 0.4)},
		{Step: 100, Split: agrl.Dev, EvalResult: result(0.5, 0.7)},
	}
	out := EvalTableHTML(recs)
	for _, want := range []string{">split<", ">step<", ">100<", ">25.0%<", ">35.0% (k=2)<", ">0.700<", ">success easy<", ">success hard<",
		">answered 18, max_turns 2<"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in %s", want, out)
		}
	}
	if strings.Contains(out, "success medium") {
		t.Error("a difficulty column no row has")
	}
	if strings.Count(out, "<tr>") != 3 {
		t.Error("want a header and two rows")
	}
	named := EvalTableHTML(map[string]agrl.EvalResult{"random": result(0.1, 0.2), "<b>expert</b>": result(1, 1)})
	if strings.Contains(named, "<b>expert") || !strings.Contains(named, "&lt;b&gt;expert") {
		t.Error("labels must be escaped")
	}
	if i, j := strings.Index(named, "expert"), strings.Index(named, "random"); i > j {
		t.Error("map rows must be sorted by name")
	}
	if strings.Contains(named, ">split<") || strings.Contains(named, ">step<") {
		t.Error("empty split and step columns must be left out")
	}
	byName := EvalTableHTML(map[string]agrl.EvalRecord{"final": {Split: agrl.Test, EvalResult: result(0.5, 0.5)}})
	if !strings.Contains(byName, ">final<") || !strings.Contains(byName, ">test<") {
		t.Error("record map")
	}
	bySplit := EvalTableHTML(map[agrl.Split]agrl.EvalResult{agrl.OOD: result(0.1, 0.2), agrl.Dev: result(0.75, 0.8)})
	if i, j := strings.Index(bySplit, ">dev<"), strings.Index(bySplit, ">ood<"); i < 0 || j < i || !strings.Contains(bySplit, ">75.0%<") {
		t.Errorf("rows by split, dev first: %s", bySplit)
	}
	if !strings.Contains(EvalTableHTML([]agrl.EvalRecord(nil)), "no evaluation results") {
		t.Error("empty table")
	}
}

func TestBeforeAfterTable(t *testing.T) {
	before := map[agrl.Split]agrl.EvalResult{agrl.Dev: result(0.3, 0.5), agrl.OOD: result(0.05, 0.1), agrl.Split(9): result(0, 0)}
	after := map[agrl.Split]agrl.EvalResult{agrl.Dev: result(0.6, 0.8), agrl.OOD: result(0.1, 0.2), agrl.Test: result(0.5, 0.7)}
	out := BeforeAfterTableHTML(before, after)
	for _, want := range []string{">+30.0 pt<", ">+0.300<", ">30.0%<", ">60.0%<", ">split(9)<"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in %s", want, out)
		}
	}
	// Order: dev, test, ood, then others; test has no "before": dashes.
	if !(strings.Index(out, ">dev<") < strings.Index(out, ">test<") && strings.Index(out, ">test<") < strings.Index(out, ">ood<") &&
		strings.Index(out, ">ood<") < strings.Index(out, ">split(9)<")) {
		t.Error("split order")
	}
	testRow := out[strings.Index(out, ">test<"):]
	testRow = testRow[:strings.Index(testRow, "</tr>")]
	if strings.Count(testRow, ">–<") != 6 {
		t.Errorf("test row %s: want 6 dashes (4 before values, 2 deltas)", testRow)
	}
}

func TestSweepTableAndRunRow(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "calc-kl0.01")
	w, err := agrl.CreateRun(dir, map[string]any{"grpo": map[string]any{"kl": 0.01, "group": 8}, "lr": 3e-4}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.LogEval(agrl.EvalRecord{Step: 10, Split: agrl.Dev, EvalResult: result(0.2, 0.3)}); err != nil {
		t.Fatal(err)
	}
	if err := w.LogEval(agrl.EvalRecord{Step: 20, Split: agrl.Dev, EvalResult: result(0.4, 0.6)}); err != nil {
		t.Fatal(err)
	}
	run, err := agrl.OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	row := RunRow(run, "grpo.kl", "lr", "missing")
	if row.Name != "calc-kl0.01" || row.Config["grpo.kl"] != 0.01 || row.Config["lr"] != 3e-4 || len(row.Config) != 2 {
		t.Errorf("config %+v", row.Config)
	}
	if row.Results["dev/success"] != 0.4 || row.Results["dev/mean_reward"] != 0.6 {
		t.Errorf("results from the last evaluation: %+v", row.Results)
	}
	if err := w.WriteSummary(agrl.Summary{WallSeconds: 61, Final: &agrl.SplitSummary{DevSuccess: 0.45, OODSuccess: 0.1}, SFT: &agrl.SplitSummary{DevSuccess: 0.2}}); err != nil {
		t.Fatal(err)
	}
	run, _ = agrl.OpenRun(dir)
	row = RunRow(run, "grpo.kl")
	if row.Results["dev_success"] != 0.45 || row.Results["sft/dev_success"] != 0.2 || row.Results["wall_seconds"] != 61 {
		t.Errorf("results from the summary: %+v", row.Results)
	}
	out := SweepTableHTML([]SweepRow{row, {Name: "<i>other</i>", Config: map[string]any{"grpo.kl": 0.04, "note": "x"}, Results: map[string]float64{"dev_success": 0.5}}})
	for _, want := range []string{">run<", ">grpo.kl<", ">note<", ">dev_success<", ">0.450<", ">0.04<", ">0.01<", ">61<", "&lt;i&gt;other", ">–<"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in %s", want, out)
		}
	}
	if !strings.Contains(SweepTableHTML(nil), "no sweep results") {
		t.Error("empty sweep")
	}
	if r := RunRow(nil); r.Name != "" || len(r.Results) != 0 {
		t.Error("nil run")
	}
}

func TestSeedTableHTML(t *testing.T) {
	mk := func(seed uint64, b, a float64) *agrl.Run {
		ev := func(label string, v float64) agrl.EvalRecord {
			return agrl.EvalRecord{Split: agrl.Test, Label: label, EvalResult: agrl.EvalResult{Success: v}}
		}
		return &agrl.Run{Name: fmt.Sprintf("seed-%d", seed), Config: agrl.GRPOConfig{Seed: seed},
			Evals: []agrl.EvalRecord{ev(agrl.LabelSFT, b), ev(agrl.LabelFinal, a)}}
	}
	st, err := agrl.CompareSeeds("calc", []*agrl.Run{mk(1, 0.5, 0.9), mk(2, 0.4, 0.9), mk(3, 0.3, 0.95)})
	if err != nil {
		t.Fatal(err)
	}
	// Gains 0.4, 0.5, 0.65: mean 51.7, half-width 4.303 × 0.1258 / √3 = 31.3 points.
	h := SeedTableHTML(st)
	for _, want := range []string{"calc: 3 seeds", "51.7 ± 31.3", "[+20.4, +82.9]", "seed-2", "40.0% → 90.0%"} {
		if !strings.Contains(h, want) {
			t.Errorf("table lacks %q:\n%s", want, h)
		}
	}
}
