package learn

import (
	"fmt"
	"testing"
)

// BenchmarkGemm times the host kernels on the Tiny model's training shapes (GFLOP/s).
func BenchmarkGemm(b *testing.B) {
	for _, sh := range []struct {
		name     string
		m, n, kk int
		trans    bool
	}{
		{"qkv", 1280, 384, 128, false}, {"fc1", 1280, 512, 128, false}, {"fc2", 1280, 128, 512, false},
		{"dW_fc1", 128, 512, 1280, true}, {"dW_qkv", 128, 384, 1280, true}, {"scores", 40, 40, 32, false},
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
