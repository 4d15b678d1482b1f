package learn

import (
	"agrl.dev/agrl"
	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/llm"
	"agrl.dev/agrl/llm/agent"
	"agrl.dev/envs/calc"

	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomlx/gomlx/core/tensors"
)

// TestMain removes tinyQwen3's directory when the tests end.
func TestMain(m *testing.M) {
	code := m.Run()
	if tinyDir != "" {
		_ = os.RemoveAll(tinyDir)
	}
	os.Exit(code)
}

// tinyQwen3 writes (once per test binary) a random Qwen3-shaped checkpoint — hidden 64, 2
// layers, 4 query and 2 KV heads, tied embeddings — with the byte-level test tokenizer of
// agrl/llm/agent (vocabulary 312, padded to 320) and a 2048-token context, and returns its
// directory.
func tinyQwen3(t testing.TB) string {
	t.Helper()
	tinyOnce.Do(func() {
		tinyDir, tinyErr = os.MkdirTemp("", "agrl-tiny-qwen3")
		if tinyErr != nil {
			return
		}
		cfg := llm.Tiny(hf.Qwen3)
		cfg.VocabSize, cfg.MaxPositionEmbeddings = 320, 2048
		cfg.BOSTokenID, cfg.EOSTokenIDs = -1, nil
		if tinyErr = llm.WriteRandom(tinyDir, cfg, 1, 1); tinyErr != nil {
			return
		}
		var tok []byte
		if tok, tinyErr = os.ReadFile(filepath.Join("..", "llm", "agent", "testdata", "tokenizer.json")); tinyErr != nil {
			return
		}
		tinyErr = os.WriteFile(filepath.Join(tinyDir, "tokenizer.json"), tok, 0o644)
	})
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyDir
}

var (
	tinyOnce sync.Once
	tinyDir  string
	tinyErr  error
)

// shortActions rewards ending the first action early (1 for an empty action, 0 at 64 bytes or
// more): a target a random model can learn in a few steps, so that the groups carry signal.
func shortActions(ep *agrl.Episode) float64 {
	if len(ep.Turns) == 0 {
		return 0
	}
	return 1 - math.Min(1, float64(len(ep.Turns[0].Text))/64)
}

// pretrainedGRPO trains LoRA adapters of the tiny Qwen3 on calc tasks with a reward for short
// actions.
func pretrainedGRPO(t *testing.T, out string) agrl.GRPO {
	return agrl.NewGRPO().Env(calc.New()).
		Rubric(calc.Rubric().Add("short", shortActions, 1)).
		Pretrained(agrl.Pretrained(tinyQwen3(t)).LoRA(4, 8).MicroBatch(4)).
		Group(4).TasksPerStep(2).LR(2e-2).KL(0.05).MaxTurns(2).MaxActionTokens(12).Temperature(1).
		EvalTasks(4).EvalEvery(0).TrajectoriesEvery(1).CheckpointEvery(1).Steps(3).Seed(3).Out(out)
}

