package llm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// tracedVariants are the test checkpoints a trace is checked on: Llama, Qwen2 (biases) and
// Qwen3 (q/k norms, tied embeddings, heads wider than the hidden size).
var tracedVariants = []string{"llama", "qwen2", "qwen3"}

// adapted returns the variant with rank-4 adapters on every projection, B random (so that the
// adapters change the model and every gradient path carries signal).
func adapted(t *testing.T, name string) (*Model, *Adapters) {
	t.Helper()
	m := loadVariant(t, name)
	a, err := m.AddLoRA(LoRAConfig{Rank: 4, Alpha: 8, TargetModules: LoRAModules()}, 3)
	if err != nil {
		t.Fatal(err)
	}
	randomizeB(a, 5, 0.05)
	return mustAdapt(t, m, a), a
}

func traceIDs(n int, vocab int) []int32 {
	rng := rand.New(rand.NewPCG(9, 9))
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(rng.IntN(vocab))
	}
	return ids
}

// TestTraceMatchesLogits: a trace's hidden states, through the head, are Logits' bit for bit.
func TestTraceMatchesLogits(t *testing.T) {
	for _, name := range tracedVariants {
		m, _ := adapted(t, name)
		ids := traceIDs(13, m.cfg.VocabSize)
		tr, err := m.Trace(ids)
		if err != nil {
			t.Fatal(err)
		}
		want, err := m.Logits(ids)
		if err != nil {
			t.Fatal(err)
		}
		H, V := m.cfg.HiddenSize, m.cfg.VocabSize
		flat := headProduct(tr.Hidden(), tr.Len(), H, m.Head(), V)
		got := make([][]float32, tr.Len())
		for r := range got {
			got[r] = flat[r*V : (r+1)*V]
		}
		if !sameBits(got, want) {
			t.Errorf("%s: the trace's logits differ from Logits' (max diff %g)", name, maxDiffRows(got, want))
		}
	}
}

// traceGrads traces ids through m (adapters a, options o) and returns the trace, used, and the adapters'
// gradients of the loss whose gradient with respect to the hidden states is r.
func traceGrads(t *testing.T, m *Model, a *Adapters, ids []int32, r []float32, o TraceOptions) (*Trace, []Param) {
	t.Helper()
	tr, err := m.TraceWith(ids, o)
	if err != nil {
		t.Fatal(err)
	}
	g := a.NewGradients()
	if err := tr.Backward(r, g); err != nil {
		t.Fatal(err)
	}
	return tr, g.Params()
}

// probeLoss is Σ hidden ⊙ r in float64: a loss whose gradient with respect to the hidden
// states is r.
func probeLoss(t *testing.T, m *Model, ids []int32, r []float32, o TraceOptions) float64 {
	t.Helper()
	tr, err := m.TraceWith(ids, o)
	if err != nil {
		t.Fatal(err)
	}
	var s float64
	for i, h := range tr.Hidden() {
		s += float64(h) * float64(r[i])
	}
	return s
}

