package agrl

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// fixtureConfigs are the GRPO values whose config.json the untyped format of commit 4701d17
// wrote into testdata/v0 (that commit's Resolved with map fields for policy, optimizer, warm
// start and mixes).
func fixtureConfigs() map[string]GRPO {
	rub := NewRubric().Add("format", WellFormed, 0.2).Add("answer", ExactAnswer, 0.8).Add("turns", TurnCount, 0)
	warm := NewGRPO().Env(toyEnv{}).Rubric(rub).Mix(NewMix(3).Easy(0.5).Medium(0.3).Hard(0.2)).
		Policy(TinyLM().Context(128)).
		WarmStart(SFT().Steps(40).Batch(8).Seed(5), Demo{Name: "expert", Weight: 0.6}, Demo{Name: "guess", Weight: 0.4, After: 0.5}).
		DemoEpisodes(64).DemoMix(NewMix(1).Easy(0.1).Medium(0.3).Hard(0.6)).
		LR(1e-4).Warmup(5).Schedule(CosineLR, 0.1).Temperature(0.5).MaxActionTokens(80).ClipHigh(0.28).
		Steps(4).EvalTasks(8).EvalEvery(2).Seed(7).Out("runs/v0-warmstart")
	from := NewGRPO().Env(toyEnv{maxTurns: 5}).Rubric(rub).From("runs/v0-warmstart/checkpoints").
		KL(0).KLEstimator(K1).AdvantageNorm(NormNone).LossNorm(SeqMean).DynamicSampling(true).MaskTruncated(true).
		Steps(2).Out("runs/v0-from")
	return map[string]GRPO{"v0-warmstart": warm, "v0-from": from}
}

func TestResolvedWritesTheSameConfigJSON(t *testing.T) {
	for name, g := range fixtureConfigs() {
		want, err := os.ReadFile(filepath.Join("testdata", "v0", name, RunConfigFile))
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), name)
		if _, err := CreateRun(dir, g.Resolved(), false); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, RunConfigFile))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: config.json differs from the untyped format's\n got: %s\nwant: %s", name, got, want)
		}
	}
}

func TestOpenRunReadsTheUntypedFormatTyped(t *testing.T) {
	r, err := OpenRun(filepath.Join("testdata", "v0", "v0-warmstart"))
	if err != nil {
		t.Fatal(err)
	}
	c := r.Config
	if c.Env != "toy" || c.Group != 8 || c.Steps != 4 || c.Seed != 7 || c.Temperature != 0.5 || c.ClipHigh != 0.28 ||
		c.MaxActionTokens != 80 || c.MaxTokens != 128 || c.MaxTurns != 3 || c.From != "" {
		t.Errorf("scalars %+v", c)
	}
	if c.KLEstimator != K3 || c.AdvantageNorm != NormStd || c.LossNorm != TokenMean {
		t.Errorf("enums %v %v %v", c.KLEstimator, c.AdvantageNorm, c.LossNorm)
	}
	if want := (LMRecord{Context: 128, Heads: 4, Layers: 2, MLP: 512, Params: 448000, Positions: RoPE, Seed: 7, Vocab: 209, Width: 128}); c.Policy != want {
		t.Errorf("policy %+v, want %+v", c.Policy, want)
	}
	if want := (OptimizerRecord{Name: "adamw", LR: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.01, GradClip: 1,
		Warmup: 5, Schedule: CosineLR, Floor: 0.1}); c.Optimizer != want {
		t.Errorf("optimizer %+v, want %+v", c.Optimizer, want)
	}
	if want := map[Difficulty]float64{Easy: 0.5, Medium: 0.3, Hard: 0.2}; !reflect.DeepEqual(c.Mix, want) {
		t.Errorf("mix %v", c.Mix)
	}
	ws := c.WarmStart
	if ws == nil {
		t.Fatal("no warm start")
	}
	if ws.SFT.Steps != 40 || ws.SFT.Batch != 8 || ws.SFT.Seed != 5 || ws.SFT.Optimizer.LR != 3e-3 || ws.SFT.Optimizer.Warmup != 20 ||
		ws.SFT.Optimizer.Schedule != CosineLR || ws.Episodes != 64 {
		t.Errorf("warm start %+v", ws)
	}
	if want := []DemoRecord{{Name: "expert", Weight: 0.6}, {Name: "guess", Weight: 0.4, After: 0.5}}; !reflect.DeepEqual(ws.Demos, want) {
		t.Errorf("demos %+v", ws.Demos)
	}
	if want := map[Difficulty]float64{Easy: 0.1, Medium: 0.3, Hard: 0.6}; !reflect.DeepEqual(ws.Mix, want) {
		t.Errorf("demo mix %v", ws.Mix)
	}
	if got := c.TaskMix().Fractions(); !reflect.DeepEqual(got, NewMix(3).Easy(0.5).Medium(0.3).Hard(0.2).Fractions()) {
		t.Errorf("task mix %v", got)
	}
	// The same typed value as the builder's, and generic access to any key.
	if want := fixtureConfigs()["v0-warmstart"].Resolved(); !reflect.DeepEqual(c, want) {
		t.Errorf("read back\n%+v\nwant\n%+v", c, want)
	}
	if v, ok := r.Setting("warm_start.sft.steps"); !ok || v != 40.0 {
		t.Errorf("setting warm_start.sft.steps %v %v", v, ok)
	}
	if v, ok := r.Setting("optimizer.schedule"); !ok || v != "cosine" {
		t.Errorf("setting optimizer.schedule %v %v", v, ok)
	}
	if _, ok := r.Setting("optimizer.nope"); ok {
		t.Error("a missing setting")
	}

	from, err := OpenRun(filepath.Join("testdata", "v0", "v0-from"))
	if err != nil {
		t.Fatal(err)
	}
	fc := from.Config
	if fc.From != "runs/v0-warmstart/checkpoints" || fc.WarmStart != nil || fc.KL != 0 || fc.KLEstimator != K1 ||
		fc.AdvantageNorm != NormNone || fc.LossNorm != SeqMean || !fc.DynamicSampling || !fc.MaskTruncated || fc.MaxTurns != 5 ||
		fc.Optimizer.Schedule != ConstantLR {
		t.Errorf("from config %+v", fc)
	}
	if want := fixtureConfigs()["v0-from"].Resolved(); !reflect.DeepEqual(fc, want) {
		t.Errorf("read back\n%+v\nwant\n%+v", fc, want)
	}
}

