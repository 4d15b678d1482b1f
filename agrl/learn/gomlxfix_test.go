package learn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/nn"
)

func randTensor(rng *rand.Rand, dims ...int) *tensors.Tensor {
	n := 1
	for _, d := range dims {
		n *= d
	}
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(rng.NormFloat64())
	}
	return tensors.FromFlatDataAndDimensions(data, dims...)
}

// gradients of sum(c ⊙ f(a, b)) with respect to a and b.
func gradients(t *testing.T, f func(a, b *graph.Node) *graph.Node, a, b, c *tensors.Tensor) [][]float32 {
	backend := MustNewBackend(DefaultBackend)
	e, err := graph.NewExec(backend, func(a, b, c *graph.Node) []*graph.Node {
		loss := graph.ReduceAllSum(graph.Mul(c, f(a, b)))
		return graph.Gradient(loss, a, b)
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.Call(a, b, c)
	if err != nil {
		t.Fatal(err)
	}
	return [][]float32{tensors.MustCopyFlatData[float32](out[0]), tensors.MustCopyFlatData[float32](out[1])}
}

func closeAll(t *testing.T, name string, got, want [][]float32) {
	t.Helper()
	for k := range want {
		if len(got[k]) != len(want[k]) {
			t.Fatalf("%s: gradient %d has %d values, want %d", name, k, len(got[k]), len(want[k]))
		}
		for i := range want[k] {
			if d := math.Abs(float64(got[k][i] - want[k][i])); d > 1e-4*(1+math.Abs(float64(want[k][i]))) {
				t.Fatalf("%s: gradient %d[%d] = %v, want %v", name, k, i, got[k][i], want[k][i])
			}
		}
	}
}

func TestMatmulVJPMatchesGoMLX(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := []struct {
		name   string
		eq     string
		a, b   []int
		output []int
	}{
		{"x·W K<M", "pk,km->pm", []int{6, 3}, []int{3, 5}, []int{6, 5}},
		{"x·W K>M", "pk,km->pm", []int{6, 5}, []int{5, 2}, []int{6, 2}},
		{"x·Wᵀ", "pk,mk->pm", []int{6, 4}, []int{3, 4}, []int{6, 3}},
		{"x·Wᵀ K>M", "pk,mk->pm", []int{6, 4}, []int{7, 4}, []int{6, 7}},
		{"scores", "nqd,nkd->nqk", []int{2, 5, 3}, []int{2, 4, 3}, []int{2, 5, 4}},
		{"attend", "nqk,nkd->nqd", []int{2, 5, 4}, []int{2, 4, 3}, []int{2, 5, 3}},
	}
	defer func() { fastMatmulVJP = true }()
	for _, c := range cases {
		a, b, w := randTensor(rng, c.a...), randTensor(rng, c.b...), randTensor(rng, c.output...)
		f := func(x, y *graph.Node) *graph.Node { return graph.Einsum(c.eq, x, y) }
		fastMatmulVJP = false
		want := gradients(t, f, a, b, w)
		fastMatmulVJP = true
		before := fastMatmulUses.Load()
		got := gradients(t, f, a, b, w)
		if fastMatmulUses.Load() == before {
			t.Errorf("%s: the fast matmul gradient was not used", c.name)
		}
		closeAll(t, c.name, got, want)
	}
}

func TestSoftmaxAndReluGradients(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	a, b, w := randTensor(rng, 3, 4, 6), randTensor(rng, 3, 4, 6), randTensor(rng, 3, 4, 6)
	mine := func(x, y *graph.Node) *graph.Node { return graph.Add(softmax(x), relu(y)) }
	ref := func(x, y *graph.Node) *graph.Node {
		return graph.Add(graph.Softmax(x, -1), graph.Max(y, graph.ZerosLike(y)))
	}
	closeAll(t, "softmax+relu", gradients(t, mine, a, b, w), gradients(t, ref, a, b, w))
}

func TestLayerNormAndDenseReluGradients(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	x, w := randTensor(rng, 2, 3, 8), randTensor(rng, 8, 5)
	backend := MustNewBackend(DefaultBackend)
	run := func(mine bool) [][]float32 {
		e, err := graph.NewExec(backend, func(x, w *graph.Node) []*graph.Node {
			g := graph.Slice(w, graph.AxisRange(), graph.AxisElem(0))  // [8] gain from w
			bb := graph.Slice(w, graph.AxisRange(), graph.AxisElem(1)) // [8] bias from w
			g, bb = graph.Reshape(g, 8), graph.Reshape(bb, 8)
			var y *graph.Node
			if mine {
				y = denseRelu(layerNorm(x, g, bb), w)
			} else {
				h := nn.LayerNorm(x, []int{-1}, lnEps, g, bb, nil)
				y = graph.Max(graph.Einsum("btd,dm->btm", h, w), graph.ScalarZero(x.Graph(), x.DType()))
			}
			c := graph.Const(x.Graph(), randTensor(rand.New(rand.NewPCG(7, 8)), 2, 3, 5))
			loss := graph.ReduceAllSum(graph.Mul(c, y))
			return append([]*graph.Node{y}, graph.Gradient(loss, x, w)...)
		})
		if err != nil {
			t.Fatal(err)
		}
		out, err := e.Call(x, w)
		if err != nil {
			t.Fatal(err)
		}
		var res [][]float32
		for _, o := range out {
			res = append(res, tensors.MustCopyFlatData[float32](o))
		}
		return res
	}
	closeAll(t, "layernorm+dense-relu", run(true), run(false))
}
