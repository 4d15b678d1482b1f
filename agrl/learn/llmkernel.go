package learn

import (
	"math"
	"runtime"
	"sync"
	"unsafe"
	"weak"

	"agrl.dev/agrl/llm"
)

// The pretrained models' host forward pass (agrl/llm: the sampler of PretrainedPolicy) runs its
// matrix products on the host trainer's vector kernels where they run (GOEXPERIMENT=simd builds
// on AVX-512 or AVX2 CPUs): y = x·wᵀ becomes gemm over a transposed copy of w, [in, out], so
// that the kernels' 16-wide vectors run along the outputs — for a whole prompt (rows = its
// tokens) and for one decoding step alike. The copies are made on first use and dropped when
// the model's weights are collected. A projection the model holds transposed already
// (llm.Model.Share: a GoMLX store's [in, out] variable) is multiplied as it is, by the same
// product, so sharing changes no bit. The LM head has a kernel of its own that reads it in
// place, with no copy (headNT, headkernel.go). Measured in docs/llm.md ("Speed").
func init() {
	if hostKernels {
		llm.SetLinear(hostLinear)
		llm.SetLinearT(productTInto)
		llm.SetProduct(hostProduct)
		llm.SetAttention(hostAttend)
		llm.SetHead(headNT)
		llm.SetMul(hostMul)
		llm.SetTranspose(hostTranspose)
		llm.SetExpSum(expSum)
	} // llm.SetSwiGLU's kernels install themselves (swiglu_simd.go)
}

// hostTranspose is llm.SetTranspose's kernel: transposeBlock over the cores.
func hostTranspose(dst []float32, ldd int, src []float32, r, c, lds int, add bool) {
	transposeWorkers(runtime.GOMAXPROCS(0), dst, ldd, src, r, c, lds, add)
}

// hostMul is llm.SetMul's kernel (the LoRA backward pass, pretrained_host.go): C (+)= op(A)·B
// on the gemm kernels, the rows over the cores, or for a few rows the columns.
func hostMul(m, n, k int, a []float32, ai, ak int, b []float32, ldb int, c []float32, ldc int, add bool) {
	workers := runtime.GOMAXPROCS(0)
	if m >= 8*workers || n < 64*workers {
		gemmRowsK(workers, m, n, k, a, ai, ak, b, ldb, c, ldc, add)
		return
	}
	chunked(workers, n, 16, 64, func(lo, hi int) {
		gemmK(m, hi-lo, k, a, ai, ak, b[lo:], ldb, c[lo:], ldc, add)
	})
}

// transposed maps a weight (its first element, weakly) to its transposed copy.
var transposed sync.Map // weak.Pointer[float32] → []float32

func transposedOf(w []float32, out, in int) []float32 {
	first := unsafe.SliceData(w)
	key := weak.Make(first)
	if v, ok := transposed.Load(key); ok {
		if wt := v.([]float32); len(wt) == len(w) {
			return wt
		}
		return transpose(w, out, in) // another slice starting at the same element: no caching
	}
	wt := transpose(w, out, in)
	if v, loaded := transposed.LoadOrStore(key, wt); loaded {
		return v.([]float32)
	}
	runtime.AddCleanup(first, func(k weak.Pointer[float32]) { transposed.Delete(k) }, key)
	return wt
}

// hostLinear is llm.SetLinear's kernel: x [rows, in] times wᵀ (w [out, in]).
func hostLinear(x []float32, rows, in int, w []float32, out int) []float32 {
	return productT(x, rows, in, transposedOf(w, out, in), out)
}

// hostProduct is llm.SetProduct's kernel: hostLinear for a w that may change (a LoRA
// adapter's), transposed afresh at every call (into a buffer of llm.Floats' pool) and kept
// nowhere.
func hostProduct(y, x []float32, rows, in int, w []float32, out int) {
	wt := llm.Floats(out * in)
	transposeBlock(wt, out, w, out, in, in, false)
	productTInto(y, x, rows, in, wt, out)
	llm.PutFloats(wt)
}

// productT is x [rows, in] times wt [in, out], over the cores: by rows for many rows, by
// outputs for a few (each element one chain of multiply-adds either way).
func productT(x []float32, rows, in int, wt []float32, out int) []float32 {
	y := make([]float32, rows*out)
	productTInto(y, x, rows, in, wt, out)
	return y
}

