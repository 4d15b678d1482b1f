package learn

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"

	"agrl.dev/agrl"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// The host trainer: on the go backend, a training step's forward and backward passes run as
// plain Go over the model's weights instead of as a GoMLX graph (docs/performance.md, "The
// host trainer and decoder"). The graph version spends two thirds of a step outside its matrix
// products, in generic element-wise, transpose and reduction loops, and pads or packs
// sequences into rows; here every sequence is computed at its own length (no padding, no
// packing, no mask tensors), the products run on register-blocked AVX-512 or AVX2 kernels
// (gemm_simd.go, gemm_avx2.go, gemm_fma_amd64.s), and both cores share every stage. The loss stays a GoMLX graph
// (the trainer's LossFunc, evaluated on the per-token statistics, which also gives its
// gradient with respect to them). The AdamW update runs here too, in place on the store's
// variables, so optimizer state, checkpoints and resume are unchanged. Score takes the same
// forward pass and the Decoder a host KV cache (hostsample.go). It computes exactly the model
// of model.go (TestHostMatchesGraph checks the statistics and the gradients against the
// graph's); where it runs is onHost's choice, everything else uses the graphs.

// hostWeights are the model's weights copied from the store for one step, laid out for the
// host kernels; the transposes the backward pass multiplies by are filled in by transposes.
type hostWeights struct {
	embed, lnfG, lnfB []float32 // [V, d], [d], [d]
	head, headT       []float32 // [d, V], [V, d]
	layers            []hostLayer
}

type hostLayer struct {
	ln1G, ln1B, ln2G, ln2B []float32 // [d]
	qkv, qkvT              []float32 // [d, 3d]: q_w | k_w | v_w side by side; [3d, d]
	out, outT              []float32 // [d, d]
	fc1, fc1T              []float32 // [d, m], [m, d]
	fc2, fc2T              []float32 // [m, d], [d, m]
}

