//go:build amd64 && goexperiment.simd

package learn

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestHeadNTAVX2MatchesAVX512: the head kernel gives the same bits on both kinds of machine
// (headkernel.go's order), over the AVX-512 kernels' every block and tail.
func TestHeadNTAVX2MatchesAVX512(t *testing.T) {
	if !hasAVX512 || !hasAVX2 {
		t.Skip("needs a CPU with both AVX-512 and AVX2")
	}
	saved := useAVX2
	defer func() { useAVX2 = saved }()
	rng := rand.New(rand.NewPCG(5, 6))
	for _, c := range [][3]int{{1, 9, 16}, {3, 7, 40}, {7, 11, 576}, {8, 5, 64}, {13, 10, 100}, {24, 33, 7}} {
		rows, out, in := c[0], c[1], c[2]
		x, w := randNormals(rng, rows*in), randNormals(rng, out*in)
		useAVX2 = false
		a := headNT(x, rows, in, w, out)
		useAVX2 = true
		b := headNT(x, rows, in, w, out)
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%v: element %d: AVX-512 %v, AVX2 %v", c, i, a[i], b[i])
			}
		}
	}
}

// TestHeadAVX2KernelMatchesGo: dot4x3AVX2's blocks give the bits of the Go AVX2 loop, with
// rows of every remainder mod 4, rows of w of every remainder mod 3 (in the first block of
// headBlockCols and in later ones) and hidden sizes below 16 and with tails of 1, 2, 7, 8
// and 15, into a y with a row step wider than n whose gaps stay untouched; and one block
// straight from the kernel, so that the comparison cannot pass by never running it.
func TestHeadAVX2KernelMatchesGo(t *testing.T) {
	if !hasAVX2 {
		t.Skip("needs a CPU with AVX2")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, in := range []int{16, 576, 37} {
		x, w := randNormals(rng, 4*in), randNormals(rng, 3*in)
		const ldy = 5
		got, want := make([]float32, 4*ldy), make([]float32, 4*ldy)
		var lo [12][8]float32
		dot4x3AVX2(in/16, at(x, 0), in, at(w, 0), in, at(got, 0), ldy, &lo)
		dotRowsAVX2Go(x, 4, in, w, 3, want, ldy)
		for i := range got {
			if i%ldy < 3 && in%16 == 0 && got[i] != want[i] || i%ldy >= 3 && got[i] != 0 {
				t.Fatalf("in %d: dot4x3AVX2's element %d: %v, Go %v", in, i, got[i], want[i])
			}
		}
	}
	for _, rows := range []int{4, 5, 6, 7, 8, 10, 13} {
		for _, n := range []int{1, 2, 3, 4, 47, 48, 49, 50, 51, 99, 100, 145} {
			for _, in := range []int{7, 16, 17, 31, 40, 50, 576} {
				x, w := randNormals(rng, rows*in), randNormals(rng, n*in)
				ldy := n + 3
				a, b := make([]float32, rows*ldy), make([]float32, rows*ldy)
				for i := range a {
					a[i], b[i] = float32(math.NaN()), float32(math.NaN())
				}
				dotRowsAVX2(x, rows, in, w, n, a, ldy)
				dotRowsAVX2Go(x, rows, in, w, n, b, ldy)
				for i := range a {
					if i%ldy >= n {
						if !math.IsNaN(float64(a[i])) {
							t.Fatalf("rows %d n %d in %d: element %d past a row's end written", rows, n, in, i)
						}
						continue
					}
					if a[i] != b[i] {
						t.Fatalf("rows %d n %d in %d: element %d (row %d, column %d): kernel %v, Go %v", rows, n, in, i, i/ldy, i%ldy, a[i], b[i])
					}
				}
			}
		}
	}
}
