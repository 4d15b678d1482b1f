//go:build amd64 && goexperiment.simd

package learn

import (
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
