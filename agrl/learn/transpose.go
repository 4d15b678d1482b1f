package learn

// Transposes for the host kernels: the weights the Tiny trainer's backward pass reads
// transposed, and the pretrained models' backward products (llm.SetTranspose), which go
// through a transpose where a weight is stored in the other layout. transposeBlock runs the
// AVX-512 tile kernel where there is one (transpose_simd.go) and llm.TransposeTiles, the
// portable loop, otherwise; both move the same values, and an adding transpose does the one
// float32 addition an element either way, so the results are the same bits.

// transposeWorkers is transposeBlock with the rows of dst (the columns of src) split over
// workers, in multiples of 16, where the matrix is large enough to pay for the goroutines.
func transposeWorkers(workers int, dst []float32, ldd int, src []float32, r, c, lds int, add bool) {
	if r*c < 1<<16 {
		workers = 1
	}
	chunked(workers, c, 16, 64, func(lo, hi int) {
		transposeBlock(dst[lo*ldd:], ldd, src[lo:], r, hi-lo, lds, add)
	})
}

// transpose returns the [c, r] transpose of the row-major [r, c] matrix x (one thread).
func transpose(x []float32, r, c int) []float32 {
	t := make([]float32, r*c)
	transposeBlock(t, r, x, r, c, c, false)
	return t
}