func TestOpenRunReadsUntypedEvaluations(t *testing.T) {
	r, err := OpenRun(filepath.Join("testdata", "v0", "v0-warmstart"))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Evals) != 5 || r.Skipped != 0 {
		t.Fatalf("%d evals, %d skipped", len(r.Evals), r.Skipped)
	}
	e := r.Evals[0]
	if e.Split != Dev || e.Label != LabelSFT || e.Step != 0 || e.N != 6 || e.Tasks != 6 || e.K != 1 {
		t.Errorf("first record %+v", e)
	}
	if want := map[Difficulty]float64{Easy: 0.5, Medium: 0.5, Hard: 0.5}; !reflect.DeepEqual(e.SuccessByDifficulty, want) {
		t.Errorf("success by difficulty %v", e.SuccessByDifficulty)
	}
	if want := map[Termination]int{Answered: 4, MaxTurnsReached: 2}; !reflect.DeepEqual(e.Terminations, want) {
		t.Errorf("terminations %v", e.Terminations)
	}
	if e.MeanToolCalls != 0 {
		t.Errorf("records written before MeanToolCalls read it as 0, got %v", e.MeanToolCalls)
	}
	// The fixture's successes are step/8 + 0.01 (dev), 0.02 (test), 0.03 (ood).
	check := func(what string, got EvalResult, ok bool, want float64) {
		t.Helper()
		if !ok || got.Success != want {
			t.Errorf("%s: success %v (found %v), want %v", what, got.Success, ok, want)
		}
	}
	got, ok := r.Before(Dev)
	check("Before(dev)", got, ok, 0.01)
	got, ok = r.Before(Test)
	check("Before(test)", got, ok, 0.02)
	got, ok = r.Final(Dev)
	check("Final(dev)", got, ok, 0.51)
	got, ok = r.Final(OOD)
	check("Final(ood)", got, ok, 0.53)
	got, ok = r.Eval(Dev, "")
	check("Eval(dev, training)", got, ok, 0.26)
	got, ok = r.EvalAt(Dev, 2)
	check("EvalAt(dev, 2)", got, ok, 0.26)
	got, ok = r.EvalAt(Dev, 4)
	check("EvalAt(dev, 4)", got, ok, 0.51)
	if _, ok := r.Final(Test); ok {
		t.Error("the fixture has no final test evaluation")
	}
	if _, ok := r.EvalAt(OOD, 2); ok {
		t.Error("no ood evaluation at step 2")
	}
	if dev := r.EvalsOf(Dev); len(dev) != 3 || dev[0].Step != 0 || dev[1].Step != 2 || dev[2].Step != 4 {
		t.Errorf("dev records %+v", dev)
	}
	steps, vals := r.EvalSeries(Dev, func(e EvalResult) float64 { return e.Success })
	if !reflect.DeepEqual(steps, []float64{0, 2, 4}) || !reflect.DeepEqual(vals, []float64{0.01, 0.26, 0.51}) {
		t.Errorf("dev series %v %v", steps, vals)
	}
	before, after := r.BeforeAfter()
	if len(before) != 2 || before[Test].Success != 0.02 || len(after) != 2 || after[OOD].Success != 0.53 {
		t.Errorf("before %v after %v", before, after)
	}
	// before_after.json (the CLI's) keeps split names as keys.
	b, err := json.Marshal(map[string]any{"before": before})
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]map[string]map[string]any
	if err := json.Unmarshal(b, &back); err != nil || back["before"]["test"]["success"] != 0.02 {
		t.Errorf("split keys in JSON: %s (%v)", b, err)
	}
}

