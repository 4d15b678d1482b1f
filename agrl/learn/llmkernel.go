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
var transposed sync.Map // weak.Pointer[float32] → []float32 or sharedCopy

func cachedCopy(v any) []float32 {
	if s, ok := v.(sharedCopy); ok {
		return s.wt
	}
	return v.([]float32)
}

func transposedOf(w []float32, out, in int) []float32 {
	first := unsafe.SliceData(w)
	key := weak.Make(first)
	if v, ok := transposed.Load(key); ok {
		if wt := cachedCopy(v); len(wt) == len(w) {
			return wt
		}
		return transpose(w, out, in) // another slice starting at the same element: no caching
	}
	wt := transpose(w, out, in)
	if v, loaded := transposed.LoadOrStore(key, wt); loaded {
		return cachedCopy(v)
	}
	runtime.AddCleanup(first, func(k weak.Pointer[float32]) { transposed.Delete(k) }, key)
	return wt
}

// sharedCopy is a transposed copy that another owner holds: the tensor (a GoMLX store's frozen
// projection, in a shared buffer) is kept reachable for as long as the cache entry lives, so
// its memory is never finalized or reused under the sampler.
type sharedCopy struct {
	wt    []float32
	owner any
}

// shareTransposed makes wt, the [in, out] transpose of w [out, in] that owner holds, the host
// kernel's transposed copy of w: the sampler then reads the same memory as the graphs instead
// of making a copy of its own. It does nothing where the host kernels do not run, when the
// sizes differ, or when w has a copy already.
func shareTransposed(w, wt []float32, owner any) {
	if !hostKernels || len(w) == 0 || len(w) != len(wt) {
		return
	}
	first := unsafe.SliceData(w)
	key := weak.Make(first)
	if _, loaded := transposed.LoadOrStore(key, sharedCopy{wt, owner}); !loaded {
		runtime.AddCleanup(first, func(k weak.Pointer[float32]) { transposed.Delete(k) }, key)
	}
}

// hostLinear is llm.SetLinear's kernel: x [rows, in] times wᵀ (w [out, in]).
func hostLinear(x []float32, rows, in int, w []float32, out int) []float32 {
	wt := transposedOf(w, out, in)
	y := make([]float32, rows*out)
	workers := runtime.GOMAXPROCS(0)
	if rows >= 8*workers {
		gemmRowsSet(workers, rows, out, in, x, in, 1, wt, out, y, out)
	} else { // a few rows (decoding steps, one per sequence): split the outputs over the cores instead
		nw := min(workers, max(1, out/512))
		parallel(nw, func(w, nw int) {
			lo, hi := split(out, w, nw, 16)
			if lo < hi {
				gemmSet(rows, hi-lo, in, x, in, 1, wt[lo:], out, y[lo:], out)
			}
		})
	}
	return y
}