// TestBackwardFiniteDifferences: Backward's adapter gradients against central differences of
// the loss, on elements of A and B of every projection of both layers, the attention's
// backward pass in blocks of 4 queries (and the same gradients, to rounding, in one block);
// without dropout, and with LoRA dropout 0.3 (the loss then that of the seed's fixed masks).
func TestBackwardFiniteDifferences(t *testing.T) {
	defer func(b int) { attnBlock = b }(attnBlock)
	for _, o := range []TraceOptions{{}, {Dropout: 0.3, Seed: 11}} {
		for _, name := range tracedVariants {
			m, a := adapted(t, name)
			name := fmt.Sprintf("%s, dropout %v", name, o.Dropout)
			ids := traceIDs(11, m.cfg.VocabSize)
			rng := rand.New(rand.NewPCG(4, 4))
			r := make([]float32, len(ids)*m.cfg.HiddenSize)
			for i := range r {
				r[i] = float32(rng.NormFloat64())
			}
			attnBlock = 1 << 20
			_, whole := traceGrads(t, m, a, ids, r, o) // the attention's backward pass in one block
			attnBlock = 4                              // in blocks of 4 queries, as below
			tr, gp := traceGrads(t, m, a, ids, r, o)
			for k := range gp {
				if d, scale := maxDiff32(gp[k].Data, whole[k].Data), matLargest(whole[k].Data); d > 1e-5*scale {
					t.Errorf("%s: %s: the attention in blocks changes the gradient by %g (largest %g)", name, gp[k].Name, d, scale)
				}
			}
			if err := tr.Backward(r, a.NewGradients()); err == nil || !strings.Contains(err.Error(), "used already") {
				t.Errorf("%s: a second Backward on one trace: %v", name, err)
			}
			const eps = 1e-2
			checked := 0
			for k, p := range a.Params() {
				for _, i := range []int{0, len(p.Data) / 2, len(p.Data) - 1} {
					old := p.Data[i]
					p.Data[i] = old + eps
					up := probeLoss(t, m, ids, r, o)
					p.Data[i] = old - eps
					down := probeLoss(t, m, ids, r, o)
					p.Data[i] = old
					fd := (up - down) / (2 * eps)
					got := float64(gp[k].Data[i])
					// Each matrix against its own largest gradient (1.5 … 55 here), so that a
					// path with small gradients (queries and keys through the softmax, Qwen3's
					// norms) is held as tightly as the others: measured at most 3.7e-4 of it.
					if scale := matLargest(gp[k].Data); math.Abs(fd-got) > 3e-3*scale+2e-3*math.Abs(fd) || scale == 0 {
						t.Errorf("%s: %s[%d]: Backward %.6g, finite difference %.6g (the matrix's largest gradient %.3g)", name, p.Name, i, got, fd, scale)
					}
					checked++
				}
			}
			if checked != 2*7*2*3 {
				t.Errorf("%s: %d elements checked", name, checked)
			}
		}
	}
}