// hostWeightsOf copies the policy's weights out of its store (the caller holds p.mu).
func (p *Policy) hostWeightsOf() (*hostWeights, error) {
	c := p.arch
	d := c.Width
	get := func(name string) ([]float32, error) {
		vr := p.store.GetVariable(model.JoinPath(lmScope, name))
		if vr == nil {
			return nil, fmt.Errorf("agrl: weight %s/%s missing from the store", lmScope, name)
		}
		val, err := vr.Value()
		if err != nil {
			return nil, fmt.Errorf("agrl: weight %s: %w", name, err)
		}
		return tensors.MustCopyFlatData[float32](val), nil
	}
	var firstErr error
	must := func(name string) []float32 {
		x, err := get(name)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return x
	}
	w := &hostWeights{embed: must("embed"), lnfG: must("lnf_g"), lnfB: must("lnf_b"), head: must("head_w")}
	for l := range c.Layers {
		pre := fmt.Sprintf("layer%d/", l)
		q, k, vv := must(pre+"q_w"), must(pre+"k_w"), must(pre+"v_w")
		lw := hostLayer{ln1G: must(pre + "ln1_g"), ln1B: must(pre + "ln1_b"), ln2G: must(pre + "ln2_g"), ln2B: must(pre + "ln2_b"),
			out: must(pre + "out_w"), fc1: must(pre + "fc1_w"), fc2: must(pre + "fc2_w")}
		if firstErr != nil {
			return nil, firstErr
		}
		lw.qkv = make([]float32, d*3*d)
		for i := range d {
			copy(lw.qkv[i*3*d:], q[i*d:(i+1)*d])
			copy(lw.qkv[i*3*d+d:], k[i*d:(i+1)*d])
			copy(lw.qkv[i*3*d+2*d:], vv[i*d:(i+1)*d])
		}
		w.layers = append(w.layers, lw)
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return w, nil
}

// transposes fills in the transposed weights the backward pass multiplies by (scoring and
// sampling never need them), one matrix at a time on each of workers.
func (w *hostWeights) transposes(c arch, workers int) {
	d, m, v := c.Width, c.MLP, c.Vocab()
	type job struct {
		dst        *[]float32
		src        []float32
		rows, cols int
	}
	jobs := []job{{&w.headT, w.head, d, v}}
	for l := range w.layers {
		lw := &w.layers[l]
		jobs = append(jobs, job{&lw.qkvT, lw.qkv, d, 3 * d}, job{&lw.outT, lw.out, d, d},
			job{&lw.fc1T, lw.fc1, d, m}, job{&lw.fc2T, lw.fc2, m, d})
	}
	eachChunk(workers, len(jobs), func(_, i int) {
		j := jobs[i]
		*j.dst = transpose(j.src, j.rows, j.cols)
	})
}

// hostPass is one forward pass over a batch of sequences, kept for its backward pass. Row r of
// every [n, ·] matrix is one input position: sequence s's positions 0 … len-2 (its last token
// is only a target) are rows off[s] … off[s]+len-2.
type hostPass struct {
	c       arch
	w       *hostWeights
	ar      *arena
	workers int
	invT    float32
	seqs    [][]int32
	off     []int
	n       int
	pos     []int32 // [n] each row's position in its sequence
	targets []int32 // [n] each row's next token
	layers  []hostActs
	hf      []float32 // [n, d] final LayerNorm output
	lnf     lnCache
	lp, p   []float32 // [n, V] log-probabilities and probabilities
	// Per position: log-probability of the target, entropy, 1 if the target is the most likely.
	logp, ent, top1 []float32
}

type lnCache struct{ xhat, rstd []float32 }

type hostActs struct {
	ln1, ln2 lnCache
	h1, h2   []float32   // [n, d] LayerNorm outputs
	qkv      []float32   // [n, 3d] queries (scaled) and keys after RoPE, values
	probs    [][]float32 // [seq·H + head] attention probabilities [L, L] (zero above the diagonal)
	o        []float32   // [n, d] attention outputs, heads side by side
	u        []float32   // [n, m] ReLU outputs
}

// ropeHostCache keeps ropeHost's tables by context and head width.
var ropeHostCache sync.Map // [2]int -> [2][]float32

// ropeHost returns RoPE's cos and sin tables [context, hd] (column i and i+hd/2 rotate
// together by angle pos·θ^(−2i/hd)), for the host code and the graph's ropeTables alike
// (computed once per shape; callers must not change them).
func (c arch) ropeHost() (cos, sin []float32) {
	key := [2]int{c.Context, c.Width / c.Heads}
	if t, ok := ropeHostCache.Load(key); ok {
		tabs := t.([2][]float32)
		return tabs[0], tabs[1]
	}
	cos, sin = c.ropeCompute()
	ropeHostCache.Store(key, [2][]float32{cos, sin})
	return cos, sin
}

func (c arch) ropeCompute() (cos, sin []float32) {
	hd := c.Width / c.Heads
	half := hd / 2
	cos, sin = make([]float32, c.Context*hd), make([]float32, c.Context*hd)
	for p := range c.Context {
		for i := range half {
			a := float64(p) * math.Pow(ropeBase, -2*float64(i)/float64(hd))
			cos[p*hd+i], cos[p*hd+i+half] = float32(math.Cos(a)), float32(math.Cos(a))
			sin[p*hd+i], sin[p*hd+i+half] = float32(math.Sin(a)), float32(math.Sin(a))
		}
	}
	return cos, sin
}

// ropeRows rotates the hd-wide blocks at column col of rows lo..hi of x (row length ld) by
// their positions (pos[r]); inverse rotates by minus the angle (the backward pass).
func ropeRows(x []float32, ld, col, hd int, pos []int32, cos, sin []float32, lo, hi int, inverse bool) {
	for r := lo; r < hi; r++ {
		p := int(pos[r]) * hd
		ropeRotate(x[r*ld+col:r*ld+col+hd], cos[p:p+hd], sin[p:p+hd], hd/2, inverse)
	}
}

// layerNormRows normalises rows lo..hi of x [·, d] into y with gain g and bias b.
func layerNormRows(x, y, g, b []float32, d, lo, hi int, cache lnCache) {
	r := lo
	for ; r+4 <= hi; r += 4 { // four rows' sums at once: four chains in flight, each in order
		x0, x1, x2, x3 := x[r*d:(r+1)*d], x[(r+1)*d:(r+2)*d], x[(r+2)*d:(r+3)*d], x[(r+3)*d:(r+4)*d]
		x1, x2, x3 = x1[:len(x0)], x2[:len(x0)], x3[:len(x0)]
		var m0, m1, m2, m3 float32
		for j, v := range x0 {
			m0 += v
			m1 += x1[j]
			m2 += x2[j]
			m3 += x3[j]
		}
		m0, m1, m2, m3 = m0/float32(d), m1/float32(d), m2/float32(d), m3/float32(d)
		var v0, v1, v2, v3 float32
		for j, v := range x0 {
			v0 += (v - m0) * (v - m0)
			v1 += (x1[j] - m1) * (x1[j] - m1)
			v2 += (x2[j] - m2) * (x2[j] - m2)
			v3 += (x3[j] - m3) * (x3[j] - m3)
		}
		for k, mv := range [4][2]float32{{m0, v0}, {m1, v1}, {m2, v2}, {m3, v3}} {
			layerNormFinish(x, y, g, b, d, r+k, mv[0], mv[1], cache)
		}
	}
	for ; r < hi; r++ {
		row := x[r*d : (r+1)*d]
		var mean float32
		for _, v := range row {
			mean += v
		}
		mean /= float32(d)
		var vs float32
		for _, v := range row {
			vs += (v - mean) * (v - mean)
		}
		layerNormFinish(x, y, g, b, d, r, mean, vs, cache)
	}
}

// layerNormFinish normalises row r of x into y given its mean and its sum of squared
// deviations vs.
func layerNormFinish(x, y, g, b []float32, d, r int, mean, vs float32, cache lnCache) {
	rstd := float32(1 / math.Sqrt(float64(vs/float32(d)+lnEps)))
	cache.rstd[r] = rstd
	lnApply(x[r*d:(r+1)*d], cache.xhat[r*d:(r+1)*d], y[r*d:(r+1)*d], g, b, mean, rstd)
}

// layerNormBackRows adds LayerNorm's input gradient for rows lo..hi to dx, given the output
// gradient dy: dx += r·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)) with dx̂ = dy·g.
func layerNormBackRows(dy, dx, g []float32, d, lo, hi int, cache lnCache) {
	dxh := make([]float32, 4*d)
	finish := func(r int, dxh []float32, m1, m2 float32) {
		lnBackApply(dx[r*d:(r+1)*d], dxh, cache.xhat[r*d:(r+1)*d], m1/float32(d), m2/float32(d), cache.rstd[r])
	}
	r := lo
	for ; r+4 <= hi; r += 4 { // four rows' sums at once, each in order
		for k := range 4 {
			mulInto(dxh[k*d:(k+1)*d], dy[(r+k)*d:(r+k+1)*d], g[:d])
		}
		d0, d1, d2, d3 := dxh[:d], dxh[d:2*d], dxh[2*d:3*d], dxh[3*d:]
		h0, h1, h2, h3 := cache.xhat[r*d:(r+1)*d], cache.xhat[(r+1)*d:(r+2)*d], cache.xhat[(r+2)*d:(r+3)*d], cache.xhat[(r+3)*d:(r+4)*d]
		d1, d2, d3, h0, h1, h2, h3 = d1[:len(d0)], d2[:len(d0)], d3[:len(d0)], h0[:len(d0)], h1[:len(d0)], h2[:len(d0)], h3[:len(d0)]
		var a0, a1, a2, a3, b0, b1, b2, b3 float32
		for j, v := range d0 {
			a0 += v
			b0 += v * h0[j]
			a1 += d1[j]
			b1 += d1[j] * h1[j]
			a2 += d2[j]
			b2 += d2[j] * h2[j]
			a3 += d3[j]
			b3 += d3[j] * h3[j]
		}
		finish(r, d0, a0, b0)
		finish(r+1, d1, a1, b1)
		finish(r+2, d2, a2, b2)
		finish(r+3, d3, a3, b3)
	}
	for ; r < hi; r++ {
		xh, dr := cache.xhat[r*d:(r+1)*d], dxh[:d]
		mulInto(dr, dy[r*d:(r+1)*d], g[:d])
		var m1, m2 float32
		for j, v := range dr {
			m1 += v
			m2 += v * xh[j]
		}
		finish(r, dr, m1, m2)
	}
}

// gainGrads adds Σ_rows dy·x̂ to dg and Σ_rows dy to db, the columns split over the workers
// (each column's sum runs over the rows in order, whatever the split).
func gainGrads(workers int, dy []float32, cache lnCache, dg, db []float32, n, d int) {
	chunked(workers, d, 16, 16, func(lo, hi int) {
		for r := range n {
			gainAcc(dg[lo:hi], db[lo:hi], dy[r*d+lo:r*d+hi], cache.xhat[r*d+lo:r*d+hi])
		}
	})
}

// attentionInputs computes the first half of a block's input to its attention for n rows:
// h = LN1(x) (cache lnc), qkv = h·[Wq | Wk | Wv], the queries scaled by 1/√hd, queries and keys
// rotated by their positions pos. The trainer's forward pass and the decoder both call it.
func (c arch) attentionInputs(nw, n int, lw *hostLayer, x, h, qkv []float32, lnc lnCache, pos []int32) {
	d, nh := c.Width, c.Heads
	hd := d / nh
	cos, sin := c.ropeHost()
	scale := float32(1 / math.Sqrt(float64(hd)))
	rowsDo(nw, n, func(lo, hi int) { layerNormRows(x, h, lw.ln1G, lw.ln1B, d, lo, hi, lnc) })
	gemmRowsSet(nw, n, 3*d, d, h, d, 1, lw.qkv, 3*d, qkv, 3*d)
	rowsDo(nw, n, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			for j := range d {
				qkv[r*3*d+j] *= scale
			}
		}
		for hh := range nh {
			ropeRows(qkv, 3*d, hh*hd, hd, pos, cos, sin, lo, hi, false)
			ropeRows(qkv, 3*d, d+hh*hd, hd, pos, cos, sin, lo, hi, false)
		}
	})
}

