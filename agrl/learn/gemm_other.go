//go:build !(amd64 && goexperiment.simd)

package learn

// hostKernels reports whether the host trainer's vector kernels run here (see onHost): not in
// this build.
const hostKernels = false

// gemmK adds op(A)·B into C, or stores it with load false (see gemm.go); builds without
// GOEXPERIMENT=simd use the portable loop.
func gemmK(m, n, kk int, a []float32, ai, ak int, b []float32, ldb int, c []float32, ldc int, load bool) {
	gemmScalar(m, n, kk, a, ai, ak, b, ldb, c, ldc, load)
}

// panels is B copied as 16-column panels (gemm_avx2.go); this build never copies it.
type panels struct{}

func packPanels(workers, m, n, kk int, b []float32, ldb int) (panels, *[]float32) {
	return panels{}, nil
}

func releasePanels(*[]float32) {}

// packBlocks returns the blocks B is copied in (gemm_avx2.go): none in this build.
func packBlocks(m, n, kk int) (kc, nc int) { return 0, 0 }

func gemmKP(m, n, kk int, a []float32, ai, ak int, b []float32, ldb int, _ panels, c []float32, ldc int, load bool) {
	gemmScalar(m, n, kk, a, ai, ak, b, ldb, c, ldc, load)
}

// expSum replaces every x[j] by e^(x[j]−shift) and returns their sum.
func expSum(x []float32, shift float32) float32 { return expSumScalar(x, shift) }

// reluRows replaces x by max(x, 0); reluGrad zeroes dx where the ReLU output u is not positive.
func reluRows(x []float32) { reluScalar(x) }

func reluGrad(dx, u []float32) { reluGradScalar(dx, u) }

// gemmRowBlock is the row block gemmRows aligns its pieces to.
func gemmRowBlock() int { return 4 }

// dotRows sets y[r·ldy + j] to the dot product of row r of x [rows, in] and row j of w [n, in]
// (headkernel.go).
func dotRows(x []float32, rows, in int, w []float32, n int, y []float32, ldy int) {
	dotRowsScalar(x, rows, in, w, n, y, ldy)
}

// kernelSet names the kernels of this build (see Kernels): the portable loops.
func kernelSet() string { return "portable" }
