package learn

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/llm"
	"agrl.dev/envs/calc"
)

// fullGRPO fully fine-tunes the tiny Qwen3 on calc tasks with a reward for short actions (the
// LoRA test's run, every weight trained).
func fullGRPO(t *testing.T, out string) agrl.GRPO {
	g := pretrainedGRPO(t, out).Pretrained(agrl.Pretrained(tinyQwen3(t)).Full().MicroBatch(4))
	return g.Optimizer(g.Spec().Optimizer.LR(2e-3).WeightDecay(0.1))
}

// TestPretrainedFullFineTuning: GRPO that trains every weight of a pretrained-format
// checkpoint, end to end on calc — finite losses, KL 0 to the frozen copy of the checkpoint at
// the first step and > 0 after updates, every weight moved (norms included) while the
// checkpoint on disk and the reference stay the pretrained model, the sampler's log-probs after
// training equal the scorer's (the host copy follows the store), checkpoints that are Hugging
// Face model directories holding the trained weights bit for bit, LoadModel and SaveMerged,
// and a run stopped after step 1 and resumed that ends bit-identical to one that did not stop.
func TestPretrainedFullFineTuning(t *testing.T) {
	dir := t.TempDir()
	tr, res := trainFinite(t, fullGRPO(t, filepath.Join(dir, "straight")), 3)
	if kl := res.History[0][agrl.MetricKL]; kl > 1e-6 {
		t.Errorf("KL to the pretrained model at step 1 = %v, want 0", kl)
	}
	if kl := res.History[2][agrl.MetricKL]; !(kl > 0) {
		t.Errorf("KL to the pretrained model after two updates = %v, want > 0", kl)
	}
	for step := 1; step <= 3; step++ {
		s, err := agrl.InspectStep(filepath.Join(dir, "straight"), step)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Check(1e-5); err != nil {
			t.Error(err)
		}
	}

	pre := tr.Pretrained()
	if !pre.IsFull() || pre.AdapterParams() != 0 {
		t.Fatalf("IsFull %v, %d adapter params: want a fully fine-tuned policy without adapters", pre.IsFull(), pre.AdapterParams())
	}
	base, err := llm.Load(tinyQwen3(t))
	if err != nil {
		t.Fatal(err)
	}
	want := base.Weights()
	n := 0
	for _, w := range want {
		n += len(w)
	}
	if got := pre.TrainableParams(); got != n {
		t.Errorf("TrainableParams %d, want every weight's %d", got, n)
	}
	trained, err := pre.Graph().BaseWeights()
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		if reflect.DeepEqual(trained[name], w) {
			t.Errorf("weight %s did not change in training", name)
		}
	}
	// The sampler's model holds the trained weights bit for bit (taken in the store's layout).
	pol, err := pre.Agent()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pol.Model().Weights(), trained) {
		t.Fatal("the sampler's weights after training are not the store's")
	}
	// The checkpoint on disk is untouched, and so is the pretrained model the base view scores.
	if again, err := llm.Load(tinyQwen3(t)); err != nil || !reflect.DeepEqual(again.Weights(), want) {
		t.Fatalf("the model directory changed (%v)", err)
	}
	// The checkpoint's host model (the base's rollouts) holds no copy of its own on the go
	// backend: it reads the frozen copy in the store, which training left as it was.
	if got := len(pre.base.Shared()); got != len(want) {
		t.Errorf("the checkpoint's host model shares %d of its %d tensors with the store", got, len(want))
	}
	if !reflect.DeepEqual(pre.base.Weights(), want) {
		t.Error("the checkpoint's host model no longer holds the checkpoint's weights")
	}

	// The sampler samples from the trained weights: its log-probs are the scorer's.
	eps, baseScores := samplerMatchesScorer(t, pre)
	hostBase, err := base.Logits(eps[0].Tokens[:len(eps[0].Tokens)-1])
	if err != nil {
		t.Fatal(err)
	}
	// The base view is the pretrained model: its log-probs are the host model's of the file.
	for j := 1; j < len(eps[0].Tokens); j++ {
		wantLP := logSoftmaxAt(hostBase[j-1], int(eps[0].Tokens[j]), 1/0.9)
		if d := math.Abs(float64(baseScores[0].LogProbs[j-1]) - wantLP); d > 1e-4 {
			t.Fatalf("base view token %d: %v, the checkpoint's %v", j, baseScores[0].LogProbs[j-1], wantLP)
		}
	}

	// Checkpoints are model directories of the trained weights, and need no reference copy.
	ck := Checkpoints(filepath.Join(dir, "straight", "checkpoints"))
	if len(ck) == 0 {
		t.Fatal("no checkpoint")
	}
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", optimizerFile, policyFile} {
		if _, err := os.Stat(filepath.Join(ck[0], f)); err != nil {
			t.Errorf("checkpoint: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(ck[0], "adapter_model.safetensors")); err == nil {
		t.Error("a full fine-tuning checkpoint holds adapters")
	}
	if _, err := os.Stat(filepath.Join(dir, "straight", "checkpoints", "reference")); err == nil {
		t.Error("a reference was saved for a run whose reference is the model directory")
	}
	onDisk, err := llm.Load(ck[0])
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(onDisk.Weights(), trained) {
		t.Fatal("the checkpoint's weights differ from the trained ones")
	}
	var cfg agrl.GRPOConfig
	run, err := agrl.OpenRun(filepath.Join(dir, "straight"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(run.ConfigJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Pretrained == nil || !cfg.Pretrained.Full || cfg.Pretrained.Rank != 0 {
		t.Fatalf("config.json pretrained = %+v, want full fine-tuning", cfg.Pretrained)
	}
	m, err := LoadModel(filepath.Join(dir, "straight", "checkpoints"), "")
	if err != nil {
		t.Fatal(err)
	}
	if lp, ok := m.(*PretrainedPolicy); !ok || !lp.IsFull() {
		t.Fatalf("LoadModel gave %T, want a fully fine-tuned policy", m)
	}
	if _, err := pre.Adapters(); err == nil || !strings.Contains(err.Error(), "no LoRA adapters") {
		t.Errorf("Adapters of a fully fine-tuned policy: %v", err)
	}
	merged := filepath.Join(dir, "merged")
	if err := pre.SaveMerged(merged, hf.F32); err != nil {
		t.Fatal(err)
	}
	if mm, err := llm.Load(merged); err != nil || !reflect.DeepEqual(mm.Weights(), trained) {
		t.Fatalf("SaveMerged: %v (or other weights)", err)
	}

	// A LoRA checkpoint does not resume a full fine-tuning, nor the other way round.
	if _, err := loadPretrained(agrl.Pretrained(tinyQwen3(t)).LoRA(4, 8), 1, filepath.Join(dir, "straight", "checkpoints"), nil); err == nil ||
		!strings.Contains(err.Error(), "fully fine-tuned") {
		t.Errorf("LoRA policy from a full checkpoint: %v", err)
	}
	lp, err := LoadPretrained(agrl.Pretrained(tinyQwen3(t)).LoRA(4, 8), 1)
	if err != nil {
		t.Fatal(err)
	}
	loraCk := filepath.Join(dir, "lora-checkpoints")
	if _, err := lp.Save(loraCk); err != nil {
		t.Fatal(err)
	}
	if _, err := loadPretrained(agrl.Pretrained(tinyQwen3(t)).Full(), 1, loraCk, nil); err == nil || !strings.Contains(err.Error(), "LoRA adapters") {
		t.Errorf("full fine-tuning from a LoRA checkpoint: %v", err)
	}

	// Resume: stop after step 1, run the same configuration again.
	tr2 := resumedAfterStep1(t, fullGRPO(t, filepath.Join(dir, "resumed")), res.History)
	w2, err := tr2.Pretrained().Graph().BaseWeights()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(w2, trained) {
		t.Fatal("the resumed run's weights differ from the uninterrupted run's")
	}
}

// logSoftmaxAt is log-softmax(z·invT)[k] in float64.
func logSoftmaxAt(z []float32, k int, invT float64) float64 {
	hi := math.Inf(-1)
	for _, v := range z {
		hi = math.Max(hi, float64(v)*invT)
	}
	s := 0.0
	for _, v := range z {
		s += math.Exp(float64(v)*invT - hi)
	}
	return float64(z[k])*invT - hi - math.Log(s)
}

// TestPretrainedFullWarmStart: a warm start that trains every weight, then GRPO whose KL
// reference is the warm-started model — saved once as a model directory in
// checkpoints/reference, read back on resume (bit-identical histories), and required when a
// run resumes past the warm start.
func TestPretrainedFullWarmStart(t *testing.T) {
	dir := t.TempDir()
	g := func(out string) agrl.GRPO {
		return fullGRPO(t, out).WarmStart(agrl.SFT().Steps(12).Batch(4).Optimizer(agrl.NewAdamW().LR(3e-3)),
			agrl.Demo{Name: "expert", Agent: calc.Expert(), Weight: 1}).DemoEpisodes(32).Steps(2)
	}
	var sft []agrl.StepStats
	tr, err := Build(g(filepath.Join(dir, "straight")).OnSFTStep(func(p agrl.SFTProgress) { sft = append(sft, p.Stats) }))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(sft) != 12 {
		t.Fatalf("%d SFT steps reported, want 12", len(sft))
	}
	first, last := sft[0], sft[len(sft)-1]
	t.Logf("SFT: nll %.3f → %.3f, token accuracy %.3f → %.3f", first.Metrics["nll"], last.Metrics["nll"], first.Metrics["accuracy"], last.Metrics["accuracy"])
	if !(last.Metrics["nll"] < 0.6*first.Metrics["nll"]) {
		t.Errorf("the warm start did not learn: nll %.3f → %.3f", first.Metrics["nll"], last.Metrics["nll"])
	}
	if kl := res.History[0][agrl.MetricKL]; kl > 1e-6 {
		t.Errorf("KL to the reference at the first GRPO step = %v, want 0 (the reference is the warm start)", kl)
	}
	ref := filepath.Join(dir, "straight", "checkpoints", "reference")
	refModel, err := llm.Load(ref)
	if err != nil {
		t.Fatalf("the reference was not saved as a model directory: %v", err)
	}
	pretrained, err := llm.Load(tinyQwen3(t))
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(refModel.Weights(), pretrained.Weights()) {
		t.Error("the saved reference is the pretrained model, not the warm start")
	}

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

// TestPretrainedFullValidation: full fine-tuning refuses LoRA dropout; LoRA after Full trains
// adapters again.
func TestPretrainedFullValidation(t *testing.T) {
	dir := tinyQwen3(t)
	if err := agrl.Pretrained(dir).Full().Dropout(0.1).Validate(); err == nil || !strings.Contains(err.Error(), "full fine-tuning") {
		t.Errorf("Full with dropout: %v, want an error", err)
	}
	if err := agrl.Pretrained(dir).Full().LoRA(0, 8).Validate(); err == nil {
		t.Error("LoRA(0, 8) after Full validated: LoRA should undo Full and check its rank")
	}
	if s := agrl.Pretrained(dir).Full().Spec(); !s.Full {
		t.Error("Spec().Full not set")
	}
}

// A frozen copy's graph (a second copy of its weights in the store) is made only when
// something decodes or scores on the backend: with the go backend's host scoring, the
// warm-started reference of full fine-tuning holds no store variables; scoring it through the
// graph makes them, and gives the host's scores (each sequence's own, though the graph scores
// them shortest first) — the reference's, not those of the policy, which a step has moved.
func TestFrozenGraphOnDemand(t *testing.T) {
	p, err := LoadPretrained(agrl.Pretrained(tinyFamily(t, hf.Qwen3)).Full(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if !p.hostScoring() {
		t.Fatal("the go backend's default is not host scoring")
	}
	f, err := p.frozenModel("reference", func() (*llm.Model, error) { return p.base, nil })
	if err != nil {
		t.Fatal(err)
	}
	l, err := p.newLearner("grpo", segTestLoss, []string{"adv", "mask"}, agrl.NewAdamW().LR(1e-2), 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Step(segTestBatch(320, 20, 31, 9)); err != nil {
		t.Fatal(err)
	}
	inScope := func() (n int64) {
		for v := range p.store.IterVariables() {
			if strings.HasPrefix(v.Path(), pretrainedScope+"_reference/") {
				n += int64(v.Shape().Size())
			}
		}
		return n
	}
	seqs := [][]int32{{1, 5, 9, 200, 7}, {3, 4, 5}, {8, 8, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45}, {2, 6}} // scored shortest first
	host, err := f.Score(seqs, 0.8)
	if err != nil {
		t.Fatal(err)
	}
	if n := inScope(); n != 0 || f.graph != nil {
		t.Fatalf("host scoring made the reference's graph (%d values in the store)", n)
	}
	p.graphScoring = true
	onGraph, err := f.Score(seqs, 0.8)
	if err != nil {
		t.Fatal(err)
	}
	if n := inScope(); n != int64(p.cfg.NumParams()) {
		t.Errorf("graph scoring: %d values under the reference's scope, want the model's %d", n, p.cfg.NumParams())
	}
	policy, err := p.Score(seqs, 0.8)
	if err != nil {
		t.Fatal(err)
	}
	moved := 0.0
	for i := range seqs {
		for j, lp := range policy[i].LogProbs {
			moved = max(moved, math.Abs(float64(lp-host[i].LogProbs[j])))
		}
		if len(host[i].LogProbs) != len(seqs[i])-1 || len(onGraph[i].LogProbs) != len(seqs[i])-1 {
			t.Fatalf("sequence %d of %d tokens: %d host and %d graph scores", i, len(seqs[i]), len(host[i].LogProbs), len(onGraph[i].LogProbs))
		}
		for j, lp := range host[i].LogProbs {
			if d := math.Abs(float64(lp - onGraph[i].LogProbs[j])); d > 1e-4 {
				t.Errorf("sequence %d token %d: host log-prob %v, graph %v", i, j, lp, onGraph[i].LogProbs[j])
			}
		}
	}
	if moved < 1e-3 {
		t.Errorf("the step moved the policy's log-probs by at most %.3g: the test cannot tell the reference from it", moved)
	}
}

// TestFullSamplerReadsStore: under full fine-tuning on the go backend the sampler's host model
// reads the store's trainable weights in place (the run holds one float32 copy of them, not
// two): an update written into the store's memory, as the host's AdamW step writes it, is the
// sampler's next logits with no model made again; a value the store replaces (a graph's
// update, a checkpoint's weights) gets a new model over its memory; and Agent's snapshot
// keeps the weights it was taken with.
func TestFullSamplerReadsStore(t *testing.T) {
	p, err := LoadPretrained(agrl.Pretrained(tinyQwen3(t)).Full(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if !p.sharesStore() {
		t.Fatal("the go backend's float32 store is not shared with the sampler")
	}
	ids := []int32{3, 17, 5, 60, 2, 9}
	logits := func(m *llm.Model) [][]float32 {
		t.Helper()
		z, err := m.Logits(ids)
		if err != nil {
			t.Fatal(err)
		}
		return z
	}
	// want is the logits of a model of its own holding the store's current weights.
	want := func() [][]float32 {
		t.Helper()
		w, err := p.Graph().BaseWeights()
		if err != nil {
			t.Fatal(err)
		}
		m, err := llm.FromWeights(p.Config(), "", w)
		if err != nil {
			t.Fatal(err)
		}
		return logits(m)
	}
	stale := func() { p.mu.Lock(); p.stale = true; p.mu.Unlock() } // as an update leaves it
	vars := p.Graph().BaseVariables()

	stale()
	cur, err := p.current()
	if err != nil {
		t.Fatal(err)
	}
	if got := len(cur.Model().Shared()); got != len(vars) || p.live == nil {
		t.Fatalf("the sampler reads %d of the store's %d weights in place", got, len(vars))
	}
	snap, err := p.Agent()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Model().Shared()) != 0 {
		t.Error("Agent's snapshot reads the store in place")
	}
	before := logits(snap.Model())
	if !reflect.DeepEqual(logits(cur.Model()), before) {
		t.Fatal("the sampler reading the store and the snapshot disagree before any update")
	}

	// An update in place, as hostUpdate writes it.
	for _, v := range vars {
		if err := mutate(v, func(w []float32) {
			for i := range w {
				w[i] *= 1.01
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	stale()
	cur2, err := p.current()
	if err != nil {
		t.Fatal(err)
	}
	if cur2.Model() != cur.Model() {
		t.Error("a model was made again although the store's memory did not move")
	}
	after := want()
	if reflect.DeepEqual(after, before) {
		t.Fatal("the update changed no logit")
	}
	if got := logits(cur2.Model()); !reflect.DeepEqual(got, after) {
		t.Error("the sampler's logits after an update in place are not the updated weights'")
	}
	if !reflect.DeepEqual(logits(snap.Model()), before) {
		t.Error("Agent's snapshot changed with the update")
	}

	// New values in the store (new tensors): a new model over their memory.
	w, err := p.Graph().BaseWeights()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range w {
		for i := range x {
			x[i] *= 0.98
		}
	}
	if err := p.Graph().SetBaseWeights(w); err != nil {
		t.Fatal(err)
	}
	stale()
	cur3, err := p.current()
	if err != nil {
		t.Fatal(err)
	}
	if cur3.Model() == cur2.Model() {
		t.Fatal("the sampler still reads the store's replaced values")
	}
	if got, wantZ := logits(cur3.Model()), want(); !reflect.DeepEqual(got, wantZ) || reflect.DeepEqual(got, after) {
		t.Error("the sampler's logits after new values are not the store's")
	}
}