// mlpResidual adds a block's feed-forward half to n rows of x, x += relu(LN2(x)·fc1)·fc2, with
// LN2's output in h (cache lnc) and the ReLU's in u (the backward pass reads both).
func (c arch) mlpResidual(nw, n int, lw *hostLayer, x, h, u []float32, lnc lnCache) {
	d, m := c.Width, c.MLP
	rowsDo(nw, n, func(lo, hi int) { layerNormRows(x, h, lw.ln2G, lw.ln2B, d, lo, hi, lnc) })
	gemmRowsSet(nw, n, m, d, h, d, 1, lw.fc1, m, u, m)
	rowsDo(nw, n, func(lo, hi int) { reluRows(u[lo*m : hi*m]) })
	gemmRows(nw, n, d, m, u, m, 1, lw.fc2, d, x, d)
}

// causalBlock is the number of query (or key) rows per product in the attention: each block
// is computed only up to (or from) the diagonal. It is a whole number of the product kernel's
// row blocks: 16 (2 × 8) for the AVX-512 kernel, 18 (3 × 6) for the AVX2 one, where 16 left
// every block 4 rows in an edge block (BenchmarkWarmStartStep on a Zen 3 core: the
// attention's products 12% of the time of the others with 16, 7.4% with 18). The block does
// not change the bits for finite values: what a larger block adds to a product are exact +0
// terms (P and dS are cleared above the diagonal) at the start or the end of a chain of
// multiply-adds that starts at +0; the one exception, a chain whose sum underflowed to −0
// before a trailing +0 term, would turn into +0 (TestCausalBlockKeepsBits).
// forceCausalBlock, when set, replaces it (tests).
func causalBlock() int {
	if forceCausalBlock > 0 {
		return forceCausalBlock
	}
	rb := gemmRowBlock() // the smallest multiple of the kernel's rows from 16 on: 18 for 6, 16 for 4 and 8
	return (16 + rb - 1) / rb * rb
}

