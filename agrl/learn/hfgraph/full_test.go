package hfgraph

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"agrl.dev/agrl/llm"
)

// TestBaseWeights: BaseWeights gives back the checkpoint's tensors bit for bit (projections
// transposed back); SetBaseWeights of other values makes the graph compute what agrl/llm
// computes with them (llm.FromWeights), and refuses a missing, unexpected, mis-sized or
// non-finite tensor without changing anything; TrainBase makes every base weight trainable
// and back.
func TestBaseWeights(t *testing.T) {
	for _, name := range []string{"qwen2", "qwen3", "llama", "llama3-tied"} {
		t.Run(name, func(t *testing.T) {
			ref := loadLLM(t, name)
			g := loadGraph(t, name)
			got, err := g.BaseWeights()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, ref.Weights()) {
				t.Fatal("BaseWeights differ from the checkpoint's")
			}
			// Other weights: every value moved a little.
			other := ref.Weights()
			for k, w := range other {
				for i := range w {
					w[i] += 0.01 * float32(math.Sin(float64(i+len(k))))
				}
			}
			moved, err := llm.FromWeights(ref.Config(), "", other)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.SetBaseWeights(other); err != nil {
				t.Fatal(err)
			}
			seqs := testSeqs(g.Config().VocabSize, 6, 9, 5)
			gotStats := runStats(t, statsExec(t, g), seqs, 10, 1)
			for i, s := range seqs {
				logits, err := moved.Logits(s)
				if err != nil {
					t.Fatal(err)
				}
				for j := 1; j < len(s); j++ {
					want := logSoftmax(logits[j-1], int(s[j]))
					if d := math.Abs(float64(gotStats.logp[i][j-1]) - want); d > 1e-4 {
						t.Fatalf("row %d position %d: graph %v, llm with the new weights %v", i, j, gotStats.logp[i][j-1], want)
					}
				}
			}

			before, _ := g.BaseWeights()
			for _, bad := range []struct {
				what string
				edit func(map[string][]float32)
			}{
				{"missing", func(w map[string][]float32) { delete(w, "model.norm.weight") }},
				{"unexpected", func(w map[string][]float32) { w["model.extra.weight"] = []float32{1} }},
				{"values for shape", func(w map[string][]float32) { w["model.norm.weight"] = w["model.norm.weight"][1:] }},
				{"NaN", func(w map[string][]float32) { w["model.layers.0.mlp.up_proj.weight"][3] = float32(math.NaN()) }},
			} {
				w := ref.Weights()
				bad.edit(w)
				if err := g.SetBaseWeights(w); err == nil || !strings.Contains(err.Error(), bad.what) {
					t.Errorf("%s tensor: %v", bad.what, err)
				}
			}
			if after, _ := g.BaseWeights(); !reflect.DeepEqual(after, before) {
				t.Error("a refused SetBaseWeights changed the weights")
			}

			if err := g.TrainBase(true); err != nil {
				t.Fatal(err)
			}
			for _, v := range g.BaseVariables() {
				if !v.Trainable {
					t.Fatalf("%s not trainable after TrainBase(true)", v.Path())
				}
			}
			if err := g.TrainBase(false); err != nil {
				t.Fatal(err)
			}
			for _, v := range g.BaseVariables() {
				if v.Trainable {
					t.Fatalf("%s trainable after TrainBase(false)", v.Path())
				}
			}
		})
	}
}

// logSoftmax is log-softmax(z)[k] in float64.
func logSoftmax(z []float32, k int) float64 {
	hi := math.Inf(-1)
	for _, v := range z {
		hi = math.Max(hi, float64(v))
	}
	s := 0.0
	for _, v := range z {
		s += math.Exp(float64(v) - hi)
	}
	return float64(z[k]) - hi - math.Log(s)
}
