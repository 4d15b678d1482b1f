package hfgraph

import (
	"math"
	"slices"
	"testing"

	"agrl.dev/agrl/hf"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// matmul in bfloat16 rounds its inputs to bfloat16, sums their exact products in float32 and
// rounds the sum to bfloat16: worked by hand on values bfloat16 cannot hold, it gives the
// rounded sums of the rounded values, not those of the float32 ones.
func TestMatmulBF16(t *testing.T) {
	// 1 + 2^-9 rounds to 1 (ties to even); 3 + 2^-6 + 2^-8 rounds to 3 + 2^-6 (bfloat16 keeps 8
	// bits of significand); 0.1 rounds to 0.10009765625.
	x := [][]float32{{1 + 1.0/512, 3 + 1.0/64 + 1.0/256}, {0.1, -2}}
	w := [][]float32{{1, 0.1}, {2, 1}}
	round := func(v float32) float64 { return float64(hf.BF16ToFloat32(hf.Float32ToBF16(v))) }
	if round(x[0][0]) != 1 || round(x[0][1]) != 3+1.0/64 || round(0.1) != 0.10009765625 {
		t.Fatalf("rounding assumptions: %v %v %v", round(x[0][0]), round(x[0][1]), round(0.1))
	}
	e, err := model.NewExec(backend(t), model.NewStore(), func(_ *model.Scope, xs, ws *graph.Node) (*graph.Node, *graph.Node) {
		return matmul(xs, graph.ConvertDType(ws, dtypes.BFloat16), 0), matmul(xs, ws, 0)
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.Call(x, w)
	if err != nil {
		t.Fatal(err)
	}
	bf, f32 := tensors.MustCopyFlatData[float32](out[0]), tensors.MustCopyFlatData[float32](out[1])
	if out[0].DType() != dtypes.Float32 {
		t.Fatalf("bfloat16 product returns %s, want Float32", out[0].DType())
	}
	for i := range 2 {
		for j := range 2 {
			want := round(float32(round(x[i][0])*round(w[0][j]) + round(x[i][1])*round(w[1][j])))
			if float64(bf[i*2+j]) != want {
				t.Errorf("bfloat16 [%d,%d] = %v, want %v", i, j, bf[i*2+j], want)
			}
			exact := float64(x[i][0])*float64(w[0][j]) + float64(x[i][1])*float64(w[1][j])
			if math.Abs(float64(f32[i*2+j])-exact) > 1e-6*math.Abs(exact) {
				t.Errorf("float32 [%d,%d] = %v, want %v", i, j, f32[i*2+j], exact)
			}
		}
	}
	if slices.Equal(bf, f32) {
		t.Error("the bfloat16 product equals the float32 one: nothing was rounded")
	}
}

// With SetCompute(BFloat16) every family's log-probs move from the float32 ones by bfloat16's
// rounding: not at all is a product left in float32, and by no more than a tiny model's
// logits allow (0.05 nats); entropy too. The adapters' gradients keep their direction (cosine
// above 0.999 with the float32 ones) and the decoding graph agrees with the scorer under the
// same compute dtype (to 1e-2: bfloat16's rounding of activations that differ in their last
// bits). Other dtypes are refused.
func TestBF16Compute(t *testing.T) {
	for _, fam := range []string{"llama", "llama3-tied", "qwen2", "qwen3", "qwen2-yarn"} {
		t.Run(fam, func(t *testing.T) {
			ref := loadLLM(t, fam)
			f32, b16 := loadGraph(t, fam), loadGraph(t, fam)
			if err := b16.SetCompute(dtypes.BFloat16); err != nil || b16.Compute() != dtypes.BFloat16 || f32.Compute() != dtypes.Float32 {
				t.Fatalf("SetCompute: %v; Compute %s and %s", err, b16.Compute(), f32.Compute())
			}
			adapters := randomAdapters(t, ref, 9)
			for _, g := range []*Model{f32, b16} {
				if err := g.SetAdapters(adapters); err != nil {
					t.Fatal(err)
				}
			}
			seqs := testSeqs(ref.Config().VocabSize, 4, 11, 5, 14)
			a, b := runStats(t, statsExec(t, f32), seqs, 16, 1), runStats(t, statsExec(t, b16), seqs, 16, 1)
			var dLogp, dEnt float64
			for i, s := range seqs {
				for j := range len(s) - 1 {
					dLogp = max(dLogp, math.Abs(float64(a.logp[i][j]-b.logp[i][j])))
					dEnt = max(dEnt, math.Abs(float64(a.entropy[i][j]-b.entropy[i][j])))
				}
			}
			t.Logf("bfloat16 vs float32 compute: max |Δlogp| %.2g, max |Δentropy| %.2g", dLogp, dEnt)
			if !(dLogp > 1e-5) || dLogp > 0.05 || dEnt > 0.05 {
				t.Errorf("max |Δlogp| %g, |Δentropy| %g: want within (1e-5, 0.05]", dLogp, dEnt)
			}

			cos := cosine(t, adapterGrads(t, f32, seqs), adapterGrads(t, b16, seqs))
			if !(cos > 0.999) {
				t.Errorf("cosine of the adapters' gradients, bfloat16 vs float32: %v", cos)
			}

			// The decoding graph, fed each whole sequence in one round, against the scorer's
			// logits at its last position, both in bfloat16.
			tok, lens := mustPad(t, seqs, 16)
			logits, err := model.CallOnce(backend(t), b16.Store(), func(_ *model.Scope, tokens, lengths *graph.Node) *graph.Node {
				return b16.Logits(tokens, lengths)
			}, tok, lens)
			if err != nil {
				t.Fatal(err)
			}
			full := tensors.MustCopyFlatData[float32](logits)
			vocab := ref.Config().VocabSize
			e := decodeExec(t, b16, len(seqs))
			ids := make([]int32, len(seqs)*16)
			starts, counts := make([]int32, len(seqs)), make([]int32, len(seqs))
			args := []any{nil, starts, counts}
			for i, s := range seqs {
				copy(ids[i*16:], s)
				counts[i] = int32(len(s))
				args = append(args, tensors.FromShape(b16.CacheShape(32)))
			}
			args[0] = tensors.FromFlatDataAndDimensions(ids, len(seqs), 16)
			out, err := e.Exec(args...)
			if err != nil {
				t.Fatal(err)
			}
			dec := tensors.MustCopyFlatData[float32](out[0])
			worst := 0.0
			for i, s := range seqs {
				last := full[(i*16+len(s)-1)*vocab : (i*16+len(s))*vocab]
				x, y := logSoftmax64(dec[i*vocab:(i+1)*vocab]), logSoftmax64(last)
				for v := range x {
					worst = max(worst, math.Abs(x[v]-y[v]))
				}
			}
			// The two graphs' float32 activations can differ in their last bits (0 in a plain
			// build here, up to 6e-7 with GOEXPERIMENT=simd's kernels), which rounding to
			// bfloat16 sometimes turns into an ulp of 2^-8: 2.5e-3 was seen on qwen3.
			t.Logf("gradients' cosine %.6f; bfloat16 decoding vs scoring: max |Δ log-softmax| %.2g", cos, worst)
			if worst > 1e-2 {
				t.Errorf("bfloat16 decoding vs scoring: max |Δ log-softmax| %g", worst)
			}
		})
	}
	if err := loadGraph(t, "qwen3").SetCompute(dtypes.Float16); err == nil {
		t.Error("SetCompute(Float16): no error")
	}

	// Full fine-tuning: the gradients with respect to the float32 base weights flow back
	// through the bfloat16 products, close to float32's.
	f32, b16 := loadGraph(t, "qwen3"), loadGraph(t, "qwen3")
	for _, g := range []*Model{f32, b16} {
		if err := g.TrainBase(true); err != nil {
			t.Fatal(err)
		}
	}
	if err := b16.SetCompute(dtypes.BFloat16); err != nil {
		t.Fatal(err)
	}
	seqs := testSeqs(f32.Config().VocabSize, 8, 12, 6)
	if cos := cosine(t, baseGrads(t, f32, seqs), baseGrads(t, b16, seqs)); !(cos > 0.999) {
		t.Errorf("full fine-tuning: cosine of the base gradients, bfloat16 vs float32: %v", cos)
	} else {
		t.Logf("full fine-tuning: base gradients' cosine %.6f", cos)
	}
}

// cosine is the cosine of the angle between gradients a and b; b must be finite.
func cosine(t *testing.T, a, b []float32) float64 {
	t.Helper()
	var dot, na, nb float64
	for i := range a {
		if math.IsNaN(float64(b[i])) || math.IsInf(float64(b[i]), 0) {
			t.Fatalf("gradient entry %d is %v", i, b[i])
		}
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	return dot / math.Sqrt(na*nb)
}

// baseGrads is the gradient of the mean NLL of seqs with respect to m's base weights, flat.
func baseGrads(t *testing.T, m *Model, seqs [][]int32) []float32 {
	t.Helper()
	return grads(t, m, m.BaseVariables(), seqs)
}

// mustPad is Pad for tests: the tokens and lengths of seqs padded to width.
func mustPad(t *testing.T, seqs [][]int32, width int) (any, any) {
	t.Helper()
	tok, lens, err := Pad(seqs, width)
	if err != nil {
		t.Fatal(err)
	}
	return tok, lens
}

// adapterGrads is the gradient of the mean NLL of seqs with respect to m's adapters, flat.
func adapterGrads(t *testing.T, m *Model, seqs [][]int32) []float32 {
	t.Helper()
	return grads(t, m, m.AdapterVariables(), seqs)
}

// grads is the gradient of the mean NLL of seqs with respect to vars, flat.
func grads(t *testing.T, m *Model, vars []*model.Variable, seqs [][]int32) []float32 {
	t.Helper()
	tok, lens := mustPad(t, seqs, 16)
	e, err := model.NewExec(backend(t), m.Store(), func(_ *model.Scope, tokens, lengths *graph.Node) []*graph.Node {
		loss := nllLoss(m, tokens, lengths)
		nodes := make([]*graph.Node, len(vars))
		for i, v := range vars {
			nodes[i] = v.NodeValue(tokens.Graph())
		}
		return graph.Gradient(loss, nodes...)
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.Call(tok, lens)
	if err != nil {
		t.Fatal(err)
	}
	var flat []float32
	for _, g := range out {
		flat = append(flat, tensors.MustCopyFlatData[float32](g)...)
	}
	return flat
}
