package learn

import (
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
// the model's weights are collected. Measured in docs/llm.md ("Speed").
func init() {
	if hostKernels {
		llm.SetLinear(hostLinear)
	}
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
	wt := transposedOf(w, out, in)
	y := make([]float32, rows*out)
	if rows >= 8 {
		gemmRowsSet(runtime.GOMAXPROCS(0), rows, out, in, x, in, 1, wt, out, y, out)
	} else { // a decoding step: split the outputs over the cores instead
		nw := min(runtime.GOMAXPROCS(0), max(1, out/512))
		parallel(nw, func(w, nw int) {
			lo, hi := split(out, w, nw, 16)
			if lo < hi {
				gemmSet(rows, hi-lo, in, x, in, 1, wt[lo:], out, y[lo:], out)
			}
		})
	}
	return y
}