// TestEvalRecordJSONUnchanged writes a record and compares it with the untyped format's line.
func TestEvalRecordJSONUnchanged(t *testing.T) {
	lines, err := os.ReadFile(filepath.Join("testdata", "v0", "v0-warmstart", RunEvalFile))
	if err != nil {
		t.Fatal(err)
	}
	first := lines[:bytes.IndexByte(lines, '\n')]
	var rec EvalRecord
	if err := json.Unmarshal(first, &rec); err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	// The only difference: the mean_tool_calls field that the untyped format lacked.
	want := bytes.Replace(first, []byte(`,"tool_error_rate"`), []byte(`,"mean_tool_calls":0,"tool_error_rate"`), 1)
	if !bytes.Equal(got, want) {
		t.Errorf("eval.jsonl line\n got %s\nwant %s", got, want)
	}
	// A record without a split (tables of named results) round-trips.
	b, err := json.Marshal(EvalRecord{Label: "expert"})
	if err != nil {
		t.Fatal(err)
	}
	var back EvalRecord
	if err := json.Unmarshal(b, &back); err != nil || back.Split != 0 || back.Label != "expert" {
		t.Errorf("%s -> %+v (%v)", b, back, err)
	}
}

func TestConfigEnumsReadByName(t *testing.T) {
	var c struct {
		K KLEstimator   `json:"k"`
		A AdvantageNorm `json:"a"`
		L LossNorm      `json:"l"`
		S LRSchedule    `json:"s"`
		P Positions     `json:"p"`
	}
	if err := json.Unmarshal([]byte(`{"k":"k1","a":"none","l":"dr-grpo","s":"linear","p":"learned"}`), &c); err != nil {
		t.Fatal(err)
	}
	if c.K != K1 || c.A != NormNone || c.L != ConstNorm || c.S != LinearLR || c.P != Learned {
		t.Errorf("%+v", c)
	}
	for _, bad := range []string{`{"k":"k2"}`, `{"a":"mean"}`, `{"l":"sum"}`, `{"s":"step"}`, `{"p":"alibi"}`} {
		if err := json.Unmarshal([]byte(bad), &c); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestOpenRunRejectsAConfigOfTheWrongShape(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, RunConfigFile), []byte(`{"group": "eight"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenRun(dir); err == nil {
		t.Error("a config.json whose group is a string")
	}
	if err := os.WriteFile(filepath.Join(dir, RunConfigFile), []byte(`[1, 2]`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenRun(dir); err == nil {
		t.Error("a config.json that is not an object")
	}
}

func TestMetricNamesAreStable(t *testing.T) {
	// The names on disk (metrics.jsonl) that notebooks and older runs rely on.
	for got, want := range map[string]string{
		MetricStep: "step", MetricReward: "reward/mean", MetricRewardStd: "reward/std", MetricSuccess: "success",
		MetricResponseLength: "response_length", MetricTurns: "turns", MetricTruncated: "truncated",
		MetricToolCallRate: "tool_call_rate", MetricToolErrorRate: "tool_error_rate", MetricInvalidRate: "invalid_rate", MetricErrorThenQuit: "error_then_quit",
		MetricFracRewardZeroStd: "frac_reward_zero_std", MetricRefills: "dynamic/refills",
		MetricDroppedGroups: "dynamic/dropped_groups", MetricEpisodes: "episodes", MetricKL: "kl",
		MetricEntropy: "entropy", MetricClipLow: "clip/low", MetricClipHigh: "clip/high", MetricApproxKL: "approx_kl",
		MetricRatioMean: "ratio/mean", MetricRatioDev: "ratio/dev", MetricPGLoss: "pg_loss", MetricLoss: "loss",
		MetricGradNorm: "grad_norm", MetricGradNormMax: "grad_norm_max", MetricLR: "lr", MetricStepSeconds: "time/step_seconds",
		MetricRolloutSeconds: "time/rollout_seconds", MetricUpdateSeconds: "time/update_seconds",
		MetricTokensSampled: "tokens/sampled", MetricTokensTrained: "tokens/trained",
		MetricTokensPerSecond: "tokens_per_second", MetricRewardTerm("format"): "reward/format",
	} {
		if got != want {
			t.Errorf("metric %q, want %q", got, want)
		}
	}
}

func TestSFTProgressETA(t *testing.T) {
	// 10 of 40 steps in 20 s after resuming at step 5: 2 s per step, 30 steps left.
	p := SFTProgress{Stats: StepStats{Step: 15, Loss: 0.5, LR: 1e-3, Tokens: 300, Seconds: 0.5, Metrics: map[string]float64{"accuracy": 0.75}},
		Steps: 45, Elapsed: 20 * time.Second, Resumed: 5}
	if got := p.ETA(); got != 60*time.Second {
		t.Errorf("ETA %v; want 1m0s", got)
	}
	m := p.Metrics()
	if m.Step() != 15 || m[MetricLoss] != 0.5 || m["accuracy"] != 0.75 || m[MetricTokensPerSecond] != 600 || m[MetricLR] != 1e-3 {
		t.Errorf("metrics %v", m)
	}
	if (SFTProgress{Stats: StepStats{Step: 3}, Steps: 3, Elapsed: time.Second}).ETA() != 0 {
		t.Error("ETA at the last step")
	}
}