// productTInto is productT into y (llm.SetLinearT's kernel), every element written.
func productTInto(y, x []float32, rows, in int, wt []float32, out int) {
	workers := runtime.GOMAXPROCS(0)
	if rows >= 8*workers {
		gemmRowsSet(workers, rows, out, in, x, in, 1, wt, out, y, out)
	} else { // a few rows (decoding steps, one per sequence): split the outputs over the cores instead
		chunked(workers, out, 16, 512, func(lo, hi int) {
			gemmSet(rows, hi-lo, in, x, in, 1, wt[lo:], out, y[lo:], out)
		})
	}
}

// hostAttend is llm.SetAttention's kernel: causal grouped-query attention as matrix products
// on the host kernels, over the keys as the cache holds them, transposed (kt: key-value head
// kh's are [D, n] at kt[kh·D·ldk:], rows ldk apart, n = start+T positions). A decoding step
// (T = 1) takes the query heads that share a key-value head together, as the rows of one
// product: their queries lie side by side in q, and their results in out. A longer call goes
// head by head in tiles of query rows, so that the scores take at most attnTile values
// whatever the prompt's length. Either way a row's scores are S = q·Kᵀ·(1/√D) over the
// positions it sees (in a tile, those its last row sees: one product), each row's visible
// positions go through the vector exp (expSum) and are divided by their sum, the rest weigh
// 0, and the result is S·V (one product over the values as the cache holds them). Each
// element is one chain of multiply-adds whatever the rows beside it, so the grouping and the
// tiles change no bit. Each call computes from its own arguments only, single-threaded except
// that the heads of a long prompt, or of a step over a long cache, are spread over the cores
// (attnSpread); its scratch comes from a pool.
func hostAttend(out, q, kt []float32, ldk int, values []float32, start, T, nq, nkv, D int) {
	n := start + T
	kvw, group := nkv*D, nq/nkv
	scale := float32(1 / math.Sqrt(float64(D)))
	// A decoding step (T = 1): the group's heads are the rows [group, D] of q and of out.
	decode := func(kh int, s []float32) {
		gemmSet(group, n, D, q[kh*group*D:], D, 1, kt[kh*D*ldk:], ldk, s, n)
		for g := range group {
			llm.Softmax(s[g*n:(g+1)*n], scale)
		}
		gemmSet(group, D, n, s, n, 1, values[kh*D:], kvw, out[kh*group*D:], D)
	}
	tile := max(1, min(T, attnTile/n))
	head := func(kh int, s []float32) {
		for g := range group {
			hd := kh*group + g
			for t0 := 0; t0 < T; t0 += tile {
				t1 := min(T, t0+tile)
				w := start + t1 // the positions the tile's last row sees
				gemmSet(t1-t0, w, D, q[t0*nq*D+hd*D:], nq*D, 1, kt[kh*D*ldk:], ldk, s, w)
				for t := t0; t < t1; t++ {
					row := s[(t-t0)*w : (t-t0+1)*w]
					llm.Softmax(row[:start+t+1], scale) // its exponentials by expSum (init installs it)
					clear(row[start+t+1:])
				}
				gemmSet(t1-t0, D, w, s, w, 1, values[kh*D:], kvw, out[t0*nq*D+hd*D:], nq*D)
			}
		}
	}
	workers := 1
	if T*n*D*nq >= attnSpread { // a prompt, or a step over a long cache: its heads over the cores
		workers = min(nkv, runtime.GOMAXPROCS(0))
	}
	parallel(workers, func(w, nw int) {
		rows := tile
		if T == 1 {
			rows = group
		}
		s := scratch(rows * n)
		defer attnScratch.Put(s)
		for kh := w; kh < nkv; kh += nw {
			if T == 1 {
				decode(kh, *s)
			} else {
				head(kh, *s)
			}
		}
	})
}

// attnTile is the most scores one tile of hostAttend holds (4 MB); tests lower it.
var attnTile = 1 << 20

// attnSpread is the work (query rows × positions × head_dim × heads) from which hostAttend
// spreads a call's key-value heads over the cores; tests lower it.
var attnSpread = 1 << 22

// attnScratch holds hostAttend's buffers between calls.
var attnScratch sync.Pool

// scratch returns a pooled buffer of n float32s (its values are overwritten before use).
func scratch(n int) *[]float32 {
	if b, ok := attnScratch.Get().(*[]float32); ok && cap(*b) >= n {
		*b = (*b)[:n]
		return b
	}
	b := make([]float32, n)
	return &b
}
