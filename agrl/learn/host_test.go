package learn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"agrl.dev/agrl"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
)

// TestGemm checks the host kernels against a float64 product, in every layout the host trainer
// uses (A row-major and transposed, strided B and C) and at shapes with every kind of tail,
// and that each row of C has the same bits when it is the product's only row (the kernels for
// blocks of 8 and 4 rows and for single rows run the same chains of multiply-adds).
func TestGemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	fill := func(n int) []float32 { return randNormals(rng, n) }
	for _, sh := range [][3]int{{1, 1, 1}, {4, 32, 8}, {5, 37, 3}, {7, 16, 40}, {9, 33, 17}, {64, 211, 128}, {3, 15, 2}, {130, 384, 128}, {1, 200, 70}, {11, 130, 5}, {2, 64, 600}} {
		m, n, kk := sh[0], sh[1], sh[2]
		for _, trans := range []bool{false, true} {
			a := fill(m * kk)
			ai, ak := kk, 1
			if trans {
				ai, ak = 1, m
			}
			ldb, ldc := n+3, n+5
			b, c := fill(kk*ldb), fill(m*ldc)
			want := make([]float64, len(c))
			for i := range m {
				for j := range ldc {
					want[i*ldc+j] = float64(c[i*ldc+j])
					if j >= n {
						continue
					}
					for k := range kk {
						want[i*ldc+j] += float64(a[i*ai+k*ak]) * float64(b[k*ldb+j])
					}
				}
			}
			set := make([]float32, len(c)) // gemmRowsSet: the product alone where C is written
			for i := range m {
				for j := range ldc {
					set[i*ldc+j] = float32(want[i*ldc+j] - float64(c[i*ldc+j]))
					if j >= n {
						set[i*ldc+j] = c[i*ldc+j]
					}
				}
			}
			got := append([]float32(nil), c...)
			gemmRowsSet(2, m, n, kk, a, ai, ak, b, ldb, got, ldc)
			for i, g := range got {
				if d := math.Abs(float64(g - set[i])); d > 1e-4*(1+math.Abs(float64(set[i]))) {
					t.Fatalf("%v trans %v: stored C[%d] = %v, want %v", sh, trans, i, g, set[i])
				}
			}
			for _, add := range []bool{false, true} {
				whole := append([]float32(nil), c...)
				gemmK(m, n, kk, a, ai, ak, b, ldb, whole, ldc, add)
				for i := range m {
					row := append([]float32(nil), c[i*ldc:i*ldc+n]...)
					gemmK(1, n, kk, a[i*ai:], ai, ak, b, ldb, row, n, add)
					if !slices.Equal(row, whole[i*ldc:i*ldc+n]) {
						t.Fatalf("%v trans %v add %v: row %d alone differs from its bits in the product", sh, trans, add, i)
					}
				}
			}
			for _, workers := range []int{1, 2} {
				got := append([]float32(nil), c...)
				gemmRows(workers, m, n, kk, a, ai, ak, b, ldb, got, ldc)
				for i, g := range got {
					if d := math.Abs(float64(g) - want[i]); d > 1e-4*(1+math.Abs(want[i])) {
						t.Fatalf("%v trans %v workers %d: C[%d] = %v, want %v", sh, trans, workers, i, g, want[i])
					}
				}
				if workers == 2 {
					one := append([]float32(nil), c...)
					gemmRows(1, m, n, kk, a, ai, ak, b, ldb, one, ldc)
					for i := range one {
						if one[i] != got[i] {
							t.Fatalf("%v: two workers differ from one at %d: %v vs %v", sh, i, got[i], one[i])
						}
					}
				}
			}
		}
	}
}

