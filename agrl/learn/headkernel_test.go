package learn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestHeadNT: the head kernel's logits against float64 dot products, each row's the same bits
// whatever the other rows and the split over the cores, on shapes with and without a tail past
// the last 16-wide block and with row and column counts off the kernels' blocks: fewer than 8
// rows with 1, 2 or 3 head rows past the last 4, 8 or more with rows past the last 8 and an
// odd head, none with a whole 16-wide block.
func TestHeadNT(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range [][3]int{{1, 1, 16}, {1, 5, 7}, {3, 9, 64}, {2, 37, 100}, {5, 1030, 96}, {8, 517, 576}, {11, 23, 48}, {17, 6, 33}, {16, 64, 1024},
		{2, 7, 40}, {6, 6, 32}, {9, 3, 7}, {10, 5, 35}, {40, 9, 64}} {
		rows, out, in := c[0], c[1], c[2]
		x, w := randNormals(rng, rows*in), randNormals(rng, out*in)
		y := headNT(x, rows, in, w, out)
		for r := range rows {
			alone := headNT(x[r*in:(r+1)*in], 1, in, w, out)
			for j := range out {
				var want, mag float64
				for k := range in {
					p := float64(x[r*in+k]) * float64(w[j*in+k])
					want += p
					mag += math.Abs(p)
				}
				got := y[r*out+j]
				if d := math.Abs(float64(got) - want); d > 1e-6*mag+1e-30 {
					t.Fatalf("%v: logit [%d, %d] = %v, want %v (|Δ| %.3g, Σ|x·w| %.3g)", c, r, j, got, want, d, mag)
				}
				if alone[j] != got {
					t.Fatalf("%v: row %d alone gives %v at %d, in the batch %v", c, r, alone[j], j, got)
				}
			}
		}
		prev := runtime.GOMAXPROCS(1)
		one := headNT(x, rows, in, w, out)
		runtime.GOMAXPROCS(prev)
		for i := range y {
			if one[i] != y[i] {
				t.Fatalf("%v: element %d: one core %v, all %v", c, i, one[i], y[i])
			}
		}
	}
}

func BenchmarkHeadNT(b *testing.B) {
	for _, s := range []struct {
		name    string
		in, out int
	}{{"smollm2", 576, 49152}, {"qwen3", 1024, 151936}} {
		rng := rand.New(rand.NewPCG(1, 1))
		w := randNormals(rng, s.in*s.out)
		for _, rows := range []int{1, 8, 16, 64} {
			x := randNormals(rng, rows*s.in)
			b.Run(fmt.Sprintf("%s/rows%d/transposed", s.name, rows), func(b *testing.B) {
				hostLinear(x, rows, s.in, w, s.out) // the copy, made once
				b.ResetTimer()
				for range b.N {
					hostLinear(x, rows, s.in, w, s.out)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/op")
			})
			b.Run(fmt.Sprintf("%s/rows%d/nt", s.name, rows), func(b *testing.B) {
				for range b.N {
					headNT(x, rows, s.in, w, s.out)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/op")
			})
		}
	}
}
