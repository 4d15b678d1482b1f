package hfgraph

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
	"github.com/gomlx/gomlx/ml/train/optimizer"
)

// nllLoss is the mean negative log-likelihood of the real targets: −Σ logp / Σ valid.
func nllLoss(m *Model, tokens, lengths *graph.Node) *graph.Node {
	logp, _, valid := m.TokenStats(tokens, lengths, nil)
	return graph.Neg(graph.Div(graph.ReduceAllSum(logp), graph.ReduceAllSum(valid)))
}

func scalar(t testing.TB, x *tensors.Tensor) float64 {
	t.Helper()
	return float64(tensors.MustCopyFlatData[float32](x)[0])
}

// TestGradients compares the graph's gradient of the NLL with respect to adapter coordinates
// with central finite differences of the same float32 graph.
//
// Tolerance. The loss is about 5.5 (log 256), where a float32 ulp is 4.8e-7; its float32
// evaluation carries rounding noise δ of a few ulps, which the central difference turns into
// an error of about δ/ε. With ε = 1e-2 (the adapter values are about 0.1) that is ~1e-4, and
// the O(ε²) truncation term is ~1e-5 at these curvatures. So we allow |fd − grad| ≤ 3e-4 +
// 1e-2·|grad| (the relative term covers the truncation error of large gradients), and require
// the coordinates to have gradients well above that (> 3e-3) so the check is not vacuous.
func TestGradients(t *testing.T) {
	for _, name := range []string{"qwen3", "qwen2", "llama-sharded"} {
		t.Run(name, func(t *testing.T) { gradCheck(t, name, false) })
	}
}

// TestBaseGradients is TestGradients for full fine-tuning: the gradient with respect to the
// base weights (embeddings, projections, biases, norms, head), with adapters on, against
// central finite differences.
func TestBaseGradients(t *testing.T) {
	for _, name := range []string{"qwen3", "qwen2", "llama"} {
		t.Run(name, func(t *testing.T) { gradCheck(t, name, true) })
	}
}