var forceCausalBlock int

// seqOrder lists the sequences longest first, the order the workers take them in for the
// attention (its cost grows as length², so the long ones go first and the short ones fill in
// at the end; see eachChunk).
func seqOrder(seqs [][]int32) []int { return lengthOrder(seqs, -1) }

// lengthOrder is the indices of seqs ordered by length — shortest first for sign 1, longest
// first for -1 — in their order where lengths tie.
func lengthOrder(seqs [][]int32, sign int) []int {
	order := make([]int, len(seqs))
	for s := range order {
		order[s] = s
	}
	slices.SortStableFunc(order, func(a, b int) int { return sign * (len(seqs[a]) - len(seqs[b])) })
	return order
}

// hostForward runs the model over the sequences (each at least 2 tokens, at most the context)
// at inverse temperature invT.
func (c arch) hostForward(ar *arena, w *hostWeights, seqs [][]int32, invT float32, workers int) *hostPass {
	d, m, v, nh := c.Width, c.MLP, c.Vocab(), c.Heads
	hd := d / nh
	ps := &hostPass{c: c, w: w, ar: ar, workers: max(1, workers), invT: invT, seqs: seqs, off: make([]int, len(seqs))}
	for s, seq := range seqs {
		ps.off[s] = ps.n
		ps.n += len(seq) - 1
	}
	n, nw := ps.n, ps.workers
	pos := make([]int32, n)
	f, raw := ar.alloc, ar.raw // raw: buffers written in full before they are read
	x := raw(n * d)
	for s, seq := range seqs {
		for t, tok := range seq[:len(seq)-1] {
			pos[ps.off[s]+t] = int32(t)
			copy(x[(ps.off[s]+t)*d:], w.embed[int(tok)*d:(int(tok)+1)*d])
		}
	}
	order := seqOrder(seqs)
	rows := func(f func(lo, hi int)) { rowsDo(nw, n, f) }
	for l := range w.layers {
		lw := &w.layers[l]
		a := hostActs{ln1: lnCache{raw(n * d), raw(n)}, ln2: lnCache{raw(n * d), raw(n)},
			h1: raw(n * d), h2: raw(n * d), qkv: raw(n * 3 * d), o: raw(n * d), u: raw(n * m), probs: make([][]float32, len(seqs)*nh)}
		for s, seq := range seqs {
			for h := range nh {
				a.probs[s*nh+h] = raw((len(seq) - 1) * (len(seq) - 1))
			}
		}
		kTs := make([][]float32, nw)
		for wk := range nw {
			kTs[wk] = raw(hd * c.Context)
		}
		c.attentionInputs(nw, n, lw, x, a.h1, a.qkv, a.ln1, pos)
		cb := causalBlock()
		eachChunk(nw, len(order), func(wk, i int) {
			s := order[i]
			L, o0 := len(seqs[s])-1, ps.off[s]
			kT := kTs[wk][:hd*L]
			for h := range nh {
				for t := range L {
					for j, kv := range a.qkv[(o0+t)*3*d+d+h*hd : (o0+t)*3*d+d+(h+1)*hd] {
						kT[j*L+t] = kv
					}
				}
				pr := a.probs[s*nh+h]
				q := a.qkv[o0*3*d+h*hd:]
				for i0 := 0; i0 < L; i0 += cb { // the scores at or below the diagonal
					gemmSet(min(cb, L-i0), min(L, i0+cb), hd, q[i0*3*d:], 3*d, 1, kT, L, pr[i0*L:], L)
				}
				for i := range L {
					row := pr[i*L : (i+1)*L]
					scaleBy(row[:i+1], 1/expSum(row[:i+1], maxOf(row[:i+1])))
					clear(row[i+1:])
				}
				for i0 := 0; i0 < L; i0 += cb { // o = P·v over the keys a query sees
					gemmSet(min(cb, L-i0), hd, min(L, i0+cb), pr[i0*L:], L, 1, a.qkv[o0*3*d+2*d+h*hd:], 3*d, a.o[(o0+i0)*d+h*hd:], d)
				}
			}
		})
		gemmRows(nw, n, d, d, a.o, d, 1, lw.out, d, x, d) // the residual: x += o·out
		c.mlpResidual(nw, n, lw, x, a.h2, a.u, a.ln2)
		ps.layers = append(ps.layers, a)
	}
	ps.hf, ps.lnf = raw(n*d), lnCache{raw(n * d), raw(n)}
	rows(func(lo, hi int) { layerNormRows(x, ps.hf, w.lnfG, w.lnfB, d, lo, hi, ps.lnf) })
	ps.lp, ps.p = raw(n*v), raw(n*v)
	gemmRowsSet(nw, n, v, d, ps.hf, d, 1, w.head, v, ps.lp, v)
	ban := bannedMask(v)
	targets := make([]int32, n)
	for s, seq := range seqs {
		copy(targets[ps.off[s]:], seq[1:])
	}
	ps.pos, ps.targets = pos, targets
	ps.logp, ps.ent, ps.top1 = raw(n), raw(n), f(n)
	rows(func(lo, hi int) {
		for r := lo; r < hi; r++ {
			z := ps.lp[r*v : (r+1)*v]
			ps.ent[r] = logSoftmaxRow(z, ban, invT, ps.p[r*v:(r+1)*v])
			lt := z[targets[r]]
			ps.logp[r] = lt
			if lt >= maxOf(z) {
				ps.top1[r] = 1
			}
		}
	})
	return ps
}

