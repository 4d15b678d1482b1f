package llm

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// expected is a testdata/<variant>/expected.json, written by scripts/llm_reference.py.
type expected struct {
	Torch    string `json:"torch"`
	Decimals int    `json:"decimals"`
	// RoPE's inverse frequencies and the factor cos and sin are multiplied by, in float64.
	RopeInvFreq         []float64 `json:"rope_inv_freq"`
	RopeAttentionFactor float64   `json:"rope_attention_factor"`
	Sequences           []struct {
		IDs     []int32     `json:"ids"`
		Float64 [][]float64 `json:"float64"`
		Float32 [][]float64 `json:"float32"`
	} `json:"sequences"`
}

func loadExpected(t *testing.T, dir string) expected {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var e expected
	if err := json.Unmarshal(data, &e); err != nil {
		t.Fatal(err)
	}
	if len(e.Sequences) == 0 {
		t.Fatalf("%s/expected.json has no sequences", dir)
	}
	return e
}

// maxDiff is the largest |got − want| over all positions; rows must match in number and width.
func maxDiff(t *testing.T, got [][]float32, want [][]float64) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d rows of logits, want %d", len(got), len(want))
	}
	worst := 0.0
	for i := range got {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("row %d: %d logits, want %d", i, len(got[i]), len(want[i]))
		}
		for j, g := range got[i] {
			d := math.Abs(float64(g) - want[i][j])
			if !(d <= worst) { // NaN counts as worst
				worst = d
			}
		}
	}
	return worst
}

// The logits agree with the independent PyTorch forward pass (scripts/llm_reference.py), in
// float64 and in float32, for every family, at every position, for the full forward pass and
// token by token through the cache.
func TestReference(t *testing.T) {
	const tol = 1e-4
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			dir := filepath.Join("testdata", v.name)
			m, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			e := loadExpected(t, dir)
			if len(m.invFreq) != len(e.RopeInvFreq) {
				t.Fatalf("%d RoPE frequencies, want %d", len(m.invFreq), len(e.RopeInvFreq))
			}
			for i, f := range m.invFreq {
				// torch's pow and ours may differ in the last bit or two.
				if want := e.RopeInvFreq[i]; !(math.Abs(f-want) <= 1e-14*want) {
					t.Errorf("RoPE inverse frequency %d = %.17g, want %.17g", i, f, want)
				}
			}
			if !(math.Abs(m.ropeScale-e.RopeAttentionFactor) <= 1e-15) {
				t.Errorf("RoPE attention factor %.17g, want %.17g", m.ropeScale, e.RopeAttentionFactor)
			}
			var vs64, vs32, steps float64
			for _, s := range e.Sequences {
				got, err := m.Logits(s.IDs)
				if err != nil {
					t.Fatal(err)
				}
				vs64 = max(vs64, maxDiff(t, got, s.Float64))
				vs32 = max(vs32, maxDiff(t, got, s.Float32))

				c := m.NewCache()
				var byStep [][]float32
				for _, id := range s.IDs {
					row, err := m.Step(c, []int32{id})
					if err != nil {
						t.Fatal(err)
					}
					byStep = append(byStep, row...)
				}
				steps = max(steps, maxDiff(t, byStep, s.Float64))
			}
			t.Logf("max |Δlogit| vs torch %s: float64 %.2g, float32 %.2g; one token a step vs float64 %.2g",
				e.Torch, vs64, vs32, steps)
			if !(vs64 <= tol && vs32 <= tol && steps <= tol) {
				t.Errorf("logits differ from the reference by more than %g", tol)
			}
		})
	}
}

// The sharded checkpoint loads from its two shards.
func TestLoadSharded(t *testing.T) {
	m, err := Load(filepath.Join("testdata", "llama-sharded"))
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Config(); c.NumKeyValueHeads != 1 || !c.AttentionBias || !c.MLPBias || c.TorchDType != "float32" {
		t.Errorf("config %+v", c)
	}
	if m.layers[0].bo == nil || m.layers[1].bDown == nil {
		t.Error("biases not loaded")
	}
}

// The llama3-tied variant exercises all three bands of the llama3 RoPE scaling, and ties the
// LM head to the embeddings.
func TestLlama3Variant(t *testing.T) {
	m, err := Load(filepath.Join("testdata", "llama3-tied"))
	if err != nil {
		t.Fatal(err)
	}
	plain := m.Config()
	plain.RopeScaling.Type = ""
	base, scaled := plain.InvFreq(), m.invFreq
	kept, divided := 0, 0
	for i := range base {
		switch r := scaled[i] / base[i]; {
		case r == 1:
			kept++
		case math.Abs(r-1.0/8) < 1e-12:
			divided++
		}
	}
	if kept == 0 || divided == 0 || kept+divided == len(base) {
		t.Errorf("scaled/plain frequencies %v / %v: want some kept, some divided by 8, some between", scaled, base)
	}
	if &m.head[0] != &m.embed[0] {
		t.Error("tied LM head is not the embedding matrix")
	}
}

// TestFromWeights: a model made from another's weights computes its logits bit for bit and
// shares the slices it was given; a missing, unexpected or mis-sized tensor is an error naming
// each, and so is a NaN weight.
func TestFromWeights(t *testing.T) {
	m := loadVariant(t, "qwen3")
	ids := []int32{1, 2, 3, 50, 40}
	w := m.Weights()
	back, err := FromWeights(m.Config(), "", w)
	if err != nil {
		t.Fatal(err)
	}
	if !sameBits(mustLogits(t, back, ids), mustLogits(t, m, ids)) {
		t.Fatal("other logits from the same weights")
	}
	if &back.WeightsView()["model.norm.weight"][0] != &w["model.norm.weight"][0] {
		t.Error("FromWeights copied the weights")
	}
	bad := m.Weights()
	delete(bad, "model.norm.weight")
	bad["model.extra"] = []float32{1}
	bad["model.layers.0.mlp.up_proj.weight"] = bad["model.layers.0.mlp.up_proj.weight"][1:]
	_, err = FromWeights(m.Config(), "", bad)
	for _, want := range []string{"model.norm.weight missing", "unexpected tensor model.extra", "model.layers.0.mlp.up_proj.weight has"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("FromWeights with bad tensors: %v, want %q", err, want)
		}
	}
	nan := m.Weights()
	nan["model.layers.1.self_attn.k_proj.weight"][7] = float32(math.NaN())
	if _, err := FromWeights(m.Config(), "", nan); err == nil || !strings.Contains(err.Error(), "k_proj.weight: element 7 is NaN") {
		t.Errorf("FromWeights with a NaN: %v", err)
	}
}
