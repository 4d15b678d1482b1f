//go:build amd64 && goexperiment.simd

package learn

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// swiGLUInputs draws n gates, ups and gradients: the gates mostly over the range an MLP sees,
// with a few large ones (the exponential clamped at both ends) and zeros.
func swiGLUInputs(rng *rand.Rand, n int) (gate, up, dAct []float32) {
	gate, up, dAct = make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range gate {
		switch i % 23 {
		case 5:
			gate[i] = float32(rng.NormFloat64() * 60)
		case 11:
			gate[i] = 0
		default:
			gate[i] = float32(rng.NormFloat64() * 3)
		}
		up[i], dAct[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	return gate, up, dAct
}

// TestSwiGLUKernels checks llm.SetSwiGLU's kernels against the activation and its gradient in
// float64 (to float32's rounding, a few units in the last place), the AVX2 path against the
// AVX-512 one bit for bit, and that every element gets the same bits computed alone, in a
// slice of any length or offset (the masked tail) and in place (out = gate).
func TestSwiGLUKernels(t *testing.T) {
	if !hostKernels {
		t.Skip("needs a CPU with AVX-512 or AVX2")
	}
	saved := useAVX2
	defer func() { useAVX2 = saved }()
	rng := rand.New(rand.NewPCG(4, 21))
	const n = 1000
	gate, up, dAct := swiGLUInputs(rng, n)
	run := func() (fwd, dg, du []float32) {
		fwd = make([]float32, n)
		swiGLU(fwd, gate, up)
		dg, du = slices.Clone(gate), slices.Clone(up)
		swiGLUBack(dg, du, dAct)
		return fwd, dg, du
	}
	var paths [][3][]float32
	for _, avx2 := range []bool{false, true} {
		if !avx2 && !hasAVX512 || avx2 && !hasAVX2 {
			continue
		}
		useAVX2 = avx2
		fwd, dg, du := run()
		paths = append(paths, [3][]float32{fwd, dg, du})
		for i, g64 := range gate {
			g, u, d := float64(g64), float64(up[i]), float64(dAct[i])
			s := 1 / (1 + math.Exp(-g))
			// Each result against the float64 one, within 1e-6 of the largest term it sums (5e-7 measured)
			// (g·s·(1 − s) cancels against 1 near g = −1.28).
			for _, c := range []struct {
				name      string
				got       float32
				want, mag float64
			}{
				{"silu(g)·u", fwd[i], g * s * u, math.Abs(g * s * u)},
				{"dgate", dg[i], d * u * s * (1 + g*(1-s)), math.Abs(d*u*s) * (1 + math.Abs(g*(1-s)))},
				{"dup", du[i], d * g * s, math.Abs(d * g * s)},
			} {
				tol := 1e-6 * c.mag
				if g64 < -88 { // the exponent clamped (expArgMax): only tiny, to 10⁻³⁵ a unit of u and d
					tol = 1e-35 * (1 + math.Abs(u)) * (1 + math.Abs(d))
				}
				if math.Abs(float64(c.got)-c.want) > tol+1e-38 {
					t.Fatalf("AVX2 %v: %s at g=%v u=%v d=%v: %v, float64 %v", avx2, c.name, g64, up[i], dAct[i], c.got, c.want)
				}
			}
		}
		// Each element alone, at every offset of a 16-lane block and in slices of every tail.
		for _, span := range [][2]int{{0, 1}, {3, 4}, {17, 18}, {0, 5}, {7, 31}, {16, 33}, {998, 1000}, {1, 1000}} {
			lo, hi := span[0], span[1]
			part := slices.Clone(gate[lo:hi]) // in place: out = gate
			swiGLU(part, part, up[lo:hi])
			pg, pu := slices.Clone(gate[lo:hi]), slices.Clone(up[lo:hi])
			swiGLUBack(pg, pu, dAct[lo:hi])
			for i := range part {
				if math.Float32bits(part[i]) != math.Float32bits(fwd[lo+i]) || math.Float32bits(pg[i]) != math.Float32bits(dg[lo+i]) || math.Float32bits(pu[i]) != math.Float32bits(du[lo+i]) {
					t.Fatalf("AVX2 %v: element %d computed in [%d, %d) differs from the whole slice's", avx2, lo+i, lo, hi)
				}
			}
		}
	}
	if len(paths) == 2 {
		for k, name := range []string{"silu(g)·u", "dgate", "dup"} {
			for i := range n {
				if math.Float32bits(paths[0][k][i]) != math.Float32bits(paths[1][k][i]) {
					t.Fatalf("%s, element %d: AVX-512 %v, AVX2 %v", name, i, paths[0][k][i], paths[1][k][i])
				}
			}
		}
	}
}

// TestSwiGLUKernelsEdges: on each path, a NaN gate gives NaN in its own element only, forward
// and backward, in the vector body and in the masked tail; and a negative gate gives a
// negative silu all the way down to −92, past where exp16 alone would overflow to +Inf
// (−88.38) and the quotient would be −0.
func TestSwiGLUKernelsEdges(t *testing.T) {
	if !hostKernels {
		t.Skip("needs a CPU with AVX-512 or AVX2")
	}
	saved := useAVX2
	defer func() { useAVX2 = saved }()
	for _, avx2 := range []bool{false, true} {
		if !avx2 && !hasAVX512 || avx2 && !hasAVX2 {
			continue
		}
		useAVX2 = avx2
		const n = 37 // two 16-lane blocks (four of 8) and a tail of 5
		for _, at := range []int{3, 20, 35} {
			gate, up, dAct := make([]float32, n), make([]float32, n), make([]float32, n)
			for i := range gate {
				gate[i], up[i], dAct[i] = float32(i%7)-3, 1, 1
			}
			gate[at] = float32(math.NaN())
			out := make([]float32, n)
			swiGLU(out, gate, up)
			dg, du := slices.Clone(gate), slices.Clone(up)
			swiGLUBack(dg, du, dAct)
			for i := range n {
				for _, v := range []float32{out[i], dg[i], du[i]} {
					if math.IsNaN(float64(v)) != (i == at) {
						t.Fatalf("AVX2 %v: NaN gate at %d: element %d is %v (forward %v, dgate %v, dup %v)", avx2, at, i, v, out[i], dg[i], du[i])
					}
				}
			}
		}
		var gate []float32
		for g := -92.0; g < 0; g += 0.25 {
			gate = append(gate, float32(g))
		}
		up := make([]float32, len(gate))
		for i := range up {
			up[i] = 1
		}
		out := make([]float32, len(gate))
		swiGLU(out, gate, up)
		for i, g := range gate {
			if !(out[i] < 0) {
				t.Fatalf("AVX2 %v: silu(%v) = %v, want a negative number", avx2, g, out[i])
			}
		}
	}
}

// BenchmarkSwiGLU times the forward kernel against the portable float64 loop over one layer
// of a 256-token prompt at the SmolLM2-135M shape (intermediate size 1,536).
func BenchmarkSwiGLU(b *testing.B) {
	gate, up, _ := swiGLUInputs(rand.New(rand.NewPCG(1, 1)), 256*1536)
	out := make([]float32, len(gate))
	b.Run("kernel", func(b *testing.B) {
		for b.Loop() {
			swiGLU(out, gate, up)
		}
	})
	b.Run("float64", func(b *testing.B) {
		for b.Loop() {
			for i, g := range gate {
				out[i] = g / (1 + float32(math.Exp(-float64(g)))) * up[i]
			}
		}
	})
}
