//go:build !(amd64 && goexperiment.simd)

package learn

// hostKernels reports whether the host trainer's vector kernels run here (see onHost): not in
// this build.
const hostKernels = false

// gemm adds op(A)·B into C (see gemm.go); builds without GOEXPERIMENT=simd use the portable loop.
func gemm(m, n, kk int, a []float32, ai, ak int, b []float32, ldb int, c []float32, ldc int) {
	gemmScalar(m, n, kk, a, ai, ak, b, ldb, c, ldc)
}

// expSum replaces every x[j] by e^(x[j]−shift) and returns their sum.
func expSum(x []float32, shift float32) float32 { return expSumScalar(x, shift) }