// TestProductTRows: productTInto (the host's x·wt, llm.SetLinearT's kernel) gives every row the
// bits it gets as the product's only row, for every row count from 1 to 69 — the column-split
// path of a decoding step's few rows, whose rows past a multiple of 8 are padded to 8 on the
// AVX-512 kernel, and the row-split path above it — at output widths that are and are not
// whole 32-wide blocks, a piece each core or fewer.
func TestProductTRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, sh := range [][2]int{{70, 40}, {300, 192}, {64, 576}, {33, 1000}} {
		in, out := sh[0], sh[1]
		wt := randNormals(rng, in*out)
		for rows := 1; rows < 70; rows++ {
			x := randNormals(rng, rows*in)
			y := make([]float32, rows*out)
			for i := range y {
				y[i] = float32(math.NaN()) // every element must be written
			}
			productTInto(y, x, rows, in, wt, out)
			for r := range rows {
				alone := make([]float32, out)
				productTInto(alone, x[r*in:(r+1)*in], 1, in, wt, out)
				if !slices.Equal(y[r*out:(r+1)*out], alone) {
					t.Fatalf("in %d, out %d, %d rows: row %d differs from the row alone", in, out, rows, r)
				}
				var want float64 // one element against float64, so the rows alone are checked too
				for k := range in {
					want += float64(x[r*in+k]) * float64(wt[k*out+out-1])
				}
				if d := math.Abs(float64(alone[out-1]) - want); d > 1e-4*(1+math.Abs(want)) {
					t.Fatalf("in %d, out %d: row %d's last output %v, want %v", in, out, r, alone[out-1], want)
				}
			}
		}
	}
}

// randNormals returns n standard normal float32s.
func randNormals(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// entLoss is a loss that reads log-probs, entropies and two values: −Σ mask·(adv·logp + 0.05·H) / Σ mask.
func entLoss(in LossInputs) (*graph.Node, map[string]*graph.Node) {
	mask := graph.Mul(in.Values["mask"], in.Valid)
	g := mask.Graph()
	n := graph.Max(in.Sums["mask"], graph.Const(g, float32(1)))
	obj := graph.Add(graph.Mul(in.Values["adv"], in.LogProbs), graph.MulScalar(in.Entropy, 0.05))
	loss := graph.Div(graph.Neg(graph.ReduceAllSum(graph.Mul(mask, obj))), n)
	return loss, map[string]*graph.Node{
		"accuracy": graph.Div(graph.ReduceAllSum(graph.Mul(mask, in.Top1)), n),
		"entropy":  graph.Div(graph.ReduceAllSum(graph.Mul(mask, in.Entropy)), n),
	}
}

// TestHostMatchesGraph computes one batch's loss, metrics and gradients with the host trainer
// and with the GoMLX graph, and checks that they agree (float rounding only), at temperature 1
// and 0.7, for the SFT loss and for a loss with an entropy term.
func TestHostMatchesGraph(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	p := MustNewPolicy(agrl.TinyLM().Context(128).Seed(9))
	b := randomTrainBatch(rng, p.arch.Vocab(), 13, 90)
	for _, tc := range []struct {
		loss LossFunc
		temp float64
	}{{SFTLoss, 1}, {entLoss, 0.7}} {
		values := []string{"mask"}
		if tc.temp != 1 {
			values = append(values, "adv")
		}
		tr, err := p.NewTrainer("cmp", tc.loss, values, agrl.NewAdamW(), tc.temp)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.ensureExecs(); err != nil {
			t.Fatal(err)
		}
		pieces, plan, _ := tr.pieceArgs(b)
		outs, err := runPieces(tr.gradExec, pieces, plan)
		if err != nil {
			t.Fatal(err)
		}
		gst := tr.stats(outs)
		hst, hgrads, err := tr.hostGrads(b)
		if err != nil {
			t.Fatal(err)
		}
		if d := math.Abs(gst.Loss - hst.Loss); d > 1e-5*(1+math.Abs(gst.Loss)) {
			t.Errorf("T %v: loss host %v, graph %v", tc.temp, hst.Loss, gst.Loss)
		}
		for k, gv := range gst.Metrics {
			if d := math.Abs(gv - hst.Metrics[k]); d > 1e-5*(1+math.Abs(gv)) {
				t.Errorf("T %v: metric %s host %v, graph %v", tc.temp, k, hst.Metrics[k], gv)
			}
		}
		for i, spec := range p.arch.weightSpecs() {
			want := make([]float32, len(hgrads[i]))
			for _, o := range outs {
				for j, x := range tensors.MustCopyFlatData[float32](o[1+len(tr.metrics)+i]) {
					want[j] += x
				}
			}
			got := hgrads[i]
			var scale, worst float64
			for j := range want {
				scale = max(scale, math.Abs(float64(want[j])))
				worst = max(worst, math.Abs(float64(got[j]-want[j])))
			}
			if scale == 0 || worst > 2e-4*scale {
				t.Errorf("T %v: gradient of %s: max |host − graph| %.3g, max |graph| %.3g", tc.temp, spec.name, worst, scale)
			}
		}
	}
}

// randomTrainBatch draws count sequences of random tokens after BOS, with random masks and
// advantages: the first 128 tokens long, the others 2 to spread+1.
func randomTrainBatch(rng *rand.Rand, vocab, count, spread int) TrainBatch {
	b := TrainBatch{Values: map[string][][]float32{"mask": nil, "adv": nil}}
	for i := range count {
		n := 2 + rng.IntN(spread)
		if i == 0 {
			n = 128
		}
		seq := []int32{agrl.BOS}
		mask, adv := []float32{0}, []float32{0}
		for range n - 1 {
			seq = append(seq, int32(4+rng.IntN(vocab-4)))
			mask = append(mask, float32(rng.IntN(2)))
			adv = append(adv, float32(rng.NormFloat64()))
		}
		b.Tokens = append(b.Tokens, seq)
		b.Values["mask"] = append(b.Values["mask"], mask)
		b.Values["adv"] = append(b.Values["adv"], adv)
	}
	return b
}

// TestCausalBlockKeepsBits runs the host trainer's forward and backward pass over one batch
// with the attention's blocks (causalBlock) of 1 to 128 rows and requires the same loss and
// the same gradients, bit for bit: a block only adds exact zeros to the chains of the
// products, so the AVX2 path's 18 and the AVX-512 path's 16 train alike. The sequences are
// up to 128 long, several blocks of every size tried but the last.
func TestCausalBlockKeepsBits(t *testing.T) { causalBlockKeepsBits(t) }

func causalBlockKeepsBits(t *testing.T) {
	defer func() { forceCausalBlock = 0 }()
	rng := rand.New(rand.NewPCG(5, 7))
	p := MustNewPolicy(agrl.TinyLM().Context(128).Seed(9))
	b := randomTrainBatch(rng, p.arch.Vocab(), 9, 100)
	tr, err := p.NewTrainer("cmp", entLoss, []string{"mask", "adv"}, agrl.NewAdamW(), 0.7)
	if err != nil {
		t.Fatal(err)
	}
	grads := func(block int) (float64, [][]float32) {
		forceCausalBlock = block
		st, g, err := tr.hostGrads(b)
		if err != nil {
			t.Fatal(err)
		}
		return st.Loss, g
	}
	forceCausalBlock = 0
	t.Logf("the default block here: %d rows", causalBlock())
	wantLoss, want := grads(16)
	for _, block := range []int{1, 5, 6, 8, 18, 24, 64, 128} {
		loss, got := grads(block)
		if math.Float64bits(loss) != math.Float64bits(wantLoss) {
			t.Errorf("block %d: loss %v, with 16 %v", block, loss, wantLoss)
		}
		for i, spec := range p.arch.weightSpecs() {
			for j := range want[i] {
				if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
					t.Errorf("block %d: gradient of %s [%d]: %v, with 16 %v", block, spec.name, j, got[i][j], want[i][j])
					break
				}
			}
		}
	}
}

