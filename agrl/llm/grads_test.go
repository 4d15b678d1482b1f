package llm

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// weightVariants are the checkpoints BackwardWeights is checked on: Llama (untied), Llama
// with every bias (q, k, v, o and the MLP's: the sharded checkpoint), Qwen2 (q, k, v biases)
// and Qwen3 (q/k norms, tied embeddings).
var weightVariants = []string{"llama", "llama-sharded", "qwen2", "qwen3"}

// weightGrads traces ids through m and returns BackwardWeights' sums, in the layout asked,
// for the loss whose gradient with respect to the hidden states is r.
func weightGrads(t *testing.T, m *Model, ids []int32, r []float32, transposed bool) map[string][]float32 {
	t.Helper()
	tr, err := m.Trace(ids)
	if err != nil {
		t.Fatal(err)
	}
	g := m.NewWeightGrads(transposed)
	if err := tr.BackwardWeights(r, g); err != nil {
		t.Fatal(err)
	}
	return g.Tensors()
}

// TestBackwardWeightsFiniteDifferences: BackwardWeights' gradient of every weight of the
// model (each projection, bias, norm gain and the embeddings' rows) against central
// differences of the loss Σ hidden ⊙ r, on three elements of each tensor; an embedding row no
// traced id reads gets exactly zero; the transposed layout holds the same gradients
// transposed, to rounding; and with adapters on the model (their term passing the input's
// gradient on) the weights' gradients still match the differences.
func TestBackwardWeightsFiniteDifferences(t *testing.T) {
	for _, name := range weightVariants {
		for _, withLoRA := range []bool{false, true} {
			m := loadVariant(t, name)
			if withLoRA {
				if name != "qwen3" {
					continue
				}
				a, err := m.AddLoRA(LoRAConfig{Rank: 4, Alpha: 8, TargetModules: LoRAModules()}, 3)
				if err != nil {
					t.Fatal(err)
				}
				randomizeB(a, 5, 0.05)
				m = mustAdapt(t, m, a)
			}
			label := name
			if withLoRA {
				label += " with adapters"
			}
			H, V := m.cfg.HiddenSize, m.cfg.VocabSize
			ids := traceIDs(11, V)
			rng := rand.New(rand.NewPCG(4, 4))
			r := make([]float32, len(ids)*H)
			for i := range r {
				r[i] = float32(rng.NormFloat64())
			}
			g := weightGrads(t, m, ids, r, false)
			gt := weightGrads(t, m, ids, r, true)
			names := m.base().names()
			if m.cfg.TieWordEmbeddings {
				names = slices.DeleteFunc(names, func(n string) bool { return n == "lm_head.weight" })
			}
			if _, ok := g["lm_head.weight"]; ok != !m.cfg.TieWordEmbeddings {
				t.Errorf("%s: an lm_head gradient %v with tied embeddings %v", label, ok, m.cfg.TieWordEmbeddings)
			}
			if len(g) != len(names) {
				t.Errorf("%s: %d gradient tensors for the model's %d", label, len(g), len(names))
			}
			unread := -1 // an embedding row no id reads
			for v := range V {
				if !slices.Contains(ids, int32(v)) {
					unread = v
					break
				}
			}
			if row := g["model.embed_tokens.weight"][unread*H : (unread+1)*H]; matLargest(row) != 0 {
				t.Errorf("%s: the embeddings' row %d, which no id reads, has gradient %g", label, unread, matLargest(row))
			}
			const eps = 1e-2
			checked := 0
			for _, tn := range names {
				if tn == "lm_head.weight" { // the head is the caller's (the probe loss does not read it)
					if matLargest(g[tn]) != 0 {
						t.Errorf("%s: the head's gradient is the caller's, got %g", label, matLargest(g[tn]))
					}
					continue
				}
				p, _, mod := m.base().slot(tn)
				w, gw := *p, g[tn]
				if mod >= 0 { // the transposed layout: the same gradient, [in, out]
					out, in := moduleShape(m.cfg, mod)
					if d, scale := maxDiff32(transposeF(gt[tn], in, out), gw), matLargest(gw); d > 1e-5*scale {
						t.Errorf("%s: %s: the transposed layout's gradient differs by %g (largest %g)", label, tn, d, scale)
					}
				} else if !slices.Equal(gt[tn], gw) {
					t.Errorf("%s: %s: the layouts' gradients differ", label, tn)
				}
				at := []int{0, len(w) / 2, len(w) - 1}
				if tn == "model.embed_tokens.weight" { // rows the ids read
					at = []int{int(ids[0]) * H, int(ids[5])*H + H/2, int(ids[10])*H + H - 1}
				}
				for _, i := range at {
					old := w[i]
					w[i] = old + eps
					up := probeLoss(t, m, ids, r, TraceOptions{})
					w[i] = old - eps
					down := probeLoss(t, m, ids, r, TraceOptions{})
					w[i] = old
					fd := (up - down) / (2 * eps)
					got := float64(gw[i])
					if scale := matLargest(gw); math.Abs(fd-got) > 3e-3*scale+2e-3*math.Abs(fd) || scale == 0 {
						t.Errorf("%s: %s[%d]: BackwardWeights %.6g, finite difference %.6g (the tensor's largest gradient %.3g)", label, tn, i, got, fd, scale)
					}
					checked++
				}
			}
			want := 3 * len(names)
			if !m.cfg.TieWordEmbeddings {
				want -= 3
			}
			if checked != want {
				t.Errorf("%s: %d elements checked, want %d", label, checked, want)
			}
		}
	}
}

// TestBackwardWeightsErrors: misuse is an error, not a panic; Zero clears the sums.
func TestBackwardWeightsErrors(t *testing.T) {
	m := loadVariant(t, "qwen3")
	ids := traceIDs(5, m.cfg.VocabSize)
	tr, err := m.Trace(ids)
	if err != nil {
		t.Fatal(err)
	}
	dh := make([]float32, len(ids)*m.cfg.HiddenSize)
	for i := range dh {
		dh[i] = 1
	}
	other := loadVariant(t, "llama").NewWeightGrads(false)
	for _, c := range []struct {
		dh   []float32
		g    *WeightGrads
		want string
	}{
		{dh, nil, "nil gradients"},
		{dh[1:], m.NewWeightGrads(true), "gradient values"},
		{dh, other, "gradient"},
	} {
		if err := tr.BackwardWeights(c.dh, c.g); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error with %q, got %v", c.want, err)
		}
	}
	g := m.NewWeightGrads(false)
	if err := tr.BackwardWeights(dh, g); err != nil {
		t.Fatal(err)
	}
	if err := tr.BackwardWeights(dh, g); err == nil || !strings.Contains(err.Error(), "used already") {
		t.Errorf("a second BackwardWeights on one trace: %v", err)
	}
	if tr2, _ := m.Trace(ids); tr2.Backward(dh, nil) == nil {
		t.Error("Backward without adapters: no error")
	}
	nonzero := 0
	for _, v := range g.Tensors() {
		if matLargest(v) != 0 {
			nonzero++
		}
	}
	g.Zero()
	for name, v := range g.Tensors() {
		if matLargest(v) != 0 {
			t.Errorf("Zero left %s non-zero", name)
		}
	}
	if nonzero == 0 {
		t.Error("no gradient was non-zero before Zero")
	}
}
