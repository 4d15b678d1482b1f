package hfgraph

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/llm"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/ml/model"
)

// baseBytes is the memory of m's base weights.
func baseBytes(m *Model) int {
	n := 0
	for _, v := range m.BaseVariables() {
		n += int(v.Shape().Memory())
	}
	return n
}

// TestBF16Storage: base weights stored as bfloat16 take half the memory and compute exactly
// what float32 weights of the same (bfloat16-rounded) values compute: for the bfloat16
// checkpoints, what Load's model computes, with and without adapters; for the float32 one
// (llama-sharded), what the float32 model of its rounded weights computes, and not what the
// unrounded model computes. BaseWeights reads them back as float32, SetBaseWeights rounds, and
// TrainBase and other dtypes are refused.
func TestBF16Storage(t *testing.T) {
	for _, name := range []string{"llama", "llama3-tied", "qwen2", "qwen3", "llama-sharded"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(testdata, name)
			ref := loadLLM(t, name)
			f32 := loadGraph(t, name)
			b16, err := LoadAs(model.NewStore(), "", dir, dtypes.BFloat16)
			if err != nil {
				t.Fatal(err)
			}
			if b16.DType() != dtypes.BFloat16 || f32.DType() != dtypes.Float32 {
				t.Fatalf("DType: %s and %s", b16.DType(), f32.DType())
			}
			for _, v := range b16.BaseVariables() {
				if v.Shape().DType != dtypes.BFloat16 {
					t.Fatalf("%s is %s", v.Path(), v.Shape().DType)
				}
			}
			if 2*baseBytes(b16) != baseBytes(f32) {
				t.Fatalf("bfloat16 weights take %d bytes, float32 %d", baseBytes(b16), baseBytes(f32))
			}

			// The float32 model of the rounded weights.
			w, err := f32.BaseWeights()
			if err != nil {
				t.Fatal(err)
			}
			exact := true
			for _, x := range w {
				for i, v := range x {
					r := hf.BF16ToFloat32(hf.Float32ToBF16(v))
					exact = exact && r == v
					x[i] = r
				}
			}
			if exact != (ref.Config().TorchDType == "bfloat16") {
				t.Fatalf("torch_dtype %s, but the weights are bfloat16 values: %v", ref.Config().TorchDType, exact)
			}
			rounded, err := llm.FromWeights(ref.Config(), dir, w)
			if err != nil {
				t.Fatal(err)
			}
			want, err := FromLLM(model.NewStore(), "", rounded)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := b16.BaseWeights(); err != nil || !equalWeights(got, w) {
				t.Fatalf("BaseWeights of the bfloat16 model are not the rounded weights (%v)", err)
			}

			seqs := testSeqs(ref.Config().VocabSize, 3, 9, 1, 14)
			sameStats := func(a, b *Model) bool {
				x, y := runStats(t, statsExec(t, a), seqs, 16, 1), runStats(t, statsExec(t, b), seqs, 16, 1)
				for i := range seqs {
					if !slices.Equal(x.logp[i], y.logp[i]) || !slices.Equal(x.entropy[i], y.entropy[i]) {
						return false
					}
				}
				return true
			}
			if !sameStats(b16, want) {
				t.Fatal("the bfloat16 model's log-probs differ from the float32 model of its rounded weights")
			}
			if !exact && sameStats(b16, f32) {
				t.Fatal("rounding a float32 checkpoint changed nothing (the test cannot tell the models apart)")
			}
			adapters := randomAdapters(t, ref, 5)
			for _, g := range []*Model{b16, want} {
				if err := g.SetAdapters(adapters); err != nil {
					t.Fatal(err)
				}
			}
			if !sameStats(b16, want) || !sameStats(b16.Base(), want.Base()) {
				t.Fatal("with adapters, the bfloat16 model differs from the float32 model of its rounded weights")
			}

			if err := b16.TrainBase(true); err == nil || !strings.Contains(err.Error(), "BFloat16") {
				t.Errorf("TrainBase(true) on bfloat16 weights: %v", err)
			}
			for _, v := range b16.BaseVariables() {
				if v.Trainable {
					t.Fatalf("%s trainable after a refused TrainBase", v.Path())
				}
			}

			// SetBaseWeights rounds: half-way between two bfloat16 values goes to the even one.
			w2, _ := f32.BaseWeights()
			norm := "model.norm.weight"
			w2[norm][0] = math.Float32frombits(0x3f808000) // 1 + 2^-8: between 1 and 1 + 2^-7
			if err := b16.SetBaseWeights(w2); err != nil {
				t.Fatal(err)
			}
			got, _ := b16.BaseWeights()
			if got[norm][0] != 1 {
				t.Errorf("SetBaseWeights stored %v for 1 + 2^-8, want 1 (ties to even)", got[norm][0])
			}
		})
	}
	if _, err := LoadAs(model.NewStore(), "", filepath.Join(testdata, "qwen3"), dtypes.Float16); err == nil {
		t.Error("LoadAs Float16: no error")
	}
}

func equalWeights(a, b map[string][]float32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, x := range a {
		if !slices.Equal(x, b[k]) {
			return false
		}
	}
	return true
}