// backward returns the gradients of a loss whose derivatives with respect to each position's
// target log-probability and entropy are dlogp and dent ([n] each), in weightSpecs order.
func (ps *hostPass) backward(dlogp, dent []float32) [][]float32 {
	c, w, n, nw := ps.c, ps.w, ps.n, ps.workers
	d, m, v, nh := c.Width, c.MLP, c.Vocab(), c.Heads
	hd := d / nh
	if w.headT == nil {
		w.transposes(c, nw)
	}
	rows := func(f func(lo, hi int)) { rowsDo(nw, n, f) }
	f, raw := ps.ar.alloc, ps.ar.raw
	// Output layer: z = invT·logits + ban, lp = z − logsumexp(z); ∂logp/∂z = onehot − p,
	// ∂H/∂z = −p·(lp + H).
	dlog := raw(n * v)
	targets, pos := ps.targets, ps.pos
	rows(func(lo, hi int) {
		for r := lo; r < hi; r++ {
			lp, pr, dz := ps.lp[r*v:(r+1)*v], ps.p[r*v:(r+1)*v], dlog[r*v:(r+1)*v]
			a, e, ent := dlogp[r], dent[r], ps.ent[r]
			outputGrad(dz, lp, pr, a, e, ent, ps.invT)
			dz[targets[r]] += ps.invT * a
		}
	})
	grads := map[string][]float32{}
	grads["head_w"] = make([]float32, d*v)
	gemmRowsSet(nw, d, v, n, ps.hf, 1, d, dlog, v, grads["head_w"], v)
	dh := raw(n * d)
	gemmRowsSet(nw, n, d, v, dlog, v, 1, w.headT, d, dh, d)
	grads["lnf_g"], grads["lnf_b"] = make([]float32, d), make([]float32, d)
	gainGrads(nw, dh, ps.lnf, grads["lnf_g"], grads["lnf_b"], n, d)
	dx := f(n * d)
	rows(func(lo, hi int) { layerNormBackRows(dh, dx, w.lnfG, d, lo, hi, ps.lnf) })
	cos, sin := c.ropeHost()
	scale := float32(1 / math.Sqrt(float64(hd)))
	order := seqOrder(ps.seqs)
	for l := len(w.layers) - 1; l >= 0; l-- {
		lw, a := &w.layers[l], &ps.layers[l]
		pre := fmt.Sprintf("layer%d/", l)
		// MLP: x += fc2·relu(fc1·LN2(x)).
		dFc2 := make([]float32, m*d)
		gemmRowsSet(nw, m, d, n, a.u, 1, m, dx, d, dFc2, d)
		du := raw(n * m)
		gemmRowsSet(nw, n, m, d, dx, d, 1, lw.fc2T, m, du, m)
		rows(func(lo, hi int) { reluGrad(du[lo*m:hi*m], a.u[lo*m:hi*m]) })
		dFc1 := make([]float32, d*m)
		gemmRowsSet(nw, d, m, n, a.h2, 1, d, du, m, dFc1, m)
		dh2 := raw(n * d)
		gemmRowsSet(nw, n, d, m, du, m, 1, lw.fc1T, d, dh2, d)
		dg2, db2 := make([]float32, d), make([]float32, d)
		gainGrads(nw, dh2, a.ln2, dg2, db2, n, d)
		rows(func(lo, hi int) { layerNormBackRows(dh2, dx, lw.ln2G, d, lo, hi, a.ln2) })
		// Attention: x += out·attention(LN1(x)).
		dOut := make([]float32, d*d)
		gemmRowsSet(nw, d, d, n, a.o, 1, d, dx, d, dOut, d)
		do := raw(n * d)
		gemmRowsSet(nw, n, d, d, dx, d, 1, lw.outT, d, do, d)
		dqkv := raw(n * 3 * d) // every block of every row is stored below
		vTs, dps := make([][]float32, nw), make([][]float32, nw)
		for wk := range nw {
			vTs[wk], dps[wk] = raw(hd*c.Context), raw(c.Context*c.Context)
		}
		cb := causalBlock()
		eachChunk(nw, len(order), func(wk, i int) {
			s := order[i]
			L, o0 := len(ps.seqs[s])-1, ps.off[s]
			vT, dp := vTs[wk][:hd*L], dps[wk][:L*L]
			for h := range nh {
				pr := a.probs[s*nh+h]
				for t := range L {
					for j, vv := range a.qkv[(o0+t)*3*d+2*d+h*hd : (o0+t)*3*d+2*d+(h+1)*hd] {
						vT[j*L+t] = vv
					}
				}
				for i0 := 0; i0 < L; i0 += cb { // dP = dO·vᵀ at or below the diagonal
					gemmSet(min(cb, L-i0), min(L, i0+cb), hd, do[(o0+i0)*d+h*hd:], d, 1, vT, L, dp[i0*L:], L)
				}
				for i := range L { // dS = P⊙(dP − Σ P⊙dP)
					prow, drow := pr[i*L:i*L+i+1], dp[i*L:i*L+i+1]
					var dot float32
					for j, pv := range prow {
						dot += pv * drow[j]
					}
					for j, pv := range prow {
						drow[j] = pv * (drow[j] - dot)
					}
					clear(dp[i*L+i+1 : (i+1)*L])
				}
				// dS and P are zero above the diagonal: query block i0 contracts over keys
				// < i0+block (dq = dS·k), key block j0 over queries >= j0 (dk = dSᵀ·q,
				// dv = Pᵀ·dO); the terms left out are exact zeros.
				for b0 := 0; b0 < L; b0 += cb {
					rb := min(cb, L-b0)
					gemmSet(rb, hd, min(L, b0+cb), dp[b0*L:], L, 1, a.qkv[o0*3*d+d+h*hd:], 3*d, dqkv[(o0+b0)*3*d+h*hd:], 3*d)
					gemmSet(rb, hd, L-b0, dp[b0*L+b0:], 1, L, a.qkv[(o0+b0)*3*d+h*hd:], 3*d, dqkv[(o0+b0)*3*d+d+h*hd:], 3*d)
					gemmSet(rb, hd, L-b0, pr[b0*L+b0:], 1, L, do[(o0+b0)*d+h*hd:], d, dqkv[(o0+b0)*3*d+2*d+h*hd:], 3*d)
				}
			}
		})
		rows(func(lo, hi int) {
			for h := range nh {
				ropeRows(dqkv, 3*d, h*hd, hd, pos, cos, sin, lo, hi, true)
				ropeRows(dqkv, 3*d, d+h*hd, hd, pos, cos, sin, lo, hi, true)
			}
			for r := lo; r < hi; r++ {
				for j := range d {
					dqkv[r*3*d+j] *= scale
				}
			}
		})
		dW := make([]float32, d*3*d)
		gemmRowsSet(nw, d, 3*d, n, a.h1, 1, d, dqkv, 3*d, dW, 3*d)
		dh1 := raw(n * d)
		gemmRowsSet(nw, n, d, 3*d, dqkv, 3*d, 1, lw.qkvT, d, dh1, d)
		dg1, db1 := make([]float32, d), make([]float32, d)
		gainGrads(nw, dh1, a.ln1, dg1, db1, n, d)
		rows(func(lo, hi int) { layerNormBackRows(dh1, dx, lw.ln1G, d, lo, hi, a.ln1) })
		dq, dk, dv := make([]float32, d*d), make([]float32, d*d), make([]float32, d*d)
		for i := range d {
			copy(dq[i*d:], dW[i*3*d:i*3*d+d])
			copy(dk[i*d:], dW[i*3*d+d:i*3*d+2*d])
			copy(dv[i*d:], dW[i*3*d+2*d:i*3*d+3*d])
		}
		grads[pre+"ln1_g"], grads[pre+"ln1_b"], grads[pre+"ln2_g"], grads[pre+"ln2_b"] = dg1, db1, dg2, db2
		grads[pre+"q_w"], grads[pre+"k_w"], grads[pre+"v_w"], grads[pre+"out_w"] = dq, dk, dv, dOut
		grads[pre+"fc1_w"], grads[pre+"fc2_w"] = dFc1, dFc2
	}
	dEmb := make([]float32, v*d)
	for s, seq := range ps.seqs {
		for t, tok := range seq[:len(seq)-1] {
			row, src := dEmb[int(tok)*d:(int(tok)+1)*d], dx[(ps.off[s]+t)*d:]
			for j := range row {
				row[j] += src[j]
			}
		}
	}
	grads["embed"] = dEmb
	specs := c.weightSpecs()
	out := make([][]float32, len(specs))
	for i, s := range specs {
		out[i] = grads[s.name]
	}
	return out
}