// gradCheck checks the gradient with respect to the adapters, or with base the base weights.
func gradCheck(t *testing.T, name string, base bool) {
	ref := loadLLM(t, name)
	g := loadGraph(t, name)
	if err := g.SetAdapters(randomAdapters(t, ref, 21)); err != nil {
		t.Fatal(err)
	}
	vars := g.AdapterVariables()
	if base {
		vars = g.BaseVariables()
	}
	seqs := testSeqs(g.Config().VocabSize, 5, 10, 7)
	tok, lens, err := Pad(seqs, 12)
	if err != nil {
		t.Fatal(err)
	}
	gradExec, err := model.NewExec(backend(t), g.Store(), func(_ *model.Scope, tokens, lengths *graph.Node) []*graph.Node {
		loss := nllLoss(g, tokens, lengths)
		nodes := make([]*graph.Node, len(vars))
		for i, v := range vars {
			nodes[i] = v.NodeValue(tokens.Graph())
		}
		return append([]*graph.Node{loss}, graph.Gradient(loss, nodes...)...)
	})
	if err != nil {
		t.Fatal(err)
	}
	lossExec, err := model.NewExec(backend(t), g.Store(), func(_ *model.Scope, tokens, lengths *graph.Node) *graph.Node {
		return nllLoss(g, tokens, lengths)
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := gradExec.Call(tok, lens)
	if err != nil {
		t.Fatal(err)
	}
	loss0 := scalar(t, out[0])
	grads := make([][]float32, len(vars))
	for i := range vars {
		grads[i] = tensors.MustCopyFlatData[float32](out[1+i])
	}
	lossAt := func() float64 {
		o, err := lossExec.Call(tok, lens)
		if err != nil {
			t.Fatal(err)
		}
		return scalar(t, o[0])
	}
	if l := lossAt(); l != loss0 {
		t.Fatalf("loss %v from the loss graph, %v from the gradient graph", l, loss0)
	}

	// Sample coordinates: in each of a few matrices, the one with the largest gradient and a
	// random one with a gradient above 3e-3.
	rng := rand.New(rand.NewPCG(1, 2))
	type coord struct{ v, k int }
	var coords []coord
	for _, vi := range []int{0, 1, 4, 5, 9, 13, len(vars) - 2, len(vars) - 1} {
		gr := grads[vi]
		best := 0
		for k := range gr {
			if math.Abs(float64(gr[k])) > math.Abs(float64(gr[best])) {
				best = k
			}
		}
		coords = append(coords, coord{vi, best})
		for range 50 {
			if k := rng.IntN(len(gr)); math.Abs(float64(gr[k])) > 3e-3 && k != best {
				coords = append(coords, coord{vi, k})
				break
			}
		}
	}
	const eps = 1e-2
	worst, worstRel := 0.0, 0.0
	for _, c := range coords {
		v := vars[c.v]
		orig := values(t, v)
		at := func(delta float32) float64 {
			d := slices.Clone(orig)
			d[c.k] += delta
			if err := v.SetValue(tensors.FromFlatDataAndDimensions(d, v.Shape().Dimensions...)); err != nil {
				t.Fatal(err)
			}
			return lossAt()
		}
		fd := (at(eps) - at(-eps)) / (2 * eps)
		if err := v.SetValue(tensors.FromFlatDataAndDimensions(orig, v.Shape().Dimensions...)); err != nil {
			t.Fatal(err)
		}
		gr := float64(grads[c.v][c.k])
		diff := math.Abs(fd - gr)
		worst, worstRel = max(worst, diff), max(worstRel, diff/math.Abs(gr))
		if math.Abs(gr) < 3e-3 || diff > 3e-4+1e-2*math.Abs(gr) {
			t.Errorf("%s[%d]: gradient %.6g, finite difference %.6g (|Δ| %.2g)", v.Path(), c.k, gr, fd, diff)
		}
	}
	t.Logf("loss %.4f; %d coordinates: max |fd − grad| %.2g, max relative %.2g", loss0, len(coords), worst, worstRel)
	if l := lossAt(); l != loss0 {
		t.Fatalf("the adapters were not restored: loss %v, was %v", l, loss0)
	}

	// The whole gradient at once: the derivative along a unit direction u over every adapter
	// value, grad·u, against (L(θ+εu) − L(θ−εu))/2ε (same noise argument and bound). u is the
	// sum of the unit gradient and a random unit vector: a random direction alone is nearly
	// orthogonal to the gradient in these ~10⁴ dimensions.
	var gNorm, rNorm float64
	rnd := make([][]float32, len(vars))
	for i := range vars {
		rnd[i] = make([]float32, len(grads[i]))
		for k := range rnd[i] {
			rnd[i][k] = float32(rng.NormFloat64())
			rNorm += float64(rnd[i][k]) * float64(rnd[i][k])
			gNorm += float64(grads[i][k]) * float64(grads[i][k])
		}
	}
	gNorm, rNorm = math.Sqrt(gNorm), math.Sqrt(rNorm)
	dir := make([][]float32, len(vars))
	var norm float64
	for i := range vars {
		dir[i] = make([]float32, len(grads[i]))
		for k := range dir[i] {
			dir[i][k] = float32(float64(grads[i][k])/gNorm + float64(rnd[i][k])/rNorm)
			norm += float64(dir[i][k]) * float64(dir[i][k])
		}
	}
	norm = math.Sqrt(norm)
	orig := make([][]float32, len(vars))
	var dot float64
	for i, v := range vars {
		orig[i] = values(t, v)
		for k := range dir[i] {
			dir[i][k] /= float32(norm)
			dot += float64(dir[i][k]) * float64(grads[i][k])
		}
	}
	along := func(s float32) float64 {
		for i, v := range vars {
			d := slices.Clone(orig[i])
			for k := range d {
				d[k] += s * dir[i][k]
			}
			if err := v.SetValue(tensors.FromFlatDataAndDimensions(d, v.Shape().Dimensions...)); err != nil {
				t.Fatal(err)
			}
		}
		return lossAt()
	}
	fd := (along(eps) - along(-eps)) / (2 * eps)
	along(0)
	t.Logf("directional derivative: grad·u %.6g, finite difference %.6g", dot, fd)
	if math.Abs(fd-dot) > 3e-4+1e-2*math.Abs(dot) || math.Abs(dot) < 3e-3 {
		t.Errorf("directional derivative: grad·u %.6g, finite difference %.6g", dot, fd)
	}
}

// TestFrozenBase takes one step of GoMLX's Adam (optimizer.Adam, UpdateGraph over the store's
// trainable variables) and checks that the base weights get no gradient and stay bit for bit,
// while every adapter matrix moves.
func TestFrozenBase(t *testing.T) {
	ref := loadLLM(t, "qwen3")
	g := loadGraph(t, "qwen3")
	if err := g.SetAdapters(randomAdapters(t, ref, 31)); err != nil {
		t.Fatal(err)
	}
	tok, lens, err := Pad(testSeqs(g.Config().VocabSize, 6, 9, 5), 10)
	if err != nil {
		t.Fatal(err)
	}
	base, adapters := g.BaseVariables(), g.AdapterVariables()
	before := func(vs []*model.Variable) [][]float32 {
		out := make([][]float32, len(vs))
		for i, v := range vs {
			out[i] = values(t, v)
		}
		return out
	}
	baseBefore, adBefore := before(base), before(adapters)

	opt := optimizer.Adam().LearningRate(1e-3).Done()
	nGrads := -1
	step, err := model.NewExec(backend(t), g.Store(), func(scope *model.Scope, tokens, lengths *graph.Node) *graph.Node {
		loss := nllLoss(g, tokens, lengths)
		nGrads = len(scope.BuildTrainableVariablesGradientsGraph(loss))
		opt.UpdateGraph(scope, tokens.Graph(), loss)
		return loss
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := step.Call(tok, lens); err != nil {
		t.Fatal(err)
	}
	if nGrads != len(adapters) {
		t.Errorf("%d trainable variables get gradients, want the %d adapter matrices", nGrads, len(adapters))
	}
	for i, v := range base {
		if v.Trainable || !slices.Equal(values(t, v), baseBefore[i]) {
			t.Fatalf("base weight %s changed (trainable %v)", v.Path(), v.Trainable)
		}
	}
	for i, v := range adapters {
		if !v.Trainable || slices.Equal(values(t, v), adBefore[i]) {
			t.Errorf("adapter %s did not move (trainable %v)", v.Path(), v.Trainable)
		}
	}
	// The reference policy's graph uses no trainable variable at all.
	refGrads := -1
	refExec, err := model.NewExec(backend(t), g.Store(), func(scope *model.Scope, tokens, lengths *graph.Node) *graph.Node {
		loss := nllLoss(g.Base(), tokens, lengths)
		refGrads = len(scope.BuildTrainableVariablesGradientsGraph(loss))
		return loss
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := refExec.Call(tok, lens); err != nil {
		t.Fatal(err)
	}
	if refGrads != 0 {
		t.Errorf("the Base graph has %d trainable variables, want 0", refGrads)
	}
}

// TestTrainingLowersLoss fits fresh adapters (B zero, as AddLoRA makes them) to one short
// sequence with 20 Adam steps.
func TestTrainingLowersLoss(t *testing.T) {
	for _, name := range []string{"llama3-tied", "qwen2"} {
		t.Run(name, func(t *testing.T) {
			g := loadGraph(t, name)
			if err := g.AddLoRA(allLinear(4, 8), 1); err != nil {
				t.Fatal(err)
			}
			tok, lens, err := Pad(testSeqs(g.Config().VocabSize, 8, 12), 0)
			if err != nil {
				t.Fatal(err)
			}
			opt := optimizer.Adam().LearningRate(1e-2).Done()
			step, err := model.NewExec(backend(t), g.Store(), func(scope *model.Scope, tokens, lengths *graph.Node) *graph.Node {
				loss := nllLoss(g, tokens, lengths)
				opt.UpdateGraph(scope, tokens.Graph(), loss)
				return loss
			})
			if err != nil {
				t.Fatal(err)
			}
			var losses []float64
			for range 20 {
				out, err := step.Call(tok, lens)
				if err != nil {
					t.Fatal(err)
				}
				losses = append(losses, scalar(t, out[0]))
			}
			t.Logf("loss %s", fmtLosses(losses))
			if first, last := losses[0], losses[len(losses)-1]; !(last < 0.5*first) {
				t.Errorf("loss %.4f -> %.4f in 20 steps, want it at least halved", first, last)
			}
		})
	}
}

func fmtLosses(l []float64) string {
	s := ""
	for i, v := range l {
		if i%4 == 0 || i == len(l)-1 {
			s += fmt.Sprintf(" %d:%.3f", i, v)
		}
	}
	return s
}
