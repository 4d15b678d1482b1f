//go:build amd64 && goexperiment.simd

package learn

import (
	"math/rand/v2"
	"testing"
)

// TestAVX2MatchesAVX512 runs the AVX2 kernels (as on a CPU without AVX-512) and the AVX-512
// ones on the same inputs and requires the same bits: products in every layout and tail,
// expSum, the ReLUs, and two whole training steps.
func TestAVX2MatchesAVX512(t *testing.T) {
	if !hasAVX512 || !hasAVX2 {
		t.Skip("needs a CPU with both AVX-512 and AVX2")
	}
	defer func() { useAVX2 = false }()
	both := func(f func() []float32) (avx512, avx2 []float32) {
		useAVX2 = false
		avx512 = f()
		useAVX2 = true
		avx2 = f()
		useAVX2 = false
		return
	}
	same := func(what string, x, y []float32) {
		t.Helper()
		for i := range x {
			if x[i] != y[i] {
				t.Fatalf("%s: element %d: AVX-512 %v, AVX2 %v", what, i, x[i], y[i])
			}
		}
	}
	rng := rand.New(rand.NewPCG(9, 9))
	fill := func(n int) []float32 { return randNormals(rng, n) }
	for _, sh := range [][3]int{{1, 1, 1}, {5, 37, 3}, {9, 33, 17}, {64, 211, 300}, {7, 8, 2}, {3, 23, 40}} {
		m, n, kk := sh[0], sh[1], sh[2]
		a, b, c := fill(m*kk), fill(kk*n), fill(m*n)
		for _, load := range []bool{true, false} {
			for _, trans := range []bool{false, true} {
				ai, ak := kk, 1
				if trans {
					ai, ak = 1, m
				}
				x, y := both(func() []float32 {
					out := append([]float32(nil), c...)
					gemmK(m, n, kk, a, ai, ak, b, n, out, n, load)
					return out
				})
				same("gemm", x, y)
			}
		}
	}
	for _, n := range []int{1, 7, 8, 15, 16, 17, 40, 203} {
		src := fill(n)
		x, y := both(func() []float32 {
			v := append([]float32(nil), src...)
			return append(v, expSum(v, 0.5))
		})
		same("expSum", x, y)
		x, y = both(func() []float32 {
			v := append([]float32(nil), src...)
			reluRows(v)
			g := fill(0)
			g = append(g, src...)
			reluGrad(g, v)
			return append(v, g...)
		})
		same("relu", x, y)
	}
	useAVX2 = false
	w512 := twoHostSteps(t, 2)
	useAVX2 = true
	w2 := twoHostSteps(t, 2)
	useAVX2 = false
	if d := maxDiff(w512, w2); d != 0 {
		t.Errorf("weights after two steps: AVX2 differs from AVX-512 by %g", d)
	}
}
