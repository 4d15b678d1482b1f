package agent

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestExpSumsKernelPrefixes: expSums hands a row to an installed kernel and takes back
// whatever prefix it chose, the loop doing the next elements and the kernel being asked
// again, the sums running on from one to the other. A fake kernel that follows the loop's
// arithmetic but stops after a pseudo-random count (0 included, past the row's end never)
// gives the loop's bits for every row length and stopping pattern, and is called.
func TestExpSumsKernelPrefixes(t *testing.T) {
	defer SetExpSums(expSumsKernel)
	rng := rand.New(rand.NewPCG(9, 10))
	calls := 0
	fake := func(z []float32, invT, mx, sum, sd float64) (int, float64, float64) {
		calls++
		n := min(rng.IntN(11), len(z)) // 0–10 elements
		for _, v := range z[:n] {
			d := float64(float64(v)*invT) - mx
			e := math.Exp(d)
			sum += e
			if e != 0 {
				sd += e * d
			}
		}
		return n, sum, sd
	}
	for n := range 60 {
		z := make([]float32, n)
		for j := range z {
			z[j] = float32(rng.NormFloat64() * 5)
			if rng.IntN(9) == 0 {
				z[j] = float32(math.Inf(-1))
			}
		}
		for _, invT := range []float64{1, 1 / 0.7} {
			mx := 0.0
			if n > 0 {
				var err error
				if mx, err = scaledMax(z, invT); err != nil {
					continue // every logit −∞
				}
			}
			SetExpSums(nil)
			wantSum, wantSD := expSums(z, invT, mx)
			SetExpSums(fake)
			for range 5 {
				sum, sd := expSums(z, invT, mx)
				if math.Float64bits(sum) != math.Float64bits(wantSum) || math.Float64bits(sd) != math.Float64bits(wantSD) {
					t.Fatalf("n %d, 1/T %v: Σe %v Σe·d %v with the kernel, %v %v without", n, invT, sum, sd, wantSum, wantSD)
				}
			}
		}
	}
	if calls == 0 {
		t.Error("the kernel was never called")
	}
}
