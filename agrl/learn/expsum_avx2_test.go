//go:build amd64 && goexperiment.simd

package learn

import (
	"math"
	"math/rand/v2"
	"simd/archsimd"
	"testing"
)

// expSumAVX2Calls is expSumAVX2 as it was written before its exponential was written out:
// exp8 called per 8 lanes, the two accumulators, the lanes and then the tail summed in order.
func expSumAVX2Calls(x []float32, shift float32) float32 {
	var acc0, acc1 archsimd.Float32x8
	sh := archsimd.BroadcastFloat32x8(shift)
	j := 0
	for ; j+16 <= len(x); j += 16 {
		e0 := exp8(archsimd.LoadFloat32x8Slice(x[j : j+8]).Sub(sh))
		e1 := exp8(archsimd.LoadFloat32x8Slice(x[j+8 : j+16]).Sub(sh))
		e0.StoreSlice(x[j : j+8])
		e1.StoreSlice(x[j+8 : j+16])
		acc0, acc1 = acc0.Add(e0), acc1.Add(e1)
	}
	var lanes [16]float32
	acc0.Store((*[8]float32)(lanes[:8]))
	acc1.Store((*[8]float32)(lanes[8:]))
	var sum float32
	for _, v := range lanes {
		sum += v
	}
	for ; j < len(x); j += 8 {
		rest := x[j:min(j+8, len(x))]
		exp8(archsimd.LoadFloat32x8SlicePart(rest).Sub(sh)).StoreSlicePart(rest)
		for _, v := range rest {
			sum += v
		}
	}
	return sum
}

// TestExpSumAVX2WrittenOut checks expSumAVX2 against expSumAVX2Calls bit for bit (every element
// and the sum) on rows of every length up to 80, with values below the exponential's cut-off,
// near its overflow, infinities and NaNs.
func TestExpSumAVX2WrittenOut(t *testing.T) {
	if !hasAVX2 {
		t.Skip("needs a CPU with AVX2 and FMA")
	}
	rng := rand.New(rand.NewPCG(8, 80))
	special := []float32{-100, -87.3, -87.29, 88.7, 89, float32(math.Inf(-1)), float32(math.Inf(1)), float32(math.NaN()), 0, -0.0}
	for n := 1; n <= 80; n++ {
		for trial := range 4 {
			x := make([]float32, n)
			for j := range x {
				x[j] = float32(rng.NormFloat64() * 6)
				if trial == 3 && rng.IntN(4) == 0 {
					x[j] = special[rng.IntN(len(special))]
				}
			}
			shift := float32(rng.NormFloat64())
			a, b := append([]float32(nil), x...), append([]float32(nil), x...)
			sa, sb := expSumAVX2(a, shift), expSumAVX2Calls(b, shift)
			if math.Float32bits(sa) != math.Float32bits(sb) && !(sa != sa && sb != sb) {
				t.Fatalf("n %d trial %d: sum %v, the calls' %v", n, trial, sa, sb)
			}
			for j := range a {
				if math.Float32bits(a[j]) != math.Float32bits(b[j]) && !(a[j] != a[j] && b[j] != b[j]) {
					t.Fatalf("n %d trial %d: element %d: %v, the calls' %v", n, trial, j, a[j], b[j])
				}
			}
		}
	}
}