// workers is the number of concurrent parts of a batch: on the host path every core's
// (GOMAXPROCS), unless LM.Shards says otherwise — the host code's results do not depend on it
// (TestHostStepSameOnAnyWorkers, TestHostDecoderSameOnAnyShards); on the graph path shards().
func (p *Policy) workers() int {
	if p.onHost() && p.arch.Shards == 0 {
		return max(1, runtime.GOMAXPROCS(0))
	}
	return p.shards()
}

// onHost reports whether the policy's training steps and scoring take the host path: on the
// go backend with RoPE positions (the host code has no learned position table), where the
// host kernels are vectorised (hostKernels: a GOEXPERIMENT=simd build on a CPU with AVX-512 or
// AVX2 and FMA; the portable loops elsewhere are slower than the backend's own kernels).
// AGRL_HOST=0 keeps the graphs everywhere, AGRL_HOST=1 takes the host path even with the
// portable loops. Sampling takes it too (the host decoder, hostsample.go, over a KV cache in
// host memory); the graph path's sampler agrees with the host scorer's log-probs to float
// rounding (TestSamplerScorerAgreement).
func (p *Policy) onHost() bool {
	return p.backend.String() == "go" && p.arch.Positions == agrl.RoPE && !p.graphOnly && (hostKernels || p.hostAlways)
}