// TestExp32 checks the host softmaxes' exponential against math.Exp over its whole range.
func TestExp32(t *testing.T) {
	worst := 0.0
	for x := float32(-87.3); x <= 88.7; x += 0.00731 {
		want := math.Exp(float64(x))
		rel := math.Abs(float64(exp32(x))-want) / want
		worst = max(worst, rel)
	}
	if worst > 3e-7 { // 2.5 ulp of float32
		t.Errorf("exp32: worst relative error %.3g", worst)
	}
	if exp32(-100) != 0 || !math.IsInf(float64(exp32(100)), 1) || exp32(0) != 1 {
		t.Errorf("exp32 edges: %v %v %v", exp32(-100), exp32(100), exp32(0))
	}
	var a arena
	x := a.alloc(10)
	x[3] = 5
	a.reset()
	if y := a.alloc(10); y[3] != 0 {
		t.Error("arena: alloc after reset is not cleared")
	}
}

// TestHostUpdateMatchesGraph applies the same gradients three times (clipped, with weight decay)
// with the host AdamW update and with the update graph, from the same weights, and compares the
// weights, the optimizer state and the gradient norms.
func TestHostUpdateMatchesGraph(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	newTrainer := func() (*Policy, *Trainer) {
		p := MustNewPolicy(agrl.TinyLM().Context(128).Seed(4))
		tr, err := p.NewTrainer("sft", SFTLoss, []string{"mask"}, agrl.NewAdamW().LR(3e-3).WeightDecay(0.1).ClipNorm(0.5), 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.ensureExecs(); err != nil {
			t.Fatal(err)
		}
		return p, tr
	}
	pg, tg := newTrainer()
	ph, th := newTrainer()
	specs := pg.arch.weightSpecs()
	for step := 1; step <= 3; step++ {
		grads := make([][]float32, len(specs))
		args := []any{float32(3e-3)}
		for i, s := range specs {
			n := 1
			for _, d := range s.dims {
				n *= d
			}
			grads[i] = make([]float32, n)
			for j := range grads[i] {
				grads[i][j] = float32(rng.NormFloat64() * 0.01)
			}
			args = append(args, tensors.FromFlatDataAndDimensions(append([]float32(nil), grads[i]...), s.dims...))
		}
		res, err := call(tg.updExec, args...)
		if err != nil {
			t.Fatal(err)
		}
		gnorm := float64(tensors.MustCopyFlatData[float32](res[0])[0])
		hnorm, err := th.hostUpdate(grads, 3e-3)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(gnorm-hnorm) > 1e-5*gnorm {
			t.Errorf("step %d: gradient norm graph %v, host %v", step, gnorm, hnorm)
		}
	}
	if tg.steps() != 3 || th.steps() != 3 {
		t.Errorf("steps: graph %d, host %d", tg.steps(), th.steps())
	}
	gw, hw := weightsOf(t, pg), weightsOf(t, ph)
	worst := 0.0
	for name, g := range gw {
		for j := range g {
			worst = max(worst, math.Abs(float64(g[j]-hw[name][j])))
		}
	}
	if worst > 3e-7 { // rounding only (an ulp of a gain near 1 is 1.2e-7): a step moves a weight by about the learning rate, 3e-3
		t.Errorf("weights after 3 steps differ by up to %.3g", worst)
	}
	for _, s := range specs {
		for _, m := range []string{"m", "v"} {
			a := tensors.MustCopyFlatData[float32](pg.store.GetVariable(tg.statePath(m, s.name)).MustValue())
			b := tensors.MustCopyFlatData[float32](ph.store.GetVariable(th.statePath(m, s.name)).MustValue())
			var scale, diff float64
			for j := range a {
				scale, diff = max(scale, math.Abs(float64(a[j]))), max(diff, math.Abs(float64(a[j]-b[j])))
			}
			if diff > 1e-5*scale { // the clip scale comes from a float32 norm in the graph, a float64 one here
				t.Errorf("%s of %s: max |graph − host| %.3g, max |graph| %.3g", m, s.name, diff, scale)
			}
		}
	}
}

// TestExpSum checks the softmaxes' vector exponential (on AVX-512 builds) against math.Exp,
// with lengths that leave every tail, and that arguments below −87.3 give exactly 0.
func TestExpSum(t *testing.T) {
	for _, n := range []int{1, 5, 16, 17, 40, 203} {
		x := make([]float32, n)
		for j := range x {
			x[j] = -90 + 100*float32(j)/float32(n)
		}
		x[0] = -1e9
		want := make([]float64, n)
		var wsum float64
		for j, v := range x {
			if v-3 >= -87.3 {
				want[j] = math.Exp(float64(v) - 3)
			}
			wsum += want[j]
		}
		sum := expSum(x, 3)
		for j := range x {
			if math.Abs(float64(x[j])-want[j]) > 3e-7*want[j] || (want[j] == 0 && x[j] != 0) {
				t.Fatalf("n %d: e^(x[%d]−3) = %v, want %v", n, j, x[j], want[j])
			}
		}
		if math.Abs(float64(sum)-wsum) > 1e-6*wsum {
			t.Errorf("n %d: sum %v, want %v", n, sum, wsum)
		}
	}
}

// TestRelu checks the vector ReLU and its gradient mask against their definitions.
func TestRelu(t *testing.T) {
	x := make([]float32, 37)
	for i := range x {
		x[i] = float32(i%5) - 2
	}
	u := append([]float32(nil), x...)
	reluRows(u)
	dx := make([]float32, len(x))
	for i := range dx {
		dx[i] = 1
	}
	reluGrad(dx, u)
	for i := range x {
		if u[i] != max(x[i], 0) || (dx[i] == 1) != (x[i] > 0) {
			t.Fatalf("x %v: relu %v, mask %v", x[i], u[i], dx[i])
		}
	}
}

// TestLayerNormRowsInOrder checks the LayerNorm loops, which sum four rows at once, against
// one row at a time: the same bits for every row count and offset (each row's sums keep their
// order).
func TestLayerNormRowsInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 1))
	for _, d := range []int{8, 17, 128} {
		for _, rows := range [][2]int{{0, 1}, {0, 4}, {1, 8}, {3, 12}, {0, 13}} {
			lo, hi := rows[0], rows[1]
			x, dy, g, b := randNormals(rng, hi*d), randNormals(rng, hi*d), randNormals(rng, d), randNormals(rng, d)
			got, want := make([]float32, hi*d), make([]float32, hi*d)
			cg, cw := lnCache{make([]float32, hi*d), make([]float32, hi)}, lnCache{make([]float32, hi*d), make([]float32, hi)}
			layerNormRows(x, got, g, b, d, lo, hi, cg)
			for r := lo; r < hi; r++ { // one row at a time, as a plain loop
				row := x[r*d : (r+1)*d]
				var mean, vs float32
				for _, v := range row {
					mean += v
				}
				mean /= float32(d)
				for _, v := range row {
					vs += (v - mean) * (v - mean)
				}
				rstd := float32(1 / math.Sqrt(float64(vs/float32(d)+lnEps)))
				cw.rstd[r] = rstd
				for j, v := range row {
					cw.xhat[r*d+j] = (v - mean) * rstd
					want[r*d+j] = cw.xhat[r*d+j]*g[j] + b[j]
				}
			}
			bitsEqual(t, fmt.Sprintf("LayerNorm d %d rows %d..%d", d, lo, hi), got, want)
			bitsEqual(t, "x̂", cg.xhat, cw.xhat)
			bitsEqual(t, "rstd", cg.rstd, cw.rstd)
			got, want = randNormals(rng, hi*d), make([]float32, hi*d)
			copy(want, got)
			layerNormBackRows(dy, got, g, d, lo, hi, cw)
			for r := lo; r < hi; r++ {
				xh, dxh := cw.xhat[r*d:(r+1)*d], make([]float32, d)
				var m1, m2 float32
				for j := range d {
					dxh[j] = dy[r*d+j] * g[j]
					m1 += dxh[j]
					m2 += dxh[j] * xh[j]
				}
				m1 /= float32(d)
				m2 /= float32(d)
				for j := range d {
					want[r*d+j] += cw.rstd[r] * (dxh[j] - m1 - xh[j]*m2)
				}
			}
			bitsEqual(t, fmt.Sprintf("LayerNorm backward d %d rows %d..%d", d, lo, hi), got, want)
		}
	}
}

func bitsEqual(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d is %v, want %v", what, i, got[i], want[i])
		}
	}
}

// TestTransposeTiles: the tiled transpose puts every element of [r, c] matrices whose sides are
// and are not multiples of the tile at [j, i], and transposing back gives the matrix.
func TestTransposeTiles(t *testing.T) {
	for _, sh := range [][2]int{{1, 1}, {1, 40}, {40, 1}, {3, 17}, {16, 16}, {17, 33}, {128, 384}, {50, 64}} {
		r, c := sh[0], sh[1]
		x := make([]float32, r*c)
		for k := range x {
			x[k] = float32(k) + 0.5
		}
		xt := transpose(x, r, c)
		for i := range r {
			for j := range c {
				if xt[j*r+i] != x[i*c+j] {
					t.Fatalf("%d×%d: t[%d,%d] = %v, want %v", r, c, j, i, xt[j*r+i], x[i*c+j])
				}
			}
		}
		if back := transpose(xt, c, r); !slices.Equal(back, x) {
			t.Fatalf("%d×%d: transposing back changed the matrix", r, c)
		}
	}
}
