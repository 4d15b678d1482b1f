package learn

import (
	"fmt"
	"testing"
)

// BenchmarkGemm times the host kernels on the Tiny model's training shapes and one of a
// pretrained model's (GFLOP/s).
func BenchmarkGemm(b *testing.B) {
	for _, sh := range []struct {
		name     string
		m, n, kk int
		trans    bool
	}{
		{"qkv", 1280, 384, 128, false}, {"fc1", 1280, 512, 128, false}, {"fc2", 1280, 128, 512, false},
		{"dW_fc1", 128, 512, 1280, true}, {"dW_qkv", 128, 384, 1280, true}, {"scores", 40, 40, 32, false},
		// a pretrained projection's input gradient over a 256-token sequence's 255 positions
		// (SmolLM2-135M: (t·dyᵀ)ᵀ, trace.go's projBack): 31 columns past the last 32-wide
		// block; and padded to 256 with a zero column, as projBack now gives it (paddedWidth)
		{"dx_255", 576, 255, 576, false}, {"dx_256", 576, 256, 576, false},
		// the SmolLM2-135M MLP over 256 positions: gate (or up) forward, x·t with t [576, 1536];
		// down forward, [1536, 576]; gate's input gradient, t·dyᵀ with dyᵀ [1536, 256]: B
		// larger than a core's L2 cache
		{"gate_fwd", 256, 1536, 576, false}, {"down_fwd", 256, 576, 1536, false}, {"gate_dx", 576, 256, 1536, false},
	} {
		b.Run(fmt.Sprintf("%s_%dx%dx%d", sh.name, sh.m, sh.n, sh.kk), func(b *testing.B) {
			a, bb, c := make([]float32, sh.m*sh.kk), make([]float32, sh.kk*sh.n), make([]float32, sh.m*sh.n)
			for i := range a {
				a[i] = float32(i%7) * 0.1
			}
			ai, ak := sh.kk, 1
			if sh.trans {
				ai, ak = 1, sh.m
			}
			for range b.N {
				gemm(sh.m, sh.n, sh.kk, a, ai, ak, bb, sh.n, c, sh.n)
			}
			b.ReportMetric(2*float64(sh.m*sh.n*sh.kk)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

var expSumSink float32

// BenchmarkExpSum times expSum on rows of the attention's typical lengths (a softmax row of a
// calc episode is 1–80 long) and of the Tiny vocabulary (64).
func BenchmarkExpSum(b *testing.B) {
	for _, n := range []int{7, 22, 43, 64} {
		src := make([]float32, n)
		for j := range src {
			src[j] = float32(j%13) * -0.1
		}
		x := make([]float32, n)
		b.Run(fmt.Sprintf("n%d", n), func(b *testing.B) {
			for range b.N {
				copy(x, src)
				expSumSink += expSum(x, 0.5)
			}
		})
	}
}

// BenchmarkGemmStream times the products of decoding steps at the SmolLM2-135M shape's
// projections, with the weights read from memory as a step reads them: it cycles through 48
// distinct weight matrices (more than the caches hold), so every call streams its B once. GB/s
// is B's bytes over the time (the weights dominate the traffic). "gemm" is one core's kernels
// (8 rows: a group's sequences; 1, 2 and 4: one sequence, and what is left of a batch as its
// episodes end); "decode" is productTInto, the decoding step's product over the cores.
func BenchmarkGemmStream(b *testing.B) {
	for _, sh := range []struct {
		name     string
		m, n, kk int
	}{
		{"qproj", 8, 576, 576}, {"gate", 8, 1536, 576}, {"down", 8, 576, 1536},
		{"gate", 1, 1536, 576}, {"down", 1, 576, 1536}, {"gate", 2, 1536, 576}, {"gate", 4, 1536, 576},
	} {
		const count = 48
		a, c := make([]float32, 16*sh.kk), make([]float32, 16*sh.n)
		ws := make([][]float32, count)
		for w := range ws {
			ws[w] = make([]float32, sh.kk*sh.n)
			for i := range ws[w] {
				ws[w][i] = float32((i+w)%5) * 0.01
			}
		}
		for i := range a {
			a[i] = float32(i%7) * 0.1
		}
		for _, how := range []string{"gemm", "decode"} {
			b.Run(fmt.Sprintf("%s_%s_%dx%dx%d", how, sh.name, sh.m, sh.n, sh.kk), func(b *testing.B) {
				for i := range b.N {
					if how == "gemm" {
						gemm(sh.m, sh.n, sh.kk, a, sh.kk, 1, ws[i%count], sh.n, c, sh.n)
					} else {
						productTInto(c[:sh.m*sh.n], a[:sh.m*sh.kk], sh.m, sh.kk, ws[i%count], sh.n)
					}
				}
				b.ReportMetric(4*float64(sh.kk*sh.n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}