// TestTraceCheckpointed: a checkpointed trace's hidden states and adapter gradients are the
// whole trace's bit for bit (each layer run again from its input in Backward, the attention
// in blocks of 4 queries; with LoRA dropout too, whose masks the rerun draws again), and TraceBytes counts what each kind of trace holds (and the layer
// a checkpointed trace's Backward runs again).
func TestTraceCheckpointed(t *testing.T) {
	defer func(b int) { attnBlock = b }(attnBlock)
	attnBlock = 4
	for _, c := range []struct {
		variant string
		dropout float64
	}{{"llama", 0}, {"qwen2", 0}, {"qwen3", 0}, {"qwen3", 0.2}} {
		d := c.dropout
		m, a := adapted(t, c.variant)
		name := fmt.Sprintf("%s, dropout %v", c.variant, d)
		ids := traceIDs(11, m.cfg.VocabSize)
		r := make([]float32, len(ids)*m.cfg.HiddenSize)
		for i := range r {
			r[i] = float32(math.Cos(float64(3 * i)))
		}
		whole, err := m.TraceWith(ids, TraceOptions{Dropout: d, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		light, err := m.TraceWith(ids, TraceOptions{Checkpointed: true, Dropout: d, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		if !sameBits([][]float32{whole.Hidden()}, [][]float32{light.Hidden()}) {
			t.Errorf("%s: the checkpointed trace's hidden states differ", name)
		}
		// What each holds, against TraceBytes: the whole trace's every layer; the checkpointed
		// one's layer inputs, and the one layer Backward runs again at a time.
		held := func(tr *Trace) float64 {
			n := len(tr.last) + len(tr.hidden)
			for _, tl := range tr.layers {
				n += len(tl.x) + len(tl.mid) + len(tl.qRaw) + len(tl.kRaw) + len(tl.q) + len(tl.k) + len(tl.v) +
					len(tl.att) + len(tl.gate) + len(tl.up) + len(tl.act)
				for _, xa := range tl.xa {
					n += len(xa)
				}
			}
			return 4 * float64(n)
		}
		layer := (held(whole) - held(light)) / float64(len(whole.layers)) // one layer less its input
		wholeHeld, wholeBack := m.TraceBytes(len(ids), TraceOptions{Dropout: d})
		lightHeld, lightBack := m.TraceBytes(len(ids), TraceOptions{Checkpointed: true, Dropout: d})
		for _, c := range []struct {
			what      string
			got, want float64
		}{{"whole", held(whole), wholeHeld}, {"checkpointed", held(light), lightHeld}, {"checkpointed's layer run again", layer, lightBack - wholeBack}} {
			if c.got > c.want || c.got < 0.85*c.want {
				t.Errorf("%s: a %s trace holds %.0f bytes, TraceBytes says %.0f", name, c.what, c.got, c.want)
			}
		}
		gw, gl := a.NewGradients(), a.NewGradients()
		if err := whole.Backward(r, gw); err != nil {
			t.Fatal(err)
		}
		if err := light.Backward(r, gl); err != nil {
			t.Fatal(err)
		}
		pw, pl := gw.Params(), gl.Params()
		for k := range pw {
			if !sameBits([][]float32{pw[k].Data}, [][]float32{pl[k].Data}) || matLargest(pw[k].Data) == 0 {
				t.Errorf("%s: %s: checkpointed gradients differ by %g (largest %g)", name, pw[k].Name,
					maxDiff32(pw[k].Data, pl[k].Data), matLargest(pw[k].Data))
			}
		}
	}
}

// TestBackwardTransposed: a model holding its projections transposed (as a shared GoMLX store
// lays them out) gives the same gradients, to rounding: on 9 positions, and on 26, whose
// input gradients take a product padded to 32 columns (paddedWidth).
func TestBackwardTransposed(t *testing.T) {
	for n, want := range map[int]int{9: 9, 16: 16, 23: 23, 24: 32, 26: 32, 31: 32, 32: 32, 255: 256, 250: 256, 240: 240} {
		if got := paddedWidth(n); got != want {
			t.Errorf("paddedWidth(%d) = %d, want %d", n, got, want)
		}
	}
	m, a := adapted(t, "qwen2")
	mt, err := FromWeightsTransposed(m.cfg, "", storeLayout(m))
	if err != nil {
		t.Fatal(err)
	}
	mt = mustAdapt(t, mt, a)
	for _, n := range []int{9, 26} {
		ids := traceIDs(n, m.cfg.VocabSize)
		r := make([]float32, len(ids)*m.cfg.HiddenSize)
		for i := range r {
			r[i] = float32(math.Sin(float64(i)))
		}
		_, g0 := traceGrads(t, m, a, ids, r, TraceOptions{})
		_, g1 := traceGrads(t, mt, a, ids, r, TraceOptions{})
		for k := range g0 {
			scale := 0.0
			for _, v := range g0[k].Data {
				scale = max(scale, math.Abs(float64(v)))
			}
			if d := maxDiff32(g0[k].Data, g1[k].Data); d > 1e-5*scale || scale == 0 {
				t.Errorf("%d positions: %s: transposed weights' gradient differs by %g (largest %g)", n, g0[k].Name, d, scale)
			}
		}
	}
}

// TestBackwardErrors: misuse is an error, not a panic.
func TestBackwardErrors(t *testing.T) {
	m, a := adapted(t, "llama")
	ids := traceIDs(5, m.cfg.VocabSize)
	dh := make([]float32, len(ids)*m.cfg.HiddenSize)
	base := m.base()
	tr, err := base.Trace(ids)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Backward(dh, a.NewGradients()); err == nil || !strings.Contains(err.Error(), "no adapters") {
		t.Errorf("a model without adapters: %v", err)
	}
	tr, _ = m.Trace(ids)
	if err := tr.Backward(dh[1:], a.NewGradients()); err == nil || !strings.Contains(err.Error(), "gradient values") {
		t.Errorf("a short gradient: %v", err)
	}
	other, err := base.AddLoRA(LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj"}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Backward(dh, other.NewGradients()); err == nil || !strings.Contains(err.Error(), "rank") {
		t.Errorf("gradients of other adapters: %v", err)
	}
	if err := tr.Backward(dh, nil); err == nil {
		t.Error("nil gradients: no error")
	}
	if _, err := m.Trace(nil); err == nil {
		t.Error("Trace of no tokens: no error")
	}
	for _, d := range []float64{-0.1, 1, math.NaN()} {
		if _, err := m.TraceWith(ids, TraceOptions{Dropout: d}); err == nil || !strings.Contains(err.Error(), "dropout") {
			t.Errorf("dropout %v: %v", d, err)
		}
	}
	if _, err := base.TraceWith(ids, TraceOptions{Dropout: 0.1}); err == nil || !strings.Contains(err.Error(), "without adapters") {
		t.Errorf("dropout without adapters: %v", err)
	}
	if _, err := m.Trace([]int32{int32(m.cfg.VocabSize)}); err == nil {
		t.Error("Trace of a token outside the vocabulary: no error")
	}
}

// matLargest is the largest magnitude in x.
func matLargest(x []float32) float64 {
	m := 0.0
	for _, v := range x {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}

// TestDropoutMask: the masks drop each element with probability p (0.3: 30,000 of 100,000
// rows' elements, within 5 standard deviations), scale the rest by 1/(1−p), are the same for
// the same (seed, layer, projection, position) and differ when any of them changes; p = 0
// keeps the row.
func TestDropoutMask(t *testing.T) {
	const p, width = 0.3, 1000
	x := make([]float32, width)
	for i := range x {
		x[i] = float32(i + 1)
	}
	row := func(seed uint64, l, mod, pos int) []float32 {
		out := make([]float32, width)
		dropoutMask(seed, l, mod, pos, p, x, out)
		return out
	}
	zero := 0
	for pos := range 100 {
		for i, v := range row(1, 0, 0, pos) {
			switch v {
			case 0:
				zero++
			case x[i] * float32(1/(1-p)):
			default:
				t.Fatalf("position %d element %d: %v from %v", pos, i, v, x[i])
			}
		}
	}
	if sd := math.Sqrt(1e5 * p * (1 - p)); math.Abs(float64(zero)-1e5*p) > 5*sd {
		t.Errorf("%d of 100,000 dropped, want about %.0f (±%.0f)", zero, 1e5*p, sd)
	}
	ref := row(7, 2, 3, 9)
	if !sameBits([][]float32{ref}, [][]float32{row(7, 2, 3, 9)}) {
		t.Error("the same mask drawn twice differs")
	}
	for _, other := range [][]float32{row(8, 2, 3, 9), row(7, 1, 3, 9), row(7, 2, 4, 9), row(7, 2, 3, 10)} {
		same := 0
		for i := range ref {
			if (ref[i] == 0) == (other[i] == 0) {
				same++
			}
		}
		if same > 700 { // independent masks agree on 0.3² + 0.7² = 58% of the elements
			t.Errorf("another seed, layer, projection or position: %d of %d elements masked alike", same, width)
		}
	}
	out := make([]float32, width)
	dropoutMask(7, 2, 3, 9, 0, x, out)
	if !sameBits([][]float32{out}, [][]float32{x}) {
		t.Error("p = 0 changes the row")
	}
}

// BenchmarkDropoutMask: one MLP-wide row (1,536 features, SmolLM2-135M's down_proj input)
// through its mask.
func BenchmarkDropoutMask(b *testing.B) {
	x, dst := make([]float32, 1536), make([]float32, 1536)
	for i := range x {
		x[i] = float32(i)
	}
	b.SetBytes(4 * int64(len(x)))
	for t := 0; b.Loop(); t++ {
		dropoutMask(7, 3, 2, t, 0.1, x, dst)
	}
}
