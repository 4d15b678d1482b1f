//go:build amd64 && goexperiment.simd

package learn

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"agrl.dev/agrl/llm"
)

// TestSoftmaxKernel: the attention's softmax kernel (llm.SetSoftmax) gives llm.SoftmaxLoop's
// bits at every length around the vectors' blocks and tails, for scores of every size, and
// with NaN or +Inf among them (every result NaN, as in the loop) or −Inf (weight 0); its
// results sum to 1. On the AVX-512 path and, where the CPU has AVX2, on the AVX2 path.
func TestSoftmaxKernel(t *testing.T) {
	if !hostKernels {
		t.Skip("the softmax kernel needs the host kernels (an AVX-512 or AVX2 CPU)")
	}
	for _, avx2 := range []bool{false, true} {
		if avx2 && !hasAVX2 || !avx2 && !hasAVX512 {
			continue
		}
		setAVX2(t, avx2)
		t.Run(map[bool]string{false: "avx512", true: "avx2"}[avx2], testSoftmaxKernel)
	}
}

func testSoftmaxKernel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	same := func(a, b []float32) bool {
		return slices.EqualFunc(a, b, func(x, y float32) bool {
			return math.Float32bits(x) == math.Float32bits(y) || (x != x && y != y)
		})
	}
	for _, n := range []int{1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 64, 100, 700, 1025} {
		for _, spread := range []float64{0.01, 1, 30, 3000} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * spread)
			}
			scale := float32(0.125 + rng.Float64())
			want, got := slices.Clone(x), slices.Clone(x)
			llm.SoftmaxLoop(want, scale)
			softmaxRow(got, scale)
			if !same(got, want) {
				t.Fatalf("length %d, spread %v: the kernel's softmax differs from the loop's", n, spread)
			}
			var sum float64
			for _, v := range got {
				sum += float64(v)
			}
			if math.Abs(sum-1) > 1e-5 {
				t.Fatalf("length %d, spread %v: the weights sum to %v", n, spread, sum)
			}
		}
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
			for _, at := range []int{0, n / 2, n - 1} {
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
				x[at] = bad
				want, got := slices.Clone(x), slices.Clone(x)
				llm.SoftmaxLoop(want, 1)
				softmaxRow(got, 1)
				if !same(got, want) {
					t.Fatalf("length %d, %v at %d: the kernel gives %v, the loop %v", n, bad, at, got, want)
				}
				for i, v := range got {
					if bad < 0 && n > 1 {
						if (i == at) != (v == 0) {
							t.Fatalf("length %d, −Inf at %d: weight %d is %v", n, at, i, v)
						}
						continue
					}
					if v == v && n > 1 {
						t.Fatalf("length %d, %v at %d: weight %d is %v, not NaN", n, bad, at, i, v)
					}
				}
			}
		}
	}
}
