package agrl

import (
	"math"
	"strings"
	"testing"
)

// seedRun is a finished run of one seed: test success before → after, per difficulty too, and
// a frac_reward_zero_std curve.
func seedRun(seed uint64, before, after float64, zeroStd []float64) *Run {
	ev := func(label string, s Split, v float64) EvalRecord {
		return EvalRecord{Split: s, Label: label, EvalResult: EvalResult{Success: v, ToolCallRate: v,
			SuccessByDifficulty: map[Difficulty]float64{Easy: v, Medium: v / 2}}}
	}
	r := &Run{Dir: "runs/s", Name: "s", Config: GRPOConfig{Seed: seed}, Summary: &Summary{Seed: seed, WallSeconds: 90}}
	r.Evals = []EvalRecord{ev(LabelSFT, Dev, before), ev(LabelSFT, Test, before), ev(LabelFinal, Dev, after), ev(LabelFinal, Test, after)}
	for i, z := range zeroStd {
		r.Metrics = append(r.Metrics, Metrics{MetricStep: float64(i + 1), MetricFracRewardZeroStd: z})
	}
	return r
}

func TestCompareSeeds(t *testing.T) {
	runs := []*Run{
		seedRun(101, 0.40, 0.90, []float64{1, 1, 0.5, 0.3}),
		seedRun(102, 0.50, 0.80, []float64{1, 1, 0.2, 0.4}),
		seedRun(103, 0.30, 0.95, []float64{1, 1, 0.6, 0.6}),
	}
	st, err := CompareSeeds("calc", runs)
	if err != nil {
		t.Fatal(err)
	}
	test, ok := st.Split(Test)
	if !ok || len(st.Splits) != 2 {
		t.Fatalf("splits %+v", st.Splits)
	}
	// Hand-computed: gains 0.50, 0.30, 0.65: mean 0.48333, sample std 0.17559,
	// half-width 4.303 · 0.17559 / √3 = 0.43623.
	if math.Abs(test.Gain.Mean-0.483333) > 1e-5 || math.Abs(test.Gain.Std-0.175594) > 1e-5 || math.Abs(test.Gain.HalfWidth-0.436226) > 1e-5 {
		t.Errorf("gain %+v", test.Gain)
	}
	if math.Abs(test.Before.Mean-0.4) > 1e-12 || math.Abs(test.After.Mean-0.883333) > 1e-5 {
		t.Errorf("before %+v after %+v", test.Before, test.After)
	}
	// The second half of each run (steps 3–4): 0.4, 0.3, 0.6 → mean 0.4333.
	if math.Abs(st.ZeroStdLate.Mean-0.433333) > 1e-5 || math.Abs(st.Rows[1].ZeroStdLate-0.3) > 1e-12 {
		t.Errorf("zero-std late %+v, rows %+v", st.ZeroStdLate, st.Rows)
	}
	if len(st.TestByDifficulty) != 2 || math.Abs(st.TestByDifficulty[1].Gain.Mean-0.483333/2) > 1e-5 {
		t.Errorf("by difficulty %+v", st.TestByDifficulty)
	}
	md := st.Markdown()
	for _, want := range []string{"calc, 3 seeds (seeds 101, 102, 103)", "| test | 40.0 ± ", "| 48.3 ± 43.6 | [+4.7, +92.0] |", "| 102 | s | 50.0% → 80.0% (+30.0) |", "| medium |", "1m30s"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	// Refused: no runs, an unfinished run, a repeated seed.
	if _, err := CompareSeeds("x", nil); err == nil {
		t.Error("no runs: no error")
	}
	unfinished := seedRun(104, 0.4, 0.9, nil)
	unfinished.Evals = unfinished.Evals[:2]
	if _, err := CompareSeeds("x", []*Run{runs[0], unfinished}); err == nil || !strings.Contains(err.Error(), "no before/after") {
		t.Errorf("unfinished run: %v", err)
	}
	if _, err := CompareSeeds("x", []*Run{runs[0], seedRun(101, 0.1, 0.2, nil)}); err == nil || !strings.Contains(err.Error(), "same seed 101") {
		t.Errorf("repeated seed: %v", err)
	}
}