// TestPretrainedGRPO: GRPO with LoRA on a pretrained-format checkpoint, end to end on calc —
// finite losses, gradients that reach only the adapters (every base weight bit-identical after
// training, the adapters moved), a complete run directory whose checkpoints are PEFT adapters,
// and a run stopped after step 1 and resumed that ends bit-identical to one that did not stop.
func TestPretrainedGRPO(t *testing.T) {
	dir := t.TempDir()
	tr, res := trainFinite(t, pretrainedGRPO(t, filepath.Join(dir, "straight")), 3)
	signal := false
	for _, m := range res.History {
		signal = signal || m[agrl.MetricFracRewardZeroStd] < 1
	}
	if !signal {
		t.Fatal("no group carried signal: the test's reward does not vary")
	}
	if r := res.History[0]["ratio/mean"]; math.Abs(r-1) > 1e-6 {
		t.Errorf("first minibatch ratio/mean %v, want exactly 1", r)
	}
	if res.History[0][agrl.MetricKL] > 1e-6 {
		t.Errorf("KL to the base at step 1 = %v, want 0 (zero-init adapters)", res.History[0][agrl.MetricKL])
	}
	if res.History[2][agrl.MetricKL] <= 0 {
		t.Errorf("KL to the base after two updates = %v, want > 0", res.History[2][agrl.MetricKL])
	}
	// Every step's record re-derives its logged loss metrics (the inspector on a LoRA run).
	for step := 1; step <= 3; step++ {
		s, err := agrl.InspectStep(filepath.Join(dir, "straight"), step)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Check(1e-5); err != nil {
			t.Error(err)
		}
		if len(s.Record.Pieces) == 0 {
			t.Errorf("step %d: no token pieces", step)
		}
	}

	// Gradients only on the adapters: the base weights are the checkpoint's, bit for bit.
	pre := tr.Pretrained()
	base, err := llm.Load(tinyQwen3(t))
	if err != nil {
		t.Fatal(err)
	}
	want := base.Weights()
	for _, v := range pre.Graph().BaseVariables() {
		name := strings.TrimPrefix(v.Path(), pretrainedScope+"/base/")
		val, _ := v.Value()
		got := tensors.MustCopyFlatData[float32](val)
		w := want[name]
		if strings.HasSuffix(name, "_proj.weight") { // stored transposed
			dims := v.Shape().Dimensions
			w = transposeF32(w, dims[1], dims[0])
		}
		if !reflect.DeepEqual(got, w) {
			t.Fatalf("base weight %s changed in training", name)
		}
	}
	a, err := pre.Adapters()
	if err != nil {
		t.Fatal(err)
	}
	moved := 0.0
	for _, p := range a.Params() {
		if strings.Contains(p.Name, "lora_B") {
			for _, x := range p.Data {
				moved = math.Max(moved, math.Abs(float64(x)))
			}
		}
	}
	if moved == 0 {
		t.Fatal("the adapters' B matrices are still zero after training")
	}

	// Saving back: the merged model computes what the base with the adapters computes.
	merged := filepath.Join(dir, "merged")
	if err := pre.SaveMerged(merged, hf.F32); err != nil {
		t.Fatal(err)
	}
	mm, err := llm.Load(merged)
	if err != nil {
		t.Fatal(err)
	}
	adapted, err := base.WithAdapters(a)
	if err != nil {
		t.Fatal(err)
	}
	ids := []int32{297, 72, 105, 33, 298, 10, 40}
	wantLogits, _ := adapted.Logits(ids)
	gotLogits, err := mm.Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i := range wantLogits {
		for j := range wantLogits[i] {
			worst = math.Max(worst, math.Abs(float64(wantLogits[i][j]-gotLogits[i][j])))
		}
	}
	if worst > 1e-4 {
		t.Errorf("merged model's logits differ from base+adapters by %g", worst)
	}

	// The run directory.
	run, err := agrl.OpenRun(filepath.Join(dir, "straight"))
	if err != nil {
		t.Fatal(err)
	}
	if run.Summary == nil || run.Summary.Status != "completed" || run.Summary.SFT == nil || run.Summary.Final == nil {
		t.Fatalf("summary %+v: want completed, with the start's and the final evaluations", run.Summary)
	}
	var cfg agrl.GRPOConfig
	if err := json.Unmarshal(run.ConfigJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Pretrained == nil || cfg.Pretrained.Architecture != "Qwen3ForCausalLM" || cfg.Pretrained.Rank != 4 {
		t.Fatalf("config.json pretrained = %+v", cfg.Pretrained)
	}
	ck := Checkpoints(filepath.Join(dir, "straight", "checkpoints"))
	if len(ck) == 0 {
		t.Fatal("no checkpoint")
	}
	for _, f := range []string{"adapter_config.json", "adapter_model.safetensors", optimizerFile, policyFile} {
		if _, err := os.Stat(filepath.Join(ck[0], f)); err != nil {
			t.Errorf("checkpoint: %v", err)
		}
	}
	peft, err := llm.LoadAdapters(ck[0], base) // PEFT's format, read back by the reference loader
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range peft.Params() {
		if !reflect.DeepEqual(p.Data, a.Params()[i].Data) {
			t.Fatalf("checkpoint adapter %s differs from the trained one", p.Name)
		}
	}
	if _, err := LoadPolicy(filepath.Join(dir, "straight", "checkpoints"), ""); err == nil || !strings.Contains(err.Error(), "pretrained") {
		t.Errorf("LoadPolicy of a pretrained checkpoint: %v, want an error naming it", err)
	}

	// Resume: stop after step 1, run the same configuration again.
	tr2 := resumedAfterStep1(t, pretrainedGRPO(t, filepath.Join(dir, "resumed")), res.History)
	a2, err := tr2.Pretrained().Adapters()
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range a2.Params() {
		if !reflect.DeepEqual(p.Data, a.Params()[i].Data) {
			t.Fatalf("resumed adapter %s differs from the uninterrupted run's", p.Name)
		}
	}
}

// trainFinite builds and trains g, checks that it logged steps steps and that every step's
// loss, gradient norm, KL and entropy are finite, and returns the trainer and its result.
func trainFinite(t *testing.T, g agrl.GRPO, steps int) (*GRPOTrainer, *TrainResult) {
	t.Helper()
	tr, res := buildAndTrain(t, g)
	if len(res.History) != steps {
		t.Fatalf("%d steps logged, want %d", len(res.History), steps)
	}
	for _, m := range res.History {
		for _, k := range []string{agrl.MetricLoss, agrl.MetricGradNorm, agrl.MetricKL, agrl.MetricEntropy} {
			if bad(m[k]) {
				t.Errorf("step %v: %s = %v", m.Step(), k, m[k])
			}
		}
	}
	return tr, res
}

// resumedAfterStep1 runs g until step 1 and stops it, resumes it (checking that it resumes at
// step 1), trains it to the end and checks that its history equals want, the history of the
// same run uninterrupted; it returns the resumed trainer.
func resumedAfterStep1(t *testing.T, g agrl.GRPO, want []agrl.Metrics) *GRPOTrainer {
	t.Helper()
	trainUntil(t, g, 1)
	tr, err := Build(g)
	if err != nil {
		t.Fatal(err)
	}
	if tr.StepNumber() != 1 {
		t.Fatalf("resumed at step %d, want 1", tr.StepNumber())
	}
	res, err := tr.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sameHistories(t, want, res.History, [2]string{"straight", "resumed"})
	return tr
}

func transposeF32(w []float32, rows, cols int) []float32 {
	out := make([]float32, len(w))
	for r := range rows {
		for c := range cols {
			out[c*rows+r] = w[r*cols+c]
		}
	}
	return out
}

// TestPretrainedScoreMatchesSampler: the scorers' log-probs of sampled episodes equal those
// the host sampler recorded (adapters on, after an update) — the host scorer's bit for bit,
// the graph's to 1e-4 — and the base view scores the base model.
func TestPretrainedScoreMatchesSampler(t *testing.T) {
	p, err := LoadPretrained(agrl.Pretrained(tinyQwen3(t)).LoRA(4, 8).MicroBatch(3), 5)
	if err != nil {
		t.Fatal(err)
	}
	withRandomAdapters(t, p) // the view with adapters differs from the base
	samplerMatchesScorer(t, p)
}

// samplerMatchesScorer plays 4 calc episodes with p and checks that the scorer's log-probs of
// the sampled tokens equal the sampler's to 1e-4 and that the base view's differ (p's
// trainable weights are not the base's). Where p scores on the host it checks the graph too:
// the host's log-probs are the sampler's bit for bit, and the two scorers agree to 1e-4 in
// log-probs and entropies at every position, for the policy and its base view. It returns the
// episodes and the base view's scores from the graph.
func samplerMatchesScorer(t *testing.T, p *PretrainedPolicy) ([]*agrl.Episode, []TokenScores) {
	t.Helper()
	eps := calcRollout(t, p)
	passes := []bool{false, true} // the host scorer, then the graph's
	if !p.hostScoring() {
		passes = []bool{true}
	}
	var scores, baseScores []TokenScores
	for _, graph := range passes {
		p.graphScoring = graph
		s, err := p.Score(tokensOf(eps), 0.9)
		if err != nil {
			t.Fatal(err)
		}
		bs, err := p.BaseModel().Score(tokensOf(eps), 0.9)
		p.graphScoring = false
		if err != nil {
			t.Fatal(err)
		}
		differs := false
		for i, ep := range eps {
			for j := 1; j < len(ep.Tokens); j++ {
				if ep.LossMask[j] == 0 {
					continue
				}
				if d := math.Abs(float64(s[i].LogProbs[j-1] - ep.LogProbs[j])); d > 1e-4 || (!graph && d != 0) {
					t.Fatalf("graph scorer %v: episode %d token %d: scorer %v, sampler %v", graph, i, j, s[i].LogProbs[j-1], ep.LogProbs[j])
				}
				differs = differs || math.Abs(float64(bs[i].LogProbs[j-1]-ep.LogProbs[j])) > 1e-3
			}
		}
		if !differs {
			t.Fatal("the base view scores like the trained model")
		}
		if scores != nil { // the host's, then the graph's
			for i := range eps {
				for _, pair := range [][2][]float32{{scores[i].LogProbs, s[i].LogProbs}, {scores[i].Entropy, s[i].Entropy},
					{baseScores[i].LogProbs, bs[i].LogProbs}, {baseScores[i].Entropy, bs[i].Entropy}} {
					if len(pair[0]) != len(pair[1]) {
						t.Fatalf("episode %d: %d host scores, %d graph scores", i, len(pair[0]), len(pair[1]))
					}
					for j := range pair[0] {
						if d := math.Abs(float64(pair[0][j] - pair[1][j])); d > 1e-4 {
							t.Fatalf("episode %d position %d: host %v, graph %v", i, j, pair[0][j], pair[1][j])
						}
					}
				}
			}
		}
		scores, baseScores = s, bs
	}
	return eps, baseScores
}

// calcRollout plays 4 calc dev tasks with p at temperature 0.9 (seed 2, two turns of at most
// 10 tokens): the episodes the sampler/scorer checks score at that temperature.
func calcRollout(t *testing.T, p *PretrainedPolicy) []*agrl.Episode {
	t.Helper()
	env := calc.New()
	tasks, err := agrl.NewMix(4).Tasks(env, agrl.Dev, 4)
	if err != nil {
		t.Fatal(err)
	}
	opt := agrl.RolloutOptions{Sampling: agrl.Sampling{Temperature: 0.9, Seed: 2, MaxActionTokens: 10}, Limits: agrl.Limits{MaxTurns: 2}}
	eps, _, err := p.Rollout(env, tasks, opt)
	if err != nil {
		t.Fatal(err)
	}
	return eps
}

// TestPretrainedLoRADropout: with lora_dropout the learner's steps draw masks on the adapter
// term only (at step 1, whose B matrices are zero, the loss and KL equal those without dropout
// but the gradient, which flows through drop(x)·A into B, differs; step 2's loss differs), the
// masks follow from the seed and the step (a run stopped after step 1 and resumed ends
// bit-identical), and the step records say that they cannot re-derive the loss.
func TestPretrainedLoRADropout(t *testing.T) {
	dir := t.TempDir()
	withDropout := func(out string, d float64) agrl.GRPO {
		return pretrainedGRPO(t, out).Pretrained(agrl.Pretrained(tinyQwen3(t)).LoRA(4, 8).MicroBatch(4).Dropout(d)).Steps(2)
	}
	run := func(g agrl.GRPO) []agrl.Metrics { return train(t, g).History }
	plain := run(withDropout(filepath.Join(dir, "plain"), 0))
	straight := run(withDropout(filepath.Join(dir, "straight"), 0.3))
	for _, k := range []string{agrl.MetricLoss, agrl.MetricKL} {
		if plain[0][k] != straight[0][k] {
			t.Errorf("step 1 (B zero: the adapter term is 0 with or without a mask) %s: %v with dropout, %v without", k, straight[0][k], plain[0][k])
		}
	}
	if plain[0][agrl.MetricGradNorm] == straight[0][agrl.MetricGradNorm] {
		t.Error("step 1: the same gradient norm with and without dropout (B's gradient is (drop(x)·A)ᵀ·∂y)")
	}
	if plain[1][agrl.MetricLoss] == straight[1][agrl.MetricLoss] {
		t.Error("step 2: the same loss with and without dropout")
	}
	for i, m := range straight {
		if bad(m[agrl.MetricLoss]) || bad(m[agrl.MetricGradNorm]) {
			t.Errorf("step %d: loss %v grad norm %v", i+1, m[agrl.MetricLoss], m[agrl.MetricGradNorm])
		}
	}
	s, err := agrl.InspectStep(filepath.Join(dir, "straight"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(1e-5); err == nil || !strings.Contains(err.Error(), "dropout") {
		t.Errorf("Check of a step trained with dropout: %v, want an error naming dropout", err)
	}
	if p, err := agrl.InspectStep(filepath.Join(dir, "plain"), 2); err != nil || p.Check(1e-5) != nil {
		t.Errorf("the run without dropout: %v / %v", err, p.Check(1e-5))
	}

	g := withDropout(filepath.Join(dir, "resumed"), 0.3)
	trainUntil(t, g, 1)
	resumed := run(g)
	sameHistories(t, straight, resumed, [2]string{"straight", "resumed"})
}

// TestPretrainedWarmStart: a warm start in the model's own chat format — the expert's calc
// episodes encoded as the model's rollouts lay them out (agent.Policy.Demonstration), SFT on
// the adapters — learns the native tool calls (token accuracy up, loss down); demonstrations
// the format cannot write (giving up: an empty answer) are left out and said so; GRPO's KL
// reference is then the warm-started policy (KL 0 at the first step; the base would not give
// 0), saved with the checkpoints and read back by a resumed run, which ends bit-identical; a
// run whose reference went missing refuses to resume past the warm start.
func TestPretrainedWarmStart(t *testing.T) {
	dir := t.TempDir()
	g := func(out string) agrl.GRPO {
		quitter := agrl.AgentFunc(func(*agrl.Episode) (string, error) { return agrl.AnswerText(""), nil })
		return pretrainedGRPO(t, out).WarmStart(agrl.SFT().Steps(20).Batch(4).Optimizer(agrl.NewAdamW().LR(2e-2)),
			agrl.Demo{Name: "expert", Agent: calc.Expert(), Weight: 0.9}, agrl.Demo{Name: "quit", Agent: quitter, Weight: 0.1}).
			DemoEpisodes(64).Steps(2)
	}
	var sft []agrl.StepStats
	var said []string
	tr, err := Build(g(filepath.Join(dir, "straight")).OnSFTStep(func(p agrl.SFTProgress) { sft = append(sft, p.Stats) }).
		Progress(func(s string) { said = append(said, s) }))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(sft) != 20 {
		t.Fatalf("%d SFT steps reported, want 20", len(sft))
	}
	first, last := sft[0], sft[len(sft)-1]
	t.Logf("SFT: nll %.3f → %.3f, token accuracy %.3f → %.3f", first.Metrics["nll"], last.Metrics["nll"], first.Metrics["accuracy"], last.Metrics["accuracy"])
	if !(last.Metrics["nll"] < 0.6*first.Metrics["nll"]) || !(last.Metrics["accuracy"] > first.Metrics["accuracy"]+0.3) {
		t.Errorf("SFT did not learn the native calls: nll %.3f → %.3f, accuracy %.3f → %.3f",
			first.Metrics["nll"], last.Metrics["nll"], first.Metrics["accuracy"], last.Metrics["accuracy"])
	}
	if kl := res.History[0][agrl.MetricKL]; kl > 1e-6 {
		t.Errorf("KL to the reference at the first GRPO step = %v, want 0 (the reference is the warm start)", kl)
	}
	if _, err := os.Stat(filepath.Join(dir, "straight", "checkpoints", "reference", "adapter_model.safetensors")); err != nil {
		t.Errorf("the reference adapters were not saved: %v", err)
	}
	if !strings.Contains(strings.Join(said, "\n"), "demonstrations left out: the policy's format cannot write them") {
		t.Errorf("the give-up demonstrations were not reported as left out:\n%s", strings.Join(said, "\n"))
	}

	// Resume after the first GRPO step: the reference comes back from disk.
	rg := g(filepath.Join(dir, "resumed"))
	trainUntil(t, rg, 1)
	res2 := train(t, rg)
	sameHistories(t, res.History, res2.History, [2]string{"straight", "resumed"})

	if err := os.RemoveAll(filepath.Join(dir, "resumed", "checkpoints", "reference")); err != nil {
		t.Fatal(err)
	}
	if _, err := trainErr(t, g(filepath.Join(dir, "resumed")).Steps(3)); err == nil || !strings.Contains(err.Error(), "KL reference") {
		t.Errorf("resuming at step 2 without the reference: %v, want an error naming it", err)
	}
}

// trainErr builds and trains g, returning Train's error.
func trainErr(t *testing.T, g agrl.GRPO) (*TrainResult, error) {
	t.Helper()
	tr, err := Build(g)
	if err != nil {
		return nil, err
	}
	return tr.Train(context.Background())
}

// TestPretrainedSharesProjections: on the go backend (its buffers live in Go memory) the
// sampler's model holds no weights of its own: every base tensor is the GoMLX store's memory
// (the projections as the store's [in, out] transposes), and sampling still agrees bit for bit
// with a fresh model that holds its own.
func TestPretrainedSharesProjections(t *testing.T) {
	p, err := LoadPretrained(agrl.Pretrained(tinyQwen3(t)).LoRA(4, 8), 5)
	if err != nil {
		t.Fatal(err)
	}
	vars := p.Graph().BaseVariables()
	if got := p.base.Shared(); len(got) != len(vars) || len(vars) == 0 {
		t.Fatalf("the sampler shares %d tensors of the store's %d: %v", len(got), len(vars), got)
	}
	host := p.base.WeightsView()
	for _, v := range vars {
		name := strings.TrimPrefix(v.Path(), pretrainedScope+"/base/")
		val, _ := v.Value()
		var store []float32
		val.MustConstFlatData(func(flat any) { store = flat.([]float32) })
		if strings.HasSuffix(name, "_proj.weight") {
			continue // held transposed: WeightsView transposes it back into a new slice
		}
		if &host[name][0] != &store[0] {
			t.Errorf("%s: the sampler's tensor is not the store's memory", name)
		}
	}
	// The same greedy episodes as a model loaded without sharing (its own transposed copies).
	m, err := llm.Load(tinyQwen3(t))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := agent.New(m, p.agent.Tokenizer(), p.agent.Format())
	if err != nil {
		t.Fatal(err)
	}
	env := calc.New()
	tasks, err := agrl.NewMix(3).Tasks(env, agrl.Dev, 2)
	if err != nil {
		t.Fatal(err)
	}
	opt := agrl.RolloutOptions{Sampling: agrl.Sampling{MaxActionTokens: 8}, Limits: agrl.Limits{MaxTurns: 2}}
	a, _, err := p.Rollout(env, tasks, opt)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := ref.Rollout(env, tasks, opt)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if !slices.Equal(a[i].Tokens, b[i].Tokens) || !slices.Equal(a[i].LogProbs, b[i].LogProbs) {
			t.Fatalf("task %d: the sharing policy samples other tokens or log-probs than a fresh model", i)
		}
	}
}

// On the go backend a micro-batch takes fewer sequences when they are long: at the
// SmolLM2-135M shape (MicroBatch 8) 8 of 64 positions, 4 of 256, 3 of 320, 2 of 512, 1 of
// 1,024 or more, each call within goCallBudget; from 1,024 positions even one sequence's
// whole graph would exceed it, and training goes segment by segment (at the Qwen3-0.6B shape
// from 448). Another backend keeps MicroBatch and the whole graph. chunks splits a batch in
// order by the width of each micro-batch's longest sequence.
func TestCallRows(t *testing.T) {
	cfg, err := llm.Shape("smollm2-135m")
	if err != nil {
		t.Fatal(err)
	}
	p := &PretrainedPolicy{spec: agrl.Pretrained("x").MicroBatch(8).Spec(), cfg: cfg, goBackend: true}
	for _, c := range []struct{ width, rows int }{{64, 8}, {256, 4}, {320, 3}, {512, 2}, {1024, 1}, {2048, 1}} {
		if got := p.callRows(c.width); got != c.rows {
			t.Errorf("width %d: %d rows, want %d", c.width, got, c.rows)
		}
		if c.rows > 1 && float64(c.rows)*callRowBytes(cfg, c.width) > goCallBudget {
			t.Errorf("width %d: %d rows estimated past the budget", c.width, c.rows)
		}
		if want := c.width >= 1024; p.segmented(c.width) != want {
			t.Errorf("width %d: segmented %v, want %v", c.width, !want, want)
		}
	}
	qwen, err := llm.Shape("qwen3-0.6b")
	if err != nil {
		t.Fatal(err)
	}
	q := &PretrainedPolicy{spec: p.spec, cfg: qwen, goBackend: true}
	if q.segmented(384) || !q.segmented(448) {
		t.Errorf("Qwen3-0.6B shape: segmented at 384 %v, at 448 %v; want false, true", q.segmented(384), q.segmented(448))
	}
	// CallMemory(16): 4 times the budget, 4 times the rows (at most MicroBatch); whole graphs
	// up to 2,048 positions (estimated 13.1 GB), segmented from 2,560.
	big := &PretrainedPolicy{spec: agrl.Pretrained("x").MicroBatch(8).CallMemory(16).Spec(), cfg: cfg, goBackend: true}
	for _, c := range []struct{ width, rows int }{{256, 8}, {512, 8}, {1024, 3}, {2048, 1}} {
		if got := big.callRows(c.width); got != c.rows {
			t.Errorf("CallMemory(16), width %d: %d rows, want %d", c.width, got, c.rows)
		}
	}
	if big.segmented(2048) || !big.segmented(2560) {
		t.Errorf("CallMemory(16): segmented at 2,048 %v, at 2,560 %v; want false, true", big.segmented(2048), big.segmented(2560))
	}
	seq := func(n int) []int32 { return make([]int32, n) }
	// 3 short ones, which a 300 (width 320: 3 rows) cannot join; the 300 and a 600 (width 640:
	// 1 row) each alone; then 500 and 480 (width 512: 2 rows); then 9 short ones (8, then 1).
	seqs := [][]int32{seq(40), seq(50), seq(60), seq(300), seq(600), seq(500), seq(480)}
	for range 9 {
		seqs = append(seqs, seq(30))
	}
	want := [][2]int{{0, 3}, {3, 4}, {4, 5}, {5, 7}, {7, 15}, {15, 16}}
	if got := p.chunks(seqs); !slices.Equal(got, want) {
		t.Errorf("chunks %v, want %v", got, want)
	}
	// A call computes as many rows as it has sequences, rounded up to a power of two, at most
	// callRows: the chunks above compute 4 (3 sequences), 1, 1, 2, 8 and 1 rows.
	for _, c := range []struct{ n, width, rows int }{{3, 64, 4}, {1, 320, 1}, {2, 320, 2}, {3, 320, 3}, {1, 640, 1}, {2, 512, 2}, {8, 64, 8}, {1, 64, 1}, {5, 64, 8}, {2, 256, 2}, {3, 256, 4}} {
		if got := p.padRows(c.n, c.width); got != c.rows {
			t.Errorf("%d sequences of width %d: %d rows, want %d", c.n, c.width, got, c.rows)
		}
	}
	p.goBackend = false
	if got := p.padRows(1, 64); got != 8 {
		t.Errorf("another backend: 1 sequence padded to %d rows, want MicroBatch (8)", got)
	}
	if got := p.callRows(2048); got != 8 || p.segmented(2048) {
		t.Errorf("another backend: %d rows at width 2048 (want MicroBatch), segmented %v", got, p.segmented(2048))
	}
	if got := p.chunks(seqs); !slices.Equal(got, [][2]int{{0, 8}, {8, 16}}) {
		t.Errorf("another backend: chunks %v", got)
	}
}

// TestPadRowsSameStep: how a batch is cut into calls and how many padding rows each call
// computes changes nothing but rounding. Three sequences trained in one call of 4 rows
// (MicroBatch 8: the sequences rounded up to a power of two), one of 3 (MicroBatch 3) and
// three calls of one row (MicroBatch 1) give the same loss, metrics and gradients, for two
// steps, with LoRA and with full fine-tuning; and the call of four rows is what pad lays out.
// A fourth policy (MicroBatch 2) trains the batch in another order than a fifth: Step orders
// a batch shortest first (byLength), so their losses and gradients are equal bit for bit.
func TestPadRowsSameStep(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(map[bool]string{false: "lora", true: "full"}[full], func(t *testing.T) {
			dir := tinyFamily(t, hf.Qwen3)
			var runs []*recordedRun
			for _, micro := range []int{8, 3, 1, 2, 2} {
				spec := agrl.Pretrained(dir).MicroBatch(micro)
				if full {
					spec = spec.Full()
				} else {
					spec = spec.LoRA(4, 8)
				}
				p, err := LoadPretrained(spec, 5)
				if err != nil {
					t.Fatal(err)
				}
				if !full {
					withRandomAdapters(t, p)
				}
				runs = append(runs, newRecordedRun(t, p, 1e-2))
			}
			batch := segTestBatch(320, 30, 45, 12)
			if _, _, rows, width, err := runs[0].tr.p.pad(batch.Tokens); err != nil || rows != 4 || width != 48 {
				t.Fatalf("MicroBatch 8: 3 sequences in %d rows of width %d (%v), want 4 of 48", rows, width, err)
			}
			// The same sequences in another order: 45 first (in order, micro-batches of
			// widths 48 and 16 rather than 32 and 48).
			reordered := TrainBatch{Tokens: [][]int32{batch.Tokens[1], batch.Tokens[2], batch.Tokens[0]}, Values: map[string][][]float32{}}
			for k, v := range batch.Values {
				reordered.Values[k] = [][]float32{v[1], v[2], v[0]}
			}
			for step := range 2 {
				for i, r := range runs {
					b := batch
					if i == 4 {
						b = reordered
					}
					st, err := r.tr.Step(b)
					if err != nil {
						t.Fatal(err)
					}
					r.stats = append(r.stats, st)
				}
				a, b := runs[3], runs[4]
				if a.stats[step].Loss != b.stats[step].Loss || !reflect.DeepEqual(a.grads[step], b.grads[step]) {
					t.Errorf("step %d: the batch in another order trains otherwise (loss %v, %v)", step+1, a.stats[step].Loss, b.stats[step].Loss)
				}
				for k, r := range runs[1:3] {
					a, b := runs[0].stats[step], r.stats[step]
					near := func(what string, x, y float64) {
						if math.Abs(x-y) > 1e-5*(1+math.Abs(x)) || bad(x) || bad(y) {
							t.Errorf("step %d %s: one call %v, MicroBatch %d %v", step+1, what, x, []int{3, 1}[k], y)
						}
					}
					near("loss", a.Loss, b.Loss)
					for m, v := range a.Metrics {
						near(m, v, b.Metrics[m])
					}
					for i, g := range runs[0].grads[step] {
						worst, scale, _ := gradGap(g, r.grads[step][i])
						if worst > 1e-4*scale || bad(scale) {
							t.Errorf("step %d variable %d: gradients differ by %.3g (largest %.3g) with MicroBatch %d", step+1, i, worst, scale, []int{3, 1}[k])
						}
					}
				}
			}
		})
	}
}

// byLength orders a train batch shortest first, stable where lengths tie, every value row
// moving with its sequence.
func TestByLength(t *testing.T) {
	b := TrainBatch{Tokens: [][]int32{{1, 2, 3}, {4}, {5, 6}, {7}, {8, 9, 10}}, Values: map[string][][]float32{
		"adv":   {{0, 0, 0}, {1}, {2, 2}, {3}, {4, 4, 4}},
		"other": {{9}}, // not a trained value: left out
	}}
	got := byLength(b, []string{"adv"})
	want := [][]int32{{4}, {7}, {5, 6}, {1, 2, 3}, {8, 9, 10}}
	wantAdv := [][]float32{{1}, {3}, {2, 2}, {0, 0, 0}, {4, 4, 4}}
	if !reflect.DeepEqual(got.Tokens, want) || !reflect.DeepEqual(got.Values["adv"], wantAdv) || len(got.Values) != 1 {
		t.Errorf("byLength: tokens %v, values %v", got.Tokens, got.Values)
	}
	if !reflect.DeepEqual(b.Tokens[0], []int32{1, 2, 3}) {
		t.Error("byLength changed its input")
	}
}

// OnPhase is told each phase of a GRPO step as it starts, in order: the rollouts (and each
// episode as it ends), the reference's log-probs (a KL penalty), each optimizer step of the update and, for a
// pretrained policy, each of its micro-batches when done (8 episodes, MicroBatch 2: four).
func TestGRPOStepPhases(t *testing.T) {
	g := pretrainedGRPO(t, t.TempDir()).Pretrained(agrl.Pretrained(tinyQwen3(t)).LoRA(4, 8).MicroBatch(2)).Minibatches(2)
	tr, err := Build(g)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var got []string
	var last time.Duration
	tr.OnPhase(func(ph agrl.StepPhase) {
		if ph.Step != 1 || ph.Elapsed < last {
			t.Errorf("phase %q of step %d at %v, after %v", ph.What, ph.Step, ph.Elapsed, last)
		}
		last = ph.Elapsed
		got = append(got, ph.What)
	})
	if _, err := tr.Step(); err != nil {
		t.Fatal(err)
	}
	want := []string{"rollouts: 8 episodes"}
	for i := 1; i <= 8; i++ {
		want = append(want, fmt.Sprintf("rollouts: %d of 8 episodes done", i))
	}
	want = append(want, "reference log-probs: 8 episodes",
		"update 1/2", "update 1/2: micro-batch 1 of 2 done", "update 1/2: micro-batch 2 of 2 done",
		"update 2/2", "update 2/2: micro-batch 1 of 2 done", "update 2/2: micro-batch 2 of 2 done")
	if !slices.Equal(got, want) {
		t.Errorf("phases:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestEvaluationPhases: the evaluations of a run tell OnPhase of each episode as it ends —
// before training, during it (EvalEvery, dev only) and after it — each split's count from 1
// to its tasks, with the time since the split began.
func TestEvaluationPhases(t *testing.T) {
	g := pretrainedGRPO(t, t.TempDir()).Steps(2).EvalEvery(1).CheckpointEvery(0)
	tr, err := Build(g)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var last time.Duration
	tr.OnPhase(func(ph agrl.StepPhase) {
		if strings.HasPrefix(ph.What, "evaluation") != ph.Evaluation {
			t.Errorf("%q: Evaluation %v", ph.What, ph.Evaluation)
		}
		if !ph.Evaluation {
			return
		}
		if strings.HasSuffix(ph.What, ": 1 of 4 episodes done") {
			last = 0
		}
		if ph.Elapsed < last {
			t.Errorf("%q at %v, after %v", ph.What, ph.Elapsed, last)
		}
		last = ph.Elapsed
		got = append(got, fmt.Sprintf("%d %s", ph.Step, ph.What))
	})
	if _, err := tr.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	var want []string
	add := func(step int, when string, splits ...string) {
		for _, s := range splits {
			n := len(tr.Tasks(map[string]agrl.Split{"dev": agrl.Dev, "test": agrl.Test, "ood": agrl.OOD}[s]))
			if n != 4 {
				t.Fatalf("%s has %d tasks, the test expects 4", s, n)
			}
			for i := 1; i <= n; i++ {
				want = append(want, fmt.Sprintf("%d evaluation %s, %s: %d of %d episodes done", step, when, s, i, n))
			}
		}
	}
	add(0, "before training", "dev", "test", "ood")
	add(1, "at step 1", "dev")
	add(2, "after training", "dev", "test", "ood")
	if !slices.Equal(got, want) {
		t.Errorf("phases:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