// hostLossGraph evaluates the trainer's loss on per-token statistics computed on the host,
// laid out as one row [1, N] (padding positions have Valid 0 and every value 0; a LossFunc
// adds up over tokens, so the layout does not change it). Inputs: log-probs, entropies, top-1,
// valid, then one [1, N] per value name and one scalar sum per value name. Outputs: loss,
// metrics, ∂loss/∂log-probs and ∂loss/∂entropies.
func (t *Trainer) hostLossGraph(_ *model.Scope, in []*graph.Node) []*graph.Node {
	nv := len(t.values)
	li := LossInputs{LogProbs: in[0], Entropy: in[1], Top1: in[2], Valid: in[3], Values: map[string]*graph.Node{}, Sums: map[string]*graph.Node{}}
	for i, name := range t.values {
		li.Values[name] = in[4+i]
		li.Sums[name] = in[4+nv+i]
	}
	loss, metrics := t.lossAndMetrics(li)
	out := append([]*graph.Node{loss}, metrics...)
	return append(out, graph.Gradient(loss, in[0], in[1])...)
}

// hostBucket rounds a token count up to the loss graph's next compiled length.
func hostBucket(n int) int { return (n + 255) / 256 * 256 }

// hostGrads computes a batch's loss, metrics and weight gradients on the host (the caller holds
// p.mu). The gradients are in weightSpecs order, as the update graph takes them.
func (t *Trainer) hostGrads(b TrainBatch) (agrl.StepStats, [][]float32, error) {
	p := t.p
	if t.hostExec == nil {
		var err error
		if t.hostExec, err = p.newExec("train-host-loss", t.hostLossGraph); err != nil {
			return agrl.StepStats{}, nil, err
		}
	}
	w, err := p.hostWeightsOf()
	if err != nil {
		return agrl.StepStats{}, nil, err
	}
	t.arena.reset()
	ps := p.arch.hostForward(&t.arena, w, b.Tokens, t.invT, t.shards)
	width := hostBucket(ps.n)
	row := func(x []float32) *tensors.Tensor {
		r := make([]float32, width)
		copy(r, x)
		return tensors.FromFlatDataAndDimensions(r, 1, width)
	}
	valid := make([]float32, ps.n)
	for s, seq := range b.Tokens {
		for j, tok := range seq[1:] {
			if tok != agrl.PAD && tok != agrl.BOS { // as the graph's Valid
				valid[ps.off[s]+j] = 1
			}
		}
	}
	args := []any{row(ps.logp), row(ps.ent), row(ps.top1), row(valid)}
	sums := make([]any, len(t.values))
	for k, name := range t.values {
		vals := make([]float32, ps.n)
		var sum float32
		for s, vs := range b.Values[name] {
			copy(vals[ps.off[s]:], vs[1:])
			for _, v := range vs[1:] {
				sum += v
			}
		}
		args = append(args, row(vals))
		sums[k] = sum
	}
	outs, err := call(t.hostExec, append(args, sums...)...)
	if err != nil {
		return agrl.StepStats{}, nil, err
	}
	st := t.stats([][]*tensors.Tensor{outs[:1+len(t.metrics)]})
	nm := 1 + len(t.metrics)
	dlogp, dent := tensors.MustCopyFlatData[float32](outs[nm]), tensors.MustCopyFlatData[float32](outs[nm+1])
	_, _ = outs[nm].FinalizeAll(), outs[nm+1].FinalizeAll()
	return st, ps.backward(dlogp[:ps.n], dent[:ps.n]), nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// hostUpdate applies the AdamW step of updateGraph on the host, in place on the store's
// tensors (which invalidates their on-device copies), and returns the global gradient norm
// before clipping. The caller holds p.mu. Same arithmetic as updateGraph (hostAdamW).
func (t *Trainer) hostUpdate(grads [][]float32, lr float64) (float64, error) {
	p, o := t.p, t.opt.Spec()
	specs := p.arch.weightSpecs()
	targets := make([]adamTarget, len(specs))
	for i, s := range specs {
		wv := p.store.GetVariable(model.JoinPath(lmScope, s.name))
		mv, vv := p.store.GetVariable(t.statePath("m", s.name)), p.store.GetVariable(t.statePath("v", s.name))
		if wv == nil || mv == nil || vv == nil {
			return 0, fmt.Errorf("agrl: weight or optimizer state of %s missing", s.name)
		}
		targets[i] = adamTarget{name: s.name, w: wv, m: mv, v: vv, decay: decays(s.name)}
	}
	return hostAdamW(o, p.store.GetVariable(t.statePath("step")), t.statePath("step"), targets, grads, lr, t.shards)
}

// adamTarget is one trainable tensor of a host AdamW step: the weight, its two moments, and
// whether the optimizer's weight decay (if any) applies to it.
type adamTarget struct {
	name    string
	w, m, v *model.Variable
	decay   bool
}

// hostAdamW is updateGraph's AdamW step on the host, in place on the targets' weights and
// moments and on the step counter stepVar (its path stepPath, for errors): float32
// arithmetic, the norm's sum of squares in float64, each tensor split over workers. It
// returns the global norm of grads (one slice per target) before clipping; a norm that is not
// finite is returned with nothing updated, the counter included (the caller reports it).
func hostAdamW(o agrl.AdamWSpec, stepVar *model.Variable, stepPath string, targets []adamTarget, grads [][]float32, lr float64, workers int) (float64, error) {
	var sumSq float64
	for _, g := range grads {
		for _, x := range g {
			sumSq += float64(x) * float64(x)
		}
	}
	norm := math.Sqrt(sumSq)
	if !finite(norm) {
		return norm, nil // not applied: Step reports it
	}
	scale := float32(1)
	if o.ClipNorm > 0 {
		scale = min(1, float32(o.ClipNorm)/(float32(norm)+1e-6))
	}
	if stepVar == nil {
		return 0, fmt.Errorf("agrl: optimizer state %s missing", stepPath)
	}
	var step float32
	if err := mutate(stepVar, func(s []float32) { s[0]++; step = s[0] }); err != nil {
		return 0, err
	}
	b1, b2 := float32(o.Beta1), float32(o.Beta2)
	corr1 := 1 - float32(math.Pow(o.Beta1, float64(step)))
	corr2 := 1 - float32(math.Pow(o.Beta2, float64(step)))
	sq2 := float32(math.Sqrt(float64(corr2)))
	stepSize, epsHat := float32(lr)*sq2/corr1, float32(o.Eps)*sq2
	decay := float32(lr * o.WeightDecay)
	for i, tg := range targets {
		g, wd := grads[i], float32(0)
		if tg.decay {
			wd = decay
		}
		err := mutate(tg.w, func(w []float32) {
			_ = mutate(tg.m, func(m []float32) {
				_ = mutate(tg.v, func(v []float32) {
					chunked(workers, len(w), 16, 1<<13, func(lo, hi int) {
						adamWUpdate(w[lo:hi], m[lo:hi], v[lo:hi], g[lo:hi], scale, b1, b2, stepSize, epsHat, wd)
					})
				})
			})
		})
		if err != nil {
			return 0, fmt.Errorf("agrl: updating %s: %w", tg.name, err)
		}
	}
	return norm, nil
}

// mutate runs f on the flat float32 data of a variable's value, in place.
func mutate(v *model.Variable, f func([]float32)) error {
	val, err := v.Value()
	if err != nil {
		return err
	}
	return tensors.MutableFlatData[float32](val, f)
}

// hostScore is Score on the host: the same forward pass as a training step's, so that a
// reference policy scored here and the trained policy agree exactly where their weights do
// (the KL penalty is exactly 0 before the first update).
func (p *Policy) hostScore(seqs [][]int32, temperature float64) ([]TokenScores, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	w, err := p.hostWeightsOf()
	if err != nil {
		return nil, err
	}
	var ar arena
	ps := p.arch.hostForward(&ar, w, seqs, invTemperature(temperature), p.workers())
	out := make([]TokenScores, len(seqs))
	for s, seq := range seqs {
		lo, hi := ps.off[s], ps.off[s]+len(seq)-1
		out[s] = TokenScores{LogProbs: slices.Clone(ps.logp[lo:hi]), Entropy: slices.Clone(ps.ent[lo:hi])}
	}
	return out, nil
}
