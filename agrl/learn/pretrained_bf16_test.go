package learn

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/llm"
	"agrl.dev/envs/calc"
	"github.com/gomlx/compute/dtypes"
)

// tinyQwen3F32 is a model of tinyQwen3's shape saved in float32, with weights that are not
// bfloat16 values.
func tinyQwen3F32(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cfg := llm.Tiny(hf.Qwen3)
	cfg.VocabSize, cfg.MaxPositionEmbeddings = 320, 2048
	cfg.BOSTokenID, cfg.EOSTokenIDs = -1, nil
	cfg.TorchDType = "float32"
	if err := llm.WriteRandom(dir, cfg, 2, 1); err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(tinyQwen3(t), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPretrainedBF16Weights: with Weights("bfloat16") the store holds the base weights in
// bfloat16; on a bfloat16 checkpoint the policy scores and samples exactly as the float32 one
// does (with the same adapters); on a float32 checkpoint it computes the rounded model, its
// sampler (host and graph decoding) agreeing with its scorer, and differs from the float32
// policy, and its checkpoint rebuilds it (LoadModel). Invalid settings are refused.
func TestPretrainedBF16Weights(t *testing.T) {
	load := func(p agrl.PretrainedLM) *PretrainedPolicy {
		t.Helper()
		pp, err := LoadPretrained(p, 5)
		if err != nil {
			t.Fatal(err)
		}
		withRandomAdapters(t, pp)
		return pp
	}
	env := calc.New()
	tasks, err := agrl.NewMix(4).Tasks(env, agrl.Dev, 4)
	if err != nil {
		t.Fatal(err)
	}
	opt := agrl.RolloutOptions{Sampling: agrl.Sampling{Temperature: 0.9, Seed: 2, MaxActionTokens: 10}, Limits: agrl.Limits{MaxTurns: 2}}

	f32 := load(agrl.Pretrained(tinyQwen3(t)).LoRA(4, 8))
	b16 := load(agrl.Pretrained(tinyQwen3(t)).LoRA(4, 8).Weights("bfloat16"))
	if f32.Graph().DType() != dtypes.Float32 || b16.Graph().DType() != dtypes.BFloat16 {
		t.Fatalf("stored as %s and %s", f32.Graph().DType(), b16.Graph().DType())
	}
	want, _, err := f32.Rollout(env, tasks, opt)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := b16.Rollout(env, tasks, opt)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if !slices.Equal(got[i].Tokens, want[i].Tokens) || !slices.Equal(got[i].LogProbs, want[i].LogProbs) {
			t.Fatalf("bfloat16 checkpoint: episode %d differs between float32 and bfloat16 storage", i)
		}
	}
	for _, graph := range []bool{false, true} { // the host scorer, then the graph's (the stored weights)
		f32.graphScoring, b16.graphScoring = graph, graph
		sw, err := f32.Score(tokensOf(want), 0.9)
		if err != nil {
			t.Fatal(err)
		}
		sg, err := b16.Score(tokensOf(want), 0.9)
		if err != nil {
			t.Fatal(err)
		}
		for i := range sw {
			if !slices.Equal(sw[i].LogProbs, sg[i].LogProbs) || !slices.Equal(sw[i].Entropy, sg[i].Entropy) {
				t.Fatalf("bfloat16 checkpoint, graph scorer %v: the scores of sequence %d differ between float32 and bfloat16 storage", graph, i)
			}
		}
	}
	f32.graphScoring, b16.graphScoring = false, false

	dir := tinyQwen3F32(t)
	plain := load(agrl.Pretrained(dir).LoRA(4, 8))
	for _, decoding := range []string{"host", "graph"} {
		rounded := load(agrl.Pretrained(dir).LoRA(4, 8).Weights("bfloat16").Decoding(decoding))
		eps, _ := samplerMatchesScorer(t, rounded)
		plain.graphScoring = rounded.graphDecoding // both scored the same way
		a, err := plain.Score(tokensOf(eps), 0.9)
		plain.graphScoring = false
		if err != nil {
			t.Fatal(err)
		}
		b, err := rounded.Score(tokensOf(eps), 0.9)
		if err != nil {
			t.Fatal(err)
		}
		same := true
		for i := range a {
			same = same && slices.Equal(a[i].LogProbs, b[i].LogProbs)
		}
		if same {
			t.Fatalf("%s decoding: a float32 checkpoint scores the same stored in bfloat16 (were its weights rounded?)", decoding)
		}
		// A checkpoint rebuilds the same policy, bfloat16 storage included (LoadModel).
		ck := t.TempDir()
		if _, err := rounded.Save(ck); err != nil {
			t.Fatal(err)
		}
		m, err := LoadModel(ck, "")
		if err != nil {
			t.Fatal(err)
		}
		back, ok := m.(*PretrainedPolicy)
		if !ok || back.Graph().DType() != dtypes.BFloat16 {
			t.Fatalf("LoadModel gave %T, not a pretrained policy stored in bfloat16", m)
		}
		back.graphScoring = rounded.graphDecoding // LoadModel's policy decodes, and scores, on the host
		c, err := back.Score(tokensOf(eps), 0.9)
		if err != nil {
			t.Fatal(err)
		}
		for i := range b {
			if !slices.Equal(b[i].LogProbs, c[i].LogProbs) {
				t.Fatalf("sequence %d: the policy LoadModel rebuilt scores otherwise than the one saved", i)
			}
		}
	}

	for _, bad := range []struct {
		p    agrl.PretrainedLM
		want string
	}{
		{agrl.Pretrained(dir).Weights("float16"), `weights "float16"`},
		{agrl.Pretrained(dir).Full().Weights("bfloat16"), "full fine-tuning"},
	} {
		if err := bad.p.Validate(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: %v, want an error naming %q", bad.p.Spec(), err, bad.want)
		}
	}
}

// TestPretrainedBF16Compute: with Compute("bfloat16") the graphs' products run in bfloat16,
// rollouts decode with the graph by default, and the sampler's log-probs are close to the
// scorer's (1e-2) while both differ from the float32 policy's (by bfloat16's rounding, within
// 0.05 nats); a GRPO run trains with finite loss and gradients; a checkpoint rebuilds the
// policy with the same compute dtype; other dtypes are refused.
func TestPretrainedBF16Compute(t *testing.T) {
	p := agrl.Pretrained(tinyQwen3(t)).LoRA(4, 8)
	f32, err := LoadPretrained(p, 5)
	if err != nil {
		t.Fatal(err)
	}
	b16, err := LoadPretrained(p.Compute("bfloat16").Weights("bfloat16"), 5)
	if err != nil {
		t.Fatal(err)
	}
	if b16.Graph().Compute() != dtypes.BFloat16 || f32.Graph().Compute() != dtypes.Float32 || !b16.GraphDecoding() || f32.GraphDecoding() {
		t.Fatalf("compute %s / %s, graph decoding %v / %v", b16.Graph().Compute(), f32.Graph().Compute(), b16.GraphDecoding(), f32.GraphDecoding())
	}
	withRandomAdapters(t, f32)
	withRandomAdapters(t, b16)
	eps := calcRollout(t, b16)
	a, err := f32.Score(tokensOf(eps), 0.9)
	if err != nil {
		t.Fatal(err)
	}
	b, err := b16.Score(tokensOf(eps), 0.9)
	if err != nil {
		t.Fatal(err)
	}
	// The sampler decodes a token at a time, the scorer whole sequences: their float32
	// activations differ in the last bits, which rounding to bfloat16 sometimes turns into a
	// bfloat16 ulp (2^-8 relative), so they agree to a few 1e-3 (4.5e-3 measured, on Zen 5)
	// rather than float32's 1e-6; the bound leaves room for other CPUs' summation orders.
	var vsF32, vsSampler float64
	n := 0
	for i, ep := range eps {
		for j := 1; j < len(ep.Tokens); j++ {
			if ep.LossMask[j] == 0 {
				continue
			}
			n++
			vsSampler = max(vsSampler, math.Abs(float64(b[i].LogProbs[j-1]-ep.LogProbs[j])))
			vsF32 = max(vsF32, math.Abs(float64(a[i].LogProbs[j-1]-b[i].LogProbs[j-1])))
		}
	}
	t.Logf("%d sampled tokens: bfloat16 scorer vs sampler max |Δlogp| %.2g; vs the float32 scorer %.2g", n, vsSampler, vsF32)
	if n == 0 || vsSampler > 1e-2 {
		t.Errorf("bfloat16: the scorer's log-probs differ from the sampler's by %g (want ≤ 1e-2)", vsSampler)
	}
	if !(vsF32 > 1e-5) || vsF32 > 0.05 {
		t.Errorf("max |Δlogp| between bfloat16 and float32 compute %g, want within (1e-5, 0.05]", vsF32)
	}

	// A GRPO run: finite losses and gradients, config.json and the checkpoint record it.
	out := filepath.Join(t.TempDir(), "run")
	g := agrl.NewGRPO().Env(calc.New()).Rubric(calc.Rubric().Add("short", shortActions, 1)).
		Pretrained(p.Compute("bfloat16").MicroBatch(4)).Screen(0).WarmStartSteps(0).
		Group(4).TasksPerStep(2).LR(2e-2).MaxTurns(2).MaxActionTokens(8).Temperature(1).
		EvalTasks(2).EvalEvery(0).Steps(2).Seed(3).Out(out)
	trainFinite(t, g, 2)
	var cfg struct {
		Pretrained agrl.PretrainedRecord `json:"pretrained"`
	}
	data, _ := os.ReadFile(filepath.Join(out, agrl.RunConfigFile))
	if err := json.Unmarshal(data, &cfg); err != nil || cfg.Pretrained.Compute != "bfloat16" {
		t.Errorf("config.json records compute %q (%v)", cfg.Pretrained.Compute, err)
	}
	m, err := LoadModel(filepath.Join(out, agrl.RunCheckpointsDir), "")
	if err != nil {
		t.Fatal(err)
	}
	if back, ok := m.(*PretrainedPolicy); !ok || back.Graph().Compute() != dtypes.BFloat16 {
		t.Fatalf("LoadModel gave %T, not a pretrained policy computing in bfloat16", m)
	}
	if err := p.Compute("float16").Validate(); err == nil || !strings.Contains(err.Error(), `compute "float16"`) {
		t.Errorf("Compute(float16): %v", err)
	}
}
